"""DPO on summed log-probabilities against a plain loop."""

import math

import pytest
import torch

from hindsight.algos.dpo import dpo_loss


def test_dpo_loss_matches_a_plain_loop():
    torch.manual_seed(0)
    pc, pr, rc, rr = (torch.randn(5) * 3 for _ in range(4))
    terms = dpo_loss(pc, pr, rc, rr, beta=0.5)
    expected = sum(-math.log(1 / (1 + math.exp(-0.5 * ((a - c) - (b - d)))))
                   for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist())) / 5
    assert float(terms.loss) == pytest.approx(expected, rel=1e-6)
    assert terms.chosen_rewards.tolist() == pytest.approx((0.5 * (pc - rc)).tolist())
    # At the reference, every reward is 0 and the loss is ln 2.
    same = dpo_loss(rc, rr, rc, rr, beta=0.5)
    assert float(same.loss) == pytest.approx(math.log(2)) and same.reward_margin == 0.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2), beta=0)
    with pytest.raises(ValueError, match="same shape"):
        dpo_loss(torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2), beta=1)
