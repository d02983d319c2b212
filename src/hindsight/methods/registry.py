"""Training methods by name: what `hindsight train METHOD` runs.

Each method module registers its train function with its config class:

    @training_method("grpo", GRPOConfig, help="multi-turn GRPO (DAPO and Self-Guide switches)")
    def train_grpo(config: GRPOConfig, out, *, resume=False) -> Path: ...

`load_training_methods()` imports every module of `hindsight.methods`, so a new method is a
new module with one decorated function and the CLI finds it. Importing this module is cheap
(the method modules import torch); only the commands that list or run methods load them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hindsight.registry import Registry

#: A method's train function: (config, run directory, *, resume) -> the run directory.
TrainFunction = Callable[..., Path]


@dataclass(frozen=True)
class TrainingMethod:
    """One training method: its config dataclass, the function that trains, and a one-line help."""

    name: str
    config: type[Any]
    train: TrainFunction
    help: str


#: Training methods by the name `hindsight train` takes; filled when the method modules load.
TRAINING_METHODS: Registry[TrainingMethod] = Registry("training method")


def training_method(name: str, config: type[Any], *, help: str) -> Callable[[TrainFunction], TrainFunction]:
    """Decorator: register the decorated train function as method `name` with its config class."""

    def add(train: TrainFunction) -> TrainFunction:
        TRAINING_METHODS.add(name, TrainingMethod(name, config, train, help))
        return train

    return add


def load_training_methods() -> Registry[TrainingMethod]:
    """`TRAINING_METHODS` after importing every module of `hindsight.methods` (which runs their decorators)."""
    package = importlib.import_module("hindsight.methods")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return TRAINING_METHODS
