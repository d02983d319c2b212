"""Critique quality and refinement uptake of ECHO runs, as a Markdown table.

Reads the refinements a run logged (`train.jsonl` of `hindsight train echo`, or
`critic-guided.jsonl` of `hindsight echo-compare`) with the first attempts they refine
(`initial.jsonl`), and asks of every critique:

    actionable  it names a turn and a move ("At turn K … "M" there"), the template form
    correct     it is the template critique of its attempt, word for word (the planner's
                first non-progress turn and the planner's move there)
    uptake      the refinement reached the state the attempt had at turn K and took move M
                there (the share among refinements that reached that state)
    gain        mean s_r − s_o of refinements that took the advice and of those that did not
    s_r vs s_o  the shares of refinements that scored above and below their first attempt
                (the mass above and below the diagonal of ECHO's (s_o, s_r) density)

A critic can only help through uptake: a correct critique the policy does not follow is
worth no more than regeneration.

    python benchmarks/echo_uptake.py runs/echo-comparison/echo-s0 runs/echo-comparison/echo-s1
    python benchmarks/echo_uptake.py runs/echo-learning/echo-s0 --stages 3   # early, middle, late

With --stages K, a training run's updates are cut into K contiguous ranges (as `hindsight
echo-analyze` cuts them) and each range gets its own row, so a critic that learns to find the
planner's move shows its `correct` share rising from the first row to the last.

The refinements are training logs, so this needs live run directories, outside the repository
(results/ keeps outcome tables only).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from hindsight.agent.critic import template_critique
from hindsight.algos.echo_analysis import Stage, split_stages
from hindsight.agent.replay import ReplayDivergence
from hindsight.logs import read_trajectories
from hindsight.types import Trajectory

_ADVICE = re.compile(r'At turn (\d+) .*?You should (?:do "([^"]+)"|answer with <action>([^<]+)</action>)', re.S)


@dataclass
class Uptake:
    refinements: int = 0
    actionable: int = 0
    none: int = 0
    correct: int = 0
    reached: int = 0
    followed: int = 0
    gain_followed: list[float] | None = None
    gain_ignored: list[float] | None = None
    improved: int = 0
    worsened: int = 0

    def row(self, name: str) -> str:
        def share(part: int, whole: int) -> str:
            return f"{part / whole:.0%} ({part}/{whole})" if whole else "–"

        def mean(values: list[float] | None) -> str:
            return f"{statistics.fmean(values):+.3f} (n={len(values)})" if values else "–"

        return (f"| {name} | {self.refinements} | {share(self.none, self.refinements)} | "
                f"{share(self.actionable, self.refinements)} | {share(self.correct, self.refinements)} | "
                f"{share(self.followed, self.reached)} | {mean(self.gain_followed)} | {mean(self.gain_ignored)} | "
                f"{share(self.improved, self.refinements)} | {share(self.worsened, self.refinements)} |")


def suggestion(critique: str) -> tuple[int, str] | None:
    """(turn K, move M) of a template-form critique, else None."""
    match = _ADVICE.search(critique)
    if match is None:
        return None
    return int(match.group(1)), (match.group(2) or match.group(3)).strip()


def measure(refined_file: Path, initial_file: Path, stage: Stage | None = None) -> Uptake:
    """The refinements of `refined_file` (those of `stage`'s updates only, when given)."""
    initial: dict[tuple, Trajectory] = {}
    for attempt in read_trajectories(initial_file):
        initial[(attempt.meta.get("update"), attempt.seed)] = attempt
    templates: dict[str, str] = {}
    result = Uptake(gain_followed=[], gain_ignored=[])
    for refinement in read_trajectories(refined_file):
        echo = refinement.meta.get("echo")
        attempt = initial.get((refinement.meta.get("update"), refinement.seed))
        if echo is None or attempt is None:
            continue
        if stage is not None and not stage.holds(refinement.meta.get("update", 0)):
            continue
        result.refinements += 1
        result.improved += echo["s_r"] > echo["s_o"]
        result.worsened += echo["s_r"] < echo["s_o"]
        critique = echo["critique"].strip()
        result.none += critique.lower().rstrip(".") == "none"
        if attempt.id not in templates:
            try:
                templates[attempt.id] = template_critique(attempt)
            except ReplayDivergence:
                templates[attempt.id] = ""
        template = re.search(r"<critique>(.*)</critique>", templates[attempt.id], re.S)
        result.correct += bool(template) and template.group(1).strip() == critique
        advice = suggestion(critique)
        if advice is None:
            continue
        result.actionable += 1
        turn, move = advice
        index = turn - 1
        if not (index < attempt.num_steps and index < refinement.num_steps):
            continue
        if refinement.steps[index].state_key != attempt.steps[index].state_key:
            continue
        result.reached += 1
        took = (refinement.steps[index].action or "").strip() == move
        result.followed += took
        (result.gain_followed if took else result.gain_ignored).append(echo["s_r"] - echo["s_o"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="ECHO run directories or echo-compare output directories")
    parser.add_argument("--stages", type=int, default=1,
                        help="rows per training run: contiguous ranges of its updates (default 1: the whole run)")
    args = parser.parse_args(argv)
    if args.stages < 1:
        parser.error("--stages must be at least 1")
    print("| run | refinements | none | actionable | correct (= template) | uptake | gain if followed "
          "| gain if not | s_r > s_o | s_r < s_o |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        trajectories = run / "trajectories"
        refined = next((trajectories / name for name in ("train.jsonl", "critic-guided.jsonl")
                        if (trajectories / name).is_file()), None)
        if refined is None or not (trajectories / "initial.jsonl").is_file():
            print(f"{run}: no refinements with their initial attempts", file=sys.stderr)
            continue
        updates = [a.meta["update"] for a in read_trajectories(trajectories / "initial.jsonl") if "update" in a.meta]
        if args.stages == 1 or not updates:  # echo-compare's refinements have no updates to split
            print(measure(refined, trajectories / "initial.jsonl").row(str(run)))
            continue
        for stage in split_stages(min(updates), max(updates), args.stages):
            print(measure(refined, trajectories / "initial.jsonl", stage).row(f"{run} · {stage.label}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
