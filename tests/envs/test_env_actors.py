"""Environments in Ray actors (`ray:ID`): the same episodes as in-process, stepped in parallel, and an
actor process killed mid-run costs a replay, not the run."""

from __future__ import annotations

import copy
import os
import signal
import threading

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.envs import EnvError, make
from hindsight.envs.actors import actor_pids, env_actors
from hindsight.llm import load_model
from tests.agent.fakes import LineEnv

pytestmark = pytest.mark.usefixtures("ray_cluster")

SEEDS = list(range(6))


def run(make_env, policy=None, seeds=SEEDS):
    config = RolloutConfig(memory=Memory.parse("none"), concurrency=4)
    return RolloutEngine(make_env, policy or load_model("oracle"), config).run(Task(seed=s) for s in seeds)


def test_a_ray_env_plays_the_same_episodes_as_the_local_one():
    local = run(lambda: make("frozenlake", size=5))
    remote = run(lambda: make("ray:frozenlake", size=5))
    assert [t.steps for t in remote] == [t.steps for t in local]
    assert [(t.id, t.env, dict(t.env_kwargs), t.success) for t in remote] == [
        (t.id, t.env, dict(t.env_kwargs), t.success) for t in local]
    env, here = make("ray:frozenlake", size=5), make("frozenlake", size=5)
    assert (env.id, env.instruction, env.max_steps, env.config) == (here.id, here.instruction, here.max_steps,
                                                                     here.config)
    assert env.split_seeds("validation", 5, start=3) == here.split_seeds("validation", 5, start=3)
    assert env.seed_split(7) == here.seed_split(7) and env.instance_for(7) == here.instance_for(7)
    assert env_actors().sessions == [0, 0]  # every episode gave its instance back


def test_episodes_are_spread_over_the_actors_and_a_copy_forks_its_session():
    envs = [make("ray:frozenlake", size=5) for _ in range(4)]
    for seed, env in enumerate(envs):
        env.reset(seed)
    assert env_actors().sessions == [2, 2]
    env = envs[0]
    twin = copy.deepcopy(env)
    action = env.oracle_action()
    env.step(action)
    assert twin.state_key() != env.state_key()  # the twin stayed where the copy was made
    assert twin.step(action)[4]["state_key"] == env.state_key()
    for env in envs + [twin]:
        env.close()
    assert env_actors().sessions == [0, 0]


def test_the_contract_checker_passes_a_ray_env():
    from hindsight.envs.checker import check_env

    report = check_env("ray:frozenlake", {"size": 4}, seeds=2, prefixes=1)
    assert report.ok, report.violations
    assert any("hash-seed: skipped" in note for note in report.notes)


class BarrierLine(LineEnv):
    """A line walk whose steps wait for each other: a turn that made them one at a time never passes."""

    parallel_calls = True
    barrier: threading.Barrier

    def step(self, action):
        self.barrier.wait(timeout=60)
        return super().step(action)


def test_a_turn_makes_the_steps_of_parallel_envs_at_once():
    BarrierLine.barrier = threading.Barrier(3)  # one step per episode of the pool, every turn
    config = RolloutConfig(memory=Memory.parse("none"), concurrency=3)
    trajectories = RolloutEngine(lambda: BarrierLine(goal=3), load_model("oracle"), config).run(
        Task(seed=s) for s in (0, 2, 4))
    assert all(t.success and t.num_steps == 3 for t in trajectories)


def test_bad_keywords_and_misuse_are_one_line_env_errors():
    with pytest.raises(EnvError, match="unknown keyword 'sise'") as info:
        make("ray:frozenlake", sise=5)
    assert "\n" not in str(info.value)
    with pytest.raises(EnvError, match="unknown environment 'frozenlak'"):
        make("ray:frozenlak")
    with pytest.raises(EnvError, match="ray:ID"):
        make("ray: ")
    with pytest.raises(EnvError, match="call reset"):
        make("ray:frozenlake").step("up")
    env = make("ray:frozenlake", size=5)
    env.reset(0)
    with pytest.raises(EnvError, match="unknown split 'nosuch'"):
        env.split_seeds("nosuch", 1)


class KillingOracle:
    """The oracle, killing the first env actor's process after its answers of one turn."""

    spec = "oracle"

    def __init__(self, turn: int):
        self.oracle, self.turn, self.calls = load_model("oracle"), turn, 0

    def generate(self, requests, params):
        completions = self.oracle.generate(requests, params)
        self.calls += 1
        if self.calls == self.turn:
            os.kill(actor_pids()[0], signal.SIGKILL)
        return completions


def test_a_killed_env_actor_costs_its_episodes_a_replay_and_the_run_goes_on():
    local = run(lambda: make("frozenlake", size=5))
    before = actor_pids()
    remote = run(lambda: make("ray:frozenlake", size=5), KillingOracle(turn=2))
    assert [t.steps for t in remote] == [t.steps for t in local]
    restarts = [t.meta.get("env_restarts", 0) for t in remote]
    assert sum(restarts) >= 1 and not any("env_failure" in t.meta for t in remote)
    after = actor_pids()
    assert after[0] != before[0] and after[1] == before[1]  # Ray started the killed actor again
    assert env_actors().sessions == [0, 0]


def test_without_ray_a_ray_env_says_how_to_install_it(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "ray" else find_spec(name, *args))
    with pytest.raises(EnvError, match=r"Ray is not installed; install it with `pip install -e \.\[ray\]`") as info:
        make("ray:frozenlake", size=7)
    assert "\n" not in str(info.value)
