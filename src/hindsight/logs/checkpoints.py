"""Where a run directory keeps its checkpoints (the layout only; `train.checkpoint` writes them).

    RUN/checkpoints/step-000012/model/weights.pt   trainable weights (adapters, keyed by role)
    RUN/checkpoints/step-000012/state.pt           optimizers, schedulers, RNGs, step, method state

A checkpoint is complete once `state.pt` is in place: it is written into `step-N.tmp` and
renamed, so a folder without it is never listed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hindsight.configs import ConfigError

STATE_FILE = "state.pt"


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path


def checkpoint_dir(run_path: Path, step: int) -> Path:
    return run_path / "checkpoints" / f"step-{step:06d}"


def list_checkpoints(run_path: str | os.PathLike[str]) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest first."""
    folder = Path(run_path) / "checkpoints"
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        if child.name.startswith("step-") and not child.name.endswith(".tmp") and (child / STATE_FILE).is_file():
            found.append(Checkpoint(int(child.name.split("-")[1]), child))
    return sorted(found, key=lambda c: c.step)


def choose_checkpoint(run_path: str | os.PathLike[str], step: int | None = None) -> Checkpoint:
    """The run's checkpoint of update `step`, or its latest; `ConfigError` names the ones there are."""
    checkpoints = list_checkpoints(run_path)
    if not checkpoints:
        raise ConfigError(f"{run_path} has no checkpoint")
    if step is None:
        return checkpoints[-1]
    for checkpoint in checkpoints:
        if checkpoint.step == step:
            return checkpoint
    raise ConfigError(f"{run_path} has no checkpoint of update {step}; it has "
                      f"{', '.join(str(c.step) for c in checkpoints)}")
