"""`--threads N` and $HINDSIGHT_THREADS on the commands that run a model."""

import pytest
import torch

from hindsight.cli.main import CLIError, apply_threads, build_parser, main


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.delenv("HINDSIGHT_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)


def test_the_flag_sets_torch_threads_and_omp_for_child_processes(restore_threads):
    apply_threads("1")
    assert torch.get_num_threads() == 1
    import os

    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_the_environment_variable_is_the_default(restore_threads):
    torch.set_num_threads(2)
    restore_threads.setenv("HINDSIGHT_THREADS", "1")
    apply_threads(None)
    assert torch.get_num_threads() == 1
    apply_threads("2")  # the flag wins over the variable
    assert torch.get_num_threads() == 2


def test_nothing_changes_without_either(restore_threads):
    before = torch.get_num_threads()
    apply_threads(None)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_values_are_one_line_errors(restore_threads, value, capsys):
    with pytest.raises(CLIError, match="positive integer"):
        apply_threads(value)
    assert main(["eval", "--env", "frozenlake", "--model", "random", "--episodes", "1", "--threads", value]) == 2
    assert "positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["eval", "--env", "frozenlake", "--model", "smollm2"], ["train", "grpo"],
                                     ["echo-compare", "RUN"], ["echo-analyze", "RUN"], ["sweep", "memory", "--env", "frozenlake",
                                                               "--model", "smollm2", "--out", "D"]])
def test_every_command_that_runs_a_model_takes_threads(command):
    assert build_parser().parse_args([*command, "--threads", "3"]).threads == "3"
