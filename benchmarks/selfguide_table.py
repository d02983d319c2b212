"""The tables of the Self-Guide comparisons, as Markdown.

    python benchmarks/selfguide_table.py runs/selfguide

    python benchmarks/selfguide_table.py results/selfguide

    python benchmarks/selfguide_table.py runs/selfguide-informed --layout informed

The default layout is issue 12's comparison (benchmarks/selfguide_comparison.sh); `--layout
informed` is issue 49's (benchmarks/selfguide_informed.sh): its start evaluated without and with
notes (`start`, `start-sg`) is the ReAct and ReAct+SG baseline, and its arms are `grpo`,
`grpo-sg` and `grpo-sg-gr`, with no schedule or follow-up runs.

Reads what the comparison wrote under OUT: the prompting evaluations (react, react-sg,
reflexion, reflact) and the final test evaluations of the trained arms ({arm}-s{seed}), from
their kept outcome tables (results/selfguide) or a driver's live folder (`tables.py`). Each
arm is compared with its baseline on the same (seed, test task) pairs: the mean paired
difference of test success and its 95% interval from a bootstrap over seeds and tasks
(`hindsight.stats.paired_difference`). Runs that have not finished are listed as missing, so
the script can be run at any point of a long comparison.

The columns made of per-turn signals need the trajectory logs of a live run directory, outside
the repository, and show – for a kept run: the prompting runs' label agreement with the oracle
and note parse failures (their steps' assessments), the arms' groups trained on labels
alone and mean Σ r_t (their training log, `trajectories/train.jsonl`), and, of how often a
move that changed nothing (refused, or into the edge) was made again at the next turn, the part
where that turn's note had called it negative (`repeats_after_stuck`: does a note steer the
move?). The part over all such moves is replayed from a kept run's actions. Everything else,
metrics columns and failure endings included, comes out the same from the kept runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from hindsight.agent.selfguide import Repeats, count_repeats, label_agreement, repeats_after_stuck
from hindsight.algos.selfguide import guidance_only_groups
from hindsight.cli.outcomes import replay_run
from hindsight.diagnostics.runs import read_run_config
from hindsight.logs import read_trajectories
from hindsight.logs.outcomes import outcomes_path
from tables import (quiet_closed_pipe,
    EVAL_LOG, FINAL_LOG, arm_table, difference_header, difference_line, env_steps, evaluation_outcomes, final_failure_endings,
    last_attempts, live_log, metric, run_failure_endings, without_runs,
)
Named = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Layout:
    """The runs one comparison's driver writes, and which of them are compared."""

    prompting: Named  # the start's prompting baselines; the first is the plain start, the second with notes
    arms: Named
    comparisons: tuple[tuple[str, str], ...]  # (arm, baseline arm)
    starts: tuple[tuple[str, str], ...]  # (arm, the prompting run of the start it is compared with)
    schedules: Named = ()  # compared with the arm `sg-gr`
    follow_ups: Named = ()  # compared with `grpo` on all their runs
    # Runs of an arm left out of its comparisons (their labels, e.g. "s2").
    outside_comparison: tuple[tuple[str, tuple[str, ...]], ...] = ()


LAYOUTS = {
    "comparison": Layout(
        prompting=(("react", "ReAct"), ("react-sg", "ReAct+SG"), ("reflexion", "Reflexion (3 attempts)"),
                   ("reflact", "ReFlAct")),
        arms=(("grpo", "GRPO"), ("sg", "GRPO+SG (λ ≡ 0)"), ("sg-gr", "GRPO+SG+GR (paper λ: 0.4/0.5/0.7/0.8)")),
        comparisons=(("sg", "grpo"), ("sg-gr", "grpo"), ("sg-gr", "sg")),
        starts=(("grpo", "react"), ("sg", "react-sg"), ("sg-gr", "react-sg"), ("grpo-token-mean", "react")),
        schedules=(("sg-gr-immediate", "full λ from the start"), ("sg-gr-early", "early entry (0.1/0.2/0.7/0.8)"),
                   ("sg-gr-no-anneal", "no annealing (0.4/0.5/1/1)")),
        # Outside the comparison: the test of why GRPO lost to its start (the driver's followup stage).
        follow_ups=(("grpo-token-mean", "GRPO, token-mean aggregation (follow-up)"),),
        # Seed 2 of the comparison is its float32 re-run (docs/results.md, the fifth amendment); GRPO's
        # bfloat16 seed-2 run pairs only with the follow-up, which ran in bfloat16.
        outside_comparison=(("grpo", ("s2",)),)),
    "informed": Layout(
        prompting=(("start", "ReAct"), ("start-sg", "ReAct+SG"),
                   ("reflexion", "Reflexion (3 attempts)"), ("reflact", "ReFlAct")),
        arms=(("grpo", "GRPO"), ("grpo-sg", "GRPO+SG (λ ≡ 0)"), ("grpo-sg-gr", "GRPO+SG+GR (paper λ: 0.4/0.5/0.7/0.8)")),
        comparisons=(("grpo-sg", "grpo"), ("grpo-sg-gr", "grpo"), ("grpo-sg-gr", "grpo-sg")),
        starts=(("grpo", "start"), ("grpo-sg", "start-sg"), ("grpo-sg-gr", "start-sg"))),
}


def agreement(trajectories) -> str:
    agreed = compared = 0
    for trajectory in trajectories:
        a, c = label_agreement(trajectory)
        agreed, compared = agreed + a, compared + c
    return f"{agreed / compared:.3f} ({compared})" if compared else "–"


REPEATS = "same move after one that changed nothing: all / after a negative note"


def run_repeats(run: Path, log: str) -> str:
    """How often a run's evaluation made a move that changed nothing again, as a cell
    ("0.94 of 822 / 0.95 of 836"): in all, and where the next note called it negative.

    Each task's last attempt counts, as in its outcome. A live log gives both parts; a kept run
    keeps no notes, so its actions are replayed for the states and the second part is "–".
    """
    log_path = live_log(run, log)
    if log_path is not None:
        counts = sum((repeats_after_stuck(t) for t in last_attempts(read_trajectories(log_path))), Repeats())
    elif outcomes_path(run) is not None:
        counts = sum((count_repeats(outcome.actions, replayed.state_keys) for outcome, replayed in replay_run(run)),
                     Repeats())
    else:
        return "–"
    if not counts.stuck:
        return "–"
    flagged = f"{counts.flagged_repeated / counts.flagged:.2f} of {counts.flagged}" if counts.flagged else "–"
    return f"{counts.repeated / counts.stuck:.2f} of {counts.stuck} / {flagged}"


def final_repeats(run: Path) -> str:
    """`run_repeats` of a training run's final test evaluation."""
    return run_repeats(run, FINAL_LOG)


def prompting_table(out: Path, prompting: Named) -> list[str]:
    lines = ["| prompting (the start, greedy) | tasks | success | success by attempt | mean steps | invalid | "
             f"label agreement with the oracle (turns) | note parse failures | {REPEATS} | "
             "failures: fell / out of steps |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, title in prompting:
        summary_path = out / name / "summary.json"
        if not summary_path.exists() or json.loads(summary_path.read_text()).get("interrupted"):
            lines.append(f"| {title} | missing | | | | | | | | |")
            continue
        summary = json.loads(summary_path.read_text())
        log = live_log(out / name, EVAL_LOG)
        trajectories = list(read_trajectories(log)) if log is not None else []
        notes = [s.assessment for t in trajectories for s in t.steps if s.assessment is not None]
        failures = f"{sum(n.parse_error is not None for n in notes)} / {len(notes)}" if notes else "–"
        by_attempt = ", ".join(f"{x:.3f}" for x in summary.get("success_by_attempt") or []) or "–"
        labelled = [t for t in trajectories if any(s.assessment and s.assessment.label for s in t.steps)]
        lines.append(f"| {title} | {summary['episodes']} | {summary['success_rate']:.3f} | {by_attempt} | "
                     f"{summary['mean_steps']:.2f} | {summary['invalid_rate']:.3f} | "
                     f"{agreement(labelled) if labelled else '–'} | {failures} | "
                     f"{run_repeats(out / name, EVAL_LOG)} | {run_failure_endings(out / name, EVAL_LOG)} |")
    return lines


def self_guided(run: Path) -> list:
    """A run's training trajectories that carry Self-Guide's meta (none in the GRPO arm)."""
    log = run / "trajectories" / "train.jsonl"
    return [t for t in read_trajectories(log) if "selfguide" in t.meta] if log.exists() else []


def meta_column(metas: list[dict], key: str, group_size: int) -> torch.Tensor:
    """One Self-Guide meta entry of each training trajectory, [num_groups, group_size] (a group's
    trajectories are logged together)."""
    return torch.tensor([m[key] for m in metas], dtype=torch.float64).view(-1, group_size)


def labels_alone(run: Path) -> str:
    """"trained on the labels alone (tied groups the labels split) / groups" over a run's training.

    A group whose env returns tie and whose shaped returns do not trains on the self-assessments
    alone. The count in brackets is of tied groups whose Σ_t r_t differ, which a guidance weight
    λ > 0 would turn into such groups: under λ ≡ 0 it shows what the guidance reward would act on."""
    metas = [t.meta["selfguide"] for t in self_guided(run)]
    group_size = int(read_run_config(run)["group_size"]) if metas else 0
    if not metas or len(metas) % group_size:
        return "–"
    env = meta_column(metas, "env_return", group_size)
    alone = int(guidance_only_groups(env, meta_column(metas, "return", group_size)).sum())
    split = int(guidance_only_groups(env, env + meta_column(metas, "assessment_sum", group_size)).sum())
    return f"{alone} ({split}) / {env.shape[0]}"


def assessment_sums_by_outcome(run: Path) -> str:
    """Mean Σ_t r_t of the solved and of the failed training trajectories: do the labels track the outcome?"""
    sums: dict[bool, list[float]] = {True: [], False: []}
    for trajectory in self_guided(run):
        sums[trajectory.success].append(trajectory.meta["selfguide"]["assessment_sum"])
    if not sums[True] and not sums[False]:
        return "–"
    mean = lambda xs: f"{sum(xs) / len(xs):+.2f}" if xs else "–"  # noqa: E731
    return f"{mean(sums[True])} / {mean(sums[False])}"


COLUMNS = (("env steps (train)", env_steps),
           ("label agreement (train, last update)", metric("selfguide/label_agreement")),
           ("groups trained on labels alone (tied groups the labels split) / groups, train", labels_alone),
           ("mean Σ r_t, solved / failed (train)", assessment_sums_by_outcome),
           ("final λ", metric("selfguide/lambda")),
           (f"test: {REPEATS}", final_repeats),
           ("test failures: fell / out of steps", final_failure_endings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="comparison",
                        help="which comparison's runs OUT holds (default: issue 12's)")
    args = parser.parse_args()
    out, layout = args.out, LAYOUTS[args.layout]
    names = dict(layout.arms + layout.schedules + layout.follow_ups)
    outside = dict(layout.outside_comparison)
    lines = prompting_table(out, layout.prompting) + [""]
    arm_lines, outcomes = arm_table(out, layout.arms + layout.schedules + layout.follow_ups, COLUMNS, outside)
    compared = {name: without_runs(runs, outside.get(name, ())) for name, runs in outcomes.items()}
    lines += arm_lines + [""] + difference_header()
    # The prompting baselines are one greedy run each: their pairs are the test tasks.
    plain = layout.prompting[0][0]
    prompted = {name: evaluation_outcomes(out / name, labels=("s0",)) or {} for name, _ in layout.prompting}
    for name, title in layout.prompting[1:]:
        lines.append(difference_line(f"{title} − {layout.prompting[0][1]}", prompted[name], prompted[plain]))
    for better, base in layout.comparisons + tuple((name, "sg-gr") for name, _ in layout.schedules):
        lines.append(difference_line(f"{names[better]} − {names[base]}", compared[better], compared[base]))
    for name, _ in layout.follow_ups:
        lines.append(difference_line(f"{names[name]} − {names['grpo']}", outcomes[name], outcomes["grpo"]))
    # What training did to the start: each arm against the start with the same prompting (the
    # start is greedy and untrained, so every run of an arm pairs with its one evaluation).
    labels = sorted({label for arm in outcomes.values() for label, _ in arm})
    started = {name: evaluation_outcomes(out / name, labels) or {} for name in {start for _, start in layout.starts}}
    for arm, start in layout.starts:
        lines.append(difference_line(f"{names[arm]} − the start ({dict(layout.prompting)[start]})", compared[arm],
                                     started[start]))
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
