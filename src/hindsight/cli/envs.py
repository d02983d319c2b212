"""`hindsight envs`: list, inspect, audit and export the text environments.

hindsight envs list
hindsight envs show frozenlake --set size=6
hindsight envs check sudoku --set size=9 --seeds 20
hindsight envs export blocksworld --split test -n 100 -o blocks-test.jsonl
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("envs", help="list, show, check and export environments")
    commands = parser.add_subparsers(dest="envs_command", metavar="ACTION")
    parser.set_defaults(run=lambda args: _usage(parser))

    listing = commands.add_parser("list", help="the registered environments and their defaults")
    listing.set_defaults(run=run_list)

    show = commands.add_parser("show", help="description, settings, instruction and a sample observation")
    show.add_argument("env_id", metavar="ID")
    _add_set(show)
    show.add_argument("--seed", type=int, default=0, help="seed of the sample instance (default 0)")
    show.set_defaults(run=run_show)

    check = commands.add_parser("check", help="audit an environment against the contract")
    check.add_argument("env_id", metavar="ID")
    _add_set(check)
    check.add_argument("--seeds", type=int, default=10, help="number of seeds to play (default 10)")
    check.add_argument("--no-hash-seed", action="store_true", help="skip the subprocess PYTHONHASHSEED comparison")
    check.set_defaults(run=run_check)

    export = commands.add_parser("export", help="write a split's instances to a JSONL instance file")
    export.add_argument("env_id", metavar="ID")
    _add_set(export)
    export.add_argument("--split", default="test", help="train, validation or test (default test)")
    export.add_argument("-n", type=int, default=100, help="number of instances (default 100)")
    export.add_argument("--start", type=int, default=0, help="first seed to consider (default 0)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the file")
    export.set_defaults(run=run_export)


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment keyword, e.g. --set size=6 (repeatable)",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    from hindsight.cli.main import USAGE_ERROR

    return USAGE_ERROR


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """KEY=VALUE strings to keywords; values are read as JSON when they parse, else kept as text."""
    from hindsight.cli.main import CLIError

    kwargs: dict[str, Any] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        kwargs[key] = value
    return kwargs


def _make(env_id: str, settings: list[str]):
    from hindsight.cli.main import CLIError
    from hindsight.envs import EnvError, make

    try:
        return make(env_id, **parse_settings(settings))
    except EnvError as exc:
        raise CLIError(str(exc)) from None


def run_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from hindsight.envs import list_envs

    table = Table(title="Hindsight environments")
    table.add_column("id", style="bold")
    table.add_column("description")
    table.add_column("defaults")
    table.add_column("max_steps", justify="right")
    for spec in list_envs():
        defaults = ", ".join(f"{key}={value}" for key, value in spec.defaults.items())
        table.add_row(spec.id, spec.description, defaults, str(spec.max_steps))
    Console().print(table)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    env = _make(args.env_id, args.settings)
    observation, info = env.reset(args.seed)
    console = Console()
    console.print(f"[bold]{env.id}[/bold]: {escape(env.description)}")
    console.print("settings: " + escape(", ".join(f"{k}={v}" for k, v in env.config.items())))
    console.print(f"split of seed {args.seed}: {env.seed_split(args.seed)}")
    console.print("\n[bold]scoring[/bold]\n" + escape(env.criteria))
    console.print("\n[bold]instruction[/bold]\n" + escape(env.instruction))
    console.print(f"\n[bold]observation (seed {args.seed})[/bold]\n" + escape(observation))
    console.print(f"\nstate_key: {escape(info['state_key'])}")
    console.print(f"oracle's first action: {escape(env.oracle_action())}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from hindsight.cli.main import CLIError
    from hindsight.envs import EnvError
    from hindsight.envs.checker import check_env

    if args.seeds < 1:
        raise CLIError("--seeds must be at least 1")
    try:
        report = check_env(
            args.env_id, parse_settings(args.settings), seeds=args.seeds, hash_seed_check=not args.no_hash_seed
        )
    except EnvError as exc:
        raise CLIError(str(exc)) from None
    for note in report.notes:
        print(f"note: {note}")
    for violation in report.violations:
        print(f"violation: {violation}")
    print(report.summary())
    return 0 if report.ok else 1


def run_export(args: argparse.Namespace) -> int:
    from hindsight.cli.main import CLIError
    from hindsight.envs import EnvError
    from hindsight.envs.instances import export_instances

    env = _make(args.env_id, args.settings)
    try:
        path = export_instances(env, args.split, args.n, args.output, start=args.start)
    except EnvError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.n} {args.split} instances of {env.id} to {path}")
    return 0
