"""ECHO's critic reward and refinement statistics against plain-loop versions, with edge cases."""

import math

import pytest
import torch

from hindsight.algos.echo import (
    Gain, critic_rewards, improvement_rate, linear_gain, mean_gain, near_ceiling_improvements, saturation_aware_gain,
)

INITIAL = [0.0, 0.5, 0.9, 1.0, 1.0]
REFINED = [[0.0, 1.0, 0.25], [0.5, 0.25, 1.0], [1.0, 0.9, 0.95], [1.0, 0.0, 0.5], [1.0, 1.0, 1.0]]


def loop_rewards(initial, refined, gain, eta, negative_weight):
    out = []
    for s_o, row in zip(initial, refined):
        values = []
        for s_r in row:
            g = math.log((1 - s_o + eta) / (1 - s_r + eta)) if gain == "sa" else s_r - s_o
            values.append(g * negative_weight if g < 0 else g)
        out.append(values)
    return out


@pytest.mark.parametrize("gain", ["sa", "linear"])
@pytest.mark.parametrize("eta, negative_weight", [(0.1, 1.0), (0.05, 0.5), (1.0, 0.0), (0.1, 2.0)])
def test_critic_rewards_match_loop(gain, eta, negative_weight):
    got = critic_rewards(torch.tensor(INITIAL), torch.tensor(REFINED), gain=Gain(gain), eta=eta,
                         negative_weight=negative_weight)
    expected = torch.tensor(loop_rewards(INITIAL, REFINED, gain, eta, negative_weight))
    assert got.shape == (5, 3)
    assert torch.allclose(got, expected, atol=1e-6)


def test_full_scores_are_finite_and_unchanged_scores_earn_nothing():
    initial, refined = torch.tensor([1.0, 1.0, 0.0, 0.3]), torch.tensor([[1.0], [0.0], [1.0], [0.3]])
    gain = saturation_aware_gain(initial, refined, eta=0.1)
    assert torch.isfinite(gain).all()
    assert gain[0, 0] == 0 and gain[3, 0] == 0  # s_o = s_r = 1 and s_o = s_r < 1
    assert gain[1, 0] == pytest.approx(math.log(0.1 / 1.1))  # losing a full score
    assert gain[2, 0] == pytest.approx(math.log(1.1 / 0.1))  # reaching it from nothing


def test_saturation_aware_gain_rewards_the_last_mile_more():
    low, high = saturation_aware_gain(torch.tensor([0.1, 0.9]), torch.tensor([[0.2], [1.0]]))
    assert high.item() > low.item() > 0
    linear = linear_gain(torch.tensor([0.1, 0.9]), torch.tensor([[0.2], [1.0]]))
    assert torch.allclose(linear, torch.tensor([[0.1], [0.1]]))


def test_saturation_aware_gain_is_additive_and_antisymmetric():
    a, b, c = 0.2, 0.7, 0.95
    g = lambda x, y: saturation_aware_gain(torch.tensor([x]), torch.tensor([[y]])).item()  # noqa: E731
    assert g(a, b) + g(b, c) == pytest.approx(g(a, c))
    assert g(a, c) == pytest.approx(-g(c, a))


def test_negative_weight_only_scales_regressions():
    rewards = critic_rewards(torch.tensor([0.5]), torch.tensor([[0.25, 0.75]]), negative_weight=0.0)
    assert rewards[0, 0] == 0 and rewards[0, 1] > 0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="eta"):
        saturation_aware_gain(torch.tensor([0.5]), torch.tensor([[1.0]]), eta=0.0)
    with pytest.raises(ValueError, match="negative_weight"):
        critic_rewards(torch.tensor([0.5]), torch.tensor([[1.0]]), negative_weight=-1)
    with pytest.raises(ValueError, match=r"\[Q, N\]"):
        linear_gain(torch.tensor([0.5, 0.1]), torch.tensor([1.0, 0.2]))


def test_refinement_statistics_match_loop():
    initial, refined = torch.tensor(INITIAL), torch.tensor(REFINED)
    pairs = [(s_o, s_r) for s_o, row in zip(INITIAL, REFINED) for s_r in row]
    assert improvement_rate(initial, refined) == pytest.approx(sum(s_r > s_o for s_o, s_r in pairs) / len(pairs))
    near = [(s_o, s_r) for s_o, s_r in pairs if 0.8 <= s_o < 1]
    assert near_ceiling_improvements(initial, refined, 0.8) == (len(near), sum(s_r > s_o for s_o, s_r in near))
    per_query = [sum(row) / len(row) - s_o for s_o, row in zip(INITIAL, REFINED)]
    assert mean_gain(initial, refined) == pytest.approx(sum(per_query) / len(per_query))
