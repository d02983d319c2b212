"""The text-environment contract every Hindsight environment follows.

Gymnasium-style, text in and text out:

    obs, info = env.reset(seed)
    obs, reward, terminated, truncated, info = env.step(action)

`info` always carries `score` (float in [0, 1]), `success` (bool), `valid` (was the
action legal), `state_key` (canonical string of the true state) and
`admissible_actions` (list of str, possibly empty when unknown). `terminated` means the
episode ended inside the task (goal reached or a fatal move); `truncated` means the step
budget ran out.

Determinism is part of the contract: the same seed and the same action prefix
reproduce the same observations and state keys. `hindsight.envs.checker` verifies it.

Task instances come from a seeded generator. Which split a seed belongs to is decided by
a hash of the generated *instance content*, so train, validation and test never share a
task even when two seeds happen to generate the same puzzle.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Mapping, Sequence

SPLITS = ("train", "validation", "test")
# Share of instance-hash buckets per split, out of 100.
_SPLIT_BUCKETS = {"test": range(0, 10), "validation": range(10, 20), "train": range(20, 100)}

INFO_KEYS = ("score", "success", "valid", "state_key", "admissible_actions")


class EnvError(Exception):
    """A user-facing environment error (bad id, bad keyword, bad instance file)."""


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    def as_tuple(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.observation, self.reward, self.terminated, self.truncated, self.info


def instance_split(instance: Mapping[str, Any]) -> str:
    """The split an instance belongs to, from a stable hash of its canonical JSON."""
    canonical = json.dumps(instance, sort_keys=True, separators=(",", ":"))
    bucket = int(hashlib.sha256(canonical.encode()).hexdigest()[:8], 16) % 100
    for split, buckets in _SPLIT_BUCKETS.items():
        if bucket in buckets:
            return split
    raise AssertionError("split buckets must cover 0..99")


class TextEnv(ABC):
    """Base class for built-in environments.

    Subclasses set `id`, implement `generate_instance`, `_reset_instance`, `_step`,
    `state_key`, `score`, `is_success`, `oracle_action`, `admissible_actions`, and
    describe the task in `instruction`. The base class handles step counting,
    truncation, the `info` dictionary, instance files and split seeds.
    """

    id: ClassVar[str]
    default_max_steps: ClassVar[int]
    #: Plain-language scoring criteria (used by critics and reports).
    criteria: ClassVar[str] = ""

    def __init__(self, *, max_steps: int | None = None, instances: str | None = None, **kwargs: Any):
        self.max_steps = int(max_steps) if max_steps is not None else self.default_max_steps
        if self.max_steps < 1:
            raise EnvError("max_steps must be >= 1")
        self.kwargs = dict(kwargs)
        self._instances: dict[int, dict[str, Any]] | None = None
        if instances is not None:
            from hindsight.envs.instances import load_instances

            self._instances = load_instances(instances, env_id=self.id)
        self.seed: int | None = None
        self.instance: dict[str, Any] | None = None
        self.steps_taken = 0
        self.done = False

    # -- to implement -------------------------------------------------------------
    @abstractmethod
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A JSON-serialisable task instance built deterministically from `seed`."""

    @abstractmethod
    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        """Set the internal state to the start of `instance`."""

    @abstractmethod
    def _step(self, action: str) -> tuple[bool, bool, str]:
        """Apply an action. Returns (valid, terminated, feedback sentence)."""

    @abstractmethod
    def render(self) -> str:
        """The observation of the current state, in words (and a picture where useful)."""

    @abstractmethod
    def state_key(self) -> str:
        """Canonical, deterministic string of the true state."""

    @abstractmethod
    def score(self) -> float:
        """Task score in [0, 1] for the current state."""

    @abstractmethod
    def is_success(self) -> bool:
        """Whether the task is solved in the current state."""

    @abstractmethod
    def oracle_action(self) -> str:
        """An optimal next action from the current state."""

    @abstractmethod
    def admissible_actions(self) -> Sequence[str]:
        """Legal actions from the current state."""

    @property
    @abstractmethod
    def instruction(self) -> str:
        """Task description for the current instance (rules and action syntax)."""

    # -- contract ---------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.seed = int(seed)
        if self._instances is not None:
            if self.seed not in self._instances:
                raise EnvError(f"{self.id}: seed {seed} is not in the loaded instance file")
            self.instance = self._instances[self.seed]
        else:
            self.instance = self.generate_instance(self.seed)
        self._reset_instance(self.instance)
        self.steps_taken = 0
        self.done = False
        return self.render(), self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.instance is None:
            raise EnvError(f"{self.id}: call reset() before step()")
        if self.done:
            raise EnvError(f"{self.id}: the episode is over; call reset()")
        before = self.score()
        valid, terminated, feedback = self._step(action if isinstance(action, str) else "")
        self.steps_taken += 1
        terminated = terminated or self.is_success()
        truncated = not terminated and self.steps_taken >= self.max_steps
        self.done = terminated or truncated
        reward = self.score() - before
        observation = f"{feedback}\n{self.render()}" if feedback else self.render()
        return observation, reward, terminated, truncated, self._info(valid=valid)

    def _info(self, *, valid: bool) -> dict[str, Any]:
        return {
            "score": float(self.score()),
            "success": bool(self.is_success()),
            "valid": bool(valid),
            "state_key": self.state_key(),
            "admissible_actions": list(self.admissible_actions()),
        }

    # -- splits -----------------------------------------------------------------
    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """The first `n` seeds (from `start`) whose instances belong to `split`."""
        if split not in SPLITS:
            raise EnvError(f"unknown split {split!r}; expected one of {SPLITS}")
        if self._instances is not None:
            seeds = [s for s in sorted(self._instances) if s >= start]
            if len(seeds) < n:
                raise EnvError(f"{self.id}: the instance file holds {len(seeds)} seeds, {n} requested")
            return seeds[:n]
        return list(_take(self._seeds_in(split, start), n))

    def _seeds_in(self, split: str, start: int) -> Iterator[int]:
        seed = start
        while True:
            if instance_split(self.generate_instance(seed)) == split:
                yield seed
            seed += 1


def _take(iterator: Iterator[int], n: int) -> Iterator[int]:
    for _, item in zip(range(n), iterator):
        yield item
