"""Text environments behind one contract, and the registry that builds them by id.

    from hindsight.envs import make
    env = make("frozenlake", size=6, holes="blocking")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("right")
    env.close()

The contract is `hindsight.envs.contract.Env` (described in docs/envs.md); built-in
environments subclass `hindsight.envs.base.TextEnv`, and `hindsight.envs.catalog` registers them.
"""

from __future__ import annotations

from typing import Any

from hindsight.envs.base import TextEnv, instance_split
from hindsight.envs.blocksworld import BlocksWorld
from hindsight.envs.catalog import EnvSpec, env_class, get_spec, list_envs, make_local, register
from hindsight.envs.contract import SPLITS, Env, EnvError, EnvFailure
from hindsight.envs.deepsearch import DeepSearch
from hindsight.envs.frozenlake import FrozenLake
from hindsight.envs.household import Household
from hindsight.envs.proxy import parse_env_url, parse_ray_env
from hindsight.envs.scienceworld import ScienceWorld
from hindsight.envs.sudoku import Sudoku
from hindsight.envs.webshop import WebShop
from hindsight.envs.webshop_site import WebShopSite

__all__ = [
    "SPLITS",
    "BlocksWorld",
    "DeepSearch",
    "Env",
    "EnvError",
    "EnvFailure",
    "EnvSpec",
    "FrozenLake",
    "Household",
    "ScienceWorld",
    "Sudoku",
    "TextEnv",
    "WebShop",
    "WebShopSite",
    "env_class",
    "get_spec",
    "instance_split",
    "list_envs",
    "make",
    "register",
]


def make(env_id: str, **kwargs: Any) -> Env:
    """Build a registered environment.

    Keywords are the environment's knobs plus `max_steps` and `instances` (the path of
    an instance file; its header's kwargs become defaults that explicit keywords override).
    An environment served by `hindsight serve-env` is reached by its URL,
    `make("http://HOST:PORT/ID", ...)`, or by `server="http://HOST:PORT"` (what a served
    environment's `config` records); it is a `hindsight.envs.remote.RemoteEnv`.
    `make("ray:ID", ...)` runs the environment in a Ray actor (`hindsight.envs.actors.RayEnv`).
    """
    ray_id = parse_ray_env(env_id)
    if ray_id is not None:
        from hindsight.envs.actors import RayEnv

        if "server" in kwargs or parse_env_url(ray_id) is not None:
            raise EnvError(f"{env_id}: an environment runs either in Ray actors or on a server, not both")
        return RayEnv(ray_id, **kwargs)
    url = parse_env_url(env_id)
    server = kwargs.pop("server", None)
    if url is not None:
        server, env_id = url
    if server is not None:
        from hindsight.envs.remote import RemoteEnv  # httpx is imported only for a served environment

        return RemoteEnv(str(server), env_id, **kwargs)
    return make_local(env_id, **kwargs)
