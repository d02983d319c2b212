"""Reading trajectory logs that Hindsight did not write, next to its own.

Four line-oriented formats are recognised, file by file, from the first record:

* ``hindsight`` — the native trajectory format (`hindsight.logs.schema`).
* ``tide`` — the result JSONL of the official TIDE evaluation code: one line per task
  sample, ``traj_rollouts[].rollout_results`` holding ``success`` and ``steps[]`` with
  ``observation``, ``action``, ``analysis`` and ``env_feedback.action_is_valid``. Only the
  first rollout of a sample is read, because the published TIDE numbers were computed
  that way. The lines do not say which environment they come from; the caller passes it.
* ``tide-instance`` — the per-instance trajectory JSONL that TIDE's analysis of other
  agents' logs (its GUI study: OSWorld, AndroidWorld, WindowsAgentArena) converts them
  to: one line per task instance, ``{"dataset", "model", "task", "data_dir", "success",
  "trajectory": [{"step_idx", "observation", "action": [str, ...]}]}``. An observation is
  a screenshot path (or the path of its saved embedding), or ``"empty"``; an action is
  the list of calls made at that step; ``success`` may be a fraction (a graded result).
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
TIDE_INSTANCE = "tide-instance"
GENERIC = "generic"


@dataclass(frozen=True)
class TrajectoryView:
    """One episode as parallel per-step columns.

    Index ``i`` of every column describes step ``i``: `observations[i]` and
    `state_keys[i]` are the state *before* `actions[i]`. `state_keys` is None when the
    log has no canonical state (then the observation text stands in for it, see
    `states`). A column is None when the log has nothing for it, and an entry is None
    for a step that logged nothing.

    Two uncertainty columns are kept apart because they measure different things:

    * `entropies[i]` — the action-token entropy of step i: the mean, over the tokens of
      the parsed action, of the entropy of the model's next-token distribution (what the
      TIDE paper compares at loop and non-loop steps). Read from a Hindsight step's
      `action_entropies`, a TIDE step's `token_entropy_stats.action_stats`, or a generic
      step's `entropy`.
    * `surprisals[i]` — the mean surprisal -log p of the sampled tokens of the *whole*
      response, analysis included (`response_surprisal`), computed from logged
      log-probabilities.

    `progress[i]` is the graded task score in [0, 1] after action i, where the log has
    one (a Hindsight step's `score`, a generic step's `score`). `final_*` describe the
    state after the last action, when the log has it. `ending` says what ended the
    episode (one of `ENDINGS`), when the log says: the environment (`env`: a goal reached,
    or a terminal failure such as a fall), the step budget (`budget`), or neither
    (`other`: the agent stopped, or the run cut the episode short).
    """

    env: str
    success: bool
    observations: tuple[str, ...]
    actions: tuple[str | None, ...]
    valid: tuple[bool, ...]
    state_keys: tuple[str, ...] | None = None
    entropies: tuple[float | None, ...] | None = None
    surprisals: tuple[float | None, ...] | None = None
    progress: tuple[float | None, ...] | None = None
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
    ending: str | None = None

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


def response_surprisal(logprobs: Any) -> float | None:
    """Mean surprisal -log p(token) of the sampled tokens of one whole response, in nats.

    For tokens drawn from the policy, the expected surprisal is the entropy of the
    sampling distribution, so this is a cheap per-token uncertainty estimate that needs
    only the log-probabilities a backend reports. It covers every generated token
    (reasoning and action alike) and is noisy (one sample per position), which is why
    it is kept apart from the action-token entropy (`mean_entropy`).
    """
    if not logprobs:
        return None
    try:
        total = math.fsum(-float(lp) for lp in logprobs)
    except (TypeError, ValueError):
        return None
    return total / len(logprobs)


def mean_entropy(entropies: Any) -> float | None:
    """Mean of per-token entropies (one step's action tokens), or None when there are none."""
    if not entropies:
        return None
    try:
        values = [float(e) for e in entropies]
    except (TypeError, ValueError):
        return None
    return math.fsum(values) / len(values)


def _embeddings(steps: list[Any]) -> tuple[tuple[float, ...] | None, ...] | None:
    """The steps' logged `embedding` vectors, None for a step without one, None if no step has one."""
    vectors = tuple(
        tuple(float(x) for x in step["embedding"]) if step.get("embedding") is not None else None for step in steps
    )
    return _column(vectors)


def _column(values: tuple) -> tuple | None:
    """A per-step column, or None when no step has a value."""
    return values if any(v is not None for v in values) else None


def _score(value: Any) -> float | None:
    """A logged score as a float; None when absent or not finite."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


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
    "waa": "windowsagentarena",
    "windowsarena": "windowsagentarena",
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
    if isinstance(record.get("trajectory"), list) and "success" in record:
        return TIDE_INSTANCE
    if isinstance(record.get("steps"), list) and "success" in record:
        return GENERIC
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _action(value: Any) -> str | None:
    return None if value is None else _text(value)


#: What can end an episode (`TrajectoryView.ending`).
ENDINGS = ("env", "budget", "other")


def episode_ending(terminated: Any, truncated: Any) -> str | None:
    """What ended an episode (one of `ENDINGS`), from its terminated/truncated flags (None: neither logged)."""
    if terminated is None and truncated is None:
        return None
    return "env" if terminated else "budget" if truncated else "other"


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
        entropies = tuple(mean_entropy(step.get("action_entropies")) for step in steps)
        surprisals = tuple(response_surprisal(step.get("logprobs")) for step in steps)
        progress = tuple(_score(step.get("score")) for step in steps)
        return TrajectoryView(
            env=normalise_env_id(record["env"]),
            success=bool(record["success"]),
            observations=observations,
            actions=actions,
            valid=valid,
            state_keys=keys,
            entropies=_column(entropies),
            surprisals=_column(surprisals),
            progress=_column(progress),
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
            ending=episode_ending(record.get("terminated"), record.get("truncated")),
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
            stats = step["token_entropy_stats"]["action_stats"]
            entropy = stats.get("mean")
            entropies.append(float(entropy) if entropy is not None else mean_entropy(stats.get("raw")))
        except (KeyError, TypeError, ValueError, AttributeError):
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
            entropies=_column(entropies),
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


#: Observation text TIDE's instance files use for a step without a screenshot.
TIDE_EMPTY_OBSERVATION = "empty"


def _instance_action(value: Any) -> str:
    """A step's action list as one text: the calls joined by newlines, in order.

    Two steps have equal actions exactly when their lists are equal, as TIDE compares
    them (its calls never span lines). A step that made no call has the empty action.
    """
    if isinstance(value, list):
        return "\n".join(_text(call) for call in value)
    return _text(value)


def _instance_success(value: Any) -> float:
    if value is None:
        raise SchemaError("missing success")
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and 0.0 <= value <= 1.0:
        return float(value)
    raise SchemaError(f"success is {value!r}, not a boolean or a number in [0, 1]")


def view_from_tide_instance(record: Mapping[str, Any], env: str = "", source: str = "") -> TrajectoryView:
    """A view of one line of a TIDE per-instance trajectory file.

    The environment is the record's `dataset` (``osworld``, ...), else `env`. The
    numeric `success` is kept as the final progress of the episode: the episode counts
    as solved when it is non-zero (as TIDE's pass@k does), and the progress-rate curve
    weighs it by its value (as TIDE's pass@1 curve does for graded results). Steps may
    carry an `embedding` (a list of floats, Hindsight's addition) for `--state
    embedding`; otherwise state identity is the observation text, so two screenshots are
    the same state only when they are the same file, and every ``"empty"`` observation
    is one shared state (TIDE treats them alike).
    """
    try:
        steps = record["trajectory"]
        for k, step in enumerate(steps):
            if not isinstance(step, dict):
                raise SchemaError(f"TIDE instance step {k} is not a JSON object")
        score = _instance_success(record.get("success"))
        observations = tuple(_text(step.get("observation", TIDE_EMPTY_OBSERVATION)) for step in steps)
        actions = tuple(_instance_action(step.get("action")) for step in steps)
        embeddings = _embeddings(steps)
        progress = tuple([None] * (len(steps) - 1) + [score]) if steps else None
        data_dir = _text(record.get("data_dir")).rstrip("/\\")
        name = data_dir.replace("\\", "/").rsplit("/", 1)[-1] if data_dir else ""
        task = _text(record.get("task"))
        return TrajectoryView(
            env=normalise_env_id(record.get("dataset") or env),
            success=score != 0.0,
            observations=observations,
            actions=actions,
            valid=(True,) * len(steps),
            embeddings=embeddings,
            progress=progress,
            id=f"{task}/{name}" if task and name else (name or task),
            model=_text(record.get("model")),
            score=score,
            source=source,
        )
    except SchemaError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"bad TIDE instance record: {exc!r}") from exc


def view_from_generic_record(record: Mapping[str, Any], env: str = "", source: str = "") -> TrajectoryView:
    """A view of one line of the generic schema (see docs/diagnostics.md)."""
    try:
        steps = record["steps"]
        observations = tuple(_text(step["observation"]) for step in steps)
        actions = tuple(_action(step.get("action")) for step in steps)
        valid = tuple(bool(step.get("valid", True)) for step in steps)
        has_state = any("state" in step for step in steps)
        keys = tuple(_text(step.get("state")) for step in steps) if has_state else None
        entropies = tuple(float(step["entropy"]) if step.get("entropy") is not None else None for step in steps)
        surprisals = tuple(response_surprisal(step.get("logprobs")) for step in steps)
        progress = tuple(_score(step.get("score")) for step in steps)
        embeddings = _embeddings(steps)
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
            entropies=_column(entropies),
            surprisals=_column(surprisals),
            progress=_column(progress),
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
    entropies = tuple(mean_entropy(step.action_entropies) for step in steps)
    surprisals = tuple(response_surprisal(step.logprobs) for step in steps)
    return TrajectoryView(
        env=normalise_env_id(trajectory.env),
        success=trajectory.success,
        observations=tuple(step.observation for step in steps),
        actions=tuple(step.action for step in steps),
        valid=tuple(step.valid for step in steps),
        state_keys=tuple(step.state_key for step in steps),
        entropies=_column(entropies),
        surprisals=_column(surprisals),
        progress=_column(tuple(float(step.score) for step in steps)),
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
        ending=episode_ending(trajectory.terminated, trajectory.truncated),
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
                why = "not a recognised trajectory log (hindsight, TIDE result, TIDE instance or generic JSONL); " \
                      "file skipped"
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
            elif fmt == TIDE_INSTANCE:
                yield view_from_tide_instance(record, env, source)
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
