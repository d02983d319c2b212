"""TrainingProgress off a terminal: plain stderr lines per phase and per finished unit (or every
nth), and the progress of a training run's evaluations."""

import re

import pytest

from hindsight.llm.scripted import OracleBackend
from hindsight.logs import RunDir
from hindsight.methods.grpo import GRPOConfig
from hindsight.methods.lifecycle import evaluate_trainable
from hindsight.methods.progress import TrainingProgress


def test_plain_lines_when_stderr_is_not_a_terminal(capsys):
    with TrainingProgress(3, "grpo", completed=1) as progress:
        progress.phase("rollout")
        progress.advance("rollout 4s · update 2s")
        progress.advance("rollout 5s · update 2s")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"grpo 1/3 0:0\d \[rollout\]", lines[0])
    assert re.fullmatch(r"grpo 2/3 0:0\d rollout 4s · update 2s", lines[1])
    assert lines[2].startswith("grpo 3/3 ")


def test_disabled_progress_prints_nothing(capsys):
    with TrainingProgress(2, "grpo", enabled=False) as progress:
        progress.phase("rollout")
        progress.advance("done")
    assert capsys.readouterr().err == ""


def test_plain_every_prints_every_nth_unit_and_the_last(capsys):
    with TrainingProgress(7, "test evaluation", plain_every=3) as progress:
        for n in range(7):
            progress.advance(f"task {n + 1}")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[2] for line in lines] == ["3/7", "6/7", "7/7"]
    assert lines[-1].endswith("task 7")


def test_plain_every_must_be_positive():
    with pytest.raises(ValueError, match="plain_every"):
        TrainingProgress(3, "x", plain_every=0)


class OracleModel:
    """Stands in for a trainable model: evaluation only samples from it."""

    sampler = OracleBackend()


def test_an_evaluation_in_a_training_run_reports_its_progress(tmp_path, capsys):
    config = GRPOConfig(env="frozenlake", env_kwargs={"size": 4, "max_steps": 8})
    run = RunDir(tmp_path / "run")
    summary = evaluate_trainable(OracleModel(), config.eval_settings(), "test", 20, run, "eval-test-final", 0)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[2] for line in lines] == [f"{n}/20" for n in range(2, 21, 2)]
    assert lines[-1].startswith("test evaluation 20/20 ")
    assert lines[-1].endswith("solved 20 of 20 finished · mean score 1.000") and summary.success_rate == 1.0

    # A resumed evaluation counts the tasks it kept and their outcomes.
    log = run.trajectories_dir / "eval-test-final.jsonl"
    kept = log.read_text().splitlines()[:6]  # the header and five tasks
    log.write_text("".join(line + "\n" for line in kept))
    evaluate_trainable(OracleModel(), config.eval_settings(), "test", 20, run, "eval-test-final", 0)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[2] for line in lines] == ["6/20", "8/20", "10/20", "12/20", "14/20", "16/20", "18/20",
                                                   "20/20"]
    assert len(log.read_text().splitlines()) == 21
