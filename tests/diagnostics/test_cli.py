"""`hindsight diagnose`: output keys, exit codes, bad input, start-up weight."""

import json
import shutil
import subprocess
import sys

import pytest

from hindsight.cli.main import main
from hindsight.diagnostics.synthetic import WalkerSpec, write_run

from .logfiles import generic_record, tide_sample, tide_step, write_jsonl

REQUIRED_KEYS = {"n_trajectories", "success_rate", "auv", "loop_ratio"}


def tide_run(folder, task="frozen_lake"):
    folder.mkdir(parents=True, exist_ok=True)
    config = f"task: {task}\nagent_proxy:\n  max_steps: 30\nclient_agent:\n  model_name: m-x\n"
    (folder / "config.yaml").write_text(config)
    loop = [tide_step("A", "x"), tide_step("B", "y"), tide_step("A", "x"), tide_step("B", "y")]
    win = [tide_step("A", "x"), tide_step("C", "z")]
    return write_jsonl(folder / "res.jsonl", [tide_sample(loop, False, 1), tide_sample(win, True, 2)])


def run_json(capsys, *args):
    code = main(["diagnose", "--json", *map(str, args)])
    out = capsys.readouterr()
    return code, [json.loads(line) for line in out.out.splitlines()], out.err


def test_json_has_one_object_per_run_with_the_required_keys(tmp_path, capsys):
    tide_run(tmp_path / "exp")
    code, records, _ = run_json(capsys, tmp_path / "exp")
    assert code == 0 and len(records) == 1
    (record,) = records
    assert REQUIRED_KEYS <= record.keys()
    # Hand-worked: 2 tasks, one solved on turn 2 of t_max=30; loop steps 2 of 6 steps (official finder).
    assert record["env"] == "frozenlake" and record["model"] == "m-x" and record["t_max"] == 30
    assert record["n_trajectories"] == 2 and record["success_rate"] == 0.5
    assert record["auv"] == pytest.approx(0.5 * (30 - 2 + 0.5) / 30)
    assert record["loop_ratio"] == pytest.approx(2 / 6)
    assert record["loop_ratio_per_trajectory"] == pytest.approx((0.5 + 0.0) / 2)
    assert record["p_t"][:3] == [0.0, 0.0, 0.5]


def test_options_change_the_numbers(tmp_path, capsys):
    tide_run(tmp_path / "exp")
    _, (paper,), _ = run_json(capsys, tmp_path / "exp", "--loop-variant", "paper", "--t-max", "4")
    assert paper["loop_ratio"] == 0.0 and paper["loop_variant"] == "paper"
    assert paper["t_max"] == 4 and paper["auv"] == pytest.approx(0.5 * (4 - 2 + 0.5) / 4)


def test_text_output_names_every_number(tmp_path, capsys):
    tide_run(tmp_path / "exp")
    assert main(["diagnose", str(tmp_path / "exp")]) == 0
    out = capsys.readouterr().out
    for name in ("n_trajectories", "success_rate", "auv", "loop_ratio", "invalid_rate", "errors", "entropy"):
        assert name in out
    assert "m-x" in out and "frozenlake" in out


def test_memory_index_from_a_full_and_none_pair(tmp_path, capsys):
    write_run(tmp_path / "runs" / "full", 12, WalkerSpec(skill=0.9), model="sim", memory="full", seed=1)
    write_run(tmp_path / "runs" / "none", 12, WalkerSpec(skill=0.3), model="sim", memory="none", seed=1)
    code, records, _ = run_json(capsys, tmp_path / "runs")  # a folder of runs stands for each run
    assert code == 0
    by_memory = {r["memory"]: r for r in records}
    mi = by_memory["full"]["auv"] - by_memory["none"]["auv"]
    assert by_memory["full"]["memory_index"] == pytest.approx(mi)
    assert by_memory["none"]["memory_index"] == pytest.approx(mi)
    assert main(["diagnose", str(tmp_path / "runs")]) == 0
    assert "memory index" in capsys.readouterr().out


def test_corrupt_lines_are_reported_and_skipped(tmp_path, capsys):
    good = generic_record(["a", "b"], ["x", "y"], True, env="sudoku")
    path = write_jsonl(tmp_path / "log.jsonl", [good, good], raw_lines=['{"success": tru'])
    code, records, err = run_json(capsys, path)
    assert code == 0 and records[0]["n_trajectories"] == 2 and records[0]["skipped_lines"] == 1
    assert f"{path}:3" in err


def test_nothing_readable_exits_1(tmp_path, capsys):
    path = write_jsonl(tmp_path / "log.jsonl", [], raw_lines=["{not json", "also not"])
    assert main(["diagnose", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1" in err and "no readable trajectories" in err


def test_empty_run_exits_1_with_a_clear_message(tmp_path, capsys):
    (tmp_path / "run" / "trajectories").mkdir(parents=True)
    assert main(["diagnose", str(tmp_path / "run")]) == 1
    assert "empty run" in capsys.readouterr().err


def test_one_empty_run_among_good_ones_still_reports_the_good_ones(tmp_path, capsys):
    tide_run(tmp_path / "exp")
    (tmp_path / "empty").mkdir()
    code, records, err = run_json(capsys, tmp_path / "exp", tmp_path / "empty")
    assert code == 1 and len(records) == 1 and "empty run" in err


def test_missing_path_is_a_usage_error(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path / "nope")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_embedding_equality_without_embeddings_is_a_usage_error(tmp_path, capsys):
    tide_run(tmp_path / "exp")
    assert main(["diagnose", "--state", "embedding", str(tmp_path / "exp")]) == 2
    assert "embeddings" in capsys.readouterr().err


def test_env_guessed_from_the_path_and_overridden(tmp_path, capsys):
    loop = [tide_step("A", "x"), tide_step("A", "x")]
    path = write_jsonl(tmp_path / "webshop" / "out.jsonl", [tide_sample(loop, False, 1)])
    _, (record,), _ = run_json(capsys, path)
    assert record["env"] == "webshop" and record["t_max"] == 15
    _, (record,), _ = run_json(capsys, path, "--env", "blocksworld")
    assert record["env"] == "blocksworld" and record["t_max"] == 20


def test_a_training_run_is_diagnosed_on_its_final_evaluation_and_says_so(tmp_path, capsys):
    """A training run logs sampled training episodes, validation runs of earlier policies and the
    final evaluation: only the last describes one policy, and the output names the file read."""
    run = write_run(tmp_path / "grpo", 6)
    trajectories = run / "trajectories"
    (only,) = trajectories.iterdir()
    only.rename(trajectories / "train.jsonl")
    (final,) = (write_run(tmp_path / "final", 4, seed=1) / "trajectories").iterdir()
    final.rename(trajectories / "eval-test-final.jsonl")
    shutil.copy(trajectories / "eval-test-final.jsonl", trajectories / "eval-validation-000005.jsonl")
    # Without metrics.jsonl the folder is not a training run: every log is read, as before.
    _, (pooled,), _ = run_json(capsys, run)
    assert pooled["n_trajectories"] == 6 + 4 + 4 and pooled["path"] == str(run) and pooled["model"] == "sim"
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    _, (record,), _ = run_json(capsys, run)
    assert record["n_trajectories"] == 4 and record["path"] == str(trajectories / "eval-test-final.jsonl")
    # Its policy is the run's adapter on the base its config names, however the run is reached.
    assert record["model"] == f"sim+{run}"
    _, (by_file,), _ = run_json(capsys, trajectories / "eval-test-final.jsonl")
    assert by_file["model"] == f"sim+{run}"
    assert main(["diagnose", str(run)]) == 0
    assert f"== grpo  ({trajectories / 'eval-test-final.jsonl'})" in capsys.readouterr().out
    # A training run with no final evaluation yet is read whole.
    (trajectories / "eval-test-final.jsonl").unlink()
    _, (partial,), _ = run_json(capsys, run)
    assert partial["n_trajectories"] == 6 + 4


def _loaded_modules(code: str) -> str:
    probe = code + "\nprint('HEAVY', [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules])\n"
    result = subprocess.run([sys.executable, "-c", "import sys\n" + probe], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_diagnose_starts_without_torch_or_transformers():
    out = _loaded_modules("from hindsight.cli.main import main\n"
                          "try:\n    main(['diagnose', '--help'])\nexcept SystemExit:\n    pass")
    assert "--t-max" in out
    heavy = out.split("HEAVY", 1)[1]
    assert "torch" not in heavy and "transformers" not in heavy


def test_diagnostics_and_report_import_nothing_heavy():
    out = _loaded_modules("import hindsight.diagnostics, hindsight.report, hindsight.cli.diagnose, "
                          "hindsight.cli.report, hindsight.cli.sweep, hindsight.logs.importers")
    assert "HEAVY []" in out
