"""The built-in planners solve every generated instance within the default step budget."""

import pytest

from hindsight.envs import make

DIFFICULTIES = [
    ("frozenlake", {}),
    ("frozenlake", {"size": 3}),
    ("frozenlake", {"size": 6, "p_hole": 0.3, "holes": "blocking"}),
    ("frozenlake", {"size": 10, "p_hole": 0.5}),
    ("blocksworld", {"num_blocks": 3}),
    ("blocksworld", {}),
    ("blocksworld", {"num_blocks": 6}),
    ("blocksworld", {"num_blocks": 10}),
    ("sudoku", {"blanks": 4}),
    ("sudoku", {}),
    ("sudoku", {"blanks": 10}),
    ("sudoku", {"size": 9, "blanks": 30}),
    ("deepsearch", {"hops": 1}),
    ("deepsearch", {}),
    ("deepsearch", {"hops": 4, "top_k": 1}),
    ("webshop", {}),
    ("webshop", {"catalogue_size": 300, "results_per_page": 3}),
]


@pytest.mark.parametrize(("env_id", "kwargs"), DIFFICULTIES, ids=[f"{e}-{k}" for e, k in DIFFICULTIES])
def test_oracle_solves_every_instance(env_id, kwargs):
    env = make(env_id, **kwargs)
    failures = []
    for seed in range(50):
        env.reset(seed)
        steps = 0
        while not env.done:
            _, _, _, _, info = env.step(env.oracle_action())
            steps += 1
            assert info["valid"], f"seed {seed}: the oracle made an invalid move"
        if not info["success"] or info["score"] != 1.0:
            failures.append(seed)
    assert not failures, f"unsolved seeds: {failures}"


def test_blocksworld_oracle_stays_within_its_bound():
    # The planner moves each block at most twice, two actions per move: at most 4n - 2 actions.
    for n in (3, 5, 8):
        env = make("blocksworld", num_blocks=n)
        for seed in range(40):
            env.reset(seed)
            steps = 0
            while not env.done:
                env.step(env.oracle_action())
                steps += 1
            assert env.is_success() and steps <= 4 * n - 2


def test_frozenlake_oracle_walks_a_shortest_path():
    from hindsight.envs.frozenlake import shortest_distances

    env = make("frozenlake", size=7, p_hole=0.3)
    for seed in range(30):
        env.reset(seed)
        shortest = shortest_distances(env._size, env._holes, env._goal)[env._pos]
        steps = 0
        while not env.done:
            env.step(env.oracle_action())
            steps += 1
        assert steps == shortest
