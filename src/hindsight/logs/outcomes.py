"""The kept form of a run's test evaluation: who ran what, and each task's outcome with its actions.

A comparison keeps, per run, `run.json` (a `RunInfo`) and `outcomes.jsonl` or `outcomes.jsonl.gz`
(one `Outcome` per test task). The actions are the exact strings the rollout engine passed to
`env.step`, in order, so replaying them after `reset(task_seed)` reproduces the outcome
(`hindsight outcomes check`); the tables and their paired differences need nothing else.
The format is described in docs/log-format.md ("Kept outcomes").
"""

from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from hindsight.types import Trajectory

RUN_FILE = "run.json"
OUTCOMES_FILE = "outcomes.jsonl"
#: Both spellings the reader accepts, the compressed one first (what `write_run` writes by default).
OUTCOMES_FILES = (OUTCOMES_FILE + ".gz", OUTCOMES_FILE)


class OutcomeError(Exception):
    """A kept run that cannot be read or written; the message names the file (and line)."""


@dataclass(frozen=True)
class RunInfo:
    """What a kept run evaluated: the environment and split its tasks came from, and who acted.

    `arm` is the comparison arm (`start` for an evaluation before training, the method's name for
    a trained run, the evaluation's own name for a prompting baseline); `seed` is the training
    seed (None where the run has none); `commit` is the toolkit commit it ran, where known.
    """

    env: str
    env_kwargs: Mapping[str, Any]
    split: str
    arm: str
    seed: int | None
    model: str
    commit: str | None

    @classmethod
    def of(cls, trajectory: Trajectory, *, arm: str, seed: int | None, commit: str | None) -> RunInfo:
        """The run info of an evaluation, from one of its trajectories (all share env, kwargs, split and model)."""
        return cls(env=trajectory.env, env_kwargs=dict(trajectory.env_kwargs), split=trajectory.split, arm=arm,
                   seed=seed, model=trajectory.model, commit=commit)


@dataclass(frozen=True)
class Outcome:
    """One test task: its final success and score, its step count and the actions sent to `env.step`.

    `steps == len(actions)`: an unparseable answer is a step too, sent as "" (the engine's
    `env.step(parsed_action or "")`).
    """

    task_seed: int
    success: bool
    score: float
    steps: int
    actions: tuple[str, ...] = field(default=())


def outcome_of(trajectory: Trajectory) -> Outcome:
    """A trajectory's outcome: the string each step sent to the environment, as the engine sent it."""
    return Outcome(task_seed=trajectory.seed, success=trajectory.success, score=trajectory.score,
                   steps=trajectory.num_steps, actions=tuple(step.action or "" for step in trajectory.steps))


def outcomes_from_trajectories(trajectories: Iterable[Trajectory]) -> list[Outcome]:
    """One outcome per task, in the order tasks first appear.

    A task logged more than once (Reflexion logs every attempt, in order) keeps its last
    attempt, which is the one its evaluation counts. Pass `read_trajectories(LOG)`.
    """
    last: dict[int, Outcome] = {}
    for trajectory in trajectories:
        last[trajectory.seed] = outcome_of(trajectory)
    return list(last.values())


def outcomes_path(directory: str | os.PathLike[str]) -> Path | None:
    """The outcomes file of a kept run folder, or None when it has none."""
    for name in OUTCOMES_FILES:
        path = Path(directory) / name
        if path.is_file():
            return path
    return None


def write_run(directory: str | os.PathLike[str], info: RunInfo, outcomes: Iterable[Outcome], *,
              compress: bool = True) -> Path:
    """Write `run.json` and the outcomes file (gzip unless `compress` is False) into `directory`.

    The gzip stream carries no timestamp, so exporting the same run twice writes the same bytes.
    Returns the outcomes file's path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RUN_FILE).write_text(json.dumps(asdict(info), indent=2) + "\n", encoding="utf-8")
    seen: set[int] = set()
    lines = []
    for outcome in outcomes:
        if outcome.task_seed in seen:
            raise OutcomeError(f"{directory}: task seed {outcome.task_seed} appears twice")
        seen.add(outcome.task_seed)
        lines.append(json.dumps({**asdict(outcome), "actions": list(outcome.actions)}, ensure_ascii=False) + "\n")
    data = "".join(lines).encode("utf-8")
    for name in OUTCOMES_FILES:  # never leave the other spelling behind, stale
        (directory / name).unlink(missing_ok=True)
    path = directory / (OUTCOMES_FILES[0] if compress else OUTCOMES_FILE)
    if compress:
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as handle:
            handle.write(data)
        data = buffer.getvalue()
    path.write_bytes(data)
    return path


def read_run_info(directory: str | os.PathLike[str]) -> RunInfo:
    """A kept run folder's `run.json`."""
    path = Path(directory) / RUN_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OutcomeError(f"{path}: no such file (not a kept run)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OutcomeError(f"{path}: not valid JSON ({exc})") from None
    return _run_info(record, str(path))


def read_outcomes(path: str | os.PathLike[str]) -> list[Outcome]:
    """Every outcome of an outcomes file (`.jsonl` or `.jsonl.gz`); any broken line is an error naming its line."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    outcomes, seen = [], set()
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise OutcomeError(f"{where}: not valid JSON ({exc.msg})") from None
                outcome = _outcome(record, where)
                if outcome.task_seed in seen:
                    raise OutcomeError(f"{where}: task seed {outcome.task_seed} appears twice")
                seen.add(outcome.task_seed)
                outcomes.append(outcome)
    except FileNotFoundError:
        raise OutcomeError(f"{path}: no such file") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # a truncated or corrupt gzip stream
        raise OutcomeError(f"{path}: unreadable ({exc})") from None
    return outcomes


def read_run(directory: str | os.PathLike[str]) -> tuple[RunInfo, list[Outcome]]:
    """A kept run folder's run info and outcomes."""
    info = read_run_info(directory)
    path = outcomes_path(directory)
    if path is None:
        raise OutcomeError(f"{directory}: no {OUTCOMES_FILE} or {OUTCOMES_FILE}.gz")
    return info, read_outcomes(path)


def _run_info(record: Any, where: str) -> RunInfo:
    if not isinstance(record, dict):
        raise OutcomeError(f"{where}: expected a JSON object")
    _require(record, where, ("env", "env_kwargs", "split", "arm", "seed", "model", "commit"))
    _check(where, "env", record["env"], str)
    _check(where, "env_kwargs", record["env_kwargs"], dict)
    _check(where, "split", record["split"], str)
    _check(where, "arm", record["arm"], str)
    _check(where, "seed", record["seed"], int, optional=True)
    _check(where, "model", record["model"], str)
    _check(where, "commit", record["commit"], str, optional=True)
    return RunInfo(env=record["env"], env_kwargs=record["env_kwargs"], split=record["split"], arm=record["arm"],
                   seed=record["seed"], model=record["model"], commit=record["commit"])


def _outcome(record: Any, where: str) -> Outcome:
    if not isinstance(record, dict):
        raise OutcomeError(f"{where}: expected a JSON object")
    _require(record, where, ("task_seed", "success", "score", "steps", "actions"))
    _check(where, "task_seed", record["task_seed"], int)
    _check(where, "success", record["success"], bool)
    _check(where, "score", record["score"], (int, float))
    _check(where, "steps", record["steps"], int)
    actions = record["actions"]
    if not isinstance(actions, list) or not all(isinstance(action, str) for action in actions):
        raise OutcomeError(f"{where}: 'actions' must be a list of strings")
    if record["steps"] != len(actions):
        raise OutcomeError(f"{where}: 'steps' is {record['steps']} but there are {len(actions)} actions")
    return Outcome(task_seed=record["task_seed"], success=record["success"], score=float(record["score"]),
                   steps=record["steps"], actions=tuple(actions))


def _require(record: Mapping[str, Any], where: str, names: tuple[str, ...]) -> None:
    missing = [name for name in names if name not in record]
    if missing:
        raise OutcomeError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")


def _check(where: str, name: str, value: Any, kind: type | tuple[type, ...], optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int to Python; a JSON `true` where a number belongs is still a mistake.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise OutcomeError(f"{where}: '{name}' has the wrong type ({type(value).__name__})")
