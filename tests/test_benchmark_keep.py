"""benchmarks/keep.py: a comparison's finished runs exported into the slim kept form the tables read."""

import gzip
import json
import sys
from pathlib import Path

import pytest

from hindsight.logs import RunDir
from hindsight.logs.outcomes import Outcome, read_run
from hindsight.types import Step, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import keep  # noqa: E402


def episode(seed: int, actions: tuple[str, ...], success: bool) -> Trajectory:
    steps = tuple(Step(index=i, observation="", state_key="", raw="", action=a or None, analysis=None, valid=True,
                       reward=0.0, score=0.0, feedback="") for i, a in enumerate(actions))
    return Trajectory(env="frozenlake", seed=seed, instruction="", steps=steps, final_observation="",
                      final_state_key="", success=success, score=float(success), terminated=True, truncated=False,
                      model="smollm2", env_kwargs={"size": 5})


def write(folder: Path, log: str, finished: bool = True, metrics: bool = False) -> None:
    run = RunDir(folder)
    (folder / "config.yaml").write_text("env: frozenlake\n")
    with run.trajectory_writer(log, env="frozenlake", split="test") as writer:
        writer.write_trajectory(episode(3, ("up", ""), False))
        writer.write_trajectory(episode(7, ("down",), True))
    if metrics:
        (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    if finished:
        run.write_summary({"success_rate": 0.5, "episodes": 2})


@pytest.mark.parametrize("folder, arm, seed", [
    ("cso-s1", "cso", 1), ("sg-s2-float32", "sg", 2), ("grpo-token-mean-s0", "grpo-token-mean", 0),
    ("start", "start", None), ("start-bfloat16", "start", None), ("start-validation", "start", None),
    ("react-sg", "react-sg", None), ("sampled-t1", "sampled-t1", None),
])
def test_the_folder_name_gives_arm_and_seed(folder, arm, seed):
    assert keep.naming(folder) == keep.Naming(arm, seed)


def test_finished_runs_are_kept_slim_and_unfinished_ones_not(tmp_path):
    out, kept = tmp_path / "out", tmp_path / "kept"
    write(out / "start", "eval")
    write(out / "cso-s1", "eval-test-final", metrics=True)
    write(out / "cso-s2", "eval-test-final", finished=False)
    (out / "start-adapter").mkdir()  # an adapter folder: not a run
    lines = keep.keep(out, kept, "46cd982", [])
    assert lines[1] == "cso-s2: not finished, not kept"
    assert lines[0].startswith("cso-s1: arm cso, seed 1: config.yaml, summary.json, metrics.jsonl.gz, run.json")
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "cso-s1/config.yaml", "cso-s1/metrics.jsonl.gz", "cso-s1/outcomes.jsonl.gz", "cso-s1/run.json",
        "cso-s1/summary.json", "start/config.yaml", "start/outcomes.jsonl.gz", "start/run.json", "start/summary.json"]
    info, outcomes = read_run(kept / "cso-s1")
    assert (info.arm, info.seed, info.commit, info.env_kwargs) == ("cso", 1, "46cd982", {"size": 5})
    assert outcomes == [Outcome(3, False, 0.0, 2, ("up", "")), Outcome(7, True, 1.0, 1, ("down",))]
    assert gzip.decompress((kept / "cso-s1" / "metrics.jsonl.gz").read_bytes()) == b'{"step": 1}\n'
    assert read_run(kept / "start")[0].seed is None


def test_named_runs_only_and_a_validation_only_run(tmp_path):
    out, kept = tmp_path / "out", tmp_path / "kept"
    write(out / "start", "eval")
    write(out / "critic", "eval-validation-final")
    assert keep.keep(out, kept, None, ["critic"])[0].endswith(
        "outcomes.jsonl.gz (2 tasks from eval-validation-final.jsonl)")
    assert sorted(p.name for p in kept.iterdir()) == ["critic"]
    assert json.loads((kept / "critic" / "run.json").read_text())["commit"] is None


def test_bad_folders_get_a_clear_error(tmp_path, capsys):
    assert keep.main([str(tmp_path / "nowhere"), str(tmp_path / "kept")]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err
    write(tmp_path / "out" / "start", "eval")
    assert keep.main([str(tmp_path / "out"), str(tmp_path / "kept"), "--commit", "abc", "cso-s9"]) == 2
    assert "no run folder cso-s9" in capsys.readouterr().err
