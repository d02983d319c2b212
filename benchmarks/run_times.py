"""One line per training run of a GPU script's output folder: updates done, wall time, test result.

    python benchmarks/run_times.py OUT_DIR

The device comes first, so a pasted result says what it ran on. A run is a folder with a
config.yaml whose name ends in -sN (a seed). Its wall time runs from the config written when it
started to its last metrics row (the final test included), so a run resumed over several
commands counts the pauses between them too. Used by benchmarks/echo_gpu.sh,
benchmarks/learning_gpu.sh and benchmarks/arm_budget.py.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from tables import report_skipped

from hindsight.logs import is_training_run, read_metrics


def updates_and_wall(run: Path) -> tuple[int, float]:
    """(updates done, wall seconds from the run's config being written to its last metrics row)."""
    rows = read_metrics(run, report_skipped)
    updates = max((int(r["step"]) for r in rows if any(k.startswith("rollout/") for k in r)), default=0)
    last = max((r["time"] for r in rows if "time" in r), default=0.0)
    return updates, max(last - (run / "config.yaml").stat().st_mtime, 0.0)


def run_line(run: Path) -> str:
    """`NAME: U updates, W s, test success S, mean score M` for one run folder."""
    if not is_training_run(run):  # stopped at the budget while still loading the model
        return f"{run.name}: started, no update logged yet"
    updates, wall = updates_and_wall(run)
    head = f"{run.name}: {updates} updates, {wall:.0f} s"
    summary = run / "summary.json"
    if not summary.exists():
        return f"{head}, not finished"
    result = json.loads(summary.read_text())
    return f"{head}, test success {result['success_rate']:.3f}, mean score {result['mean_score']:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder the script wrote its runs to")
    out = parser.parse_args().out
    if not out.is_dir():
        parser.error(f"{out} is not a folder")
    print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    for run in sorted(p for p in out.iterdir() if (p / "config.yaml").exists() and re.search(r"-s\d+$", p.name)):
        print(run_line(run))


if __name__ == "__main__":
    main()
