"""The advantage-estimator registry: GRPO's parity with the direct calls, exact zeros, std conventions, and GiGPO
against a plain loop."""

import math

import pytest
import torch

from hindsight.algos.advantages import (
    ADVANTAGE_ESTIMATORS, AdvantageOptions, Advantages, GroupBatch, StepParts, discounted_returns, group_relative,
    step_parts,
)
from hindsight.algos.grpo import group_advantages
from hindsight.registry import UnknownName


def loop_normalise(values, sample=False, normalize_std=True, eps=1e-6):
    """One group: (v − mean) / (std + eps), 0 for every member when all values are equal."""
    if len(set(values)) == 1:
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1 if sample else len(values)))
    return [(v - mean) / (std + eps) if normalize_std else v - mean for v in values]


def loop_gigpo(returns, groups, rewards, keys, gamma, weight, sample=False, normalize_std=True):
    """GiGPO written out: episode advantages per group, discounted returns, step groups by (group, state)."""
    episode = [0.0] * len(returns)
    for group in set(groups):
        members = [i for i, g in enumerate(groups) if g == group]
        for i, a in zip(members, loop_normalise([returns[i] for i in members], sample, normalize_std)):
            episode[i] = a
    to_go = []
    for row in rewards:
        out, running = [0.0] * len(row), 0.0
        for t in reversed(range(len(row))):
            running = row[t] + gamma * running
            out[t] = running
        to_go.append(out)
    anchors = {}
    for i, row in enumerate(keys):
        for t, key in enumerate(row):
            anchors.setdefault((groups[i], key), []).append((i, t))
    step = [[0.0] * len(row) for row in keys]
    for members in anchors.values():
        for (i, t), a in zip(members, loop_normalise([to_go[i][t] for i, t in members], sample, normalize_std)):
            step[i][t] = a
    return episode, [[episode[i] + weight * a for a in row] for i, row in enumerate(step)]


def test_the_registry_holds_grpo_and_gigpo_and_names_unknown_ones():
    assert {"grpo", "gigpo"} <= set(ADVANTAGE_ESTIMATORS.names())
    with pytest.raises(UnknownName, match="unknown advantage estimator 'gpro'; known: grpo, gigpo"):
        ADVANTAGE_ESTIMATORS.get("gpro")


@pytest.mark.parametrize("normalize_std", [True, False])
def test_grpo_estimator_matches_the_direct_call(normalize_std):
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.2, 0.4, 0.9, 0.1], [0.5, 0.5, 0.5, 0.5]])
    options = AdvantageOptions(normalize_std=normalize_std)
    out = ADVANTAGE_ESTIMATORS.get("grpo")(GroupBatch.from_matrix(returns), options)
    assert out.steps is None and out.trajectory.dtype == torch.float64
    direct = group_advantages(returns, normalize_std=normalize_std).flatten()
    assert torch.allclose(out.trajectory.float(), direct, atol=1e-6)
    expected = [a for group in returns.tolist() for a in loop_normalise(group, normalize_std=normalize_std)]
    assert torch.allclose(out.trajectory, torch.tensor(expected, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("value", [0.97, 1 / 3, 0.1, 0.7])
@pytest.mark.parametrize("std", ["population", "sample"])
def test_equal_returns_give_exactly_zero(value, std):
    rewards = torch.full((3, 8), value)  # float32, as the GRPO loop builds them
    assert torch.count_nonzero(group_advantages(rewards, std=std)) == 0
    assert torch.count_nonzero(group_advantages(rewards.double(), std=std, normalize_std=False)) == 0
    batch = GroupBatch(torch.tensor([value] * 5 + [1.0], dtype=torch.float64), ("a",) * 5 + ("b",))
    assert torch.count_nonzero(ADVANTAGE_ESTIMATORS.get("grpo")(batch, AdvantageOptions(std=std)).trajectory) == 0


def test_float32_means_used_to_give_equal_returns_large_advantages():
    # The defect the exact core removes: the float32 mean of eight 0.97s is not 0.97.
    rewards = torch.full((1, 8), 0.97)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    assert torch.count_nonzero(centred) > 0 and float((centred / 1e-6).abs().max()) > 0.05


@pytest.mark.parametrize("std", ["population", "sample"])
def test_a_group_of_one_gets_zero(std):
    assert group_advantages(torch.tensor([[0.97]]), std=std).tolist() == [[0.0]]
    out = group_relative(torch.tensor([0.3, 1.0, 0.0], dtype=torch.float64), ["solo", "pair", "pair"],
                         AdvantageOptions(std=std))
    assert out[0].item() == 0.0 and out[1].item() > 0 > out[2].item()


def test_sample_std_matches_a_loop_and_scales_the_population_one():
    rewards = torch.tensor([[0.2, 0.4, 0.9, 0.1], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    sample = group_advantages(rewards, std="sample", eps=0.0)
    population = group_advantages(rewards, std="population", eps=0.0)
    expected = torch.tensor([loop_normalise(group, sample=True, eps=0.0) for group in rewards.tolist()],
                            dtype=torch.float64)
    assert torch.allclose(sample, expected, atol=1e-12)
    assert torch.allclose(population, sample * math.sqrt(4 / 3), atol=1e-12)
    with pytest.raises(ValueError, match="std must be one of population, sample"):
        group_advantages(rewards, std="unbiased")


def test_discounted_returns_match_a_loop():
    rewards = [0.0, 0.5, 0.0, 1.0]
    expected = [0.5 * 0.9 + 0.9 ** 3, 0.5 + 0.9 ** 2, 0.9, 1.0]
    assert discounted_returns(rewards, 0.9).tolist() == pytest.approx(expected, abs=1e-12)
    assert discounted_returns([], 0.9).shape == (0,)


def gigpo_batch():
    """Two groups. In group 0, state A is met by three trajectories (one revisits it), B by two, C and D
    once each, and one trajectory took no steps; group 1 holds one trajectory (a group of size 1)."""
    keys = [("A", "B", "C"), ("A", "A", "B"), ("A", "D"), ("A", "B"), ()]
    returns = [1.0, 0.0, 0.97, 1.0, 0.0]
    rewards = [tuple(0.0 for _ in row[1:]) + ((r,) if row else ()) for row, r in zip(keys, returns)]
    groups = (0, 0, 0, 1, 0)
    batch = GroupBatch(torch.tensor(returns, dtype=torch.float64), groups, tuple(rewards), keys)
    return batch, returns, list(groups), rewards, keys


@pytest.mark.parametrize("options", [AdvantageOptions(), AdvantageOptions(gamma=0.8, step_weight=0.5),
                                     AdvantageOptions(std="sample"), AdvantageOptions(normalize_std=False)])
def test_gigpo_matches_a_plain_loop(options):
    batch, returns, groups, rewards, keys = gigpo_batch()
    out = ADVANTAGE_ESTIMATORS.get("gigpo")(batch, options)
    episode, steps = loop_gigpo(returns, groups, rewards, keys, options.gamma, options.step_weight,
                                options.std == "sample", options.normalize_std)
    assert out.trajectory.tolist() == pytest.approx(episode, abs=1e-9)
    assert [row.tolist() for row in out.steps] == [pytest.approx(row, abs=1e-9) for row in steps]
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(batch, options).trajectory
    assert torch.equal(out.trajectory, grpo)  # the episode level is GRPO's


def test_gigpo_singleton_step_groups_add_nothing():
    batch, *_ = gigpo_batch()
    out = ADVANTAGE_ESTIMATORS.get("gigpo")(batch, AdvantageOptions())
    # Trajectory 0's C and trajectory 2's D are met once: their step advantage is the episode's.
    assert out.steps[0][2].item() == out.trajectory[0].item() and out.steps[2][1].item() == out.trajectory[2].item()
    # Group 1 is trajectory 3 alone: nothing to compare with at either level.
    assert out.trajectory[3].item() == 0.0 and out.steps[3].tolist() == [0.0, 0.0]
    assert out.steps[4].shape == (0,) and out.trajectory[4].item() < 0


def test_gigpo_without_repeated_states_or_steps_is_grpo():
    returns = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    distinct = GroupBatch(returns, (0, 0, 0), ((0.0, 1.0), (0.0,), (0.5,)), (("a", "b"), ("c",), ("d",)))
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(distinct, AdvantageOptions()).trajectory
    out = ADVANTAGE_ESTIMATORS.get("gigpo")(distinct, AdvantageOptions())
    assert [row.tolist() for row in out.steps] == [[grpo[0].item()] * 2, [grpo[1].item()], [grpo[2].item()]]
    no_steps = ADVANTAGE_ESTIMATORS.get("gigpo")(GroupBatch(returns, (0, 0, 0)), AdvantageOptions())
    assert no_steps.steps is None and torch.equal(no_steps.trajectory, grpo)


def test_gigpo_step_advantages_vary_by_turn_for_equal_returns():
    # Both trajectories succeed from state A, one in two steps and one in three: equal returns, so
    # the episode level is 0, but the discount credits the shorter path at the shared state.
    batch = GroupBatch(torch.tensor([1.0, 1.0], dtype=torch.float64), (0, 0),
                       ((0.0, 1.0), (0.0, 0.0, 1.0)), (("A", "B"), ("A", "C", "B")))
    out = ADVANTAGE_ESTIMATORS.get("gigpo")(batch, AdvantageOptions())
    assert out.trajectory.tolist() == [0.0, 0.0]
    assert out.steps[0][0].item() > 0 > out.steps[1][0].item()
    # B is both trajectories' last state, with the same return-to-go; C is met once.
    assert out.steps[0][1].item() == out.steps[1][2].item() == out.steps[1][1].item() == 0.0


@pytest.mark.parametrize("options", [AdvantageOptions(), AdvantageOptions(gamma=0.8, step_weight=0.5)])
def test_step_parts_count_what_a_plain_loop_counts(options):
    batch, *_ = gigpo_batch()
    out = ADVANTAGE_ESTIMATORS.get("gigpo")(batch, options)
    steps = with_part = first_turn = opposing = 0
    for episode, row in zip(out.trajectory.tolist(), out.steps):
        for turn, value in enumerate(row.tolist()):
            steps += 1
            if abs(value - episode) > 1e-6:
                with_part += 1
                first_turn += turn == 0
                opposing += (value - episode) * episode < 0
    counted = step_parts(out)
    assert counted == StepParts(steps, with_part, first_turn, opposing)
    # The batch has a step part on a shared first state and on a revisit, and GRPO has none at all.
    assert counted.with_part > counted.first_turn > 0
    assert step_parts(ADVANTAGE_ESTIMATORS.get("grpo")(batch, options)) == StepParts()


def test_step_parts_flags_a_step_that_pulls_against_its_episode():
    # A success's second step pulled 0.2 below its episode's +1.0 and a failure's first step pulled
    # 0.3 above its -1.0 both pull against; a step of an episode at 0 has a part but no sign to oppose.
    out = Advantages(torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64),
                     (torch.tensor([1.0, 0.8]), torch.tensor([-0.7, -1.0]), torch.tensor([0.5])))
    assert step_parts(out) == StepParts(steps=5, with_part=3, first_turn=2, opposing=2)
    # A part of the episode's own sign reinforces it.
    same = Advantages(torch.tensor([1.0], dtype=torch.float64), (torch.tensor([1.5, 1.0]),))
    assert step_parts(same) == StepParts(steps=2, with_part=1, first_turn=1, opposing=0)


def test_advantages_at_turns():
    per_trajectory = Advantages(torch.tensor([0.5, -0.5], dtype=torch.float64))
    assert per_trajectory.at(1, (0,)) == -0.5 and per_trajectory.at(0, (0, 1, 2)) == 0.5
    per_step = Advantages(torch.tensor([0.5], dtype=torch.float64), (torch.tensor([0.1, 0.2], dtype=torch.float64),))
    assert per_step.at(0, (1,)) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="different step advantages"):
        per_step.at(0, (0, 1))


def test_group_batch_checks_its_shapes():
    with pytest.raises(ValueError, match="one group id each"):
        GroupBatch(torch.zeros(2, dtype=torch.float64), (0,))
    with pytest.raises(ValueError, match="come together"):
        GroupBatch(torch.zeros(1, dtype=torch.float64), (0,), step_rewards=((1.0,),))
    with pytest.raises(ValueError, match="one state key per step reward"):
        GroupBatch(torch.zeros(1, dtype=torch.float64), (0,), ((1.0,),), (("a", "b"),))
    with pytest.raises(ValueError, match="gamma"):
        AdvantageOptions(gamma=1.5)
