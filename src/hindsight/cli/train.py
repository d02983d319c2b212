"""`hindsight train METHOD`: run a training method from a YAML config.

    hindsight train sft  --config recipes/sft-frozenlake.yaml --out runs/sft
    hindsight train grpo --config recipes/smoke-grpo.yaml --set updates=4 --out runs/grpo
    hindsight train grpo --resume runs/grpo          # every method resumes the same way
    hindsight train critic-sft --config recipes/critic-sft-blocksworld.yaml --out runs/critic-sft
    hindsight train echo --config recipes/smoke-echo.yaml --out runs/echo
    hindsight train grpo --show-config          # every key, its default and meaning
"""

from __future__ import annotations

import argparse


class _HelpWithMethods(argparse.Action):
    """`-h/--help` that lists the registered training methods (loading them only then: they import torch)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from hindsight.methods.registry import load_training_methods

        methods = load_training_methods()
        width = max(map(len, methods.names()))
        parser.epilog = "methods:\n" + "\n".join(f"  {name:<{width}}  {entry.help}" for name, entry in methods.items())
        parser.print_help()
        parser.exit()


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser("train", help="train a model with a training method (`hindsight train --help` "
                                                 "lists them)", description=__doc__, add_help=False,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-h", "--help", action=_HelpWithMethods)
    parser.add_argument("method", metavar="METHOD", help="training method (listed below)")
    parser.add_argument("--config", help="YAML file whose keys are the method's config fields")
    parser.add_argument("--set", dest="overrides", action="append", metavar="KEY=VALUE", help="override a key, repeatable")
    parser.add_argument("--out", help="run directory to create")
    parser.add_argument("--resume", metavar="DIR", help="continue a run from its latest checkpoint")
    parser.add_argument("--show-config", action="store_true", help="list the config keys and exit")
    add_threads_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.cli.main import CLIError
    from hindsight.configs import ConfigError, describe, load_config
    from hindsight.methods.registry import load_training_methods
    from hindsight.registry import UnknownName

    try:
        method = load_training_methods().get(args.method)
    except UnknownName as exc:
        raise CLIError(str(exc)) from None
    if args.show_config:
        print(describe(method.config))
        return 0
    if args.resume:
        if args.config or args.overrides or args.out:
            raise CLIError("--resume takes the run's own config; drop --config/--set/--out")
        from pathlib import Path

        if not (Path(args.resume) / "config.yaml").is_file():
            raise CLIError(f"{args.resume} is not a run directory (no config.yaml)")
        path = run_guarded(method.train, None, args.resume, resume=True)
    else:
        if not args.out:
            raise CLIError("--out DIR is required for a new run")
        try:
            config = load_config(method.config, args.config, args.overrides)
        except ConfigError as exc:
            raise CLIError(str(exc)) from None
        path = run_guarded(method.train, config, args.out)
    print(f"run directory: {path}")
    return 0


def run_guarded(train, *args, **kwargs):
    """Run a training function, turning user mistakes (bad env, model, config) into one line."""
    from hindsight.cli.main import CLIError
    from hindsight.configs import ConfigError
    from hindsight.envs import EnvError
    from hindsight.llm import ModelError

    try:
        return train(*args, **kwargs)
    except (ConfigError, EnvError, ModelError) as exc:
        raise CLIError(str(exc)) from None
