"""The environment contract, written once: what every environment offers and how it fails.

    obs, info = env.reset(seed)
    obs, reward, terminated, truncated, info = env.step(action)
    env.close()

`Env` is a `typing.Protocol`: an environment implements it by having its members, whatever
it subclasses. `TextEnv` (built-in environments) and the clients of environments in other
processes (`RemoteEnv`, `RayEnv`) implement it; the rollout engine, the agent's roles and
`hindsight envs check` use nothing else. The privileged part a scripted policy may ask of the
live environment (`oracle_action`, `admissible_actions`) is `hindsight.types.EnvView`, which
`Env` extends: the model layer sees that part without importing this one.

`info` always carries `INFO_KEYS`. Misuse of an environment (a bad id, keyword or instance
file, `step` before `reset`) raises `EnvError`; a failure of the process or server behind it
raises `EnvFailure`. docs/envs.md states the rules in full.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from hindsight.types import EnvView

SPLITS = ("train", "validation", "test")

INFO_KEYS = ("score", "success", "valid", "state_key", "admissible_actions")


class EnvError(Exception):
    """A user-facing environment error (bad id, bad keyword, bad instance file, misuse)."""


class EnvFailure(EnvError):
    """The environment's process or server failed (a crash, a hang, a lost connection).

    Not a mistake in the episode: a fresh instance replaying the same actions reaches the
    same state (determinism), so the rollout engine recovers from it that way.
    """


@runtime_checkable
class Env(EnvView, Protocol):
    """An environment: episodes by seed, text actions, fixed splits, and a `close` for what it holds.

    Data members are read-only properties here, so a class attribute (TextEnv's `id`) and an
    instance attribute (a proxy's `id`, read from its server) both implement them.
    """

    @property
    def id(self) -> str:
        """The registered id (`make(id)` builds it)."""

    @property
    def description(self) -> str:
        """One line for listings."""

    @property
    def criteria(self) -> str:
        """How the task is scored, in plain language (for critics and reports)."""

    @property
    def instruction(self) -> str:
        """The rules and the exact action syntax (independent of the instance)."""

    @property
    def max_steps(self) -> int:
        """The step budget of an episode: the step that reaches it is truncated."""

    @property
    def config(self) -> Mapping[str, Any]:
        """Every keyword `make` needs to rebuild this environment."""

    @property
    def oracle_replans(self) -> bool:
        """True when `oracle_action` plans from any live state; False for a recorded gold path."""

    @property
    def has_oracle(self) -> bool:
        """False when the environment cannot know its goal: `oracle_action` then raises EnvError."""

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (terminated or truncated)."""

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        """Start the episode of task `seed`: (observation, info)."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Take an action (any string): (observation, reward, terminated, truncated, info)."""

    def close(self) -> None:
        """Release what the environment holds (a process, a session, a connection).

        Calling it again does nothing, and a later `reset` starts afresh.
        """

    def state_key(self) -> str:
        """Canonical, deterministic string of the true state."""

    def score(self) -> float:
        """Task score in [0, 1] of the current state."""

    def is_success(self) -> bool:
        """Whether the task is solved in the current state."""

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """The first `n` seeds (from `start`) of `split`, each with a distinct instance."""

    def seed_split(self, seed: int) -> str:
        """The split task `seed` belongs to."""

    def instance_for(self, seed: int) -> dict[str, Any]:
        """The JSON instance `reset(seed)` plays."""
