"""Sudoku rules, parsing, generation and graded scoring, worked by hand."""

import pytest

from hindsight.envs import EnvError, make
from hindsight.envs.sudoku import parse_action, rows_to_grid, solve

SOLUTION = ["1234", "3412", "2143", "4321"]
# Six blanks: all of row 1 and r2c1, r2c2. The solution is unique; r1c1 could take 1 or 3
# without a visible clash, so a wrong fill can be accepted.
INSTANCE = {"size": 4, "puzzle": ["....", "..12", "2143", "4321"], "solution": SOLUTION}


@pytest.fixture
def env(instance_file):
    path = instance_file("sudoku", [(0, "test", INSTANCE)])
    env = make("sudoku", instances=str(path))
    env.reset(0)
    return env


def test_observation_shows_grid_and_lists_cells(env):
    observation = env.render()
    assert " 1 | . . | . . |" in observation and " 3 | 2 1 | 4 3 |" in observation
    assert "Empty cells (6): r1c1, r1c2, r1c3, r1c4, r2c1, r2c2." in observation
    assert env.state_key() == "..../..12/2143/4321"
    assert "fill 1 1 1" in env.admissible_actions() and "fill 1 1 3" in env.admissible_actions()
    assert "fill 1 1 2" not in env.admissible_actions()


def test_score_counts_correct_blanks(env):
    assert env.score() == 0.0
    _, reward, _, _, info = env.step("fill 1 1 1")
    assert info["valid"] and info["score"] == pytest.approx(1 / 6) and reward == pytest.approx(1 / 6)
    # A digit that clashes with nothing but is not the solution's: accepted, worth nothing.
    observation, reward, _, _, info = env.step("R1C2=4")
    assert info["valid"] and info["score"] == pytest.approx(1 / 6) and reward == 0.0
    assert "Cells you filled: r1c1=1, r1c2=4." in observation
    assert env.oracle_action() == "clear 1 2"
    _, _, _, _, info = env.step("clear r1c2")
    assert info["valid"] and info["state_key"] == "1.../..12/2143/4321"
    for action in ["fill 1 2 2", "fill 1 3 3", "fill 1 4 4", "fill 2 1 3"]:
        _, _, terminated, _, info = env.step(action)
        assert info["valid"] and not terminated
    assert info["score"] == pytest.approx(5 / 6)
    _, reward, terminated, truncated, info = env.step("fill row 2 column 2 with 4")
    assert terminated and not truncated and info["success"] and info["score"] == 1.0
    assert reward == pytest.approx(1 / 6)


def test_clearing_a_correct_digit_costs_score(env):
    env.step("fill 1 1 1")
    _, reward, _, _, info = env.step("clear 1 1")
    assert info["valid"] and info["score"] == 0.0 and reward == pytest.approx(-1 / 6)


@pytest.mark.parametrize(
    ("action", "feedback"),
    [
        ("fill 1 1 2", "You cannot put 2 in r1c1: 2 is already in column 1 (at r3c1)."),
        ("fill 1 3 1", "You cannot put 1 in r1c3: 1 is already in column 3 (at r2c3)."),
        ("fill 2 1 4", "You cannot put 4 in r2c1: 4 is already in column 1 (at r4c1)."),
        ("fill 3 1 1", "r3c1 is a given clue (2) and cannot be changed."),
        ("clear 2 3", "r2c3 is a given clue (1) and cannot be changed."),
        ("clear 1 1", "r1c1 is already empty."),
        ("fill 5 1 1", "There is no cell r5c1; rows and columns go from 1 to 4."),
        ("fill 1 1 7", "7 is not a digit of this puzzle; use 1 to 4."),
        ("put 3 in the corner", "is not an action"),
    ],
)
def test_illegal_actions_are_refused(env, action, feedback):
    observation, _, _, _, info = env.step(action)
    assert not info["valid"] and info["state_key"] == "..../..12/2143/4321"
    assert feedback in observation.splitlines()[0]


def test_box_clash_and_filled_cell(env):
    env.step("fill 1 1 3")
    observation, _, _, _, info = env.step("fill 2 2 3")
    assert not info["valid"] and "3 is already in row 1" not in observation
    assert "3 is already in the 2×2 box (at r1c1)" in observation
    observation, _, _, _, info = env.step("fill 1 1 1")
    assert not info["valid"] and "r1c1 already holds 3; clear it first with: clear 1 1." in observation


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("fill 2 3 4", ("fill", [2, 3, 4])),
        ("Fill row 2 column 3 with 4", ("fill", [2, 3, 4])),
        ("R2C3=4", ("fill", [2, 3, 4])),
        ("r2c3 4", ("fill", [2, 3, 4])),
        ("(2, 3) = 4", ("fill", [2, 3, 4])),
        ("fill r2 c3 4", ("fill", [2, 3, 4])),
        ("clear r2c3", ("clear", [2, 3])),
        ("erase 2 3", ("clear", [2, 3])),
        ("put 4 in row 2 column 3", None),
        ("fill 2 3", None),
        ("fill 2 3 4 5", None),
        ("clear 2 3 4", None),
        ("", None),
    ],
)
def test_action_parsing(text, parsed):
    assert parse_action(text) == parsed


@pytest.mark.parametrize(("size", "blanks"), [(4, 4), (4, 10), (9, 30), (9, 45)])
def test_generated_puzzles_have_one_solution(size, blanks):
    env = make("sudoku", size=size, blanks=blanks)
    for seed in range(10 if size == 9 else 30):
        instance = env.generate_instance(seed)
        puzzle, solution = rows_to_grid(instance["puzzle"]), rows_to_grid(instance["solution"])
        assert puzzle.count(0) == blanks
        count, found = solve(puzzle, size)
        assert count == 1 and found == solution
        assert all(p in (0, s) for p, s in zip(puzzle, solution, strict=True))


def test_defaults_and_knob_limits():
    assert (make("sudoku").blanks, make("sudoku").max_steps) == (6, 20)
    assert (make("sudoku", size=9).blanks, make("sudoku", size=9).max_steps) == (30, 60)
    for bad in [{"size": 6}, {"blanks": 0}, {"blanks": 11}, {"size": 9, "blanks": 70}]:
        with pytest.raises(EnvError):
            make("sudoku", **bad)


def test_stored_instance_must_agree_with_its_solution(instance_file):
    wrong = {**INSTANCE, "puzzle": ["2...", "..12", "2143", "4321"]}
    path = instance_file("sudoku", [(3, "test", wrong)])
    with pytest.raises(EnvError, match="seed 3: 'puzzle' disagrees with 'solution'"):
        make("sudoku", instances=str(path))
