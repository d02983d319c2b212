"""The collapse alarm: the kept Self-Guide runs that learned to loop, healthy runs with noise, and the rules."""

import gzip
import json
import random
from pathlib import Path

import pytest

from hindsight.diagnostics.health import HealthConfig, assess, first_alarm, health_history

SELFGUIDE = Path(__file__).resolve().parents[2] / "results" / "selfguide"


def kept_rows(run):
    with gzip.open(SELFGUIDE / run / "metrics.jsonl.gz", "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def peak_update(rows):
    """The update at which the run's training loop ratio was highest (where it rose)."""
    return max((row for row in rows if "tide/loop_ratio" in row), key=lambda row: row["tide/loop_ratio"])["step"]


# The GRPO runs whose test trajectories loop far more than the start's (docs/results.md, Issue 12):
# looping test trajectories 55, 98 and 116 against the start's 36. The alarm must fire at or
# before the update of their highest training loop ratio (update 5 in all three).
@pytest.mark.parametrize(("run", "flagged", "describe"), [
    ("grpo-s1", 5, "collapsing: loop ratio 0.04→0.12 since update 2"),
    ("grpo-s2", 4, "collapsing: loop ratio 0.00→0.15 since update 2"),
    ("grpo-s2-float32", 4, "collapsing: loop ratio 0.00→0.24 since update 2"),
])
def test_flags_the_looping_grpo_runs_by_the_update_their_loop_ratio_rose(run, flagged, describe):
    rows = kept_rows(run)
    alarm = first_alarm(rows, HealthConfig().for_updates(8))
    assert alarm.update == flagged <= peak_update(rows) == 5
    assert alarm.describe() == describe
    assert alarm.metrics()["health/collapsing"] == 1.0 and alarm.metrics()["health/loop_ratio"] == 1.0
    # Once fired, it stays on for the rest of these runs.
    assert all(report.collapsing for report in health_history(rows) if report.update >= flagged)


# The other runs of the comparison that looped more than their start: flagged too, the SG arms
# of seed 0 after their peak; the early-entry schedule run (56 looping test trajectories
# against 37 for the paper's schedule) shows no training rise and is missed.
@pytest.mark.parametrize(("run", "flagged"), [
    ("grpo-token-mean-s0", 5), ("grpo-token-mean-s2", 5), ("sg-s0", 6), ("sg-gr-s0", 7),
    ("sg-gr-early-s2-float32", None),
])
def test_the_other_looping_runs(run, flagged):
    alarm = first_alarm(kept_rows(run))
    assert (alarm.update if alarm else None) == flagged


# The runs whose test trajectories looped no more than their start's (26 to 39).
@pytest.mark.parametrize("run", [
    "grpo-s0", "grpo-token-mean-s1", "sg-s1", "sg-gr-s1", "sg-s2-float32", "sg-gr-s2-float32",
    "sg-gr-no-anneal-s2-float32", "sg-gr-immediate-s2-float32",
])
def test_silent_on_the_runs_that_did_not_loop(run):
    rows = kept_rows(run)
    assert not any(report.collapsing for report in health_history(rows))
    assert assess(rows).metrics() == {"health/collapsing": 0.0, "health/zero_variance_groups": 0.0,
                                      "health/loop_ratio": 0.0, "health/invalid_rate": 0.0}


def healthy_run(seed, updates, tasks=8, group_size=8, steps=5, loop_p=0.03):
    """Rows of a run that learns: success rising from 0.3 to 0.8 with binomial noise, each group
    tied with probability 0.4, a few loop steps, entropy easing by a third, a steady spread."""
    rng = random.Random(seed)
    episodes = tasks * group_size
    rows = []
    for update in range(1, updates + 1):
        success = sum(rng.random() < 0.3 + 0.5 * update / updates for _ in range(episodes)) / episodes
        loops = sum(rng.random() < loop_p for _ in range(episodes * steps)) / (episodes * steps)
        rows.append({
            "step": update, "rollout/success_rate": success, "rollout/score_mean": success,
            "rollout/zero_variance_groups": sum(rng.random() < 0.4 for _ in range(tasks)) / tasks,
            "rollout/return_spread": 0.4 + rng.gauss(0, 0.05), "tide/loop_ratio": loops,
            "tide/invalid_rate": 0.0, "tide/action_entropy": 1.2 * (1 - 0.3 * update / updates) + rng.gauss(0, 0.05),
        })
    return rows


@pytest.mark.parametrize("updates", [8, 50, 200])
def test_silent_on_healthy_runs_with_noise(updates):
    config = HealthConfig().for_updates(updates)
    for seed in range(20):
        rows = healthy_run(seed, updates)
        assert first_alarm(rows, config) is None, (seed, first_alarm(rows, config).describe())
        assert set(assess(rows, config).observed) == {
            "return_spread", "zero_variance_groups", "action_entropy", "loop_ratio", "invalid_rate"}


def rows_of(**series):
    """Rows 1..n from per-metric series (short names: loop, spread, entropy, zero, score)."""
    names = {"loop": "tide/loop_ratio", "spread": "rollout/return_spread", "entropy": "tide/action_entropy",
             "zero": "rollout/zero_variance_groups", "score": "rollout/score_mean", "invalid": "tide/invalid_rate"}
    length = max(map(len, series.values()))
    return [{"step": k + 1, **{names[n]: v[k] for n, v in series.items() if k < len(v)}} for k in range(length)]


def test_one_noisy_update_does_not_fire():
    rows = rows_of(loop=[0.0, 0.0, 0.6, 0.0, 0.0, 0.01])
    assert first_alarm(rows) is None


def test_three_of_four_updates_fire_and_say_since_when():
    rows = rows_of(loop=[0.0, 0.01, 0.2, 0.3, 0.02, 0.43])
    history = health_history(rows)
    assert [r.collapsing for r in history] == [False, False, False, False, False, True]
    assert history[-1].describe() == "collapsing: loop ratio 0.00→0.25 since update 3"


def test_group_signals_count_only_while_the_score_has_not_risen():
    tied = [0.25, 0.25, 0.75, 1.0, 1.0, 1.0]
    # A policy that solves everything ties every group: not a collapse.
    assert first_alarm(rows_of(zero=tied, score=[0.3, 0.3, 0.6, 0.9, 1.0, 1.0])) is None
    stalled = first_alarm(rows_of(zero=tied, score=[0.3, 0.3, 0.3, 0.2, 0.3, 0.3]))
    assert stalled.update == 5 and stalled.describe() == "collapsing: zero-variance groups 0.25→0.88 since update 3"


def test_falling_spread_and_entropy_are_relative_to_their_baseline():
    rows = rows_of(spread=[0.4, 0.35, 0.15, 0.1, 0.1], entropy=[1.0, 0.9, 0.6, 0.55, 0.4], score=[0.5] * 5)
    report = assess(rows)
    assert [m.name for m in report.moved] == ["return_spread"]
    assert report.metrics() == {"health/collapsing": 1.0, "health/return_spread": 1.0, "health/action_entropy": 0.0}


def test_missing_signals_are_skipped():
    supervised = [{"step": k, "sft/loss": 1.0 / k} for k in range(1, 6)]
    report = assess(supervised)
    assert not report.known and not report.collapsing and report.metrics() == {} and report.update is None
    # A step-0 evaluation row is not an update, and a signal logged only by some rows is read where it is.
    rows = [{"step": 0, "eval/success_rate": 0.5}, *rows_of(loop=[0.0, 0.1, 0.1], invalid=[0.0])]
    assert assess(rows).observed == ("loop_ratio", "invalid_rate") and assess(rows).update == 3
    assert assess([{"step": 1, "tide/loop_ratio": None}, {"step": "x"}]).known is False


def test_a_long_run_takes_a_tenth_of_it_as_baseline():
    assert HealthConfig().for_updates(8).baseline_updates == 1
    assert HealthConfig().for_updates(200).baseline_updates == 20
    with pytest.raises(ValueError):
        HealthConfig(persistence=5, window=4)


LEARNING = Path(__file__).resolve().parents[2] / "results" / "learning"


# The learning benchmark's lr sweep (docs/results.md, issue 45): both higher lrs froze in the
# echo trap (entropy to 0.03-0.12, every group tied), while the recipe's lr stayed healthy.
@pytest.mark.parametrize(("run", "flagged"), [("abl-lr1e-3-s0", 8), ("abl-lr5e-4-s0", 10), ("grpo-s0", None)])
def test_the_learning_benchmarks_collapsed_runs_are_flagged_and_the_healthy_one_is_not(run, flagged):
    with gzip.open(LEARNING / run / "metrics.jsonl.gz", "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    alarm = first_alarm(rows, HealthConfig().for_updates(40))
    assert (alarm.update if alarm else None) == flagged


def test_the_gate_reads_the_evaluations_where_the_run_evaluates_before_training():
    # Training success rises only because easier tasks were drawn; the evaluation stays flat.
    rows = rows_of(entropy=[1.0, 1.0, 0.3, 0.3, 0.3, 0.3], score=[0.2, 0.2, 0.6, 0.6, 0.6, 0.6])
    assert first_alarm(rows) is None  # the rollouts' score has risen: read as learning
    evaluated = [{"step": 0, "eval/success_rate": 0.5}] + rows + [{"step": 4, "eval/success_rate": 0.52}]
    alarm = first_alarm(evaluated)
    assert alarm.update == 5 and alarm.describe() == "collapsing: action entropy 1.00→0.30 since update 3"
    # An evaluation that has risen keeps the gate shut from its update on.
    learned = [{"step": 0, "eval/success_rate": 0.5}] + rows + [{"step": 2, "eval/success_rate": 0.7}]
    assert first_alarm(learned) is None
