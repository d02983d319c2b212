"""An environment served by `hindsight serve-env`, behind the same contract as a local one.

    env = make("http://127.0.0.1:8765/frozenlake", size=5)   # or make("frozenlake", server=URL)
    obs, info = env.reset(seed=3)

Every command takes `--env http://HOST:PORT/ID` in place of an id. The client keeps the
observable part of the contract (`reset`, `step`, `oracle_action`, `admissible_actions`,
`split_seeds`, `config`, ...) and the server runs the environment (`hindsight.envs.server`).

The environment's description is fetched once per server and keyword set, so building one
client per episode (as the rollout engine does) costs no request. A session on the server
opens at the first `reset` and closes when the episode ends.

Failures: a bad keyword or misuse is `EnvError` with the server's own message. A server that
cannot be reached, times out, crashed or lost the session raises `EnvFailure`. A `step` is
never retried here, since the server may have applied it before the answer was lost; the
rollout engine instead replays the episode on a fresh instance (the contract's determinism
makes that exact). Requests that change nothing (the description, splits) are retried.
Timeouts: `HINDSIGHT_ENV_TIMEOUT` seconds per request (default 120).
"""

from __future__ import annotations

import copy
import os
import threading
import time
import weakref
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

import httpx

from hindsight.envs.base import EnvError, EnvFailure, canonical_json

TIMEOUT_ENV = "HINDSIGHT_ENV_TIMEOUT"
_DEFAULT_TIMEOUT = 120.0
#: Attempts of an idempotent request, and how long a client waits for a free instance.
_ATTEMPTS = 3
_BUSY_WAIT = 60.0

_clients: dict[str, httpx.Client] = {}
_specs: dict[tuple[str, str, str], dict[str, Any]] = {}
_lock = threading.Lock()


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
    from hindsight.envs.actors import parse_ray_env

    url = parse_env_url(env)
    return url[1] if url else parse_ray_env(env) or env


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else _DEFAULT_TIMEOUT
    except ValueError:
        raise EnvError(f"${TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise EnvError(f"${TIMEOUT_ENV} must be positive, got {raw!r}")
    return value


def _client(server: str) -> httpx.Client:
    with _lock:
        client = _clients.get(server)
        if client is None:
            client = _clients[server] = httpx.Client(base_url=server, timeout=httpx.Timeout(_timeout(), connect=10.0))
        return client


def request(server: str, method: str, path: str, body: Mapping[str, Any] | None = None, *,
            idempotent: bool = False) -> dict[str, Any]:
    """One call to the server, its errors mapped to EnvError (usage) or EnvFailure (the rest)."""
    client = _client(server)
    attempts = _ATTEMPTS if idempotent else 1
    busy_until = time.monotonic() + _BUSY_WAIT
    attempt = 0
    while True:
        attempt += 1
        try:
            response = client.request(method, path, json=body)
        except httpx.TimeoutException:
            if attempt < attempts:
                continue
            raise EnvFailure(f"the env server at {server} did not answer {method} {path} within "
                             f"{_timeout():g} s (${TIMEOUT_ENV})") from None
        except httpx.TransportError as exc:
            if attempt < attempts:
                time.sleep(0.2 * attempt)
                continue
            raise EnvFailure(f"cannot reach the env server at {server} ({type(exc).__name__}: {exc}); "
                             "is `hindsight serve-env` running there?") from None
        if response.status_code == 200:
            return response.json()
        try:
            answer = response.json()
            message, kind = str(answer["error"]), str(answer.get("kind", ""))
        except (ValueError, KeyError, TypeError):
            message, kind = f"HTTP {response.status_code}: {response.text[:200]}", ""
        if kind == "busy" and time.monotonic() < busy_until:
            time.sleep(0.5)
            continue
        if kind == "usage":
            raise EnvError(message)
        raise EnvFailure(f"env server {server}: {message}")


def _spec(server: str, env_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    key = (server, env_id, canonical_json(kwargs))
    spec = _specs.get(key)
    if spec is None:
        spec = request(server, "POST", f"/{env_id}/spec", {"kwargs": dict(kwargs)}, idempotent=True)
        with _lock:
            _specs[key] = spec
    return spec


def _close_quietly(server: str, env_id: str, session: str) -> None:
    try:
        request(server, "DELETE", f"/{env_id}/sessions/{session}")
    except EnvError:
        pass  # the server reclaims sessions that idle past its timeout


class ProxyEnv:
    """What an environment living in another process shares, whatever carries its calls: the
    spec, read once, and the last `info` it sent, which answers `state_key`, `score`,
    `is_success` and `admissible_actions` without another round trip. Subclasses open and
    forget their session and set `lost_session`, the error of a session the other side lost.
    """

    instance_file = None  # instance files are read on the other side (`instances=PATH` goes there)
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


class RemoteEnv(ProxyEnv):
    """A served environment; see the module docstring."""

    lost_session = "the server session was lost"

    def __init__(self, server: str, env_id: str, **kwargs: Any):
        self.server = server.rstrip("/")
        self.kwargs = dict(kwargs)
        spec = _spec(self.server, env_id, self.kwargs)
        self._adopt(spec)

    @property
    def config(self) -> dict[str, Any]:
        """Every keyword `make` needs to reach the same environment again, the server included."""
        return {**self._config, "server": self.server}

    @property
    def url(self) -> str:
        return f"{self.server}/{self.id}"

    # -- episodes --------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        seed = int(seed)
        for attempt in (1, 2):
            if self._session is None:
                self._open()
            try:
                answer = request(self.server, "POST", f"/{self.id}/sessions/{self._session}/reset", {"seed": seed})
                break
            except EnvFailure:
                self._forget_session()  # a reset is safe to repeat on a new session
                if attempt == 2:
                    raise
        self.seed, self.steps_taken, self.done = seed, 0, False
        self._info = answer["info"]
        return answer["observation"], answer["info"]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._require_live("step")
        action = action if isinstance(action, str) else ""
        try:
            answer = request(self.server, "POST", f"/{self.id}/sessions/{self._session}/step", {"action": action})
        except EnvFailure:
            self._forget_session()
            raise
        self.steps_taken += 1
        self._info = answer["info"]
        terminated, truncated = bool(answer["terminated"]), bool(answer["truncated"])
        self.done = terminated or truncated
        if self.done:
            self.close()
        return answer["observation"], float(answer["reward"]), terminated, truncated, answer["info"]

    def oracle_action(self) -> str:
        self._require_live("oracle_action")
        return request(self.server, "GET", f"/{self.id}/sessions/{self._session}/oracle")["action"]

    def __deepcopy__(self, memo: dict) -> RemoteEnv:
        """A twin in the same state on its own server session (the server copies the instance)."""
        twin = copy.copy(self)
        twin._closer = None
        if self._session is not None:
            twin._session = request(self.server, "POST", f"/{self.id}/sessions/{self._session}/fork")["session"]
            twin._closer = weakref.finalize(twin, _close_quietly, self.server, self.id, twin._session)
        twin._info = copy.deepcopy(self._info, memo)
        twin.kwargs = copy.deepcopy(self.kwargs, memo)
        return twin

    # -- tasks -----------------------------------------------------------------------
    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        body = {"kwargs": self.kwargs, "split": split, "n": int(n), "start": int(start)}
        return list(request(self.server, "POST", f"/{self.id}/split_seeds", body, idempotent=True)["seeds"])

    def seed_split(self, seed: int) -> str:
        body = {"kwargs": self.kwargs, "seed": int(seed)}
        return str(request(self.server, "POST", f"/{self.id}/seed_split", body, idempotent=True)["split"])

    def instance_for(self, seed: int) -> dict[str, Any]:
        body = {"kwargs": self.kwargs, "seed": int(seed)}
        return dict(request(self.server, "POST", f"/{self.id}/instance", body, idempotent=True)["instance"])

    generate_instance = instance_for

    # -- internals -------------------------------------------------------------------
    def _open(self) -> None:
        self._session = request(self.server, "POST", f"/{self.id}/sessions", {"kwargs": self.kwargs})["session"]
        self._closer = weakref.finalize(self, _close_quietly, self.server, self.id, self._session)

    def _forget_session(self) -> None:
        if self._closer is not None:
            self._closer.detach()
        self._session, self._closer = None, None

