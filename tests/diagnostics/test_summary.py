"""Run summaries: hand-worked pooled numbers, shares among failures, memory groups."""

import math

import pytest

from hindsight.diagnostics import DiagnoseOptions, RunAccumulator, memory_groups, memory_index_by_label
from hindsight.diagnostics.memory import window_size
from hindsight.diagnostics.runs import memory_label
from hindsight.logs.importers import TrajectoryView


def view(states, actions, success, valid=None, entropies=None, env="frozenlake"):
    n = len(actions)
    return TrajectoryView(env=env, success=success, observations=tuple(states), actions=tuple(actions),
                          valid=tuple(valid) if valid is not None else (True,) * n, state_keys=tuple(states),
                          entropies=tuple(entropies) if entropies is not None else None)


def test_hand_worked_run():
    acc = RunAccumulator("frozenlake", DiagnoseOptions(t_max=5))
    # Loops on its last two steps (A B A B), one invalid action, entropies low at the loop.
    acc.add(view("ABAB", ["r", "l", "r", "l"], False, valid=[True, False, True, True], entropies=[1.0, 0.8, 0.2, 0.1]))
    # Solved on turn 3, no loops; one step without an entropy.
    acc.add(view("ABC", ["r", "d", "d"], True, entropies=[0.6, None, 0.4]))
    # Pushes into the same wall five times: a self-loop repeated, and looping in the taxonomy.
    acc.add(view("DDDDD", ["u"] * 5, False))
    run = acc.finish(label="hand", path="hand", model="m", memory="none")
    assert run.n_trajectories == 3 and run.n_steps == 12
    assert run.success_rate == pytest.approx(1 / 3)
    assert run.p_curve == pytest.approx((0, 0, 0, 1 / 3, 1 / 3, 1 / 3))
    assert run.auv == pytest.approx((5 - 3 + 0.5) / 5 / 3)
    assert run.loops.loop_steps == 2 + 0 + 4 and run.loop_ratio == pytest.approx(6 / 12)
    assert run.loops.per_trajectory_mean == pytest.approx((0.5 + 0 + 0.8) / 3)
    assert run.invalid_rate == pytest.approx(1 / 12)
    assert run.entropy_loop == pytest.approx((0.2 + 0.1) / 2)
    assert run.entropy_other == pytest.approx((1.0 + 0.8 + 0.6 + 0.4) / 4)
    assert run.entropy_steps == 6
    shares = {c.category: c for c in run.taxonomy}
    assert run.n_failed == 2
    assert shares["looping"].share == pytest.approx(1 / 2)
    assert shares["wrong_object_focus"].share is None and not shares["wrong_object_focus"].applicable
    assert run.t_max_source == "given"
    as_json = run.to_json()
    assert as_json["taxonomy"]["looping"] == pytest.approx(0.5) and as_json["taxonomy"]["wrong_object_focus"] is None


def test_t_max_falls_back_to_max_steps_then_to_the_longest_trajectory():
    acc = RunAccumulator("mystery")
    acc.add(view("AB", "xy", True, env="mystery"))
    acc.add(view("ABCDEFG", "xxxxxxx", False, env="mystery"))
    assert acc.finish(label="a", path="a", max_steps=12).t_max == 12
    longest = acc.finish(label="a", path="a")
    assert longest.t_max == 7 and "longest" in longest.t_max_source


def test_finish_needs_trajectories():
    with pytest.raises(ValueError):
        RunAccumulator("frozenlake").finish(label="x", path="x")


def test_kept_trajectories_prefer_failures_with_loops():
    acc = RunAccumulator("frozenlake", keep=4)
    for k in range(6):
        acc.add(view("ABAB", "rlrl", False))  # loops
        acc.add(view("AB", "rd", True))
        acc.add(view("ABC", "rdd", False))  # fails without loops
    kept = acc.kept()
    assert len(kept) == 4
    assert [k.view.success for k in kept] == [False, False, True, False]
    assert [k.diagnosis.loop_steps > 0 for k in kept] == [True, True, False, False]


def run_with(memory, auv_turn, model="m", env="frozenlake"):
    acc = RunAccumulator(env, DiagnoseOptions(t_max=10))
    acc.add(view("AB", "xy", auv_turn is not None, env=env) if auv_turn == 2 else view("A" * 4, "xxxx", True, env=env))
    return acc.finish(label=f"{model}-{memory}", path=".", model=model, memory=memory)


def test_memory_groups_order_windows_and_compute_the_memory_index():
    runs = [run_with("full", 2), run_with("none", 4), run_with("2", 4), run_with("full", 4, model="other")]
    (group,) = memory_groups(runs)
    assert [p.memory for p in group.points] == ["none", "2", "full"]
    full, none = runs[0].auv, runs[1].auv
    assert group.memory_index == pytest.approx(full - none)
    assert memory_index_by_label([group]) == {"m-full": group.memory_index, "m-none": group.memory_index,
                                              "m-2": group.memory_index}
    # Different environment settings keep otherwise-equal runs apart.
    assert memory_groups(runs[:2], {"m-full": "size=4", "m-none": "size=8"}) == []


def test_memory_labels_and_window_sizes():
    assert memory_label(None) == "" and memory_label("FULL") == "full" and memory_label(0) == "none"
    assert memory_label(4) == "4" and memory_label("window-3") == "3"
    assert window_size("none") == 0 and window_size("3") == 3 and math.isinf(window_size("full"))
    assert window_size("summary") is None
