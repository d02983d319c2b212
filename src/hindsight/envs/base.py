"""The text-environment contract every Hindsight environment follows.

Gymnasium-style, text in and text out:

    obs, info = env.reset(seed)
    obs, reward, terminated, truncated, info = env.step(action)

`info` always carries `score` (float in [0, 1]), `success` (bool), `valid` (was the
action legal), `state_key` (canonical string of the true state) and
`admissible_actions` (list of str; empty once the episode is over). `terminated` means
the episode ended inside the task (goal reached or a fatal move); `truncated` means the
step budget ran out. The reward of a step is the change in score it caused.

Any string is a legal input to `step`: an action the environment cannot parse or apply
is answered with feedback, counts as a step, sets `valid` to False and leaves the state
unchanged. Only calling `step` before `reset` or after the episode ended raises.

Determinism is part of the contract: the same seed and the same action prefix
reproduce the same observations and state keys, in any process.
`hindsight.envs.checker` verifies it. The contract itself, the members and errors every
environment shares whatever it subclasses, is `hindsight.envs.contract`.

Task instances come from a seeded generator. Which split a seed belongs to is decided by
a hash of the generated *instance content*, so train, validation and test never share a
task even when two seeds happen to generate the same puzzle. An environment made with
`instances=FILE` plays the instances stored in that file instead, and each seed keeps
the split the file records for it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from hindsight.envs.contract import SPLITS, EnvError
from hindsight.envs.instances import InstanceFile, read_instance_file

# Share of instance-hash buckets per split, out of 100.
_SPLIT_BUCKETS = {"test": range(0, 10), "validation": range(10, 20), "train": range(20, 100)}

# How far `split_seeds` scans past `start`, per requested seed, before it concludes the
# generator cannot produce enough distinct instances of a split (tiny difficulty settings).
_SCAN_PER_SEED = 100
_SCAN_MIN = 2000

# Per process: (class, generator kwargs, seed) -> (content digest, split). Generating an
# instance can cost milliseconds (Sudoku checks uniqueness), and evaluation code asks for
# the same split seeds many times.
_SPLIT_CACHE: dict[tuple[str, str, int], tuple[str, str]] = {}


def canonical_json(instance: Mapping[str, Any]) -> str:
    """The one JSON spelling of an instance used for hashing and comparison."""
    return json.dumps(instance, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _bucket_split(digest: str) -> str:
    bucket = int(digest[:8], 16) % 100
    for split, buckets in _SPLIT_BUCKETS.items():
        if bucket in buckets:
            return split
    raise AssertionError("split buckets must cover 0..99")


def instance_digest(instance: Mapping[str, Any]) -> str:
    """SHA-256 of the instance's canonical JSON, in hex."""
    return hashlib.sha256(canonical_json(instance).encode()).hexdigest()


def instance_split(instance: Mapping[str, Any]) -> str:
    """The split an instance belongs to, from a stable hash of its canonical JSON."""
    return _bucket_split(instance_digest(instance))


class TextEnv(ABC):
    """Base class for built-in environments; it implements `hindsight.envs.contract.Env`.

    Subclasses set `id`, `default_max_steps`, `description` and `criteria`; pass their
    difficulty knobs to `super().__init__` as keywords (they become `self.kwargs`); and
    implement `generate_instance`, `_reset_instance`, `_step`, `render`, `state_key`,
    `score`, `is_success`, `_oracle_action`, `_admissible_actions` and `instruction`.
    The base class handles step counting, truncation, rewards, the `info` dictionary,
    instance files and split seeds.

    `generate_instance` must depend only on the seed and the knobs in `self.kwargs`
    (never on `max_steps`), and must return plain JSON values.
    """

    id: ClassVar[str]
    default_max_steps: ClassVar[int]
    #: One line for listings.
    description: ClassVar[str] = ""
    #: Plain-language scoring criteria (used by critics and reports).
    criteria: ClassVar[str] = ""
    #: True when `oracle_action` plans from any live state; False for a recorded gold path,
    #: which can only continue an episode that has not undone what the path needs (the
    #: checker then reports midway failures as notes, not violations).
    oracle_replans: ClassVar[bool] = True
    #: False for an env that cannot know its goal (a site that reveals it only at the end):
    #: `oracle_action` then raises EnvError and the checker skips the oracle checks.
    has_oracle: ClassVar[bool] = True

    def __init__(
        self,
        *,
        max_steps: int | None = None,
        instances: str | os.PathLike[str] | InstanceFile | None = None,
        **kwargs: Any,
    ):
        self.kwargs: dict[str, Any] = dict(kwargs)
        self.max_steps = self._default_max_steps() if max_steps is None else _positive_int("max_steps", max_steps)
        self.instance_file: InstanceFile | None = None
        if instances is not None:
            loaded = instances if isinstance(instances, InstanceFile) else read_instance_file(instances)
            if loaded.env_id != self.id:
                raise EnvError(f"{loaded.path}: the file holds {loaded.env_id!r} instances, not {self.id!r}")
            for record in loaded.records:
                try:
                    self.check_instance(record.instance)
                except EnvError as exc:
                    raise EnvError(f"{loaded.path}: seed {record.seed}: {exc}") from None
            self.instance_file = loaded
        self.seed: int | None = None
        self.instance: dict[str, Any] | None = None
        self.steps_taken = 0
        self.done = False

    # -- to implement -------------------------------------------------------------
    @abstractmethod
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A JSON-serialisable task instance built deterministically from `seed`."""

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        """Raise EnvError when a stored instance cannot be played by this environment."""

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
    def _oracle_action(self) -> str:
        """An action that makes progress towards the goal from a live state."""

    @abstractmethod
    def _admissible_actions(self) -> list[str]:
        """Legal actions from a live state, in a fixed order."""

    @property
    @abstractmethod
    def instruction(self) -> str:
        """The rules and the exact action syntax (independent of the instance)."""

    def _default_max_steps(self) -> int:
        """The step budget when the caller gives none; may depend on `self.kwargs`."""
        return self.default_max_steps

    # -- contract ---------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """Every keyword needed to rebuild this environment with `make`."""
        config = {**self.kwargs, "max_steps": self.max_steps}
        if self.instance_file is not None:
            config["instances"] = self.instance_file.path
        return config

    def instance_for(self, seed: int) -> dict[str, Any]:
        """The instance `reset(seed)` plays: from the instance file if one is loaded."""
        seed = int(seed)
        if self.instance_file is not None:
            record = self.instance_file.by_seed().get(seed)
            if record is None:
                raise EnvError(f"{self.id}: seed {seed} is not in {self.instance_file.path}")
            return copy.deepcopy(record.instance)
        return self.generate_instance(seed)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.seed = int(seed)
        self.instance = self.instance_for(self.seed)
        # The subclass gets its own copy so nothing it does can alter the stored instance.
        self._reset_instance(copy.deepcopy(self.instance))
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
        terminated = bool(terminated or self.is_success())
        truncated = not terminated and self.steps_taken >= self.max_steps
        self.done = terminated or truncated
        reward = float(self.score() - before)
        observation = f"{feedback}\n{self.render()}" if feedback else self.render()
        return observation, reward, terminated, truncated, self._info(valid=valid)

    def oracle_action(self) -> str:
        """An action from the built-in planner that leads to success from the current state."""
        self._require_live("oracle_action")
        return self._oracle_action()

    def admissible_actions(self) -> Sequence[str]:
        """Legal actions from the current state; empty once the episode is over."""
        if self.instance is None:
            raise EnvError(f"{self.id}: call reset() before admissible_actions()")
        return [] if self.done else self._admissible_actions()

    def close(self) -> None:
        """Release what the environment holds; a pure-Python environment holds nothing.

        Environments with a process or a connection behind them override it. Like theirs, it
        may be called more than once, and `reset` after it starts afresh.
        """

    def _require_live(self, what: str) -> None:
        if self.instance is None:
            raise EnvError(f"{self.id}: call reset() before {what}()")
        if self.done:
            raise EnvError(f"{self.id}: the episode is over; {what}() has nothing to act on")

    def _info(self, *, valid: bool) -> dict[str, Any]:
        return {
            "score": float(self.score()),
            "success": bool(self.is_success()),
            "valid": bool(valid),
            "state_key": self.state_key(),
            "admissible_actions": list(self.admissible_actions()),
        }

    # -- splits -----------------------------------------------------------------
    def seed_split(self, seed: int) -> str:
        """The split of `seed`: recorded in the instance file, else hashed from content."""
        if self.instance_file is not None:
            record = self.instance_file.by_seed().get(int(seed))
            if record is None:
                raise EnvError(f"{self.id}: seed {seed} is not in {self.instance_file.path}")
            return record.split
        return self._digest_and_split(int(seed))[1]

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """The first `n` seeds (from `start`) of `split`, each with a distinct instance.

        Seeds whose instance repeats one already chosen are skipped, so an evaluation
        over these seeds never counts the same task twice. With an instance file the
        seeds are the file's seeds recorded under `split`, in ascending order.
        """
        if split not in SPLITS:
            raise EnvError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        n = int(n)
        if n < 0:
            raise EnvError("the number of seeds must be >= 0")
        if self.instance_file is not None:
            seeds = [r.seed for r in self.instance_file.records if r.split == split and r.seed >= start]
            seeds.sort()
            if len(seeds) < n:
                raise EnvError(
                    f"{self.instance_file.path} holds {len(seeds)} {split} instances"
                    f"{f' with seed >= {start}' if start else ''}; {n} requested"
                )
            return seeds[:n]
        chosen: list[int] = []
        seen: set[str] = set()
        limit = start + max(_SCAN_MIN, _SCAN_PER_SEED * n)
        seed = start
        while len(chosen) < n:
            if seed >= limit:
                raise EnvError(
                    f"{self.id}: seeds {start}..{limit - 1} give only {len(chosen)} distinct {split} instances "
                    f"with {self.kwargs}; ask for fewer or raise the difficulty"
                )
            digest, seed_split = self._digest_and_split(seed)
            if seed_split == split and digest not in seen:
                seen.add(digest)
                chosen.append(seed)
            seed += 1
        return chosen

    def _digest_and_split(self, seed: int) -> tuple[str, str]:
        key = (f"{type(self).__module__}.{type(self).__qualname__}", canonical_json(self.kwargs), seed)
        cached = _SPLIT_CACHE.get(key)
        if cached is None:
            digest = instance_digest(self.generate_instance(seed))
            cached = _SPLIT_CACHE[key] = (digest, _bucket_split(digest))
        return cached


def _positive_int(name: str, value: Any) -> int:
    number = int_knob(name, value)
    if number < 1:
        raise EnvError(f"{name} must be >= 1, got {number}")
    return number


def int_knob(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """Read an integer keyword (ints, or strings such as "4" from the command line)."""
    if isinstance(value, bool):
        raise EnvError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise EnvError(f"{name} must be an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise EnvError(f"{name} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise EnvError(f"{name} must be between {low} and {high}, got {value}")
    return value


def float_knob(name: str, value: Any, low: float, high: float) -> float:
    """Read a float keyword within [low, high]."""
    if isinstance(value, bool):
        raise EnvError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EnvError(f"{name} must be a number, got {value!r}") from None
    if not low <= number <= high:
        raise EnvError(f"{name} must be between {low} and {high}, got {number}")
    return number


def choice_knob(name: str, value: Any, choices: Sequence[str]) -> str:
    """Read a keyword that takes one of a few words (case-insensitive)."""
    text = str(value).strip().lower()
    if text not in choices:
        raise EnvError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return text


def echo(action: str, limit: int = 40) -> str:
    """An action quoted for feedback, shortened so a huge input does not flood the observation."""
    flat = " ".join(action.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return json.dumps(flat, ensure_ascii=False)
