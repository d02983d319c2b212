"""The tables of the Self-Guide comparison (benchmarks/selfguide_comparison.sh), as Markdown.

    python benchmarks/selfguide_table.py runs/selfguide

Reads what the comparison wrote under OUT: the prompting evaluations (react, react-sg,
reflexion, reflact) and the final test evaluations of the trained arms ({arm}-s{seed}). Each
arm is compared with its baseline on the same (seed, test task) pairs: the mean paired
difference of test success and its 95% interval from a bootstrap over seeds and tasks
(`hindsight.stats.paired_difference`). Runs that have not finished are listed as missing, so
the script can be run at any point of a long comparison.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hindsight.agent.selfguide import label_agreement
from hindsight.logs import read_trajectories
from tables import arm_outcomes, difference_header, difference_line, last_metric, metric_rows
PROMPTING = (("react", "ReAct"), ("react-sg", "ReAct+SG"), ("reflexion", "Reflexion (3 attempts)"),
             ("reflact", "ReFlAct"))
ARMS = (("grpo", "GRPO"), ("sg", "GRPO+SG (λ ≡ 0)"), ("sg-gr", "GRPO+SG+GR (paper λ: 0.4/0.5/0.7/0.8)"))
SCHEDULES = (("sg-gr-immediate", "full λ from the start"), ("sg-gr-early", "early entry (0.1/0.2/0.7/0.8)"),
             ("sg-gr-no-anneal", "no annealing (0.4/0.5/1/1)"))
COMPARISONS = (("sg", "grpo"), ("sg-gr", "grpo"), ("sg-gr", "sg"))


def agreement(trajectories) -> str:
    agreed = compared = 0
    for trajectory in trajectories:
        a, c = label_agreement(trajectory)
        agreed, compared = agreed + a, compared + c
    return f"{agreed / compared:.3f} ({compared})" if compared else "–"


def prompting_table(out: Path) -> list[str]:
    lines = ["| prompting (the start, greedy) | tasks | success | success by attempt | mean steps | invalid | "
             "label agreement with the oracle (turns) | note parse failures |", "|---|---|---|---|---|---|---|---|"]
    for name, title in PROMPTING:
        summary_path = out / name / "summary.json"
        if not summary_path.exists() or json.loads(summary_path.read_text()).get("interrupted"):
            lines.append(f"| {title} | missing | | | | | | |")
            continue
        summary = json.loads(summary_path.read_text())
        trajectories = list(read_trajectories(out / name))
        notes = [s.assessment for t in trajectories for s in t.steps if s.assessment is not None]
        failures = f"{sum(n.parse_error is not None for n in notes)} / {len(notes)}" if notes else "–"
        by_attempt = ", ".join(f"{x:.3f}" for x in summary.get("success_by_attempt") or []) or "–"
        labelled = [t for t in trajectories if any(s.assessment and s.assessment.label for s in t.steps)]
        lines.append(f"| {title} | {summary['episodes']} | {summary['success_rate']:.3f} | {by_attempt} | "
                     f"{summary['mean_steps']:.2f} | {summary['invalid_rate']:.3f} | "
                     f"{agreement(labelled) if labelled else '–'} | {failures} |")
    return lines


def arm_rows(out: Path, arms) -> tuple[list[str], dict[str, dict]]:
    lines = ["| arm | seeds done | test success per seed | mean | env steps (train) | label agreement (train, "
             "last update) | final λ |", "|---|---|---|---|---|---|---|"]
    outcomes: dict[str, dict] = {}
    for name, title in arms:
        outcomes[name], per_seed, runs = arm_outcomes(out, name)
        rows = [metric_rows(run) for run in runs]
        steps = [int(last_metric(run_rows, "rollout/env_steps") or 0) for run_rows in rows]
        agree = [_fixed(last_metric(run_rows, "selfguide/label_agreement")) for run_rows in rows]
        lam = [_fixed(last_metric(run_rows, "selfguide/lambda")) for run_rows in rows]
        mean = f"{sum(per_seed) / len(per_seed):.3f}" if per_seed else "–"
        lines.append(f"| {title} | {len(per_seed)} | {', '.join(f'{x:.3f}' for x in per_seed) or '–'} | {mean} | "
                     f"{', '.join(map(str, steps)) or '–'} | {', '.join(agree) or '–'} | {', '.join(lam) or '–'} |")
    return lines, outcomes


def _fixed(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    names = dict(ARMS + SCHEDULES)
    lines = prompting_table(out) + [""]
    arm_lines, outcomes = arm_rows(out, ARMS + SCHEDULES)
    lines += arm_lines + [""] + difference_header()
    for better, base in COMPARISONS + tuple((name, "sg-gr") for name, _ in SCHEDULES):
        lines.append(difference_line(f"{names[better]} − {names[base]}", outcomes[better], outcomes[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
