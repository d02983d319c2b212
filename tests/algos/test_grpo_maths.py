"""The GRPO maths against plain-loop versions, and a learning test that catches sign errors."""

import math

import pytest
import torch

from hindsight.algos.grpo import (
    Aggregation, clipped_policy_loss, group_advantages, k3_kl, nonzero_variance_groups,
)


def loop_advantages(rewards, normalize_std=True, eps=1e-6):
    out = []
    for group in rewards:
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group))
        out.append([(r - mean) / (std + eps) if normalize_std else r - mean for r in group])
    return out


def loop_loss(logp, logp_old, adv, mask, clip_low, clip_high, aggregation, logp_ref=None, kl_coef=0.0):
    per_seq, total, count = [], 0.0, 0
    for b in range(len(logp)):
        s, n = 0.0, 0
        for t in range(len(logp[b])):
            if not mask[b][t]:
                continue
            ratio = math.exp(logp[b][t] - logp_old[b][t])
            term = -min(ratio * adv[b], min(max(ratio, 1 - clip_low), 1 + clip_high) * adv[b])
            if logp_ref is not None:
                r = logp_ref[b][t] - logp[b][t]
                term += kl_coef * (math.exp(r) - r - 1)
            s += term
            n += 1
        if n:
            per_seq.append(s / n)
        total += s
        count += n
    if aggregation is Aggregation.SEQUENCE_MEAN:
        return sum(per_seq) / len(per_seq)
    return total / count


def test_group_advantages_match_loop():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.2, 0.4, 0.9, 0.1], [0.5, 0.5, 0.5, 0.5]])
    for normalize in (True, False):
        expected = torch.tensor(loop_advantages(rewards.tolist(), normalize))
        assert torch.allclose(group_advantages(rewards, normalize_std=normalize), expected, atol=1e-6)
    assert torch.all(group_advantages(rewards)[2] == 0)  # equal returns: zero, not NaN


def test_group_advantages_signs():
    adv = group_advantages(torch.tensor([[1.0, 0.0]]))
    assert adv[0, 0] > 0 > adv[0, 1]


def test_zero_variance_filter():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.3, 0.3]])
    assert nonzero_variance_groups(rewards).tolist() == [False, True, False]


def test_bad_reward_shape():
    with pytest.raises(ValueError, match="num_groups"):
        group_advantages(torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("aggregation", list(Aggregation))
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_loss_matches_loop(aggregation, clip):
    torch.manual_seed(0)
    B, T = 4, 7
    logp = -torch.rand(B, T) * 2
    logp_old = logp + (torch.rand(B, T) - 0.5) * 0.8  # ratios well outside the clip range
    logp_ref = logp + (torch.rand(B, T) - 0.5) * 0.3
    adv = torch.tensor([1.5, -0.7, 0.0, 0.3])
    mask = torch.ones(B, T)
    mask[0, 5:] = 0
    mask[2, :3] = 0
    mask[3, 1::2] = 0
    loss, stats = clipped_policy_loss(logp, logp_old, adv, mask, clip_low=clip[0], clip_high=clip[1],
                                      aggregation=aggregation, logp_ref=logp_ref, kl_coef=0.05)
    expected = loop_loss(logp.tolist(), logp_old.tolist(), adv.tolist(), mask.tolist(), clip[0], clip[1],
                         aggregation, logp_ref.tolist(), 0.05)
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert 0 < stats.clip_frac < 1


def test_aggregations_differ_on_unequal_lengths():
    values = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert Aggregation.SEQUENCE_MEAN.reduce(values, mask).item() == pytest.approx(2.0)
    assert Aggregation.TOKEN_MEAN.reduce(values, mask).item() == pytest.approx(7 / 5)


def test_masked_tokens_get_no_gradient():
    logp = torch.zeros(1, 4, requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), mask)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 3] == 0 and logp.grad[0, 1] < 0


def test_k3_is_nonnegative_and_zero_at_equality():
    logp = torch.log(torch.tensor([[0.1, 0.5, 0.9]]))
    assert torch.all(k3_kl(logp, logp) == 0)
    assert torch.all(k3_kl(logp, torch.log(torch.tensor([[0.3, 0.2, 0.6]]))) > 0)


def test_kl_needs_reference():
    with pytest.raises(ValueError, match="logp_ref"):
        clipped_policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), kl_coef=0.1)


def test_bandit_learns_the_rewarded_arm():
    """A 4-armed bandit trained with the GRPO pieces: the rewarded arm's probability must rise."""
    torch.manual_seed(0)
    logits = torch.zeros(4, requires_grad=True)
    optimizer = torch.optim.SGD([logits], lr=0.5)
    best = 2
    start = torch.softmax(logits, 0)[best].item()
    for _ in range(60):
        with torch.no_grad():
            probs = torch.softmax(logits, 0)
            actions = torch.multinomial(probs, 8, replacement=True)
            rewards = (actions == best).float().unsqueeze(0)
            logp_old = torch.log(probs[actions]).unsqueeze(1)
        advantages = group_advantages(rewards)[0]
        for _ in range(2):  # two clipped epochs on the same samples
            logp = torch.log_softmax(logits, 0)[actions].unsqueeze(1)
            loss, _ = clipped_policy_loss(logp, logp_old, advantages, torch.ones(8, 1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert torch.softmax(logits, 0)[best].item() > max(0.9, start + 0.5)


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_micro_batch_weights_reproduce_the_full_batch(aggregation):
    torch.manual_seed(1)
    values = torch.rand(6, 5)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[4] = 0  # a sequence with no generated tokens
    full = aggregation.reduce(values, mask)
    total = aggregation.units(mask)
    parts = sum(
        aggregation.reduce(values[i : i + 2], mask[i : i + 2]) * aggregation.units(mask[i : i + 2]) / total
        for i in range(0, 6, 2)
    )
    assert parts.item() == pytest.approx(full.item(), rel=1e-6)
