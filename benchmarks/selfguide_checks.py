"""Issue 49's design checks on a Self-Guide start, before any arm runs (benchmarks/selfguide_informed.sh).

    python benchmarks/selfguide_checks.py OUT_DIR

Reads what the driver's start and check stages wrote under OUT_DIR:
- `assessor/summary.json`: the start's notes on held-out steps against the oracle (`hindsight
  train sft` with `assessment_eval`), and whether they pass the gate: agreement at least 0.10
  above the always-positive judge and at least half the negative steps caught;
- `check-plain/summary.json` and `check-notes/summary.json`: the start's greedy success on
  validation tasks without and with notes, each of which must lie in the 25-60% band, so that
  every arm starts with headroom.

Prints one line per check and exits with status 1 when any fails (status 2 when a summary is
missing or unreadable), so the driver stops before the arms.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: The headroom band of a start's success (docs: "How we measure learning").
BAND = (0.25, 0.60)


def read_summary(path: Path) -> dict:
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(summary, dict) or summary.get("interrupted"):
        raise ValueError(f"{path}: not a finished run's summary")
    return summary


def checks(out: Path) -> list[tuple[bool, str]]:
    """(passed, line) for the gate and for each headroom check."""
    gate = read_summary(out / "assessor" / "summary.json")
    if "passes_gate" not in gate:
        raise ValueError(f"{out / 'assessor'}: judged no held-out steps (run it with assessment_eval)")
    found = [(bool(gate["passes_gate"]),
              f"the gate: {'passed' if gate['passes_gate'] else 'FAILED'} (agreement {gate['agreement']:.3f} "
              f"against always-positive {gate['always_positive']:.3f}, negative recall {gate['negative_recall']:.3f})")]
    for name in ("check-plain", "check-notes"):
        summary = read_summary(out / name / "summary.json")
        success = summary["success_rate"]
        inside = BAND[0] <= success <= BAND[1]
        found.append((inside, f"{name}: success {success:.3f} on {summary['episodes']} validation tasks "
                              f"({'inside' if inside else 'OUTSIDE'} the {BAND[0]:.0%}-{BAND[1]:.0%} band), "
                              f"invalid moves {summary['invalid_rate']:.3f}"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the driver's output folder")
    out = parser.parse_args(argv).out
    try:
        found = checks(out)
    except (ValueError, KeyError) as exc:
        print(f"selfguide_checks: {exc}", file=sys.stderr)
        return 2
    for _, line in found:
        print(line)
    if all(passed for passed, _ in found):
        return 0
    print("the start fails the design's checks: no arm should run from it (run later stages by name to override)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
