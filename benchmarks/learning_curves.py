"""Learning curves and phase timings of training runs, as Markdown tables, from metrics.jsonl.

For each run: training-rollout success and validation success against cumulative
environment steps, the final test success, and per-update phase timings (medians).
With several runs (seeds), a last table gives the spread of the final test success.

    python benchmarks/learning_curves.py runs/grpo-frozenlake3-s0 runs/grpo-frozenlake3-s1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TIMINGS = ("timing/rollout_s", "timing/policy_rollout_s", "timing/critic_rollout_s", "timing/refine_s",
           "timing/update_s", "timing/forward_backward_s", "throughput/update_tokens_per_s")


def read_rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        sys.exit(f"{run}: no metrics.jsonl")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"{path}:{number}: skipped an unreadable line", file=sys.stderr)
    return rows


def fmt(value) -> str:
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    finals = {}
    for run in args.runs:
        rows = read_rows(run)
        print(f"\n### {run.name}\n")
        print("| update | env steps | train-rollout success | validation success |")
        print("|---|---|---|---|")
        for row in rows:
            if "final_test/success_rate" in row:
                finals[run.name] = row["final_test/success_rate"]
                continue
            train = row.get("rollout/success_rate", row.get("rollout/refined_success_rate"))
            print(f"| {row['step']} | {row.get('rollout/env_steps', '')} | {fmt(train)} | "
                  f"{fmt(row.get('eval/success_rate'))} |")
        print(f"\nfinal test success: {fmt(finals.get(run.name))}\n")
        print("| phase | median per update |")
        print("|---|---|")
        for key in TIMINGS:
            values = [row[key] for row in rows if key in row]
            if values:
                print(f"| {key} | {statistics.median(values):.1f} |")
    if len(finals) > 1:
        values = list(finals.values())
        print(f"\nfinal test success over {len(values)} runs: mean {statistics.mean(values):.3f}, "
              f"min {min(values):.3f}, max {max(values):.3f}, spread (max − min) {max(values) - min(values):.3f}")


if __name__ == "__main__":
    main()
