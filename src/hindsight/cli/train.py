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
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class MethodEntry:
    module: str
    config: str
    train: str


METHODS = {
    "sft": MethodEntry("hindsight.methods.sft", "SFTConfig", "train_sft"),
    "grpo": MethodEntry("hindsight.methods.grpo", "GRPOConfig", "train_grpo"),
    "echo": MethodEntry("hindsight.methods.echo", "ECHOConfig", "train_echo"),
    "critic-sft": MethodEntry("hindsight.methods.critic_sft", "CriticSFTConfig", "train_critic_sft"),
    "cso": MethodEntry("hindsight.methods.cso", "CSOConfig", "train_cso"),
    "eto": MethodEntry("hindsight.methods.eto", "ETOConfig", "train_eto"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser("train", help="train a model (sft, grpo, echo, critic-sft, cso, eto)", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", choices=sorted(METHODS))
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

    entry = METHODS[args.method]
    module = importlib.import_module(entry.module)
    config_cls = getattr(module, entry.config)
    train = getattr(module, entry.train)
    if args.show_config:
        print(describe(config_cls))
        return 0
    if args.resume:
        if args.config or args.overrides or args.out:
            raise CLIError("--resume takes the run's own config; drop --config/--set/--out")
        from pathlib import Path

        if not (Path(args.resume) / "config.yaml").is_file():
            raise CLIError(f"{args.resume} is not a run directory (no config.yaml)")
        path = run_guarded(train, None, args.resume, resume=True)
    else:
        if not args.out:
            raise CLIError("--out DIR is required for a new run")
        try:
            config = load_config(config_cls, args.config, args.overrides)
        except ConfigError as exc:
            raise CLIError(str(exc)) from None
        path = run_guarded(train, config, args.out)
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
