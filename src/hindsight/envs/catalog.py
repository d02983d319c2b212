"""The built-in environments by id: registration, lookup, and building one in this process.

`hindsight.envs.make` builds any environment, here or elsewhere (a server, Ray actors); an
environment that runs in this process is built by `make_local`, which is also what a server
or an env actor runs, so serving an environment never reaches back into `make`'s dispatch.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field
from typing import Any

from hindsight.envs.base import TextEnv
from hindsight.envs.blocksworld import BlocksWorld
from hindsight.envs.contract import EnvError
from hindsight.envs.deepsearch import DeepSearch
from hindsight.envs.frozenlake import FrozenLake
from hindsight.envs.household import Household
from hindsight.envs.instances import InstanceFile, read_instance_file
from hindsight.envs.scienceworld import ScienceWorld
from hindsight.envs.sudoku import Sudoku
from hindsight.envs.webshop import WebShop
from hindsight.envs.webshop_site import WebShopSite

#: Keywords every environment accepts, on top of its own knobs.
COMMON_KWARGS = ("max_steps", "instances")

_REGISTRY: dict[str, type[TextEnv]] = {}


@dataclass(frozen=True)
class EnvSpec:
    """What `list_envs` reports about one registered environment.

    `defaults` are its own keyword arguments with their default values; `max_steps` is
    the step budget under those defaults (some environments scale it with difficulty).
    """

    id: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    max_steps: int = 0


def register(cls: type[TextEnv]) -> type[TextEnv]:
    """Add an environment class to the registry under `cls.id`; usable as a decorator."""
    if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
        raise EnvError(f"only TextEnv subclasses can be registered, got {cls!r}")
    env_id = getattr(cls, "id", None)
    if not isinstance(env_id, str) or not env_id or env_id != env_id.strip().lower():
        raise EnvError(f"{cls.__name__}.id must be a non-empty lower-case string")
    existing = _REGISTRY.get(env_id)
    if existing is not None and existing is not cls:
        raise EnvError(f"environment id {env_id!r} is already registered by {existing.__qualname__}")
    _REGISTRY[env_id] = cls
    return cls


def env_class(env_id: str) -> type[TextEnv]:
    """The class registered under `env_id` (case-insensitive)."""
    key = str(env_id).strip().lower()
    cls = _REGISTRY.get(key)
    if cls is None:
        known = sorted(_REGISTRY)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise EnvError(f"unknown environment {env_id!r}.{hint} Known: {', '.join(known)}.")
    return cls


def _own_kwargs(cls: type[TextEnv]) -> dict[str, Any]:
    """The class's own keyword arguments and their declared defaults."""
    parameters = inspect.signature(cls.__init__).parameters
    return {
        name: p.default
        for name, p in parameters.items()
        if name != "self" and name not in COMMON_KWARGS and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def make_local(env_id: str, **kwargs: Any) -> TextEnv:
    """Build a registered environment in this process.

    Keywords are the environment's knobs plus `max_steps` and `instances` (the path of
    an instance file; its header's kwargs become defaults that explicit keywords override).
    """
    cls = env_class(env_id)
    accepted = [*_own_kwargs(cls), *COMMON_KWARGS]
    unknown = [key for key in kwargs if key not in accepted]
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise EnvError(f"{cls.id}: unknown keyword {unknown[0]!r}{hint}; accepted: {', '.join(accepted)}")
    if kwargs.get("instances") is not None:
        loaded = kwargs["instances"]
        if not isinstance(loaded, InstanceFile):
            loaded = read_instance_file(loaded, env_id=cls.id)
        stored = {key: value for key, value in loaded.kwargs.items() if key in accepted and key != "instances"}
        kwargs = {**stored, **kwargs, "instances": loaded}
    return cls(**kwargs)


def get_spec(env_id: str) -> EnvSpec:
    """The listing entry of one environment."""
    cls = env_class(env_id)
    doc = cls.description or (inspect.getdoc(cls) or "").split("\n", 1)[0]
    try:
        sample = cls()
    except EnvError as exc:  # a missing package or Java: the listing says so instead of failing
        return EnvSpec(id=cls.id, description=f"{doc} [unavailable here: {exc}]", defaults=_own_kwargs(cls),
                       max_steps=cls.default_max_steps)
    return EnvSpec(id=cls.id, description=doc, defaults=dict(sample.kwargs), max_steps=sample.max_steps)


def list_envs() -> list[EnvSpec]:
    """Every registered environment, sorted by id."""
    return [get_spec(env_id) for env_id in sorted(_REGISTRY)]


for _cls in (FrozenLake, BlocksWorld, Sudoku, WebShop, WebShopSite, DeepSearch, ScienceWorld, Household):
    register(_cls)
