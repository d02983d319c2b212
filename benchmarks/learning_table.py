"""The tables of the learning benchmark (benchmarks/learning.sh), as Markdown.

    python benchmarks/learning_table.py results/learning

Reads the start's greedy test evaluation (`start`) and the trained arms' final test
evaluations (`grpo-s{seed}`, `gigpo-s{seed}`), from their kept outcome tables
(results/learning) or a driver's live folder (`tables.py`), and their metrics. Each arm is
compared with the start on the same (seed, test task) pairs, pooled and run by run: the
issue's bar is a pooled lift of at least +0.15 with every run's own 95% interval above 0.
The per-arm columns say whether the policy's moves follow the state (oracle agreement on the
test tasks), what training cost in environment steps, the training success of the first and
last updates, the loop ratio of the last update's rollouts and whether the collapse alarm fired.
Unfinished runs are left out, so the script can run at any point.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hindsight.diagnostics.health import HealthConfig, first_alarm
from tables import (Outcomes, arm_table, difference_header, difference_line, env_steps, evaluation_outcomes,
                    metric, metric_rows)

ARMS = (("grpo", "GRPO"), ("gigpo", "GiGPO"))
ABLATIONS = (("abl-trajectory-mean", "trajectory-mean aggregation"), ("abl-g4", "G = 4, 16 tasks"),
             ("abl-g16", "G = 16, 4 tasks"), ("abl-tasks4", "4 tasks an update"), ("abl-tasks16", "16 tasks an update"),
             ("abl-lr5e-5", "lr 5e-5"), ("abl-lr2e-4", "lr 2e-4"), ("abl-lr5e-4", "lr 5e-4"), ("abl-lr1e-3", "lr 1e-3"),
             ("abl-kl", "KL 0.05 to the start"), ("abl-clip-higher", "clip-higher, 2 steps a batch"),
             ("abl-ragen", "RAGEN's filter, top 25%"), ("abl-gigpo-lr5e-4", "GiGPO, lr 5e-4"),
             ("abl-kl-lr5e-4", "KL 0.05 to the start, lr 5e-4"), ("abl-holes0.35", "trained on maps with p_hole 0.35"),
             ("abl-gigpo-holes0.35", "GiGPO, p_hole 0.35"), ("abl-gigpo-holes0.5", "GiGPO, p_hole 0.5"))
#: Ablations that also pair with another ablation: the one they change one thing of.
ABLATION_BASES = {"abl-gigpo-lr5e-4": "abl-lr5e-4", "abl-kl-lr5e-4": "abl-lr5e-4",
                  "abl-gigpo-holes0.35": "abl-holes0.35", "abl-gigpo-holes0.5": "abl-holes0.35"}
COMPARISONS = (("grpo", "start"), ("gigpo", "start"), ("gigpo", "grpo"))
TITLES = {"start": "start (SFT)", **dict(ARMS), **dict(ABLATIONS)}


def first_and_last(name: str):
    """A column with a metric's first and last logged values, "first → last"."""
    def read(run: Path) -> str:
        values = [float(row[name]) for row in metric_rows(run) if name in row]
        return f"{values[0]:.2f} → {values[-1]:.2f}" if values else "–"
    return read


def alarm(run: Path) -> str:
    """Whether the collapse alarm, as the toolkit has it now, fires at some update of the run's
    metrics, and at which (a run's logged `health/…` flags are those of the alarm it ran with)."""
    rows = metric_rows(run)
    updates = max((int(row["step"]) for row in rows if "rollout/success_rate" in row), default=0)
    fired = first_alarm(rows, HealthConfig().for_updates(updates)) if updates else None
    return f"fired at update {fired.update}" if fired else "silent"


COLUMNS = (("env steps (train)", env_steps),
           ("train success, first → last update", first_and_last("rollout/success_rate")),
           ("test oracle agreement", metric("final_test/oracle_agreement", spec=".3f")),
           ("loop ratio, last update", metric("tide/loop_ratio", spec=".3f")),
           ("collapse alarm", alarm))


def per_run_lines(title: str, better: Outcomes, base: Outcomes) -> list[str]:
    """One row per run of `better`: that run alone against `base`, with its own interval."""
    labels = sorted({label for label, _ in better})
    return [difference_line(f"{title}, {label}", {k: v for k, v in better.items() if k[0] == label}, base)
            for label in labels]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    lines, outcomes = arm_table(out, ARMS, COLUMNS)
    start = evaluation_outcomes(out / "start")
    if start is None:
        lines.insert(2, "| start (SFT) | not yet evaluated | | | " + " | " * len(COLUMNS))
    else:
        # The start is one policy: its outcomes stand for every run label (`evaluation_outcomes`).
        tasks = {task for _, task in start}
        rate = sum(v for (label, _), v in start.items() if label == "s0") / len(tasks)
        lines.insert(2, f"| start (SFT) | 1 | {rate:.3f} | {rate:.3f} | " + " | ".join("–" for _ in COLUMNS) + " |")
    outcomes["start"] = start or {}
    lines += [""] + difference_header()
    for better, base in COMPARISONS:
        # difference_line pairs only the (run, task) keys both arms have.
        title = f"{TITLES[better]} − {TITLES[base]}"
        lines.append(difference_line(title, outcomes[better], outcomes[base]))
        lines += per_run_lines(title, outcomes[better], outcomes[base])
    ablations, ablated = arm_table(out, ABLATIONS, COLUMNS)
    if any(ablated.values()):
        # Each ablation is one run at seed 0: it pairs with the recipe's seed-0 run on the same tasks.
        lines += ["", "Ablations (seed 0), each against the recipe's seed-0 run:", ""] + ablations
        lines += [""] + difference_header()
        titles = dict(ABLATIONS)
        for name, title in ABLATIONS:
            if ablated[name]:
                lines.append(difference_line(f"{title} − start (SFT)", ablated[name], outcomes["start"]))
                lines.append(difference_line(f"{title} − GRPO", ablated[name], outcomes["grpo"]))
                base = ABLATION_BASES.get(name)
                if base and ablated[base]:
                    lines.append(difference_line(f"{title} − {titles[base]}", ablated[name], ablated[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
