"""How well can any self-assessment of a FrozenLake step agree with the oracle, from what its prompt shows?

    python benchmarks/assessor_ceiling.py LOG [LOG ...] [--json]

LOG is a run folder or a .jsonl log of FrozenLake attempts with the local view (each observation
says "The goal is N rows up and M columns left"), for example the start's sampled attempts, or
an assessor's evaluation (`hindsight train sft` with `assessment_eval` writes its labels in each
trajectory's `judged`).

Self-Guide judges step t−1 at turn t, against the oracle's label (`oracle_labels`: negative when
the planner's distance to the goal grew). Every judged step falls in one of three kinds, read
from the two observations the assessor sees:
- bump: the position did not change (an edge, or a refused move);
- farther: the stated distance to the goal grew;
- closer: it shrank. The planner can still call such a step negative, when a hole the local
  view does not show lies on the way and the plan must go round it.
Two rules read what the prompt shows. The distance judge says negative for a bump or a step
farther, positive otherwise: the best a judge can do that reads only the stated distances. The
look-ahead judge also says negative when, after the step, every move toward the goal is a hole
(the local view shows the four neighbours), so the plan must go round. The table gives them
beside the judges that read nothing (always positive; a guess by the label mix) and, when the
log has them, the assessor's own labels per kind.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tables import report_skipped

from hindsight.agent.selfguide import SelfAssessor, logged_steps_to_judge
from hindsight.algos.selfguide import Label, label_agreement_stats
from hindsight.logs import read_trajectories

KINDS = ("bump", "farther", "closer")
_GOAL = re.compile(r"The goal is ([^.]*)\.")
_OFFSET = re.compile(r"(\d+) (?:rows?|columns?)")
_TOWARD = {"up": "Up", "down": "Down", "left": "Left", "right": "Right"}


def goal_distance(observation: str) -> int:
    """The row and column offsets to the goal that a local-view observation states, added up."""
    found = _GOAL.search(observation)
    if found is None:
        raise ValueError(f"no 'The goal is ...' line (FrozenLake's local view) in {observation[:80]!r}")
    return sum(int(n) for n in _OFFSET.findall(found.group(1)))


def blocked_toward_goal(observation: str) -> bool:
    """Whether every move that shortens the stated distance to the goal steps into a hole."""
    found = _GOAL.search(observation)
    offsets = found.group(1) if found else ""
    toward = [line for word, line in _TOWARD.items() if re.search(rf"\d+ (?:rows?|columns?) {word}\b", offsets)]
    return bool(toward) and all(f"{line}: a hole" in observation for line in toward)


@dataclass(frozen=True)
class Ceiling:
    """One log's judged steps: the oracle's labels by kind, and the agreement of each judge."""

    source: str
    steps: int
    oracle_by_kind: dict[str, dict[str, int]]
    judges: dict[str, dict[str, float | None]]
    #: For an assessor's evaluation: how many steps of each (kind, oracle label) it labelled negative.
    said_negative_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)


def ceiling(log: str) -> Ceiling:
    trajectories = list(read_trajectories(log, report_skipped))
    steps = logged_steps_to_judge(trajectories, SelfAssessor())
    if not steps:
        raise SystemExit(f"error: {log}: no step to judge (every step judged is followed by another turn)")
    kinds, oracle, visible, lookahead, said = [], [], [], [], []
    for step in steps:
        before, after = step.trajectory.steps[step.at - 1], step.trajectory.steps[step.at]
        try:
            gap = goal_distance(after.observation) - goal_distance(before.observation)
        except ValueError as error:
            raise SystemExit(f"error: {log}: {error}") from None
        kind = "bump" if before.state_key == after.state_key else "farther" if gap > 0 else "closer"
        kinds.append(kind)
        oracle.append(step.oracle)
        visible.append(Label.POSITIVE if kind == "closer" else Label.NEGATIVE)
        blocked = kind == "closer" and blocked_toward_goal(after.observation)
        lookahead.append(Label.NEGATIVE if blocked else visible[-1])
        judged = {entry["at"]: entry["label"] for entry in step.trajectory.meta.get("judged", [])}
        said.append(judged.get(step.at, "missing"))
    judges = {
        "distance": asdict(label_agreement_stats(visible, oracle)),
        "look-ahead": asdict(label_agreement_stats(lookahead, oracle)),
        "always positive": asdict(label_agreement_stats([Label.POSITIVE] * len(oracle), oracle)),
    }
    by_kind: dict[str, Counter] = {kind: Counter() for kind in KINDS}
    for kind, label in zip(kinds, oracle):
        by_kind[kind][label.value] += 1
    said_negative: dict[str, dict[str, int]] = {}
    if "missing" not in said:
        judges["assessor"] = asdict(label_agreement_stats([Label(s) if s else None for s in said], oracle))
        for kind, label, s in zip(kinds, oracle, said):
            said_negative.setdefault(kind, Counter())[label.value] += s == Label.NEGATIVE.value
    return Ceiling(log, len(steps), {k: dict(v) for k, v in by_kind.items()}, judges,
                   {k: dict(v) for k, v in said_negative.items()})


def render(result: Ceiling) -> str:
    lines = [f"{result.source}: {result.steps} judged steps"]
    for kind in KINDS:
        counts = result.oracle_by_kind[kind]
        said = result.said_negative_by_kind.get(kind)
        extra = (f"; the assessor said negative to {said.get('negative', 0)} of the negatives and "
                 f"{said.get('positive', 0) + said.get('neutral', 0)} of the others" if said else "")
        lines.append(f"  {kind:8s} oracle negative {counts.get('negative', 0):4d}, positive "
                     f"{counts.get('positive', 0):4d}, neutral {counts.get('neutral', 0):4d}{extra}")
    lines.append(f"  {'judge':18s} {'agreement':>9s} {'negative recall':>15s} {'said negative':>13s}")
    for name, stats in result.judges.items():
        recall = "–" if stats["negative_recall"] is None else f"{stats['negative_recall']:.3f}"
        lines.append(f"  {name:18s} {stats['agreement']:9.3f} {recall:>15s} {stats['said_negative']:13.3f}")
    first = next(iter(result.judges.values()))
    lines.append(f"  {'label-mix guess':18s} {first['label_mix']:9.3f} (expected)")
    lines.append(f"  the gate needs agreement >= {first['always_positive'] + 0.10:.3f} "
                 f"(always positive + 0.10) and negative recall >= 0.5")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", nargs="+", help="run folders or .jsonl logs of FrozenLake local-view attempts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    for log in args.logs:
        if not Path(log).exists():
            raise SystemExit(f"error: {log} does not exist")
    results = [ceiling(log) for log in args.logs]
    print(json.dumps([asdict(r) for r in results], indent=2) if args.json else "\n\n".join(map(render, results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
