"""Trajectory log format, version 2 (documented in docs/log-format.md).

A trajectory file is JSON Lines. Its first line is a header record
`{"kind": "header", "format": "hindsight.trajectories", "version": 2, ...}`; every
following line is one trajectory record `{"kind": "trajectory", "version": 2, ...}`.
Records are plain JSON so other tools can read them without Hindsight.

Version 2 added the optional `assessment` object of a step (what the policy wrote before
its action: Self-Guide's self-assessment, ReFlAct's reflection). Version 1 records have
no such field and read unchanged.

A step may also carry `action_entropies` (the entropy of the model's next-token
distribution at each token of the parsed action). The field is optional and new records
that have it are still version 2: readers that predate it ignore it, and records
without it read as before. The same holds for `candidates` (a step-level best-of-N turn's
sampled actions and their process rewards).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from hindsight.types import Assessment, Candidate, Step, Trajectory

FORMAT = "hindsight.trajectories"
VERSION = 2
# Versions this reader understands; a record is read by the rules of its own version.
READABLE_VERSIONS = (1, 2)
#: A training run's per-update metric rows, beside its `trajectories/` folder: one name for
#: the writer and every reader.
METRICS_FILE = "metrics.jsonl"


class SchemaError(ValueError):
    """A record that does not follow the trajectory schema."""


def header_record(**fields: Any) -> dict[str, Any]:
    return {"kind": "header", "format": FORMAT, "version": VERSION, **fields}


def _drop_empty(record: dict[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
    """Leave out optional fields that are None; tuples become lists."""
    for key in optional:
        if record[key] is None:
            del record[key]
        elif isinstance(record[key], tuple):
            record[key] = list(record[key])
    return record


_OPTIONAL_STEP_FIELDS = (
    "parse_error", "finish_reason", "token_ids", "logprobs", "admissible_actions", "assessment", "action_entropies",
    "candidates",
)
_OPTIONAL_ASSESSMENT_FIELDS = ("label", "parse_error", "finish_reason", "token_ids", "logprobs")


def step_to_record(step: Step) -> dict[str, Any]:
    record = asdict(step)
    if record["assessment"] is not None:
        record["assessment"] = _drop_empty(record["assessment"], _OPTIONAL_ASSESSMENT_FIELDS)
    if record["candidates"] is not None:
        record["candidates"] = [_drop_empty(candidate, ("prm_error",)) for candidate in record["candidates"]]
    return _drop_empty(record, _OPTIONAL_STEP_FIELDS)


def trajectory_to_record(trajectory: Trajectory) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "trajectory", "version": VERSION}
    record.update(
        id=trajectory.id,
        env=trajectory.env,
        env_kwargs=dict(trajectory.env_kwargs),
        seed=trajectory.seed,
        split=trajectory.split,
        model=trajectory.model,
        memory=trajectory.memory,
        instruction=trajectory.instruction,
        success=trajectory.success,
        score=trajectory.score,
        num_steps=trajectory.num_steps,
        terminated=trajectory.terminated,
        truncated=trajectory.truncated,
        final_observation=trajectory.final_observation,
        final_state_key=trajectory.final_state_key,
        steps=[step_to_record(step) for step in trajectory.steps],
    )
    if trajectory.guidance:
        # Only episodes that were shown advice carry the field, so other logs stay as they were.
        record["guidance"] = trajectory.guidance
    # Method-specific extras (e.g. an `echo` object) sit at the top level of the record.
    for key, value in trajectory.meta.items():
        if key in record:
            raise SchemaError(f"meta key {key!r} would overwrite a schema field")
        record[key] = value
    return record


_TRAJECTORY_FIELDS = {
    "id", "env", "env_kwargs", "seed", "split", "model", "memory", "instruction", "success", "score",
    "num_steps", "terminated", "truncated", "final_observation", "final_state_key", "steps", "kind", "version",
    "guidance",
}


def _tuple_or_none(value: Any) -> tuple | None:
    return None if value is None else tuple(value)


def _floats_or_none(value: Any) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(x) for x in value)


def assessment_from_record(record: Mapping[str, Any]) -> Assessment:
    return Assessment(
        kind=str(record["kind"]),
        text=str(record.get("text", "")),
        label=record.get("label"),
        reward=float(record.get("reward", 0.0)),
        parse_error=record.get("parse_error"),
        finish_reason=record.get("finish_reason"),
        token_ids=_tuple_or_none(record.get("token_ids")),
        logprobs=_tuple_or_none(record.get("logprobs")),
    )


def candidate_from_record(record: Mapping[str, Any]) -> Candidate:
    score = record.get("score")
    return Candidate(action=record.get("action"), score=None if score is None else float(score),
                     prm_error=record.get("prm_error"))


def step_from_record(record: Mapping[str, Any]) -> Step:
    try:
        assessment = record.get("assessment")
        candidates = record.get("candidates")
        return Step(
            index=int(record["index"]),
            observation=str(record["observation"]),
            state_key=str(record["state_key"]),
            raw=str(record["raw"]),
            action=record.get("action"),
            analysis=record.get("analysis"),
            valid=bool(record["valid"]),
            reward=float(record["reward"]),
            score=float(record["score"]),
            feedback=str(record.get("feedback", "")),
            parse_error=record.get("parse_error"),
            finish_reason=record.get("finish_reason"),
            token_ids=_tuple_or_none(record.get("token_ids")),
            logprobs=_tuple_or_none(record.get("logprobs")),
            admissible_actions=_tuple_or_none(record.get("admissible_actions")),
            assessment=None if assessment is None else assessment_from_record(assessment),
            action_entropies=_floats_or_none(record.get("action_entropies")),
            candidates=None if candidates is None else tuple(candidate_from_record(c) for c in candidates),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SchemaError(f"bad step record: {exc!r}") from exc


def trajectory_from_record(record: Mapping[str, Any]) -> Trajectory:
    if record.get("kind") != "trajectory":
        raise SchemaError(f"not a trajectory record (kind={record.get('kind')!r})")
    version = record.get("version")
    if version not in READABLE_VERSIONS:
        raise SchemaError(f"unsupported trajectory record version {version!r} (this reader knows "
                          f"{', '.join(map(str, READABLE_VERSIONS))})")
    try:
        return Trajectory(
            id=str(record.get("id", "")),
            env=str(record["env"]),
            env_kwargs=dict(record.get("env_kwargs") or {}),
            seed=int(record["seed"]),
            split=str(record.get("split", "test")),
            model=str(record.get("model", "")),
            memory=str(record.get("memory", "full")),
            instruction=str(record.get("instruction", "")),
            steps=tuple(step_from_record(step) for step in record["steps"]),
            final_observation=str(record.get("final_observation", "")),
            final_state_key=str(record.get("final_state_key", "")),
            success=bool(record["success"]),
            score=float(record["score"]),
            terminated=bool(record.get("terminated", False)),
            truncated=bool(record.get("truncated", False)),
            guidance=str(record.get("guidance") or ""),
            meta={key: value for key, value in record.items() if key not in _TRAJECTORY_FIELDS},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"bad trajectory record: {exc!r}") from exc
