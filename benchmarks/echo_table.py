"""The tables of the ECHO comparisons (benchmarks/echo_headroom.sh, benchmarks/echo_learning.sh), as Markdown.

    python benchmarks/echo_table.py results/echo-headroom
    python benchmarks/echo_table.py results/echo [--measure score]

Reads the final test evaluations of the trained arms ({arm}-s{seed}), from their kept outcome
tables (results/echo-headroom) or a driver's live folder (`tables.py`), and their metrics. Each
ECHO arm is compared with GRPO, and each ablation with ECHO, on the same (seed, test task)
pairs: the mean paired difference of test success and its 95% interval from a bootstrap over
seeds and tasks (`hindsight.stats.paired_difference`). Where the policy start was tested greedily
on the same tasks (OUT/start-test, echo_learning.sh's check stage), it is a row of its own and
every arm is also compared with it. `--measure score` counts a graded env's final score
(`score: partial`) instead of success. The per-arm rows add what tells whether
the critic mattered: the refinements' mean gain over their first attempt and their improvement
rate over the run. Unfinished runs are left out, so the script can run at any point.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tables import (
    MEASURES, arm_table, difference_header, difference_line, env_steps, evaluation_outcomes, evaluation_rate,
    final_failure_endings, mean_metric, metric, quiet_closed_pipe,
)

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
    parser.add_argument("--measure", choices=MEASURES, default="success",
                        help="what the rates and differences count: test success, or a graded env's score")
    args = parser.parse_args()
    out, measure = args.out, args.measure
    names = dict(ARMS)
    lines, outcomes = arm_table(out, ARMS, COLUMNS, measure=measure)
    start = evaluation_outcomes(out / "start-test", measure=measure)
    if start is not None:  # one policy: its outcomes stand for every run label
        rate = evaluation_rate(start)
        lines.insert(2, f"| policy start (greedy, untrained) | 1 | {rate:.3f} | {rate:.3f} |" + " |" * len(COLUMNS))
    lines += [""] + difference_header(measure)
    if start is not None:
        lines += [difference_line(f"{title} − policy start", outcomes[name], start) for name, title in ARMS]
    for better, base in COMPARISONS:
        lines.append(difference_line(f"{names[better]} − {names[base]}", outcomes[better], outcomes[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
