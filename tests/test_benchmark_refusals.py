"""benchmarks/refusals.py: refused moves of kept runs, replayed and counted by kind."""

import sys
from dataclasses import replace
from pathlib import Path

from hindsight.envs import make
from hindsight.logs import RunDir
from hindsight.logs.outcomes import Outcome, RunInfo, write_run
from tests.test_benchmark_tables import outcome

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import refusals  # noqa: E402


def kept(folder: Path, actions_per_task: list[list[str]]) -> Path:
    env = make("blocksworld", num_blocks=3, max_steps=2)
    seeds = env.split_seeds("test", len(actions_per_task))
    info = RunInfo(env="blocksworld", env_kwargs={"num_blocks": 3, "max_steps": 2}, split="test", arm="start",
                   seed=None, model="scripted", commit=None)
    write_run(folder, info, [Outcome(seed, False, 0.0, len(actions), tuple(actions))
                             for seed, actions in zip(seeds, actions_per_task)])
    return folder


def test_refusals_are_counted_by_kind_with_the_names_masked(tmp_path, capsys):
    # The hand is empty after reset, so putting a block down is refused whichever block it names;
    # two refusals spend the two moves, and the task ends out of steps.
    first = kept(tmp_path / "first", [["putdown b1", "putdown b2"], ["putdown b3", ""]])
    second = kept(tmp_path / "second", [["putdown b2"]])
    assert refusals.main([str(first), str(second)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| refused move (feedback, names masked) | first | second |"
    assert "| You cannot putdown X: you are not holding X (your hand is empty). | 3 | 1 |" in lines
    assert lines[-2] == "| **refused, share of all steps** | 4 of 4 (1.000) | 1 of 1 (1.000) |"
    assert lines[-1] == "| failures that ran out of steps | 2 of 2 | 0 of 1 |"


def test_a_folder_that_is_not_a_kept_run_is_a_clear_error(tmp_path, capsys):
    assert refusals.main([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_a_training_runs_rollouts_are_counted_by_blocks_of_updates(tmp_path, capsys):
    def episode(update: int, feedback: list[str], success: bool = False):
        base = outcome(update, success, moves=len(feedback), terminated=success)
        steps = tuple(replace(step, valid=not text, feedback=text) for step, text in zip(base.steps, feedback))
        return replace(base, steps=steps).with_meta(update=update)

    with RunDir(tmp_path / "grpo-s0").trajectory_writer("train", env="blocksworld", split="train") as writer:
        writer.write_trajectory(episode(1, ['"lift b1" is not an action. Use: pickup X ...', ""]))
        writer.write_trajectory(episode(2, ['"take b2" is not an action. Use: pickup X ...']))
        writer.write_trajectory(episode(3, ["You cannot putdown b3: you are not holding b3 (your hand is empty).", ""],
                                        success=True))
    assert refusals.main(["--train", "--every", "2", str(tmp_path / "grpo-s0")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "| refused move (feedback, names masked) | updates 1-2 | updates 3-4 |" in lines
    # Two unknown verbs are one kind; the names are masked.
    assert '| "…" is not an action (an unknown verb or a malformed name) | 2 | 0 |' in lines
    assert "| You cannot putdown X: you are not holding X (your hand is empty). | 0 | 1 |" in lines
    assert "| **refused, share of all steps** | 2 of 3 (0.667) | 1 of 2 (0.500) |" in lines
    assert "| failures that ran out of steps | 2 of 2 | 0 of 0 |" in lines
    assert refusals.main(["--train", str(tmp_path / "nothing")]) == 2
    assert "train.jsonl does not exist" in capsys.readouterr().err
