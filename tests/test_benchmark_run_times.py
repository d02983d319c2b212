"""benchmarks/run_times.py and benchmarks/learning_gpu.sh: what a GPU script prints at its end."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import run_times  # noqa: E402


def run_folder(folder: Path, updates: int, finished: bool) -> Path:
    folder.mkdir()
    (folder / "config.yaml").write_text("env: blocksworld\n")
    started = (folder / "config.yaml").stat().st_mtime
    rows = [{"step": u, "time": started + 30.0 * u, "rollout/success_rate": 0.5} for u in range(1, updates + 1)]
    rows.append({"step": updates, "time": started + 30.0 * updates + 5.0, "eval/success_rate": 0.4})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if finished:
        (folder / "summary.json").write_text(json.dumps({"success_rate": 0.25, "mean_score": 0.625}))
    return folder


def test_a_line_gives_updates_wall_time_and_the_test_result(tmp_path):
    line = run_times.run_line(run_folder(tmp_path / "grpo-s0", updates=3, finished=True))
    assert line == "grpo-s0: 3 updates, 95 s, test success 0.250, mean score 0.625"


def test_an_unfinished_run_says_so(tmp_path):
    assert run_times.run_line(run_folder(tmp_path / "grpo-s1", updates=1, finished=False)) == \
        "grpo-s1: 1 updates, 35 s, not finished"


def test_a_run_stopped_before_its_first_metrics_row_says_so(tmp_path):
    folder = tmp_path / "echo-frozen-s0"
    folder.mkdir()
    (folder / "config.yaml").write_text("env: frozenlake\n")
    assert run_times.run_line(folder) == "echo-frozen-s0: started, no update logged yet"


def test_only_seeded_runs_are_listed(tmp_path):
    run_folder(tmp_path / "grpo-s2", updates=2, finished=True)
    run_folder(tmp_path / "start-sft", updates=0, finished=True)  # a run, but not a seed of an arm
    (tmp_path / "notes-s3").mkdir()  # a seed's name, but no run
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_times.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("device: ")
    assert [line.split(":")[0] for line in lines[1:]] == ["grpo-s2"]


def test_learning_gpu_needs_the_start_made_on_a_cpu(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "benchmarks" / "learning_gpu.sh"), str(tmp_path)],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "VARIANT": "graded"})
    assert result.returncode == 2
    assert "start-adapter/adapter_config.json is missing" in result.stderr
    assert "benchmarks/learning.sh" in result.stderr
