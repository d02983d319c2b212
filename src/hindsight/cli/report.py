"""`hindsight report PATH... -o DIR`: a self-contained static HTML report of runs.

Exit codes as for `hindsight diagnose`: 1 when some run had no readable trajectory
(the report is still written for the others), 2 for usage mistakes.
"""

from __future__ import annotations

import argparse
import sys

from hindsight.cli.diagnose import NOTHING_READABLE, add_diagnosis_arguments, diagnose_paths
from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a static HTML report (charts + trajectory viewer) of runs",
        description="Diagnose the given runs and write DIR/index.html: summary table, P_t curves, radar chart, "
                    "LR-vs-AUV scatter, memory-window curves, and a trajectory viewer with loop steps highlighted.",
    )
    add_diagnosis_arguments(parser)
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (created if missing)")
    parser.add_argument("--keep", type=int, default=40, metavar="N",
                        help="trajectories per run kept for the viewer (default 40)")
    parser.add_argument("--title", default="Hindsight report", help="page title")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.report import write_report

    if args.keep < 0:
        raise CLIError("--keep must be >= 0")
    diagnosed, empty = diagnose_paths(args, keep=args.keep)
    if not diagnosed:
        print("hindsight: no run could be diagnosed; no report written", file=sys.stderr)
        return NOTHING_READABLE
    target = write_report(diagnosed, args.out, title=args.title, inputs=[str(p) for p in args.paths])
    print(target)
    return NOTHING_READABLE if empty else 0
