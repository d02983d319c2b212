"""Which moves the environment refused in kept test runs, by kind, replayed from the repository alone.

    python benchmarks/refusals.py results/learning-graded/start results/learning-graded/grpo-s0 ...

Each kept run (`run.json` plus `outcomes.jsonl`, issue 17) holds every test task's actions. They
are replayed from `reset(task_seed)` as `hindsight outcomes check` does, and every step the
environment refuses is counted by the first line of its feedback, with the names of objects
masked ("You cannot pickup X: your hand already holds X; ..."), so that one kind of mistake is
one row whatever blocks it names. The columns are the runs, in the order given; the last rows
give the refused share of all steps and the failures that ran out of steps. Used for the
graded benchmark's reading of what GRPO learned (docs/results.md, issue 45).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hindsight.envs import EnvError, make
from hindsight.logs.outcomes import OutcomeError, read_run

#: Object names in the built-in environments' feedback: BlocksWorld's blocks (b1, b2, ...).
_NAMES = re.compile(r"\bb\d+\b")


@dataclass
class Refusals:
    """One run's refused steps by kind, out of all its steps."""

    kinds: Counter = field(default_factory=Counter)
    steps: int = 0
    out_of_steps: int = 0  # failures that ran out of steps
    failures: int = 0


def refusal_kind(feedback: str) -> str:
    """A refusal's first line with object names masked."""
    return _NAMES.sub("X", feedback.strip().splitlines()[0] if feedback.strip() else "(no feedback)")


def count_refusals(directory: Path) -> Refusals:
    info, outcomes = read_run(directory)
    env = make(info.env, **info.env_kwargs)
    counted = Refusals()
    try:
        for outcome in outcomes:
            env.reset(outcome.task_seed)
            truncated = False
            for action in outcome.actions:
                observation, _, terminated, truncated, step_info = env.step(action)
                counted.steps += 1
                if not step_info.get("valid", True):
                    counted.kinds[refusal_kind(observation)] += 1
                if terminated or truncated:
                    break
            if not outcome.success:
                counted.failures += 1
                counted.out_of_steps += bool(truncated)
    finally:
        env.close()
    return counted


def table(runs: list[tuple[str, Refusals]]) -> list[str]:
    kinds = Counter()
    for _, counted in runs:
        kinds.update(counted.kinds)
    lines = ["| refused move (feedback, names masked) | " + " | ".join(name for name, _ in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for kind, _ in kinds.most_common():
        lines.append(f"| {kind} | " + " | ".join(str(counted.kinds[kind]) for _, counted in runs) + " |")
    lines.append("| **refused, share of all steps** | " + " | ".join(
        f"{sum(c.kinds.values())} of {c.steps} ({sum(c.kinds.values()) / max(c.steps, 1):.3f})" for _, c in runs) + " |")
    lines.append("| failures that ran out of steps | " + " | ".join(
        f"{c.out_of_steps} of {c.failures}" for _, c in runs) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="kept run folders (run.json and outcomes.jsonl)")
    args = parser.parse_args(argv)
    counted = []
    for run in args.runs:
        try:
            counted.append((run.name, count_refusals(run)))
        except (OutcomeError, EnvError) as exc:
            print(f"refusals: {run}: {exc}", file=sys.stderr)
            return 2
    print("\n".join(table(counted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
