"""Environments that break the contract on purpose, so the checker's failures can be tested.

They live in their own importable module (not a test file) because the checker's
hash-seed probe rebuilds the environment class inside a subprocess.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hindsight.envs import FrozenLake

_counter = itertools.count()


class DriftingKey(FrozenLake):
    """The state key carries a counter, so no two resets agree."""

    id = "test-drifting-key"

    def state_key(self) -> str:
        return f"{super().state_key()};n={next(_counter)}"


class SetOrderKey(FrozenLake):
    """The state key lists names in set order, which follows the process's string hash seed."""

    id = "test-set-order-key"
    _NAMES = (
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
    )

    def state_key(self) -> str:
        return super().state_key() + ";" + ",".join(set(self._NAMES))


class CrashOnJunk(FrozenLake):
    """Raises on any action it cannot parse instead of answering with feedback."""

    id = "test-crash-on-junk"

    def _step(self, action: str) -> tuple[bool, bool, str]:
        valid, terminated, feedback = super()._step(action)
        if not valid:
            raise ValueError("cannot parse the action")
        return valid, terminated, feedback


class JunkMovesPlayer(FrozenLake):
    """Accepts any unreadable action as a move down: junk counts as valid and changes the state."""

    id = "test-junk-moves"

    def _step(self, action: str) -> tuple[bool, bool, str]:
        valid, terminated, feedback = super()._step(action)
        if not valid:
            return super()._step("down")
        return valid, terminated, feedback


class LazyOracle(FrozenLake):
    """The oracle always says "up", which rarely reaches the goal."""

    id = "test-lazy-oracle"

    def _oracle_action(self) -> str:
        return "up"


class OverScored(FrozenLake):
    """Reports a score above 1 once the player reaches the goal."""

    id = "test-over-scored"

    def score(self) -> float:
        return 2.0 if self.is_success() else 0.0


class GoldPathLake(FrozenLake):
    """The oracle replays the shortest path recorded at reset, like a benchmark's gold path:
    after a detour it walks the path from the wrong cell. `replans` says whether it claims to plan."""

    id = "test-gold-path-lake"
    oracle_replans = False

    def _reset_instance(self, instance):
        super()._reset_instance(instance)
        self._gold = []
        while not self.is_success():
            move = super()._oracle_action()
            self._gold.append(move)
            self._step(move)
        super()._reset_instance(instance)

    def _oracle_action(self) -> str:
        return self._gold[min(self.steps_taken, len(self._gold) - 1)]


class GoldPathClaimingToPlan(GoldPathLake):
    id = "test-gold-path-claiming-to-plan"
    oracle_replans = True


class ContractLake:
    """FrozenLake behind the contract alone: it wraps one and subclasses nothing, so the checker
    must accept it for having the contract's members (`hindsight.envs.contract.Env`)."""

    id = "test-contract-lake"
    description = "FrozenLake, wrapped"
    oracle_replans = True
    has_oracle = True

    def __init__(self, **kwargs: Any):
        self._lake = FrozenLake(**kwargs)
        self.closes = 0

    @property
    def criteria(self) -> str:
        return self._lake.criteria

    @property
    def instruction(self) -> str:
        return self._lake.instruction

    @property
    def max_steps(self) -> int:
        return self._lake.max_steps

    @property
    def config(self) -> dict[str, Any]:
        return self._lake.config

    @property
    def done(self) -> bool:
        return self._lake.done

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return self._lake.reset(seed)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._lake.step(action)

    def close(self) -> None:
        self.closes += 1

    def state_key(self) -> str:
        return self._lake.state_key()

    def score(self) -> float:
        return self._lake.score()

    def is_success(self) -> bool:
        return self._lake.is_success()

    def oracle_action(self) -> str:
        return self._lake.oracle_action()

    def admissible_actions(self) -> Sequence[str]:
        return self._lake.admissible_actions()

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        return self._lake.split_seeds(split, n, start)

    def seed_split(self, seed: int) -> str:
        return self._lake.seed_split(seed)

    def instance_for(self, seed: int) -> dict[str, Any]:
        return self._lake.instance_for(seed)


class StickyClose(FrozenLake):
    """`close` ends the lake for good: the next reset fails, as a process that cannot be started again would."""

    id = "test-sticky-close"

    def close(self) -> None:
        self.closed = True

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        if getattr(self, "closed", False):
            raise RuntimeError("closed for good")
        return super().reset(seed)
