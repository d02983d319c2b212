"""Does a policy's move depend on the state? Action mix and oracle agreement of an evaluation.

    python benchmarks/oracle_agreement.py runs/sft-frozenlake [more runs or .jsonl logs] [--json]

For every step of every trajectory in an evaluation log (a run folder's `eval*.jsonl`, or a
log file), the task is replayed to the state the move was made in, and each admissible move
is tried on a copy: the step *agrees* when its move is one of those after which the planner
needs the fewest further moves to succeed (ties all count). A state-independent policy shows
at once: its action mix is lopsided (issue 45's 4×4 start answered "up" 96% of the time) and
its agreement sits near the chance level of its mix, whatever the test success.

Needs an environment whose oracle plans from any state (FrozenLake, BlocksWorld, Sudoku) and
a live log, outside the repository (results/ keeps outcome tables, whose actions replay the
same way, but this script reads trajectory logs).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from hindsight.agent.replay import planner_distance, planning_env, take_recorded
from hindsight.envs.contract import Env
from hindsight.logs import read_trajectories
from hindsight.types import Trajectory


@dataclass(frozen=True)
class Agreement:
    """One log's test success, how often its moves were among the planner's best, and its action mix."""

    source: str
    episodes: int
    successes: int
    steps: int
    agreeing: int
    actions: dict[str, int]

    @property
    def rate(self) -> float:
        return self.agreeing / self.steps if self.steps else 0.0


def best_moves(env: Env, moves: list[str]) -> set[str]:
    """The moves after which the planner needs the fewest steps to succeed (none if all are fatal)."""
    distances = {}
    for move in moves:
        probe = copy.deepcopy(env)
        try:
            probe.step(move)
            distances[move] = planner_distance(probe)
        finally:
            probe.close()
    best = min(distances.values(), default=math.inf)
    return {m for m, d in distances.items() if d == best} if best < math.inf else set()


def agreement(trajectories: list[Trajectory], source: str) -> Agreement:
    """Replay each trajectory and count its moves that were among the planner's best."""
    mix: Counter[str] = Counter()
    agreeing = steps = 0
    for trajectory in trajectories:
        env = planning_env(trajectory)
        try:
            for step in trajectory.steps:
                action = step.action or ""
                mix[action] += 1
                steps += 1
                agreeing += action in best_moves(env, list(env.admissible_actions()))
                take_recorded(env, trajectory, step)
        finally:
            env.close()
    return Agreement(source, len(trajectories), sum(t.success for t in trajectories), steps, agreeing,
                     dict(mix.most_common()))


def _logs(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    return sorted(p for p in (source / "trajectories").glob("eval*.jsonl*"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, help="run folders or evaluation logs")
    parser.add_argument("--json", action="store_true", help="one JSON object per log")
    args = parser.parse_args(argv)
    for source in args.sources:
        logs = _logs(source)
        if not logs:
            print(f"error: no evaluation log in {source} (expected trajectories/eval*.jsonl)", file=sys.stderr)
            return 2
        for log in logs:
            result = agreement(list(read_trajectories(log)), str(log))
            if args.json:
                print(json.dumps({**asdict(result), "oracle_agreement": result.rate}))
            else:
                mix = ", ".join(f"{a or '(none)'} {n}" for a, n in result.actions.items())
                print(f"{log}: success {result.successes}/{result.episodes}, oracle agreement {result.rate:.3f} "
                      f"({result.agreeing}/{result.steps} moves); moves: {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
