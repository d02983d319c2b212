"""The report's Training section: curves from metrics.jsonl, seed bands, live TIDE and method panels."""

import re
import statistics
import xml.etree.ElementTree as ET

import pytest

from hindsight.cli.main import main
from hindsight.diagnostics.live import live_tide
from hindsight.report.training import group_runs, read_training_log, read_training_logs, score_density, seed_band

from tests.diagnostics.logfiles import walk_trajectory
from .helpers import HOSTILE, sweep_runs
from .training_runs import GRPO, grpo_rows, grpo_seeds, write_training_run

SVG = "{http://www.w3.org/2000/svg}"


def report(tmp_path, *paths, extra=(), code=0):
    out = tmp_path / "out"
    assert main(["report", *map(str, paths), "-o", str(out), *extra]) == code
    return (out / "index.html").read_text(encoding="utf-8")


def figure_svg(html, figure_id):
    """The chart of one figure, parsed as XML."""
    found = re.search(rf'<figure id="{re.escape(figure_id)}">(<svg.*?</svg>)', html, re.DOTALL)
    assert found, f"no figure {figure_id}"
    return ET.fromstring(found.group(1))


def numbers(text):
    return [float(v) for v in text.split()]


def lines(svg, css):
    return [e for e in svg.iter(f"{SVG}polyline") if e.get("class") == css]


def test_seed_band_matches_a_plain_computation():
    curves = [((1, 0.2), (2, 0.4), (3, 0.9)), ((1, 0.6), (2, 0.0)), ((1, 0.1), (2, 0.5), (3, 0.3))]
    band = seed_band(curves)
    assert [p.x for p in band] == [1, 2, 3]
    for point in band:
        values = [y for curve in curves for x, y in curve if x == point.x]
        assert point.mean == pytest.approx(statistics.fmean(values))
        assert (point.low, point.high, point.runs) == (min(values), max(values), len(values))
    # The run that stopped after update 2 leaves update 3 to the other two.
    assert band[-1].runs == 2 and band[-1].mean == pytest.approx(0.6)


def test_broken_metric_lines_are_reported_with_their_line_and_skipped(tmp_path, capsys):
    run = write_training_run(tmp_path / "run", GRPO, [
        {"step": 1, "rollout/success_rate": 0.5, "policy/loss": 0.2},
        '{"step": 2, "rollout/succ',
        "[1, 2]",
        '{"policy/loss": 0.3}',
        '{"step": 3, "rollout/success_rate": NaN, "policy/loss": 0.1, "note": "text", "flag": true}',
        {"step": 3, "final_test/success_rate": 0.7},
    ])
    log = read_training_log(run)
    assert log.rows == 3
    assert log.curve("rollout/success_rate") == ((1.0, 0.5),)
    assert log.curve("policy/loss") == ((1.0, 0.2), (3.0, 0.1))
    assert "note" not in log.curves and "flag" not in log.curves
    assert log.final_success() == ("test", 0.7)
    assert [(issue.line, issue.message.split(":")[0]) for issue in log.issues] == [
        (2, "invalid JSON"), (3, "not a JSON object"), (4, "row without a numeric step")]
    # The command names them as file:line and still writes the report.
    html = report(tmp_path, run)
    err = capsys.readouterr().err
    assert f"{run / 'metrics.jsonl'}:2: invalid JSON" in err and f"{run / 'metrics.jsonl'}:4: row without" in err
    svg = figure_svg(html, "train-policy-loss")
    (mean,) = lines(svg, "mean")
    assert numbers(mean.get("data-x")) == [1, 3] and numbers(mean.get("data-y")) == [0.2, 0.1]


def test_seeds_are_overlaid_as_a_mean_with_their_spread(tmp_path):
    curves = [(0.2, 0.4, 0.9), (0.6, 0.0, 0.5), (0.1, 0.5, 0.3)]
    grpo_seeds(tmp_path / "runs", curves)
    write_training_run(tmp_path / "runs" / "grpo-fast", {**GRPO, "lr": 0.001}, grpo_rows((0.3, 0.3, 0.3)))
    html = report(tmp_path, tmp_path / "runs")
    svg = figure_svg(html, "train-rollout-success-rate")
    means = {e.get("data-label"): e for e in lines(svg, "mean")}
    assert set(means) == {"grpo on frozenlake (3 runs) [lr=0.0001]", "grpo-fast"}
    group = means["grpo on frozenlake (3 runs) [lr=0.0001]"]
    columns = list(zip(*curves))
    assert numbers(group.get("data-y")) == pytest.approx([statistics.fmean(c) for c in columns], abs=1e-6)
    (band,) = [e for e in svg.iter(f"{SVG}polygon") if e.get("class") == "band"]
    assert numbers(band.get("data-low")) == pytest.approx([min(c) for c in columns])
    assert numbers(band.get("data-high")) == pytest.approx([max(c) for c in columns])
    members = lines(svg, "run-line")
    assert sorted(numbers(m.get("data-y")) for m in members) == sorted(list(c) for c in curves)
    # Every run is listed with a box that toggles its own lines.
    table = re.search(r'<table class="summary training" id="training-runs">.*?</table>', html, re.DOTALL).group(0)
    keys = re.findall(r'data-toggle-run="(run-\d+)"', table)
    assert len(keys) == 4
    assert {m.get("data-run") for m in members} | {means["grpo-fast"].get("data-run")} == set(keys)
    # Loss, KL and clip fraction get their own charts; metrics nobody logged get none.
    for figure in ("train-policy-loss", "train-policy-kl", "train-policy-clip-frac", "train-rollout-score-mean"):
        assert f'id="{figure}"' in html
    assert 'id="train-sft-loss"' not in html and 'id="train-echo"' not in html and 'id="train-cso"' not in html


def test_overlay_by_method_joins_different_settings(tmp_path):
    grpo_seeds(tmp_path / "runs", [(0.2, 0.4), (0.6, 0.0)])
    write_training_run(tmp_path / "runs" / "grpo-fast", {**GRPO, "lr": 0.001}, grpo_rows((0.3, 0.3)))
    logs = read_training_logs([tmp_path / "runs"])
    assert [len(g.runs) for g in group_runs(logs, "config")] == [1, 2]
    assert [g.label for g in group_runs(logs, "method")] == ["grpo on frozenlake (3 runs)"]
    html = report(tmp_path, tmp_path / "runs", extra=["--overlay", "method"])
    (mean,) = lines(figure_svg(html, "train-rollout-success-rate"), "mean")
    assert numbers(mean.get("data-y")) == pytest.approx([(0.3 + 0.2 + 0.6) / 3, (0.3 + 0.4 + 0.0) / 3], abs=1e-6)


def test_live_tide_metrics_are_drawn_beside_success(tmp_path):
    grpo_seeds(tmp_path / "runs", [(0.2, 0.4), (0.6, 0.0)], auvs=[(0.1, 0.3), (0.5, 0.0)])
    html = report(tmp_path, tmp_path / "runs")
    assert 'id="train-tide"' in html and "Recomputed" not in html
    (auv,) = lines(figure_svg(html, "train-tide-auv"), "mean")
    assert numbers(auv.get("data-y")) == pytest.approx([0.3, 0.15])
    (success,) = lines(figure_svg(html, "train-tide-success"), "mean")
    assert numbers(success.get("data-y")) == pytest.approx([0.4, 0.2])


def echo_rollouts():
    """Refinements of two updates with their (s_o, s_r), as ECHO writes them to train.jsonl."""
    pairs = [(0.0, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0), (0.5, 0.75)]
    out = []
    for k, (s_o, s_r) in enumerate(pairs):
        update = 1 if k < 3 else 2
        states = "ABAB" if k == 2 else "AB"
        out.append(walk_trajectory(states, "xyxy"[: len(states)], success=s_r == 1.0, env="toy", max_steps=4,
                                   seed=k, invalid=(0,) if k == 4 else (), update=update,
                                   echo={"group": f"{update}:{k}", "s_o": s_o, "s_r": s_r}))
    return pairs, out


def test_echo_panel_and_tide_recomputed_from_the_training_records(tmp_path):
    pairs, rollouts = echo_rollouts()
    rows = [{"step": u, "rollout/refined_success_rate": s, "echo/improvement_rate": i}
            for u, s, i in ((1, 2 / 3, 2 / 3), (2, 0.5, 0.5))]
    run = write_training_run(tmp_path / "echo", {"kind": "echo", "env": "toy", "seed": 0}, rows, train=rollouts)
    html = report(tmp_path, run)
    density = re.search(r'<figure class="echo-density"[^>]*>(<svg.*?</svg>)', html, re.DOTALL).group(1)
    cells = {(int(c.get("data-i")), int(c.get("data-j"))): int(c.get("data-count"))
             for c in ET.fromstring(density).iter(f"{SVG}rect")}
    # Ten bins over [0, 1]: s = 1 falls in the last bin, 0.5 in bin 5, 0.75 in bin 7.
    assert cells == {(0, 9): 2, (0, 0): 1, (9, 9): 1, (5, 7): 1}
    assert score_density(pairs).total == 5
    # No tide/… rows: the curves come from train.jsonl through the loops' own function.
    assert "Recomputed from <code>trajectories/train.jsonl</code>" in html
    (auv,) = lines(figure_svg(html, "train-tide-auv"), "mean")
    expected = [live_tide(rollouts[:3]).auv, live_tide(rollouts[3:]).auv]
    assert numbers(auv.get("data-y")) == pytest.approx(expected, abs=1e-6)
    (loops,) = lines(figure_svg(html, "train-tide-loop-ratio"), "mean")
    assert numbers(loops.get("data-y")) == pytest.approx([2 / 8, 0.0])
    (invalid,) = lines(figure_svg(html, "train-tide-invalid-rate"), "mean")
    assert numbers(invalid.get("data-y")) == pytest.approx([0.0, 1 / 4])
    assert 'id="train-echo-improvement-rate"' in html and 'id="train-rollout-refined-success-rate"' in html


def test_selfguide_panel_stacks_the_label_mix(tmp_path):
    rows = [{"step": u, "rollout/success_rate": 0.5, "selfguide/lambda": lam, "selfguide/positive_rate": p,
             "selfguide/neutral_rate": n, "selfguide/negative_rate": 1 - p - n, "selfguide/label_agreement": a}
            for u, lam, p, n, a in ((1, 0.0, 0.5, 0.25, 0.6), (2, 1.0, 0.7, 0.1, 0.8))]
    run = write_training_run(tmp_path / "sg", {**GRPO, "self_guide": True, "guidance_reward": True}, rows)
    html = report(tmp_path, run)
    mix = re.search(r'<figure class="label-mix"[^>]*>(<svg.*?</svg>)', html, re.DOTALL).group(1)
    layers = {(r.get("data-layer"), float(r.get("data-x"))): float(r.get("data-value"))
              for r in ET.fromstring(mix).iter(f"{SVG}rect")}
    assert layers == pytest.approx({("positive", 1): 0.5, ("neutral", 1): 0.25, ("negative", 1): 0.25,
                                    ("positive", 2): 0.7, ("neutral", 2): 0.1, ("negative", 2): 0.2})
    (agreement,) = lines(figure_svg(html, "train-selfguide-label-agreement"), "mean")
    assert numbers(agreement.get("data-y")) == [0.6, 0.8]
    assert 'id="train-selfguide-lambda"' in html and ">grpo+sg+gr<" in html


def test_cso_funnel_sums_the_rounds(tmp_path):
    rounds = [{"step": 1, "cso/failed_trajectories": 4, "cso/steps": 20, "cso/candidates": 5, "cso/verified": 2,
               "cso/pairs": 2, "cso/verification_rate": 0.4, "dpo/loss": 0.69},
              {"step": 2, "cso/failed_trajectories": 3, "cso/steps": 15, "cso/candidates": 2, "cso/verified": 1,
               "cso/pairs": 1, "cso/verification_rate": 0.5, "dpo/loss": 0.5}]
    run = write_training_run(tmp_path / "cso", {"kind": "cso", "env": "frozenlake", "seed": 0}, rounds)
    html = report(tmp_path, run)
    chart = figure_svg(html, "train-cso-funnel")
    bars = dict(re.match(r"cso · (.*): ([0-9.]+)$", r.find(f"{SVG}title").text).groups()
                for r in chart.iter(f"{SVG}rect"))
    assert {stage: float(v) for stage, v in bars.items()} == {
        "failed traj.": 7, "their steps": 35, "candidates": 7, "verified": 3, "pairs": 3}
    assert 'id="train-dpo-loss"' in html and 'id="train-cso-verification-rate"' in html


def test_a_round_that_branched_nothing_draws_no_verification_rate(tmp_path):
    # Logs written before the rate was left out of such rounds hold 0.0 there.
    step_dpo = [{"step": 1, "cso/branched": 0, "cso/verified": 0, "cso/pairs": 4, "cso/verification_rate": 0.0},
                {"step": 2, "cso/branched": 0, "cso/verified": 0, "cso/pairs": 3, "cso/verification_rate": 0.0}]
    mixed = [{"step": 1, "cso/branched": 0, "cso/pairs": 2, "cso/verification_rate": 0.0},
             {"step": 2, "cso/branched": 5, "cso/verified": 2, "cso/pairs": 2, "cso/verification_rate": 0.4}]
    alone = report(tmp_path / "a", write_training_run(tmp_path / "step-dpo", {"kind": "cso", "method": "step-dpo",
                                                                              "env": "frozenlake"}, step_dpo))
    assert 'id="train-cso-funnel"' in alone and 'id="train-cso-verification-rate"' not in alone
    html = report(tmp_path / "b", write_training_run(tmp_path / "cso", {"kind": "cso", "env": "frozenlake"}, mixed))
    (rate,) = lines(figure_svg(html, "train-cso-verification-rate"), "mean")
    assert numbers(rate.get("data-x")) == [2] and numbers(rate.get("data-y")) == [0.4]


def test_sft_run_shows_its_loss_and_no_method_panel(tmp_path):
    rows = [{"step": 0, "data/demonstrations": 10}] + [{"step": k, "sft/loss": 2.0 / k} for k in range(1, 5)]
    html = report(tmp_path, write_training_run(tmp_path / "sft", {"kind": "sft", "env": "frozenlake"}, rows))
    (loss,) = lines(figure_svg(html, "train-sft-loss"), "mean")
    assert numbers(loss.get("data-y")) == pytest.approx([2.0, 1.0, 2 / 3, 0.5], abs=1e-5)
    for absent in ("train-tide", "train-echo", "train-selfguide", "train-cso", 'id="summary"', 'id="viewer"'):
        assert absent not in html


def test_a_run_without_metric_rows_says_so(tmp_path, capsys):
    empty = write_training_run(tmp_path / "fresh", GRPO, [])
    grpo_seeds(tmp_path / "others", [(0.5,)])
    # Nothing readable in the fresh run (no rows, no trajectory): exit 1, the report is still written.
    html = report(tmp_path, empty, tmp_path / "others", code=1)
    assert "No metric rows yet in: fresh." in html
    assert re.search(r"</span>fresh</td>.*?<td>no metric rows</td>", html)
    assert "not a recognised trajectory log" not in capsys.readouterr().err


def test_eval_only_reports_have_no_training_section(tmp_path):
    html = report(tmp_path, sweep_runs(tmp_path / "sweep"))
    assert 'id="training"' not in html and "training run(s)" not in html
    assert len(re.findall(r"<script\b", html)) == 3


def test_names_and_settings_are_escaped(tmp_path):
    config = {**GRPO, "kind": HOSTILE, "env": HOSTILE}
    html = report(tmp_path, write_training_run(tmp_path / "run", config, grpo_rows((0.5, 0.6))))
    assert HOSTILE not in html and "&lt;script&gt;" in html


def kept_selfguide_run(tmp_path, name):
    """A kept Self-Guide run (results/selfguide) unpacked as a run directory the report reads."""
    import gzip
    import shutil
    from pathlib import Path

    kept = Path(__file__).resolve().parents[2] / "results" / "selfguide" / name
    folder = tmp_path / "runs" / name
    folder.mkdir(parents=True)
    shutil.copy(kept / "config.yaml", folder / "config.yaml")
    with gzip.open(kept / "metrics.jsonl.gz", "rt", encoding="utf-8") as rows:
        (folder / "metrics.jsonl").write_text(rows.read(), encoding="utf-8")
    return folder


def test_a_collapsing_run_is_flagged_with_the_signal_that_moved(tmp_path):
    looping, healthy = kept_selfguide_run(tmp_path, "grpo-s2"), kept_selfguide_run(tmp_path, "grpo-s0")
    alarm = read_training_log(looping).alarm
    assert (alarm.update, alarm.describe()) == (4, "collapsing: loop ratio 0.00→0.15 since update 2")
    assert read_training_log(healthy).alarm is None
    html = report(tmp_path, tmp_path / "runs")
    assert "grpo-s2 at update 4, collapsing: loop ratio 0.00→0.15 since update 2." in html
    assert '<span class="alarm">update 4: collapsing: loop ratio 0.00→0.15 since update 2</span>' in html
    assert "grpo-s0 at update" not in html
