"""Where step-level best-of-N still fails: was a way out among the candidates at the fatal turn?

    python benchmarks/bestof_failures.py runs/cso/bon5-oracle [--json]

The candidates of each best-of turn are in the evaluation's trajectory log only, so this needs
a live run directory, outside the repository (results/cso keeps outcome tables: whether a
failure fell or ran out of steps can be replayed from those, what else was sampled cannot).

Reads a best-of evaluation (`hindsight eval --best-of N`; a run folder or its eval.jsonl) and
replays every failed episode to its last turn. That turn either ran out of the step budget or
ended the episode unsolved (a fall into a hole). For a fatal turn it tells whether

* all candidates were the same move (the policy saw no other; no PRM can help),
* several distinct moves were sampled but every one was fatal, or
* a candidate that was not fatal was there and the PRM's choice passed it over,

and, for the last kind, the PRM scores the chosen move and the best non-fatal move had. Only
environments that replay (the built-in ones: `env.step`, `env.done`, `env.is_success`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from hindsight.agent.replay import replay_to
from hindsight.logs import read_trajectories
from hindsight.types import Trajectory


@dataclass
class FailureCount:
    """Failed episodes of a best-of evaluation, by what their last turn offered."""

    episodes: int = 0
    failed: int = 0
    out_of_budget: int = 0
    fatal_one_move: int = 0
    fatal_all_fatal: int = 0
    fatal_passed_over: int = 0
    #: (score of the fatal move taken, best score among the non-fatal candidates) -> turns
    passed_over_scores: Counter = field(default_factory=Counter)

    @property
    def fatal(self) -> int:
        return self.fatal_one_move + self.fatal_all_fatal + self.fatal_passed_over


def ends_unsolved(env, action: str) -> bool:
    """Does `action` end the episode unsolved (terminated, not merely out of steps)?"""
    probe = copy.deepcopy(env)
    _, _, terminated, _, _ = probe.step(action)
    return bool(terminated) and not probe.is_success()


def count_failures(trajectories: Iterable[Trajectory]) -> FailureCount:
    count = FailureCount()
    for trajectory in trajectories:
        count.episodes += 1
        if trajectory.success or not trajectory.steps:
            continue
        count.failed += 1
        last = trajectory.steps[-1]
        if not last.candidates:
            raise ValueError(f"episode {trajectory.id} has no best-of candidates: not a best-of evaluation")
        env = replay_to(trajectory, trajectory.num_steps - 1)
        if not ends_unsolved(env, last.action):
            count.out_of_budget += 1
            continue
        scores: dict[str, float] = {}
        for candidate in last.candidates:
            scores[candidate.action] = max(scores.get(candidate.action, float("-inf")), candidate.score)
        safe = [action for action in scores if not ends_unsolved(env, action)]
        if len(scores) == 1:
            count.fatal_one_move += 1
        elif not safe:
            count.fatal_all_fatal += 1
        else:
            count.fatal_passed_over += 1
            count.passed_over_scores[(scores[last.action], max(scores[action] for action in safe))] += 1
    return count


def report(count: FailureCount) -> str:
    lines = [
        f"{count.failed} of {count.episodes} episodes failed:",
        f"  {count.out_of_budget} ran out of the step budget",
        f"  {count.fatal} ended unsolved at their last turn (a fall):",
        f"    {count.fatal_one_move} with every candidate the same move",
        f"    {count.fatal_all_fatal} with several moves, all fatal",
        f"    {count.fatal_passed_over} with a non-fatal candidate the PRM passed over",
    ]
    for (taken, best_safe), turns in sorted(count.passed_over_scores.items()):
        lines.append(f"      {turns} turns: fatal move taken at score {taken:g}, best non-fatal {best_safe:g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a best-of evaluation's run folder or its eval.jsonl")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    try:
        count = count_failures(read_trajectories(args.log))
    except (ValueError, OSError) as error:  # an unreadable log, not a best-of one, or missing
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        data = asdict(count)
        data["fatal"] = count.fatal
        data["passed_over_scores"] = [[*key, turns] for key, turns in sorted(count.passed_over_scores.items())]
        print(json.dumps(data, indent=2))
    else:
        print(report(count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
