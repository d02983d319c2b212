"""Issue 16, TIDE fidelity: AUV with/without loops, progress AUV, recall spread, the two
uncertainty columns, and `hindsight diagnose` on TIDE's per-instance files."""

import json
import math
import random
from pathlib import Path

import pytest

from hindsight.cli.main import main
from hindsight.diagnostics import (
    DiagnoseOptions, RunAccumulator, auv, progress_curve, progress_milestones, quantile, recall_distribution,
    subset_auv, success_curve,
)
from hindsight.diagnostics.summary import LoopSplitSums
from hindsight.logs.importers import TrajectoryView

INSTANCES = Path(__file__).resolve().parent / "data" / "tide_instances.jsonl"


def view(states, actions, success, *, entropies=None, surprisals=None, progress=None, env="frozenlake",
         observations=None, instruction=""):
    return TrajectoryView(
        env=env, success=success, observations=tuple(observations or states), actions=tuple(actions),
        valid=(True,) * len(actions), state_keys=tuple(states), instruction=instruction,
        entropies=None if entropies is None else tuple(entropies),
        surprisals=None if surprisals is None else tuple(surprisals),
        progress=None if progress is None else tuple(progress),
    )


# ---------------------------------------------------------------- progress rate


def plain_progress_curve(progress_lists, t_max):
    """R_t straight from its definition: mean best score within the first t turns."""
    curve = []
    for t in range(t_max + 1):
        bests = [max([0.0] + [p for k, p in enumerate(prog) if k < t and p is not None]) for prog in progress_lists]
        curve.append(sum(bests) / len(bests))
    return curve


def test_progress_curve_matches_a_plain_loop():
    rng = random.Random(7)
    for _ in range(50):
        t_max = rng.randint(1, 12)
        lists = [[None if rng.random() < 0.2 else round(rng.random(), 3) for _ in range(rng.randint(0, 15))]
                 for _ in range(rng.randint(1, 6))]
        got = progress_curve((progress_milestones(p) for p in lists), t_max)
        assert got == pytest.approx(plain_progress_curve(lists, t_max))
        assert len(got) == t_max + 1 and got[0] == 0.0
        assert all(a <= b + 1e-12 for a, b in zip(got, got[1:]))  # best-so-far never drops


def test_progress_milestones_keep_only_rises():
    assert progress_milestones([0.2, None, 0.1, 0.5, 0.5, 1.0]) == ((1, 0.2), (4, 0.5), (6, 1.0))
    assert progress_milestones([0.0, None]) == () and progress_milestones([]) == ()


def test_binary_progress_gives_back_the_success_curve():
    # Scores 0 until the solving turn, 1 on it: the progress curve is P_t.
    lengths = [(3, True), (5, False), (1, True), (9, True)]
    lists = [[0.0] * (n - 1) + [1.0 if won else 0.0] for n, won in lengths]
    turns = [n if won else None for n, won in lengths]
    for t_max in (1, 4, 8, 12):
        assert progress_curve((progress_milestones(p) for p in lists), t_max) == pytest.approx(
            success_curve(turns, t_max))


def test_run_progress_auv_hand_worked():
    acc = RunAccumulator("scienceworld", DiagnoseOptions(t_max=4))
    acc.add(view("ABC", "xyz", False, progress=[0.25, 0.0, 0.5]))   # best: .25, .25, .5, .5 (turns 1..4)
    acc.add(view("AB", "xy", True, progress=[0.5, 1.0]))            # best: .5, 1, 1, 1
    run = acc.finish(label="sw", path="sw")
    assert run.progress is not None and run.progress.graded
    expected = [0.0, 0.375, 0.625, 0.75, 0.75]
    assert run.progress.p_curve == pytest.approx(expected)
    assert run.progress.auv == pytest.approx(auv(expected))
    assert run.to_json()["progress_auv"] == pytest.approx(auv(expected))


def test_progress_needs_every_trajectory_to_log_it():
    acc = RunAccumulator("frozenlake", DiagnoseOptions(t_max=3))
    acc.add(view("AB", "xy", True, progress=[0.0, 1.0]))
    acc.add(view("AB", "xy", False))
    assert acc.finish(label="a", path="a").progress is None
    binary = RunAccumulator("frozenlake", DiagnoseOptions(t_max=3))
    binary.add(view("AB", "xy", True, progress=[0.0, 1.0]))
    binary.add(view("", "", False))  # no steps: no progress, not a missing log
    run = binary.finish(label="b", path="b")
    assert run.progress is not None and not run.progress.graded and run.progress.auv == pytest.approx(run.auv)


# ---------------------------------------------------------------- AUV with and without loops


def test_loop_split_hand_worked():
    acc = RunAccumulator("frozenlake", DiagnoseOptions(t_max=10))
    acc.add(view("ABAB", "xyxy", True))    # loop (official finder marks steps 2, 3), solved on turn 4
    acc.add(view("AAA", "uuu", False))     # self-loop repeated, failed
    acc.add(view("ABC", "xyz", True))      # no loop, solved on turn 3
    acc.add(view("AB", "xy", False))       # no loop, failed
    run = acc.finish(label="s", path="s")
    with_loops, without = run.loop_split.with_loops, run.loop_split.without_loops
    assert (with_loops.n, without.n) == (2, 2)
    assert with_loops.success_rate == 0.5 and without.success_rate == 0.5
    assert with_loops.auv == pytest.approx((10 - 4 + 0.5) / 10 / 2)
    assert without.auv == pytest.approx((10 - 3 + 0.5) / 10 / 2)
    # The two subsets average back to the whole run, weighted by size.
    assert (with_loops.n * with_loops.auv + without.n * without.auv) / 4 == pytest.approx(run.auv)
    record = run.to_json()
    assert record["auv_with_loops"] == pytest.approx(with_loops.auv) and record["n_without_loops"] == 2
    assert record["p_t_with_loops"][4] == 0.5


def test_empty_subset_has_no_numbers():
    assert subset_auv([], 5) == subset_auv((), 5)
    empty = subset_auv([], 5)
    assert empty.n == 0 and empty.auv is None and empty.success_rate is None and empty.p_curve == ()
    acc = RunAccumulator("frozenlake", DiagnoseOptions(t_max=5))
    acc.add(view("AB", "xy", True))
    run = acc.finish(label="r", path="r")
    assert run.loop_split.with_loops.auv is None and run.loop_split.without_loops.auv == pytest.approx(run.auv)
    assert run.to_json()["auv_with_loops"] is None


# ---------------------------------------------------------------- entropy vs surprisal


def test_action_entropy_and_surprisal_are_split_by_loop_steps_separately():
    acc = RunAccumulator("frozenlake", DiagnoseOptions(t_max=5))
    acc.add(view("ABAB", "xyxy", False, entropies=[1.0, 0.8, 0.2, None], surprisals=[2.0, 1.5, 0.5, 0.25]))
    acc.add(view("AC", "xz", True, surprisals=[1.0, 3.0]))
    run = acc.finish(label="e", path="e")
    assert run.entropy_loop == pytest.approx(0.2) and run.entropy_other == pytest.approx(0.9)
    assert run.entropy_steps == 3
    assert run.surprisal_loop == pytest.approx(0.375) and run.surprisal_other == pytest.approx(7.5 / 4)
    assert run.surprisal_steps == 6
    record = run.to_json()
    assert record["entropy_loop"] == pytest.approx(0.2) and record["surprisal_non_loop"] == pytest.approx(1.875)


def test_loop_split_sums_skip_missing_and_non_finite_values():
    sums = LoopSplitSums.of([True, False, True, False], [1.0, None, math.nan, 2.0])
    assert (sums.loop_n, sums.other_n, sums.loop_mean, sums.other_mean) == (1, 1, 1.0, 2.0)
    assert LoopSplitSums.of([True], None).steps == 0 and LoopSplitSums().loop_mean is None
    assert (sums + sums).loop_sum == 2.0


# ---------------------------------------------------------------- recall distance spread


def plain_quantile(values, q):
    ordered = sorted(values)
    h = q * (len(ordered) - 1)
    lo = int(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def test_quantiles_and_histogram_match_plain_computations():
    rng = random.Random(3)
    for _ in range(30):
        groups = [[rng.randint(1, 20) for _ in range(rng.randint(0, 6))] for _ in range(rng.randint(1, 5))]
        pooled = [d for g in groups for d in g]
        dist = recall_distribution(groups)
        if not pooled:
            assert dist.n == 0 and dist.median is None and dist.histogram == ()
            continue
        assert dist.n == len(pooled) and dist.n_trajectories == sum(1 for g in groups if g)
        assert dist.mean == pytest.approx(sum(pooled) / len(pooled)) and dist.max == max(pooled)
        for q, got in ((0.25, dist.p25), (0.5, dist.median), (0.75, dist.p75), (0.9, dist.p90)):
            assert got == pytest.approx(plain_quantile(pooled, q))
        assert dict(dist.histogram) == {d: pooled.count(d) for d in set(pooled)}
        assert [d for d, _ in dist.histogram] == sorted(set(pooled))
    assert quantile([1, 2, 3, 4], 0.5) == 2.5 and quantile([7], 0.9) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)


TASK = "Your task is to: put some apple on diningtable."


def alfworld_view(success, gap):
    """Sees apple 1 on turn 1, visits `gap` cabinets, then takes it: one recall of distance `gap`."""
    observations = ["You see a countertop 1 and a diningtable 1.", "On the countertop 1, you see a apple 1."]
    actions = ["go to countertop 1"]
    for k in range(gap):
        actions.append(f"go to cabinet {k + 1}")
        observations.append(f"On the cabinet {k + 1}, you see nothing.")
    actions.append("take apple 1 from countertop 1")
    return TrajectoryView(env="alfworld", success=success, observations=tuple(observations), actions=tuple(actions),
                          valid=(True,) * len(actions), instruction=TASK)


def test_recall_is_split_by_outcome():
    acc = RunAccumulator("alfworld")
    for success, gap in ((True, 1), (True, 2), (False, 3), (False, 7), (False, 7)):
        acc.add(alfworld_view(success, gap))
    run = acc.finish(label="a", path="a")
    by = run.recall_by_outcome
    assert (by.success.n, by.failure.n) == (2, 3) and run.recall_pairs == 5
    assert by.success.histogram == ((1, 1), (2, 1)) and by.failure.histogram == ((3, 1), (7, 2))
    assert by.failure.median == 7 and by.success.median == 1.5
    record = run.to_json()
    assert record["recall_failure"]["histogram"] == [[3, 1], [7, 2]] and record["recall_success"]["max"] == 2


# ---------------------------------------------------------------- the CLI on TIDE's per-instance files


def test_diagnose_reads_tide_instance_files(capsys):
    code = main(["diagnose", "--json", str(INSTANCES)])
    out = capsys.readouterr()
    assert code == 0
    (record,) = [json.loads(line) for line in out.out.splitlines()]
    assert record["env"] == "osworld" and record["formats"] == ["tide-instance"] and record["t_max"] == 50
    assert record["n_trajectories"] == 4 and record["skipped_lines"] == 3
    # Solved: open-tab (turn 2) and volume (0.5, turn 5); crop loops on its repeated click at an empty screen.
    assert record["success_rate"] == 0.5
    assert record["n_with_loops"] == 1 and record["auv_with_loops"] == 0.0
    assert record["auv_without_loops"] == pytest.approx(((50 - 2 + 0.5) + (50 - 5 + 0.5)) / 50 / 3)
    # Progress weighs the graded success by its value, as TIDE's pass@1 curve does.
    assert record["progress_auv"] == pytest.approx(((50 - 2 + 0.5) + 0.5 * (50 - 5 + 0.5)) / 50 / 4)
    assert record["progress_graded"] is True
    for line in (4, 5, 6):
        assert f"{INSTANCES}:{line}:" in out.err
    assert "Traceback" not in out.err


def test_embedding_equality_finds_the_scroll_loop(tmp_path, capsys):
    # The volume instance scrolls down, up, down, up over two screens whose embeddings nearly
    # match: a loop under cosine equality, none when screenshots are compared by file name.
    (volume,) = [line for line in INSTANCES.read_text().splitlines() if '"task": "vlc"' in line]
    path = tmp_path / "osworld" / "volume.jsonl"
    path.parent.mkdir()
    path.write_text(volume + "\n")
    assert main(["diagnose", "--json", str(path)]) == 0
    by_text = json.loads(capsys.readouterr().out)
    assert by_text["n_with_loops"] == 0
    assert main(["diagnose", "--json", "--state", "embedding", str(path)]) == 0
    by_embedding = json.loads(capsys.readouterr().out)
    assert by_embedding["n_with_loops"] == 1 and by_embedding["loop_ratio"] == pytest.approx(2 / 5)
    assert by_embedding["auv_with_loops"] == pytest.approx((50 - 5 + 0.5) / 50)
    # Files without embeddings cannot use that equality: a usage error, not a traceback.
    assert main(["diagnose", "--state", "embedding", str(INSTANCES)]) == 2
    assert "embeddings" in capsys.readouterr().err


def test_table_output_names_the_new_quantities(capsys):
    assert main(["diagnose", str(INSTANCES)]) == 0
    text = capsys.readouterr().out
    for name in ("auv_by_loops", "with loops", "progress_auv", "graded scores", "action_entropy"):
        assert name in text


def test_report_section_bins_recall_shares_per_outcome():
    from hindsight.report.tide_extras import bin_shares, recall_bins, tide_extras_section

    acc = RunAccumulator("alfworld")
    for success, gap in ((True, 1), (True, 2), (False, 3), (False, 7), (False, 40)):
        acc.add(alfworld_view(success, gap))
    run = acc.finish(label="a<b>", path="a")
    bins = recall_bins(run)
    assert bins.labels == ("1", "2", "3", "4–5", "6–8", "9–15", "16–30", "31+")
    assert bins.success == pytest.approx((0.5, 0.5, 0, 0, 0, 0, 0, 0))
    assert bins.failure == pytest.approx((0, 0, 1 / 3, 0, 1 / 3, 0, 0, 1 / 3))
    assert bin_shares(recall_distribution([]), (1, 2)) == (None, None, None)
    html = tide_extras_section([run])
    assert 'id="tide-extras"' in html and html.count("<svg") == 1
    assert "a&lt;b&gt;" in html and "a<b>" not in html
    assert tide_extras_section([]) == ""


# ---------------------------------------------------------------- what ended the failures


def test_failure_endings_count_failed_trajectories_by_what_ended_them():
    from dataclasses import replace

    from hindsight.cli.diagnose import format_run

    acc = RunAccumulator("frozenlake")
    endings = [("env", True), ("env", False), ("env", False), ("budget", False), ("other", False), (None, False)]
    for k, (ending, success) in enumerate(endings):
        acc.add(replace(view([f"s{k}", f"t{k}"], ["a", "b"], success), ending=ending))
    run = acc.finish(label="r", path="p")
    # The success ended by the env is not a failure; the failure whose log says nothing is left out.
    assert run.failure_endings == (("env", 2), ("budget", 1), ("other", 1))
    assert run.to_json()["failure_endings"] == {"env": 2, "budget": 1, "other": 1}
    text = format_run(run, None)
    assert "by the environment 0.50, at the step budget 0.25, otherwise 0.25  (of 4 failed)" in text
    unknown = RunAccumulator("frozenlake")
    unknown.add(view(["s"], ["a"], False))
    assert unknown.finish(label="u", path="p").failure_endings == ()


def test_hindsight_logs_say_what_ended_an_episode():
    from hindsight.logs.importers import view_from_hindsight_record

    base = {"kind": "trajectory", "version": 2, "env": "frozenlake", "success": False, "steps": []}
    for flags, ending in (({"terminated": True, "truncated": False}, "env"),
                          ({"terminated": False, "truncated": True}, "budget"),
                          ({"terminated": False, "truncated": False}, "other"), ({}, None)):
        assert view_from_hindsight_record({**base, **flags}).ending == ending
