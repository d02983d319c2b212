"""Self-Guide's step rewards, trust schedule and shaped return against plain definitions."""

import pytest
import torch

from hindsight.algos.selfguide import (
    Label, TrustSchedule, guidance_only_groups, shaped_return, step_reward, trust_weight, update_progress,
)


def plain_trapezoid(u, start, full, hold, end):
    """λ(u) written as the paper describes it, phase by phase."""
    if u < start:
        return 0.0  # phase I: guidance only
    if u < full:
        return (u - start) / (full - start)  # phase II: ramp up
    if u <= hold:
        return 1.0  # phase III: full internal reward
    if u < end:
        return 1.0 - (u - hold) / (end - hold)  # phase IV: anneal
    return 0.0


@pytest.mark.parametrize("points", [(0.4, 0.5, 0.7, 0.8), (0.15, 0.25, 0.7, 0.8), (0.4, 0.5, 1.0, 1.0)])
def test_the_trapezoid_matches_the_phases(points):
    for i in range(101):
        u = i / 100
        assert trust_weight(u, *points) == pytest.approx(plain_trapezoid(u, *points), abs=1e-12)


def test_paper_default_over_a_100_update_run():
    schedule = TrustSchedule()
    weights = [schedule.weight(update_progress(n, 100)) for n in range(1, 101)]
    assert weights[:41] == [0.0] * 41  # updates 1..41 (u < 0.40 … u = 0.40)
    assert weights[45] == pytest.approx(0.5)  # update 46, u = 0.45
    assert weights[50:71] == [1.0] * 21  # updates 51..71, u = 0.50 … 0.70
    assert weights[75] == pytest.approx(0.5)  # update 76, u = 0.75
    assert weights[80:] == [0.0] * 20


def test_immediate_and_no_annealing_schedules():
    immediate = TrustSchedule(start=0.0, full=0.0, hold_until=1.0, end=1.0)
    assert all(immediate.weight(update_progress(n, 10)) == 1.0 for n in range(1, 11))
    no_anneal = TrustSchedule(hold_until=1.0, end=1.0)
    assert no_anneal.weight(update_progress(100, 100)) == 1.0


def test_bad_schedules_and_updates_are_refused():
    with pytest.raises(ValueError, match="start <= full"):
        TrustSchedule(start=0.6, full=0.5)
    with pytest.raises(ValueError, match="outside"):
        update_progress(0, 10)


def test_step_rewards_and_the_shaped_return():
    assert [step_reward(label) for label in Label] == [-0.1, 0.0, 0.1]
    assert step_reward("positive") == 0.1
    labels = ["positive", "positive", "negative", "neutral"]
    assert shaped_return(1.0, labels, 0.5) == pytest.approx(1.0 + 0.5 * 0.1)
    assert shaped_return(0.0, labels, 0.0) == 0.0
    with pytest.raises(ValueError):
        step_reward("great")


def test_guidance_only_groups_against_a_plain_loop():
    env = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    assessment_sums = torch.tensor([[0.1, 0.2, 0.1, 0.1], [0.3, 0.0, -0.1, 0.0], [0.0, 0.0, 0.0, 0.0],
                                    [0.2, 0.2, 0.2, 0.2]])
    shaped = env + 0.5 * assessment_sums
    expected = [len(set(e)) == 1 and len({round(x, 9) for x in s}) > 1 for e, s in zip(env.tolist(), shaped.tolist())]
    assert guidance_only_groups(env, shaped).tolist() == expected == [True, False, False, False]


def test_guidance_only_groups_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="num_groups, G"):
        guidance_only_groups(torch.zeros(2, 4), torch.zeros(8))
