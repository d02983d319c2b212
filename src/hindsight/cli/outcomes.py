"""`hindsight outcomes`: a run's kept form (the outcome tables), and the replay that checks it.

    hindsight outcomes export runs/cso/cso-s1 results/cso/cso-s1 --arm cso --seed 1 --commit 46cd982
    hindsight outcomes check results/cso results/selfguide

`export` writes what a comparison keeps of a finished run: config.yaml, summary.json,
metrics.jsonl.gz (where the run has metrics), run.json and outcomes.jsonl.gz, the outcomes
derived from the run's evaluation log (docs/log-format.md, "Kept outcomes"). Trajectory logs,
adapters and checkpoints stay behind. `check` replays every outcome's actions on a fresh
environment from `reset(task_seed)` and reports each task whose success, score or step count
comes out differently (exit code 1), so a kept table is shown to be what its actions did.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hindsight.cli.main import CLIError
from hindsight.logs.reader import METRICS_FILE, final_evaluation_log

if TYPE_CHECKING:
    from hindsight.envs.base import TextEnv
    from hindsight.logs.outcomes import Outcome, RunInfo

#: The evaluation logs `export` looks for, in order: a training run's final test evaluation, then
#: a `hindsight eval` run's log.
EVALUATION_LOGS = (final_evaluation_log("test"), "eval")
#: Record files kept as they are where a run has them (a forked run's origin: benchmarks/fork_run.py).
RECORD_FILES = ("config.yaml", "summary.json", "forked_from.json")
#: Scores are floats in [0, 1] written through JSON: equal to well within this.
SCORE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Replayed:
    """What replaying an outcome's actions did: the environment's final flags, its step count, and
    the state before each action sent (`Step.state_key` of the live episode)."""

    success: bool
    score: float
    steps: int
    terminated: bool
    truncated: bool
    state_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mismatch:
    """A task whose replay does not reproduce its kept outcome, and how."""

    task_seed: int
    reason: str


@dataclass(frozen=True)
class RunCheck:
    """The replay check of one kept run: how many tasks were replayed, and those that did not match."""

    directory: Path
    tasks: int
    mismatches: tuple[Mismatch, ...]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("outcomes", help="export a run's kept outcome table, and check one by replay",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="outcomes_command", metavar="ACTION", required=True)
    export = commands.add_parser("export", help="write the kept form of a finished run",
                                 description="Write the kept form of a run: config, summary, metrics (gzipped), "
                                             "run.json and outcomes.jsonl.gz.")
    export.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (hindsight eval or hindsight train)")
    export.add_argument("out_dir", metavar="OUT_DIR", help="folder to write (created; kept files are replaced)")
    export.add_argument("--arm", required=True, help="the comparison arm: start, the method, or the evaluation's name")
    export.add_argument("--seed", type=int, help="the run's training seed (none for an evaluation of a fixed model)")
    export.add_argument("--commit", help="the toolkit commit the run used, where known")
    export.add_argument("--log", help="the evaluation log's name under trajectories/ (default: eval-test-final, "
                                      "else eval)")
    export.set_defaults(run=run_export)
    check = commands.add_parser("check", help="replay kept outcomes and report any that do not reproduce",
                                description="Replay every kept outcome's actions from reset(task_seed) and report "
                                            "each task whose success, score or steps differ (exit code 1).")
    check.add_argument("dirs", nargs="+", metavar="DIR", help="a kept run folder, or a folder of them")
    check.add_argument("--tasks", type=int, metavar="N", help="replay only each run's first N tasks")
    check.set_defaults(run=run_check)


def replay(env: TextEnv, outcome: Outcome) -> Replayed:
    """Send the outcome's actions to `env` after `reset(task_seed)`, as the rollout engine did.

    Actions left over once the episode ended are not sent; the step count then falls short of
    the kept one, which is how `check` reports it.
    """
    _, info = env.reset(outcome.task_seed)
    terminated = truncated = False
    states: list[str] = []
    for action in outcome.actions:
        if terminated or truncated:
            break
        states.append(env.state_key())
        _, _, terminated, truncated, info = env.step(action)
    return Replayed(success=bool(info["success"]), score=float(info["score"]), steps=len(states),
                    terminated=bool(terminated), truncated=bool(truncated), state_keys=tuple(states))


def differences(outcome: Outcome, replayed: Replayed) -> str | None:
    """How a replay differs from the kept outcome (None when it reproduces it)."""
    found = []
    if replayed.success != outcome.success:
        found.append(f"success {replayed.success} (kept {outcome.success})")
    if not math.isclose(replayed.score, outcome.score, abs_tol=SCORE_TOLERANCE):
        found.append(f"score {replayed.score:g} (kept {outcome.score:g})")
    if replayed.steps != outcome.steps:
        found.append(f"{replayed.steps} steps (kept {outcome.steps})")
    return "; ".join(found) or None


def make_env(info: RunInfo) -> TextEnv:
    """The run's environment, as run.json describes it; an unknown env or option is a CLIError."""
    from hindsight.envs import EnvError, make

    try:
        return make(info.env, **info.env_kwargs)
    except EnvError as exc:
        raise CLIError(str(exc)) from None


def read_kept(directory: str | Path) -> tuple[RunInfo, list[Outcome]]:
    """A kept run's info and outcomes; a missing or broken file is a CLIError naming it."""
    from hindsight.logs.outcomes import OutcomeError, read_run

    try:
        return read_run(directory)
    except OutcomeError as exc:
        raise CLIError(str(exc)) from None


def replay_run(directory: str | Path, tasks: int | None = None) -> list[tuple[Outcome, Replayed]]:
    """Each kept outcome of a run (its first `tasks` only, when given) beside its replay."""
    info, outcomes = read_kept(directory)
    env = make_env(info)
    return [(outcome, replay(env, outcome)) for outcome in outcomes[:tasks]]


def check_run(directory: str | Path, tasks: int | None = None) -> RunCheck:
    """Replay a kept run's outcomes (its first `tasks`, when given): each must reproduce, on a task of the run's split."""
    from hindsight.envs import EnvError

    info, outcomes = read_kept(directory)
    env = make_env(info)
    mismatches = []
    for outcome in outcomes[:tasks]:
        found = [differences(outcome, replay(env, outcome))]
        try:
            split = env.seed_split(outcome.task_seed)
        except EnvError as exc:
            split = f"none ({exc})"
        if split != info.split:
            found.append(f"the task is in split {split}, not {info.split}")
        if any(found):
            mismatches.append(Mismatch(outcome.task_seed, "; ".join(filter(None, found))))
    return RunCheck(Path(directory), len(outcomes[:tasks]), tuple(mismatches))


def kept_runs(folder: Path) -> list[Path]:
    """`folder` itself when it is a kept run, else every kept run folder beneath it, sorted."""
    if (folder / "run.json").is_file():
        return [folder]
    return sorted(path.parent for path in folder.rglob("run.json"))


def run_check(args: argparse.Namespace) -> int:
    if args.tasks is not None and args.tasks < 1:
        raise CLIError("--tasks must be at least 1")
    failed = 0
    for name in args.dirs:
        folder = Path(name)
        if not folder.is_dir():
            raise CLIError(f"{folder}: no such folder")
        runs = kept_runs(folder)
        if not runs:
            raise CLIError(f"{folder}: no kept run (a folder with run.json) in it")
        for run in runs:
            result = check_run(run, args.tasks)
            if not result.mismatches:
                print(f"{run}: {result.tasks} tasks replayed, all reproduced")
                continue
            failed += 1
            print(f"{run}: {len(result.mismatches)} of {result.tasks} tasks do not reproduce")
            for mismatch in result.mismatches:
                print(f"  task {mismatch.task_seed}: {mismatch.reason}")
    return 1 if failed else 0


def gzip_bytes(data: bytes) -> bytes:
    """`data` gzipped without a timestamp, so the same file exported twice has the same bytes."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as handle:
        handle.write(data)
    return buffer.getvalue()


def evaluation_log(run: Path, name: str | None) -> Path | None:
    """The run's evaluation log (`name`, else the first of EVALUATION_LOGS), plain or gzipped; None when absent."""
    for stem in (name,) if name else EVALUATION_LOGS:
        for suffix in (".jsonl", ".jsonl.gz"):
            path = run / "trajectories" / f"{stem}{suffix}"
            if path.is_file():
                return path
    if name:
        raise CLIError(f"{run}: no trajectories/{name}.jsonl or .jsonl.gz")
    return None


def finished(run: Path) -> bool:
    """Whether the run wrote a summary that does not say it was interrupted."""
    try:
        return not json.loads((run / "summary.json").read_text()).get("interrupted", False)
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def export_run(run: Path, out: Path, *, arm: str, seed: int | None, commit: str | None,
               log_name: str | None = None) -> list[str]:
    """Write the kept form of `run` into `out`; returns what was written, one phrase each.

    A line of the evaluation log that cannot be read is an error for a finished run; for an
    evaluation cut off mid-write (no summary, or one marked interrupted) it is the line in flight,
    reported and left out.
    """
    from hindsight.logs import read_trajectories
    from hindsight.logs.outcomes import OutcomeError, RunInfo, outcomes_from_trajectories, write_run

    if not (run / "config.yaml").is_file():
        raise CLIError(f"{run}: not a run directory (no config.yaml)")
    log = evaluation_log(run, log_name)
    issues: list[Any] = []
    trajectories = list(read_trajectories(log, on_issue=issues.append)) if log is not None else []
    if issues and finished(run):
        raise CLIError(f"{issues[0]} (the run finished: its log should have no broken line)")
    if log is not None and not trajectories:
        raise CLIError(f"{log}: no trajectory in it")
    kinds = {(t.env, json.dumps(dict(t.env_kwargs), sort_keys=True), t.split, t.model) for t in trajectories}
    if len(kinds) > 1:
        raise CLIError(f"{log}: its trajectories differ in env, env_kwargs, split or model")
    out.mkdir(parents=True, exist_ok=True)
    written = [name for name in RECORD_FILES if (run / name).is_file()]
    for name in written:
        shutil.copyfile(run / name, out / name)
    metrics = [run / METRICS_FILE, run / f"{METRICS_FILE}.gz"]
    if metrics[0].is_file():
        (out / metrics[1].name).write_bytes(gzip_bytes(metrics[0].read_bytes()))
        written.append(metrics[1].name)
    elif metrics[1].is_file():
        shutil.copyfile(metrics[1], out / metrics[1].name)
        written.append(metrics[1].name)
    if log is None:
        return written + ["no evaluation log: no outcomes"]
    info = RunInfo.of(trajectories[0], arm=arm, seed=seed, commit=commit)
    try:
        path = write_run(out, info, outcomes_from_trajectories(trajectories))
    except OutcomeError as exc:
        raise CLIError(str(exc)) from None
    skipped = [f"left out {issue}" for issue in issues]
    return written + ["run.json", f"{path.name} ({len(set(t.seed for t in trajectories))} tasks from {log.name})"] + skipped


def run_export(args: argparse.Namespace) -> int:
    run, out = Path(args.run_dir), Path(args.out_dir)
    if not run.is_dir():
        raise CLIError(f"{run}: no such folder")
    if out.resolve() == run.resolve():
        raise CLIError("OUT_DIR must differ from RUN_DIR")
    for line in export_run(run, out, arm=args.arm, seed=args.seed, commit=args.commit, log_name=args.log):
        print(f"{out}: {line}")
    return 0
