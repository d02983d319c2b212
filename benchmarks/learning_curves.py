"""Learning curves and phase timings of training runs, as Markdown tables, from metrics.jsonl.

For each run: training-rollout success and validation success against cumulative
environment steps, the final test success, and per-update phase timings (medians; update
timings over the updates that trained).
With several runs, a last table groups them into arms (the run name without its
`-sN` seed suffix) and gives each arm's final test success and score per seed, their
mean and spread, environment steps and wall time.

With `--metric NAME...` (one or more names after one flag), one table instead: each named metric per update, a column
per run, so that runs that share their first updates (a fork, a control at the same seed) are
read side by side from the update where they part. A run is a live run folder or a kept one
under results/ (its `metrics.jsonl.gz`).

    python benchmarks/learning_curves.py runs/grpo-frozenlake3-s0 runs/grpo-frozenlake3-s1
    python benchmarks/learning_curves.py results/selfguide-informed/grpo-sg-gr-s0 runs/selfguide-informed/grpo-sg-s0 \
        --metric selfguide/lambda selfguide/positive_rate selfguide/negative_rate
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from tables import metric_rows, quiet_closed_pipe

TIMINGS = ("timing/rollout_s", "timing/policy_rollout_s", "timing/critic_rollout_s", "timing/refine_s",
           "timing/update_s", "timing/forward_backward_s", "throughput/update_tokens_per_s")


def read_rows(run: Path) -> list[dict]:
    """The run's metric rows, live or kept; a broken line is named on stderr and skipped."""
    rows = metric_rows(run)
    if not rows:
        sys.exit(f"{run}: no metrics.jsonl or metrics.jsonl.gz with a row in it")
    return rows


def print_side_by_side(runs: list[Path], names: list[str]) -> None:
    """Each metric per update, a column per (run, metric); "–" where a run's update lacks it.

    The final test row, logged at the last update's step, is left out: it holds no training metric.
    """
    by_run = {run: {row["step"]: row for row in read_rows(run) if "step" in row and "final_test/success_rate" not in row}
              for run in runs}
    labels = [run.name for run in runs]
    if len(set(labels)) < len(labels):  # two kept copies of one run name: tell them apart by folder
        labels = [str(run) for run in runs]
    print("| update | " + " | ".join(f"{label}: {name}" for name in names for label in labels) + " |")
    print("|---|" + "---|" * (len(names) * len(runs)))
    for step in sorted({step for rows in by_run.values() for step in rows}):
        cells = [fmt(by_run[run].get(step, {}).get(name)) for name in names for run in runs]
        print(f"| {step} | " + " | ".join(cells) + " |")


@dataclass
class Final:
    success: float
    score: float
    env_steps: int
    wall_min: float


def final_of(run: Path, rows: list[dict]) -> Final | None:
    """The final test evaluation, the run's environment steps and its wall time (config written → last row)."""
    last = next((row for row in reversed(rows) if "final_test/success_rate" in row), None)
    if last is None:
        return None
    env_steps = max((row.get("rollout/env_steps", 0) for row in rows), default=0)
    started = (run / "config.yaml").stat().st_mtime
    return Final(last["final_test/success_rate"], last["final_test/score_mean"], env_steps,
                 (last["time"] - started) / 60)


def arm_of(run: Path) -> str:
    return re.sub(r"-s\d+$", "", run.name)


def print_arms(finals: dict[Path, Final]) -> None:
    arms: dict[str, list[Final]] = {}
    for run, final in finals.items():
        arms.setdefault(arm_of(run), []).append(final)
    print("\n| arm | seeds | test success per seed | mean | spread | test score mean | env steps (mean) "
          "| wall min (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for arm, results in arms.items():
        success = [r.success for r in results]
        print(f"| {arm} | {len(results)} | {', '.join(f'{v:.2f}' for v in success)} | "
              f"{statistics.mean(success):.3f} | {max(success) - min(success):.3f} | "
              f"{statistics.mean(r.score for r in results):.3f} | "
              f"{statistics.mean(r.env_steps for r in results):.0f} | "
              f"{statistics.mean(r.wall_min for r in results):.1f} |")


ECHO_SIGNALS = ("rollout/initial_score_mean", "rollout/refined_score_mean", "echo/improvement_rate",
                "echo/regression_rate", "critic/reward_mean", "critic/malformed_rate", "critic/none_rate",
                "critic/template_match_rate", "critic/critique_tokens_mean")


def print_echo_signals(rows: list[dict]) -> None:
    """Per update: does refinement help (s_o → s_r), and what the critic earns and writes."""
    print("\n| update | " + " | ".join(key.split("/", 1)[1] for key in ECHO_SIGNALS) + " |")
    print("|---|" + "---|" * len(ECHO_SIGNALS))
    for row in rows:
        if "echo/improvement_rate" in row:
            print(f"| {row['step']} | " + " | ".join(fmt(row.get(key)) for key in ECHO_SIGNALS) + " |")
    print()


def fmt(value) -> str:
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metric", nargs="+", default=[], metavar="NAME",
                        help="instead of the curves, these metrics per update, a column per run")
    args = parser.parse_args()
    if args.metric:
        print_side_by_side(args.runs, args.metric)
        return
    finals: dict[Path, Final] = {}
    for run in args.runs:
        rows = read_rows(run)
        print(f"\n### {run.name}\n")
        print("| update | env steps | train-rollout success | validation success |")
        print("|---|---|---|---|")
        for row in rows:
            if "final_test/success_rate" in row:
                continue
            train = row.get("rollout/success_rate", row.get("rollout/refined_success_rate"))
            print(f"| {row['step']} | {row.get('rollout/env_steps', '')} | {fmt(train)} | "
                  f"{fmt(row.get('eval/success_rate'))} |")
        if any("echo/improvement_rate" in row for row in rows):
            print_echo_signals(rows)
        final = final_of(run, rows)
        if final is not None:
            finals[run] = final
        print(f"\nfinal test success: {fmt(final and final.success)}\n")
        print("| phase | median per update |")
        print("|---|---|")
        for key in TIMINGS:
            # An update in which every group had equal returns trains nothing and takes no
            # time; update timings are medians over the updates that did train.
            trained_only = key.startswith(("timing/update", "timing/forward", "throughput/"))
            values = [row[key] for row in rows if key in row and (not trained_only or "policy/tokens" in row)]
            if values:
                print(f"| {key} | {statistics.median(values):.1f} |")
    if len(finals) > 1:
        print_arms(finals)


if __name__ == "__main__":
    quiet_closed_pipe()  # here, not in main(): the tests call main() in a process that must keep SIGPIPE as Python sets it
    main()
