"""The `hindsight` command.

Each sub-command lives in its own module under `hindsight.cli` and exposes
`register(subparsers)`; modules are imported only to build the parser, and heavy
libraries (torch, transformers) are imported only inside the command that runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from hindsight import __version__

COMMAND_MODULES = ("demo", "envs", "serve_env", "eval", "train", "echo", "echo_analyze", "export_adapter", "diagnose",
                   "report", "sweep", "bench")

#: Exit code for user mistakes (unknown env, unknown model, bad arguments).
USAGE_ERROR = 2

#: Default of `--threads` for every command that runs a model.
THREADS_ENV = "HINDSIGHT_THREADS"


class CLIError(Exception):
    """A user mistake: printed as one line, exit code 2."""


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """`--threads N` for a command that runs a model on the CPU."""
    parser.add_argument(
        "--threads", metavar="N",
        help=f"CPU threads for the model (default: ${THREADS_ENV}, else all cores). When several jobs share "
             "the cores, give each its own: 1 thread per job was measured up to ~10x faster than 2 under contention",
    )


def apply_threads(value: str | None) -> None:
    """Set torch's thread count from `--threads` or $HINDSIGHT_THREADS (nothing when neither is given).

    OMP_NUM_THREADS is set too, so worker processes the command starts use as many.
    """
    value = value if value is not None else os.environ.get(THREADS_ENV)
    if value is None or value == "":
        return
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise CLIError(f"--threads (or ${THREADS_ENV}) must be a positive integer, not {value!r}")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
    except ImportError:
        return  # no local model can run; API models do not need threads
    torch.set_num_threads(threads)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hindsight", description="Train and diagnose multi-turn LLM agents.")
    parser.add_argument("--version", action="version", version=f"hindsight {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"hindsight.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"hindsight.cli.{name}":
                continue  # command not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return USAGE_ERROR
    try:
        if "threads" in args:
            apply_threads(args.threads)
        return int(args.run(args) or 0)
    except CLIError as exc:
        print(f"hindsight: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("hindsight: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into a reader that stopped early (`| head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    # Run through the imported module so that CLIError raised by sub-commands (which import
    # hindsight.cli.main) is the same class that main() catches.
    from hindsight.cli import main as _cli

    sys.exit(_cli.main())
