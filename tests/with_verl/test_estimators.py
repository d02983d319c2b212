"""Hindsight's estimators, called the way verl calls them, against a plain loop over the rows."""

import math

import numpy as np
import pytest

# verl has its own venv (constraints-verl.txt): `bash .ci/verl` builds it and runs these; `.ci/run` ignores them.
pytest.importorskip("verl", reason="verl is not installed here; it has its own venv (bash .ci/verl)")
import torch  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

import hindsight.verl.plugin  # noqa: E402,F401


def rows():
    """Five rows in two groups of unequal size; rewards on the last model token, as verl writes them."""
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 1, 1], [1, 1, 1, 1, 0]])
    returns = [1.0, 0.0, 0.5, 0.3, 0.3]
    rewards = torch.zeros(mask.shape)
    for row, value in enumerate(returns):
        rewards[row, int(mask[row].nonzero().max())] = value
    return rewards, mask, np.array(["a", "b", "a", "b", "a"], dtype=object), returns


def loop_grpo(returns, index, normalize_std):
    """Per row: (R − group mean) / (population std + 1e-6), or only centred."""
    out = []
    for row, group in enumerate(index):
        peers = [r for r, g in zip(returns, index) if g == group]
        mean = sum(peers) / len(peers)
        std = math.sqrt(sum((r - mean) ** 2 for r in peers) / len(peers))
        out.append((returns[row] - mean) / (std + 1e-6) if normalize_std else returns[row] - mean)
    return out


@pytest.mark.parametrize("normalize_std", [True, False])
def test_trajectory_grpo_matches_a_plain_loop(normalize_std):
    rewards, mask, index, returns = rows()
    estimator = get_adv_estimator_fn("hindsight_grpo")
    config = AlgoConfig(adv_estimator="hindsight_grpo", norm_adv_by_std_in_grpo=normalize_std)
    advantages, returned = estimator(token_level_rewards=rewards, response_mask=mask, config=config, index=index)
    assert advantages.shape == mask.shape and torch.equal(advantages, returned)
    expected = loop_grpo(returns, list(index), normalize_std)
    for row in range(len(returns)):
        for token in range(mask.shape[1]):
            want = expected[row] if mask[row, token] else 0.0
            assert advantages[row, token].item() == pytest.approx(want, abs=1e-5)


def test_a_group_of_equal_returns_or_one_row_gets_zero_advantage():
    mask = torch.ones(3, 2)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.7]])
    advantages, _ = get_adv_estimator_fn("hindsight_grpo")(
        token_level_rewards=rewards, response_mask=mask, index=np.array([0, 0, 1]), config=None)
    assert torch.count_nonzero(advantages) == 0


def test_equal_returns_that_float32_cannot_represent_get_exactly_zero():
    mask = torch.ones(8, 3)
    rewards = torch.zeros(8, 3)
    rewards[:, 2] = 0.97  # a float32 mean of eight 0.97s is not 0.97: the old estimator gave up to ±0.107
    advantages, _ = get_adv_estimator_fn("hindsight_grpo")(
        token_level_rewards=rewards, response_mask=mask, index=np.array(["a"] * 8, dtype=object), config=None)
    assert torch.count_nonzero(advantages) == 0


def test_a_truncated_episode_keeps_its_reward_on_a_masked_last_token():
    # Cut by the response budget, the row ends on observation tokens (mask 0), where verl writes the score.
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.6], [0.0, 0.0, 0.0, 0.2]])
    advantages, _ = get_adv_estimator_fn("hindsight_grpo")(
        token_level_rewards=rewards, response_mask=mask, index=np.array(["a", "a"], dtype=object), config=None)
    expected = loop_grpo([0.6, 0.2], ["a", "a"], True)
    assert advantages[0, 0].item() == pytest.approx(expected[0], abs=1e-5) and advantages[0, 3].item() == 0.0
