"""Environments in Ray actors, behind the same contract as a local one.

    env = make("ray:scienceworld", task="boil")      # in a config: env: ray:scienceworld
    obs, info = env.reset(seed=3)

Every command takes `ray:ID` in place of an id. This process keeps a few *env actors*
(Ray actor processes, `HINDSIGHT_ENV_WORKERS` of them, by default one per CPU of the
Ray cluster); each hosts the instances of the episodes placed on it, in sessions, with the
pooling, call timeouts and crash handling of the environment server (`EnvPool`). A
`RayEnv` opens a session on the actor holding the fewest at its first `reset`, and gives
the instance back when the episode ends. An actor runs its calls one at a time; calls to
different actors run at once, and the rollout engine makes the calls of a turn from
threads (`parallel_calls`), so the episodes' steps run in parallel across actors.

A `RayEnv` is the environment it wraps: same id, same `config` (without any trace of
Ray), same observations, so trajectories and their replays do not depend on where the
environment ran. Instance files (`instances=PATH`) must be readable where the actors run.

Failures: a bad keyword or misuse is `EnvError` with the environment's own message. An
actor process that dies (killed, out of memory, a crashing simulator) fails the calls of
its sessions with `EnvFailure`, and Ray starts it again (empty); the rollout engine
replays each of those episodes on a fresh environment, as it does for a lost server
session. A hung or crashed call is `EnvFailure` too (the actor discards that instance).
A `step` is never retried here; `reset` and requests that change nothing are, once.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from hindsight.envs.base import canonical_json
from hindsight.envs.contract import EnvError, EnvFailure
from hindsight.envs.proxy import ProxyEnv

#: How many env actors this process keeps (default: the Ray cluster's CPUs).
WORKERS_ENV = "HINDSIGHT_ENV_WORKERS"
#: Instances one actor may hold at once, over all its sessions; the engine's pool bounds
#: them long before (one per episode in flight).
_INSTANCES_PER_ACTOR = 1024
#: Like the environment server's defaults: a call that runs longer is a hung instance; a
#: session unused that long lost its episode.
_CALL_TIMEOUT = 120.0
_SESSION_TIMEOUT = 600.0


class EnvWorker:
    """One env actor: the sessions of every environment the driver places on it.

    Instances are kept per (id, keywords) in an `EnvPool`, so a closed session's instance
    serves the next episode with the same keywords (a JVM starts once per instance).
    """

    def __init__(self) -> None:
        self._pools: dict[str, Any] = {}
        self._sessions: dict[str, Any] = {}  # session id -> the EnvPool holding it

    def pid(self) -> int:
        return os.getpid()

    def spec(self, env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        from hindsight.envs.server import describe

        return self._run(lambda: self._pool(env_id, kwargs).on_probe({}, "spec", describe))

    def ask(self, env_id: str, kwargs: dict[str, Any], what: str, args: tuple[Any, ...]) -> Any:
        """A question that needs no episode: split_seeds, seed_split or instance_for."""
        if what not in ("split_seeds", "seed_split", "instance_for"):
            raise EnvError(f"env actors answer split_seeds, seed_split and instance_for, not {what!r}")
        return self._run(lambda: self._pool(env_id, kwargs).on_probe({}, what, lambda env: getattr(env, what)(*args)))

    def open(self, env_id: str, kwargs: dict[str, Any]) -> str:
        pool = self._pool(env_id, kwargs)
        session = self._run(lambda: pool.open({}))
        self._sessions[session] = pool
        return session

    def reset(self, session: str, seed: int) -> tuple[str, dict[str, Any]]:
        return self._call(session, "reset", lambda env: env.reset(seed))

    def step(self, session: str, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._call(session, "step", lambda env: env.step(action))

    def oracle_action(self, session: str) -> str:
        return self._call(session, "oracle_action", lambda env: env.oracle_action())

    def fork(self, session: str) -> str:
        pool = self._holder(session)
        twin = self._run(lambda: pool.fork(session))
        self._sessions[twin] = pool
        return twin

    def close(self, session: str) -> None:
        pool = self._sessions.pop(session, None)
        if pool is not None:
            self._run(lambda: pool.close(session))

    # -- internals -------------------------------------------------------------------
    def _pool(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        from hindsight.envs.server import EnvPool

        key = f"{env_id}\0{canonical_json(kwargs)}"
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = self._run(lambda: EnvPool(env_id, kwargs, size=_INSTANCES_PER_ACTOR,
                                                                session_timeout=_SESSION_TIMEOUT,
                                                                call_timeout=_CALL_TIMEOUT))
        return pool

    def _holder(self, session: str) -> Any:
        pool = self._sessions.get(session)
        if pool is None:
            raise EnvFailure(f"no session {session!r} on this env actor (it was restarted, or the session expired)")
        return pool

    def _call(self, session: str, what: str, call: Callable[[Any], Any]) -> Any:
        pool = self._holder(session)
        try:
            return self._run(lambda: pool.call(session, what, call))
        except EnvFailure:
            self._sessions.pop(session, None)  # the pool discarded the hung or crashed instance
            raise

    @staticmethod
    def _run(call: Callable[[], Any]) -> Any:
        """The pool's answer, its errors as the contract's: misuse EnvError, anything else EnvFailure."""
        from hindsight.envs.server import ServerError

        try:
            return call()
        except ServerError as exc:
            raise (EnvError if exc.kind == "usage" else EnvFailure)(exc.message) from None


class _Actors:
    """The env actors of this process's Ray connection, and how many sessions each holds."""

    def __init__(self, connection: str) -> None:
        import ray

        from hindsight.cluster import cluster_resource

        self.connection = connection
        raw = os.environ.get(WORKERS_ENV, "")
        try:
            size = int(raw) if raw else max(1, int(cluster_resource("CPU")))
        except ValueError:
            size = 0
        if size < 1:
            raise EnvError(f"${WORKERS_ENV} must be a positive number of env actors, got {raw!r}")
        # Restarted by Ray when their process dies (the sessions are lost, and the engine
        # replays their episodes); never a task retried, since a step may have been applied.
        # They reserve no CPU, so they never keep model replicas from being scheduled.
        actor = ray.remote(EnvWorker).options(max_restarts=-1, max_task_retries=0, num_cpus=0,
                                              scheduling_strategy="SPREAD")
        self.handles = [actor.remote() for _ in range(size)]
        self.sessions = [0] * size
        self._next = 0
        self._lock = threading.Lock()

    def least_busy(self) -> int:
        """The actor for a new session (one more session is counted on it)."""
        with self._lock:
            index = min(range(len(self.handles)), key=lambda i: self.sessions[i])
            self.sessions[index] += 1
            return index

    def taken(self, index: int) -> None:
        with self._lock:
            self.sessions[index] += 1

    def released(self, index: int) -> None:
        with self._lock:
            self.sessions[index] -= 1

    def any(self) -> int:
        """An actor for a question that needs no session (in turn)."""
        with self._lock:
            self._next = (self._next + 1) % len(self.handles)
            return self._next


_actors: _Actors | None = None
_specs: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def env_actors() -> _Actors:
    """This process's env actors, started on first use (and again after a new `ray.init`)."""
    global _actors
    from hindsight.cluster import connect

    ray = connect("a ray: environment", EnvError)
    context = ray.get_runtime_context()
    # A new connection is a new job, or a new local cluster (whose first job has the same id).
    connection = f"{context.get_job_id()}@{context.get_node_id()}"
    with _lock:
        if _actors is None or _actors.connection != connection:
            _actors = _Actors(connection)
        return _actors


def actor_pids() -> list[int]:
    """The process ids of the env actors, in order (tests kill them to check recovery)."""
    import ray

    return ray.get([handle.pid.remote() for handle in env_actors().handles])


def _get(ref: Any, handle: Any, env_id: str, what: str) -> Any:
    """The answer of a call to actor `handle`; EnvError and EnvFailure as the actor raised them.

    A lost actor is EnvFailure too, raised once Ray has started the actor again, so that the
    episode's replay is not sent to a process that is still gone.
    """
    import ray

    from hindsight.cluster import await_restart, remote_cause

    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as exc:
        await_restart(handle)
        raise EnvFailure(f"{env_id}: the Ray actor holding the environment was lost ({type(exc).__name__} in "
                         f"{what}); replay the episode on a new instance") from None
    except ray.exceptions.RayTaskError as exc:
        cause = remote_cause(exc)
        if isinstance(cause, EnvError):
            raise cause from None
        raise EnvFailure(f"{env_id}: the env actor failed in {what}: {type(cause).__name__}: {cause}") from None


def _ask_any(env_id: str, what: str, call: Callable[[Any], Any]) -> Any:
    """A request that changes nothing, to any actor, tried on a second one when the first is lost."""
    actors = env_actors()
    handle = actors.handles[actors.any()]
    try:
        return _get(call(handle), handle, env_id, what)
    except EnvFailure:
        handle = actors.handles[actors.any()]
        return _get(call(handle), handle, env_id, what)


def _spec(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    key = f"{env_id}\0{canonical_json(kwargs)}"
    spec = _specs.get(key)
    if spec is None:
        spec = _ask_any(env_id, "spec", lambda handle: handle.spec.remote(env_id, kwargs))
        with _lock:
            _specs[key] = spec
    return spec


def _close_quietly(actors: _Actors, index: int, session: str) -> None:
    actors.released(index)
    try:
        actors.handles[index].close.remote(session)  # not awaited: the episode is over either way
    except Exception:  # noqa: BLE001 - at interpreter exit Ray may be gone; the actor dies with it
        pass


class RayEnv(ProxyEnv):
    """An environment in an env actor; see the module docstring."""

    #: Calls wait on another process, so the rollout engine makes a turn's calls from threads.
    parallel_calls = True
    lost_session = "the env actor lost the session"

    def __init__(self, env_id: str, **kwargs: Any):
        self.kwargs = dict(kwargs)
        spec = _spec(env_id, self.kwargs)
        self._adopt(spec)
        self._actors: _Actors | None = None
        self._actor = -1

    @property
    def config(self) -> dict[str, Any]:
        """Every keyword `make` needs to rebuild the environment (where it runs is not part of it)."""
        return dict(self._config)

    # -- episodes --------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        seed = int(seed)
        for attempt in (1, 2):
            try:
                if self._session is None:
                    self._open()
                observation, info = self._get(self._handle().reset.remote(self._session, seed), "reset")
                break
            except EnvFailure:
                self._forget_session()  # a reset is safe to repeat, on a new session
                if attempt == 2:
                    raise
        self.seed, self.steps_taken, self.done = seed, 0, False
        self._info = info
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._require_live("step")
        action = action if isinstance(action, str) else ""
        try:
            observation, reward, terminated, truncated, info = self._get(
                self._handle().step.remote(self._session, action), "step")
        except EnvFailure:
            self._forget_session()
            raise
        self.steps_taken += 1
        self._info = info
        self.done = bool(terminated or truncated)
        if self.done:
            self.close()
        return observation, float(reward), bool(terminated), bool(truncated), info

    def oracle_action(self) -> str:
        self._require_live("oracle_action")
        return self._get(self._handle().oracle_action.remote(self._session), "oracle_action")

    def __deepcopy__(self, memo: dict) -> RayEnv:
        """A twin in the same state, in its own session on the same actor (the actor copies the instance)."""
        twin = copy.copy(self)
        twin._closer = None
        if self._session is not None:
            twin._session = self._get(self._handle().fork.remote(self._session), "fork")
            self._actors.taken(self._actor)
            twin._closer = weakref.finalize(twin, _close_quietly, self._actors, self._actor, twin._session)
        twin._info = copy.deepcopy(self._info, memo)
        twin.kwargs = copy.deepcopy(self.kwargs, memo)
        return twin

    # -- tasks -----------------------------------------------------------------------
    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        return list(self._ask("split_seeds", (split, int(n), int(start))))

    def seed_split(self, seed: int) -> str:
        return str(self._ask("seed_split", (int(seed),)))

    def instance_for(self, seed: int) -> dict[str, Any]:
        return dict(self._ask("instance_for", (int(seed),)))

    generate_instance = instance_for

    # -- internals -------------------------------------------------------------------
    def _ask(self, what: str, args: tuple[Any, ...]) -> Any:
        return _ask_any(self.id, what, lambda handle: handle.ask.remote(self.id, self.kwargs, what, args))

    def _open(self) -> None:
        actors = env_actors()
        index = actors.least_busy()
        handle = actors.handles[index]
        try:
            session = _get(handle.open.remote(self.id, self.kwargs), handle, self.id, "open")
        except BaseException:
            actors.released(index)
            raise
        self._actors, self._actor, self._session = actors, index, session
        self._closer = weakref.finalize(self, _close_quietly, actors, index, session)

    def _forget_session(self) -> None:
        """Drop a session its actor lost (a dead actor, a discarded instance): nothing to close there."""
        if self._closer is not None:
            self._closer.detach()
            self._actors.released(self._actor)
        self._session, self._closer = None, None

    def _handle(self) -> Any:
        return self._actors.handles[self._actor]

    def _get(self, ref: Any, what: str) -> Any:
        return _get(ref, self._handle(), self.id, what)

