"""`hindsight sweep memory` end to end with the `random` policy (no model weights)."""

import json

import pytest
import yaml

from hindsight.cli.main import CLIError, main
from hindsight.cli.sweep import parse_windows

ARGS = ["sweep", "memory", "--env", "frozenlake", "--model", "random", "--windows", "full,none,2", "--episodes", "3"]


def test_memory_sweep_runs_one_eval_per_window(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main([*ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "sweep.json").read_text())
    assert [row["memory"] for row in summary["windows"]] == ["none", "2", "full"]
    for row in summary["windows"]:
        config = yaml.safe_load((out / f"memory-{row['memory']}" / "config.yaml").read_text())
        assert str(config["memory"]) == row["memory"] and config["model"] == "random"
        assert row["n_trajectories"] == 3
    auv = {row["memory"]: row["auv"] for row in summary["windows"]}
    assert summary["memory_index"] == pytest.approx(auv["full"] - auv["none"])
    assert "memory index" in printed
    report = (out / "report" / "index.html").read_text()
    assert 'id="memory"' in report and "AUV vs memory window" in report

    # Running the same sweep again reuses the finished runs instead of appending to them.
    assert main([*ARGS, "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("reusing finished run") == 3
    assert json.loads((out / "sweep.json").read_text())["windows"] == summary["windows"]


def test_sweep_refuses_to_mix_into_a_foreign_folder(tmp_path, capsys):
    (tmp_path / "memory-full").mkdir()
    (tmp_path / "memory-full" / "notes.txt").write_text("mine")
    assert main([*ARGS, "--out", str(tmp_path)]) == 2
    assert "not a finished run" in capsys.readouterr().err


def test_window_parsing():
    assert parse_windows("none, 1,2,FULL,0,2") == ["none", "1", "2", "full"]
    with pytest.raises(CLIError):
        parse_windows("half")
    with pytest.raises(CLIError):
        parse_windows(" , ")


def test_a_sweep_without_its_kind_names_what_is_missing(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "hindsight sweep" in err and "required: KIND" in err
