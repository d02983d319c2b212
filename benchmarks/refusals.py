"""Which moves the environment refused in kept test runs, by kind, replayed from the repository alone.

    python benchmarks/refusals.py results/learning-graded/start results/learning-graded/grpo-s0 ...
    python benchmarks/refusals.py --train runs/learning-graded/grpo-s1 [--every 5]

Each kept run (`run.json` plus `outcomes.jsonl`, issue 17) holds every test task's actions. They
are replayed from `reset(task_seed)` as `hindsight outcomes check` does, and every step the
environment refuses is counted by the first line of its feedback, with the names of objects
masked ("You cannot pickup X: your hand already holds X; ..."), so that one kind of mistake is
one row whatever blocks it names (and every answer that names no known action is one row). The
columns are the runs, in the order given. The 12 commonest kinds get a row each and the rest
one row together; the last rows give the refused share of all steps and the failures that ran
out of steps. Used for the graded benchmark's reading of what GRPO learned (docs/results.md,
issue 45).

With `--train RUN` it reads a live training run's rollouts instead (`trajectories/train.jsonl`,
which the repository does not keep), with their logged feedback, and the columns are blocks of
`--every` updates: how the refused moves of the sampled episodes changed while it trained.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hindsight.envs import EnvError, make
from hindsight.logs import read_trajectories
from hindsight.logs.outcomes import OutcomeError, read_run

#: Object names in the built-in environments' feedback: BlocksWorld's blocks (b1, b2, ...).
_NAMES = re.compile(r"\bb\d+\b")
#: An answer that names no action the environment knows: its words do not make a kind.
_UNKNOWN = re.compile(r'^".*" is not an action\b.*$')
#: Rows of the table before the rest are summed into one.
TOP = 12


@dataclass
class Refusals:
    """One run's refused steps by kind, out of all its steps."""

    kinds: Counter = field(default_factory=Counter)
    steps: int = 0
    out_of_steps: int = 0  # failures that ran out of steps
    failures: int = 0


def refusal_kind(feedback: str) -> str:
    """A refusal's first line with object names masked; every unknown action is one kind."""
    line = feedback.strip().splitlines()[0] if feedback.strip() else "(no feedback)"
    if _UNKNOWN.match(line):
        return '"…" is not an action (an unknown verb or a malformed name)'
    return _NAMES.sub("X", line)


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


def count_training_refusals(run: Path, every: int) -> list[tuple[str, Refusals]]:
    """A training run's rollouts, by blocks of `every` updates: their refused steps from the logged feedback."""
    log = run / "trajectories" / "train.jsonl"
    if not log.is_file():
        raise ValueError(f"{log} does not exist (a training run's rollouts; kept runs do not have them)")
    blocks: dict[int, Refusals] = {}
    for trajectory in read_trajectories(log):
        update = trajectory.meta.get("update")
        if update is None:
            continue
        counted = blocks.setdefault((int(update) - 1) // every, Refusals())
        for step in trajectory.steps:
            counted.steps += 1
            if not step.valid:
                counted.kinds[refusal_kind(step.feedback)] += 1
        if not trajectory.success:
            counted.failures += 1
            counted.out_of_steps += trajectory.truncated
    if not blocks:
        raise ValueError(f"{log} holds no rollout of an update")
    return [(f"updates {b * every + 1}-{(b + 1) * every}", blocks[b]) for b in sorted(blocks)]


def table(runs: list[tuple[str, Refusals]]) -> list[str]:
    kinds = Counter()
    for _, counted in runs:
        kinds.update(counted.kinds)
    lines = ["| refused move (feedback, names masked) | " + " | ".join(name for name, _ in runs) + " |",
             "|---|" + "---|" * len(runs)]
    ranked = [kind for kind, _ in kinds.most_common()]
    for kind in ranked[:TOP]:
        lines.append(f"| {kind} | " + " | ".join(str(counted.kinds[kind]) for _, counted in runs) + " |")
    if ranked[TOP:]:
        rest = len(ranked) - TOP
        lines.append(f"| {rest} other kind{'s' if rest > 1 else ''} | " + " | ".join(
            str(sum(counted.kinds[kind] for kind in ranked[TOP:])) for _, counted in runs) + " |")
    lines.append("| **refused, share of all steps** | " + " | ".join(
        f"{sum(c.kinds.values())} of {c.steps} ({sum(c.kinds.values()) / max(c.steps, 1):.3f})" for _, c in runs) + " |")
    lines.append("| failures that ran out of steps | " + " | ".join(
        f"{c.out_of_steps} of {c.failures}" for _, c in runs) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="kept run folders (run.json and outcomes.jsonl)")
    parser.add_argument("--train", action="store_true", help="RUNS are live training runs: count their rollouts")
    parser.add_argument("--every", type=int, default=5, help="updates per column with --train (default 5)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error("--every must be at least 1")
    if args.train:
        try:
            for run in args.runs:
                print(f"## {run}\n\n" + "\n".join(table(count_training_refusals(run, args.every))) + "\n")
        except ValueError as exc:
            print(f"refusals: {exc}", file=sys.stderr)
            return 2
        return 0
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
