"""Does a policy's move depend on the state? Action mix and oracle agreement of an evaluation.

    python benchmarks/oracle_agreement.py runs/sft-frozenlake [more runs or .jsonl logs] [--json]

Every evaluation now logs `eval/oracle_agreement` and its action mix in summary.json
(`hindsight.agent.agreement`); this script computes the same for logs written before that,
or for any trajectory log (a run folder's `eval*.jsonl`, or a log file).

Needs an environment whose oracle plans from any state (FrozenLake, BlocksWorld, Sudoku).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tables import report_skipped

from hindsight.agent.agreement import Agreement as OracleAgreement
from hindsight.agent.agreement import best_moves, oracle_agreement
from hindsight.logs import read_trajectories
from hindsight.types import Trajectory

__all__ = ["Agreement", "agreement", "best_moves", "main"]


def agreement(trajectories: list[Trajectory], source: str) -> Agreement:
    """The log's oracle agreement and action mix, with its success (`hindsight.agent.agreement`)."""
    result = oracle_agreement(trajectories)
    if result is None:
        raise SystemExit(f"error: {source}: its environment's planner cannot rate moves from any state")
    return Agreement(**asdict(result), source=source, episodes=len(trajectories),
                     successes=sum(t.success for t in trajectories))


@dataclass(frozen=True)
class Agreement(OracleAgreement):
    """One log's agreement (the toolkit's counts and rates) with its source and test success."""

    source: str = ""
    episodes: int = 0
    successes: int = 0


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
            result = agreement(list(read_trajectories(log, report_skipped)), str(log))
            if args.json:
                print(json.dumps({**asdict(result), "oracle_agreement": result.rate,
                                  "oracle_agreement_valid": result.valid_rate, "oracle_chance": result.chance}))
            else:
                mix = ", ".join(f"{a or '(none)'} {n}" for a, n in result.actions.items())
                print(f"{log}: success {result.successes}/{result.episodes}, oracle agreement {result.rate:.3f} "
                      f"({result.agreeing}/{result.steps} moves; {result.valid_rate:.3f} of the {result.valid} "
                      f"valid ones; a random admissible move {result.chance:.3f}); moves: {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
