"""The charts and page of `hindsight echo-analyze`: the command's view of what `methods/echo_analysis.py` computes.

`write_page` adds them to the analysis's output folder, beside the data files the method wrote.
Every text from the run (ids, critiques, judge names) goes through `esc`; the page embeds
its SVGs inline and runs no script. The page lives with the command, not in `report/`, because
it shows the method's results: `methods/` never imports a page, and `report/` never a method.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from hindsight.algos.echo_analysis import Granularity, RatingTally
from hindsight.methods.echo_analysis import CritiqueAnalysis, EchoAnalysis, FailureAnalysis
from hindsight.report.html import standalone_page
from hindsight.report.svg import PointSet, bar_chart, color, esc, legend, point_chart

#: Colours of the granularity levels, coarse to fine, and of the three critique subsets.
LEVEL_COLOURS = {Granularity.GENERIC: "#9e9e9e", Granularity.TARGETED: "#4e79a7", Granularity.PINPOINTED: "#e15759"}
SUBSET_COLOURS = ("#555555", "#2ca02c", "#d62728")


@dataclass(frozen=True)
class Chart:
    """An SVG and the file it is written to."""

    file: str
    title: str
    svg: str


def _stage_names(analysis: EchoAnalysis) -> list[str]:
    return [f"{s.index + 1}: {s.label}" for s in analysis.stages]


def drift_chart(analysis: EchoAnalysis, failures: FailureAnalysis) -> Chart:
    sets, markers = [], []
    for stage, name in zip(analysis.stages, _stage_names(analysis)):
        points = [p for p in failures.points if p.stage == stage.index]
        if not points:
            continue
        sets.append(PointSet(f"stage {name}", tuple((p.x, p.y) for p in points), color(stage.index),
                             tuple(f"{p.id} (update {p.update})" for p in points)))
        centre = (sum(p.x for p in points) / len(points), sum(p.y for p in points) / len(points))
        markers.append(PointSet(f"stage {name}: centre of its points on this map", (centre,), color(stage.index)))
    title = f"Failures by training stage ({failures.projection} of {failures.embed_text} embeddings)"
    return Chart("failure-drift.svg", title, point_chart(sets, title=title, markers=markers))


def granularity_chart(analysis: EchoAnalysis, critiques: CritiqueAnalysis) -> Chart:
    series = [(level.value, [s.all.granularity_share(level) for s in critiques.tables.stages], LEVEL_COLOURS[level])
              for level in Granularity]
    title = "Critique granularity per stage"
    return Chart("critique-granularity.svg", title,
                 bar_chart(_stage_names(analysis), series, title=title, y_label="share of rated critiques"))


def addressed_chart(analysis: EchoAnalysis, critiques: CritiqueAnalysis) -> Chart:
    subsets = (("all", lambda s: s.all), ("refinement improved", lambda s: s.improved),
               ("not improved", lambda s: s.not_improved))
    series = [(label, [pick(s).issue_addressed_rate for s in critiques.tables.stages], SUBSET_COLOURS[k])
              for k, (label, pick) in enumerate(subsets)]
    title = "Issue addressed per stage: yes / (yes + no)"
    return Chart("issue-addressed.svg", title,
                 bar_chart(_stage_names(analysis), series, title=title, y_label="issue-addressed rate"))


def render_charts(analysis: EchoAnalysis) -> list[Chart]:
    charts = []
    if analysis.failures is not None:
        charts.append(drift_chart(analysis, analysis.failures))
    if analysis.critiques is not None:
        charts += [granularity_chart(analysis, analysis.critiques), addressed_chart(analysis, analysis.critiques)]
    return charts


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _figure(chart: Chart, caption: str, extra: str = "") -> str:
    return f"<figure>{chart.svg}{extra}<figcaption>{caption}</figcaption></figure>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="summary"><tr>{header}</tr>{body}</table>'


def drift_section(analysis: EchoAnalysis, failures: FailureAnalysis, chart: Chart) -> str:
    drift = failures.drift
    names = _stage_names(analysis)
    rows = [[esc(names[s.stage]), str(failures.failures_per_stage[s.stage]), str(s.failures), _fmt(s.spread)]
            for s in drift.stages]
    steps = ", ".join(f"{d:.3f}" for d in drift.steps) or "–"
    if drift.drift is None:
        verdict = f"No drift number: {esc(drift.reason)}."
    else:
        verdict = (f"Drift (distance between the centroids of stages {drift.first_stage + 1} and "
                   f"{drift.last_stage + 1}): <strong>{drift.drift:.3f}</strong>; with the stage labels shuffled "
                   f"{drift.permutations} times: {_fmt(drift.chance_drift)} on average (excess "
                   f"{_fmt(failures.excess_drift)}, p = {_fmt(drift.p_value)}). Between consecutive stages: {steps}.")
    entries = [(f"stage {name}", color(k)) for k, name in enumerate(names)]
    caption = (f"Each dot is a failed attempt ({esc(failures.source)}), embedded from its {esc(failures.embed_text)} "
               f"text with {esc(failures.embedder)} and laid out by {esc(failures.projection)}; large dots are "
               "the centres of each stage's dots on this map. The map's axes have no units, and its distances "
               "are only roughly those of the embedding space: the drift numbers are computed there, not here.")
    dropped = (f" {failures.without_text} sampled failure(s) had no {esc(failures.embed_text)} text and are left out."
               if failures.without_text else "")
    return f"""
<section id="drift">
<h2>Failure drift</h2>
<p>{verdict}{dropped}</p>
<div class="charts">{_figure(chart, caption, legend(entries))}
{_table(("stage", "failures logged", "analysed", "spread (mean distance to centroid)"), rows)}</div>
<p class="meta">Embeddings are scaled to length 1, so distances lie between 0 and 2. A stage's centroid is
the mean of its failures' embeddings; the drift is the distance between the first and the last stage's
centroids. Shuffling which failure belongs to which stage shows how large that distance gets by chance
with as many failures per stage; p is the share of shuffles (counting the observation) that reach it.</p>
</section>"""


def _tally_row(name: str, tally: RatingTally) -> list[str]:
    return [esc(name), str(tally.critiques), *(_share(tally.granularity_share(level)) for level in Granularity),
            _fmt(tally.mean_granularity, 2), str(tally.granularity_unread),
            f"{tally.addressed_yes}/{tally.addressed_no}/{tally.addressed_unclear}", str(tally.addressed_unread),
            _share(tally.issue_addressed_rate)]


def critiques_section(analysis: EchoAnalysis, critiques: CritiqueAnalysis, charts: Sequence[Chart]) -> str:
    names = _stage_names(analysis)
    head = ("stage · critiques", "rated", *(level.value for level in Granularity), "mean level (1–3)",
            "granularity unread", "addressed yes/no/unclear", "addressed unread", "issue-addressed rate")
    rows = []
    for stage in (*critiques.tables.stages, critiques.tables.overall):
        name = names[stage.stage] if stage.stage >= 0 else "all stages"
        rows += [_tally_row(f"{name} · all", stage.all), _tally_row(f"{name} · improved (s_r > s_o)", stage.improved),
                 _tally_row(f"{name} · not improved", stage.not_improved)]
    counts = _table(("stage", "critiques logged", "with advice", "rated"),
                    [[esc(names[c.stage]), str(c.logged), str(c.with_advice), str(c.rated)] for c in critiques.counts])
    granularity, addressed = charts
    levels = legend([(level.value, LEVEL_COLOURS[level]) for level in Granularity])
    subsets = legend(list(zip(("all", "refinement improved", "not improved"), SUBSET_COLOURS)))
    return f"""
<section id="critiques">
<h2>Critiques as the judge rates them</h2>
<p>Judge: <code>{esc(critiques.judge)}</code>. Critiques that gave no advice ("none") are not rated. Answers the
judge gave that could not be read: {critiques.unread_granularity} granularity, {critiques.unread_addressed}
issue-addressed; they are counted as unread and left out of the shares and rates.</p>
<div class="charts">
{_figure(granularity, "Share of each granularity among the rated critiques of each stage.", levels)}
{_figure(addressed, "Issue-addressed rate: yes / (yes + no), unclear and unread left out (n/a: none decided).",
         subsets)}
{counts}</div>
<h3>Per stage, split by whether the refinement improved on its attempt</h3>
{_table(head, rows)}
<p class="meta">Granularity rubric: 1 generic (fits almost any attempt), 2 targeted (names a kind of mistake
or a part of the task, not the exact place), 3 pinpointed (names a turn, state or action of this attempt and
what to do there). Issue addressed: whether the refinement avoided or fixed the mistake the critique named,
whatever its score.</p>
</section>"""


def render_page(analysis: EchoAnalysis) -> str:
    charts = render_charts(analysis)
    parts = []
    if analysis.failures is not None:
        parts.append(drift_section(analysis, analysis.failures, charts[0]))
        charts = charts[1:]
    if analysis.critiques is not None:
        parts.append(critiques_section(analysis, analysis.critiques, charts))
    stages = "; ".join(_stage_names(analysis))
    skipped = f" · {analysis.skipped_lines} unreadable log line(s) skipped" if analysis.skipped_lines else ""
    return standalone_page(f"ECHO analyses: {analysis.run}", "".join(parts),
                           meta=f"stages {stages}{skipped}")


def write_page(analysis: EchoAnalysis, out: Path) -> None:
    """The charts (one SVG file each) and index.html of an analysis, in its output folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for chart in render_charts(analysis):
        (out / chart.file).write_text(chart.svg, encoding="utf-8")
    (out / "index.html").write_text(render_page(analysis), encoding="utf-8")
