"""`hindsight demo`: the bundled SmolLM2 zero-shot beside the agent Hindsight trained from it.

Both models play the same test tasks of the environment the shipped adapter was trained
on, with the prompt it was trained on and greedy decoding. Each evaluation is a run
directory; TIDE diagnoses both and the HTML report shows them side by side:

    OUT/zero-shot/   the base model alone            (trajectories, summary.json)
    OUT/trained/     the base model + the adapter     (trajectories, summary.json)
    OUT/report/index.html

The adapter's `provenance.json` says how it was trained (recipes, commands, commit) and
what it scored; `hindsight demo --adapter NAME` picks another bundled adapter.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

DEFAULT_ADAPTER = "frozenlake3"


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser(
        "demo", help="the bundled model zero-shot vs. the agent trained from it: eval, TIDE, HTML report",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--adapter", default=DEFAULT_ADAPTER, help=f"bundled adapter (default {DEFAULT_ADAPTER})")
    parser.add_argument("--episodes", type=int, default=32, help="test tasks per model (default 32)")
    parser.add_argument("--out", help="output folder (default runs/demo-TIME)")
    add_threads_option(parser)
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class Provenance:
    """What a bundled adapter is and how to evaluate it (its `provenance.json`)."""

    name: str
    base: str
    env: str
    env_kwargs: dict[str, Any]
    system_prompt: str
    memory: str
    max_new_tokens: int
    test_success_rate: float
    test_episodes: int
    commands: tuple[str, ...]
    commit: str

    @classmethod
    def read(cls, name: str) -> Provenance:
        from hindsight.cli.main import CLIError
        from hindsight.llm.adapters import bundled_adapters_dir, list_bundled_adapters

        path = bundled_adapters_dir() / name / "provenance.json"
        if not path.is_file():
            known = ", ".join(list_bundled_adapters()) or "none"
            raise CLIError(f"no bundled adapter {name!r} with a provenance.json; bundled adapters: {known}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            evaluation = data["evaluation"]
            return cls(
                name=name, base=data["base_model"], env=evaluation["env"], env_kwargs=dict(evaluation["env_kwargs"]),
                system_prompt=evaluation["system_prompt"], memory=evaluation["memory"],
                max_new_tokens=int(evaluation["max_new_tokens"]),
                test_success_rate=float(data["measured"]["test_success_rate"]),
                test_episodes=int(data["measured"]["test_episodes"]),
                commands=tuple(data["reproduce"]["commands"]), commit=data["reproduce"]["commit"],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CLIError(f"{path} is not a valid provenance file ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class DemoRow:
    label: str
    model: str
    success_rate: float
    auv: float
    loop_ratio: float
    invalid_rate: float
    mean_steps: float
    wall_s: float
    episodes: int


def run(args: argparse.Namespace) -> int:
    from hindsight.cli.main import CLIError

    if args.episodes < 1:
        raise CLIError("--episodes must be >= 1")
    provenance = Provenance.read(args.adapter)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"runs/demo-{stamp}")
    if out.exists() and any(out.iterdir()):
        raise CLIError(f"{out} is not empty; choose another --out")
    rows, report = run_demo(provenance, args.episodes, out)
    print_table(provenance, rows, report)
    return 0


def run_demo(provenance: Provenance, episodes: int, out: Path) -> tuple[list[DemoRow], Path]:
    """Evaluate the base model and base + adapter on the same tasks, diagnose both, write the report."""
    from hindsight.diagnostics import diagnose_source, discover_runs
    from hindsight.report import write_report

    models = {"zero-shot": provenance.base, "trained": f"{provenance.base}+{provenance.name}"}
    summaries = {label: _evaluate(provenance, model, episodes, out / label) for label, model in models.items()}
    # Every trajectory is kept for the report's viewer: the demo's runs are small, and a report
    # diagnosed with the default keep=0 would show the viewer empty.
    diagnosed = [diagnose_source(source, keep=episodes)
                 for source in discover_runs([out / label for label in models])]
    report = write_report(diagnosed, out / "report", title=f"Hindsight demo: {provenance.env}, zero-shot vs. trained",
                          inputs=[str(out / label) for label in models])
    rows = []
    for (label, model), result in zip(models.items(), diagnosed):
        (diagnosis,) = result.runs
        summary = summaries[label]
        rows.append(DemoRow(label, model, diagnosis.success_rate, diagnosis.auv, diagnosis.loop_ratio,
                            diagnosis.invalid_rate, summary["mean_steps"], summary["wall_s"], summary["episodes"]))
    return rows, report


def _evaluate(provenance: Provenance, model: str, episodes: int, out: Path) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hindsight.agent.evaluate import EvalConfig, run_eval
    from hindsight.cli.main import CLIError
    from hindsight.envs import EnvError
    from hindsight.llm import ModelError

    config = EvalConfig(
        env=provenance.env, model=model, episodes=episodes, env_kwargs=provenance.env_kwargs, split="test",
        memory=provenance.memory, temperature=0.0, max_new_tokens=provenance.max_new_tokens,
        system_prompt=provenance.system_prompt, out=str(out), concurrency=episodes,
    )
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("success {task.fields[successes]}"), TimeElapsedColumn(),
                        console=Console(stderr=True))
    with progress:
        bar = progress.add_task(f"{out.name}: {model}", total=episodes, successes=0, start=False)
        successes = 0

        def advance(trajectory: Any) -> None:
            nonlocal successes
            successes += bool(trajectory.success)
            progress.update(bar, advance=1, successes=successes)

        try:
            run_eval(config, on_start=lambda _: progress.start_task(bar), on_trajectory=advance)
        except (EnvError, ModelError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    return json.loads((out / "summary.json").read_text())


def print_table(provenance: Provenance, rows: list[DemoRow], report: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{provenance.env} {provenance.env_kwargs}, {rows[0].episodes} test tasks, greedy")
    for column in ("agent", "success", "AUV", "loop ratio", "invalid", "mean steps", "wall time"):
        table.add_column(column, justify="left" if column == "agent" else "right", no_wrap=True)
    for row in rows:
        table.add_row(row.label, f"{row.success_rate:.1%}", f"{row.auv:.3f}", f"{row.loop_ratio:.3f}",
                      f"{row.invalid_rate:.1%}", f"{row.mean_steps:.1f}", f"{row.wall_s:.0f} s")
    console = Console()
    console.print(table)
    for row in rows:
        console.print(f"{row.label}: {row.model}", soft_wrap=True, markup=False, highlight=False)
    console.print(f"The trained agent is the LoRA adapter {provenance.name!r} shipped with Hindsight; it scored "
                  f"{provenance.test_success_rate:.0%} on {provenance.test_episodes} test tasks when it was made "
                  f"(commit {provenance.commit[:10]}). Reproduce it with:", soft_wrap=True)
    for command in provenance.commands:
        console.print(f"  {command}", soft_wrap=True, markup=False, highlight=False)
    console.print(f"report: {report}", soft_wrap=True, markup=False, highlight=False)
