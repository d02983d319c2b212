"""`hindsight report PATH... -o DIR`: a self-contained static HTML report of runs.

Evaluation runs get TIDE's diagnostics; training runs (a folder with `metrics.jsonl`) also get
a Training section with their learning curves. Exit codes as for `hindsight diagnose`: 1 when
some run had nothing readable, neither a trajectory nor (for a training run) a metrics log
(the report is still written for the others), 2 for usage mistakes.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence, TextIO

from hindsight.cli.diagnose import MAX_ISSUES_SHOWN, NOTHING_READABLE, add_diagnosis_arguments, diagnose_paths
from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a static HTML report (charts + trajectory viewer) of runs",
        description="Diagnose the given runs and write DIR/index.html: for training runs, learning curves (seeds "
                    "overlaid), live TIDE metrics and each method's panel; for every run with trajectories, a "
                    "summary table, P_t curves, radar chart, LR-vs-AUV scatter, memory-window curves, and a "
                    "trajectory viewer with loop steps highlighted.",
    )
    add_diagnosis_arguments(parser)
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (created if missing)")
    parser.add_argument("--keep", type=int, default=40, metavar="N",
                        help="trajectories per run kept for the viewer (default 40)")
    parser.add_argument("--title", default="Hindsight report", help="page title")
    parser.add_argument("--overlay", choices=("config", "method"), default="config",
                        help="training runs drawn as one curve: those whose configs differ only in the seed "
                             "(default), or every run of a method on an environment")
    parser.set_defaults(run=run)


def read_training(paths: Sequence[str], err: TextIO):
    """The training runs among the paths; skipped lines of their metrics logs are named on `err`.

    Lines of trajectory files are named by the diagnosis, which reads the same files.
    """
    from hindsight.report import read_training_logs
    from hindsight.logs.reader import METRICS_FILE

    shown: Counter[str] = Counter()

    def show(issue) -> None:
        if Path(issue.path).name != METRICS_FILE:
            return
        shown[issue.path] += 1
        if shown[issue.path] <= MAX_ISSUES_SHOWN:
            print(f"hindsight: skipped {issue}", file=err)

    logs = read_training_logs(paths, show)
    for path, count in shown.items():
        if count > MAX_ISSUES_SHOWN:
            print(f"hindsight: skipped {count - MAX_ISSUES_SHOWN} more lines of {path}", file=err)
    return logs


def run(args: argparse.Namespace) -> int:
    from hindsight.report import write_report

    if args.keep < 0:
        raise CLIError("--keep must be >= 0")
    training = read_training(args.paths, sys.stderr)
    # A training run without trajectories (CSO, or one that logged only metrics) is not an empty run:
    # neither is a folder of such runs.
    covered = {log.path for log in training if log.rows}
    covered |= {Path(p) for p in args.paths if any(Path(p) in (c, c.parent) for c in covered)}
    diagnosed, empty = diagnose_paths(args, keep=args.keep, covered=covered)
    if not diagnosed and not training:
        print("hindsight: no run could be diagnosed; no report written", file=sys.stderr)
        return NOTHING_READABLE
    target = write_report(diagnosed, args.out, title=args.title, inputs=[str(p) for p in args.paths],
                          training=training, overlay=args.overlay)
    print(target)
    return NOTHING_READABLE if empty else 0
