"""FrozenLake rules, observations and scoring, worked by hand on a fixed map."""

import re

import pytest

from hindsight.envs import EnvError, make
from hindsight.envs.frozenlake import (_read_map, choice_cells, is_choice, parse_move, shortest_distances, tie_cells,
                                      toward_walk_cells)

# P . . .      start row 1 column 1, goal row 4 column 4,
# . H . H      holes at (2,2) (2,4) (3,4) (4,1)
# . . . H
# H . . G
MAP = {"size": 4, "map": ["SFFF", "FHFH", "FFFH", "HFFG"]}


@pytest.fixture
def lake(instance_file):
    def build(**kwargs):
        path = instance_file("frozenlake", [(0, "test", MAP)])
        env = make("frozenlake", instances=str(path), **kwargs)
        env.reset(0)
        return env

    return build


def test_observation_gives_picture_and_coordinates_in_words(lake):
    env = lake()
    observation, info = env.reset(0)
    assert "  1 P . . ." in observation
    assert "  4 H . . G" in observation
    assert "You are at row 1, column 1. The goal is at row 4, column 4." in observation
    assert "Holes (4): row 2 column 2; row 2 column 4; row 3 column 4; row 4 column 1." in observation
    assert info == {
        "score": 0.0,
        "success": False,
        "valid": True,
        "state_key": "pos=1,1",
        "admissible_actions": ["up", "down", "left", "right"],
    }


def test_the_local_view_says_where_the_goal_lies_and_what_each_move_meets(lake):
    env = lake(view="local")
    observation, info = env.reset(0)
    assert observation == (
        "You are at row 1, column 1. The goal is 3 rows down and 3 columns right.\n"
        "Up: the edge (you stay).\nDown: safe ice.\nLeft: the edge (you stay).\nRight: safe ice."
    )
    assert info["state_key"] == "pos=1,1"
    assert "grid" not in env.instruction or "told where the goal lies" in env.instruction
    observation = env.step("right")[0]
    assert observation.startswith("You moved right to row 1, column 2.\n")
    assert "The goal is 3 rows down and 2 columns right.\nUp: the edge (you stay).\nDown: a hole." in observation
    for move in ["right", "down", "down"]:
        observation = env.step(move)[0]
    assert observation.endswith("The goal is 1 row down and 1 column right.\nUp: safe ice.\nDown: safe ice.\n"
                                "Left: safe ice.\nRight: a hole.")
    assert env.step("down")[0].endswith("You are at row 4, column 3. The goal is 1 column right.\n"
                                        "Up: safe ice.\nDown: the edge (you stay).\nLeft: safe ice.\nRight: the goal.")
    assert env.step("right")[0].endswith("You are at row 4, column 4, on the goal.")
    fell = lake(view="local")
    assert fell.step("down")[0] and fell.step("right")[0].endswith("You are in the hole at row 2, column 2.")


def test_the_compass_view_is_the_local_view_with_each_move_marked(lake):
    local, compass = lake(view="local"), lake(view="compass")
    seen = [(local.reset(0)[0], compass.reset(0)[0])]
    for move in ["right", "right", "down", "down", "down"]:
        seen.append((local.step(move)[0], compass.step(move)[0]))
    for plain, marked in seen:
        assert re.sub(r", (closer to|farther from) the goal", "", marked) == plain
    assert seen[0][1].endswith("Down: safe ice, closer to the goal.\nLeft: the edge (you stay).\n"
                               "Right: safe ice, closer to the goal.")
    # A hole is marked like ice: the mark says where a move leads, not whether it is safe.
    assert "Down: a hole, closer to the goal.\nLeft: safe ice, farther from the goal.\n" in seen[1][1]
    assert seen[-1][1].endswith("Up: safe ice, farther from the goal.\nDown: the edge (you stay).\n"
                                "Left: safe ice, farther from the goal.\nRight: the goal.")
    assert "whether it brings you closer to the goal" in compass.instruction


def test_the_view_changes_observations_only():
    grid = make("frozenlake", max_steps=8)
    for view in ("local", "compass"):
        other = make("frozenlake", max_steps=8, view=view)
        for seed in grid.split_seeds("test", 5):
            grid.reset(seed), other.reset(seed)
            while not grid.done:
                move = grid.oracle_action()
                assert other.oracle_action() == move
                assert grid.step(move)[1:4] == other.step(move)[1:4]
            assert other.done and other.is_success() == grid.is_success()
    local = make("frozenlake", max_steps=8, view="local")
    # The default view is left out of the options, so logs from before the knob still match.
    assert "view" not in grid.config and local.config["view"] == "local"
    with pytest.raises(EnvError, match="view"):
        make("frozenlake", view="map")


def test_oracle_actions_are_every_move_that_shortens_the_path(lake):
    env = lake()
    assert env.oracle_actions() == ["down", "right"] and env.oracle_action() == "down"
    env.step("right")  # row 1 column 2: down is a hole
    assert env.oracle_actions() == ["right"]
    for move in ["right", "down", "down"]:
        env.step(move)  # row 3 column 3: right is a hole, down is not
    assert env.oracle_actions() == ["down"]
    env.step("down")
    env.step("right")
    with pytest.raises(EnvError):
        env.oracle_actions()  # the episode is over


def test_walking_to_the_goal_scores_one(lake):
    env = lake()
    rewards = []
    for move in ["right", "right", "down", "down", "down"]:
        _, reward, terminated, truncated, info = env.step(move)
        rewards.append(reward)
        assert info["valid"] and not terminated and not truncated and info["score"] == 0.0
    assert info["state_key"] == "pos=4,3"
    observation, reward, terminated, truncated, info = env.step("right")
    assert (reward, terminated, truncated, info["success"], info["score"]) == (1.0, True, False, True, 1.0)
    assert rewards == [0.0] * 5
    assert "reached the goal" in observation and "on the goal" in observation
    assert info["admissible_actions"] == []


def test_progress_score_is_the_share_of_the_shortest_path_covered(lake):
    env = lake(score="progress")  # the shortest safe path from row 1 column 1 is 6 moves
    assert "share of the shortest safe path" in env.criteria and "partial credit" in lake().criteria
    assert env.step("left")[4]["score"] == 0.0  # a bump: no progress
    assert env.step("right")[4]["score"] == pytest.approx(1 / 6)
    info = env.step("right")[4]
    assert info["score"] == pytest.approx(2 / 6) and not info["success"]
    assert env.step("down")[4]["score"] == pytest.approx(3 / 6)
    assert env.step("right")[4]["score"] == 0.0  # into the hole at row 2 column 4
    assert lake(score="goal").step("right")[4]["score"] == 0.0
    partial = lake(score="partial")  # the same walk, but a fall keeps the progress made before it
    assert "counted from the cell the player fell from" in partial.criteria
    for move, expected in (("right", 1 / 6), ("right", 2 / 6), ("down", 3 / 6)):
        assert partial.step(move)[4]["score"] == pytest.approx(expected)
    _, _, terminated, _, info = partial.step("right")  # into the hole at row 2 column 4
    assert terminated and not info["success"] and info["score"] == pytest.approx(3 / 6)
    with pytest.raises(EnvError, match="score must be one of"):
        lake(score="distance")


def test_bumping_into_the_edge_is_a_valid_no_op(lake):
    env = lake()
    observation, reward, terminated, _, info = env.step("up")
    assert info["valid"] and info["state_key"] == "pos=1,1" and not terminated and reward == 0.0
    assert observation.startswith("You bump into the edge of the lake")


def test_fatal_hole_ends_the_episode_with_score_zero(lake):
    env = lake()
    env.step("right")
    observation, reward, terminated, truncated, info = env.step("down")
    assert terminated and not truncated and info["valid"]
    assert info["state_key"] == "pos=2,2" and info["score"] == 0.0 and not info["success"] and reward == 0.0
    assert "fell into the hole at row 2, column 2" in observation
    assert "  2 . X . H" in observation
    with pytest.raises(EnvError):
        env.step("up")
    with pytest.raises(EnvError):
        env.oracle_action()


def test_blocking_hole_refuses_the_move(lake):
    env = lake(holes="blocking")
    env.step("right")
    assert env.admissible_actions() == ["up", "left", "right"]
    observation, _, terminated, _, info = env.step("down")
    assert not info["valid"] and not terminated and info["state_key"] == "pos=1,2"
    assert observation.startswith("There is a hole at row 2, column 2")


def test_junk_is_answered_and_counts_as_a_step(lake):
    env = lake(max_steps=3)
    for junk in ["jump", ""]:
        observation, _, _, truncated, info = env.step(junk)
        assert not info["valid"] and not truncated and "not a move" in observation
    _, _, terminated, truncated, info = env.step("fly away")
    assert truncated and not terminated and env.steps_taken == 3


@pytest.mark.parametrize(
    ("text", "move"),
    [("up", "up"), ("  UP ", "up"), ("Move up.", "up"), ("go LEFT!", "left"), ("north", "up"), ("East", "right"),
     ("<down>", "down"), ("r", "right"), ("up down", None), ("jump", None), ("", None), ("move", None)],
)  # fmt: skip
def test_move_parsing(text, move):
    assert parse_move(text) == move


def test_oracle_follows_a_shortest_path(lake):
    env = lake()
    assert shortest_distances(4, {(1, 1), (1, 3), (2, 3), (3, 0)}, (3, 3))[(0, 0)] == 6
    moves = []
    while not env.done:
        moves.append(env.oracle_action())
        env.step(moves[-1])
    assert env.is_success() and len(moves) == 6


def test_generator_is_seeded_and_keeps_start_and_goal_apart():
    env = make("frozenlake", size=5, p_hole=0.4)
    assert env.generate_instance(11) == make("frozenlake", size=5, p_hole=0.4).generate_instance(11)
    maps = {tuple(env.generate_instance(seed)["map"]) for seed in range(40)}
    assert len(maps) == 40
    for seed in range(40):
        rows = env.generate_instance(seed)["map"]
        cells = {mark: (r, c) for r, row in enumerate(rows) for c, mark in enumerate(row) if mark in "SG"}
        (sr, sc), (gr, gc) = cells["S"], cells["G"]
        assert abs(sr - gr) + abs(sc - gc) >= 4


def test_choice_cells_are_where_a_walk_toward_the_goal_can_fall():
    start, goal, holes = _read_map(MAP["map"])
    # Row 1 column 2: down is the hole at (2,2), right is ice. Row 1 column 4 is reached too,
    # but its one move toward the goal is a hole, so there is no choice to make there.
    assert choice_cells(start, goal, holes) == {(0, 1), (1, 0), (1, 2), (2, 0), (2, 2)}
    assert not is_choice((0, 3), goal, holes) and not is_choice((0, 0), goal, holes)
    assert choice_cells(start, goal, set()) == set()


def test_tie_cells_are_where_two_moves_toward_the_goal_are_both_ice():
    start, goal, holes = _read_map(MAP["map"])
    # Row 1 column 3 is a tie (down and right both ice); row 1 column 4 has one move toward
    # the goal; row 3 column 2 (down to row 4, right to row 3 column 3) is a tie reached from row 3 column 1.
    assert tie_cells(start, goal, holes) == {(0, 0), (0, 2), (2, 1)}
    assert not tie_cells(start, goal, holes) & choice_cells(start, goal, holes)
    assert tie_cells(start, goal, holes) | choice_cells(start, goal, holes) <= toward_walk_cells(start, goal, holes)
    # The walk never enters a hole and stops at the goal.
    assert not toward_walk_cells(start, goal, holes) & holes and goal not in toward_walk_cells(start, goal, holes)
    # Without holes every cell of the box with a row and a column left to go is a tie.
    assert tie_cells(start, goal, set()) == {(r, c) for r in range(3) for c in range(3)}


def test_choice_lakes_keep_the_default_maps_that_have_a_choice():
    every, choice = make("frozenlake", max_steps=8), make("frozenlake", max_steps=8, lakes="choice")
    assert "lakes" not in every.config and choice.config["lakes"] == "choice"
    kept = 0
    for seed in range(60):
        default, filtered = every.generate_instance(seed), choice.generate_instance(seed)
        assert choice_cells(*_read_map(filtered["map"]))
        if choice_cells(*_read_map(default["map"])):
            kept += 1
            assert filtered == default  # same draws, so a default map with a choice is kept as it is
        else:
            assert filtered != default
    assert 20 < kept < 50  # about 3 maps in 5 at p_hole 0.2
    with pytest.raises(EnvError, match="p_hole above 0"):
        make("frozenlake", lakes="choice", p_hole=0)
    with pytest.raises(EnvError, match="lakes"):
        make("frozenlake", lakes="hard")


def test_knobs_are_validated_and_scale_the_budget():
    assert make("frozenlake").max_steps == 30
    assert make("frozenlake", size=10).max_steps == 40
    assert make("frozenlake", size="6").size == 6
    for bad in [{"size": 2}, {"size": "big"}, {"p_hole": 0.9}, {"holes": "sticky"}, {"max_steps": 0}]:
        with pytest.raises(EnvError):
            make("frozenlake", **bad)


def test_unsolvable_stored_map_is_rejected(instance_file):
    walled = {"size": 3, "map": ["SHF", "HFF", "FFG"]}
    path = instance_file("frozenlake", [(5, "test", walled)])
    with pytest.raises(EnvError, match="seed 5: the map has no safe path"):
        make("frozenlake", instances=str(path))


def test_twins_pair_each_lake_with_its_transpose_in_one_split():
    twins = make("frozenlake", max_steps=8, twins=True)
    assert twins.config["twins"] is True and "twins" not in make("frozenlake").config
    plain = make("frozenlake", max_steps=8)
    assert twins.generate_instance(10) == plain.generate_instance(5)  # seed 2k is seed k's map
    rows = twins.generate_instance(10)["map"]
    assert twins.generate_instance(11)["map"] == ["".join(row[c] for row in rows) for c in range(4)]
    seeds = twins.split_seeds("train", 40)
    assert len(set(seeds)) == 40 and all(seed ^ 1 in seeds for seed in seeds)
    assert all(twins.seed_split(seed) == "train" for seed in seeds)
    assert seeds[0] % 2 == 0 and all(seeds[i] ^ 1 == seeds[i + 1] for i in range(0, 40, 2))
    # A twin walks the other way round: its start and goal are the transposed cells.
    start, goal, holes = _read_map(rows)
    t_start, t_goal, t_holes = _read_map(twins.generate_instance(11)["map"])
    assert t_start == start[::-1] and t_goal == goal[::-1] and t_holes == {cell[::-1] for cell in holes}
    assert set(twins.split_seeds("test", 10)).isdisjoint(seeds)
    with pytest.raises(EnvError, match="twins must be true or false"):
        make("frozenlake", twins="sometimes")
