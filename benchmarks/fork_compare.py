"""How far a forked Self-Guide run went from the run it was forked from (benchmarks/fork_run.py).

    python benchmarks/fork_compare.py runs/selfguide/sg-gr-no-anneal-s2-float32

It reads both runs' training logs and checkpoints, so it needs live run directories, outside the
repository (results/ keeps outcome tables only).

A fork and its source share their updates up to the fork; after it only λ(u) differs. This says
what that difference did, from the two runs' folders:
- per update after the fork: λ in each run, how many training trajectories are the same in both
  (the same moves and the same self-assessments), and, while the rollouts are still the same,
  which groups' advantages the two λ give differently (the largest change in each);
- at every checkpoint both runs kept after the fork: the L2 distance between their LoRA weights,
  beside how far each moved from the checkpoint they share;
- on the test tasks both final evaluations have reached: the outcomes that differ.

Why the advantages matter: with std-normalised group advantages, a group whose environment
returns tie trains on λ·Σ_t r_t alone, and there every λ > 0 gives the same advantages, so λ's
size only reaches the groups whose environment returns differ.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from selfguide_table import meta_column, self_guided

from hindsight.algos.grpo import group_advantages
from hindsight.diagnostics.runs import read_run_config
from hindsight.logs import read_trajectories
from hindsight.train.checkpoint import list_checkpoints

FINAL_EVAL = "trajectories/eval-test-final.jsonl"
#: A group's advantages count as changed above this (they are O(1); the eps of the std
#: normalisation leaves changes of about 1e-7 in groups that train on the assessments alone).
CHANGED = 1e-3


class CompareError(Exception):
    """Two runs that cannot be compared; the message says why."""


@dataclass(frozen=True)
class UpdateComparison:
    update: int
    lambdas: tuple[float, float]
    same_trajectories: int
    trajectories: int
    #: Per group, the largest |ΔA| between the two runs' advantages; empty once the rollouts differ.
    advantage_changes: tuple[float, ...]


def advantage_changes(env_returns: torch.Tensor, assessment_sums: torch.Tensor, lambdas: tuple[float, float],
                      normalize_std: bool) -> torch.Tensor:
    """Per group, max_i |A_i(λ_a) − A_i(λ_b)| for the same rollouts under two guidance weights.

    env_returns, assessment_sums: [num_groups, G]. Returns [num_groups]."""
    a, b = (group_advantages(env_returns + weight * assessment_sums, normalize_std=normalize_std)
            for weight in lambdas)
    return (a - b).abs().amax(dim=1)


def guided_by_update(run: Path) -> dict[int, list]:
    """The run's Self-Guide training trajectories, by update, in the order they were logged."""
    updates = defaultdict(list)
    for trajectory in self_guided(run):
        updates[int(trajectory.meta["update"])].append(trajectory)
    if not updates:
        raise CompareError(f"{run} has no Self-Guide training trajectories (trajectories/train.jsonl): "
                           "not a Self-Guide run")
    return updates


def fingerprint(trajectory) -> tuple:
    """What the policy sampled: each step's self-assessment and move."""
    return tuple((step.assessment.text if step.assessment else None, step.action) for step in trajectory.steps)


def compare_updates(fork: Path, source: Path, after: int, group_size: int,
                    normalize_std: bool) -> list[UpdateComparison]:
    mine, theirs = guided_by_update(fork), guided_by_update(source)
    rows = []
    for update in sorted(set(mine) & set(theirs)):
        if update <= after:
            continue
        a, b = mine[update], theirs[update]
        # Runs that sampled different numbers of trajectories (a refill) compare on the shorter list.
        same = sum(fingerprint(x) == fingerprint(y) for x, y in zip(a, b, strict=False))
        lambdas = (float(a[0].meta["selfguide"]["lambda"]), float(b[0].meta["selfguide"]["lambda"]))
        changes: tuple[float, ...] = ()
        if same == len(a) == len(b) and len(a) % group_size == 0:
            metas = [t.meta["selfguide"] for t in a]
            changes = tuple(advantage_changes(meta_column(metas, "env_return", group_size),
                                              meta_column(metas, "assessment_sum", group_size), lambdas,
                                              normalize_std).tolist())
        rows.append(UpdateComparison(update, lambdas, same, max(len(a), len(b)), changes))
    return rows


def lora_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint / "model" / "weights.pt", map_location="cpu", weights_only=True)
    return {key: value.double() for key, value in state.items() if "lora_" in key}


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    if a.keys() != b.keys():
        raise CompareError("the two checkpoints hold different LoRA weights: not a fork and its source")
    return math.sqrt(sum(float(((a[key] - b[key]) ** 2).sum()) for key in a))


def compare_checkpoints(fork: Path, source: Path, after: int) -> list[tuple[int, float, float | None, float | None]]:
    """(step, |fork − source|, |fork − shared|, |source − shared|) for each step both kept after the fork;
    the last two are None where neither run still keeps the checkpoint they share."""
    mine = {c.step: c.path for c in list_checkpoints(fork)}
    theirs = {c.step: c.path for c in list_checkpoints(source)}
    shared_path = mine.get(after) or theirs.get(after)
    shared = lora_weights(shared_path) if shared_path else None
    rows = []
    for step in sorted(set(mine) & set(theirs)):
        if step > after:
            a, b = lora_weights(mine[step]), lora_weights(theirs[step])
            moved = (distance(a, shared), distance(b, shared)) if shared else (None, None)
            rows.append((step, distance(a, b), *moved))
    return rows


def final_outcomes(run: Path) -> dict[str, bool]:
    log = run / FINAL_EVAL
    return {t.id: t.success for t in read_trajectories(log)} if log.is_file() else {}


def report(fork: Path, source: Path | None = None) -> list[str]:
    if not (fork / "config.yaml").is_file():
        raise CompareError(f"{fork} is not a run directory (no config.yaml)")
    record_path = fork / "forked_from.json"
    if not record_path.is_file():
        raise CompareError(f"{fork} has no forked_from.json: not a fork (benchmarks/fork_run.py)")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    source = source or Path(record["source"])
    after = int(record["step"])
    config = read_run_config(fork)
    group_size, normalize_std = int(config.get("group_size", 1)), bool(config.get("normalize_std", True))

    lines = [f"{fork.name} against {source.name}: forked after update {after}, changed {record['changes']}", "",
             "| update | λ fork / source | same trajectories | groups whose advantages differ (largest change) |",
             "|---|---|---|---|"]
    for row in compare_updates(fork, source, after, group_size, normalize_std):
        if row.advantage_changes:
            changed = [f"{x:.3f}" for x in row.advantage_changes if x > CHANGED]
            groups = f"{len(changed)} of {len(row.advantage_changes)}" + (f": {', '.join(changed)}" if changed else "")
        else:
            groups = "– (the rollouts differ)"
        lines.append(f"| {row.update} | {row.lambdas[0]:g} / {row.lambdas[1]:g} | "
                     f"{row.same_trajectories} / {row.trajectories} | {groups} |")
    checkpoints = compare_checkpoints(fork, source, after)
    if checkpoints:
        lines += ["", "| checkpoint | L2(fork − source) | L2 moved since the fork: fork / source |", "|---|---|---|"]
        number = lambda x: "–" if x is None else f"{x:.4g}"  # noqa: E731
        lines += [f"| {step} | {apart:.4g} | {number(moved_fork)} / {number(moved_source)} |"
                  for step, apart, moved_fork, moved_source in checkpoints]
    mine, theirs = final_outcomes(fork), final_outcomes(source)
    common = sorted(set(mine) & set(theirs))
    if common:
        gained = sum(mine[i] and not theirs[i] for i in common)
        lost = sum(theirs[i] and not mine[i] for i in common)
        lines += ["", f"final test, {len(common)} tasks in both: the fork solves {sum(mine[i] for i in common)}, "
                      f"the source {sum(theirs[i] for i in common)}; {gained + lost} outcomes differ "
                      f"({gained} gained, {lost} lost by the fork)"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fork", type=Path, help="the forked run's folder")
    parser.add_argument("--source", type=Path, help="the source's folder, where it moved since the fork")
    args = parser.parse_args()
    try:
        print("\n".join(report(args.fork, args.source)))
    except CompareError as exc:
        parser.exit(2, f"error: {exc}\n")


if __name__ == "__main__":
    main()
