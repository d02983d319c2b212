"""The live `tide/…` metrics of a training update, against a hand-worked example."""

import pytest

from hindsight.diagnostics import RunAccumulator
from hindsight.diagnostics.live import live_tide, live_tide_from_tallies, live_tide_metrics, tally
from hindsight.logs.importers import view_from_trajectory

from .logfiles import walk_trajectory


def update_rollouts(env="toy"):
    """Three episodes with a 4-step budget.

    * solved on turn 2;
    * failed after A B A B with actions x y x y: the second A B repeats the first cycle,
      so steps 2 and 3 are loop steps; step 1 is invalid;
    * solved on turn 4 over four distinct states, steps 0 and 3 invalid.
    """
    return [
        walk_trajectory("AB", "rr", success=True, env=env, max_steps=4, seed=1),
        walk_trajectory("ABAB", "xyxy", success=False, invalid=(1,), env=env, max_steps=4, seed=2),
        walk_trajectory("ACDE", "rdrd", success=True, invalid=(0, 3), env=env, max_steps=4, seed=3),
    ]


def test_hand_worked_update():
    result = live_tide(update_rollouts())
    # No TIDE horizon for "toy": t_max is the episodes' max_steps, 4.
    # P_0..P_4 = 0, 0, 1/3, 1/3, 2/3; AUV = (1/4)(0 + 1/6 + 1/3 + 1/2) = 1/4.
    assert result.t_max == 4 and result.trajectories == 3
    assert result.auv == pytest.approx(0.25)
    assert result.loop_ratio == pytest.approx(2 / 10)  # two loop steps among ten
    assert result.invalid_rate == pytest.approx(3 / 10)
    assert live_tide_metrics(update_rollouts()) == pytest.approx(
        {"tide/auv": 0.25, "tide/loop_ratio": 0.2, "tide/invalid_rate": 0.3})


def test_the_tide_horizon_of_the_environment_wins_over_max_steps():
    # FrozenLake's TIDE horizon is 30: solved on turns 2 and 4 of 3 episodes.
    result = live_tide(update_rollouts(env="frozenlake"))
    assert result.t_max == 30
    assert result.auv == pytest.approx(((30 - 2 + 0.5) + (30 - 4 + 0.5)) / 30 / 3)


def test_agrees_with_the_offline_diagnosis():
    rollouts = update_rollouts()
    accumulator = RunAccumulator("toy")
    for trajectory in rollouts:
        accumulator.add(view_from_trajectory(trajectory))
    offline = accumulator.finish(label="update", path="-", max_steps=4)
    live = live_tide(rollouts)
    assert (live.auv, live.loop_ratio, live.invalid_rate) == pytest.approx(
        (offline.auv, offline.loop_ratio, offline.invalid_rate))


def test_nothing_rolled_out_logs_nothing():
    assert live_tide([]) is None and live_tide_metrics([]) == {}
    # An update whose episodes took no step has an AUV but no step ratios.
    empty = walk_trajectory("", "", success=False, max_steps=4)
    assert live_tide_metrics([empty]) == {"tide/auv": 0.0}
    assert live_tide_from_tallies([tally(empty)]).loop_ratio is None


def test_action_entropy_is_the_mean_over_the_steps_that_report_one():
    from dataclasses import replace

    first, second, third = update_rollouts()
    # Step means: 1.0 and 0.5 in the first episode, 2.0 in the second's first step; the
    # third episode's backend reported nothing, so its steps do not count.
    first = replace(first, steps=(replace(first.steps[0], action_entropies=(0.5, 1.5)),
                                  replace(first.steps[1], action_entropies=(0.5,))))
    second = replace(second, steps=(replace(second.steps[0], action_entropies=(2.0,)), *second.steps[1:]))
    assert live_tide([first, second, third]).action_entropy == pytest.approx((1.0 + 0.5 + 2.0) / 3)
    assert live_tide_metrics([first, second, third])["tide/action_entropy"] == pytest.approx(3.5 / 3)
    assert "tide/action_entropy" not in live_tide_metrics(update_rollouts())
