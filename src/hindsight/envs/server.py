"""Any registered environment over HTTP: the app behind `hindsight serve-env ID`.

A heavy environment (a JVM, a simulator) can then run in its own process or on another
machine, and every command uses it as `--env http://HOST:PORT/ID`; `hindsight.envs.remote`
is the client. The server is FastAPI on uvicorn.

Routes (JSON in and out; ID is the served environment's id, `kwargs` its keywords, merged
over the defaults the server was started with):

    GET    /health                              status, the served id, sessions, instances
    POST   /ID/spec          {kwargs}           description, instruction, criteria, max_steps, config
    POST   /ID/split_seeds   {kwargs, split, n, start}
    POST   /ID/seed_split    {kwargs, seed}
    POST   /ID/instance      {kwargs, seed}
    POST   /ID/sessions      {kwargs}           open a session on an instance from the pool
    POST   /ID/sessions/S/reset   {seed}
    POST   /ID/sessions/S/step    {action}
    GET    /ID/sessions/S/oracle
    POST   /ID/sessions/S/fork                 a new session on a copy of this one's instance
    DELETE /ID/sessions/S                       the instance goes back to the pool

A session holds one environment instance. Instances are pooled: a closed session's instance
serves the next session with the same keywords, so an expensive start (a JVM) is paid once
per instance, not per episode. At most `pool` instances exist; a session left idle longer
than `session_timeout` is closed for the next caller.

Every error is JSON `{"error": message, "kind": kind}`:

    400 usage    a bad keyword, split or seed, or misuse (step before reset): the env's message
    404 session  an unknown or expired session
    404 usage    a request for an environment this server does not serve
    503 busy     every instance is in a session
    504 hung     the call ran past `call_timeout`
    500 crash    the environment raised

After a hung or crashed call the instance is discarded, since its state can no longer be
trusted; the client sees the session as lost and can replay its episode on a new one.
"""

from __future__ import annotations

import copy
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from hindsight.envs.base import TextEnv, canonical_json
from hindsight.envs.catalog import make_local
from hindsight.envs.contract import EnvError, EnvFailure

T = TypeVar("T")

#: Probe instances (one per keyword set) kept for spec and split queries.
_PROBES_KEPT = 16


class ServerError(Exception):
    """An error the server answers with a status code and a kind (see the module docstring)."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass
class _Session:
    key: str
    env: TextEnv
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)


def _timed(call: Callable[[], T], timeout: float, what: str) -> T:
    """Run `call` on a daemon thread and wait at most `timeout` seconds for it.

    A call that never returns keeps its thread, not the request: the caller gets 504 and the
    instance is dropped from the pool.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the request thread below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=f"env-call-{what}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ServerError(504, "hung", f"the environment's {what} did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class EnvPool:
    """The environment instances and sessions of one server (thread-safe)."""

    def __init__(self, env_id: str, defaults: dict[str, Any] | None = None, *, size: int = 64,
                 session_timeout: float = 600.0, call_timeout: float = 120.0):
        if size < 1:
            raise EnvError("the pool needs at least 1 instance")
        if session_timeout <= 0 or call_timeout <= 0:
            raise EnvError("timeouts must be positive")
        self.defaults = dict(defaults or {})
        probe = make_local(env_id, **self.defaults)  # a bad id or keyword stops the server before it starts
        self.env_id = probe.id
        self.size, self.session_timeout, self.call_timeout = size, session_timeout, call_timeout
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._probes: dict[str, TextEnv] = {canonical_json(self.defaults): probe}
        self._idle: list[tuple[str, TextEnv]] = []
        self._sessions: dict[str, _Session] = {}
        self._instances = 0  # idle ones, those in sessions, and those being built

    # -- keyword sets ----------------------------------------------------------------
    def merged(self, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        merged = {**self.defaults, **kwargs}
        return canonical_json(merged), merged

    def on_probe(self, kwargs: dict[str, Any], what: str, call: Callable[[TextEnv], T]) -> T:
        """Ask an instance kept for questions that need no episode (spec, splits, instances)."""
        key, merged = self.merged(kwargs)
        with self._probe_lock:
            env = self._probes.get(key)
            if env is None:
                env = self._guarded(lambda: make_local(self.env_id, **merged), "start")
                if len(self._probes) >= _PROBES_KEPT:
                    self._probes.pop(next(iter(self._probes)))
                self._probes[key] = env
            try:
                return self._guarded(lambda: call(env), what)
            except ServerError as exc:
                if exc.kind in ("hung", "crash"):
                    self._probes.pop(key, None)
                raise

    # -- sessions --------------------------------------------------------------------
    def open(self, kwargs: dict[str, Any]) -> str:
        key, merged = self.merged(kwargs)
        with self._lock:
            self._reap()
            idle = self._take_idle(key)
            if idle is None:
                self._reserve()  # the new instance is built outside the lock
        if idle is not None:
            return self._new_session(key, lambda: idle)
        return self._new_session(key, lambda: self._guarded(lambda: make_local(self.env_id, **merged), "start"))

    def fork(self, session_id: str) -> str:
        """A new session on a deep copy of the session's instance, in the same state."""
        key = self._session(session_id).key
        with self._lock:
            self._reap()
            self._reserve()
        return self._new_session(key, lambda: self.call(session_id, "fork", copy.deepcopy))

    def _new_session(self, key: str, build: Callable[[], TextEnv]) -> str:
        """A session on the instance `build` returns; a failed build gives its reserved place back."""
        try:
            env = build()
        except BaseException:
            with self._lock:
                self._instances -= 1
            raise
        session_id = uuid.uuid4().hex
        with self._lock:
            self._sessions[session_id] = _Session(key, env, time.monotonic())
        return session_id

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                raise ServerError(404, "session", f"no session {session_id!r} (closed, expired or never opened)")
            self._idle.append((session.key, session.env))

    def call(self, session_id: str, what: str, call: Callable[[TextEnv], T]) -> T:
        """Run `call` on the session's instance; a hung or crashed instance is discarded."""
        session = self._session(session_id)
        with session.lock:
            session.last_used = time.monotonic()
            try:
                return self._guarded(lambda: call(session.env), what)
            except ServerError as exc:
                if exc.kind in ("hung", "crash"):
                    self._discard(session_id)
                raise
            finally:
                session.last_used = time.monotonic()

    def health(self) -> dict[str, Any]:
        with self._lock:
            return {"status": "ok", "env": self.env_id, "defaults": self.defaults, "sessions": len(self._sessions),
                    "instances": self._instances, "idle": len(self._idle), "pool": self.size}

    # -- internals -------------------------------------------------------------------
    def _guarded(self, call: Callable[[], T], what: str) -> T:
        """EnvError stays a usage error (400); an EnvFailure or anything else the env raises is a crash (500)."""
        try:
            return _timed(call, self.call_timeout, what)
        except EnvFailure as exc:
            raise ServerError(500, "crash", f"the environment failed in {what}: {exc}") from exc
        except (EnvError, ServerError):
            raise
        except Exception as exc:
            raise ServerError(500, "crash", f"the environment failed in {what}: {type(exc).__name__}: {exc}") from exc

    def _session(self, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise ServerError(404, "session", f"no session {session_id!r} (closed, expired or never opened)")
        return session

    def _reserve(self) -> None:
        """Count one more instance (the caller holds the lock and has reaped), making room or refusing."""
        if self._instances >= self.size and self._idle:
            self._idle.pop(0)  # an idle instance with other keywords makes room
            self._instances -= 1
        if self._instances >= self.size:
            raise ServerError(503, "busy", f"all {self.size} {self.env_id} instances are in sessions")
        self._instances += 1

    def _take_idle(self, key: str) -> TextEnv | None:
        for i, (idle_key, env) in enumerate(self._idle):
            if idle_key == key:
                del self._idle[i]
                return env
        return None

    def _discard(self, session_id: str) -> None:
        with self._lock:
            if self._sessions.pop(session_id, None) is not None:
                self._instances -= 1

    def _reap(self) -> None:
        """Close sessions idle past the timeout (their callers went away without closing them)."""
        now = time.monotonic()
        for session_id, session in list(self._sessions.items()):
            if now - session.last_used > self.session_timeout and not session.lock.locked():
                del self._sessions[session_id]
                self._idle.append((session.key, session.env))


def describe(env: TextEnv) -> dict[str, Any]:
    """What a client of an environment in another process needs to know before any episode."""
    return {"id": env.id, "description": env.description, "instruction": env.instruction,
            "criteria": env.criteria, "max_steps": env.max_steps, "config": dict(env.config),
            "oracle_replans": bool(getattr(env, "oracle_replans", True)),
            "has_oracle": bool(getattr(env, "has_oracle", True))}


def create_app(pool: EnvPool):
    """The FastAPI application serving `pool`'s environment."""
    from fastapi import Body, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title=f"Hindsight environment server: {pool.env_id}")

    @app.exception_handler(ServerError)
    async def server_error(request: Request, exc: ServerError) -> JSONResponse:
        return JSONResponse({"error": exc.message, "kind": exc.kind}, status_code=exc.status)

    @app.exception_handler(EnvError)
    async def env_error(request: Request, exc: EnvError) -> JSONResponse:
        return JSONResponse({"error": str(exc), "kind": "usage"}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in exc.errors())
        return JSONResponse({"error": f"malformed request: {problems}", "kind": "usage"}, status_code=400)

    def served(env_id: str) -> None:
        if env_id.strip().lower() != pool.env_id:
            raise ServerError(404, "usage", f"this server serves {pool.env_id!r}, not {env_id!r}")

    def kwargs_of(body: dict[str, Any]) -> dict[str, Any]:
        kwargs = body.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise ServerError(400, "usage", "kwargs must be a JSON object")
        return kwargs

    def integer(body: dict[str, Any], name: str, default: int | None = None) -> int:
        value = body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ServerError(400, "usage", f"{name} must be an integer, got {value!r}")
        return value

    @app.get("/health")
    def health() -> dict[str, Any]:
        return pool.health()

    @app.post("/{env_id}/spec")
    def spec(env_id: str, body: dict[str, Any] = Body(default={})) -> dict[str, Any]:
        served(env_id)
        return pool.on_probe(kwargs_of(body), "spec", describe)

    @app.post("/{env_id}/split_seeds")
    def split_seeds(env_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        served(env_id)
        split, n, start = str(body.get("split", "")), integer(body, "n"), integer(body, "start", 0)
        seeds = pool.on_probe(kwargs_of(body), "split_seeds", lambda env: env.split_seeds(split, n, start))
        return {"seeds": seeds}

    @app.post("/{env_id}/seed_split")
    def seed_split(env_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        served(env_id)
        seed = integer(body, "seed")
        return {"split": pool.on_probe(kwargs_of(body), "seed_split", lambda env: env.seed_split(seed))}

    @app.post("/{env_id}/instance")
    def instance(env_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        served(env_id)
        seed = integer(body, "seed")
        return {"instance": pool.on_probe(kwargs_of(body), "instance", lambda env: env.instance_for(seed))}

    @app.post("/{env_id}/sessions")
    def open_session(env_id: str, body: dict[str, Any] = Body(default={})) -> dict[str, Any]:
        served(env_id)
        return {"session": pool.open(kwargs_of(body))}

    @app.post("/{env_id}/sessions/{session_id}/reset")
    def reset(env_id: str, session_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        served(env_id)
        seed = integer(body, "seed")
        observation, info = pool.call(session_id, "reset", lambda env: env.reset(seed))
        return {"observation": observation, "info": info}

    @app.post("/{env_id}/sessions/{session_id}/step")
    def step(env_id: str, session_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        served(env_id)
        action = body.get("action")
        if not isinstance(action, str):
            raise ServerError(400, "usage", f"action must be a string, got {action!r}")
        observation, reward, terminated, truncated, info = pool.call(session_id, "step", lambda env: env.step(action))
        return {"observation": observation, "reward": reward, "terminated": terminated, "truncated": truncated,
                "info": info}

    @app.get("/{env_id}/sessions/{session_id}/oracle")
    def oracle(env_id: str, session_id: str) -> dict[str, Any]:
        served(env_id)
        return {"action": pool.call(session_id, "oracle_action", lambda env: env.oracle_action())}

    @app.post("/{env_id}/sessions/{session_id}/fork")
    def fork(env_id: str, session_id: str) -> dict[str, Any]:
        served(env_id)
        return {"session": pool.fork(session_id)}

    @app.delete("/{env_id}/sessions/{session_id}")
    def close(env_id: str, session_id: str) -> dict[str, Any]:
        served(env_id)
        pool.close(session_id)
        return {"closed": session_id}

    return app


def listen(host: str = "127.0.0.1", port: int = 8765) -> socket.socket:
    """A listening socket (port 0: any free port); OSError when the address is taken or not ours."""
    sock = socket.create_server((host, port))
    # Accepted connections inherit this on Linux. Without it a reply written in two parts waits
    # for the client's delayed ACK: ~40 ms per request on a kept-alive connection (measured).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def serve(pool: EnvPool, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve `pool` on `sock` until interrupted."""
    server_for(pool, log_level=log_level).run(sockets=[sock])


def server_for(pool: EnvPool, *, log_level: str = "warning"):
    """The uvicorn server of `pool`'s app (tests run it on a thread)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(create_app(pool), log_level=log_level))
