"""CSO's selection rules: candidates, what is verified, and which pairs a step yields."""

import pytest

from hindsight.algos.cso import (
    EXPERT_EXPERT, EXPERT_POLICY, POLICY_POLICY, PairChoice, check_thresholds, choose_pairs, is_candidate,
    worth_verifying,
)


@pytest.mark.parametrize("policy, alternatives, expected", [
    (0.2, [0.3, 0.9], True),
    (0.45, [0.9], False),   # the policy's action is not rated low enough (strictly below γ_low)
    (0.2, [0.65, 0.6], False),  # no alternative strictly above γ_high
    (0.0, [], False),
])
def test_a_candidate_needs_a_low_policy_action_and_a_high_alternative(policy, alternatives, expected):
    assert is_candidate(policy, alternatives) is expected


def test_only_alternatives_above_gamma_high_are_verified():
    assert worth_verifying([0.9, 0.65, 0.7, 0.1]) == [0, 2]


def test_pairs_never_compare_an_action_with_itself():
    actions = ("down", "right", "left")
    # The policy's own action can reach the alternatives (a sampled policy proposes it too):
    # a verified alternative equal to it forms no pair.
    assert choose_pairs(actions, [True, None, True], "left", EXPERT_POLICY) == [PairChoice(0, None)]
    assert choose_pairs(actions, [True, True, False], "up", POLICY_POLICY) == [PairChoice(0, None), PairChoice(1, None)]
    assert choose_pairs(actions, [True, False, None], "up", EXPERT_EXPERT) == [PairChoice(0, 1)]
    assert choose_pairs(actions, [False, False, False], "up", EXPERT_POLICY) == []


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="pair source"):
        choose_pairs(("a",), [True], "b", "mine+yours")
    with pytest.raises(ValueError, match="one verification outcome"):
        choose_pairs(("a", "b"), [True], "c")
    with pytest.raises(ValueError, match="gamma_low <= gamma_high"):
        check_thresholds(0.7, 0.6)
