"""`hindsight diagnose PATH...`: TIDE numbers for run directories and trajectory logs.

Exit codes: 0 when every run had at least one readable trajectory (corrupt lines are
reported as file:line on stderr and skipped); 1 when some run had none (an empty run, or
nothing in it could be read); 2 for a usage mistake such as a path that does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Collection, TextIO

from hindsight.cli.main import CLIError

#: Exit code when a run has no readable trajectory.
NOTHING_READABLE = 1
#: Individual skipped lines printed per run before only a count is given.
MAX_ISSUES_SHOWN = 10

_CATEGORY_NAMES = {
    "looping": "looping",
    "redundant_exploration": "redundant exploration",
    "wrong_object_focus": "wrong-object focus",
    "query_looping": "query looping",
    "navigation_cycling": "navigation cycling",
    "premature_purchase": "premature purchase",
}


def add_diagnosis_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by `diagnose` and `report`."""
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directory, trajectory file (.jsonl/.jsonl.gz), or a folder of runs")
    parser.add_argument("--t-max", type=int, default=None, metavar="N",
                        help="AUV horizon (default: TIDE's per-environment value, else the run's max_steps)")
    parser.add_argument("--env", default="", metavar="ID",
                        help="environment of logs that do not name one (TIDE result files)")
    parser.add_argument("--loop-variant", choices=("official", "paper"), default="official",
                        help="loop finder: the official TIDE code (default) or Algorithm 1 as printed")
    parser.add_argument("--state", choices=("exact", "text", "embedding"), default="exact",
                        help="state equality for loops: state_key/observation exact (default), "
                             "normalised text, or logged embeddings by cosine")
    parser.add_argument("--cosine", type=float, default=0.999, metavar="X",
                        help="cosine threshold for --state embedding (default 0.999)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="TIDE diagnostics (SR, AUV, Loop Ratio, errors) of runs and logs",
        description="Print TIDE diagnostics for each run: success rate, AUV, Loop Ratio, invalid-action rate, "
                    "error-taxonomy shares, entropy at loop steps, memory recall distance and Memory Index.",
    )
    add_diagnosis_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per run on stdout")
    parser.set_defaults(run=run)


def options_from_args(args: argparse.Namespace):
    from hindsight.diagnostics import DiagnoseOptions, make_equality

    if args.t_max is not None and args.t_max < 1:
        raise CLIError("--t-max must be at least 1")
    if not -1.0 <= args.cosine <= 1.0:
        raise CLIError("--cosine must be in [-1, 1]")
    return DiagnoseOptions(t_max=args.t_max, loop_variant=args.loop_variant,
                           equality=make_equality(args.state, args.cosine))


def diagnose_paths(args: argparse.Namespace, keep: int = 0, err: TextIO | None = None,
                   covered: Collection[Path] = ()):
    """Discover and diagnose the runs named on the command line.

    Returns (diagnosed sources, number of runs with nothing readable). Problems are
    written to `err` as they are found. A source whose path is in `covered` (a training run
    the report draws from its metrics) is not counted or named when it has no trajectory.
    """
    from hindsight.diagnostics import diagnose_source, discover_runs

    err = err or sys.stderr
    options = options_from_args(args)
    try:
        sources = discover_runs(args.paths)
    except FileNotFoundError as exc:
        raise CLIError(str(exc)) from None
    diagnosed = []
    empty = 0
    for source in sources:
        shown = 0

        def show(issue, _source=source):
            nonlocal shown
            shown += 1
            if shown <= MAX_ISSUES_SHOWN:
                print(f"hindsight: skipped {issue}", file=err)

        try:
            result = diagnose_source(source, options, env=args.env, keep=keep, on_issue=show)
        except ValueError as exc:  # e.g. embedding equality without embeddings in the log
            raise CLIError(f"{source.path}: {exc}") from None
        if shown > MAX_ISSUES_SHOWN:
            print(f"hindsight: skipped {shown - MAX_ISSUES_SHOWN} more lines of {source.path}", file=err)
        if not result.runs:
            if source.path in covered:
                continue
            empty += 1
            why = "no trajectory files" if not source.files else "no readable trajectories"
            print(f"hindsight: {source.path}: {why} (empty run); nothing to diagnose", file=err)
            continue
        diagnosed.append(result)
    return diagnosed, empty


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _taxonomy_line(run) -> str:
    failed = run.n_failed
    if failed == 0:
        return "no failed trajectories"
    parts = []
    for share in run.taxonomy:
        name = _CATEGORY_NAMES.get(share.category, share.category)
        parts.append(f"{name} {_fmt(share.share, 2) if share.applicable else 'n/a'}")
    return f"among {failed} failed: " + ", ".join(parts)


_ENDING_NAMES = {"env": "by the environment", "budget": "at the step budget", "other": "otherwise"}


def _endings_line(run) -> str:
    shares = run.failure_ending_shares()
    if not shares:
        return "n/a (no failed trajectory, or the log does not say)"
    parts = [f"{_ENDING_NAMES[e]} {share:.2f}" for e, share in shares.items()]
    return ", ".join(parts) + f"  (of {sum(n for _, n in run.failure_endings)} failed)"


def format_run(run, memory_index: float | None) -> str:
    lines = [f"== {run.label}  ({run.path})"]
    rows: list[tuple[str, str]] = [
        ("env", run.env or "unknown"),
        ("model", run.model or "unknown"),
        ("memory", run.memory or "unknown"),
        ("format", ", ".join(run.formats) or "unknown"),
        ("n_trajectories", f"{run.n_trajectories}  ({run.n_steps} steps)"),
        ("success_rate", _fmt(run.success_rate)),
        ("auv", f"{_fmt(run.auv)}  (t_max={run.t_max}: {run.t_max_source}; P_t_max={_fmt(run.p_curve[-1])})"),
        ("auv_by_loops", _loop_split_line(run)),
        ("loop_ratio", f"{_fmt(run.loop_ratio)}  (pooled over steps; per-trajectory mean "
                       f"{_fmt(run.loops.per_trajectory_mean)}; {run.loops.variant} finder)"),
        ("invalid_rate", _fmt(run.invalid_rate)),
        ("errors", _taxonomy_line(run)),
        ("failures_ended", _endings_line(run)),
    ]
    if run.progress is not None:
        kind = "graded scores" if run.progress.graded else "binary scores: the success curve again"
        rows.insert(8, ("progress_auv", f"{_fmt(run.progress.auv)}  ({kind}; R_t_max={_fmt(run.progress.p_curve[-1])})"))
    if run.entropy_steps:
        rows.append(("action_entropy", f"loop steps {_fmt(run.entropy_loop)}, other steps {_fmt(run.entropy_other)}"
                                       f"  (next-token entropy over the action tokens; {run.entropy_steps} steps)"))
    else:
        rows.append(("action_entropy", "n/a (no action-token entropies logged)"))
    if run.surprisal_steps:
        rows.append(("surprisal", f"loop steps {_fmt(run.surprisal_loop)}, other steps {_fmt(run.surprisal_other)}"
                                  f"  (mean -log p of the whole response; {run.surprisal_steps} steps)"))
    if run.recall_distance is not None:
        rows.append(("recall_distance", f"{_fmt(run.recall_distance, 2)}  ({run.recall_pairs} recalls)"))
        rows.append(("recall_by_outcome", _recall_line(run)))
    else:
        rows.append(("recall_distance", f"skipped: {run.recall_note}"))
    if memory_index is not None:
        rows.append(("memory_index", f"{memory_index:+.3f}  (AUV full - AUV none, same env and model)"))
    if run.skipped_lines:
        rows.append(("skipped_lines", str(run.skipped_lines)))
    width = max(len(name) for name, _ in rows)
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines)


def _loop_split_line(run) -> str:
    split = run.loop_split
    return (f"with loops {_fmt(split.with_loops.auv)} (n={split.with_loops.n}, SR {_fmt(split.with_loops.success_rate)}),"
            f" without loops {_fmt(split.without_loops.auv)} (n={split.without_loops.n}, "
            f"SR {_fmt(split.without_loops.success_rate)})")


def _recall_part(name: str, dist) -> str:
    if not dist.n:
        return f"{name} none"
    return (f"{name} median {_fmt(dist.median, 1)} (p25 {_fmt(dist.p25, 1)}, p75 {_fmt(dist.p75, 1)}, "
            f"p90 {_fmt(dist.p90, 1)}, max {dist.max}; {dist.n} recalls in {dist.n_trajectories} trajectories)")


def _recall_line(run) -> str:
    by = run.recall_by_outcome
    return _recall_part("success", by.success) + "; " + _recall_part("failure", by.failure)


def format_comparison(runs) -> str:
    header = ("run", "env", "model", "mem", "n", "SR", "AUV", "AUV+loop", "AUV-loop", "progAUV", "LR", "invalid")
    table = [header] + [
        (r.label, r.env, r.model, r.memory, str(r.n_trajectories), _fmt(r.success_rate), _fmt(r.auv),
         _fmt(r.loop_split.with_loops.auv), _fmt(r.loop_split.without_loops.auv),
         _fmt(r.progress.auv if r.progress else None), _fmt(r.loop_ratio), _fmt(r.invalid_rate))
        for r in runs
    ]
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


def run(args: argparse.Namespace) -> int:
    from hindsight.diagnostics import memory_groups, memory_index_by_label

    diagnosed, empty = diagnose_paths(args)
    runs = [r for d in diagnosed for r in d.runs]
    settings = {r.label: d.source.env_kwargs for d in diagnosed for r in d.runs}
    groups = memory_groups(runs, settings)
    mi = memory_index_by_label(groups)
    out = sys.stdout
    if args.json:
        for r in runs:
            record: dict[str, Any] = r.to_json(mi.get(r.label))
            out.write(json.dumps(record, allow_nan=False) + "\n")
    else:
        for k, r in enumerate(runs):
            if k:
                out.write("\n")
            out.write(format_run(r, mi.get(r.label)) + "\n")
        if len(runs) > 1:
            out.write("\n" + format_comparison(runs) + "\n")
        for group in groups:
            curve = ", ".join(f"{p.memory}={p.auv:.3f}" for p in group.points)
            mi_text = f"; memory index {group.memory_index:+.3f}" if group.memory_index is not None else ""
            out.write(f"\nmemory windows ({group.env}, {group.model}): AUV {curve}{mi_text}\n")
    return NOTHING_READABLE if empty else 0
