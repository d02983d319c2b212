"""Reading TIDE, generic and Hindsight logs into views; format detection; corrupt lines."""

import json

import pytest

from hindsight.diagnostics.synthetic import WalkerSpec, simulate, to_trajectory
from hindsight.logs import RunDir
from hindsight.logs.importers import (
    GENERIC, HINDSIGHT, TIDE, detect_format, import_trajectories, normalise_env_id, read_views,
    mean_entropy, response_surprisal, view_from_trajectory,
)

from .logfiles import generic_record, tide_sample, tide_step, write_jsonl


def tide_lines():
    first = [tide_step("grid A", "Right", entropy=0.5), tide_step("grid B", "Left", valid=False, entropy=0.25),
             tide_step("grid B", "Down", entropy=0.75)]
    other = [tide_step("never read", "Up")]
    return [tide_sample(first, success=True, seed=11, second_rollout=other),
            tide_sample([tide_step("grid C", "Up")], success=False, seed=12)]


def test_tide_sample_reads_the_first_rollout(tmp_path):
    path = write_jsonl(tmp_path / "results.jsonl", tide_lines())
    issues = []
    views = list(read_views(path, issues.append, env="frozen_lake"))
    assert issues == []
    first, second = views
    assert first.env == "frozenlake" and first.id == "seed-11" and first.seed == 11
    assert first.success and first.length == 3 and first.success_turn == 3
    assert first.observations == ("grid A", "grid B", "grid B")
    assert first.actions == ("Right", "Left", "Down")
    assert first.valid == (True, False, True)
    assert first.entropies == (0.5, 0.25, 0.75)
    # No state key in TIDE logs: state identity is the observation text.
    assert first.state_keys is None and first.states == first.observations
    assert first.instruction == "solve it" and first.source.endswith("results.jsonl:1")
    assert not second.success and second.entropies is None


def test_format_detection():
    assert detect_format({"kind": "header", "format": "hindsight.trajectories"}) == HINDSIGHT
    assert detect_format({"kind": "trajectory"}) == HINDSIGHT
    assert detect_format({"traj_rollouts": []}) == TIDE
    assert detect_format({"steps": [], "success": False}) == GENERIC
    assert detect_format({"kind": "header", "format": "other"}) is None
    assert detect_format({"hello": 1}) is None
    assert detect_format([1, 2]) is None


def test_corrupt_and_unfit_lines_are_reported_with_file_and_line(tmp_path):
    lines = tide_lines()
    path = write_jsonl(tmp_path / "r.jsonl", lines[:1], raw_lines=['{"query": "cut off', json.dumps({"seed": 3}),
                                                                 json.dumps({"traj_rollouts": []}), "[1, 2]"])
    write_jsonl(tmp_path / "r.jsonl", [], raw_lines=path.read_text().splitlines() + [json.dumps(lines[1])])
    issues = []
    views = list(read_views(path, issues.append, env="sudoku"))
    assert [v.id for v in views] == ["seed-11", "seed-12"]
    assert [(i.line) for i in issues] == [2, 3, 4, 5]
    assert str(issues[0]).startswith(f"{path}:2: invalid JSON")
    assert "no rollouts" in issues[2].message


def test_unrecognised_file_is_skipped_with_one_issue(tmp_path):
    path = write_jsonl(tmp_path / "other.jsonl", [{"a": 1}, {"b": 2}])
    issues = []
    assert list(read_views(path, issues.append)) == []
    assert len(issues) == 1 and issues[0].line == 1 and "not a recognised" in issues[0].message


def test_generic_schema(tmp_path):
    record = generic_record(["o1", "o2"], ["a", None], True, env="ALFWorld", valid=[True, False],
                            states=["s1", "s2"], entropies=[0.1, None], id="ep-1", model="m", instruction="do",
                            final_observation="o3", final_state="s3")
    record["steps"][1]["logprobs"] = [-1.0, -3.0]
    (view,) = read_views(write_jsonl(tmp_path / "g.jsonl", [record]))
    assert view.env == "alfworld" and view.id == "ep-1" and view.model == "m"
    assert view.actions == ("a", None) and view.valid == (True, False)
    assert view.states == ("s1", "s2") and view.final_state == "s3"
    # `entropy` is the action-token entropy; log-probs give the whole-response surprisal, a separate column.
    assert view.entropies == (0.1, None)
    assert view.surprisals == (None, 2.0)  # mean(1, 3)


def test_hindsight_run_directory_and_in_memory_trajectories_agree(tmp_path):
    trajectory = to_trajectory(simulate(5, WalkerSpec()), model="sim", memory="2")
    run = RunDir(tmp_path / "run")
    with run.trajectory_writer("eval", env="frozenlake") as writer:
        writer.write_trajectory(trajectory)
    (from_disk,) = read_views(run.path)
    in_memory = view_from_trajectory(trajectory, source=from_disk.source)
    assert from_disk == in_memory
    assert from_disk.memory == "2" and from_disk.states == tuple(s.state_key for s in trajectory.steps)
    assert from_disk.entropies is not None and all(e is not None and e > 0 for e in from_disk.entropies)
    assert from_disk.surprisals is not None and all(e is not None and e > 0 for e in from_disk.surprisals)
    assert from_disk.entropies[0] == pytest.approx(sum(trajectory.steps[0].action_entropies) / 2)


def test_import_trajectories_builds_full_trajectories(tmp_path):
    path = write_jsonl(tmp_path / "results.jsonl", tide_lines())
    first, second = import_trajectories(path, env="frozen_lake")
    assert first.env == "frozenlake" and first.seed == 11 and first.success
    assert [s.action for s in first.steps] == ["Right", "Left", "Down"]
    assert first.steps[0].feedback == "grid B" and first.steps[-1].reward == 1.0
    assert not second.success and second.steps[0].reward == 0.0


def test_helpers():
    assert normalise_env_id("frozen_lake") == "frozenlake" and normalise_env_id("Sodoku") == "sudoku"
    assert response_surprisal([-0.5, -1.5]) == pytest.approx(1.0)
    assert response_surprisal(None) is None and response_surprisal([]) is None
    assert mean_entropy([0.5, 1.5, 1.0]) == pytest.approx(1.0)
    assert mean_entropy(None) is None and mean_entropy([]) is None and mean_entropy(["x"]) is None
