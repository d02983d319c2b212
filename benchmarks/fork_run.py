"""Continue a GRPO run under another guidance-reward schedule, from one of its checkpoints.

Two Self-Guide runs with the same seed and settings whose λ(u) agree on updates 1..K sample the
same rollouts and make the same updates through update K (seen bit for bit at seeds 0 and 1 of
the comparison: GRPO+SG and GRPO+SG+GR had identical step-4 checkpoints). So the second need not
repeat those updates: it can continue from the first one's checkpoint after update K, since a
checkpoint resumes exactly (weights, optimizer, scheduler and every RNG).

    python benchmarks/fork_run.py /work/sg/sg-s2-float32 4 /work/sg/sg-gr-s2-float32 --set guidance_reward=true
    hindsight train grpo --resume /work/sg/sg-gr-s2-float32

The fork gets the source's config with the changes, its metrics and training-trajectory logs
(`--resume` drops their records after update K) and the one checkpoint, plus `forked_from.json`
saying where it came from. Only the switches that decide λ(u) may change, and only where λ(u)
is the same on every shared update, under the new config and as the source logged it; anything
else is refused, since nothing here could tell that the shared updates would have been the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from hindsight.configs import ConfigError, from_mapping, parse_overrides
from hindsight.logs.checkpoints import STATE_FILE, checkpoint_dir
from hindsight.logs.schema import METRICS_FILE
from hindsight.methods.grpo import GRPOConfig

#: The config keys a fork may change: together they decide λ(u) and nothing else.
SCHEDULE_KEYS = frozenset({"guidance_reward", "trust_start", "trust_full", "trust_hold_until", "trust_end"})
LOGS = (METRICS_FILE, "trajectories/train.jsonl")


class ForkError(Exception):
    """A fork that cannot be made; the message says why."""


def read_config(run: Path) -> tuple[dict, GRPOConfig]:
    path = run / "config.yaml"
    if not path.is_file():
        raise ForkError(f"{run} is not a run directory (no config.yaml)")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if raw.get("kind") != "grpo":
        raise ForkError(f"{run} is a {raw.get('kind')!r} run; only GRPO runs have a guidance schedule to fork on")
    return raw, from_mapping(GRPOConfig, {k: v for k, v in raw.items() if k != "kind"})


def logged_weights(run: Path, step: int) -> dict[int, float]:
    """λ of every update up to `step` as the source's metrics log recorded it (updates that logged one)."""
    weights = {}
    for line in (run / METRICS_FILE).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: the resume drops it as well
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= step \
                and "selfguide/lambda" in row:
            weights[row["step"]] = float(row["selfguide/lambda"])
    return weights


def plan(source: Path, step: int, overrides: list[str]) -> tuple[dict, dict]:
    """The fork's config (as written to config.yaml) and the keys it changes; ForkError when unsafe."""
    raw, before = read_config(source)
    try:
        after = from_mapping(GRPOConfig, {**{k: v for k, v in raw.items() if k != "kind"},
                                          **parse_overrides(overrides)})
    except (ConfigError, ValueError) as exc:
        raise ForkError(str(exc)) from None
    changes = {key: value for key, value in asdict(after).items() if asdict(before)[key] != value}
    if not changes:
        raise ForkError("the fork changes nothing: give the schedule switches that differ with --set")
    if not set(changes) <= SCHEDULE_KEYS:
        raise ForkError(f"only the guidance schedule may change ({', '.join(sorted(SCHEDULE_KEYS))}); "
                        f"not {', '.join(sorted(set(changes) - SCHEDULE_KEYS))}")
    if not 1 <= step < before.updates:
        raise ForkError(f"step must be a finished update before the last (1..{before.updates - 1}), not {step}")
    if not (checkpoint_dir(source, step) / STATE_FILE).is_file():
        raise ForkError(f"{source} has no complete checkpoint after update {step} "
                        f"({checkpoint_dir(source, step)}); only the newest ones are kept")
    logged = logged_weights(source, step)
    for update in range(1, step + 1):
        old, new = before.guidance_weight(update), after.guidance_weight(update)
        if abs(old - new) > 1e-12:
            raise ForkError(f"λ differs at update {update} ({old:g} in the source, {new:g} in the fork): "
                            f"the runs part before update {step}, so the fork would not be the run it claims")
        if update in logged and abs(logged[update] - new) > 1e-12:
            raise ForkError(f"the source logged λ = {logged[update]:g} at update {update}, the fork's schedule "
                            f"gives {new:g}")
    # The source's own keys, only the changed ones rewritten: the toolkit that resumes the fork
    # may be an older one (a pinned commit) that knows fewer keys than this one.
    return {**raw, **changes}, changes


def fork(source: Path, step: int, dest: Path, overrides: list[str]) -> dict:
    """Write the fork into `dest` (which must not exist); returns its provenance record."""
    config, changes = plan(source, step, overrides)
    if dest.exists():
        raise ForkError(f"{dest} exists; a fork goes into a new folder")
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "trajectories").mkdir(parents=True)
    (staging / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    for log in LOGS:
        if (source / log).is_file():
            shutil.copy2(source / log, staging / log)
    shutil.copytree(checkpoint_dir(source, step), checkpoint_dir(staging, step))
    record = {"source": str(source.resolve()), "step": step, "changes": changes,
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (staging / "forked_from.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    staging.rename(dest)  # a fork cut short leaves only the .tmp folder, never a half-made run
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="the run to continue from")
    parser.add_argument("step", type=int, help="the update after which the runs part (a checkpoint of the source)")
    parser.add_argument("dest", type=Path, help="the fork's run folder (new)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a schedule switch of the fork, repeatable")
    args = parser.parse_args()
    try:
        record = fork(args.source, args.step, args.dest, args.overrides)
    except ForkError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"{args.dest}: {args.source} after update {record['step']}, changed {record['changes']}; "
          f"continue it with: hindsight train grpo --resume {args.dest}", file=sys.stdout)


if __name__ == "__main__":
    main()
