"""Checkpoints that resume exactly.

A checkpoint holds everything that decides what happens next: trainable weights,
optimizer and scheduler states, every RNG (Python, NumPy, torch), the update step and
the data cursor, plus whatever method state the caller adds. Resuming from it makes
the rest of the run identical to one that was never interrupted.

Checkpoints are written into a temporary folder and renamed into place, so a crash
while saving never leaves a checkpoint that looks complete but is not.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from hindsight.logs.checkpoints import STATE_FILE, Checkpoint, checkpoint_dir, choose_checkpoint, list_checkpoints
from hindsight.train.model import TrainableModel

__all__ = ["STATE_FILE", "Checkpoint", "checkpoint_dir", "choose_checkpoint", "list_checkpoints", "load_checkpoint",
           "save_checkpoint", "seed_everything"]


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_checkpoint(
    run_path: str | os.PathLike[str],
    step: int,
    model: TrainableModel,
    optimizers: Mapping[str, torch.optim.Optimizer],
    schedulers: Mapping[str, Any],
    state: Mapping[str, Any],
    keep: int | None = None,
) -> Checkpoint:
    """Save everything needed to continue after update `step`; keep the newest `keep` (None or 0: all)."""
    target = checkpoint_dir(Path(run_path), step)
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save(staging / "model")
    torch.save(
        {
            "step": step,
            "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
            "schedulers": {name: sch.state_dict() for name, sch in schedulers.items()},
            "rng": rng_state(),
            "state": dict(state),
        },
        staging / STATE_FILE,
    )
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    if keep:
        for old in list_checkpoints(run_path)[:-keep]:
            shutil.rmtree(old.path, ignore_errors=True)
    return Checkpoint(step, target)


def load_checkpoint(
    checkpoint: Checkpoint,
    model: TrainableModel,
    optimizers: Mapping[str, torch.optim.Optimizer],
    schedulers: Mapping[str, Any],
) -> dict[str, Any]:
    """Restore weights, optimizers, schedulers and RNGs; returns the method state."""
    model.load(checkpoint.path / "model")
    saved = torch.load(checkpoint.path / STATE_FILE, map_location="cpu", weights_only=False)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(saved["optimizers"][name])
    for name, scheduler in schedulers.items():
        scheduler.load_state_dict(saved["schedulers"][name])
    set_rng_state(saved["rng"])
    return dict(saved["state"], step=saved["step"])
