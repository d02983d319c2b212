"""`hindsight bench [--quick] --out DIR`: the papers' tables at small scale, beside the published ones.

Runs the small-scale versions of ECHO's Tables 1/2, 5 and 7, Self-Guide's Table 1 and schedule
ablation, CSO's Tables 1, 3 and 4 and TIDE's Tables 1 and 2 as cells: each a few existing
`hindsight` commands (train, eval, echo-compare, diagnose, report) with its folder under
DIR/cells/. DIR/report/index.html shows every paper table beside ours, with the commands of
every cell. Run the same command again to continue: finished cells are skipped, interrupted
runs resume from their last checkpoint, failed cells are retried.

    hindsight bench --quick --out runs/bench-quick     # smoke scale, under 30 minutes on 2 cores (measured)
    hindsight bench --out runs/bench                    # full scale: 3 seeds, 300 test tasks (days on 2 cores)
    hindsight bench --quick --list                      # the cells, their budgets and needs
    hindsight bench --quick --out runs/b --only 'cso-*' --only tide-frozenlake
    hindsight bench --quick --out runs/b-hf --model hf:PATH --env blocksworld
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hindsight.cli.main import CLIError

if TYPE_CHECKING:
    from hindsight.bench.plan import Plan


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.bench.plan import DEFAULT_MODEL

    parser = subparsers.add_parser(
        "bench", help="the papers' tables at small scale, resumable, reported beside the published numbers",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="smoke scale: one seed and a handful of tasks and updates per cell, to check that every "
                             "method runs end to end (the numbers are not comparable to the papers')")
    parser.add_argument("--out", metavar="DIR", help="the bench's folder (required unless --list)")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"model spec every cell runs (default {DEFAULT_MODEL}, from the shipped frozenlake3 "
                             "adapter where the comparisons start from it); a model that cannot be trained (openai:, "
                             "oracle, random, scripted:) runs the evaluation cells only")
    parser.add_argument("--env", default="", metavar="ID",
                        help="play every paper's cells on this environment, with its default options (default: "
                             "each paper's FrozenLake setting from its recipe, and TIDE's five environments)")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="run only the cells whose names match (shell pattern, repeatable), with the unfinished "
                             "cells they need")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="cells run at once, each pinned to its own core with one thread (default: 2, or 1 on a "
                             "single core)")
    parser.add_argument("--list", action="store_true", help="list the cells with their budgets and needs, and exit")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.bench.cells import DONE
    from hindsight.bench.page import write_page
    from hindsight.bench.plan import FULL, QUICK, PlanError, Target, build_plan
    from hindsight.bench.runner import BenchError, SubprocessExecutor, check_settings, read_records, run_bench
    from hindsight.llm import ModelError, parse_spec

    if args.jobs < 1:
        raise CLIError("--jobs must be at least 1")
    if not (args.out or args.list):
        raise CLIError("--out DIR is required (or --list)")
    out = Path(args.out or "runs/bench")
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file, not a folder")
    try:
        parse_spec(args.model)
        plan = build_plan(QUICK if args.quick else FULL, Target(args.model, args.env), out)
    except (ModelError, PlanError) as exc:
        raise CLIError(str(exc)) from None
    names = [cell.name for cell in plan.cells]
    chosen = set(names)
    if args.only:
        chosen = set()
        for pattern in args.only:
            matched = fnmatch.filter(names, pattern)
            if not matched:
                raise CLIError(f"no cell matches {pattern!r}; `hindsight bench --list` names them")
            chosen.update(matched)
    records = read_records(plan) if out.is_dir() else {}
    chosen = plan.closure(chosen, {name for name, record in records.items() if record.status == DONE})
    if args.list:
        print_list(plan, chosen, args.jobs)
        return 0
    try:
        check_settings(plan)
    except BenchError as exc:
        raise CLIError(str(exc)) from None

    def report() -> None:
        write_page(plan, read_records(plan))

    print(f"hindsight bench: {plan.scale.name} scale, model {plan.target.model}, {len(chosen)} cells, "
          f"{args.jobs} at a time; report: {out / 'report' / 'index.html'}", flush=True)
    try:
        outcome = run_bench(plan, [n for n in names if n in chosen], SubprocessExecutor(), jobs=args.jobs,
                            say=lambda line: print(line, flush=True), after_cell=report)
    finally:
        report()  # also after an interrupt: the report shows what has finished
    print(f"done now: {len(outcome.done)}, finished before: {len(outcome.earlier)}, failed: {len(outcome.failed)}, "
          f"blocked: {len(outcome.blocked)}, cannot run here: {len(outcome.unavailable)}"
          + (", interrupted: some cells stay unfinished" if outcome.interrupted else ""))
    for name in outcome.failed:
        print(f"  failed: {name} (see {plan.cell(name).log_path})", file=sys.stderr)
    for name in outcome.blocked:
        print(f"  blocked: {name}", file=sys.stderr)
    print(f"report: {out / 'report' / 'index.html'}")
    return 0 if outcome.ok else 1


def print_list(plan: Plan, chosen: set[str], jobs: int) -> None:
    """The cells with their budgets, needs and blockers, and the total against the jobs."""
    from hindsight.bench.runner import duration

    width = max(len(cell.name) for cell in plan.cells)
    total = 0
    for cell in plan.cells:
        if cell.name not in chosen:
            continue
        note = f"cannot run: {cell.blocker}" if cell.blocker else (f"needs {', '.join(cell.needs)}" if cell.needs else "")
        print(f"{cell.name:<{width}}  {cell.paper:<10}  {duration(cell.budget_s):>7}  {note}")
        total += 0 if cell.blocker else cell.budget_s
    print(f"{plan.scale.name} scale: {duration(total)} of core time in budgets, about {duration(total / jobs)} "
          f"with {jobs} job(s) at once")
