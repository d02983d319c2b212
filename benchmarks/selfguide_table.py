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
from hindsight.logs import read_metrics, read_trajectories
from hindsight.stats import paired_difference

SEEDS = (0, 1, 2)
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


def final_outcomes(run: Path, seed: int) -> dict[tuple[int, int], float] | None:
    log = run / "trajectories" / "eval-test-final.jsonl"
    if not (run / "summary.json").exists() or not log.exists():
        return None
    return {(seed, t.seed): float(t.success) for t in read_trajectories(log)}


def arm_rows(out: Path, arms) -> tuple[list[str], dict[str, dict]]:
    lines = ["| arm | seeds done | test success per seed | mean | env steps (train) | label agreement (train, "
             "last update) | final λ |", "|---|---|---|---|---|---|---|"]
    outcomes: dict[str, dict] = {}
    for name, title in arms:
        per_seed, steps, agree, lam, merged = [], [], [], [], {}
        for seed in SEEDS:
            run = out / f"{name}-s{seed}"
            got = final_outcomes(run, seed)
            if got is None:
                continue
            merged.update(got)
            per_seed.append(sum(got.values()) / len(got))
            rows = [r for r in read_metrics(run) if "rollout/env_steps" in r]
            steps.append(int(rows[-1]["rollout/env_steps"]) if rows else 0)
            agreements = [r["selfguide/label_agreement"] for r in rows if "selfguide/label_agreement" in r]
            agree.append(f"{agreements[-1]:.2f}" if agreements else "–")
            lam.append(next((f"{r['selfguide/lambda']:.2f}" for r in reversed(rows) if "selfguide/lambda" in r), "–"))
        outcomes[name] = merged
        mean = f"{sum(per_seed) / len(per_seed):.3f}" if per_seed else "–"
        lines.append(f"| {title} | {len(per_seed)} | {', '.join(f'{x:.3f}' for x in per_seed) or '–'} | {mean} | "
                     f"{', '.join(map(str, steps)) or '–'} | {', '.join(agree) or '–'} | {', '.join(lam) or '–'} |")
    return lines, outcomes


def difference_line(title: str, better: dict, base: dict) -> str:
    common = set(better) & set(base)
    seeds = sorted({s for s, _ in common})
    if not common:
        return f"| {title} | not yet: no seed finished in both arms | | |"
    a = {k: base[k] for k in common}
    b = {k: better[k] for k in common}
    result = paired_difference(a, b)
    per_seed = ", ".join(f"{d:+.3f}" for d in result.per_seed)
    return (f"| {title} | {result.difference:+.3f} [{result.low:+.3f}, {result.high:+.3f}] | "
            f"{len(seeds)} seeds × {result.tasks} tasks | {per_seed} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    names = dict(ARMS + SCHEDULES)
    lines = prompting_table(out) + [""]
    arm_lines, outcomes = arm_rows(out, ARMS + SCHEDULES)
    lines += arm_lines + ["", "| paired difference of test success | B − A [95% CI] | pairs | per seed |",
                          "|---|---|---|---|"]
    for better, base in COMPARISONS + tuple((name, "sg-gr") for name, _ in SCHEDULES):
        lines.append(difference_line(f"{names[better]} − {names[base]}", outcomes[better], outcomes[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
