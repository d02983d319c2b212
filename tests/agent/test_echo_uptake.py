"""benchmarks/echo_uptake.py: critique correctness and whether refinements follow the advice."""

import importlib.util
import sys
from pathlib import Path

import pytest

from hindsight.agent.critic import parse_critique, template_critique
from hindsight.logs import RunDir
from tests.agent.test_critic import frozenlake_attempt

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "echo_uptake.py"
spec = importlib.util.spec_from_file_location("echo_uptake", _SCRIPT)
echo_uptake = importlib.util.module_from_spec(spec)
sys.modules.setdefault("echo_uptake", echo_uptake)  # dataclasses look their module up there
spec.loader.exec_module(echo_uptake)

OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
ENV = {"holes": "blocking", "p_hole": 0.0, "max_steps": 2}


def test_uptake_counts_refinements_that_take_the_suggested_move(tmp_path):
    detour = lambda turn, oracle: OPPOSITE[oracle] if turn == 1 else oracle  # noqa: E731
    attempt = frozenlake_attempt(detour, seed=0, **ENV)
    critique = parse_critique(template_critique(attempt)).critique
    turn, move = echo_uptake.suggestion(critique)
    assert turn == 2 and critique.endswith(f'You should do "{move}" there instead.')

    followed = frozenlake_attempt(lambda t, oracle: oracle, seed=0, **ENV)
    ignored = frozenlake_attempt(detour, seed=0, **ENV)
    assert followed.success and followed.steps[1].action == move and not ignored.success
    run = RunDir(tmp_path / "run")
    with run.trajectory_writer("initial", env="frozenlake", split="train") as writer:
        writer.write_trajectory(attempt.with_meta(update=1))
    with run.trajectory_writer("train", env="frozenlake", split="train") as writer:
        for refinement, text in ((followed, critique), (ignored, critique), (ignored, "You should try harder.")):
            echo = {"critique": text, "s_o": attempt.score, "s_r": refinement.score}
            writer.write_trajectory(refinement.with_meta(update=1, echo=echo))

    result = echo_uptake.measure(run.trajectories_dir / "train.jsonl", run.trajectories_dir / "initial.jsonl")
    assert (result.refinements, result.actionable, result.correct, result.reached, result.followed) == (3, 2, 2, 2, 1)
    assert result.gain_followed == [followed.score - attempt.score] and result.gain_ignored == [0.0]
    assert (result.improved, result.worsened) == (1, 0)
    assert echo_uptake.suggestion("none") is None


def test_uptake_rows_per_stage_split_a_run_by_update(tmp_path, capsys):
    from tests.methods.echo_runs import write_echo_run

    run = write_echo_run(tmp_path / "run", updates=6, tasks=4, group=2)
    assert echo_uptake.main([str(run), "--stages", "3"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {run}")]
    assert [row.split(" | ")[0] for row in rows] == [f"| {run} · updates {a}–{b}" for a, b in ((1, 2), (3, 4), (5, 6))]
    # Each stage holds 2 updates of 4 tasks with 2 refinements each, and every refinement is in one stage.
    assert [row.split(" | ")[1] for row in rows] == ["16", "16", "16"]
    # Tasks 1-3 fail first and their even refinements solve them: 6 of a stage's 16 score higher.
    assert [row.split(" | ")[-2] for row in rows] == ["38% (6/16)"] * 3
    assert [row.split(" | ")[-1] for row in rows] == ["0% (0/16) |"] * 3
    assert echo_uptake.main([str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split(" | ")[1] == "48"
    with pytest.raises(SystemExit):
        echo_uptake.main([str(run), "--stages", "0"])
