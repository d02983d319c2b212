"""The report's Training section: learning curves, live TIDE diagnostics and each method's panel.

Every chart has x = the update (the metrics row's `step`). A group of runs (seeds of one
configuration, `report.training.group_runs`) is drawn as its mean with the min–max spread
over its runs shaded and each run as a thin line; the runs table's check boxes show or hide
a run's lines in every chart. A chart appears only when some run logged its metric, and a
method's panel only when some run has that method's data, so an SFT run shows its loss and
nothing else.

All text reaching the page goes through `esc` (run names and config values are not
trusted); the toggle script only flips a class on elements it finds by a generated key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from hindsight.diagnostics.live import ACTION_ENTROPY, AUV, INVALID_RATE, LOOP_RATIO
from hindsight.report.svg import Band, Series, band_chart, bar_chart, color, esc, heatmap_chart, stacked_bar_chart
from hindsight.report.training import RunGroup, TrainingLog, group_runs, score_density


@dataclass(frozen=True)
class Curve:
    """One learning-curve chart: a metric, its title and axis; `share` keeps the axis at [0, 1]."""

    metric: str
    title: str
    y_label: str
    share: bool = False


#: Where each method logs the success of its training rollouts, in order of preference.
SUCCESS_METRICS = ("rollout/success_rate", "rollout/refined_success_rate", "cso/rollout_success_rate",
                   "eto/rollout_success_rate")

LEARNING_CURVES = (
    Curve("rollout/success_rate", "Training success", "share of rollouts solved", True),
    Curve("rollout/initial_success_rate", "Initial-attempt success (ECHO)", "share of attempts solved", True),
    Curve("rollout/refined_success_rate", "Refined success (ECHO)", "share of refinements solved", True),
    Curve("cso/rollout_success_rate", "Rollout success (CSO)", "share of rollouts solved", True),
    Curve("eto/rollout_success_rate", "Rollout success (ETO)", "share of rollouts solved", True),
    Curve("eval/success_rate", "Validation success", "share of tasks solved", True),
    Curve("eval/oracle_agreement", "Validation moves among the planner's best", "share of moves", True),
    Curve("rollout/score_mean", "Return", "mean return of the rollouts"),
    Curve("rollout/initial_score_mean", "Initial return s_o (ECHO)", "mean s_o"),
    Curve("rollout/refined_score_mean", "Refined return s_r (ECHO)", "mean s_r"),
    Curve("policy/loss", "Policy loss", "loss"),
    Curve("policy/kl", "Policy KL to its reference", "k3 KL"),
    Curve("policy/clip_frac", "Policy clip fraction", "share of tokens clipped", True),
    Curve("critic/loss", "Critic loss", "loss"),
    Curve("critic/kl", "Critic KL to its reference", "k3 KL"),
    Curve("critic/clip_frac", "Critic clip fraction", "share of tokens clipped", True),
    Curve("sft/loss", "SFT loss", "cross-entropy"),
    Curve("critic_sft/loss", "Critic SFT loss", "cross-entropy"),
    Curve("dpo/mean_loss", "DPO loss, mean over the round", "loss"),
    Curve("dpo/loss", "DPO loss, the round's last step", "loss"),
    Curve("dpo/reward_accuracy", "DPO reward accuracy", "share of pairs ranked right", True),
    Curve("selfguide/lambda", "Trust weight λ(u) (Self-Guide)", "λ(u)", True),
)
TIDE_CURVES = (
    Curve(AUV, "AUV of the update's rollouts", "AUV", True),
    Curve(LOOP_RATIO, "Loop ratio of the update's rollouts", "loop steps / steps", True),
    Curve(INVALID_RATE, "Invalid actions in the update's rollouts", "invalid steps / steps", True),
    Curve(ACTION_ENTROPY, "Action-token entropy of the update's rollouts", "nats"),
)
ECHO_CURVES = (
    Curve("echo/improvement_rate", "Refinements better than their attempt", "share with s_r > s_o", True),
    Curve("echo/regression_rate", "Refinements worse than their attempt", "share with s_r < s_o", True),
    Curve("echo/gain_mean", "Mean gain s_r − s_o", "gain"),
    Curve("critic/template_match_rate", "Critiques matching the oracle template", "share", True),
)
SELFGUIDE_CURVES = (
    Curve("selfguide/label_agreement", "Label agreement with the oracle", "share of turns agreeing", True),
    Curve("selfguide/assessment_sum_mean", "Mean Σ_t r_t per trajectory", "Σ r_t"),
    Curve("selfguide/label_parse_failures", "Unreadable labels", "assessments per update"),
)
CSO_CURVES = (
    Curve("cso/verification_rate", "Branches verified", "share of branches", True),
    Curve("cso/share_supervised", "Steps of failures that ended in a pair", "share of steps", True),
    Curve("cso/candidates_per_failure", "Candidates per failed trajectory", "candidates"),
)
#: CSO's funnel, from what a round starts with to what DPO trains on.
FUNNEL = (("cso/failed_trajectories", "failed traj."), ("cso/steps", "their steps"), ("cso/candidates", "candidates"),
          ("cso/verified", "verified"), ("cso/pairs", "pairs"))
LABELS = (("positive", "#2ca02c"), ("neutral", "#9e9e9e"), ("negative", "#d62728"))


@dataclass(frozen=True)
class Drawn:
    """A group as drawn: its colour and the toggle key of each of its runs."""

    group: RunGroup
    color: str
    keys: tuple[str, ...]


def _slug(metric: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", metric.lower()).strip("-")


def drawn_groups(logs: Sequence[TrainingLog], overlay: str) -> list[Drawn]:
    """The groups in page order with their colours; run keys number the runs across groups."""
    drawn, k = [], 0
    for index, group in enumerate(group_runs(logs, overlay)):
        keys = tuple(f"run-{k + j}" for j in range(len(group.runs)))
        k += len(group.runs)
        drawn.append(Drawn(group, color(index), keys))
    return drawn


def group_band(entry: Drawn, metric: str) -> Band | None:
    """The group's band for a metric; None when none of its runs logged it."""
    points = entry.group.band(metric)
    if not points:
        return None
    runs = entry.group.runs
    members = ()
    if len(runs) > 1:
        members = tuple(Series(run.label, run.curve(metric), entry.color, key) for run, key in zip(runs, entry.keys))
    return Band(entry.group.label, entry.color, tuple(p.x for p in points), tuple(p.mean for p in points),
                tuple(p.low for p in points), tuple(p.high for p in points), members,
                key=entry.keys[0] if len(runs) == 1 else "")


def _caption(drawn: Sequence[Drawn], text: str) -> str:
    if any(len(d.group.runs) > 1 for d in drawn):
        text += " Bold: the mean over a group's runs; shaded: their minimum to maximum; thin: each run."
    return text


def curve_figure(drawn: Sequence[Drawn], curve: Curve, caption: str = "") -> str:
    """A figure with the curve of every group that logged the metric; empty when none did."""
    bands = [b for b in (group_band(d, curve.metric) for d in drawn) if b is not None]
    if not bands:
        return ""
    chart = band_chart(bands, title=curve.title, x_label="update", y_label=curve.y_label,
                       y_range=(0.0, 1.0) if curve.share else None)
    text = _caption([d for d in drawn if d.group.has(curve.metric)], caption or f"<code>{esc(curve.metric)}</code>.")
    return f'<figure id="train-{_slug(curve.metric)}">{chart}<figcaption>{text}</figcaption></figure>'


def _figures(drawn: Sequence[Drawn], curves: Sequence[Curve]) -> str:
    return "".join(curve_figure(drawn, c) for c in curves)


def _success_metric(group: RunGroup) -> str | None:
    return next((m for m in SUCCESS_METRICS if group.has(m)), None)


def _success_figure(drawn: Sequence[Drawn]) -> str:
    """Each group's training success, whichever metric its method logs it under, for the TIDE panel."""
    bands = []
    for entry in drawn:
        metric = _success_metric(entry.group)
        band = group_band(entry, metric) if metric and entry.group.has(AUV) else None
        if band is not None:
            bands.append(band)
    if not bands:
        return ""
    chart = band_chart(bands, title="Training success", x_label="update", y_label="share of rollouts solved",
                       y_range=(0.0, 1.0))
    text = _caption(drawn, "The success of the same rollouts (ECHO: the refinements, CSO: the failure rollouts).")
    return f'<figure id="train-tide-success">{chart}<figcaption>{text}</figcaption></figure>'


def _section(anchor: str, title: str, intro: str, figures: str) -> str:
    if not figures:
        return ""
    return f'<div id="{anchor}"><h3>{esc(title)}</h3><p>{intro}</p><div class="charts">{figures}</div></div>'


def tide_panel(drawn: Sequence[Drawn]) -> str:
    """Live TIDE diagnostics beside the training success, for the groups that have them."""
    with_tide = [d for d in drawn if d.group.has(AUV)]
    if not with_tide:
        return ""
    recomputed = [run.label for d in with_tide for run in d.group.runs if run.tide_from_trajectories]
    note = ("" if not recomputed else " Recomputed from <code>trajectories/train.jsonl</code> (the run predates the "
            "live metrics): " + ", ".join(esc(label) for label in recomputed) + ".")
    intro = ("TIDE's numbers for each update's own training rollouts (<code>tide/auv</code>, "
             "<code>tide/loop_ratio</code>, <code>tide/invalid_rate</code>), with the AUV horizon of "
             "<code>hindsight diagnose</code>." + note)
    body = _success_figure(with_tide) + _figures(drawn, TIDE_CURVES)
    return _section("train-tide", "Live TIDE diagnostics", intro, body)


def echo_panel(drawn: Sequence[Drawn]) -> str:
    """ECHO: the density of (s_o, s_r) over the run's refinements, and how often refining helped."""
    figures = []
    for entry in drawn:
        pairs = [p for run in entry.group.runs for p in run.echo_scores]
        if not pairs:
            continue
        density = score_density(pairs)
        chart = heatmap_chart(density.counts, density.edges(), title=f"(s_o, s_r) of {entry.group.label}",
                              x_label="s_o (initial attempt)", y_label="s_r (refinement)", colour=entry.color)
        figures.append(f'<figure class="echo-density" data-label="{esc(entry.group.label)}">{chart}<figcaption>'
                       f"{density.total} refinements of {esc(entry.group.label)}, every update pooled. Above the "
                       "dashed diagonal the refinement beat its attempt.</figcaption></figure>")
    intro = "ECHO's critic-guided refinements: each refinement's return s_r against its initial attempt's s_o."
    return _section("train-echo", "ECHO", intro, "".join(figures) + _figures(drawn, ECHO_CURVES))


def label_mix_figure(entry: Drawn) -> str:
    """Self-Guide's label mix per update (the group's mean rates), stacked."""
    bands = {label: {p.x: p.mean for p in entry.group.band(f"selfguide/{label}_rate")} for label, _ in LABELS}
    xs = sorted(set().union(*bands.values()))
    if not xs:
        return ""
    layers = [(label, [bands[label].get(x, 0.0) for x in xs], colour) for label, colour in LABELS]
    chart = stacked_bar_chart(xs, layers, title=f"Label mix of {entry.group.label}", x_label="update",
                              y_label="share of self-assessments")
    return (f'<figure class="label-mix" data-label="{esc(entry.group.label)}">{chart}<figcaption>Positive (green), '
            "neutral (grey) and negative (red) self-assessments per update"
            f"{', mean over the group' if len(entry.group.runs) > 1 else ''}.</figcaption></figure>")


def selfguide_panel(drawn: Sequence[Drawn]) -> str:
    """Self-Guide: the label mix and the labels' agreement with the oracle."""
    figures = "".join(label_mix_figure(d) for d in drawn) + _figures(drawn, SELFGUIDE_CURVES)
    intro = ("The policy's self-assessments z_t: which labels it wrote, and how often a label equals the oracle's "
             "(the planner's verdict on the same step).")
    return _section("train-selfguide", "Self-Guide", intro, figures)


def funnel_figure(drawn: Sequence[Drawn]) -> str:
    """CSO's funnel summed over rounds (mean over a group's runs), one bar per group and stage."""
    with_cso = [d for d in drawn if any(d.group.has(metric) for metric, _ in FUNNEL)]
    if not with_cso:
        return ""
    series = [(d.group.label, [d.group.mean_total(metric) for metric, _ in FUNNEL], d.color) for d in with_cso]
    top = max((v for _, values, _ in series for v in values if v is not None), default=0.0)
    chart = bar_chart([name for _, name in FUNNEL], series, title="CSO funnel, all rounds",
                      y_label="count over all rounds", y_range=(0.0, max(top * 1.1, 1.0)))
    return (f'<figure id="train-cso-funnel">{chart}<figcaption>From the failed trajectories of every round to the '
            "steps in them, the candidate critical steps (PRM), the verified ones and the DPO pairs.</figcaption>"
            "</figure>")


def cso_panel(drawn: Sequence[Drawn]) -> str:
    intro = "Critical Step Optimization: how each round narrows its failures down to DPO pairs."
    return _section("train-cso", "CSO", intro, funnel_figure(drawn) + _figures(drawn, CSO_CURVES))


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def runs_table(drawn: Sequence[Drawn]) -> str:
    """Every training run with its group, what it logged, and a box that shows or hides its lines."""
    rows = []
    for entry in drawn:
        for run, key in zip(entry.group.runs, entry.keys):
            final = run.final_success()
            logged = f"{run.rows} rows, last update {_fmt(run.last_step)}" if run.rows else "no metric rows"
            cells = [
                f'<input type="checkbox" checked data-toggle-run="{key}" aria-label="show {esc(run.label)}">',
                f'<span class="swatch" style="background:{entry.color}"></span>{esc(run.label)}',
                esc(entry.group.label), esc(run.method), esc(run.env), _fmt(run.seed), logged,
                "–" if final is None else f"{final[1]:.3f} ({esc(final[0])})", str(len(run.issues)),
                "–" if run.alarm is None else f'<span class="alarm">update {run.alarm.update}: '
                                              f'{esc(run.alarm.describe())}</span>',
            ]
            rows.append(f'<tr data-run="{key}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = ["show", "run", "group", "method", "env", "seed", "metrics", "final success", "skipped lines",
            "collapse alarm"]
    header = "".join(f"<th>{h}</th>" for h in head)
    return (f'<table class="summary training" id="training-runs"><thead><tr>{header}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


_TOGGLE = """
(function () {
  "use strict";
  var boxes = document.querySelectorAll("input[data-toggle-run]");
  Array.prototype.forEach.call(boxes, function (box) {
    box.addEventListener("change", function () {
      var key = box.getAttribute("data-toggle-run");
      var lines = document.querySelectorAll('#training svg [data-run="' + key + '"]');
      Array.prototype.forEach.call(lines, function (el) { el.classList.toggle("hidden-run", !box.checked); });
    });
  });
  document.getElementById("training").setAttribute("data-ready", "1");
})();
"""


def training_section(logs: Sequence[TrainingLog], overlay: str = "config") -> str:
    """The whole Training section (empty without training runs)."""
    if not logs:
        return ""
    drawn = drawn_groups(logs, overlay)
    curves = _figures(drawn, LEARNING_CURVES)
    empty = [run.label for run in logs if not run.rows]
    note = ("" if not empty else "<p class=\"meta\">No metric rows yet in: "
            + ", ".join(esc(label) for label in empty) + ".</p>")
    alarms = [run for run in logs if run.alarm is not None]
    if alarms:
        note += ('<p class="alarm" id="collapse-alarm"><b>Collapse alarm</b> (docs/training.md, "Collapse alarm"): '
                 + "; ".join(f"{esc(run.label)} at update {run.alarm.update}, {esc(run.alarm.describe())}"
                             for run in alarms) + ".</p>")
    learning = (f'<div id="train-curves"><h3>Learning curves</h3><div class="charts">{curves}</div></div>'
                if curves else "")
    panels = tide_panel(drawn) + echo_panel(drawn) + selfguide_panel(drawn) + cso_panel(drawn)
    grouping = ("runs whose configurations differ only in the seed" if overlay == "config"
                else "runs of the same method on the same environment")
    return f"""
<section id="training" data-ready="0">
  <h2>Training</h2>
  <p>From each run's <code>metrics.jsonl</code> (x = update). One curve per group of {grouping}; untick a run to
  hide its lines.</p>
  {runs_table(drawn)}
  {note}
  {learning}
  {panels}
</section>
<script>{_TOGGLE}</script>"""


__all__ = ["Curve", "LEARNING_CURVES", "SUCCESS_METRICS", "TIDE_CURVES", "curve_figure", "drawn_groups",
           "group_band", "training_section"]
