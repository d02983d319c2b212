"""Reading trajectory logs that Hindsight did not write, next to its own.

Three line-oriented formats are recognised, file by file, from the first record:

* ``hindsight`` — the native trajectory format (`hindsight.logs.schema`).
* ``tide`` — the result JSONL of the official TIDE evaluation code: one line per task
  sample, ``traj_rollouts[].rollout_results`` holding ``success`` and ``steps[]`` with
  ``observation``, ``action``, ``analysis`` and ``env_feedback.action_is_valid``. Only the
  first rollout of a sample is read, because the published TIDE numbers were computed
  that way. The lines do not say which environment they come from; the caller passes it.
* ``generic`` — a small schema any agent can emit (documented in docs/diagnostics.md):
  ``{"success": bool, "steps": [{"observation": str, "action": str|null, ...}], ...}``.

Every format is turned into a `TrajectoryView`: a column-oriented, read-only summary of
one episode (observations, actions, validity, per-step entropy, ...). Diagnostics work on
views only, so native and foreign logs go through one code path; building a view does
not create one object per step, which keeps diagnosing large logs close to the cost of
parsing them. `import_trajectories` turns foreign logs into full `Trajectory` objects
for the rest of the toolkit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from hindsight.logs.reader import IssueHandler, LogIssue, _ignore, iter_json_lines, trajectory_files
from hindsight.logs.schema import FORMAT as HINDSIGHT_FORMAT
from hindsight.logs.schema import READABLE_VERSIONS
from hindsight.logs.schema import SchemaError
from hindsight.types import Step, Trajectory

HINDSIGHT = "hindsight"
TIDE = "tide"
GENERIC = "generic"
FORMATS = (HINDSIGHT, TIDE, GENERIC)


@dataclass(frozen=True)
class TrajectoryView:
    """One episode as parallel per-step columns.

    Index ``i`` of every column describes step ``i``: `observations[i]` and
    `state_keys[i]` are the state *before* `actions[i]`. `state_keys` is None when the
    log has no canonical state (then the observation text stands in for it, see
    `states`). `entropies[i]` estimates the policy's uncertainty on that step (see
    `step_entropy_from_logprobs`); the column is None when nothing was logged.
    `final_*` describe the state after the last action, when the log has it.
    """

    env: str
    success: bool
    observations: tuple[str, ...]
    actions: tuple[str | None, ...]
    valid: tuple[bool, ...]
    state_keys: tuple[str, ...] | None = None
    entropies: tuple[float | None, ...] | None = None
    embeddings: tuple[tuple[float, ...] | None, ...] | None = None
    raws: tuple[str | None, ...] | None = None
    analyses: tuple[str | None, ...] | None = None
    final_observation: str | None = None
    final_state_key: str | None = None
    instruction: str = ""
    id: str = ""
    model: str = ""
    memory: str = ""
    score: float | None = None
    seed: int | None = None
    source: str = ""

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def success_turn(self) -> int | None:
        """The turn the task was solved on: the episode's length when it succeeded."""
        return len(self.actions) if self.success else None

    @property
    def states(self) -> tuple[str, ...]:
        """The per-step state identity: the canonical key when logged, else the text.

        An empty key means the environment did not provide one, so the observation is
        used for the whole episode rather than mixing the two kinds of identity.
        """
        if self.state_keys is not None and all(self.state_keys):
            return self.state_keys
        return self.observations

    @property
    def final_state(self) -> str | None:
        if self.state_keys is not None and all(self.state_keys):
            return self.final_state_key or None
        return self.final_observation


def step_entropy_from_logprobs(logprobs: Any) -> float | None:
    """Mean negative log-probability of the sampled tokens of one response.

    For tokens sampled from the policy, E[-log p(token)] is the entropy of the sampling
    distribution, so the mean surprisal over a response is an unbiased per-token entropy
    estimate that needs only the log-probabilities a backend already reports.
    """
    if not logprobs:
        return None
    try:
        total = math.fsum(-float(lp) for lp in logprobs)
    except (TypeError, ValueError):
        return None
    return total / len(logprobs)


def normalise_env_id(name: str) -> str:
    """Canonical environment id: lower case, separators dropped, known aliases folded.

    The official TIDE code spells environments ``frozen_lake`` and ``sodoku``.
    """
    key = "".join(ch for ch in str(name).lower() if ch.isalnum())
    return _ENV_ALIASES.get(key, key)


_ENV_ALIASES = {
    "sodoku": "sudoku",
    "alfworldtw": "alfworld",
    "sciworld": "scienceworld",
    "webshopsim": "webshop",
}


def detect_format(record: Any) -> str | None:
    """The log format a record belongs to, or None when it matches none of them."""
    if not isinstance(record, dict):
        return None
    kind = record.get("kind")
    if kind == "header":
        return HINDSIGHT if record.get("format") == HINDSIGHT_FORMAT else None
    if kind == "trajectory":
        return HINDSIGHT
    if isinstance(record.get("traj_rollouts"), list):
        return TIDE
    if isinstance(record.get("steps"), list) and "success" in record:
        return GENERIC
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _action(value: Any) -> str | None:
    return None if value is None else _text(value)


def view_from_hindsight_record(record: Mapping[str, Any], source: str = "") -> TrajectoryView:
    """A view of a native trajectory record, without building `Step` objects."""
    if record.get("kind") != "trajectory":
        raise SchemaError(f"not a trajectory record (kind={record.get('kind')!r})")
    if record.get("version") not in READABLE_VERSIONS:
        raise SchemaError(f"unsupported trajectory record version {record.get('version')!r}")
    try:
        steps = record["steps"]
        observations = tuple(_text(step["observation"]) for step in steps)
        keys = tuple(_text(step.get("state_key")) for step in steps)
        actions = tuple(_action(step.get("action")) for step in steps)
        valid = tuple(bool(step["valid"]) for step in steps)
        entropies = tuple(step_entropy_from_logprobs(step.get("logprobs")) for step in steps)
        return TrajectoryView(
            env=normalise_env_id(record["env"]),
            success=bool(record["success"]),
            observations=observations,
            actions=actions,
            valid=valid,
            state_keys=keys,
            entropies=entropies if any(e is not None for e in entropies) else None,
            raws=tuple(_text(step.get("raw")) for step in steps),
            analyses=tuple(step.get("analysis") for step in steps),
            final_observation=_text(record.get("final_observation")),
            final_state_key=_text(record.get("final_state_key")),
            instruction=_text(record.get("instruction")),
            id=_text(record.get("id")),
            model=_text(record.get("model")),
            memory=_text(record.get("memory")),
            score=float(record["score"]) if record.get("score") is not None else None,
            seed=int(record["seed"]) if record.get("seed") is not None else None,
            source=source,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"bad trajectory record: {exc!r}") from exc


def _tide_columns(steps: list[Any]) -> tuple[tuple, tuple, tuple, tuple, tuple]:
    """(observations, actions, validity, action entropies, analyses) of a TIDE rollout.

    One pass with the common case inlined: this loop runs once per step of every log
    diagnosed, and dominates diagnosis time after JSON parsing.
    """
    observations, actions, valid, entropies, analyses = [], [], [], [], []
    for step in steps:
        observation = step.get("observation")
        observations.append(observation if type(observation) is str else _text(observation))
        action = step.get("action")
        actions.append(action if action is None or type(action) is str else str(action))
        feedback = step.get("env_feedback")
        # A step the runner never executed has no feedback; that is not evidence of an
        # invalid action, so it counts as valid.
        valid.append(bool(feedback.get("action_is_valid", True)) if type(feedback) is dict else True)
        try:
            entropy = step["token_entropy_stats"]["action_stats"]["mean"]
            entropies.append(float(entropy) if entropy is not None else None)
        except (KeyError, TypeError, ValueError):
            entropies.append(None)
        analyses.append(step.get("analysis"))
    return tuple(observations), tuple(actions), tuple(valid), tuple(entropies), tuple(analyses)


def view_from_tide_record(record: Mapping[str, Any], env: str = "", source: str = "") -> TrajectoryView:
    """A view of the first rollout of one sample of an official TIDE result file.

    TIDE logs carry no canonical state, so `state_keys` stays None and state equality
    falls back to the observation text (the official analysis does the same).
    """
    try:
        rollouts = record["traj_rollouts"]
        if not rollouts:
            raise SchemaError("sample has no rollouts")
        result = rollouts[0]["rollout_results"]
        observations, actions, valid, entropies, analyses = _tide_columns(result["steps"])
        seed = record.get("seed")
        return TrajectoryView(
            env=normalise_env_id(env) if env else "",
            success=bool(result.get("success", False)),
            observations=observations,
            actions=actions,
            valid=valid,
            entropies=entropies if any(e is not None for e in entropies) else None,
            analyses=analyses,
            instruction=_text(record.get("query")),
            id=f"seed-{seed}" if seed is not None else "",
            seed=int(seed) if isinstance(seed, int) else None,
            source=source,
        )
    except SchemaError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SchemaError(f"bad TIDE sample: {exc!r}") from exc


def view_from_generic_record(record: Mapping[str, Any], env: str = "", source: str = "") -> TrajectoryView:
    """A view of one line of the generic schema (see docs/diagnostics.md)."""
    try:
        steps = record["steps"]
        observations = tuple(_text(step["observation"]) for step in steps)
        actions = tuple(_action(step.get("action")) for step in steps)
        valid = tuple(bool(step.get("valid", True)) for step in steps)
        has_state = any("state" in step for step in steps)
        keys = tuple(_text(step.get("state")) for step in steps) if has_state else None
        entropies = tuple(
            float(step["entropy"]) if step.get("entropy") is not None
            else step_entropy_from_logprobs(step.get("logprobs"))
            for step in steps
        )
        has_embedding = any(step.get("embedding") is not None for step in steps)
        embeddings = (
            tuple(
                tuple(float(x) for x in step["embedding"]) if step.get("embedding") is not None else None
                for step in steps
            )
            if has_embedding
            else None
        )
        has_raw = any("raw" in step for step in steps)
        score = record.get("score")
        seed = record.get("seed")
        return TrajectoryView(
            env=normalise_env_id(record.get("env") or env),
            success=bool(record["success"]),
            observations=observations,
            actions=actions,
            valid=valid,
            state_keys=keys,
            entropies=entropies if any(e is not None for e in entropies) else None,
            embeddings=embeddings,
            raws=tuple(step.get("raw") for step in steps) if has_raw else None,
            analyses=tuple(step.get("analysis") for step in steps) if any("analysis" in s for s in steps) else None,
            final_observation=_text(record["final_observation"]) if "final_observation" in record else None,
            final_state_key=_text(record["final_state"]) if "final_state" in record else None,
            instruction=_text(record.get("instruction")),
            id=_text(record.get("id")),
            model=_text(record.get("model")),
            memory=_text(record.get("memory")),
            score=float(score) if score is not None else None,
            seed=int(seed) if isinstance(seed, int) else None,
            source=source,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"bad generic trajectory record: {exc!r}") from exc


def view_from_trajectory(trajectory: Trajectory, source: str = "") -> TrajectoryView:
    """A view of an in-memory `Trajectory` (for diagnosing without a log file)."""
    steps = trajectory.steps
    entropies = tuple(step_entropy_from_logprobs(step.logprobs) for step in steps)
    return TrajectoryView(
        env=normalise_env_id(trajectory.env),
        success=trajectory.success,
        observations=tuple(step.observation for step in steps),
        actions=tuple(step.action for step in steps),
        valid=tuple(step.valid for step in steps),
        state_keys=tuple(step.state_key for step in steps),
        entropies=entropies if any(e is not None for e in entropies) else None,
        raws=tuple(step.raw for step in steps),
        analyses=tuple(step.analysis for step in steps),
        final_observation=trajectory.final_observation,
        final_state_key=trajectory.final_state_key,
        instruction=trajectory.instruction,
        id=trajectory.id,
        model=trajectory.model,
        memory=trajectory.memory,
        score=trajectory.score,
        seed=trajectory.seed,
        source=source,
    )


def read_views(
    path: str | os.PathLike[str], on_issue: IssueHandler = _ignore, env: str = ""
) -> Iterator[TrajectoryView]:
    """Stream views from one log file or every trajectory file of a run directory.

    The format is decided per file by its first parseable record. `env` names the
    environment for records that do not carry one (TIDE result files). Unreadable lines
    and records that do not fit their format are reported through `on_issue` and skipped.
    """
    for file in trajectory_files(path):
        yield from _read_file_views(file, on_issue, env)


def _read_file_views(file: Path, on_issue: IssueHandler, env: str) -> Iterator[TrajectoryView]:
    name = str(file)
    fmt: str | None = None
    for line_number, record in iter_json_lines(file, on_issue):
        if fmt is None:
            fmt = detect_format(record)
            if fmt is None:
                why = "not a recognised trajectory log (hindsight, TIDE or generic JSONL); file skipped"
                on_issue(LogIssue(name, line_number, why))
                return
        if not isinstance(record, dict):
            on_issue(LogIssue(name, line_number, "not a JSON object"))
            continue
        source = f"{name}:{line_number}"
        try:
            if fmt == HINDSIGHT:
                if record.get("kind") == "header":
                    if record.get("format") != HINDSIGHT_FORMAT:
                        on_issue(LogIssue(name, line_number, f"unknown log format {record.get('format')!r}"))
                    continue
                yield view_from_hindsight_record(record, source)
            elif fmt == TIDE:
                yield view_from_tide_record(record, env, source)
            else:
                yield view_from_generic_record(record, env, source)
        except SchemaError as exc:
            on_issue(LogIssue(name, line_number, str(exc)))


def trajectory_from_view(view: TrajectoryView) -> Trajectory:
    """A full `Trajectory` built from a view, for foreign logs.

    Fields a foreign log lacks get neutral values: rewards are 0 except that the last
    step of a successful episode carries reward and score 1, and `feedback` is the next
    observation.
    """
    n = view.length
    states = view.state_keys if view.state_keys is not None else view.observations
    steps = []
    for i in range(n):
        last = i == n - 1
        won = last and view.success
        steps.append(
            Step(
                index=i,
                observation=view.observations[i],
                state_key=states[i],
                raw=(view.raws[i] if view.raws is not None else None) or (view.actions[i] or ""),
                action=view.actions[i],
                analysis=view.analyses[i] if view.analyses is not None else None,
                valid=view.valid[i],
                reward=1.0 if won else 0.0,
                score=1.0 if won else 0.0,
                feedback=view.observations[i + 1] if not last else (view.final_observation or ""),
            )
        )
    return Trajectory(
        env=view.env,
        seed=view.seed if view.seed is not None else 0,
        instruction=view.instruction,
        steps=tuple(steps),
        final_observation=view.final_observation or "",
        final_state_key=view.final_state_key or "",
        success=view.success,
        score=view.score if view.score is not None else float(view.success),
        terminated=view.success,
        truncated=False,
        model=view.model,
        memory=view.memory or "full",
        id=view.id,
        meta={"imported_from": view.source} if view.source else {},
    )


def import_trajectories(
    path: str | os.PathLike[str], on_issue: IssueHandler = _ignore, env: str = ""
) -> Iterator[Trajectory]:
    """Stream any supported log as `Trajectory` objects."""
    for view in read_views(path, on_issue, env):
        yield trajectory_from_view(view)
