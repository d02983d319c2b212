"""The bench's report, DIR/report/index.html: each paper table as published beside ours, then every
cell with its status, time, links and the commands that produced it.

One static file in the style of `hindsight report`, with no scripts: every text from a run or a
command goes through `esc`. Links are relative, so the output folder can be moved or shared whole.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from hindsight.bench.cells import BLOCKED, DONE, FAILED, BenchTable, Cell, CellRecord, Estimate, OurTable
from hindsight.bench.plan import Plan
from hindsight.bench.published import PublishedTable
from hindsight.bench.runner import duration
from hindsight.report.html import html_document
from hindsight.report.svg import esc

REPORT_DIR, REPORT_FILE = "report", "index.html"
NOT_RUN, CANNOT_RUN = "not run yet", "cannot run"

_BENCH_STYLE = """
.smoke{background:#fff4d6;border:2px solid #e6a700;border-radius:6px;padding:10px 14px;margin:12px 0;font-size:15px}
.side{display:flex;flex-wrap:wrap;gap:28px;align-items:flex-start} .side>div{flex:0 1 auto;max-width:100%;overflow-x:auto}
.side .caption{max-width:600px}
table.bench{border-collapse:collapse;font-size:13px;margin:6px 0}
table.bench th,table.bench td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
table.bench th{background:#f4f4f4} table.bench td:first-child,table.bench th:first-child{text-align:left}
.caption{color:#555;font-size:13px;margin:2px 0 6px}
.status{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;color:#fff;background:#888}
.status.done{background:#2e7d32} .status.failed,.status.blocked{background:#c62828} .status.cannot{background:#6d4c41}
pre.cmd{background:#f7f7f7;border:1px solid #e3e3e3;padding:6px 8px;white-space:pre-wrap;word-break:break-all;
  font-size:12px;user-select:all} pre.error{background:#fdecea;padding:6px 8px;white-space:pre-wrap;font-size:12px}
.cell{border-top:1px solid #eee;padding:6px 0} .bar{display:inline-block;height:8px;background:#1f77b4;
  vertical-align:middle;margin-left:6px} .bar.over{background:#d62728}
"""


def _status(cell: Cell, record: CellRecord | None) -> str:
    if record is not None:
        return record.status
    return CANNOT_RUN if cell.blocker else NOT_RUN


def _badge(status: str) -> str:
    kind = {DONE: "done", FAILED: "failed", BLOCKED: "blocked", CANNOT_RUN: "cannot"}.get(status, "")
    return f'<span class="status {kind}">{esc(status)}</span>'


def _published(table: PublishedTable) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in ("", *table.columns))
    rows = "".join(
        "<tr><td>" + esc(row.label) + "</td>"
        + "".join(f"<td>{'–' if v is None else f'{v:.{d}f}'}</td>" for v, d in zip(row.values, table.digits))
        + "</tr>"
        for row in table.rows)
    return f'<table class="bench published"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _entry(estimate: Estimate | None, digits: int) -> str:
    """One of our values; its per-seed values in the tooltip, and a * while some of its cells are unfinished."""
    if estimate is None:
        return '<td title="no finished cell yet">–</td>'
    notes = []
    if len(estimate.samples) > 1:
        notes.append("per seed: " + ", ".join(f"{s:.{digits}f}" for s in estimate.samples))
    text = f"{estimate.value:.{digits}f}"
    if estimate.missing:
        notes.append(f"{estimate.missing} of its cells have not finished")
        text += "*"
    title = f' title="{esc("; ".join(notes))}"' if notes else ""
    return f"<td{title}>{text}</td>"


def _ours(table: OurTable, values: Mapping[str, Mapping[str, float]]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in ("", *table.columns))
    estimates = [[None if q is None else q.estimate(values) for q in row.values] for row in table.rows]
    rows = "".join(
        "<tr><td>" + esc(row.label) + "</td>" + "".join(_entry(e, table.digits) for e in entries) + "</tr>"
        for row, entries in zip(table.rows, estimates))
    partial = any(e is not None and e.missing for entries in estimates for e in entries)
    note = '<p class="caption">* some of the cells behind this value have not finished.</p>' if partial else ""
    return f'<table class="bench ours"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{note}'


def _table_section(entry: BenchTable, plan: Plan, records: Mapping[str, CellRecord],
                   values: Mapping[str, Mapping[str, float]]) -> str:
    published = entry.published
    cells = ", ".join(f'<a href="#cell-{esc(name)}">{esc(name)}</a> {_badge(_status(plan.cell(name), records.get(name)))}'
                      for name in entry.ours.cells())
    scale = "smoke scale: not comparable" if plan.scale.smoke else f"{plan.scale.name} scale"
    return f"""
<section id="{esc(entry.anchor)}">
  <h2>{esc(published.paper)} · {esc(published.table)}</h2>
  <div class="side">
    <div><h3>Published</h3><p class="caption">{esc(published.caption)}</p>{_published(published)}</div>
    <div><h3>Ours ({esc(scale)}; {esc(entry.ours.unit)})</h3><p class="caption">{esc(entry.mapping)}</p>
      {_ours(entry.ours, values)}
    </div>
  </div>
  <p>Cells: {cells}</p>
</section>"""


def _link(label: str, target: Path, base: Path) -> str:
    return f'<a href="{esc(Path(os.path.relpath(target, base)).as_posix())}">{esc(label)}</a>'


def _cell_block(cell: Cell, record: CellRecord | None, base: Path) -> str:
    status = _status(cell, record)
    facts = [esc(cell.paper), f"budget {duration(cell.budget_s)}"]
    if record is not None and record.wall_s:
        share = record.wall_s / max(cell.budget_s, 1)
        bar = f'<span class="bar{" over" if share > 1 else ""}" style="width:{min(share, 3) * 60:.0f}px"></span>'
        facts.append(f"took {duration(record.wall_s)}{bar}")
    if cell.needs:
        facts.append("needs " + ", ".join(f'<a href="#cell-{esc(n)}">{esc(n)}</a>' for n in cell.needs))
    links = [_link(label, path, base) for label, path in cell.outputs() if path.exists()]
    if cell.log_path.exists():
        links.append(_link("log", cell.log_path, base))
    commands = "\n".join(cell.commands())
    extra = ""
    if cell.blocker and record is None:
        extra = f'<p class="caption">{esc(cell.blocker)}</p>'
    elif record is not None and record.error:
        extra = f'<pre class="error">{esc(record.error)}</pre>'
    if record is not None and record.executed and record.executed != cell.commands():
        extra += ('<details><summary>what the last bench ran (resumes included)</summary>'
                  f'<pre class="cmd">{esc(chr(10).join(record.executed))}</pre></details>')
    return f"""
<div class="cell" id="cell-{esc(cell.name)}">
  <h3>{esc(cell.name)} {_badge(status)}</h3>
  <p class="caption">{esc(cell.title)} · {" · ".join(facts)}{" · " + " · ".join(links) if links else ""}</p>
  <pre class="cmd">{esc(commands)}</pre>{extra}
</div>"""


def render_page(plan: Plan, records: Mapping[str, CellRecord], generated: datetime | None = None) -> str:
    """The whole page for the plan and the records its cells have so far."""
    generated = generated or datetime.now(timezone.utc)
    base = plan.out / REPORT_DIR
    values = {name: record.values for name, record in records.items() if record.status == DONE}
    counts: dict[str, int] = {}
    for cell in plan.cells:
        status = _status(cell, records.get(cell.name))
        counts[status] = counts.get(status, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    used = sum(r.wall_s for r in records.values())
    budget = sum(c.budget_s for c in plan.cells if not c.blocker)
    environment = plan.target.env or "each paper's own (see the tables)"
    smoke = ""
    if plan.scale.smoke:
        smoke = ('<div class="smoke"><strong>Smoke scale (hindsight bench --quick).</strong> Every method runs end to '
                 "end on a handful of tasks, one seed and a few updates, to show that each cell works. The "
                 "numbers below say nothing about the methods and are not comparable to the papers'; "
                 "<code>hindsight bench</code> without --quick runs the full scale.</div>")
    toc = "".join(f'<li><a href="#{esc(t.anchor)}">{esc(t.published.paper)} · {esc(t.published.table)}</a></li>'
                  for t in plan.tables)
    sections = "".join(_table_section(t, plan, records, values) for t in plan.tables)
    cells = "".join(_cell_block(cell, records.get(cell.name), base) for cell in plan.cells)
    body = f"""<h1>Hindsight bench: the papers' tables beside ours ({esc(plan.scale.name)} scale)</h1>
{smoke}
<p class="meta">Model <code>{esc(plan.target.model)}</code> · environment: {esc(environment)} ·
{len(plan.cells)} cells: {esc(tally)} · {duration(used)} of core time used so far, against a budget of
{duration(budget)} · generated {esc(generated.strftime("%Y-%m-%d %H:%M UTC"))}.
Run again with the same command to finish or retry what is not done; finished cells are kept.</p>
<ul>{toc}<li><a href="#cells">every cell and its commands</a></li></ul>
{sections}
<section id="cells">
  <h2>Cells</h2>
  <p class="caption">Each cell's commands, as the bench ran them (an interrupted step continues with
  <code>--resume</code>); its folder under <code>cells/</code> holds the run directories, the log and
  <code>cell.json</code> with the numbers read.</p>
  {cells}
</section>"""
    return html_document(f"Hindsight bench ({plan.scale.name})", body, style=_BENCH_STYLE)


def write_page(plan: Plan, records: Mapping[str, CellRecord]) -> Path:
    target = plan.out / REPORT_DIR / REPORT_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".html.tmp")
    tmp.write_text(render_page(plan, records), encoding="utf-8")
    tmp.replace(target)
    return target

