"""Small training run directories for the report tests: a config, metric rows, training records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import yaml

from hindsight.logs import RunDir

GRPO = {"kind": "grpo", "env": "frozenlake", "model": "smollm2", "lr": 0.0001, "updates": 3, "seed": 0,
        "concurrency": 64}


def write_training_run(folder: Path, config: dict[str, Any], lines: Sequence[dict | str], *,
                       train: Sequence = ()) -> Path:
    """A run directory; `lines` are metric rows (dicts) or raw text lines written as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (folder / "metrics.jsonl").write_text(text, encoding="utf-8")
    if train:
        with RunDir(folder).trajectory_writer("train", env=config.get("env", ""), split="train") as writer:
            for trajectory in train:
                writer.write_trajectory(trajectory)
    return folder


def grpo_rows(success: Sequence[float], auv: Sequence[float] = ()) -> list[dict]:
    """One row per update with GRPO's learning-curve entries (and `tide/auv` where given)."""
    rows = []
    for k, value in enumerate(success):
        row = {"step": k + 1, "time": 1.0 + k, "rollout/success_rate": value, "rollout/score_mean": value,
               "policy/loss": 0.1 * k, "policy/kl": 0.01 * k, "policy/clip_frac": 0.0}
        if k < len(auv):
            row["tide/auv"] = auv[k]
        rows.append(row)
    return rows


def grpo_seeds(root: Path, curves: Sequence[Sequence[float]], auvs: Sequence[Sequence[float]] = ()) -> list[Path]:
    """One GRPO run per curve, seeds 0, 1, …, configurations otherwise equal."""
    return [write_training_run(root / f"grpo-s{seed}", {**GRPO, "seed": seed},
                               grpo_rows(curve, auvs[seed] if seed < len(auvs) else ()))
            for seed, curve in enumerate(curves)]
