"""Property tests: arbitrary text into step() never breaks the contract."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hindsight.envs import make

ENVS = {
    "frozenlake": make("frozenlake", holes="blocking"),
    "frozenlake-fatal": make("frozenlake"),
    "blocksworld": make("blocksworld", num_blocks=5),
    "sudoku": make("sudoku"),
    "sudoku-9": make("sudoku", size=9, blanks=20),
    "deepsearch": make("deepsearch"),
}

# Mix free text with near-misses of real commands so both parsers and rule checks get exercised.
WORDS = st.sampled_from(
    ["up", "down", "left", "right", "move", "pickup", "putdown", "stack", "unstack", "fill", "clear",
     "b1", "b2", "b3", "b9", "1", "2", "3", "4", "9", "0", "r1c1", "=", "from", "on", "-1", "10",
     "search[", "open[", "answer[", "]", "d0001"]
)  # fmt: skip
ACTION = st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=5).map(" ".join))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(ENVS)), seed=st.integers(0, 10_000), actions=st.lists(ACTION, max_size=12))
def test_any_text_is_a_legal_input(name, seed, actions):
    env = ENVS[name]
    _, info = env.reset(seed)
    for steps, action in enumerate(actions, start=1):
        if env.done:
            break
        before = info["state_key"]
        admissible = set(info["admissible_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and observation
        assert 0.0 <= info["score"] <= 1.0 and -1.0 <= reward <= 1.0
        assert not (terminated and truncated)
        assert truncated == (not terminated and steps >= env.max_steps)
        assert isinstance(info["state_key"], str)
        if not info["valid"]:
            assert info["state_key"] == before
        if action in admissible:
            assert info["valid"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(ENVS)), seed=st.integers(0, 10_000), actions=st.lists(ACTION, max_size=8))
def test_replaying_a_prefix_reproduces_it(name, seed, actions):
    first, second = make(ENVS[name].id, **ENVS[name].kwargs), make(ENVS[name].id, **ENVS[name].kwargs)
    assert first.reset(seed) == second.reset(seed)
    for action in actions:
        if first.done:
            break
        assert first.step(action) == second.step(action)
