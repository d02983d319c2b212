"""The tables of the CSO comparisons (benchmarks/cso_comparison.sh, benchmarks/cso_noise.sh), as Markdown.

    python benchmarks/cso_table.py results/cso
    python benchmarks/cso_table.py results/cso-noise

Reads the start's evaluation (OUT/start) and the final test evaluations of every arm
(OUT/{arm}-s{seed}), from their kept outcome tables (results/cso) or a driver's live folder
(`tables.py`). Each arm is compared with the start and with CSO on the same (seed, test
task) pairs: the mean paired difference of test success and its 95% interval from a bootstrap
over seeds and tasks (`hindsight.stats.paired_difference`). The funnel columns are CSO's own
metrics summed over a run's rounds and averaged over its seeds; the env steps are each run's
training total (`rollout/env_steps`: rollouts, branches, continuations, expert or sampled
demonstrations; – for runs that did not log it). Unfinished runs are left out. The arms of the
noisy and learned PRMs (issue 48) are compared with the start and CSO with Step-DPO under the
same PRM; their pair accuracy is the share of pairs whose chosen move the planner prefers
(`cso/pair_accuracy`, pooled over rounds and runs).

The best-of section reads the inference-time evaluations of the start (OUT/sampled-t1,
OUT/bon5-oracle, OUT/bon5-llm-prm): test success, the share of best-of turns whose readable
candidates held more than one distinct action (where the PRM had a choice at all), the share of
rated candidates that got the judge's fallback score, and each compared with the start, with
sampling alone, and with CSO under the same PRM. The two shares are per-turn signals: they need
the best-of run's trajectory log (a live run directory, outside the repository) and show – for a
kept run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tables import (quiet_closed_pipe, 
    EVAL_LOG, arm_outcomes, difference_header, difference_line, evaluation_outcomes, last_metric, live_log, metric_rows,
)

from hindsight.logs import read_trajectories

METHODS = (("cso", "CSO"), ("step-dpo", "Step-DPO"), ("ipr", "IPR"), ("eto", "ETO"), ("rft", "RFT"))
ABLATIONS = (("cso-no-prm", "CSO, no PRM (every step branched)"), ("cso-no-verify", "CSO, no verification"),
             ("cso-pp", "CSO, policy+policy pairs"), ("cso-random-k3", "random proposer, k = 3"),
             ("cso-random-k5", "random proposer, k = 5"), ("cso-random-k7", "random proposer, k = 7"),
             ("cso-random-ee", "random proposer, expert+expert pairs"),
             ("cso-llm-prm", "CSO, LLM-judge PRM (the bundled model; seed 0)"))
#: Issue 48's arms, and the (CSO, Step-DPO) pairs compared under the same PRM.
NOISE_ARMS = (("step-dpo-noisy", "Step-DPO, oracle PRM with 40% noise"), ("cso-noisy", "CSO, oracle PRM with 40% noise"),
              ("step-dpo-learned", "Step-DPO, learned PRM"), ("cso-learned", "CSO, learned PRM"))
SAME_PRM = (("cso-noisy", "step-dpo-noisy"), ("cso-learned", "step-dpo-learned"))
FUNNEL = ("cso/failed_trajectories", "cso/candidates", "cso/verified", "cso/pairs")
#: ETO logs its own failures and pairs; it has no candidates and verifies nothing.
ETO_FUNNEL = ("eto/failed_trajectories", None, None, "eto/pairs")


#: (folder, title, the CSO arm that used the same PRM) of the best-of stage.
BEST_OF = (("sampled-t1", "sampled at temperature 1, no choice", None),
           ("bon5-oracle", "best-of-5, oracle PRM", "cso"),
           ("bon5-llm-prm", "best-of-5, the bundled model as PRM", "cso-llm-prm"))


def choice_cells(folder: Path) -> tuple[str, str]:
    """The share of best-of turns whose readable candidates held two or more distinct actions, and
    the share of rated candidates whose score was the PRM's fallback (an unreadable judge answer)."""
    log = live_log(folder, EVAL_LOG)
    turns = [step.candidates for t in read_trajectories(log) for step in t.steps if step.candidates] if log else []
    if not turns:
        return "–", "–"
    choices = sum(len({c.action for c in candidates if c.action is not None}) > 1 for candidates in turns)
    rated = [c for candidates in turns for c in candidates if c.score is not None]
    fallbacks = sum(c.prm_error is not None for c in rated)
    return f"{choices / len(turns):.3f} of {len(turns)}", f"{fallbacks / max(len(rated), 1):.3f} of {len(rated)}"


def best_of_lines(out: Path, outcomes: dict) -> list[str]:
    """The best-of stage's table and its paired differences; nothing before any of its runs finished.

    Two evaluations of the start are one run each, so they pair on seed label s0 alone (repeating
    both under every label would count the same tasks three times); a trained arm pairs each of
    its seeds with the evaluation, as it does with the start.
    """
    finished = [(name, title, cso) for name, title, cso in BEST_OF if (out / name / "summary.json").exists()]
    if not finished:
        return []
    lines = ["", "| inference-time arm (the start, no training) | test success | turns where the PRM had a choice | "
             "PRM fallback scores |", "|---|---|---|---|"]
    for name, title, _ in finished:
        summary = json.loads((out / name / "summary.json").read_text())
        lines.append(f"| {title} | {summary['success_rate']:.3f} | " + " | ".join(choice_cells(out / name)) + " |")
    lines += [""] + difference_header()
    once = {name: evaluation_outcomes(out / name, ("s0",)) for name in ("start", "sampled-t1")}
    for name, title, cso in finished:
        every_label = evaluation_outcomes(out / name)
        evaluated = {key: value for key, value in every_label.items() if key[0] == "s0"}
        if once["start"] is not None:
            lines.append(difference_line(f"{title} − start", evaluated, once["start"]))
        if cso is None:
            continue
        if once["sampled-t1"] is not None:
            lines.append(difference_line(f"{title} − sampling alone", evaluated, once["sampled-t1"]))
        lines.append(difference_line(f"{dict(METHODS + ABLATIONS)[cso]} − {title}", outcomes[cso], every_label))
    return lines


def funnel(rows: list[list[dict]], names: tuple[str | None, ...] = FUNNEL) -> list[str]:
    """Each funnel metric summed over a run's rounds (`rows`: each run's metric rows), then averaged
    over the runs; – where no run logs it."""
    if not rows:
        return ["–"] * (len(names) + 1)
    cells = []
    for name in names:
        if name is None or not any(name in row for run_rows in rows for row in run_rows):
            cells.append("–")
            continue
        cells.append(f"{sum(sum(r[name] for r in run_rows if name in r) for run_rows in rows) / len(rows):.1f}")
    shares = [last_metric(run_rows, "cso/share_supervised") for run_rows in rows]
    shares = [s for s in shares if s is not None]
    return cells + [f"{sum(shares) / len(shares):.3f}" if shares else "–"]


def env_steps(rows: list[list[dict]]) -> str:
    """Each run's training env steps (the last, cumulative `rollout/env_steps`), – where a run logs none."""
    totals = [last_metric(run_rows, "rollout/env_steps") for run_rows in rows]
    return ", ".join("–" if total is None else f"{total:.0f}" for total in totals) or "–"


def pair_accuracy(rows: list[list[dict]]) -> str:
    """Right pairs ÷ pairs over every round of every run (`cso/pair_accuracy` weighted by `cso/pairs`)."""
    rounds = [r for run_rows in rows for r in run_rows if "cso/pair_accuracy" in r and r.get("cso/pairs")]
    pairs = sum(r["cso/pairs"] for r in rounds)
    return f"{sum(r['cso/pair_accuracy'] * r['cso/pairs'] for r in rounds) / pairs:.3f}" if pairs else "–"


def noise_lines(out: Path, start: dict | None) -> list[str]:
    """Issue 48's arms: success, pairs and pair accuracy, then each against the start and CSO against
    Step-DPO under the same PRM; nothing before any of them finished."""
    found = {name: arm_outcomes(out, name) for name, _ in NOISE_ARMS}
    if not any(per_seed for _, per_seed, _ in found.values()):
        return []
    lines = ["", "| arm | runs done | test success per run | mean | pairs per run | pair accuracy |",
             "|---|---|---|---|---|---|"]
    for name, title in NOISE_ARMS:
        _, per_seed, runs = found[name]
        rows = [metric_rows(run) for run in runs]
        pairs = ", ".join(f"{sum(r.get('cso/pairs', 0) for r in run_rows):.0f}" for run_rows in rows) or "–"
        mean = f"{sum(per_seed) / len(per_seed):.3f}" if per_seed else "–"
        lines.append(f"| {title} | {len(per_seed)} | {', '.join(f'{x:.3f}' for x in per_seed) or '–'} | {mean} | "
                     f"{pairs} | {pair_accuracy(rows)} |")
    titles = dict(NOISE_ARMS)
    lines += [""] + difference_header()
    if start is not None:
        lines += [difference_line(f"{title} − start", found[name][0], start) for name, title in NOISE_ARMS]
    lines += [difference_line(f"{titles[cso]} − {titles[dpo]}", found[cso][0], found[dpo][0]) for cso, dpo in SAME_PRM]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    start = evaluation_outcomes(out / "start")
    lines = []
    if start is None:
        lines.append("The start (OUT/start) has not been evaluated yet.")
    else:
        summary = json.loads((out / "start" / "summary.json").read_text())
        lines.append(f"The start: test success {summary['success_rate']:.3f} on {summary['episodes']} tasks.")
    header = ("| arm | runs done | test success per run | mean | env steps (train) per run | failed trajectories | "
              "candidates | verified | pairs | share supervised (last round) |")
    lines += ["", header, "|---|---|---|---|---|---|---|---|---|---|"]
    arms = METHODS + ABLATIONS
    outcomes = {}
    for name, title in arms:
        outcomes[name], per_seed, runs = arm_outcomes(out, name)
        mean = f"{sum(per_seed) / len(per_seed):.3f}" if per_seed else "–"
        rows = [metric_rows(run) for run in runs]
        cells = funnel(rows, ETO_FUNNEL if name == "eto" else FUNNEL)  # RFT logs no funnel: all –
        lines.append(f"| {title} | {len(per_seed)} | {', '.join(f'{x:.3f}' for x in per_seed) or '–'} | {mean} | "
                     f"{env_steps(rows)} | " + " | ".join(cells) + " |")
    lines += [""] + difference_header()
    for name, title in arms:
        if start is not None:
            lines.append(difference_line(f"{title} − start", outcomes[name], start))
    for name, title in arms[1:]:
        lines.append(difference_line(f"{title} − CSO", outcomes[name], outcomes["cso"]))
    lines += best_of_lines(out, outcomes)
    lines += noise_lines(out, start)
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
