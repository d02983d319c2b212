"""What a FrozenLake training run's rollouts did where the holes decide, block by block of updates.

    python benchmarks/choice_rollouts.py RUN... [--block 5] [--json]

Greedy test success moves only when the greedy move flips, so it says late, and confounded with
the tie-break (docs/results.md, issue 45), whether training is teaching the holes. The sampled
moves of the training rollouts say it early. For each block of `--block` updates this prints the
rollouts' success beside the success of three rules on the same lakes (learning_table.RULES:
toward the goal sideways first, vertical first, and sideways first but never into a hole), since
the lakes of one block can be much easier than another's; the action entropy (from
metrics.jsonl); and, replaying every rollout's moves
on its map (the trajectory's seed and env options), the share of moves beside a hole that
stepped in and the share of moves at choice states (one move toward the goal is a hole and
another is not) that took the hole. A policy that reads the holes drives the last share toward
0; one that ignores them stays near the start's (about one half for the hole-free start).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from hindsight.envs import Env, EnvError, make
from hindsight.logs import LogIssue, read_metrics, read_trajectories
from hindsight.logs.schema import METRICS_FILE
from learning_table import RULES, MoveShares, episode_shares, rule_solves
from tables import quiet_closed_pipe


@dataclass(frozen=True)
class Rollout:
    """One training rollout, replayed on its map."""

    update: int
    success: bool
    shares: MoveShares
    replayed: bool  # the replay ends as the log says
    solved: dict[str, bool]  # whether each rule of learning_table.RULES solves its lake


@dataclass(frozen=True)
class Block:
    first: int  # first update of the block
    last: int
    episodes: int
    success: float
    action_entropy: float | None  # mean of the updates' tide/action_entropy
    shares: MoveShares
    mismatched: int  # rollouts whose replay did not end as logged (left out of the shares)
    rules: dict[str, float]  # each of learning_table.RULES: its success on the block's lakes

    @property
    def into_hole(self) -> float | None:
        return self.shares.into_hole / self.shares.beside_hole if self.shares.beside_hole else None

    @property
    def chose_hole(self) -> float | None:
        return self.shares.chose_hole / self.shares.choices if self.shares.choices else None


def blocks(run: Path, size: int, on_issue: Callable[[LogIssue], None]) -> list[Block]:
    """The run's rollouts (trajectories/train.jsonl) summed over blocks of `size` updates; unreadable
    log lines go to `on_issue`."""
    log = run / "trajectories" / "train.jsonl"
    if not log.is_file():
        raise EnvError(f"{log} does not exist (a training run writes its rollouts there)")
    lakes: dict[str, Env] = {}
    grouped: dict[int, list[Rollout]] = {}
    for trajectory in read_trajectories(log, on_issue):
        if trajectory.env != "frozenlake":
            raise EnvError(f"{run}: rollouts of {trajectory.env!r}; choice_rollouts reads FrozenLake runs")
        update = int(trajectory.meta.get("update", 0))
        key = json.dumps(dict(trajectory.env_kwargs), sort_keys=True)
        env = lakes.setdefault(key, make("frozenlake", **trajectory.env_kwargs))
        lake = env.generate_instance(trajectory.seed)["map"]
        shares, reached = episode_shares(lake, [step.action for step in trajectory.steps])
        solved = {name: rule_solves(lake, first, safe, env.max_steps) for name, (first, safe) in RULES.items()}
        grouped.setdefault((update - 1) // size, []).append(
            Rollout(update, trajectory.success, shares, reached == trajectory.success, solved))
    metrics = run / METRICS_FILE
    entropy = {int(row["step"]): float(row["tide/action_entropy"])
               for row in (read_metrics(metrics, on_issue) if metrics.is_file() else []) if "tide/action_entropy" in row}
    result = []
    for index in sorted(grouped):
        rows = grouped[index]
        first, last = index * size + 1, max(row.update for row in rows)
        kept = [row.shares for row in rows if row.replayed]
        values = [entropy[u] for u in range(first, last + 1) if u in entropy]
        result.append(Block(first, last, len(rows), sum(row.success for row in rows) / len(rows),
                            sum(values) / len(values) if values else None, sum(kept, MoveShares()),
                            len(rows) - len(kept),
                            {name: sum(row.solved[name] for row in rows) / len(rows) for name in RULES}))
    return result


def share(value: float | None, of: int) -> str:
    return "–" if value is None else f"{value:.2f} (of {of})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="training runs on FrozenLake (GRPO, GiGPO, ...)")
    parser.add_argument("--block", type=int, default=5, help="updates per row (default 5)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run and block")
    args = parser.parse_args()
    if args.block < 1:
        sys.exit("choice_rollouts: --block must be at least 1")
    for run in args.runs:
        issues: list[LogIssue] = []
        try:
            rows = blocks(run, args.block, issues.append)
        except (EnvError, OSError) as error:
            sys.exit(f"choice_rollouts: {error}")
        for issue in issues:  # a live run's last line may be half written; say so, never drop it silently
            print(f"choice_rollouts: skipped {issue}", file=sys.stderr)
        if args.json:
            for row in rows:
                print(json.dumps({"run": str(run), **asdict(row), "into_hole": row.into_hole,
                                  "chose_hole": row.chose_hole}))
            continue
        print(f"{run}\n")
        print("| updates | rollouts | success | " + " | ".join(f"{name} rule, same lakes" for name in RULES)
              + " | action entropy | moves beside a hole that step in | choice states: moves into the hole |")
        print("|---|---|---|" + "---|" * len(RULES) + "---|---|---|")
        for row in rows:
            entropy = "–" if row.action_entropy is None else f"{row.action_entropy:.2f}"
            rules = " | ".join(f"{row.rules[name]:.2f}" for name in RULES)
            print(f"| {row.first}–{row.last} | {row.episodes} | {row.success:.2f} | {rules} | {entropy} | "
                  f"{share(row.into_hole, row.shares.beside_hole)} | {share(row.chose_hole, row.shares.choices)} |")
        mismatched = sum(row.mismatched for row in rows)
        if mismatched:
            print(f"\n{mismatched} rollouts did not replay as logged and are left out of the shares "
                  "(maps from an instance file?)")
        print()


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
