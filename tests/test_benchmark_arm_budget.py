"""benchmarks/arm_budget.py: the time check a comparison runs before its arms."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import arm_budget  # noqa: E402


def timed_run(folder: Path, seconds: list[float], trained: int = 8) -> Path:
    """A run whose updates ended `seconds` after its config was written (a step-0 row first), each
    training `trained` sequences (none: no `policy/sequences`, as when every group's rewards were equal)."""
    folder.mkdir()
    (folder / "config.yaml").write_text("env: frozenlake\n")
    started = (folder / "config.yaml").stat().st_mtime
    rows = [{"step": 0, "time": started + 1.0, "rollout/episodes": 4, "data/sequences": 9}]  # SFT's data row
    rows += [{"step": u, "time": started + s, "rollout/success_rate": 0.5, **({"policy/sequences": trained} if trained else {})}
             for u, s in enumerate(seconds, 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def evaluation(folder: Path, wall_s: float, episodes: int, interrupted: bool = False) -> Path:
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"wall_s": wall_s, "episodes": episodes,
                                                     "interrupted": interrupted}))
    return folder


def test_the_projection_is_updates_at_the_timed_rate_plus_the_test(tmp_path):
    run = timed_run(tmp_path / "time-echo", [400.0, 800.0])
    p = arm_budget.project(run, per_task=2.0, updates=20, evaluated_tasks=300)
    assert (p.updates_timed, p.test_seconds) == (2, 600.0)
    assert p.seconds_per_update == pytest.approx(400.0, abs=1e-6)
    assert p.hours == pytest.approx((20 * 400.0 + 600.0) / 3600.0, rel=1e-9)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """The script's command line, run in this process: each run as a script would cost a fresh
    interpreter importing torch (seconds); one test runs it from the shell."""
    def run(*args: str) -> Result:
        try:
            arm_budget.main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code
        out = capsys.readouterr()
        return Result(code, out.out, out.err)
    return run


def test_the_script_runs_from_the_shell(tmp_path):
    run = timed_run(tmp_path / "time-grpo", [300.0])
    start = evaluation(tmp_path / "start", wall_s=100.0, episodes=100)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "arm_budget.py"), str(run), "--eval", str(start),
                             "--limit-hours", "0.1"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout.startswith("time-grpo: 300 s an update"), result.stderr


def test_the_script_says_which_arm_is_over_and_fails(tmp_path, cli):
    grpo = timed_run(tmp_path / "time-grpo", [300.0])
    echo = timed_run(tmp_path / "time-echo", [600.0])
    start = evaluation(tmp_path / "start-validation", wall_s=100.0, episodes=100)
    # 20 updates of 300 s and 550 tasks at 1 s fit in 2.5 h; 20 of 600 s do not
    result = cli(str(grpo), str(echo), "--eval", str(start), "--validation-tasks", "250", "--limit-hours", "2.5")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("time-grpo: 300 s an update") and lines[0].endswith("fits the 2.5 h limit")
    assert lines[1].startswith("time-echo: 600 s an update") and lines[1].endswith("over the 2.5 h limit")
    assert "300 + 250 evaluated tasks (550 s)" in lines[0]
    assert cli(str(grpo), "--eval", str(start)).returncode == 0


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "not a training run"),
    (lambda d: timed_run(d / "r", []), "no finished update"),
    (lambda d: timed_run(d / "r", [200.0, 260.0], trained=0), "trained a sequence"),
])
def test_a_run_without_timing_is_a_clear_error(tmp_path, cli, make, message):
    start = evaluation(tmp_path / "start", wall_s=10.0, episodes=10)
    result = cli(str(make(tmp_path)), "--eval", str(start))
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_an_unfinished_evaluation_is_a_clear_error(tmp_path, cli):
    run = timed_run(tmp_path / "time-grpo", [300.0])
    result = cli(str(run), "--eval", str(evaluation(tmp_path / "start", 10.0, 10, interrupted=True)))
    assert result.returncode == 2
    assert "not a finished evaluation" in result.stderr and "Traceback" not in result.stderr


def test_a_recipe_sets_the_updates_the_test_and_the_validation_tasks():
    # echo-frozenlake.yaml: 20 updates, 50 validation tasks at steps 0, 5, 10, 15 and 20, a 300-task test
    plan = arm_budget.read_recipe(f"echo:{ROOT / 'recipes' / 'echo-frozenlake.yaml'}")
    assert plan == arm_budget.ArmPlan(updates=20, test_tasks=300, validation_tasks=250)


@pytest.mark.parametrize("fields, plan", [
    ({"updates": 7, "eval_every": 3, "eval_episodes": 10, "final_eval_episodes": 40}, (7, 40, 30)),
    ({"updates": 4, "eval_every": 0, "final_eval_split": ""}, (4, 0, 0)),
])
def test_the_counts_follow_the_schedule(fields, plan):
    from hindsight.methods.grpo import GRPOConfig

    assert arm_budget.arm_plan(GRPOConfig(**fields)) == arm_budget.ArmPlan(*plan)


def test_the_script_reads_the_recipe_and_an_option_overrides_it(tmp_path, cli):
    run = timed_run(tmp_path / "time-echo", [300.0])
    start = evaluation(tmp_path / "start-validation", wall_s=100.0, episodes=100)
    recipe = f"echo:{ROOT / 'recipes' / 'echo-frozenlake.yaml'}"
    result = cli(str(run), "--eval", str(start), "--recipe", recipe)
    assert result.returncode == 0, result.stderr
    assert "20 updates and 300 + 250 evaluated tasks (550 s)" in result.stdout
    result = cli(str(run), "--eval", str(start), "--recipe", recipe, "--updates", "40", "--validation-tasks", "0")
    assert "40 updates and 300 + 0 evaluated tasks (300 s)" in result.stdout


@pytest.mark.parametrize("spec, message", [
    ("recipes/echo-frozenlake.yaml", "METHOD:PATH"),
    ("nosuch:recipes/echo-frozenlake.yaml", "unknown training method 'nosuch'"),
    ("echo:recipes/nosuch.yaml", "config file not found"),
    ("sft:recipes/echo-frozenlake.yaml", "SFTConfig"),  # SFT has no updates, and not ECHO's fields
])
def test_a_bad_recipe_is_a_clear_error(tmp_path, cli, monkeypatch, spec, message):
    run = timed_run(tmp_path / "time-echo", [300.0])
    start = evaluation(tmp_path / "start", wall_s=10.0, episodes=10)
    monkeypatch.chdir(ROOT)  # the recipes' paths are the repository's
    result = cli(str(run), "--eval", str(start), "--recipe", spec)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_one_trained_update_among_the_timed_ones_is_enough(tmp_path):
    run = timed_run(tmp_path / "time-grpo", [10.0, 400.0], trained=0)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[2]["critic/sequences"] = 4  # ECHO's critic track trained at the second update
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert arm_budget.seconds_per_update(run) == (2, pytest.approx(200.0, abs=1e-6))
