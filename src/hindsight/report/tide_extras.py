"""Report section for the TIDE additions: AUV with and without loops, progress AUV, recall spread.

Kept apart from `hindsight.report.html` so the main report layout can change without
touching it; `render_report` only places the returned HTML. Everything drawn here comes
from `RunDiagnosis` fields, and all text goes through `esc`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hindsight.diagnostics.recall import RecallDistribution
from hindsight.diagnostics.summary import RunDiagnosis
from hindsight.report.svg import bar_chart, esc

#: Upper edges (inclusive) of the recall-distance bins drawn; the last bin is open.
RECALL_BIN_EDGES = (1, 2, 3, 5, 8, 15, 30)

SUCCESS_COLOUR = "#2a9d8f"
FAILURE_COLOUR = "#e76f51"


@dataclass(frozen=True)
class RecallBins:
    """Recall distances grouped into bins, as the share of a group's recalls in each bin.

    `labels[k]` names bin k ("1", "4–5", "31+"); `success[k]` / `failure[k]` are the
    shares (each list sums to 1), or all None when the group has no recall.
    """

    labels: tuple[str, ...]
    success: tuple[float | None, ...]
    failure: tuple[float | None, ...]


def _bin_labels(edges: Sequence[int]) -> tuple[str, ...]:
    labels, low = [], 1
    for high in edges:
        labels.append(str(high) if high == low else f"{low}–{high}")
        low = high + 1
    labels.append(f"{low}+")
    return tuple(labels)


def bin_shares(distribution: RecallDistribution, edges: Sequence[int] = RECALL_BIN_EDGES) -> tuple[float | None, ...]:
    """The share of a distribution's recalls in each bin: (≤e0], (e0, e1], ..., (e_last, ∞)."""
    counts = [0] * (len(edges) + 1)
    for distance, count in distribution.histogram:
        k = next((i for i, high in enumerate(edges) if distance <= high), len(edges))
        counts[k] += count
    if not distribution.n:
        return tuple(None for _ in counts)
    return tuple(c / distribution.n for c in counts)


def recall_bins(run: RunDiagnosis, edges: Sequence[int] = RECALL_BIN_EDGES) -> RecallBins:
    """The binned recall-distance shares of a run's successful and failed trajectories."""
    by = run.recall_by_outcome
    return RecallBins(_bin_labels(edges), bin_shares(by.success, edges), bin_shares(by.failure, edges))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _recall_figure(run: RunDiagnosis) -> str:
    bins = recall_bins(run)
    top = max([v for v in bins.success + bins.failure if v is not None] or [0.0])
    chart = bar_chart(list(bins.labels),
                      [("success", list(bins.success), SUCCESS_COLOUR), ("failure", list(bins.failure), FAILURE_COLOUR)],
                      title=f"Recall distance on {run.label}", y_label="share of recalls",
                      y_range=(0.0, min(1.0, max(top * 1.15, 0.1))))
    by = run.recall_by_outcome
    caption = (f"{esc(run.label)}: steps since a needed object was last seen when the agent acts on it, as the share "
               f"of each group's recalls per distance bin. Successful trajectories: {by.success.n} recalls, median "
               f"{_fmt(by.success.median)}; failed: {by.failure.n} recalls, median {_fmt(by.failure.median)}.")
    return f'<figure class="recall">{chart}<figcaption>{caption}</figcaption></figure>'


def tide_extras_section(runs: Sequence[RunDiagnosis]) -> str:
    """HTML of the section: a table of the loop split and progress AUV, and recall charts."""
    if not runs:
        return ""
    rows = []
    for r in runs:
        split = r.loop_split
        progress = "n/a" if r.progress is None else _fmt(r.progress.auv) + ("" if r.progress.graded else " (binary)")
        rows.append(
            f"<tr><td>{esc(r.label)}</td><td>{_fmt(r.auv)}</td>"
            f"<td>{_fmt(split.with_loops.auv)}</td><td>{split.with_loops.n}</td>"
            f"<td>{_fmt(split.without_loops.auv)}</td><td>{split.without_loops.n}</td>"
            f"<td>{esc(progress)}</td><td>{_fmt(r.entropy_loop)} / {_fmt(r.entropy_other)}</td>"
            f"<td>{_fmt(r.surprisal_loop)} / {_fmt(r.surprisal_other)}</td></tr>"
        )
    figures = "".join(_recall_figure(r) for r in runs if r.recall_pairs)
    charts = f'<div class="charts">{figures}</div>' if figures else ""
    return f"""
<section id="tide-extras">
  <h2>Loops, progress and recall</h2>
  <table class="summary tide-extras">
    <tr><th>run</th><th>AUV</th><th>AUV with loops</th><th>n</th><th>AUV without loops</th><th>n</th>
      <th>progress AUV</th><th>action H loop / other</th><th>surprisal loop / other</th></tr>
    {"".join(rows)}
  </table>
  <p class="meta">AUV with / without loops: the AUV of the trajectories in which the loop finder marked at least
  one step, and of the others, each over its own trajectories. Progress AUV: the area under the mean best graded
  score reached within t turns (binary: the scores are 0/1, so it repeats AUV). Action H: mean entropy of the
  model's next-token distribution over the action tokens; surprisal: mean −log p of the whole response.</p>
  {charts}
</section>"""
