"""`hindsight outcomes export` and `check`: a run's kept form, and the replay that shows it reproduces."""

import dataclasses
import json
from pathlib import Path

import pytest

from hindsight.cli.main import main
from hindsight.cli.outcomes import check_run, kept_runs
from hindsight.logs.outcomes import read_run, write_run

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: One kept run of each comparison: a trained arm, a prompting baseline and a validation evaluation.
SAMPLE = ("cso/cso-s1", "selfguide/reflexion", "echo-headroom/start-validation")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny FrozenLake evaluation by the oracle and one by the random model, each exported."""
    root = tmp_path_factory.mktemp("outcomes")
    for model in ("oracle", "random"):
        assert main(["eval", "--env", "frozenlake", "--set", "size=3", "--model", model, "--episodes", "6",
                     "--out", str(root / model), "--json"]) == 0
        assert main(["outcomes", "export", str(root / model), str(root / "kept" / model), "--arm", model,
                     "--commit", "abc1234"]) == 0
    return root


def test_export_writes_the_slim_form_and_check_replays_it(runs, capsys):
    kept = runs / "kept" / "random"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "outcomes.jsonl.gz", "run.json", "summary.json"]
    info, outcomes = read_run(kept)
    assert (info.env, info.split, info.arm, info.seed, info.model, info.commit) == (
        "frozenlake", "test", "random", None, "random", "abc1234")
    summary = json.loads((kept / "summary.json").read_text())
    assert len(outcomes) == summary["episodes"] == 6
    assert sum(o.success for o in outcomes) / 6 == pytest.approx(summary["success_rate"])
    assert all(o.steps == len(o.actions) > 0 for o in outcomes)
    capsys.readouterr()
    assert main(["outcomes", "check", str(runs / "kept")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{runs / 'kept' / 'oracle'}: 6 tasks replayed, all reproduced",
        f"{runs / 'kept' / 'random'}: 6 tasks replayed, all reproduced"]


def test_an_unparsed_turn_replays_as_the_empty_action_the_engine_sent(runs, tmp_path):
    # The engine sends "" for a response it could not parse: an invalid step that counts.
    info, outcomes = read_run(runs / "kept" / "oracle")
    first = outcomes[0]
    padded = dataclasses.replace(first, steps=first.steps + 1, actions=("",) + first.actions)
    write_run(tmp_path, info, [padded])
    assert main(["outcomes", "check", str(tmp_path)]) == 0


def test_a_tampered_action_makes_check_fail(runs, tmp_path, capsys):
    info, outcomes = read_run(runs / "kept" / "oracle")
    assert all(o.success for o in outcomes)
    tampered = dataclasses.replace(outcomes[2], actions=outcomes[2].actions[:-1] + ("jump",))
    write_run(tmp_path, info, outcomes[:2] + [tampered] + outcomes[3:])
    capsys.readouterr()
    assert main(["outcomes", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path}: 1 of 6 tasks do not reproduce" in out
    assert f"task {tampered.task_seed}: success False (kept True); score 0 (kept 1)" in out
    assert main(["outcomes", "check", str(tmp_path), "--tasks", "2"]) == 0  # the tampered task is the third


def test_a_task_outside_the_runs_split_is_reported(runs, tmp_path, capsys):
    info, outcomes = read_run(runs / "kept" / "random")
    write_run(tmp_path, dataclasses.replace(info, split="train"), outcomes[:1])
    assert main(["outcomes", "check", str(tmp_path)]) == 1
    assert "the task is in split test, not train" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["check", "{tmp}/nowhere"], "nowhere: no such folder"),
    (["check", "{tmp}"], "no kept run (a folder with run.json)"),
    (["check", "{unknown_env}"], "unknown environment 'lake'"),
    (["check", "{no_outcomes}"], "no outcomes.jsonl or outcomes.jsonl.gz"),
    (["export", "{tmp}", "{tmp}/out", "--arm", "x"], "not a run directory (no config.yaml)"),
    (["export", "{oracle}", "{tmp}/out", "--arm", "x", "--log", "train"], "no trajectories/train.jsonl"),
])
def test_bad_input_is_one_line_and_exit_code_2(runs, tmp_path, capsys, args, message):
    info, outcomes = read_run(runs / "kept" / "random")
    write_run(tmp_path / "unknown", dataclasses.replace(info, env="lake"), outcomes)
    write_run(tmp_path / "bare", info, outcomes).unlink()
    names = {"tmp": tmp_path / "empty", "unknown_env": tmp_path / "unknown", "no_outcomes": tmp_path / "bare",
             "oracle": runs / "oracle"}
    names["tmp"].mkdir()
    capsys.readouterr()
    assert main(["outcomes"] + [arg.format(**names) for arg in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hindsight: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_the_kept_results_read_and_a_sample_of_them_replays():
    runs = kept_runs(RESULTS)
    assert len(runs) > 40
    for run in runs:
        info, outcomes = read_run(run)
        summary = json.loads((run / "summary.json").read_text())
        if "episodes" in summary:  # an evaluation's summary (a critic's training summary has other numbers)
            assert len(outcomes) == summary["episodes"], run
            assert sum(o.success for o in outcomes) / len(outcomes) == pytest.approx(summary["success_rate"]), run
    for name in SAMPLE:
        result = check_run(RESULTS / name, tasks=20)
        assert result.tasks == 20 and result.mismatches == (), name
