"""The `hindsight` command.

Each sub-command lives in its own module under `hindsight.cli` and exposes
`register(subparsers)`; modules are imported only to build the parser, and heavy
libraries (torch, transformers) are imported only inside the command that runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import warnings

from hindsight import __version__

COMMAND_MODULES = ("demo", "envs", "serve_env", "eval", "train", "echo", "echo_analyze", "export_adapter", "diagnose",
                   "report", "sweep", "bench", "outcomes")

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


#: Deprecation notices that libraries we call raise about their own use of other libraries,
#: which no user of a command can act on: (category, start of the message, module that warns).
#: Warnings that Hindsight's own calls cause are fixed where they arise, never listed here.
THIRD_PARTY_NOISE: tuple[tuple[type[Warning], str, str], ...] = (
    # peft's PeftModel reads transformers' deprecated `is_gradient_checkpointing` when it wraps a
    # model (adapter merges, LoRA training).
    (FutureWarning, "`is_gradient_checkpointing` is deprecated", "transformers.modeling_utils"),
    # TRL's DPOConfig defaults `gradient_checkpointing` to True under its old name, and its
    # DPOTrainer switches checkpointing off and on around the reference pass by the old names
    # (`hindsight train cso` and `eto`).
    (FutureWarning, "`gradient_checkpointing` is deprecated", "transformers.training_args"),
    (FutureWarning, "`gradient_checkpointing_enable` is deprecated", "transformers.modeling_utils"),
    (FutureWarning, "`gradient_checkpointing_disable` is deprecated", "transformers.modeling_utils"),
)


def quiet_third_party_warnings() -> None:
    """Hide THIRD_PARTY_NOISE in this process and in the Python processes it starts.

    The entries also go into PYTHONWARNINGS, whose syntax matches the same message prefix and
    module, so that worker processes (data-parallel ranks, Ray actors) stay as quiet.
    """
    entries = [entry for entry in os.environ.get("PYTHONWARNINGS", "").split(",") if entry]
    for category, message, module in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=re.escape(message), category=category,
                                module=re.escape(module) + r"\Z")
        entry = f"ignore:{message}:{category.__name__}:{module}"
        if entry not in entries:
            entries.append(entry)
    os.environ["PYTHONWARNINGS"] = ",".join(entries)


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
    for command in subparsers.choices.values():
        command.set_defaults(command_parser=command)  # for errors found after parsing (main)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_third_party_warnings()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Reported by the command's own parser, whose usage line shows what it does take
        # (`hindsight train grpo runs/x` needs `--out runs/x`), not by the top-level one.
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
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
    except OSError as exc:  # after BrokenPipeError, one of its kind
        # A path the user gave that cannot be made or written (an --out under a file, a missing
        # or read-only folder) fails wherever the command first touches it: one line names it.
        # An OSError with no file name (a socket, a full disk mid-write) is not the user's to fix
        # from a path, and keeps its traceback.
        if exc.filename is None:
            raise
        print(f"hindsight: error: cannot use {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    # Run through the imported module so that CLIError raised by sub-commands (which import
    # hindsight.cli.main) is the same class that main() catches.
    from hindsight.cli import main as _cli

    sys.exit(_cli.main())
