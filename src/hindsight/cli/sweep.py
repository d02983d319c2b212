"""`hindsight sweep memory`: one evaluation per history window, then AUV against the window.

    hindsight sweep memory --env frozenlake --model smollm2 --windows none,1,2,4,full \\
        --episodes 20 --out runs/sweep-fl

writes ``OUT/memory-<window>/`` run directories (via `hindsight.agent.evaluate.run_eval`),
prints SR / AUV / Loop Ratio per window and the Memory Index (AUV full - AUV none, when
both ends are swept), saves the table as ``OUT/sweep.json`` and a report as
``OUT/report/index.html``. A window whose run directory already holds a finished run of
the same settings is reused, so an interrupted sweep can be restarted with the same
command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser("sweep", help="run a family of evaluations (memory-window sweep)",
                                   description="Run a family of evaluations and compare them.")
    kinds = parser.add_subparsers(dest="sweep_kind", metavar="KIND", required=True)
    memory = kinds.add_parser("memory", help="evaluate one model at several history windows",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    memory.add_argument("--env", required=True, help="environment id")
    memory.add_argument("--model", required=True,
                        help="model spec (smollm2, hf:PATH, openai:NAME, oracle, random, ...)")
    memory.add_argument("--windows", default="none,1,2,4,full",
                        help="comma-separated history windows: none, full, or numbers of turns "
                             "(default none,1,2,4,full)")
    memory.add_argument("--episodes", type=int, default=10, help="task instances per window (default 10)")
    memory.add_argument("--out", required=True, metavar="DIR", help="sweep folder; one run directory per window")
    memory.add_argument("--split", default="test", choices=("train", "validation", "test"))
    memory.add_argument("--seed", type=int, default=0, help="sampling seed (the same for every window)")
    memory.add_argument("--set", dest="env_kwargs", action="append", metavar="KEY=VALUE",
                        help="environment option, repeatable")
    memory.add_argument("--max-steps", type=int, help="override the environment's step budget")
    memory.add_argument("--concurrency", type=int, default=32, help="episodes run at once (batch size)")
    memory.add_argument("--temperature", type=float, default=0.7)
    memory.add_argument("--max-new-tokens", type=int, default=96)
    memory.add_argument("--t-max", type=int, default=None, metavar="N", help="AUV horizon (default: per environment)")
    memory.add_argument("--no-report", action="store_true", help="do not write OUT/report/index.html")
    add_threads_option(memory)
    memory.set_defaults(run=run_memory)


def parse_windows(text: str) -> list[str]:
    """'none,1,2,full' -> ['none', '1', '2', 'full']; 0 means none; duplicates dropped."""
    windows: list[str] = []
    for part in text.split(","):
        item = part.strip().lower()
        if not item:
            continue
        if item not in ("none", "full"):
            if not item.isdigit():
                raise CLIError(f"--windows: {part.strip()!r} is not none, full or a number of turns")
            item = "none" if int(item) == 0 else str(int(item))
        if item not in windows:
            windows.append(item)
    if not windows:
        raise CLIError("--windows names no window")
    return windows


def _finished_run(run_dir: Path, expected: dict[str, Any]) -> bool:
    """Does `run_dir` hold a completed evaluation with these settings?"""
    import yaml

    summary, config = run_dir / "summary.json", run_dir / "config.yaml"
    if not summary.is_file() or not config.is_file():
        return False
    try:
        done = json.loads(summary.read_text(encoding="utf-8"))
        settings = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (ValueError, yaml.YAMLError, OSError):
        return False
    if done.get("interrupted"):
        return False
    return all(str(settings.get(key)) == str(value) for key, value in expected.items())


def run_memory(args: argparse.Namespace) -> int:
    from hindsight.configs import parse_overrides

    try:
        from hindsight.agent.evaluate import EvalConfig, run_eval
    except ImportError as exc:  # pragma: no cover - the evaluation layer ships with the package
        raise CLIError(f"evaluation is not available: {exc}") from None
    from hindsight.envs import EnvError
    from hindsight.llm import ModelError

    windows = parse_windows(args.windows)
    out = Path(args.out)
    try:
        env_kwargs = parse_overrides(args.env_kwargs)
        configs = {
            w: EvalConfig(env=args.env, model=args.model, episodes=args.episodes, env_kwargs=env_kwargs,
                          split=args.split, memory=w, seed=args.seed, out=str(out / f"memory-{w}"),
                          concurrency=args.concurrency, temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens, max_steps=args.max_steps)
            for w in windows
        }
    except ValueError as exc:
        raise CLIError(str(exc)) from None

    run_dirs: dict[str, Path] = {}
    for w, config in configs.items():
        target = Path(config.out)  # type: ignore[arg-type]
        expected = {"env": config.env, "model": config.model, "episodes": config.episodes, "memory": w,
                    "split": config.split, "seed": config.seed}
        if _finished_run(target, expected):
            print(f"memory={w}: reusing finished run {target}", file=sys.stderr)
            run_dirs[w] = target
            continue
        if target.exists() and any(target.iterdir()):
            raise CLIError(f"{target} exists but is not a finished run of these settings; "
                           "remove it or pick another --out")
        print(f"memory={w}: evaluating {config.episodes} episodes of {config.env} with {config.model}", file=sys.stderr)
        try:
            run_dirs[w] = run_eval(config)
        except (EnvError, ModelError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    return _summarise(args, windows, run_dirs, out)


def _summarise(args: argparse.Namespace, windows: list[str], run_dirs: dict[str, Path], out: Path) -> int:
    from hindsight.diagnostics import DiagnoseOptions, diagnose_source, discover_runs, memory_groups
    from hindsight.diagnostics.memory import window_size

    options = DiagnoseOptions(t_max=args.t_max)
    diagnosed = []
    rows = []
    for w in sorted(windows, key=lambda m: window_size(m) or 0.0):
        (source,) = discover_runs([run_dirs[w]])
        result = diagnose_source(source, options, keep=20)
        diagnosed.append(result)
        if not result.runs:
            print(f"memory={w}: {run_dirs[w]} has no readable trajectories", file=sys.stderr)
            continue
        run = result.runs[0]
        rows.append({"memory": w, "run": str(run_dirs[w]), "n_trajectories": run.n_trajectories,
                     "success_rate": run.success_rate, "auv": run.auv, "loop_ratio": run.loops.ratio,
                     "t_max": run.t_max})
    runs = [r for d in diagnosed for r in d.runs]
    groups = memory_groups(runs)
    mi = groups[0].memory_index if groups else None

    print(f"{'memory':>8}  {'n':>4}  {'SR':>6}  {'AUV':>6}  {'LR':>6}  run")
    for row in rows:
        lr = row["loop_ratio"]
        print(f"{row['memory']:>8}  {row['n_trajectories']:>4}  {row['success_rate']:6.3f}  {row['auv']:6.3f}  "
              f"{'n/a' if lr is None else f'{lr:.3f}':>6}  {row['run']}")
    if mi is not None:
        print(f"memory index (AUV full - AUV none): {mi:+.3f}")
    summary = {"env": args.env, "model": args.model, "episodes": args.episodes, "windows": rows, "memory_index": mi}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    if not args.no_report and runs:
        from hindsight.report import write_report

        target = write_report(diagnosed, out / "report", title=f"Memory sweep: {args.model} on {args.env}",
                              inputs=[str(run_dirs[w]) for w in windows])
        print(f"report: {target}")
    return 0 if len(rows) == len(windows) else 1


__all__ = ["parse_windows", "register", "run_memory"]
