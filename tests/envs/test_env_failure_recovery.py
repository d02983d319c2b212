"""A failing environment process does not end a run: the engine replays the episode on a fresh one."""

import pytest
from serving import FlakyLake, failing_envs_registered, serving

from hindsight.agent.engine import ENV_RESTARTS, RolloutConfig, RolloutEngine, Task
from hindsight.agent.replay import ReplayDivergence
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.envs.server import EnvPool
from hindsight.llm import load_model

SEEDS = [0, 1, 2, 3]


def run(make_env, seeds=SEEDS):
    config = RolloutConfig(memory=Memory.parse("none"), concurrency=3)
    return RolloutEngine(make_env, load_model("oracle"), config).run(Task(seed=s) for s in seeds)


def moves(trajectory):
    return [(step.action, step.state_key, step.valid) for step in trajectory.steps], trajectory.success


@pytest.fixture(autouse=True)
def failing_envs():
    with failing_envs_registered():
        FlakyLake.fail_on.clear()
        yield


def test_a_failed_step_is_replayed_on_a_fresh_env_and_the_episode_goes_on():
    plain = run(lambda: make("frozenlake", size=5))
    FlakyLake.fail_on.update({(0, 2), (2, 1), (2, 3)})
    flaky = run(lambda: make("test-flaky-lake", size=5))
    assert [moves(t) for t in flaky] == [moves(t) for t in plain]
    assert [t.meta.get("env_restarts", 0) for t in flaky] == [1, 0, 2, 0]
    assert not any("env_failure" in t.meta for t in flaky)


def test_an_env_that_keeps_failing_is_given_up_and_the_run_goes_on():
    trajectories = run(lambda: make("test-dead-lake", size=5))
    for trajectory in trajectories:
        assert trajectory.meta["env_restarts"] == ENV_RESTARTS
        assert "the simulator is gone" in trajectory.meta["env_failure"]
        assert trajectory.num_steps == 1 and not trajectory.success  # the first step worked, the second never did


def test_a_fresh_env_that_disagrees_with_the_episode_is_a_replay_divergence():
    made = []

    def make_env():  # the replacement lake is a different task: replaying cannot reach the same state
        made.append(1)
        return make("test-flaky-lake", size=5 if len(made) == 1 else 6)

    FlakyLake.fail_on.add((0, 2))
    with pytest.raises(ReplayDivergence, match="a fresh environment"):
        run(make_env, seeds=[0])


def test_a_served_env_that_fails_is_recovered_through_the_server():
    plain = run(lambda: make("frozenlake", size=5))
    FlakyLake.fail_on.update({(1, 2), (3, 1)})
    with serving(EnvPool("test-flaky-lake", {"size": 5}, size=4)) as url:
        served = run(lambda: make(f"{url}/test-flaky-lake"))
    assert [moves(t) for t in served] == [moves(t) for t in plain]
    assert [t.meta.get("env_restarts", 0) for t in served] == [0, 1, 0, 1]
    assert served[0].env_kwargs["server"] == url
