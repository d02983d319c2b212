"""Loop finders: hand-worked cases, agreement with a literal transcription, linear time."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hindsight.diagnostics import (
    ExactState, NormalisedText, loop_mask, official_loop_mask, paper_loop_mask, summarise_loops,
)
from hindsight.logs.importers import TrajectoryView


def test_alternating_cycle_counts_under_the_official_finder_only():
    states, actions = list("ABAB"), list("xyxy")
    assert official_loop_mask(states, actions) == [False, False, True, True]
    # Algorithm 1 as printed: the B-cycle [1, 3) re-anchors t_end, so [2, 4) never follows [0, 2).
    assert paper_loop_mask(states, actions) == [False] * 4
    assert paper_loop_mask(states + ["A"], actions) == [False] * 4


def test_self_loop_counts_under_both_finders():
    states, actions = list("AAAA"), list("xxxx")
    assert official_loop_mask(states, actions) == [False, True, True, True]
    # Without the final state the paper's scan cannot see the last action's return.
    assert paper_loop_mask(states, actions) == [False, True, True, False]
    assert paper_loop_mask(states + ["A"], actions) == [False, True, True, True]


def test_official_finder_continues_from_the_repeated_block():
    # [0,2) is repeated by [2,4), which is then the prototype repeated by [4,6).
    assert official_loop_mask(list("ABABAB"), list("xyxyxy")) == [False, False, True, True, True, True]
    # A block that does not fit before the end is not a loop.
    assert official_loop_mask(list("ABA"), list("xyx")) == [False, False, False]


def test_official_finder_compares_actions_too():
    assert official_loop_mask(list("ABAB"), list("xyzy")) == [False] * 4
    # Same state, different actions, then the same action twice: only the repeat counts.
    assert official_loop_mask(list("AAA"), list("xyy")) == [False, False, True]


def test_nested_cycles_are_not_prototypes():
    states, actions = list("ABBABB"), list("pqqpqq")
    # i=0: A returns at 3 but B repeats inside [0,3) -> skip; i=1: B->B self-loop repeated at 2;
    # i=2: [2,4)=(B,A) vs [4,6)=(B,B) differ; i=4: self-loop repeated at 5.
    assert official_loop_mask(states, actions) == [False, False, True, False, False, True]
    # Paper: candidates (1,2), nested (0,3) skipped, (2,4) and (4,5) differ in length from their predecessors.
    assert paper_loop_mask(states, actions) == [False] * 6


def test_three_state_cycle_repeated():
    assert official_loop_mask(list("ABCABC"), list("xyzxyz")) == [False, False, False, True, True, True]
    assert paper_loop_mask(list("ABCABCA"), list("xyzxyz")) == [False] * 6


def test_argument_checks():
    with pytest.raises(ValueError):
        official_loop_mask(list("AB"), list("x"))
    with pytest.raises(ValueError):
        paper_loop_mask(list("ABCD"), list("x"))


def _view(states, actions, final=None, observations=None):
    return TrajectoryView(env="frozenlake", success=False, observations=tuple(observations or states),
                          actions=tuple(actions), valid=(True,) * len(actions), state_keys=tuple(states),
                          final_state_key=final)


def test_loop_mask_on_views_uses_the_final_state_for_the_paper_variant():
    view = _view("AAAA", "xxxx", final="A")
    assert loop_mask(view, "official") == [False, True, True, True]
    assert loop_mask(view, "paper") == [False, True, True, True]
    with pytest.raises(ValueError):
        loop_mask(view, "bogus")


def test_state_equality_changes_what_counts():
    # Keys all differ, but the texts are the same up to case and spacing.
    view = _view(["k1", "k2", "k3", "k4"], "xxxx", observations=["Hi  there", "hi there", "HI THERE", "hi there "])
    assert loop_mask(view, "official", ExactState()) == [False] * 4
    assert loop_mask(view, "official", NormalisedText()) == [False, True, True, True]


def test_pooled_and_per_trajectory_ratios():
    summary = summarise_loops([[False, False, True, True], [False, False], []])
    assert summary.loop_steps == 2 and summary.total_steps == 6
    assert summary.ratio == pytest.approx(2 / 6)
    assert summary.per_trajectory_mean == pytest.approx((0.5 + 0.0) / 2)
    assert summarise_loops([]).ratio is None


# ---- agreement with literal transcriptions of both definitions --------------------------

def literal_official(states, actions):
    n = len(states)
    mask = [False] * n
    i = 0
    while i < n:
        j = next((k for k in range(i + 1, n) if states[k] == states[i]), None)
        if j is not None and len(set(states[i:j])) == j - i:
            length = j - i
            if j + length <= n and states[i:j] == states[j:j + length] and actions[i:j] == actions[j:j + length]:
                for k in range(j, j + length):
                    mask[k] = True
            i = j
        else:
            i += 1
    return mask


def literal_algorithm_1(states, actions):
    visits, previous, t_end = {}, None, -1
    mask = [False] * len(actions)
    for t, state in enumerate(states):
        if state in visits:
            i = visits[state]
            current = (states[i:t], actions[i:t])
            if len(set(states[i:t])) == t - i:  # no nested sub-cycle
                if i == t_end and current == previous:
                    for k in range(i, t):
                        mask[k] = True
                previous, t_end = current, t
        visits[state] = t
    return mask


walks = st.integers(0, 40).flatmap(
    lambda n: st.tuples(st.lists(st.sampled_from("ABCD"), min_size=n, max_size=n),
                        st.lists(st.sampled_from("xy"), min_size=n, max_size=n),
                        st.sampled_from("ABCD"))
)


@settings(max_examples=200, deadline=None)
@given(walks)
def test_official_finder_matches_its_definition(walk):
    states, actions, _ = walk
    assert official_loop_mask(states, actions) == literal_official(states, actions)


@settings(max_examples=200, deadline=None)
@given(walks, st.booleans())
def test_paper_finder_matches_algorithm_1(walk, with_final):
    states, actions, final = walk
    if with_final:
        states = states + [final]
    assert paper_loop_mask(states, actions) == literal_algorithm_1(states, actions)


@pytest.mark.timeout(30)
def test_long_trajectories_take_linear_time():
    # Every state comes back once, m steps later: a quadratic scan (first-later-match search
    # or a distinctness check per window) would need ~m^2 = 10^10 operations here.
    m = 100_000
    states = list(range(m)) * 2
    actions = ["go"] * (2 * m)
    official = official_loop_mask(states, actions)
    assert sum(official) == m and official[m] and not official[m - 1]
    assert sum(paper_loop_mask(states, actions)) == 0
