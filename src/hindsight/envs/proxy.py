"""What environments in other processes share: their addresses and the client they build on.

An environment may run in this process (`make("frozenlake")`), on a server started by
`hindsight serve-env` (`make("http://HOST:PORT/frozenlake")`, `hindsight.envs.remote`) or in
Ray actors (`make("ray:frozenlake")`, `hindsight.envs.actors`). This module reads those
addresses, and holds `ProxyEnv`, what both clients of an environment elsewhere have in common.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from hindsight.envs.contract import EnvError, EnvFailure

#: The prefix of an environment id that runs the environment in Ray actors.
RAY_PREFIX = "ray:"


def parse_env_url(text: str) -> tuple[str, str] | None:
    """(server, env id) of `http(s)://HOST:PORT[/PREFIX]/ID`, or None when `text` is not a URL."""
    if not isinstance(text, str) or not text.lower().startswith(("http://", "https://")):
        return None
    parts = urlsplit(text.strip())
    path = parts.path.rstrip("/")
    base, _, env_id = path.rpartition("/")
    if not parts.netloc or not env_id:
        raise EnvError(f"an environment URL looks like http://HOST:PORT/ID, got {text!r}")
    return f"{parts.scheme}://{parts.netloc}{base}", env_id


def env_label(env: str) -> str:
    """The environment id in a name made for files: the id of a URL or of `ray:ID`, else the text itself."""
    url = parse_env_url(env)
    return url[1] if url else parse_ray_env(env) or env


def parse_ray_env(text: str) -> str | None:
    """The environment id of `ray:ID`, or None when `text` does not name a Ray environment."""
    if not isinstance(text, str) or not text.lower().startswith(RAY_PREFIX):
        return None
    env_id = text[len(RAY_PREFIX):].strip()
    if not env_id:
        raise EnvError(f"a Ray environment is named ray:ID, e.g. ray:frozenlake; got {text!r}")
    return env_id


class ProxyEnv:
    """What an environment living in another process shares, whatever carries its calls: the
    spec, read once, and the last `info` it sent, which answers `state_key`, `score`,
    `is_success` and `admissible_actions` without another round trip. Subclasses open and
    forget their session and set `lost_session`, the error of a session the other side lost.
    """

    lost_session = "the session was lost"

    def _adopt(self, spec: Mapping[str, Any]) -> None:
        self.id: str = spec["id"]
        self.description: str = spec["description"]
        self.instruction: str = spec["instruction"]
        self.criteria: str = spec["criteria"]
        self.max_steps: int = int(spec["max_steps"])
        self.oracle_replans: bool = bool(spec.get("oracle_replans", True))
        self.has_oracle: bool = bool(spec.get("has_oracle", True))
        self._config: dict[str, Any] = dict(spec["config"])
        self.seed: int | None = None
        self.steps_taken = 0
        self.done = False
        self._info: dict[str, Any] | None = None
        self._session: str | None = None
        self._closer: weakref.finalize | None = None

    def admissible_actions(self) -> Sequence[str]:
        if self._info is None:
            raise EnvError(f"{self.id}: call reset() before admissible_actions()")
        return [] if self.done else list(self._info["admissible_actions"])

    def state_key(self) -> str:
        return str(self._last_info("state_key")["state_key"])

    def score(self) -> float:
        return float(self._last_info("score")["score"])

    def is_success(self) -> bool:
        return bool(self._last_info("is_success")["success"])

    def close(self) -> None:
        """Give the other side's instance back to its pool (also done when the episode ends)."""
        if self._closer is not None:
            self._closer()
        self._session, self._closer = None, None

    def _require_live(self, what: str) -> None:
        if self._info is None:
            raise EnvError(f"{self.id}: call reset() before {what}()")
        if self.done:
            raise EnvError(f"{self.id}: the episode is over; {what}() has nothing to act on")
        if self._session is None:
            raise EnvFailure(f"{self.id}: {self.lost_session}; replay the episode on a new instance")

    def _last_info(self, what: str) -> dict[str, Any]:
        if self._info is None:
            raise EnvError(f"{self.id}: call reset() before {what}()")
        return self._info
