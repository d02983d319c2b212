"""Can a model serve as CSO's LLM-judge PRM? Ask it about every move at logged states and see.

    python benchmarks/judge_check.py ROLLOUTS.jsonl --judge smollm2 [--states 6] [--max-new-tokens 16]

ROLLOUTS is a trajectory log of a live run, outside the repository (results/ keeps outcome tables only).

ROLLOUTS is a trajectory log of a built-in environment (a CSO run's `round-N/rollouts.jsonl`,
an evaluation's `trajectories/eval.jsonl`). At the last state of each of the first `--states`
failed episodes, the judge rates each admissible move with `JudgePRM`'s rubric, exactly as a
CSO round would (greedy, the same prompt and parser), and the oracle PRM rates the same moves
from the planner. Printed: every answer, then how many answers could be read, the judge's mean
score for the moves the planner calls right and for the others, and at how many states the
judge gave every move the same score. A judge that cannot tell the planner's move from a fatal
one will not find critical steps, whatever γ_low and γ_high are: this costs minutes, a CSO run
with it hours. docs/results.md (issue 13, "Why the LLM judge failed") has what the bundled
model answered.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.prm import JudgePRM, OraclePRM, StepQuery
from hindsight.logs import read_trajectories
from hindsight.types import Trajectory


@dataclass(frozen=True)
class Rating:
    state: int
    action: str
    planner: float  # the oracle PRM's score: 1 shortens the plan, 0.5 keeps it, 0 lengthens, refused or fatal
    judge: float
    readable: bool
    answer: str


def queries_at_failures(trajectories: list[Trajectory], states: int) -> list[tuple[int, StepQuery]]:
    """(state number, query) for every admissible move at the last state of the first `states` failed episodes."""
    queries = []
    failed = [t for t in trajectories if not t.success and t.num_steps][:states]
    for state, trajectory in enumerate(failed):
        at = trajectory.num_steps - 1
        queries += [(state, StepQuery(trajectory, at, move)) for move in trajectory.steps[at].admissible_actions or ()]
    return queries


def rate(judge: JudgePRM, queries: list[tuple[int, StepQuery]]) -> list[Rating]:
    asked = [query for _, query in queries]
    planner, answers = OraclePRM().score(asked), judge.score(asked)
    return [Rating(state, query.action, p.value, a.value, a.error is None, a.text)
            for (state, query), p, a in zip(queries, planner, answers)]


def summary(ratings: list[Rating]) -> dict:
    right = [r.judge for r in ratings if r.planner == 1.0]
    other = [r.judge for r in ratings if r.planner < 1.0]
    by_state: dict[int, set[float]] = {}
    for r in ratings:
        by_state.setdefault(r.state, set()).add(r.judge)
    return {
        "moves": len(ratings),
        "readable": sum(r.readable for r in ratings),
        "mean_score_planner_move": statistics.fmean(right) if right else None,
        "mean_score_other_moves": statistics.fmean(other) if other else None,
        "states": len(by_state),
        "states_all_moves_same_score": sum(len(scores) == 1 for scores in by_state.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rollouts", type=Path, help="a trajectory log (JSONL) of a built-in environment")
    parser.add_argument("--judge", required=True, help="the judge's model spec (smollm2, openai:..., ...)")
    parser.add_argument("--states", type=int, default=6, help="failed episodes to ask about (default 6)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="the judge's answer length (CSO's default 16)")
    args = parser.parse_args(argv)
    if not args.rollouts.is_file():
        parser.error(f"no such log: {args.rollouts}")
    trajectories = list(read_trajectories(args.rollouts, lambda issue: print(f"{issue}, skipped", file=sys.stderr)))
    queries = queries_at_failures(trajectories, args.states)
    if not queries:
        parser.error(f"{args.rollouts} holds no failed episode to ask about")

    from hindsight.llm import load_model

    ratings = rate(JudgePRM(load_model(args.judge), max_new_tokens=args.max_new_tokens), queries)
    for r in ratings:
        print(f"state {r.state}  {r.action:>6}  planner {r.planner:.1f}  judge {r.judge:.2f}"
              f"{'' if r.readable else ' (unreadable)'}  {r.answer!r}")
    print(json.dumps(summary(ratings), indent=2))
    return 0


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    sys.exit(main())
