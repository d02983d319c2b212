"""Self-Guide's step rewards, trust schedule and shaped return against plain definitions."""

import pytest
import torch

from hindsight.algos.selfguide import (
    GuidanceForm, Label, TrustSchedule, balanced_label_indices, guidance_only_groups, guidance_term,
    label_agreement_stats, shaped_return, step_reward, trust_weight, update_progress,
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


P, N, U = Label.POSITIVE, Label.NEGATIVE, Label.NEUTRAL


def test_label_agreement_against_counting_by_hand():
    oracle = [P, P, P, P, P, P, N, N, N, U]
    said = [P, P, P, P, P, N, N, N, P, None]
    stats = label_agreement_stats(said, oracle)
    assert stats.steps == 10
    assert stats.agreement == pytest.approx(7 / 10)  # 5 positives and 2 negatives right
    assert stats.negative_recall == pytest.approx(2 / 3)
    assert stats.said_negative == pytest.approx(3 / 10) and stats.unreadable == pytest.approx(1 / 10)
    assert stats.always_positive == pytest.approx(6 / 10)
    assert stats.label_mix == pytest.approx(0.6**2 + 0.3**2 + 0.1**2)
    # 0.7 is exactly 0.6 + the 0.10 margin, and 2/3 of the negatives are caught: the gate passes.
    assert stats.passes_gate
    assert stats.metrics("eval")["eval/passes_gate"] == 1.0


def test_the_gate_refuses_an_always_positive_judge_and_a_judge_blind_to_negatives():
    oracle = [P] * 7 + [N] * 3
    assert not label_agreement_stats([P] * 10, oracle).passes_gate  # agreement = always-positive
    # Right on 9 of 10 (0.2 above always-positive), but only 1 of 3 negatives caught.
    said = [P] * 7 + [N, P, P]
    assert not label_agreement_stats(said, oracle).passes_gate
    without_negatives = label_agreement_stats([P, P], [P, P])
    assert without_negatives.negative_recall is None and not without_negatives.passes_gate
    assert "eval/negative_recall" not in without_negatives.metrics("eval")
    with pytest.raises(ValueError, match="one predicted label per oracle label"):
        label_agreement_stats([P], [P, N])


def test_balance_caps_every_class_at_the_second_commonest_judged_label():
    labels = [P] * 20 + [N] * 5 + [None] * 8 + [U] * 2
    kept = balanced_label_indices(labels, seed=0)
    counts = {kind: sum(labels[i] == kind for i in kept) for kind in (P, N, U, None)}
    assert counts == {P: 5, N: 5, U: 2, None: 5}
    assert kept == sorted(kept) and len(set(kept)) == len(kept)
    assert kept == balanced_label_indices(labels, seed=0)  # drawn from the seed
    assert kept != balanced_label_indices(labels, seed=1)
    # One judged label only: nothing to balance against, nothing dropped.
    assert balanced_label_indices([P, P, None], seed=0) == [0, 1, 2]


def plain_guidance(labels, weight, form, env_return):
    """The three forms written out with a loop."""
    total = 0.0
    for label in labels:
        total += {"positive": 0.1, "neutral": 0.0, "negative": -0.1}[label]
    total *= weight
    if form == "mean":
        return total / len(labels) if labels else 0.0
    if form == "capped" and total > 0:
        return min(total, env_return)
    return total


@pytest.mark.parametrize("form", [f.value for f in GuidanceForm])
@pytest.mark.parametrize("labels, env_return", [
    (["positive"] * 10, 0.0),  # a long stall with always-positive notes
    (["positive"] * 3, 1.0),  # a short success
    (["positive", "negative", "negative", "neutral"], 0.0),
    (["positive"] * 4, 0.25),  # a graded score caps the sum
    ([], 1.0),
])
def test_guidance_forms_against_a_plain_loop(form, labels, env_return):
    for weight in (0.0, 0.5, 1.0):
        expected = plain_guidance(labels, weight, form, env_return)
        assert guidance_term(labels, weight, form, env_return) == pytest.approx(expected, abs=1e-12)
        assert shaped_return(env_return, labels, weight, form) == pytest.approx(env_return + expected, abs=1e-12)


def test_only_the_paper_form_pays_a_stall_more_than_a_success():
    stall, success = ["positive"] * 13, ["positive"] * 3
    paper = shaped_return(0.0, stall, 1.0) - shaped_return(1.0, success, 1.0)
    assert paper == pytest.approx(0.0, abs=1e-12)  # ten more positive notes earn what solving the task earns
    for form in (GuidanceForm.MEAN, GuidanceForm.CAPPED):
        assert shaped_return(0.0, stall, 1.0, form) < shaped_return(1.0, success, 1.0, form) - 0.9
    with pytest.raises(ValueError):
        guidance_term(["positive"], 1.0, "median")
