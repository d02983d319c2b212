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
from typing import Any, Mapping

import httpx

from hindsight.envs.base import canonical_json
from hindsight.envs.contract import EnvError, EnvFailure
from hindsight.envs.proxy import ProxyEnv

TIMEOUT_ENV = "HINDSIGHT_ENV_TIMEOUT"
_DEFAULT_TIMEOUT = 120.0
#: Attempts of an idempotent request, and how long a client waits for a free instance.
_ATTEMPTS = 3
_BUSY_WAIT = 60.0

_clients: dict[str, httpx.Client] = {}
_specs: dict[tuple[str, str, str], dict[str, Any]] = {}
_lock = threading.Lock()


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

