"""The collapse alarm in the run lifecycle: `health/…` entries, the progress line, and stop_on_collapse."""

import json
from pathlib import Path

from hindsight import logs
from hindsight.methods.basics import Schedule
from hindsight.methods.grpo import GRPOConfig
from hindsight.methods.lifecycle import TrainingRun
from hindsight.train.checkpoint import list_checkpoints

# The training loop ratio of the kept GRPO run at seed 2 (results/selfguide/grpo-s2), which learned to loop.
LOOPING = (0.0, 0.26, 0.09, 0.15, 0.43, 0.14, 0.21, 0.13)


class SavedModel:
    """Stands in for a trainable model: a checkpoint only needs it to save something."""

    def save(self, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "weights").write_text("w")


def train(tmp_path, loop_ratios, *, stop: bool, rows=None):
    config = GRPOConfig(updates=len(loop_ratios), stop_on_collapse=stop, eval_every=0, final_eval_split="")
    run = TrainingRun("grpo", GRPOConfig, config, tmp_path / "run")
    run.begin(SavedModel(), {}, {}, Schedule(checkpoint_every=5, keep_checkpoints=0, stop_on_collapse=stop))
    trained = []
    for step in run.steps(len(loop_ratios), "grpo"):
        row = rows(step) if rows else {"rollout/score_mean": 0.5, "tide/loop_ratio": loop_ratios[step - 1]}
        run.end_step(step, row, f"update {step}")
        trained.append(step)
    path = run.finish(updates=len(loop_ratios))
    return path, trained, logs.read_metrics(path), json.loads((path / "summary.json").read_text())


def test_rows_carry_the_alarm_and_the_progress_line_names_the_signal(tmp_path, capsys):
    _, trained, rows, summary = train(tmp_path, LOOPING, stop=False)
    assert trained == list(range(1, 9)) and "stopped" not in summary
    assert [row["health/collapsing"] for row in rows] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert all(row["health/loop_ratio"] == row["health/collapsing"] for row in rows)
    assert "update 4 · collapsing: loop ratio 0.00→0.15 since update 2" in capsys.readouterr().err


def test_stop_on_collapse_ends_the_run_cleanly(tmp_path):
    path, trained, rows, summary = train(tmp_path, LOOPING, stop=True)
    assert trained == [1, 2, 3, 4] and len(rows) == 4
    assert [c.step for c in list_checkpoints(path)] == [4]
    assert summary.pop("machine")["cpu"]  # every summary names its machine (tests/logs/test_machine.py)
    assert summary == {"kind": "grpo", "updates": 8, "stopped": "collapse", "stopped_at": 4,
                       "collapse": "collapsing: loop ratio 0.00→0.15 since update 2"}


def test_a_healthy_run_is_not_stopped(tmp_path):
    _, trained, rows, summary = train(tmp_path, (0.0, 0.02, 0.0, 0.01, 0.03, 0.0), stop=True)
    assert trained == list(range(1, 7)) and "stopped" not in summary
    assert {row["health/collapsing"] for row in rows} == {0}


def test_rows_without_signals_get_no_health_entries(tmp_path):
    _, trained, rows, _ = train(tmp_path, (0.0,) * 3, stop=True, rows=lambda step: {"sft/loss": 1.0 / step})
    assert trained == [1, 2, 3] and not any(key.startswith("health/") for row in rows for key in row)
