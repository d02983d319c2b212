"""The verl estimator's episode returns, checked without verl (its maths need only torch)."""

import pytest
import torch

from hindsight.verl.estimators import episode_returns, trajectory_grpo


def test_a_row_cut_on_observation_tokens_keeps_its_reward():
    # verl writes a row's score on its last token; a truncated episode's last token is an observation's.
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.6], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert episode_returns(rewards, mask).tolist() == pytest.approx([0.6, 1.0, 0.0])
    advantages, _ = trajectory_grpo(rewards, mask, ["g", "g", "g"])
    mean = (0.6 + 1.0 + 0.0) / 3
    std = (((0.6 - mean) ** 2 + (1.0 - mean) ** 2 + mean**2) / 3) ** 0.5
    assert advantages[0, 0].item() == pytest.approx((0.6 - mean) / (std + 1e-6), abs=1e-5)
    assert advantages[0, 2:].tolist() == [0.0, 0.0]  # observation tokens carry no advantage


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        episode_returns(torch.zeros(2, 3), torch.zeros(2, 4))
