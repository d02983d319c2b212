"""Ray: how Hindsight runs environments and model replicas in other processes.

Environments (`make("ray:ID")`, `hindsight.envs.actors`) and model replicas (`ray:SPEC`,
`model_workers`, `hindsight.llm.replicas`) live in Ray actors. Both join the Ray cluster
this process is connected to, or start a local one the first time they need it: `ray.init()`
reads `RAY_ADDRESS`, so `RAY_ADDRESS=auto` (or `ray://HOST:10001`) joins a running cluster.
Ray is an optional dependency (`pip install -e .[ray]`); nothing imports it until then.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

INSTALL_RAY_HINT = "pip install -e .[ray]"
#: Calls that may fail while Ray learns that an actor was lost, before one waits for its restart.
_RESTART_PINGS = 5
#: How long a restarting actor may take to answer again: a model replica reloads its weights in a
#: new process, which takes minutes for a large model or on a loaded machine.
RESTART_TIMEOUT_S = 600.0
#: Pause between two calls to an actor that Ray reports as restarting.
_RESTART_POLL_S = 0.5


def require_ray(what: str, error: type[Exception]) -> Any:
    """The ray module; `error` (one line naming `what` and the install command) when it is missing."""
    if importlib.util.find_spec("ray") is None:
        raise error(f"{what} runs in Ray actors and Ray is not installed; install it with `{INSTALL_RAY_HINT}`")
    import ray

    return ray


def connect(what: str, error: type[Exception]) -> Any:
    """The ray module, connected to a cluster: the one of `RAY_ADDRESS`, else a local one started here.

    A connection made by the caller (`ray.init(...)` with its own resources) is kept as it is.
    Workers' output stays in their log files (`/tmp/ray/session_latest/logs`), so that it does
    not break into a command's progress display; their errors reach the caller as exceptions.
    """
    ray = require_ray(what, error)
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    return ray


def cluster_resource(name: str) -> float:
    """How much of a resource (CPU, GPU) the connected cluster has in all."""
    import ray

    return float(ray.cluster_resources().get(name, 0.0))


def remote_cause(exc: BaseException) -> BaseException:
    """The exception an actor raised, without Ray's wrapper (whose text carries the remote traceback)."""
    import ray

    if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None:
        return exc.cause
    return exc


def await_restart(handle: Any, timeout_s: float = RESTART_TIMEOUT_S) -> None:
    """Wait until Ray has started a lost actor (one with a `pid` method) again.

    While the actor restarts, Ray answers each call with ActorUnavailableError; those are
    waited out for up to `timeout_s`, since a restart reloads whatever the actor holds. Any
    other loss (one sent while Ray is still learning of it) is tried a few times only. An
    actor that does not come back is left to fail the caller's next call.
    """
    import ray

    deadline = time.monotonic() + timeout_s
    other_failures = 0
    while other_failures < _RESTART_PINGS:
        try:
            ray.get(handle.pid.remote())
            return
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                return
            time.sleep(_RESTART_POLL_S)
        except ray.exceptions.RayActorError:
            other_failures += 1
