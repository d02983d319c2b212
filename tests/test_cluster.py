"""`await_restart`: a lost actor is waited for as long as Ray says it is restarting, not a fixed
number of calls (a replica that reloads a model on a loaded machine takes longer than a few)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from hindsight import cluster  # noqa: E402


class Handle:
    """An actor handle whose `pid` call fails with the given errors, in order, and then answers."""

    def __init__(self, errors):
        self.errors, self.calls = list(errors), 0

    @property
    def pid(self):
        return self

    def remote(self):
        self.calls += 1
        return self.errors.pop(0) if self.errors else 4242


@pytest.fixture
def answers(monkeypatch):
    """ray.get of a Handle's call: raise the error it returned, or return its pid."""
    def get(ref):
        if isinstance(ref, BaseException):
            raise ref
        return ref
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(cluster, "_RESTART_POLL_S", 0.0)


def restarting(n):
    return [ray.exceptions.ActorUnavailableError("restarting", None) for _ in range(n)]


def test_a_slow_restart_is_waited_for_until_the_actor_answers(answers):
    handle = Handle(restarting(50))
    cluster.await_restart(handle)
    assert handle.calls == 51  # every restarting answer was waited out, and the actor answered


def test_a_restart_longer_than_the_timeout_is_left_to_the_caller(answers):
    handle = Handle(restarting(10**6))
    cluster.await_restart(handle, timeout_s=0.05)
    assert 1 <= handle.calls < 10**6 and handle.errors  # gave up without an answer


def test_an_actor_that_stays_lost_is_tried_a_few_times_only(answers):
    handle = Handle([ray.exceptions.ActorDiedError() for _ in range(100)])
    cluster.await_restart(handle)
    assert handle.calls == cluster._RESTART_PINGS
