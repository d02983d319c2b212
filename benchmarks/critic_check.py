"""Are an ECHO comparison's two starts ready? The policy start's validation success, and the critic's.

    python benchmarks/critic_check.py OUT_DIR [--label NAME]

The `check` stage of benchmarks/echo_headroom.sh and benchmarks/echo_learning.sh: it reads
OUT_DIR/start-validation/summary.json (the policy start, greedy on validation tasks) and the last
row of OUT_DIR/critic's metrics (a critic-sft run) that holds its final validation, and prints
both, so the comparison's design can be checked before any arm runs. Exits with status 1 when
the policy start's success lies outside the headroom band (25-60%, as benchmarks/selfguide_checks.py),
so the driver stops before its arms; status 2 when either start is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from selfguide_checks import BAND

from hindsight.logs import read_metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the comparison's output folder")
    parser.add_argument("--label", default="start", help="what to call the policy start in the first line")
    args = parser.parse_args(argv)
    summary = args.out / "start-validation" / "summary.json"
    if not summary.is_file():
        parser.exit(2, f"error: {summary} does not exist: run the check stage's evaluation first\n")
    success = float(json.loads(summary.read_text())["success_rate"])
    inside = BAND[0] <= success <= BAND[1]
    print(f"{args.label}, validation success: {success:g} "
          f"({'inside' if inside else 'outside'} the {BAND[0]:.0%}-{BAND[1]:.0%} headroom band)")
    try:
        rows = read_metrics(args.out / "critic")
    except FileNotFoundError as error:
        parser.exit(2, f"error: {error}: train the critic first\n")
    finals = [row for row in rows if "final_validation/critique_match_rate" in row]
    if not finals:
        parser.exit(2, f"error: {args.out / 'critic'} has no final validation: train the critic first\n")
    print("critic, validation:", {k: v for k, v in finals[-1].items() if k.startswith(("final_validation/", "eval/"))})
    if not inside:
        print(f"the {args.label} is outside the headroom band: no arm should run from it", file=sys.stderr)
    return 0 if inside else 1


if __name__ == "__main__":
    raise SystemExit(main())
