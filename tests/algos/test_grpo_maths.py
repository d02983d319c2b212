"""The GRPO maths against plain-loop versions, and a learning test that catches sign errors."""

import math

import pytest
import torch

from hindsight.algos.grpo import (
    Aggregation, aggregate, clipped_policy_loss, group_advantages, k3_kl, net_advantage, nonzero_variance_groups,
    sequence_weights, top_spread_groups,
)


def loop_advantages(rewards, normalize_std=True, eps=1e-6):
    out = []
    for group in rewards:
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group))
        out.append([(r - mean) / (std + eps) if normalize_std else r - mean for r in group])
    return out


def loop_loss(logp, logp_old, adv, mask, trajectories, clip_low, clip_high, aggregation, logp_ref=None, kl_coef=0.0,
              entropy=None, entropy_coef=0.0):
    """The aggregated loss written out: per-token terms, then the aggregation's plain definition.

    Row b is one turn of trajectory trajectories[b] (a trajectory's turns need not be adjacent).
    """
    terms = []  # (trajectory, row, term) for every generated token
    for b in range(len(logp)):
        for t in range(len(logp[b])):
            if not mask[b][t]:
                continue
            ratio = math.exp(logp[b][t] - logp_old[b][t])
            term = -min(ratio * adv[b], min(max(ratio, 1 - clip_low), 1 + clip_high) * adv[b])
            if logp_ref is not None:
                r = logp_ref[b][t] - logp[b][t]
                term += kl_coef * (math.exp(r) - r - 1)
            if entropy is not None:
                term -= entropy_coef * entropy[b][t]
            terms.append((trajectories[b], b, term))
    return loop_aggregate(terms, aggregation)


def loop_aggregate(terms, aggregation):
    """The aggregation's plain definition over (trajectory, row, term) entries, one per generated token."""
    if aggregation is Aggregation.TOKEN_MEAN:
        return sum(term for _, _, term in terms) / len(terms)
    key = 0 if aggregation is Aggregation.TRAJECTORY_MEAN else 1
    units = {}
    for entry in terms:
        units.setdefault(entry[key], []).append(entry[2])
    return sum(sum(values) / len(values) for values in units.values()) / len(units)


def weights_for(mask, trajectories, aggregation):
    tokens = [int(n) for n in mask.sum(dim=1).tolist()]
    return sequence_weights(tokens, trajectories, aggregation, aggregation.units(tokens, trajectories))


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


def loop_top_spread(rewards, fraction):
    """By hand: rank the groups by population std, largest first (earlier first on ties), keep ceil(f·N)."""
    stds = []
    for group in rewards:
        mean = sum(group) / len(group)
        stds.append(math.sqrt(sum((r - mean) ** 2 for r in group) / len(group)))
    ranked = sorted(range(len(stds)), key=lambda i: (-stds[i], i))
    keep = set(ranked[: max(1, math.ceil(fraction * len(stds)))])
    return [i in keep for i in range(len(stds))]


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.6, 1.0, 0.01])
def test_ragen_variance_filter_matches_a_plain_loop(fraction):
    rewards = [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.2, 0.9],
               [1.0, 0.0, 0.0, 1.0]]
    got = top_spread_groups(torch.tensor(rewards), fraction).tolist()
    assert got == loop_top_spread(rewards, fraction)
    assert sum(got) == max(1, math.ceil(fraction * 5))


def test_ragen_variance_filter_refuses_a_fraction_outside_0_1():
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="fraction"):
            top_spread_groups(torch.zeros(2, 3), bad)


def test_bad_reward_shape():
    with pytest.raises(ValueError, match="num_groups"):
        group_advantages(torch.tensor([1.0, 2.0]))


# Six turns of three trajectories with 3, 2 and 1 turns, interleaved as micro-batching may leave them.
TRAJECTORIES = ["a", "b", "a", "c", "b", "a"]


def loss_inputs(seed=0):
    torch.manual_seed(seed)
    B, T = 6, 7
    logp = -torch.rand(B, T) * 2
    logp_old = logp + (torch.rand(B, T) - 0.5) * 0.8  # ratios well outside the clip range
    logp_ref = logp + (torch.rand(B, T) - 0.5) * 0.3
    adv = torch.tensor([1.5, -0.7, 1.5, 0.3, -0.7, 1.5])  # a trajectory's turns share its advantage
    mask = torch.ones(B, T)
    mask[0, 5:] = 0
    mask[2, :3] = 0
    mask[3, 1::2] = 0
    mask[4, :6] = 0
    return logp, logp_old, logp_ref, adv, mask


@pytest.mark.parametrize("aggregation", list(Aggregation))
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_loss_matches_loop(aggregation, clip):
    logp, logp_old, logp_ref, adv, mask = loss_inputs()
    loss, stats = clipped_policy_loss(logp, logp_old, adv, mask, weights_for(mask, TRAJECTORIES, aggregation),
                                      clip_low=clip[0], clip_high=clip[1], logp_ref=logp_ref, kl_coef=0.05)
    expected = loop_loss(logp.tolist(), logp_old.tolist(), adv.tolist(), mask.tolist(), TRAJECTORIES, clip[0], clip[1],
                         aggregation, logp_ref.tolist(), 0.05)
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert 0 < stats.clip_frac < 1


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_the_entropy_bonus_matches_loop(aggregation):
    logp, logp_old, logp_ref, adv, mask = loss_inputs(2)
    entropy = torch.rand(logp.shape) * 1.4
    weights = weights_for(mask, TRAJECTORIES, aggregation)
    loss, stats = clipped_policy_loss(logp, logp_old, adv, mask, weights, logp_ref=logp_ref, kl_coef=0.05,
                                      entropy=entropy, entropy_coef=0.01)
    expected = loop_loss(logp.tolist(), logp_old.tolist(), adv.tolist(), mask.tolist(), TRAJECTORIES, 0.2, 0.2,
                         aggregation, logp_ref.tolist(), 0.05, entropy.tolist(), 0.01)
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # The logged entropy is the bonus's own aggregate: the loss without it, minus 0.01 of it.
    plain, _ = clipped_policy_loss(logp, logp_old, adv, mask, weights, logp_ref=logp_ref, kl_coef=0.05)
    assert loss.item() == pytest.approx(plain.item() - 0.01 * stats.entropy, rel=1e-5, abs=1e-6)
    no_bonus = loop_loss(logp.tolist(), logp_old.tolist(), adv.tolist(), mask.tolist(), TRAJECTORIES, 0.2, 0.2,
                         aggregation, logp_ref.tolist(), 0.05, [[1.0] * logp.shape[1]] * logp.shape[0], 0.0)
    assert plain.item() == pytest.approx(no_bonus, rel=1e-5, abs=1e-6)


def test_the_entropy_bonus_needs_entropies():
    logp, logp_old, _, adv, mask = loss_inputs()
    with pytest.raises(ValueError, match="entropy"):
        clipped_policy_loss(logp, logp_old, adv, mask, entropy_coef=0.01)


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_micro_batch_weights_reproduce_the_full_batch(aggregation):
    logp, logp_old, logp_ref, adv, mask = loss_inputs(1)
    mask[1] = 0  # a turn with no generated tokens
    weights = weights_for(mask, TRAJECTORIES, aggregation)
    logp.requires_grad_(True)
    full, _ = clipped_policy_loss(logp, logp_old, adv, mask, weights, logp_ref=logp_ref, kl_coef=0.05)
    (full_grad,) = torch.autograd.grad(full, logp)
    parts = [clipped_policy_loss(logp[i : i + 2], logp_old[i : i + 2], adv[i : i + 2], mask[i : i + 2],
                                 weights[i : i + 2], logp_ref=logp_ref[i : i + 2], kl_coef=0.05)[0]
             for i in range(0, 6, 2)]
    (parts_grad,) = torch.autograd.grad(sum(parts), logp)
    assert sum(parts).item() == pytest.approx(full.item(), rel=1e-6)
    assert torch.allclose(parts_grad, full_grad, rtol=1e-6, atol=1e-9)


def test_a_trajectory_with_more_turns_does_not_weigh_more():
    # Trajectory "a" has three one-token turns, "b" one: each trajectory gets half the weight.
    tokens, ids = [1, 1, 1, 1], ["a", "a", "a", "b"]
    trajectory = sequence_weights(tokens, ids, Aggregation.TRAJECTORY_MEAN, Aggregation.TRAJECTORY_MEAN.units(tokens, ids))
    per_turn = sequence_weights(tokens, ids, Aggregation.TURN_MEAN, Aggregation.TURN_MEAN.units(tokens, ids))
    assert trajectory.tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    assert per_turn.tolist() == pytest.approx([1 / 4] * 4)


def test_aggregations_differ_on_unequal_lengths():
    values = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert aggregate(values, mask, weights_for(mask, ["x", "y"], Aggregation.TRAJECTORY_MEAN)).item() == pytest.approx(2.0)
    assert aggregate(values, mask, weights_for(mask, ["x", "y"], Aggregation.TOKEN_MEAN)).item() == pytest.approx(7 / 5)
    # Two turns of one trajectory: the trajectory mean is the token mean of its turns.
    assert aggregate(values, mask, weights_for(mask, ["x", "x"], Aggregation.TRAJECTORY_MEAN)).item() == pytest.approx(7 / 5)
    assert aggregate(values, mask, weights_for(mask, ["x", "x"], Aggregation.TURN_MEAN)).item() == pytest.approx(2.0)


def test_old_configs_name_the_per_turn_form_sequence_mean():
    assert Aggregation("sequence_mean") is Aggregation.TURN_MEAN
    with pytest.raises(ValueError):
        Aggregation("per_sample")


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


def loop_net_advantage(advantages, loss_tokens, trajectories, aggregation):
    """The aggregated advantage written out: every generated token carries its sequence's advantage."""
    terms = [(trajectories[s], s, advantages[s]) for s in range(len(advantages)) for _ in range(loss_tokens[s])]
    return loop_aggregate(terms, aggregation)


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_net_advantage_matches_loop(aggregation):
    # One group of four episodes: two successes of 3 and 4 turns (7 tokens a turn), two one-turn falls.
    trajectories = ["s1", "s1", "s1", "s2", "s2", "s2", "s2", "f1", "f2"]
    adv = {"s1": 1.0, "s2": 1.0, "f1": -1.0, "f2": -1.0}
    advantages = [adv[t] for t in trajectories]
    tokens = [7] * len(trajectories)
    weights = sequence_weights(tokens, trajectories, aggregation, aggregation.units(tokens, trajectories))
    got = net_advantage(advantages, tokens, weights)
    assert got == pytest.approx(loop_net_advantage(advantages, tokens, trajectories, aggregation), abs=1e-12)
    if aggregation is Aggregation.TRAJECTORY_MEAN:
        assert got == pytest.approx(0.0, abs=1e-12)  # whole groups: no push, whatever the lengths
    else:
        assert got == pytest.approx((7 - 2) / 9)  # seven success turns against two fall turns


def test_net_advantage_needs_one_entry_per_sequence():
    with pytest.raises(ValueError, match="one advantage"):
        net_advantage([1.0, -1.0], [3], torch.ones(2))
