"""BlocksWorld rules, parsing and graded scoring, worked by hand."""

import pytest

from hindsight.envs import EnvError, make
from hindsight.envs.blocksworld import parse_action

# Start: b2 on b1, b1 and b3 on the table.  Goal: one tower b3 (bottom), b2, b1 (top).
INSTANCE = {"blocks": 3, "initial": [["b1", "b2"], ["b3"]], "goal": [["b3", "b2", "b1"]]}
# INSTANCE's first observation in the compact view.
COMPACT_LINES = ["Current stacks (bottom to top): b1, b2 | b3.", "Clear blocks: b2, b3.", "Your hand is empty.",
                 "Goal: b1 is on b2; b2 is on b3; b3 is on the table.", "Goal relations that hold now: 1 of 3."]


@pytest.fixture
def env(instance_file):
    path = instance_file("blocksworld", [(0, "test", INSTANCE)])
    env = make("blocksworld", instances=str(path))
    env.reset(0)
    return env


def test_observation_lists_stacks_hand_and_goal(env):
    observation = env.render()
    assert "Current stacks (bottom to top): b1, b2 | b3." in observation
    assert "[b2]" in observation.splitlines()[2] and "[b1] [b3]" in observation.splitlines()[3]
    assert "In words: b1 is on the table; b2 is on b1; b3 is on the table." in observation
    assert "Clear blocks: b2, b3." in observation
    assert "Your hand is empty." in observation
    assert "Goal: b1 is on b2; b2 is on b3; b3 is on the table. As stacks (bottom to top): b3, b2, b1." in observation
    assert env.state_key() == "hand=-|stacks=b1,b2;b3"
    assert env.admissible_actions() == ["unstack b2 b1", "pickup b3"]


def test_the_compact_view_drops_the_picture_and_the_repeated_forms(instance_file):
    path = instance_file("blocksworld", [(0, "test", INSTANCE)])
    env = make("blocksworld", instances=str(path), view="compact")
    env.reset(0)
    assert env.render().splitlines() == COMPACT_LINES


def test_the_sentences_view_states_the_current_stacks_in_words(instance_file):
    path = instance_file("blocksworld", [(0, "test", INSTANCE)])
    env = make("blocksworld", instances=str(path), view="sentences")
    env.reset(0)
    assert env.render().splitlines()[0] == "Current state: b1 is on the table; b2 is on b1; b3 is on the table."
    assert env.render().splitlines()[1:] == COMPACT_LINES[1:]


@pytest.mark.parametrize("view", ["compact", "sentences"])
def test_the_view_changes_observations_only(view):
    full = make("blocksworld", num_blocks=4, max_steps=14)
    other = make("blocksworld", num_blocks=4, max_steps=14, view=view)
    for seed in full.split_seeds("test", 5):
        full.reset(seed), other.reset(seed)
        assert full.state_key() == other.state_key()
        while not full.done:
            action = full.oracle_action()
            assert other.oracle_action() == action
            assert full.step(action)[1:4] == other.step(action)[1:4]
        assert other.done and other.is_success() == full.is_success()
    # The default view is left out of the options, so logs from before the knob still match.
    assert "view" not in full.config and other.config["view"] == view
    with pytest.raises(EnvError, match="view"):
        make("blocksworld", view="picture")


def test_score_is_the_fraction_of_goal_relations_held(env):
    # Only "b3 on the table" holds at the start.
    assert env.score() == pytest.approx(1 / 3)
    plan = [
        ("unstack b2 b1", 1 / 3, 0.0, "hand=b2|stacks=b1;b3"),  # b2 in the hand rests on nothing
        ("stack b2 b3", 2 / 3, 1 / 3, "hand=-|stacks=b1;b3,b2"),
        ("pickup b1", 2 / 3, 0.0, "hand=b1|stacks=b3,b2"),
        ("stack b1 b2", 1.0, 1 / 3, "hand=-|stacks=b3,b2,b1"),
    ]
    for action, score, reward, key in plan:
        observation, r, terminated, truncated, info = env.step(action)
        assert info["valid"], observation
        assert info["score"] == pytest.approx(score) and r == pytest.approx(reward)
        assert info["state_key"] == key
    assert terminated and info["success"] and not truncated


def test_moving_a_correct_block_away_lowers_the_score(env):
    env.step("pickup b3")
    assert env.score() == 0.0
    assert env.render().count("Your hand holds b3.") == 1
    assert env.admissible_actions() == ["putdown b3", "stack b3 b2"]


@pytest.mark.parametrize(
    ("action", "feedback"),
    [
        ("pickup b2", "b2 is on b1, not on the table; use unstack b2 b1."),
        ("pickup b1", "You cannot pickup b1: b1 is not clear: b2 is on top of it."),
        ("unstack b3 b1", "b3 is not on b1, it is on the table; use pickup b3."),
        ("stack b2 b3", "you are not holding b2 (your hand is empty)."),
        ("putdown b2", "you are not holding b2"),
        ("pickup b9", "There is no block b9; the blocks are b1, b2, b3."),
        ("putdown", "putdown takes 1 block name(s): putdown X."),
        ("dance", "is not an action"),
    ],
)
def test_illegal_actions_are_refused_with_feedback(env, action, feedback):
    before = env.state_key()
    observation, reward, terminated, _, info = env.step(action)
    assert not info["valid"] and not terminated and reward == 0.0
    assert info["state_key"] == before
    assert feedback in observation.splitlines()[0]


def test_hand_holds_one_block(env):
    env.step("pickup b3")
    observation, _, _, _, info = env.step("unstack b2 b1")
    assert not info["valid"] and "your hand already holds b3" in observation
    observation, _, _, _, info = env.step("stack b3 b3")
    assert not info["valid"] and "a block cannot go on itself" in observation


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("unstack b2 b1", ("unstack", ["b2", "b1"])),
        ("Unstack B2 from b1.", ("unstack", ["b2", "b1"])),
        ("(unstack b2 b1)", ("unstack", ["b2", "b1"])),
        ("unstack 2 1", ("unstack", ["b2", "b1"])),
        ("pick-up b3", ("pickup", ["b3"])),
        ("Pick up block b3", ("pickup", ["b3"])),
        ("put down b2 on the table", ("putdown", ["b2"])),
        ("stack b1 on top of b2", ("stack", ["b1", "b2"])),
        ("stack b1 table", None),
        ("move b1 to b2", None),
        ("", None),
    ],
)
def test_action_parsing(text, parsed):
    assert parse_action(text) == parsed


def test_generator_and_budget():
    env = make("blocksworld", num_blocks=5)
    assert env.max_steps == 25 and make("blocksworld").max_steps == 20
    for seed in range(30):
        instance = env.generate_instance(seed)
        assert instance == make("blocksworld", num_blocks=5).generate_instance(seed)
        assert instance["initial"] != instance["goal"]
        assert sorted(b for s in instance["initial"] for b in s) == sorted(f"b{i}" for i in range(1, 6))
    with pytest.raises(EnvError):
        make("blocksworld", num_blocks=2)


def test_stored_instance_with_missing_block_is_rejected(instance_file):
    broken = {"blocks": 3, "initial": [["b1", "b2"]], "goal": [["b3", "b2", "b1"]]}
    path = instance_file("blocksworld", [(1, "train", broken)])
    with pytest.raises(EnvError, match="seed 1: 'initial' must place each of b1, b2, b3 exactly once"):
        make("blocksworld", instances=str(path))
