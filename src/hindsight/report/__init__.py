"""Static HTML reports over diagnosed runs and training runs (`hindsight report`).

`write_report` renders diagnosed runs, and the learning curves of training runs
(`read_training_logs`), into ``OUT/index.html``: one self-contained file with inline SVG
charts and small scripts, readable offline and safe to share.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from hindsight.diagnostics.memory import memory_groups, memory_index_by_label
from hindsight.diagnostics.runs import DiagnosedRun
from hindsight.report.html import ReportRun, render_report
from hindsight.report.training import TrainingLog, read_training_logs

REPORT_FILE = "index.html"


def report_runs(diagnosed: Sequence[DiagnosedRun]) -> tuple[list[ReportRun], list]:
    """Pair every run with its kept trajectories and Memory Index; also return memory groups."""
    runs = [r for d in diagnosed for r in d.runs]
    settings = {r.label: d.source.env_kwargs for d in diagnosed for r in d.runs}
    groups = memory_groups(runs, settings)
    mi = memory_index_by_label(groups)
    entries = [
        ReportRun(run=r, kept=tuple(d.kept.get(r.label, ())), memory_index=mi.get(r.label))
        for d in diagnosed
        for r in d.runs
    ]
    return entries, groups


def write_report(diagnosed: Sequence[DiagnosedRun], out_dir: str | os.PathLike[str], *, title: str = "Hindsight report",
                 inputs: Sequence[str] = (), training: Sequence[TrainingLog] = (), overlay: str = "config") -> Path:
    """Write OUT/index.html for the diagnosed runs and the training runs, and return its path."""
    entries, groups = report_runs(diagnosed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / REPORT_FILE
    tmp = target.with_suffix(".html.tmp")
    page = render_report(entries, groups, title=title, inputs=inputs, training=training, overlay=overlay)
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, target)
    return target


__all__ = ["REPORT_FILE", "ReportRun", "TrainingLog", "read_training_logs", "render_report", "report_runs",
           "write_report"]
