"""`hindsight envs ...` through the real entry point."""

import json

from hindsight.cli.main import main


def test_list(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    for env_id in ("frozenlake", "blocksworld", "sudoku", "webshop", "deepsearch"):
        assert env_id in out
    assert "num_blocks=4" in out


def test_show(capsys):
    assert main(["envs", "show", "sudoku", "--set", "size=9", "--set", "blanks=20"]) == 0
    out = capsys.readouterr().out
    assert "blanks=20" in out and "max_steps=40" in out
    assert "Empty cells (20)" in out and "fill R C V" in out and "oracle's first action: fill" in out


def test_unknown_env_is_a_usage_error(capsys):
    assert main(["envs", "check", "frozenlak"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'frozenlake'?" in err and err.count("\n") == 1


def test_bad_setting_is_a_usage_error(capsys):
    assert main(["envs", "show", "frozenlake", "--set", "size"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["envs", "show", "frozenlake", "--set", "colour=blue"]) == 2
    assert "accepted: size, p_hole, holes" in capsys.readouterr().err


def test_clean_check_exits_zero(capsys):
    assert main(["envs", "check", "blocksworld", "--seeds", "3"]) == 0
    assert "ok" in capsys.readouterr().out.splitlines()[-1]


def test_check_of_a_broken_env_exits_one(capsys, monkeypatch):
    from broken_envs import LazyOracle

    import hindsight.envs.catalog as catalog

    monkeypatch.setitem(catalog._REGISTRY, LazyOracle.id, LazyOracle)
    assert main(["envs", "check", LazyOracle.id, "--seeds", "3", "--no-hash-seed"]) == 1
    assert "violation: [oracle]" in capsys.readouterr().out


def test_export(tmp_path, capsys):
    target = tmp_path / "fl.jsonl"
    assert (
        main(["envs", "export", "frozenlake", "--split", "validation", "-n", "4", "-o", str(target), "--set", "size=5"])
        == 0
    )
    lines = target.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[0])["kwargs"]["size"] == 5
    assert {json.loads(line)["split"] for line in lines[1:]} == {"validation"}
    assert main(["envs", "export", "frozenlake", "--split", "dev", "-n", "4", "-o", str(target)]) == 2
    assert "unknown split" in capsys.readouterr().err


def test_envs_without_action_prints_help(capsys):
    assert main(["envs"]) == 2
    assert "list" in capsys.readouterr().out
