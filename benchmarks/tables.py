"""What the comparison table scripts share: reading each run's final test outcomes and writing
the per-arm and paired-difference rows (imported by the sibling `*_table.py` scripts).

Every arm is a set of runs `OUT/{arm}-s{seed}`, each with a final greedy evaluation on the same
test tasks. OUT is either a comparison's kept folder under results/ (each run's outcome table,
`outcomes.jsonl.gz`: results/README.md) or a driver's live output folder, whose runs still have
their trajectory logs (`trajectories/eval-test-final.jsonl`, `trajectories/eval.jsonl`); the
outcomes are the same either way (`hindsight.logs.outcomes`). A run's folder may carry a tag after
its seed (`sg-s2-float32`): a run made differently on purpose, here with other weight dtypes. An
outcome is keyed by (run label, task seed), the label being what follows the arm's name ("s0",
"s2-float32"), so two arms are compared on exactly the runs and tasks both have
(`hindsight.stats.paired_difference`), and a tagged run pairs only with runs of the same tag. A
run that has not finished is left out, so a table can be printed at any point of a comparison.
How a failed episode ended (in the task, or at the step budget) is read from a live log's flags,
or found by replaying a kept run's actions (`hindsight outcomes check` replays them the same way).
"""

from __future__ import annotations

import re
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Collection, Iterable, Mapping, Sequence

from hindsight.cli.outcomes import replay_run
from hindsight.logs import LogIssue, read_metrics, read_trajectories
from hindsight.logs.importers import episode_ending
from hindsight.logs.outcomes import Outcome, outcomes_from_trajectories, outcomes_path, read_outcomes
from hindsight.logs.schema import METRICS_FILE
from hindsight.stats import paired_difference

LABELS = ("s0", "s1", "s2")
Outcomes = dict[tuple[str, int], float]
#: What an outcome is measured by: its success (0 or 1) or its final score (a graded env's partial credit).
MEASURES = ("success", "score")


def measured(outcome: Outcome, measure: str) -> float:
    """The outcome's success as 0/1, or its final score."""
    return float(outcome.success) if measure == "success" else float(outcome.score)


def quiet_closed_pipe() -> None:
    """End quietly when the reader of the table goes away (`| head`), as command-line tools do,
    rather than with a BrokenPipeError traceback."""
    if hasattr(signal, "SIGPIPE"):  # POSIX only
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


#: The live evaluation log of a training run (its final test evaluation) and of a `hindsight eval` run.
FINAL_LOG, EVAL_LOG = "eval-test-final", "eval"


def live_log(run: Path, log: str) -> Path | None:
    """A live run's evaluation log `trajectories/{log}.jsonl`; None for a kept run or before it exists."""
    path = run / "trajectories" / f"{log}.jsonl"
    return path if path.exists() else None


def run_outcomes(run: Path, log: str) -> list[Outcome] | None:
    """A finished run's test outcomes: its kept outcome table, else derived from its live log `log`;
    None while the run is unfinished or has neither."""
    if not (run / "summary.json").exists():
        return None
    kept = outcomes_path(run)
    if kept is not None:
        return read_outcomes(kept)
    path = live_log(run, log)
    return outcomes_from_trajectories(read_trajectories(path, report_skipped)) if path is not None else None


def final_outcomes(run: Path, label: str, measure: str = "success") -> Outcomes | None:
    """Success (or score) per (run label, test task) of a finished training run; None while it is unfinished."""
    outcomes = run_outcomes(run, FINAL_LOG)
    return None if outcomes is None else {(label, o.task_seed): measured(o, measure) for o in outcomes}


def evaluation_outcomes(folder: Path, labels: Iterable[str] = LABELS, measure: str = "success") -> Outcomes | None:
    """A `hindsight eval` folder's greedy outcomes, repeated for every run label: an untrained start
    is the same policy whatever seed its comparison arms use, so each arm's run pairs with it."""
    outcomes = run_outcomes(folder, EVAL_LOG)
    if outcomes is None:
        return None
    return {(label, o.task_seed): measured(o, measure) for label in labels for o in outcomes}


def evaluation_rate(outcomes: Outcomes) -> float:
    """The mean of an `evaluation_outcomes` table over its tasks (each task counted once, not per label)."""
    tasks = {task for _, task in outcomes}
    return sum(outcomes[(LABELS[0], task)] for task in tasks) / len(tasks)


def arm_runs(out: Path, arm: str) -> list[tuple[str, Path]]:
    """The arm's run folders `{arm}-s{seed}[-tag]` with their labels ("s0", "s2-float32"), by seed then tag."""
    pattern = re.compile(rf"{re.escape(arm)}-(s(\d+)(?:-[a-z0-9]+)?)")
    found = [(int(m.group(2)), m.group(1), folder) for folder in out.iterdir()
             if folder.is_dir() and (m := pattern.fullmatch(folder.name))] if out.is_dir() else []
    return [(label, folder) for _, label, folder in sorted(found, key=lambda f: (f[0], f[1]))]


def shown_label(label: str) -> str:
    """A run label as the tables show it beside a number: only a tagged run is named."""
    return f" ({label})" if "-" in label else ""


def report_skipped(issue: LogIssue) -> None:
    """What the scripts' log readers do with a broken line: skip it and say so on stderr, so that a
    table never leaves out an episode or a metric unseen."""
    print(f"{issue}: skipped", file=sys.stderr)


def metric_rows(run: Path) -> list[dict]:
    """A run's metrics rows (a live `metrics.jsonl` or a kept `metrics.jsonl.gz`); none while it has
    neither. A broken line is skipped and reported (`report_skipped`)."""
    for name in (METRICS_FILE, METRICS_FILE + ".gz"):
        if (run / name).exists():
            return read_metrics(run / name, report_skipped)
    return []


def last_metric(rows: list[dict], name: str) -> float | None:
    """The metric's value in the last row that has it; None where no row has it."""
    return next((float(row[name]) for row in reversed(rows) if name in row), None)


def arm_outcomes(out: Path, arm: str, measure: str = "success") -> tuple[Outcomes, list[float], list[Path]]:
    """The merged outcomes of an arm's finished runs, its success (or mean score) per run and those runs."""
    merged: Outcomes = {}
    per_seed, runs = [], []
    for label, run in arm_runs(out, arm):
        got = final_outcomes(run, label, measure)
        if got is None:
            continue
        merged.update(got)
        per_seed.append(sum(got.values()) / len(got))
        runs.append(run)
    return merged, per_seed, runs


def mean_metric(rows: list[dict], name: str) -> float | None:
    """The metric's mean over the rows that have it; None where no row has it."""
    values = [float(row[name]) for row in rows if name in row]
    return sum(values) / len(values) if values else None


def fixed(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


#: A per-run column of an arm table: its title, and what it shows of one finished run (its folder).
Column = tuple[str, Callable[[Path], str]]


def metric(name: str, reduce: Callable[[list[dict], str], float | None] = last_metric, spec: str = ".2f"
           ) -> Callable[[Path], str]:
    """A column showing one metric of a run's metrics rows (by default its last value)."""
    return lambda run: fixed(reduce(metric_rows(run), name), spec)


def env_steps(run: Path) -> str:
    return str(int(last_metric(metric_rows(run), "rollout/env_steps") or 0))


def last_attempts(trajectories: Iterable) -> list:
    """Each task's last attempt (Reflexion logs every attempt of a task, in order)."""
    return list({t.seed: t for t in trajectories}.values())


def endings_cell(endings: Iterable[str | None]) -> str:
    """"ended by the env (a fall) / at the step budget" counts of the failed episodes' endings."""
    ended = Counter(endings)
    return f"{ended['env']} / {ended['budget']}" if ended else "–"


def failure_endings(trajectories: Iterable) -> str:
    """How the failed trajectories ended: "ended by the env (a fall) / at the step budget" counts."""
    return endings_cell(episode_ending(t.terminated, t.truncated) for t in trajectories if not t.success)


def run_failure_endings(run: Path, log: str) -> str:
    """`failure_endings` of a run's evaluation: each task's last attempt in a live log, or the replay
    of a kept run's actions (the same episodes: the replay reproduces them)."""
    path = live_log(run, log)
    if path is not None:
        return failure_endings(last_attempts(read_trajectories(path, report_skipped)))
    if outcomes_path(run) is None:
        return "–"
    return endings_cell(episode_ending(replayed.terminated, replayed.truncated)
                        for outcome, replayed in replay_run(run) if not outcome.success)


def final_failure_endings(run: Path) -> str:
    """`failure_endings` of a run's final test evaluation."""
    return run_failure_endings(run, FINAL_LOG)


def arm_table(out: Path, arms: Sequence[tuple[str, str]], columns: Sequence[Column],
              outside: Mapping[str, Collection[str]] | None = None,
              measure: str = "success") -> tuple[list[str], dict[str, Outcomes]]:
    """One row per arm (runs done, test success per run and their mean, then each column for every
    finished run), and each arm's merged outcomes for the paired rows. `outside` names, per arm, the
    labels of runs that are shown but stand outside its mean (a seed run again another way, whose
    other run stands for that seed); their outcomes are still returned, for the rows that pair with them.
    `measure` is what the rates and outcomes count: success, or a graded env's score."""
    lines = [f"| arm | runs done | test {measure} per run | mean | " + " | ".join(t for t, _ in columns) + " |",
             "|---|---|---|---|" + "---|" * len(columns)]
    outcomes: dict[str, Outcomes] = {}
    for name, title in arms:
        outcomes[name], per_seed, runs = arm_outcomes(out, name, measure)
        left_out = (outside or {}).get(name, ())
        labels = [run.name[len(name) + 1:] for run in runs]
        counted = [x for x, label in zip(per_seed, labels) if label not in left_out]
        mean = f"{sum(counted) / len(counted):.3f}" if counted else "–"
        shown = [", ".join(read(run) for run in runs) or "–" for _, read in columns]
        rates = ", ".join(f"{x:.3f} ({label}, not in the mean)" if label in left_out else f"{x:.3f}{shown_label(label)}"
                          for x, label in zip(per_seed, labels))
        lines.append(f"| {title} | {len(counted)} | {rates or '–'} | {mean} | "
                     + " | ".join(shown) + " |")
    return lines, outcomes


def without_runs(outcomes: Outcomes, labels: Collection[str]) -> Outcomes:
    """The outcomes of every run except those labelled `labels`."""
    return {key: value for key, value in outcomes.items() if key[0] not in labels}


def difference_header(measure: str = "success") -> list[str]:
    return [f"| paired difference of test {measure} | B − A [95% CI] | pairs | per run |", "|---|---|---|---|"]


def difference_line(title: str, better: Mapping, base: Mapping) -> str:
    """One row: B − A over the (seed, task) pairs both arms have, with its bootstrap interval."""
    common = set(better) & set(base)
    if not common:
        return f"| {title} | not yet: no run finished in both arms | | |"
    result = paired_difference({k: base[k] for k in common}, {k: better[k] for k in common})
    per_seed = ", ".join(f"{d:+.3f}{shown_label(label)}" for d, label in zip(result.per_seed, result.seeds))
    return (f"| {title} | {result.difference:+.3f} [{result.low:+.3f}, {result.high:+.3f}] | "
            f"{len(result.seeds)} runs × {result.tasks} tasks | {per_seed} |")
