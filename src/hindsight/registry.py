"""Named registries: a component is one decorated function or class, found by name.

    ADVANTAGE_ESTIMATORS = Registry("advantage estimator")

    @ADVANTAGE_ESTIMATORS.register("grpo")
    def grpo_advantages(returns, ...): ...

    ADVANTAGE_ESTIMATORS.get("grpo")     # the function
    ADVANTAGE_ESTIMATORS.get("gpro")     # UnknownName: no advantage estimator 'gpro'; known: grpo, ...

In the spirit of verl's `register_adv_est` and Inspect AI's decorators: adding a component
is one decorated definition in one file, and every caller finds it by the name a config or a
command line gives. This module imports nothing of ours, so any layer may hold a registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A name that no entry of a registry has; its message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its argument; the message reads better plain
        return str(self.args[0])


class Registry(Generic[T]):
    """An ordered map from names to components, filled by decorators at import time.

    `kind` names what the registry holds ("advantage estimator", "training method"); it is
    used in error messages. Registering a name twice is an error: a silent override would make
    what a name means depend on import order.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator: add the decorated object under `name` (and any aliases); returns it unchanged."""

        def add(obj: T) -> T:
            for key in (name, *aliases):
                self.add(key, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        """Add `obj` under `name`; a name already taken raises ValueError."""
        if not name or name != name.strip():
            raise ValueError(f"{self.kind} name must be a non-empty string without surrounding spaces: {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def get(self, name: str) -> T:
        """The entry called `name`; an unknown name raises UnknownName listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self._entries) or "none"
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self._entries)})"
