"""The ALFWorld-style household: TextWorld games, ALFWorld's text, graded goals, the oracle, the adapter."""

import copy
import json
import os

import pytest

from hindsight.cli.main import main
from hindsight.diagnostics.curves import DEFAULT_T_MAX
from hindsight.diagnostics.hooks import hooks_for
from hindsight.envs import EnvError, make
from hindsight.envs.checker import check_env
from hindsight.envs.household import TASK_TYPES, game_file, normalize_command, task_sentence

pytestmark = pytest.mark.heavy

# A hand-made heat task: one apple in a closed cabinet, a mug on the counter.
HEAT = {
    "task": "pick_heat_then_place_in_recep", "scene": "kitchen", "object": "apple", "target": "countertop",
    "goal": "put a hot apple in countertop.",
    "receptacles": [["cabinet 1", "c"], ["countertop 1", "s"], ["fridge 1", "fridge"], ["microwave 1", "micro"],
                    ["sinkbasin 1", "sink"]],
    "objects": [["apple 1", "cabinet 1"], ["mug 1", "countertop 1"]],
    "lamp": None,
}  # fmt: skip


@pytest.fixture
def heat(instance_file):
    return make("household", instances=instance_file("household", [(0, "test", HEAT)]))


def play_oracle(env, seed):
    env.reset(seed)
    while not env.done:
        info = env.step(env.oracle_action())[4]
        assert info["valid"]
    return info


def test_walkthrough_text_and_graded_score(heat):
    observation, info = heat.reset(0)
    assert observation == (
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
        "a fridge 1, a microwave 1, and a sinkbasin 1.\nYou are not carrying anything.\n"
        "Your task is to: put a hot apple in countertop."
    )
    assert info["admissible_actions"] == [
        "go to cabinet 1", "go to countertop 1", "go to fridge 1", "go to microwave 1", "go to sinkbasin 1",
        "inventory", "look",
    ]  # fmt: skip
    steps = [
        ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.", 0.0),
        ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see a apple 1.", 0.0),
        ("take apple 1 from cabinet 1", "You pick up the apple 1 from the cabinet 1.", 0.0),
        ("examine apple 1", "There's nothing special about apple 1.", 0.0),
        ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.", 0.0),
        ("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.", 0.5),
        ("examine apple 1", "The apple 1 is hot.", 0.5),
        ("inventory", "You are carrying: a apple 1.", 0.5),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a mug 1.", 0.5),
        ("Put apple 1 on countertop 1.", "You put the apple 1 in/on the countertop 1.", 1.0),
    ]
    for action, feedback, score in steps:
        observation, reward, terminated, _, info = heat.step(action)
        assert observation.split("\n")[0] == feedback and info["valid"] and info["score"] == score
    assert terminated and info["success"] and heat.steps_taken == len(steps)


def test_invalid_actions_change_nothing_and_count(heat):
    heat.reset(0)
    heat.step("go to cabinet 1")
    key = heat.state_key()
    # Taking from a closed cabinet, an object that is not here, nonsense and junk.
    for action in ("take apple 1 from cabinet 1", "take mug 1 from cabinet 1", "fly to the moon", "", "go to"):
        observation, reward, terminated, truncated, info = heat.step(action)
        assert observation.startswith("Nothing happens.\n") and not info["valid"] and reward == 0.0
        assert info["state_key"] == key and not (terminated or truncated)
    assert heat.steps_taken == 6
    assert normalize_command("  PUT Apple 1 into   Fridge 1. ") == "put apple 1 in/on fridge 1"


def test_deepcopy_is_independent(heat):
    heat.reset(0)
    heat.step("go to cabinet 1")
    twin = copy.deepcopy(heat)
    key = heat.state_key()
    assert twin.step("open cabinet 1")[4]["valid"] and twin.state_key() != key
    assert heat.state_key() == key and heat.step("open cabinet 1")[4]["state_key"] == twin.state_key()


@pytest.mark.parametrize("task", TASK_TYPES)
def test_each_task_type_reads_like_alfworld_and_its_oracle_succeeds(task):
    env = make("household", task=task)
    instance = env.generate_instance(3)
    assert instance["task"] == task
    assert instance["goal"] == task_sentence(task, instance["object"], instance["target"])
    info = play_oracle(env, 3)
    assert info["success"] and info["score"] == 1.0


def test_oracle_solves_nearly_every_generated_task():
    env = make("household")
    results = [play_oracle(env, seed)["success"] for seed in range(60)]
    assert sum(results) / len(results) >= 0.95
    assert {env.generate_instance(seed)["task"] for seed in range(60)} == set(TASK_TYPES)


def test_generation_is_deterministic_and_games_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HINDSIGHT_CACHE", str(tmp_path))
    env = make("household")
    instance = env.generate_instance(11)
    assert make("household").generate_instance(11) == instance != env.generate_instance(12)
    path = game_file(instance)
    assert path.parent == tmp_path / "household" and path.is_file()
    built = path.stat().st_mtime_ns
    assert game_file(json.loads(json.dumps(instance))) == path and path.stat().st_mtime_ns == built


def test_contract_checker_passes():
    report = check_env("household", seeds=3, prefixes=2)
    assert report.ok, report.violations


def test_recall_distance_is_measured(tmp_path, capsys):
    hooks = hooks_for("household")
    assert hooks.t_max == DEFAULT_T_MAX["alfworld"] and not hooks.recall_skip_reason
    for model in ("oracle", "random"):
        out = tmp_path / model
        # 20 steps an episode: the random walk revisits rooms well within them, and each of its
        # steps costs TextWorld's search for the admissible commands.
        assert main(["eval", "--env", "household", "--model", model, "--episodes", "3", "--set", "max_steps=20",
                     "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["diagnose", "--json", str(tmp_path / "oracle"), str(tmp_path / "random")]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["env"] for r in records] == ["household", "household"]
    assert all(r["recall_pairs"] > 0 and r["recall_distance"] >= 1 and not r["recall_note"] for r in records)


def test_alfworld_source_without_data_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(EnvError, match="ALFWORLD_DATA is not set"):
        make("household", source="alfworld")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(EnvError, match="no ALFWorld game files"):
        make("household", source="alfworld")


# ALFWorld's game files cannot be bundled or downloaded in CI: without them this test is reported
# as an expected failure with its reason (not run), which HINDSIGHT_STRICT_SKIPS accepts.
@pytest.mark.xfail(
    not os.environ.get("ALFWORLD_DATA"), run=False, reason="ALFWORLD_DATA is not set: ALFWorld's game files are absent"
)
def test_alfworld_games_play_through_textworld():
    env = make("household", source="alfworld")
    for seed in range(3):
        assert play_oracle(env, seed)["success"]
