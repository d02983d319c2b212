"""The tables of the ECHO re-run (benchmarks/echo_headroom.sh), as Markdown.

    python benchmarks/echo_table.py results/echo-headroom

Reads the final test evaluations of the trained arms ({arm}-s{seed}), from their kept outcome
tables (results/echo-headroom) or a driver's live folder (`tables.py`), and their metrics. Each
ECHO arm is compared with GRPO, and each ablation with ECHO, on the same (seed, test task)
pairs: the mean paired difference of test success and its 95% interval from a bootstrap over
seeds and tasks (`hindsight.stats.paired_difference`). The per-arm rows add what tells whether
the critic mattered: the refinements' mean gain over their first attempt and their improvement
rate over the run. Unfinished runs are left out, so the script can run at any point.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tables import quiet_closed_pipe, arm_table, difference_header, difference_line, env_steps, mean_metric, metric, final_failure_endings

ARMS = (("grpo", "GRPO"), ("echo", "ECHO"), ("echo-frozen", "ECHO, frozen critic"),
        ("echo-linear", "ECHO, linear gain"))
COMPARISONS = (("echo", "grpo"), ("echo-frozen", "grpo"), ("echo-linear", "grpo"), ("echo", "echo-frozen"),
               ("echo", "echo-linear"))
COLUMNS = (("env steps (train)", env_steps),
           ("refinement gain (mean over updates)", metric("echo/gain_mean", mean_metric, "+.3f")),
           ("improvement rate", metric("echo/improvement_rate", mean_metric, ".3f")),
           ("test failures: ended by the env / at the step budget", final_failure_endings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    names = dict(ARMS)
    lines, outcomes = arm_table(out, ARMS, COLUMNS)
    lines += [""] + difference_header()
    for better, base in COMPARISONS:
        lines.append(difference_line(f"{names[better]} − {names[base]}", outcomes[better], outcomes[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
