"""What a CSO run's PRM said of the policy's own moves in its failures, round by round.

    python benchmarks/cso_scored.py runs/cso-noise/cso-learned-s0 [RUN ...]

CSO and Step-DPO look for critical steps where the PRM scores the policy's move low and an
alternative high. If the PRM rates the very move that ended a failure (the fall into a hole) as
good, no critical step is found and no pair is formed. For each round of each run this reads
`round-N/scored.jsonl` (one row per rated step of a failed rollout, the failure numbered among
that round's failures) and `round-N/rollouts.jsonl` (the round's rollouts, to know each
failure's last step), and prints: failures, rated steps, how the PRM scored the policy's last
move of each failure and its earlier moves, and the alternatives, each as the mean score and
how many of the moves it called good (a score of at least 0.5), and the candidates the round
found. Needs a live run folder: the round logs are not kept in results/.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from tables import quiet_closed_pipe, report_skipped

from hindsight.logs import read_trajectories
from hindsight.methods.cso import scored_step_from


@dataclass(frozen=True)
class RoundScores:
    """The PRM's scores in one round, split by where the rated move stood in its failure."""

    failures: int
    rated: int
    last_moves: tuple[float, ...]  # the score of the policy's move at each failure's last step
    earlier_moves: tuple[float, ...]  # the scores of the policy's moves before it
    alternatives: tuple[float, ...]
    candidates: int


def round_scores(round_dir: Path) -> RoundScores:
    """Read one round folder; ValueError when its logs are missing or unreadable."""
    scored_path, rollouts_path = round_dir / "scored.jsonl", round_dir / "rollouts.jsonl"
    if not scored_path.exists() or not rollouts_path.exists():
        raise ValueError(f"{round_dir} has no scored.jsonl and rollouts.jsonl (a live CSO round folder)")
    failures = [t for t in read_trajectories(rollouts_path, report_skipped) if not t.success]
    last_step = [len(t.steps) - 1 for t in failures]
    last: list[float] = []
    earlier: list[float] = []
    alternatives: list[float] = []
    candidates = rated = 0
    for number, line in enumerate(scored_path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            step = scored_step_from(json.loads(line))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{scored_path}:{number}: not a scored step ({error})") from None
        failure = step.alternatives.trajectory
        if not 0 <= failure < len(failures):
            raise ValueError(f"{scored_path}:{number}: failure {failure} is not one of the round's {len(failures)}")
        rated += 1
        (last if step.alternatives.at == last_step[failure] else earlier).append(step.policy_score)
        alternatives.extend(step.scores)
        candidates += step.candidate
    return RoundScores(len(failures), rated, tuple(last), tuple(earlier), tuple(alternatives), candidates)


#: A score at or above this counts as the PRM calling the move good (the scores are 0, 0.25 and 1).
GOOD = 0.5


def cell(scores: tuple[float, ...]) -> str:
    """`0.95, 14 of 15 good`: the mean score and how many moves scored at least GOOD; – for none."""
    if not scores:
        return "–"
    return f"{sum(scores) / len(scores):.2f}, {sum(s >= GOOD for s in scores)} of {len(scores)} good"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="live CSO run folders (with round-N/)")
    args = parser.parse_args()
    lines = ["| run | round | failures | rated steps | the policy's last move (mean score, called good) | "
             "its earlier moves | alternatives | candidates |", "|---|---|---|---|---|---|---|---|"]
    try:
        for run in args.runs:
            rounds = sorted(run.glob("round-*"), key=lambda p: int(p.name.split("-")[1]))
            if not rounds:
                raise ValueError(f"{run} has no round-N folders (a live CSO run folder)")
            for round_dir in rounds:
                r = round_scores(round_dir)
                lines.append(f"| {run.name} | {round_dir.name.split('-')[1]} | {r.failures} | {r.rated} | "
                             f"{cell(r.last_moves)} | {cell(r.earlier_moves)} | {cell(r.alternatives)} | "
                             f"{r.candidates} |")
    except ValueError as error:
        parser.error(str(error))
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
