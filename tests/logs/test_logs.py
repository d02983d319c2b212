import gzip
import json

import pytest

from hindsight.logs import RunDir, SchemaError, read_trajectories, trajectory_from_record, trajectory_to_record
from hindsight.logs.reader import json_fault
from hindsight.types import Step, Trajectory


def make_trajectory(seed: int, **meta) -> Trajectory:
    steps = tuple(
        Step(index=i, observation=f"o{i}", state_key=f"s{i}", raw=f"<action>a{i}</action>", action=f"a{i}",
             analysis="why", valid=i != 1, reward=0.5 * i, score=0.25 * i, feedback=f"o{i + 1}",
             parse_error=None if i != 1 else "bad", token_ids=(1, 2), logprobs=(-0.5, -0.1))
        for i in range(3)
    )
    return Trajectory(env="frozenlake", seed=seed, instruction="do it", steps=steps, final_observation="o3",
                      final_state_key="s3", success=seed % 2 == 0, score=1.0, terminated=True, truncated=False,
                      model="oracle", id=f"frozenlake:{seed}:0", env_kwargs={"size": 4}, meta=meta)


def test_round_trip_through_a_run_directory(tmp_path):
    run = RunDir(tmp_path / "run")
    written = [make_trajectory(s) for s in range(3)] + [make_trajectory(9, echo={"s_o": 0.2})]
    with run.trajectory_writer("eval", env="frozenlake") as writer:
        for trajectory in written:
            writer.write_trajectory(trajectory)
    assert list(read_trajectories(run.path)) == written
    lines = (run.trajectories_dir / "eval.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "header" and json.loads(lines[0])["version"] == 2
    assert json.loads(lines[-1])["echo"] == {"s_o": 0.2}


def test_a_replaced_log_holds_only_its_new_trajectories(tmp_path):
    run = RunDir(tmp_path)
    with run.trajectory_writer("attempts", env="frozenlake") as writer:  # a writer appends
        writer.write_trajectory(make_trajectory(1))
    path = run.replace_trajectories("attempts", (make_trajectory(s) for s in (2, 4)), env="frozenlake", split="train")
    assert path == run.trajectories_dir / "attempts.jsonl"
    assert [t.seed for t in read_trajectories(path)] == [2, 4]
    header = json.loads(path.read_text().splitlines()[0])
    assert header["kind"] == "header" and header["split"] == "train"
    # Nothing to write still leaves an empty log in place of the old one.
    run.replace_trajectories("attempts", [], env="frozenlake")
    assert list(read_trajectories(path)) == []


def test_records_are_flushed_as_written(tmp_path):
    run = RunDir(tmp_path)
    writer = run.trajectory_writer("eval")
    writer.write_trajectory(make_trajectory(0))
    # Read while the writer is still open: a crash now must not lose the trajectory.
    assert [t.seed for t in read_trajectories(tmp_path)] == [0]
    writer.close()


@pytest.mark.parametrize("line, fault", [
    ('{"step": 1, "x"\n', "the line ends inside its JSON value (cut short?)"),
    ('{"kind": "trajectory", "vers\n', "the line ends inside its JSON value (cut short?)"),
    ('{"a": 1}}\n', "Extra data at column 9"),
    ('{"a": 1 "b": 2}\n', "Expecting ',' delimiter at column 9"),
    ('{"a": "x\ty"}\r\n', "Invalid control character at column 9"),
    ("nope\n", "Expecting value at column 1"),
])
def test_a_broken_json_line_is_described_by_its_fault_and_column(line, fault):
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(line)
    assert json_fault(line, caught.value) == fault


def test_corrupt_lines_are_reported_and_skipped(tmp_path):
    run = RunDir(tmp_path)
    with run.trajectory_writer("eval") as writer:
        writer.write_trajectory(make_trajectory(0))
        writer.write({"kind": "trajectory", "version": 1, "env": "x"})  # missing fields
        writer._file.write('{"kind": "trajectory", "vers\n')  # truncated line
        writer.write_trajectory(make_trajectory(2))
    issues = []
    seeds = [t.seed for t in read_trajectories(tmp_path, on_issue=issues.append)]
    assert seeds == [0, 2]
    assert [issue.line for issue in issues] == [3, 4]
    assert str(issues[1]).endswith("eval.jsonl:4: invalid JSON: the line ends inside its JSON value (cut short?)")


def test_gzip_and_single_file(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps(trajectory_to_record(make_trajectory(4))) + "\n")
    assert [t.seed for t in read_trajectories(path)] == [4]


def test_unknown_version_is_a_schema_error():
    record = trajectory_to_record(make_trajectory(0))
    record["version"] = 99
    with pytest.raises(SchemaError, match="version"):
        trajectory_from_record(record)


def test_meta_cannot_shadow_schema_fields():
    with pytest.raises(SchemaError):
        trajectory_to_record(make_trajectory(0).with_meta(score=5))


def test_config_and_summary(tmp_path):
    run = RunDir(tmp_path)
    run.write_config({"env": "sudoku", "env_kwargs": {"size": 4}})
    run.write_summary({"success_rate": 0.5})
    assert run.read_config()["env_kwargs"] == {"size": 4}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary.pop("machine")["cpu"]  # tests/logs/test_machine.py checks the record itself
    assert summary == {"success_rate": 0.5}


def test_guidance_round_trips_and_is_absent_when_empty():
    from dataclasses import replace

    advised = replace(make_trajectory(0), guidance="You should stop earlier.")
    assert trajectory_to_record(advised)["guidance"] == "You should stop earlier."
    assert trajectory_from_record(trajectory_to_record(advised)) == advised
    assert "guidance" not in trajectory_to_record(make_trajectory(0))


def test_assessments_round_trip_and_version_1_records_still_read():
    from dataclasses import replace

    from hindsight.types import Assessment

    trajectory = make_trajectory(0)
    judged = Assessment(kind="self-guide", text="Reason: it moved closer.\nLabel: positive", label="positive",
                        reward=0.1, finish_reason="stop", token_ids=(5, 6, 7))
    unreadable = Assessment(kind="self-guide", text="fine", reward=0.0, parse_error="no label line")
    steps = (replace(trajectory.steps[0], assessment=judged), replace(trajectory.steps[1], assessment=unreadable),
             trajectory.steps[2])
    assessed = replace(trajectory, steps=steps)
    record = trajectory_to_record(assessed)
    assert record["version"] == 2
    assert record["steps"][0]["assessment"] == {"kind": "self-guide", "text": judged.text, "label": "positive",
                                                "reward": 0.1, "finish_reason": "stop", "token_ids": [5, 6, 7]}
    assert "label" not in record["steps"][1]["assessment"] and "assessment" not in record["steps"][2]
    assert trajectory_from_record(json.loads(json.dumps(record))) == assessed

    # A record written by version 1 of the format (no assessments) reads as it always did.
    old = trajectory_to_record(trajectory)
    old["version"] = 1
    assert trajectory_from_record(old) == trajectory
    broken = trajectory_to_record(assessed)
    broken["steps"][0]["assessment"] = "positive"
    with pytest.raises(SchemaError, match="bad step record"):
        trajectory_from_record(broken)


def test_best_of_candidates_round_trip_and_steps_without_them_leave_no_field():
    from dataclasses import replace

    from hindsight.types import Candidate

    trajectory = make_trajectory(0)
    rated = (Candidate("a0", 0.25), Candidate(None), Candidate("a0", 0.5, prm_error="no score"))
    chosen = replace(trajectory, steps=(replace(trajectory.steps[0], candidates=rated),) + trajectory.steps[1:])
    record = json.loads(json.dumps(trajectory_to_record(chosen)))
    assert record["steps"][0]["candidates"] == [{"action": "a0", "score": 0.25}, {"action": None, "score": None},
                                                {"action": "a0", "score": 0.5, "prm_error": "no score"}]
    assert "candidates" not in record["steps"][1]
    assert trajectory_from_record(record) == chosen
    record["steps"][0]["candidates"] = [{"action": "a0", "score": "high"}]
    with pytest.raises(SchemaError, match="bad step record"):
        trajectory_from_record(record)


def test_read_metrics_keeps_every_row_and_reports_a_broken_line(tmp_path):
    from hindsight.logs import LogIssue, read_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a/b": 0.5}\n[1, 2]\n{"step": 2, "a/b"\n\n{"step": 3}\n')
    issues: list[LogIssue] = []
    rows = read_metrics(tmp_path, on_issue=issues.append)
    assert [r["step"] for r in rows] == [1, 3] and rows == read_metrics(tmp_path / "metrics.jsonl")
    assert [(i.line, i.message.split(" ")[0]) for i in issues] == [(2, "not"), (3, "invalid")]
    with pytest.raises(FileNotFoundError, match="no metrics log"):
        read_metrics(tmp_path / "nowhere")


def test_a_training_run_is_a_folder_with_a_metrics_log(tmp_path):
    from hindsight.logs import is_training_run

    evaluation = RunDir(tmp_path / "eval")
    with evaluation.trajectory_writer("eval", env="frozenlake") as writer:
        writer.write_trajectory(make_trajectory(0))
    training = RunDir(tmp_path / "train")
    with training.metrics_writer() as metrics:
        metrics.write({"step": 1})
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "metrics.jsonl").mkdir()  # a folder by that name is not a log
    assert [is_training_run(tmp_path / n) for n in ("eval", "train", "odd", "missing")] == [False, True, False, False]
    assert not is_training_run(training.path / "metrics.jsonl")  # the log itself is not the run
