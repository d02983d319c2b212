"""An environment server on a thread of the test process, and environments that fail on purpose."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

from hindsight.envs import FrozenLake, register
from hindsight.envs.contract import EnvFailure
from hindsight.envs.server import EnvPool, listen, server_for


class ExplodingLake(FrozenLake):
    """FrozenLake whose `step("explode")` raises like a crashed simulator and `step("hang")` never returns."""

    id = "test-exploding-lake"

    def _step(self, action: str):
        if action == "explode":
            raise RuntimeError("the simulator fell over")
        if action == "hang":
            time.sleep(30)
        return super()._step(action)


class FlakyLake(FrozenLake):
    """FrozenLake whose process 'dies' on chosen steps: `fail_on` holds (seed, step number) pairs,
    shared by every instance, and each pair fails once."""

    id = "test-flaky-lake"
    fail_on: set[tuple[int, int]] = set()

    def step(self, action: str):
        key = (self.seed, self.steps_taken + 1)
        if key in self.fail_on:
            self.fail_on.discard(key)
            raise EnvFailure(f"lost the simulator at seed {key[0]}, step {key[1]}")
        return super().step(action)


class DeadLake(FrozenLake):
    """FrozenLake whose process dies at every second step, however often it is restarted."""

    id = "test-dead-lake"

    def step(self, action: str):
        if self.steps_taken == 1:
            raise EnvFailure("the simulator is gone")
        return super().step(action)


@contextlib.contextmanager
def failing_envs_registered() -> Iterator[None]:
    """The failing environments above in the registry, for the duration only (registry tests list its ids)."""
    from hindsight.envs.catalog import _REGISTRY

    for cls in (ExplodingLake, FlakyLake, DeadLake):
        register(cls)
    try:
        yield
    finally:
        for cls in (ExplodingLake, FlakyLake, DeadLake):
            _REGISTRY.pop(cls.id, None)


@contextlib.contextmanager
def serving(pool: EnvPool) -> Iterator[str]:
    """Serve `pool` on a free local port for the duration; yields the server's base URL."""
    with running(server_for(pool)) as url:
        yield url


@contextlib.contextmanager
def serving_app(app: Any) -> Iterator[str]:
    """Serve any ASGI app on a free local port for the duration; yields its base URL."""
    import uvicorn

    with running(uvicorn.Server(uvicorn.Config(app, log_level="warning"))) as url:
        yield url


@contextlib.contextmanager
def running(server: Any) -> Iterator[str]:
    sock = listen("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
