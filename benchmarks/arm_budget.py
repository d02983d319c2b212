"""Does an arm fit its time limit? A projection from one timed update and one timed evaluation.

    python benchmarks/arm_budget.py RUN [RUN ...] --eval EVAL_DIR --recipe METHOD:RECIPE [--limit-hours 2.5]
    python benchmarks/arm_budget.py RUN [RUN ...] --eval EVAL_DIR [--updates 20] [--test-tasks 300]
        [--validation-tasks 250] [--limit-hours 2.5]

Each RUN is a short training run of the arm's recipe (one update or a few, no final test) on
the machine and the cores the arms will use. Its seconds per update run from the config written
when it started to its last update's metrics row, so they include loading the model once; the
projection is a little above the truth, never below. EVAL_DIR is a finished greedy evaluation of
the same policy on the same environment (a `hindsight eval` folder), whose wall time per task
prices the arm's final test and the validation tasks it evaluates while it trains (with
`eval_every`, at step 0 and every `eval_every` updates). `--recipe` reads those counts from the
arms' recipe, read as its method reads it (defaults included), so the script that runs the arms
and this check cannot disagree; the explicit options override it. A comparison plan written before its arms (docs/results.md,
issue 47) checks that every arm fits before any arm runs, and changes the plan, the same for
every arm, when one does not.

Prints one line per run and exits with status 1 when any run's projection is over the limit,
so a script stops before it starts arms that cannot finish.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from run_times import updates_and_wall
from tables import report_skipped

from hindsight.configs import ConfigError, load_config
from hindsight.logs import read_metrics
from hindsight.methods.registry import load_training_methods
from hindsight.registry import UnknownName


@dataclass(frozen=True)
class Projection:
    """One arm's projected wall time: its updates at the timed rate plus its evaluations."""

    run: str
    updates_timed: int
    seconds_per_update: float
    test_seconds: float  # the final test and the evaluations during training
    updates: int

    @property
    def hours(self) -> float:
        return (self.updates * self.seconds_per_update + self.test_seconds) / 3600.0


def trained_updates(run: Path) -> int:
    """How many of a run's updates trained a sequence (logged `policy/sequences`, `critic/sequences`)."""
    return sum(1 for row in read_metrics(run, report_skipped) if any(k.endswith("/sequences") and not k.startswith("data/") and v
                                                      for k, v in row.items()))


def seconds_per_update(run: Path) -> tuple[int, float]:
    """(updates timed, wall seconds per update) of a short training run.

    Refused when none of the timed updates trained anything: where every group's rewards were
    equal, `drop_zero_variance` leaves no sequence, the update costs nothing, and the projection
    would leave out the cost of every update that does train.
    """
    if not (run / "config.yaml").exists():
        raise ValueError(f"{run} is not a training run (no config.yaml)")
    updates, wall = updates_and_wall(run)  # the run has no final test, so its last row is its last update
    if updates < 1:
        raise ValueError(f"{run} has no finished update to time")
    if not trained_updates(run):
        raise ValueError(f"none of {run}'s {updates} timed update(s) trained a sequence (every group's rewards "
                         "were equal), so its time leaves out the update itself; time more updates "
                         "(e.g. --set updates=3)")
    return updates, wall / updates


def seconds_per_task(evaluation: Path) -> float:
    """Wall seconds per task of a finished `hindsight eval` folder."""
    path = evaluation / "summary.json"
    if not path.exists():
        raise ValueError(f"{evaluation} has no summary.json: not a finished evaluation")
    summary = json.loads(path.read_text())
    if summary.get("interrupted") or not summary.get("episodes") or not summary.get("wall_s"):
        raise ValueError(f"{evaluation} is not a finished evaluation with a wall time")
    return float(summary["wall_s"]) / int(summary["episodes"])


@dataclass(frozen=True)
class ArmPlan:
    """What a full arm runs beside its updates: the counts a recipe sets."""

    updates: int
    test_tasks: int  # the final evaluation's tasks (0 when final_eval_split is empty)
    validation_tasks: int  # the evaluations while it trains: at step 0 and every eval_every updates


def arm_plan(config: object) -> ArmPlan:
    """The counts of a method's config: `updates`, its final evaluation and its validation evaluations."""
    updates = getattr(config, "updates", None)
    if not isinstance(updates, int):
        raise ValueError(f"{type(config).__name__} has no `updates`: arm_budget times update-based methods only")
    every = config.eval_every  # type: ignore[attr-defined]
    validation = (updates // every + 1) * config.eval_episodes if every else 0  # type: ignore[attr-defined]
    test = config.final_eval_episodes if config.final_eval_split else 0  # type: ignore[attr-defined]
    return ArmPlan(updates, test, validation)


def read_recipe(spec: str) -> ArmPlan:
    """`METHOD:PATH`: the recipe at PATH as `hindsight train METHOD` reads it."""
    method, sep, path = spec.partition(":")
    if not sep or not method or not path:
        raise ValueError(f"--recipe takes METHOD:PATH (e.g. echo:recipes/echo-frozenlake.yaml), not {spec!r}")
    try:
        return arm_plan(load_config(load_training_methods().get(method).config, path))
    except (ConfigError, UnknownName) as error:
        raise ValueError(str(error)) from None


def project(run: Path, per_task: float, updates: int, evaluated_tasks: int) -> Projection:
    """The arm of `run`'s recipe at `updates` updates, evaluating `evaluated_tasks` tasks in all."""
    timed, per_update = seconds_per_update(run)
    return Projection(run.name, timed, per_update, per_task * evaluated_tasks, updates)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="short training runs of the arms' recipes")
    parser.add_argument("--eval", type=Path, required=True, help="a finished greedy evaluation of the start")
    parser.add_argument("--recipe", metavar="METHOD:PATH",
                        help="the arms' recipe, whose updates and evaluations are projected")
    parser.add_argument("--updates", type=int, help="updates of a full arm (default: the recipe's, else 20)")
    parser.add_argument("--test-tasks", type=int, help="tasks of an arm's final test (default: the recipe's, else 300)")
    parser.add_argument("--validation-tasks", type=int,
                        help="tasks an arm evaluates while it trains (eval_episodes x evaluations; default: the "
                             "recipe's, else 0)")
    parser.add_argument("--limit-hours", type=float, default=2.5, help="the most one arm may take")
    args = parser.parse_args(argv)
    try:
        plan = read_recipe(args.recipe) if args.recipe else ArmPlan(20, 300, 0)
        updates = plan.updates if args.updates is None else args.updates
        test_tasks = plan.test_tasks if args.test_tasks is None else args.test_tasks
        validation_tasks = plan.validation_tasks if args.validation_tasks is None else args.validation_tasks
        if updates < 1 or test_tasks < 0 or validation_tasks < 0 or args.limit_hours <= 0:
            raise ValueError("--updates must be at least 1, --test-tasks and --validation-tasks at least 0, "
                             "and --limit-hours above 0")
        per_task = seconds_per_task(args.eval)
        projections = [project(run, per_task, updates, test_tasks + validation_tasks) for run in args.runs]
    except ValueError as error:
        parser.error(str(error))
    over = False
    for p in projections:
        fits = p.hours <= args.limit_hours
        over |= not fits
        print(f"{p.run}: {p.seconds_per_update:.0f} s an update (timed over {p.updates_timed}), "
              f"{p.updates} updates and {test_tasks} + {validation_tasks} evaluated tasks "
              f"({p.test_seconds:.0f} s) = "
              f"{p.hours:.2f} h: {'fits' if fits else 'over'} the {args.limit_hours:g} h limit")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
