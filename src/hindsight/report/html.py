"""The static HTML report: one self-contained file, no network, no external assets.

Sections: for training runs, the Training section (`report.training_html`: learning curves,
live TIDE diagnostics, each method's panel); for diagnosed runs, a summary table of every
run; per environment the P_t curves, a radar chart across runs and an LR-vs-AUV scatter;
AUV against the memory window where runs of one sweep are present; and a trajectory viewer
with loop steps highlighted.

Escaping is the report's security boundary, because model outputs are arbitrary text:
static HTML text goes through `esc`; trajectory text travels as JSON inside a
``<script type="application/json">`` element with ``<``, ``>`` and ``&`` written as
``\\u`` escapes (so it can never close the element), and the viewer script inserts it
only through ``textContent``, never as markup. The page records script errors into the
``data-js-errors`` attribute of ``<html>`` so a headless browser test can read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from hindsight.diagnostics.curves import trajectory_auv
from hindsight.diagnostics.memory import MemoryGroup
from hindsight.diagnostics.summary import KeptTrajectory, RunDiagnosis
from hindsight.report.svg import (
    Series, bar_chart, color, esc, legend, line_chart, min_max_normalise, radar_chart, scatter_chart,
)
from hindsight.report.training import TrainingLog
from hindsight.report.training_html import training_section
from hindsight.report.tide_extras import tide_extras_section

#: Longest text of one field shown in the viewer; the rest is cut with a note.
MAX_FIELD_CHARS = 2000
#: Most per-trajectory points drawn per run in a scatter plot.
MAX_SCATTER_POINTS = 1500

_CATEGORY_NAMES = {
    "looping": "looping",
    "redundant_exploration": "redundant expl.",
    "wrong_object_focus": "wrong object",
    "query_looping": "query looping",
    "navigation_cycling": "nav. cycling",
    "premature_purchase": "premature buy",
}


@dataclass(frozen=True)
class ReportRun:
    """A diagnosed run with the trajectories kept for the viewer."""

    run: RunDiagnosis
    kept: tuple[KeptTrajectory, ...] = ()
    memory_index: float | None = None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    if len(text) <= MAX_FIELD_CHARS:
        return text
    return text[:MAX_FIELD_CHARS] + f"\n… [{len(text) - MAX_FIELD_CHARS} more characters not shown]"


def script_json(value: Any) -> str:
    """JSON that is safe as the content of a <script> element."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def viewer_data(runs: Sequence[ReportRun]) -> dict[str, Any]:
    """The viewer's data: per run, the kept trajectories with per-step text and loop flags."""
    out = []
    for entry in runs:
        trajectories = []
        for kept in entry.kept:
            view, mask, diag = kept.view, kept.mask, kept.diagnosis
            steps = []
            for i in range(view.length):
                steps.append({
                    "o": _cut(view.observations[i]),
                    "a": _cut(view.actions[i]),
                    "r": _cut(view.raws[i]) if view.raws is not None else None,
                    "n": _cut(view.analyses[i]) if view.analyses is not None else None,
                    "v": bool(view.valid[i]),
                    "l": bool(mask[i]),
                })
            trajectories.append({
                "id": view.id or view.source,
                "source": view.source,
                "success": view.success,
                "length": view.length,
                "loop_steps": diag.loop_steps,
                "errors": sorted(diag.errors),
                "instruction": _cut(view.instruction),
                "final": _cut(view.final_observation),
                "steps": steps,
            })
        out.append({"label": entry.run.label, "env": entry.run.env, "trajectories": trajectories})
    return {"runs": out}


def _summary_table(runs: Sequence[ReportRun]) -> str:
    categories: list[str] = []
    for entry in runs:
        for share in entry.run.taxonomy:
            if share.category not in categories:
                categories.append(share.category)
    head = ["run", "env", "model", "memory", "trajectories", "SR", "AUV", "t_max", "LR", "LR/traj", "invalid",
            *[_CATEGORY_NAMES.get(c, c) for c in categories], "H loop", "H other", "recall d", "MI", "skipped"]
    rows = []
    for k, entry in enumerate(runs):
        r = entry.run
        shares = {s.category: s for s in r.taxonomy}
        cells = [
            f'<span class="swatch" style="background:{color(k)}"></span>{esc(r.label)}',
            esc(r.env), esc(r.model or "?"), esc(r.memory or "?"), str(r.n_trajectories),
            _fmt(r.success_rate), _fmt(r.auv), str(r.t_max), _fmt(r.loop_ratio), _fmt(r.loops.per_trajectory_mean),
            _fmt(r.invalid_rate),
        ]
        for c in categories:
            share = shares.get(c)
            cells.append("n/a" if share is None or not share.applicable else _fmt(share.share, 2))
        cells += [_fmt(r.entropy_loop), _fmt(r.entropy_other), _fmt(r.recall_distance, 2),
                  "–" if entry.memory_index is None else f"{entry.memory_index:+.3f}", str(r.skipped_lines)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="summary" id="summary"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _share_of(run: RunDiagnosis, category: str) -> float | None:
    share = next((s for s in run.taxonomy if s.category == category), None)
    return None if share is None else share.share


_ENDING_BARS = {"env": "ended: env", "budget": "ended: budget", "other": "ended: other"}


def _ending_share(run: RunDiagnosis, ending: str) -> float | None:
    """`ending`'s share of the run's failures (None: the log says of none how it ended)."""
    shares = run.failure_ending_shares()
    return shares.get(ending, 0.0) if shares else None


def _env_section(env: str, entries: Sequence[tuple[int, ReportRun]]) -> str:
    runs = [e.run for _, e in entries]
    colours = [color(k) for k, _ in entries]
    t_max = max(r.t_max for r in runs)
    curves = [Series(r.label, tuple((float(t), p) for t, p in enumerate(r.p_curve)), c) for r, c in zip(runs, colours)]
    p_chart = line_chart(curves, title=f"P_t on {env}", x_label="turn t", y_label="solved within t turns (P_t)",
                         x_ticks=None if t_max > 12 else [(float(t), str(t)) for t in range(t_max + 1)])

    axes = ["SR", "AUV", "1 − LR", "valid actions"]
    columns = [
        [r.success_rate for r in runs],
        [r.auv for r in runs],
        [1.0 - (r.loop_ratio or 0.0) for r in runs],
        [1.0 - (r.invalid_rate or 0.0) for r in runs],
    ]
    mis = [e.memory_index for _, e in entries]
    if all(mi is not None for mi in mis):
        axes.append("MI")
        columns.append([float(mi) for mi in mis])  # type: ignore[arg-type]
    normalised = [min_max_normalise(col) for col in columns]
    radar = radar_chart(axes, [(r.label, [normalised[a][k] for a in range(len(axes))], c)
                               for k, (r, c) in enumerate(zip(runs, colours))], title=f"TIDE radar on {env}")

    scatter_series, means = [], []
    for r, c in zip(runs, colours):
        points = [(t.loop_ratio, trajectory_auv(t.success_turn, r.t_max)) for t in r.trajectories[:MAX_SCATTER_POINTS]]
        scatter_series.append(Series(r.label, tuple(points), c))
        means.append(Series(r.label, ((r.loop_ratio or 0.0, r.auv),), c))
    scatter = scatter_chart(scatter_series, highlights=means, title=f"Loop Ratio vs AUV on {env}",
                            x_label="loop ratio", y_label="AUV")
    categories = list(dict.fromkeys(share.category for r in runs for share in r.taxonomy))
    # What ended the failures (a fall, the step budget): the taxonomy's categories do not see it.
    endings = [e for e in _ENDING_BARS if any(dict(r.failure_endings).get(e) for r in runs)]
    groups = [_CATEGORY_NAMES.get(c, c) for c in categories] + [_ENDING_BARS[e] for e in endings]
    bars = bar_chart(groups, [(r.label, [_share_of(r, c) for c in categories] + [_ending_share(r, e) for e in endings],
                               colour) for r, colour in zip(runs, colours)],
                     title=f"Error taxonomy on {env}", y_label="share of failed trajectories",
                     width=max(460, 95 * len(groups)))
    failed = ", ".join(f"{esc(r.label)} {r.n_failed}" for r in runs)
    key = legend([(r.label, c) for r, c in zip(runs, colours)])
    radar_note = ("one run: every axis is at its maximum because min–max scaling needs two runs to compare"
                  if len(runs) == 1 else "each axis min–max normalised across the runs of this environment; "
                  "1 − LR so that larger is better everywhere")
    return f"""
<section class="env" id="env-{esc(env)}">
  <h2>{esc(env)}</h2>
  {key}
  <div class="charts">
    <figure id="pt-{esc(env)}">{p_chart}<figcaption>Share of tasks solved within t turns; AUV is the area under
      this curve up to t_max divided by t_max.</figcaption></figure>
    <figure id="radar-{esc(env)}">{radar}<figcaption>{esc(radar_note)}.</figcaption></figure>
    <figure id="scatter-{esc(env)}">{scatter}<figcaption>One small dot per trajectory (its own loop ratio and
      single-trajectory AUV); the large dot is the run's pooled LR and AUV.</figcaption></figure>
    <figure id="taxonomy-{esc(env)}">{bars}<figcaption>Share of each run's failed trajectories that show each
      error category (a trajectory may show several or none; n/a: the environment cannot judge it), and what
      ended the failures: the environment (a terminal failure, such as a fall), the step budget, or neither (the
      agent stopped); a run's "ended" bars add up to 1. Failed trajectories: {failed}.</figcaption></figure>
  </div>
</section>"""


def _memory_section(groups: Sequence[MemoryGroup]) -> str:
    if not groups:
        return ""
    figures = []
    for k, group in enumerate(groups):
        ticks = [(float(i), p.memory) for i, p in enumerate(group.points)]
        points = tuple((float(i), p.auv) for i, p in enumerate(group.points))
        series = Series(f"{group.model} on {group.env}", points, color(k))
        top = max(max(p.auv for p in group.points) * 1.2, 0.05)
        chart = line_chart([series], title=f"AUV vs memory window ({group.env}, {group.model})",
                           x_label="history window (turns)", y_label="AUV", x_ticks=ticks,
                           y_range=(0.0, min(1.0, top)), markers=True)
        mi = group.memory_index
        caption = f"{esc(group.model)} on {esc(group.env)}: " + ", ".join(
            f"{esc(p.memory)} → {p.auv:.3f}" for p in group.points
        )
        if mi is not None:
            caption += f". Memory Index (AUV full − AUV none) = <strong>{mi:+.3f}</strong>"
        figures.append(f'<figure class="memory">{chart}<figcaption>{caption}.</figcaption></figure>')
    return f"""
<section id="memory">
  <h2>Memory windows</h2>
  <p>Runs of the same model on the same environment that differ only in how many past turns the prompt keeps.</p>
  <div class="charts">{"".join(figures)}</div>
</section>"""


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1400px;
  padding:0 16px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666;margin:0 0 16px}
.alarm{color:#b00020}
table.summary{border-collapse:collapse;font-size:13px;display:block;overflow-x:auto}
table.summary th,table.summary td{border:1px solid #ddd;padding:4px 7px;text-align:right;white-space:nowrap}
table.summary th{background:#f4f4f4} table.summary td:nth-child(-n+4){text-align:left}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:middle}
.legend{list-style:none;padding:0;margin:4px 0 8px;display:flex;flex-wrap:wrap;gap:4px 18px}
.charts{display:flex;flex-wrap:wrap;gap:18px} figure{margin:0;max-width:470px} figcaption{color:#555;font-size:12px}
svg{background:#fff} svg .grid{stroke:#e5e5e5} svg .axis{stroke:#888} svg .ring{fill:none;stroke:#ddd}
svg .tick{font-size:11px;fill:#555} svg .label{font-size:12px;fill:#333}
#viewer .controls{display:flex;gap:12px;flex-wrap:wrap;align-items:center;margin-bottom:8px}
#viewer select{max-width:520px}
table.steps{border-collapse:collapse;width:100%;font-size:13px;table-layout:fixed}
table.steps th,table.steps td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
table.steps th:first-child{width:44px} table.steps th:nth-child(3){width:34%} table.steps th:nth-child(4){width:86px}
table.steps pre{margin:0;white-space:pre-wrap;word-break:break-word;font-size:12px}
tr.loop td{background:#fff0c2} tr.loop td:first-child{border-left:4px solid #e6a700}
tr.invalid td:nth-child(4){color:#b00020;font-weight:600}
details summary{cursor:pointer;color:#555}
.tag{display:inline-block;background:#eee;border-radius:3px;padding:0 5px;margin-right:4px;font-size:12px}
.notes li{margin-bottom:4px}
h3{font-size:15px;margin:20px 0 6px} table.training td:nth-child(-n+5){text-align:left}
.hidden-run{display:none}
"""

_ERROR_HOOK = """
(function () {
  var errs = [];
  function note(m) {
    errs.push(String(m));
    document.documentElement.setAttribute("data-js-errors", errs.join(" | "));
  }
  window.addEventListener("error", function (e) { note(e.message || "error"); });
  window.addEventListener("unhandledrejection", function (e) {
    note("unhandled rejection: " + ((e.reason && e.reason.message) || e.reason));
  });
})();
"""

_VIEWER = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("viewer-data").textContent);
  var root = document.getElementById("viewer");
  var runSel = document.getElementById("viewer-run");
  var filterSel = document.getElementById("viewer-filter");
  var trajSel = document.getElementById("viewer-trajectory");
  var meta = document.getElementById("viewer-meta");
  var out = document.getElementById("viewer-steps");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }
  function option(value, text) { var o = el("option", null, text); o.value = value; return o; }
  function keep(t) {
    var f = filterSel.value;
    return !((f === "loops" && !t.loop_steps) || (f === "failed" && t.success) || (f === "success" && !t.success));
  }
  function currentRun() { return data.runs[Number(runSel.value)] || null; }

  function showTrajectory() {
    out.textContent = "";
    meta.textContent = "";
    var run = currentRun();
    var t = run ? run.trajectories[Number(trajSel.value)] : null;
    if (!t) {
      var empty = run && run.trajectories.length ? "No trajectory matches this filter."
                                                 : "No trajectories kept for this run.";
      meta.appendChild(el("p", null, empty));
      root.setAttribute("data-rendered-steps", "0");
      return;
    }
    var head = el("p");
    head.appendChild(el("span", "tag", t.success ? "success" : "failure"));
    head.appendChild(el("span", "tag", t.length + " steps"));
    head.appendChild(el("span", "tag", t.loop_steps + " loop steps"));
    t.errors.forEach(function (e) { head.appendChild(el("span", "tag", e.replace(/_/g, " "))); });
    head.appendChild(el("span", null, " " + t.source));
    meta.appendChild(head);
    if (t.instruction) {
      var ins = el("details");
      ins.appendChild(el("summary", null, "task instruction"));
      ins.appendChild(el("pre", null, t.instruction));
      meta.appendChild(ins);
    }
    var table = el("table", "steps");
    var hr = el("tr");
    ["#", "observation (before the action)", "model output", "action"].forEach(function (h) {
      hr.appendChild(el("th", null, h));
    });
    table.appendChild(hr);
    t.steps.forEach(function (s, i) {
      var tr = el("tr", (s.l ? "loop" : "") + (s.v ? "" : " invalid"));
      tr.appendChild(el("td", null, String(i) + (s.l ? " ↻" : "")));
      var obs = el("td"); obs.appendChild(el("pre", null, s.o)); tr.appendChild(obs);
      var said = el("td");
      if (s.n) { said.appendChild(el("pre", null, s.n)); }
      if (s.r) {
        var d = el("details"); d.appendChild(el("summary", null, "raw response")); d.appendChild(el("pre", null, s.r));
        said.appendChild(d);
      }
      tr.appendChild(said);
      var act = el("td"); act.appendChild(el("pre", null, s.a === null ? "(none parsed)" : s.a));
      if (!s.v) { act.appendChild(el("div", null, "invalid")); }
      tr.appendChild(act);
      table.appendChild(tr);
    });
    out.appendChild(table);
    if (t.final) {
      var fin = el("details");
      fin.appendChild(el("summary", null, "final observation"));
      fin.appendChild(el("pre", null, t.final));
      out.appendChild(fin);
    }
    root.setAttribute("data-rendered-steps", String(t.steps.length));
  }

  function fillTrajectories() {
    trajSel.textContent = "";
    var run = currentRun();
    if (run) {
      run.trajectories.forEach(function (t, k) {
        if (!keep(t)) { return; }
        var mark = t.success ? "\u2713 " : "\u2717 ";
        var text = mark + (t.id || ("#" + k)) + " \u00b7 " + t.length + " steps \u00b7 " + t.loop_steps + " loop";
        trajSel.appendChild(option(String(k), text));
      });
    }
    showTrajectory();
  }

  data.runs.forEach(function (run, k) { runSel.appendChild(option(String(k), run.label + " (" + run.env + ")")); });
  runSel.addEventListener("change", fillTrajectories);
  filterSel.addEventListener("change", fillTrajectories);
  trajSel.addEventListener("change", showTrajectory);
  fillTrajectories();
  root.setAttribute("data-ready", "1");
})();
"""


def _evaluation_sections(runs: Sequence[ReportRun], groups: Sequence[MemoryGroup]) -> str:
    """Summary, per-environment charts, memory windows and the trajectory viewer of the diagnosed runs."""
    by_env: dict[str, list[tuple[int, ReportRun]]] = {}
    for k, entry in enumerate(runs):
        by_env.setdefault(entry.run.env or "unknown", []).append((k, entry))
    env_sections = "".join(_env_section(env, entries) for env, entries in by_env.items())
    return f"""
<h2>Summary</h2>
{_summary_table(runs)}
<ul class="notes">
<li><b>SR</b>: share of trajectories that succeeded (any turn). <b>AUV</b>: area under P_t over [0, t_max] divided
by t_max; successes after t_max do not count. <b>LR</b>: loop steps / all steps, pooled; <b>LR/traj</b>: mean of
per-trajectory ratios. <b>invalid</b>: invalid actions / all steps.</li>
<li>Error categories (Self-Guide appendix B) are shares of <em>failed</em> trajectories; n/a where the environment
has no notion the criterion needs. <b>H loop / H other</b>: mean action-token entropy at loop and other steps.
<b>recall d</b>: mean memory recall distance. <b>MI</b>: AUV(full history) − AUV(no history) of the same model
and environment.</li>
</ul>
{env_sections}
{_memory_section(groups)}
{tide_extras_section([e.run for e in runs])}

<section id="viewer" data-ready="0" data-rendered-steps="0">
  <h2>Trajectories</h2>
  <div class="controls">
    <label>run <select id="viewer-run"></select></label>
    <label>show <select id="viewer-filter">
      <option value="all">all kept</option><option value="loops">with loops</option>
      <option value="failed">failed</option><option value="success">successful</option>
    </select></label>
    <label>trajectory <select id="viewer-trajectory"></select></label>
  </div>
  <p class="meta">Highlighted rows are loop steps: the repeated copy of a cycle the agent had just completed.
  A sample of each run is kept: failed trajectories with loops first, then successes, then other failures.</p>
  <div id="viewer-meta"></div>
  <div id="viewer-steps"></div>
  <noscript>The trajectory viewer needs JavaScript; the rest of the report does not.</noscript>
</section>
<script type="application/json" id="viewer-data">{script_json(viewer_data(runs))}</script>
<script>{_VIEWER}</script>
"""


def render_report(runs: Sequence[ReportRun], groups: Sequence[MemoryGroup], *, title: str = "Hindsight report",
                  inputs: Sequence[str] = (), generated: datetime | None = None,
                  training: Sequence[TrainingLog] = (), overlay: str = "config") -> str:
    """The complete HTML document: the Training section when training runs are given, then the
    evaluation diagnostics when diagnosed runs are (a page always has at least one of the two)."""
    generated = generated or datetime.now(timezone.utc)
    inputs_html = "".join(f"<li><code>{esc(p)}</code></li>" for p in inputs)
    variants = sorted({e.run.loops.variant for e in runs})
    trained = f" and {len(training)} training run(s)" if training else ""
    finder = f";\nloop finder: {esc(', '.join(variants))}" if variants else ""
    body = f"""<h1>{esc(title)}</h1>
<p class="meta">Generated {esc(generated.strftime("%Y-%m-%d %H:%M UTC"))} from {len(runs)} run(s){trained}{finder}.</p>
<details><summary>inputs</summary><ul>{inputs_html}</ul></details>
{training_section(training, overlay)}
{_evaluation_sections(runs, groups) if runs else ""}"""
    return html_document(title, body, policy=f"{STATIC_POLICY}; script-src 'unsafe-inline'; img-src data:",
                         head=f"<script>{_ERROR_HOOK}</script>\n")


#: What every page allows itself: its own inline style and nothing else (a page may add to it).
STATIC_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


def html_document(title: str, body: str, *, policy: str = STATIC_POLICY, head: str = "", style: str = "") -> str:
    """A whole self-contained page in the report's style: `title` escaped here, `body` and `head` (extra
    trusted HTML for the head, such as a script) built with `esc` by the caller, `style` CSS added after
    the report's own, and `policy` its Content-Security-Policy, so a page runs nothing it does not name."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<title>{esc(title)}</title>
{head}<style>{_STYLE}{style}</style>
</head>
<body>
{body}
</body>
</html>
"""


def standalone_page(title: str, body: str, *, meta: str = "") -> str:
    """A self-contained page in the report's style for the output of one analysis (`body` is
    trusted HTML built with `esc`; `title` and `meta` are escaped here). It runs no script,
    and its policy forbids any, so the page needs nothing beyond itself."""
    return html_document(title, f'<h1>{esc(title)}</h1>\n<p class="meta">{esc(meta)}</p>\n{body}',
                         policy=f"{STATIC_POLICY}; img-src data:")
