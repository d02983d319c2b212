"""ScienceWorld behind the contract: seeds and splits, the JVM's failures, the gold-path oracle."""

import copy
import os
import signal
import time

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.envs import EnvError, EnvFailure, make
from hindsight.envs.checker import check_env
from hindsight.envs.scienceworld import TASK_SPLITS, ScienceWorld, seed_table
from hindsight.llm import load_model

pytestmark = pytest.mark.heavy

# A task whose gold path is five actions: episodes here stay short.
SHORT = "find-non-living-thing"


@pytest.fixture(scope="module")
def env():
    """One environment (one JVM) for the module's tests."""
    shared = make("scienceworld", task=SHORT, max_steps=20)
    yield shared
    shared.close()


def test_seeds_follow_the_benchmarks_splits_without_a_jvm():
    boil = make("scienceworld", task="1-1")
    assert boil.config["task"] == "boil"
    assert [boil.generate_instance(s)["variation"] for s in range(30)] == list(range(30))  # one task: seed = variation
    assert [boil.seed_split(s) for s in (0, 13, 14, 20, 21, 29)] == ["train"] * 2 + ["validation"] * 2 + ["test"] * 2
    assert boil.split_seeds("test", 3) == [21, 22, 23]
    assert boil.jvm_pid is None  # nothing above needed the simulator

    every = make("scienceworld")
    table = seed_table("all")
    assert len(table) == sum(sum(counts) for counts in TASK_SPLITS.values()) == 7207
    assert [(task, variation) for task, variation, _ in table[:3]] == [("boil", 0), ("melt", 0), ("freeze", 0)]
    train, validation, _ = (sum(c[i] for c in TASK_SPLITS.values()) for i in range(3))
    assert every.split_seeds("validation", 2) == [train, train + 1]
    assert every.split_seeds("test", 1) == [train + validation]
    assert every.generate_instance(train + validation) == {"task": "boil", "variation": 21}
    with pytest.raises(EnvError, match="seeds 0..7206"):
        every.reset(7207)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "boyl"}, "unknown ScienceWorld task 'boyl'"),
        ({"simplification": "teleport"}, "unknown simplification 'teleport'"),
        ({"task": "power-component", "simplification": "noElectricalAction"}, "is an electrical task"),
        ({"simplification": "noElectricalAction,openDoors"}, "task='all' includes electrical tasks"),
        ({"max_admissible": 0}, "max_admissible must be between"),
    ],
)
def test_bad_knobs_are_one_clear_line(kwargs, message):
    with pytest.raises(EnvError, match=message):
        make("scienceworld", **kwargs)


def test_missing_java_is_an_install_hint(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(EnvError, match="apt-get install default-jre-headless"):
        make("scienceworld")


def test_an_episode_keeps_the_contract(env):
    observation, info = env.reset(0)
    assert observation.startswith("Task: Your task is to find a(n) non-living thing")
    assert "This room is called the hallway" in observation and "In your inventory" in observation
    assert info["state_key"].startswith("room=hallway|score=")
    actions = info["admissible_actions"]
    assert 0 < len(actions) <= 100 and "reset task" not in actions and "look around" in actions
    for junk in ("", "xyzzy", "reset task", "7"):
        _, reward, terminated, _, after = env.step(junk)
        assert not after["valid"] and after["state_key"] == info["state_key"] and reward == 0 and not terminated
    _, _, _, _, moved = env.step("teleport to kitchen")
    assert moved["valid"] and moved["state_key"].startswith("room=kitchen|")


def test_a_wrong_focus_fails_the_task():
    boil = make("scienceworld", task="boil")
    boil.reset(0)
    observation, _, terminated, _, info = boil.step("focus on orange")  # the task is about water
    assert terminated and info["score"] == 0.0 and not info["success"] and "The task has failed" in observation
    boil.close()  # its JVM serves the next test


def test_a_deep_copy_replays_into_its_own_jvm(env):
    env.reset(3)
    env.step("teleport to kitchen")
    twin = copy.deepcopy(env)
    assert twin.jvm_pid != env.jvm_pid
    assert (twin.state_key(), twin.render(), twin.steps_taken) == (env.state_key(), env.render(), env.steps_taken)
    twin.step("teleport to bathroom")
    assert env.state_key().startswith("room=kitchen|") and twin.state_key().startswith("room=bathroom|")


def test_the_contract_checker_passes_including_replays_in_another_process():
    # A 4-step random prefix, not the default budget + 2: each step deep-copies the env twice (a
    # fresh JVM replaying the episode), and truncation is the base class's step, checked on the
    # local environments.
    report = check_env("scienceworld", {"task": SHORT, "max_steps": 10}, seeds=[1], prefixes=1, prefix_length=4,
                       split_n=2)
    assert report.ok, report.violations
    assert "hash-seed" in report.checks


def test_the_gold_path_oracle_solves_a_sample_of_variations():
    """Test variations of short tasks across the task families; docs/envs.md reports a wider sample."""
    solved = []
    for task in ("find-animal", "lifespan-shortest-lived", "power-component", "chemistry-mix-paint-secondary-color"):
        oracle = make("scienceworld", task=task, max_steps=60)
        seed = oracle.split_seeds("test", 1)[0]
        oracle.reset(seed)
        while not oracle.done:
            info = oracle.step(oracle.oracle_action())[4]
            assert info["valid"]
        solved.append(info["success"] and info["score"] == 1.0)
        oracle.close()
    assert sum(solved) >= 0.95 * len(solved)


class KilledOnce(ScienceWorld):
    """Kills its own JVM (SIGKILL) before step `kill_at` of the first episode that gets there."""

    id = "test-scienceworld-killed"
    kill_at: int | None = 2

    def step(self, action):
        if self.steps_taken == KilledOnce.kill_at:
            KilledOnce.kill_at = None
            os.kill(self.jvm_pid, signal.SIGKILL)
            while self.jvm_pid is not None:  # until the process is gone
                time.sleep(0.01)
        return super().step(action)


def test_a_killed_jvm_is_replaced_and_the_run_completes():
    config = RolloutConfig(memory=Memory.parse("none"))

    def run(cls):
        return RolloutEngine(lambda: cls(task=SHORT, max_steps=20), load_model("oracle"), config).run([Task(seed=2)])[0]

    plain, killed = run(ScienceWorld), run(KilledOnce)
    assert KilledOnce.kill_at is None
    assert [s.action for s in killed.steps] == [s.action for s in plain.steps]
    assert [s.state_key for s in killed.steps] == [s.state_key for s in plain.steps]
    assert killed.success and killed.meta["env_restarts"] == 1 and "env_restarts" not in plain.meta


def test_a_call_past_the_timeout_is_an_env_failure():
    slow = make("scienceworld", task=SHORT, timeout=0.01)
    with pytest.raises(EnvFailure, match="timeout 0.01 s"):
        slow.reset(0)
    assert slow.jvm_pid is None
