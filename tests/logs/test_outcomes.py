"""hindsight.logs.outcomes: the kept form of a run's test evaluation (run.json and its outcome table)."""

import gzip
import json

import pytest

from hindsight.logs import RunDir, read_trajectories
from hindsight.logs.outcomes import (
    Outcome, OutcomeError, RunInfo, outcomes_from_trajectories, outcomes_path, read_outcomes, read_run, write_run,
)
from hindsight.types import Step, Trajectory

INFO = RunInfo(env="frozenlake", env_kwargs={"size": 3, "max_steps": 6}, split="test", arm="cso", seed=1,
               model="smollm2+frozenlake3", commit="46cd982")
OUTCOMES = [Outcome(8, True, 1.0, 3, ("down", "", "right")), Outcome(30, False, 0.0, 1, ("up",))]


def step(index: int, action: str | None) -> Step:
    return Step(index=index, observation="", state_key="", raw="", action=action, analysis=None,
                valid=action is not None, reward=0.0, score=0.0, feedback="")


def trajectory(seed: int, actions: list[str | None], success: bool, attempt: int = 1) -> Trajectory:
    return Trajectory(env="frozenlake", seed=seed, instruction="", steps=tuple(step(i, a) for i, a in enumerate(actions)),
                      final_observation="", final_state_key="", success=success, score=float(success),
                      terminated=True, truncated=False, model="random", env_kwargs={"size": 3},
                      meta={"reflexion": {"attempt": attempt}})


@pytest.mark.parametrize("compress", [True, False])
def test_a_run_reads_back_as_written(tmp_path, compress):
    path = write_run(tmp_path / "run", INFO, OUTCOMES, compress=compress)
    assert path.name == ("outcomes.jsonl.gz" if compress else "outcomes.jsonl")
    assert outcomes_path(tmp_path / "run") == path
    assert read_run(tmp_path / "run") == (INFO, OUTCOMES)
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == {
        "env": "frozenlake", "env_kwargs": {"size": 3, "max_steps": 6}, "split": "test", "arm": "cso", "seed": 1,
        "model": "smollm2+frozenlake3", "commit": "46cd982"}


def test_writing_again_replaces_the_other_spelling_and_gives_the_same_bytes(tmp_path):
    write_run(tmp_path, INFO, OUTCOMES, compress=False)
    first = write_run(tmp_path, INFO, OUTCOMES).read_bytes()
    assert not (tmp_path / "outcomes.jsonl").exists()
    assert write_run(tmp_path, INFO, OUTCOMES).read_bytes() == first  # no timestamp in the gzip header
    assert gzip.decompress(first).decode().splitlines()[0] == (
        '{"task_seed": 8, "success": true, "score": 1.0, "steps": 3, "actions": ["down", "", "right"]}')


@pytest.mark.parametrize("line, message", [
    ('{"task_seed": 3, "success": true', "not valid JSON"),
    ('{"task_seed": 3, "success": true, "score": 1.0, "actions": []}', "missing field steps"),
    ('{"task_seed": 3, "success": 1, "score": 1.0, "steps": 0, "actions": []}', "'success' has the wrong type"),
    ('{"task_seed": 3, "success": true, "score": 1.0, "steps": 2, "actions": ["up"]}', "'steps' is 2 but there are 1"),
    ('{"task_seed": 3, "success": true, "score": 1.0, "steps": 1, "actions": [null]}', "list of strings"),
    ('{"task_seed": 8, "success": true, "score": 1.0, "steps": 0, "actions": []}', "task seed 8 appears twice"),
])
def test_a_broken_line_is_an_error_naming_file_and_line(tmp_path, line, message):
    path = write_run(tmp_path, INFO, OUTCOMES[:1], compress=False)
    path.write_text(path.read_text() + "\n" + line + "\n")  # line 3, after a blank line
    with pytest.raises(OutcomeError, match=rf"outcomes.jsonl:3: .*{message}"):
        read_run(tmp_path)


def test_missing_or_broken_files_are_clear_errors(tmp_path):
    with pytest.raises(OutcomeError, match="run.json: no such file"):
        read_run(tmp_path)
    (tmp_path / "run.json").write_text('{"env": "frozenlake"}')
    with pytest.raises(OutcomeError, match="run.json: missing fields env_kwargs, split, arm, seed, model, commit"):
        read_run(tmp_path)
    write_run(tmp_path, INFO, OUTCOMES)
    (tmp_path / "outcomes.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(OutcomeError, match="outcomes.jsonl.gz: unreadable"):
        read_outcomes(tmp_path / "outcomes.jsonl.gz")
    (tmp_path / "outcomes.jsonl.gz").unlink()
    with pytest.raises(OutcomeError, match="no outcomes.jsonl"):
        read_run(tmp_path)


def test_outcomes_come_from_the_log_with_each_tasks_last_attempt_and_empty_actions_for_unparsed_turns(tmp_path):
    run = RunDir(tmp_path)
    with run.trajectory_writer("eval", env="frozenlake", split="test") as writer:
        writer.write_trajectory(trajectory(5, ["up", None], False, attempt=1))
        writer.write_trajectory(trajectory(9, ["left"], True))
        writer.write_trajectory(trajectory(5, ["down", "right", "down"], True, attempt=2))
    logged = list(read_trajectories(tmp_path))
    assert outcomes_from_trajectories(logged) == [Outcome(5, True, 1.0, 3, ("down", "right", "down")),
                                                  Outcome(9, True, 1.0, 1, ("left",))]
    assert RunInfo.of(logged[0], arm="react", seed=None, commit=None) == RunInfo(
        env="frozenlake", env_kwargs={"size": 3}, split="test", arm="react", seed=None, model="random", commit=None)
    assert outcomes_from_trajectories([trajectory(4, ["up", None], False)])[0].actions == ("up", "")
