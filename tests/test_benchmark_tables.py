"""benchmarks/tables.py and the comparison tables built on it (cso_table.py, selfguide_table.py, echo_table.py)."""

import contextlib
import io
import json
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from hindsight.logs import RunDir
from hindsight.types import Assessment, Step, Trajectory

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True)
def benchmarks_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(_BENCHMARKS))  # the table scripts import their sibling `tables`


def outcome(task: int, success: bool, moves: int = 0, terminated: bool = True) -> Trajectory:
    """An episode of `moves` placeholder moves; not terminated means it ran out of steps."""
    steps = tuple(Step(index=i, observation="", state_key="", raw="", action="up", analysis=None, valid=True,
                       reward=0.0, score=0.0, feedback="") for i in range(moves))
    return Trajectory(env="frozenlake", seed=task, instruction="", steps=steps, final_observation="",
                      final_state_key="", success=success, score=float(success), terminated=terminated,
                      truncated=not terminated)


def write_run(folder: Path, log: str, successes, metrics=(), finished=True) -> None:
    run = RunDir(folder)
    with run.trajectory_writer(log, env="frozenlake", split="test") as writer:
        for task, success in enumerate(successes):
            writer.write_trajectory(outcome(100 + task, bool(success)))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))
    if finished:
        run.write_summary({"success_rate": sum(successes) / len(successes), "episodes": len(successes),
                           "mean_steps": 0.0, "invalid_rate": 0.0})


def table(script: str, out: Path, *options: str) -> str:
    module = __import__(script)
    stdout = io.StringIO()
    argv = sys.argv
    sys.argv = [script, str(out), *options]
    try:
        with contextlib.redirect_stdout(stdout):
            module.main()
    finally:
        sys.argv = argv
    return stdout.getvalue()


def test_paired_rows_pair_each_seed_with_the_same_tasks(tmp_path):
    import tables

    write_run(tmp_path / "start", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "cso-s0", "eval-test-final", [1, 1, 0, 1])
    write_run(tmp_path / "cso-s1", "eval-test-final", [1, 1, 1, 1])
    write_run(tmp_path / "cso-s2", "eval-test-final", [0, 0, 0, 0], finished=False)  # still running: left out
    start = tables.evaluation_outcomes(tmp_path / "start")
    assert start[("s0", 101)] == start[("s2", 101)] == 0.0 and len(start) == 3 * 4
    cso, per_seed, runs = tables.arm_outcomes(tmp_path, "cso")
    assert per_seed == [0.75, 1.0] and [r.name for r in runs] == ["cso-s0", "cso-s1"]
    # Seed 0 gains one task of four, seed 1 two: the mean paired difference is 3/8.
    assert "| CSO − start | +0.375 [" in tables.difference_line("CSO − start", cso, start)
    assert "2 runs × 4 tasks | +0.250, +0.500 |" in tables.difference_line("x", cso, start)
    assert "not yet" in tables.difference_line("x", cso, {})


def test_a_broken_log_line_is_left_out_of_a_table_and_said_so(tmp_path, capsys):
    import tables

    write_run(tmp_path / "cso-s0", "eval-test-final", [1, 1, 0, 1],
              metrics=[{"step": 1, "cso/pairs": 3}, {"step": 2, "cso/pairs": 5}])
    log = tmp_path / "cso-s0" / "trajectories" / "eval-test-final.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:2], lines[2][:40], *lines[3:]]) + "\n")  # task 101's line, cut short
    metrics = tmp_path / "cso-s0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 3, "cso/pa\n')
    _, per_seed, _ = tables.arm_outcomes(tmp_path, "cso")
    assert per_seed == [2 / 3]
    assert [row["step"] for row in tables.metric_rows(tmp_path / "cso-s0")] == [1, 2]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{log}:3: invalid JSON: the line ends inside its JSON value (cut short?): skipped",
                   f"{metrics}:3: invalid JSON: the line ends inside its JSON value (cut short?): skipped"]


def test_a_tagged_run_pairs_only_with_runs_of_the_same_tag(tmp_path):
    import tables

    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 0, 1, 0])
    write_run(tmp_path / "grpo-s1", "eval-test-final", [0, 0, 0, 0])
    write_run(tmp_path / "grpo-s1-float32", "eval-test-final", [1, 1, 0, 0])
    write_run(tmp_path / "grpo-token-mean-s1", "eval-test-final", [1, 1, 1, 1])  # another arm, not a tag
    write_run(tmp_path / "sg-s0", "eval-test-final", [1, 1, 1, 0])
    write_run(tmp_path / "sg-s1-float32", "eval-test-final", [1, 1, 1, 1])
    assert [label for label, _ in tables.arm_runs(tmp_path, "grpo")] == ["s0", "s1", "s1-float32"]
    grpo, per_run, _ = tables.arm_outcomes(tmp_path, "grpo")
    sg, _, _ = tables.arm_outcomes(tmp_path, "sg")
    assert per_run == [0.5, 0.0, 0.5]
    # sg has s0 and s1-float32: GRPO's untagged s1 is left out, its float32 s1 pairs (+0.25 and +0.5).
    line = tables.difference_line("sg − grpo", sg, grpo)
    assert "| sg − grpo | +0.375 [" in line and "2 runs × 4 tasks | +0.250, +0.500 (s1-float32) |" in line
    lines, _ = tables.arm_table(tmp_path, [("grpo", "GRPO")], [])
    assert "| GRPO | 3 | 0.500, 0.000, 0.500 (s1-float32) | 0.333 |" in lines[2]
    # Where the float32 run stands for seed 1, the untagged one is shown but left out of the mean.
    lines, outcomes = tables.arm_table(tmp_path, [("grpo", "GRPO")], [], {"grpo": ("s1",)})
    assert "| GRPO | 2 | 0.500, 0.000 (s1, not in the mean), 0.500 (s1-float32) | 0.500 |" in lines[2]
    assert len(outcomes["grpo"]) == 12 and len(tables.without_runs(outcomes["grpo"], ("s1",))) == 8


def test_cso_table_sums_the_funnel_over_rounds(tmp_path):
    # rollout/env_steps is cumulative over rounds: the table shows a run's last value.
    rounds = [{"step": r, "cso/failed_trajectories": 4.0, "cso/candidates": 6.0, "cso/verified": 2.0,
               "cso/pairs": 2.0, "cso/share_supervised": 0.1 * r, "rollout/env_steps": 40.0 * r} for r in (1, 2)]
    write_run(tmp_path / "start", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "cso-s0", "eval-test-final", [1, 1, 0, 1], rounds)
    write_run(tmp_path / "eto-s0", "eval-test-final", [0, 0, 0, 0],
              [{"step": r, "eto/failed_trajectories": 3.0, "eto/pairs": 2.0 + r} for r in (1, 2)])
    write_run(tmp_path / "rft-s0", "eval-test-final", [0, 1, 0, 0], [{"step": 1, "sft/loss": 0.4}])
    write_run(tmp_path / "rft-s1", "eval-test-final", [1, 1, 0, 0],
              [{"step": 0, "rollout/env_steps": 55.0}, {"step": 1, "sft/loss": 0.4}])
    text = table("cso_table", tmp_path)
    assert "The start: test success 0.500 on 4 tasks." in text
    assert "| CSO | 1 | 0.750 | 0.750 | 80 | 8.0 | 12.0 | 4.0 | 4.0 | 0.200 |" in text
    # ETO's own failures and pairs; what it does not have is –, never a 0 it did not log.
    assert "| ETO | 1 | 0.000 | 0.000 | – | 6.0 | – | – | 7.0 | – |" in text
    # One RFT run logged its sampling's env steps, the other did not.
    assert "| RFT | 2 | 0.250, 0.500 | 0.375 | –, 55 | – | – | – | – | – |" in text
    assert "| ETO − CSO | -0.750 [" in text
    assert "| IPR − start | not yet" in text


def test_cso_table_shows_best_of_n_beside_sampling_and_cso_under_the_same_prm(tmp_path):
    from dataclasses import replace

    from hindsight.types import Candidate

    write_run(tmp_path / "start", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "cso-s0", "eval-test-final", [1, 1, 0, 1])
    write_run(tmp_path / "cso-s1", "eval-test-final", [1, 1, 1, 1])
    write_run(tmp_path / "sampled-t1", "eval", [1, 0, 0, 0])
    # Two best-of turns per task: the candidates of the first differ, those of the second agree.
    turns = ((Candidate("up", 0.5, prm_error="no score"), Candidate("down", 0.9), Candidate(None)),
             (Candidate("left", 0.5), Candidate("left", 0.5), Candidate(None)))
    run = RunDir(tmp_path / "bon5-oracle")
    with run.trajectory_writer("eval", env="frozenlake", split="test") as writer:
        for task, success in enumerate([1, 1, 1, 0]):
            trajectory = outcome(100 + task, bool(success), moves=2)
            steps = tuple(replace(step, candidates=rated) for step, rated in zip(trajectory.steps, turns))
            writer.write_trajectory(replace(trajectory, steps=steps))
    run.write_summary({"success_rate": 0.75, "episodes": 4})
    text = table("cso_table", tmp_path)
    assert "| best-of-5, oracle PRM | 0.750 | 0.500 of 8 | 0.250 of 16 |" in text
    assert "| sampled at temperature 1, no choice | 0.250 | – | – |" in text
    # Two evaluations of the start pair once, not once per seed label.
    assert "| best-of-5, oracle PRM − start | +0.250 [" in text and "| 1 runs × 4 tasks | +0.250 |" in text
    assert "| best-of-5, oracle PRM − sampling alone | +0.500 [" in text
    # Each CSO seed against the one evaluation: +0.000 and +0.250.
    assert "| CSO − best-of-5, oracle PRM | +0.125 [" in text and "2 runs × 4 tasks | +0.000, +0.250 |" in text
    assert "bundled model as PRM" not in text  # not run: no rows


def test_selfguide_table_reads_arms_and_their_metrics(tmp_path):
    rows = [{"step": 8, "rollout/env_steps": 320, "selfguide/lambda": 0.0, "selfguide/label_agreement": 0.61}]
    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 0, 1, 0], [{"step": 8, "rollout/env_steps": 300}])
    write_run(tmp_path / "sg-gr-s0", "eval-test-final", [1, 1, 1, 0], rows)
    text = table("selfguide_table", tmp_path)
    assert "| ReAct | missing |" in text
    assert "| ReAct+SG − ReAct | not yet" in text
    write_run(tmp_path / "react", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "react-sg", "eval", [1, 1, 0, 1])
    text = table("selfguide_table", tmp_path)
    assert "| ReAct+SG − ReAct | +0.250 [" in text and "1 runs × 4 tasks" in text
    assert "| ReAct | 4 | 0.500 |" in text and "| – | – | – | 2 / 0 |" in text  # both failures ended by the env
    # Each arm against the start with its prompting: GRPO (1, 0, 1, 0) against ReAct (1, 0, 0, 1),
    # GRPO+SG+GR (1, 1, 1, 0) against ReAct+SG (1, 1, 0, 1).
    assert "| GRPO − the start (ReAct) | +0.000 [" in text
    assert "| GRPO+SG+GR (paper λ: 0.4/0.5/0.7/0.8) − the start (ReAct+SG) | +0.000 [" in text
    assert "| GRPO+SG (λ ≡ 0) − the start (ReAct+SG) | not yet" in text
    assert "| 1 | 0.750 | 0.750 | 320 | 0.61 | – | – | 0.00 | – | 1 / 0 |" in text
    # From the training log (groups of 2): group 1's env returns tie and its shaped returns
    # do not (λ = 0.5), so it trained on the labels alone; group 2's env returns differ;
    # group 3 ties under λ = 0 although its labels differ (a split tie).
    (tmp_path / "sg-gr-s0" / "config.yaml").write_text("group_size: 2\n")
    with RunDir(tmp_path / "sg-gr-s0").trajectory_writer("train", env="frozenlake", split="train") as writer:
        for success, weight, assessment_sum in ((0, 0.5, 0.2), (0, 0.5, -0.1), (1, 0.5, 0.3), (0, 0.5, 0.3),
                                                (0, 0.0, 0.1), (0, 0.0, 0.0)):
            sg = {"lambda": weight, "env_return": float(success), "assessment_sum": assessment_sum,
                  "return": success + weight * assessment_sum}
            writer.write_trajectory(outcome(7, bool(success)).with_meta(selfguide=sg))
    text = table("selfguide_table", tmp_path)
    assert "| 0.61 | 1 (2) / 3 | +0.30 / +0.10 | 0.00 |" in text
    assert "− GRPO | +0.250 [" in text
    # The follow-up arm sits outside the comparison, against GRPO and against the start.
    assert "| GRPO, token-mean aggregation (follow-up) − GRPO | not yet" in text
    write_run(tmp_path / "grpo-token-mean-s0", "eval-test-final", [1, 1, 0, 1])
    text = table("selfguide_table", tmp_path)
    assert "| GRPO, token-mean aggregation (follow-up) − GRPO | +0.250 [" in text
    assert "| GRPO, token-mean aggregation (follow-up) − the start (ReAct) | +0.250 [" in text
    assert "| GRPO − the start (ReAct) | +0.000 [" in text  # not confused with the follow-up's runs


def test_selfguide_table_reads_issue_49s_runs_with_the_informed_layout(tmp_path):
    write_run(tmp_path / "start", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "start-sg", "eval", [1, 1, 0, 0])
    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 1, 0, 1])
    write_run(tmp_path / "grpo-sg-s0", "eval-test-final", [1, 1, 1, 1])
    text = table("selfguide_table", tmp_path, "--layout", "informed")
    assert "| ReAct | 4 | 0.500 |" in text and "| ReFlAct | missing |" in text
    assert "| ReAct+SG − ReAct | +0.000 [" in text
    # GRPO pairs with the plain start, the Self-Guide arms with the start that writes notes.
    assert "| GRPO − the start (ReAct) | +0.250 [" in text
    assert "| GRPO+SG (λ ≡ 0) − the start (ReAct+SG) | +0.500 [" in text
    assert "| GRPO+SG (λ ≡ 0) − GRPO | +0.250 [" in text
    assert "| GRPO+SG+GR (paper λ: 0.4/0.5/0.7/0.8) − GRPO+SG (λ ≡ 0) | not yet" in text
    assert "follow-up" not in text and "full λ from the start" not in text
    # The test log's moves that changed nothing: a second seed's first task stuck in one state, "up", "up", "left",
    # its notes negative then positive. (up, up) is repeated after a negative note; (up, left) is not.
    stuck = replace(outcome(100, False, moves=3, terminated=False), final_state_key="s")
    notes = (None, Assessment(kind="self-guide", text="", label="negative"),
             Assessment(kind="self-guide", text="", label="positive"))
    stuck = replace(stuck, steps=tuple(replace(step, state_key="s", action=action, assessment=note)
                                       for step, action, note in zip(stuck.steps, ("up", "up", "left"), notes)))
    run = RunDir(tmp_path / "grpo-sg-s1")
    with run.trajectory_writer("eval-test-final", env="frozenlake", split="test") as writer:
        for trajectory in (stuck, outcome(101, True), outcome(102, True), outcome(103, True)):
            writer.write_trajectory(trajectory)
    run.write_summary({"success_rate": 0.75, "episodes": 4})
    text = table("selfguide_table", tmp_path, "--layout", "informed")
    assert "| –, 0.50 of 2 / 1.00 of 1 |" in text  # seed 0 has no moves


def test_echo_table_compares_echo_with_grpo_and_its_ablations(tmp_path):
    rows = [{"step": u, "rollout/env_steps": 40 * u, "echo/gain_mean": gain, "echo/improvement_rate": rate}
            for u, gain, rate in ((1, 0.1, 0.2), (2, 0.3, 0.4))]
    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 0, 1, 0], [{"step": 2, "rollout/env_steps": 64}])
    write_run(tmp_path / "echo-s0", "eval-test-final", [1, 1, 1, 0], rows)
    text = table("echo_table", tmp_path)
    assert "| ECHO | 1 | 0.750 | 0.750 | 80 | +0.200 | 0.300 | 1 / 0 |" in text
    assert "| GRPO | 1 | 0.500 | 0.500 | 64 | – | – | 2 / 0 |" in text
    assert "| ECHO − GRPO | +0.250 [" in text
    assert "| ECHO − ECHO, frozen critic | not yet" in text
    assert "policy start" not in text  # no start-test evaluation: no row and no comparison with it


def test_echo_table_compares_every_arm_with_the_tested_start_by_success_or_by_score(tmp_path):
    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 0, 1, 0])
    write_run(tmp_path / "grpo-s1", "eval-test-final", [1, 1, 1, 0])
    run = RunDir(tmp_path / "start-test")  # the untrained start, greedy: falls that kept half the path
    with run.trajectory_writer("eval", env="frozenlake", split="test") as writer:
        for task, success in enumerate([1, 0, 0, 0]):
            writer.write_trajectory(replace(outcome(100 + task, bool(success)), score=1.0 if success else 0.5))
    run.write_summary({"success_rate": 0.25, "episodes": 4})
    text = table("echo_table", tmp_path)
    assert "| policy start (greedy, untrained) | 1 | 0.250 | 0.250 |" in text
    assert "| GRPO − policy start | +0.375 [" in text and "2 runs × 4 tasks" in text
    assert "| ECHO − policy start | not yet" in text
    scored = table("echo_table", tmp_path, "--measure", "score")
    assert "| arm | runs done | test score per run |" in scored and "paired difference of test score" in scored
    assert "| policy start (greedy, untrained) | 1 | 0.625 | 0.625 |" in scored
    assert "| GRPO − policy start | +0.000 [" in scored  # 0.625 both: the start's falls kept half their path


def test_grpo_signals_counts_gigpo_step_parts_per_block_of_updates():
    import grpo_signals

    def episode(update, advantage, steps):
        return outcome(1, advantage > 0, len(steps)).with_meta(
            grpo={"advantage": advantage, "step_advantages": steps}, update=update)

    # Updates 1-5: a first-turn part of the episode's sign and a later one against it; update 6:
    # a step with no part of its own.
    episodes = [episode(1, 1.0, [1.5, 0.6]), episode(5, -1.0, [-1.0, -1.0]), episode(6, 0.5, [0.5])]
    rows = grpo_signals.step_part_rows(episodes)
    assert rows[2] == "| 1–5 | 4 | 0.500 | 0.500 | 1 of 1 |"
    assert rows[3] == "| 6–10 | 1 | 0.000 | 0.000 | 0 of 0 |"
    # A GRPO log has no step advantages: no table.
    assert grpo_signals.step_part_rows([outcome(1, True, 2).with_meta(grpo={"advantage": 1.0}, update=1)]) == []


def test_grpo_signals_splits_the_advantage_per_move_by_how_episodes_ended(tmp_path, capsys):
    import grpo_signals

    from hindsight.algos.grpo import Aggregation

    def episode(moves, success, terminated, advantage):
        return outcome(1, success, moves, terminated).with_meta(grpo={"advantage": advantage}, update=1)

    # A 2-move fall and a 10-move stall with the same advantage: the fall pushes 5x harder per move.
    episodes = [episode(2, False, True, -1.0), episode(10, False, False, -1.0), episode(4, True, True, 2.0),
                episode(3, True, True, 0.0)]  # no gradient: left out
    rows = grpo_signals.advantage_rows(episodes)
    assert "| failed by the env | 1 | 2.0 | -1.00 | -0.500 |" in rows
    assert "| failed at the budget | 1 | 10.0 | -1.00 | -0.100 |" in rows
    assert "| solved | 1 | 4.0 | +2.00 | +0.500 |" in rows
    # Under token_mean every move weighs the same: the stall is pushed as hard per move as the fall.
    rows = grpo_signals.advantage_rows(episodes, Aggregation.TOKEN_MEAN)
    assert "| failed by the env | 1 | 2.0 | -1.00 | -1.000 |" in rows
    assert "| failed at the budget | 1 | 10.0 | -1.00 | -1.000 |" in rows
    assert grpo_signals.scored_turns(episodes) == []  # no self-assessments: no agreement table
    sys_argv = sys.argv
    sys.argv = ["grpo_signals", str(tmp_path / "missing-run")]
    try:
        with pytest.raises(SystemExit) as exit_info:
            grpo_signals.main()
    finally:
        sys.argv = sys_argv
    assert exit_info.value.code == 2 and "has no training log" in capsys.readouterr().err


def test_grpo_signals_shows_the_net_push_of_token_mean_against_trajectory_mean():
    import grpo_signals

    def episode(seed, moves, success, advantage):
        return outcome(seed, success, moves, True).with_meta(grpo={"advantage": advantage}, update=1)
    # (The episodes carry no ids, as in a hand-made log: each is still its own unit.)

    # One group: two 4-move successes (+1) and two 1-move falls (−1), and a tied group (advantage 0).
    episodes = [episode(1, 4, True, 1.0), episode(1, 4, True, 1.0), episode(1, 1, False, -1.0),
                episode(1, 1, False, -1.0), episode(2, 3, True, 0.0), episode(2, 3, True, 0.0)]
    # Token mean: (8 − 2) / 10 moves with the tied group left out, (8 − 2) / 16 with it in.
    # Trajectory mean: the group's advantages sum to zero, so no push.
    dropped = grpo_signals.sharpening_rows(episodes, drop_zero_variance=True)
    assert dropped[2].startswith("| 1 | 4 | +0.600 | +0.000 |")
    kept = grpo_signals.sharpening_rows(episodes, drop_zero_variance=False)
    assert kept[2].startswith("| 1 | 6 | +0.375 | +0.000 |")


def test_grpo_signals_shows_what_the_guidance_reward_paid_stalls_and_falls():
    import grpo_signals

    from dataclasses import replace

    from hindsight.types import Assessment

    def episode(seed, update, moves, success, terminated, advantage, lam, positives):
        """`positives` notes say positive, the others negative."""
        labels = ["positive"] * positives + ["negative"] * (moves - positives)
        base = outcome(seed, success, moves, terminated)
        steps = tuple(replace(step, assessment=Assessment(kind="self-guide", text="", label=label,
                                                          reward=0.1 if label == "positive" else -0.1))
                      for step, label in zip(base.steps, labels))
        total = 0.1 * (positives - (moves - positives))
        return replace(base, steps=steps).with_meta(
            grpo={"advantage": advantage}, update=update,
            selfguide={"lambda": lam, "env_return": float(success), "assessment_sum": total,
                       "return": float(success) + lam * total})

    episodes = [
        # update 2, task 7 (λ = 1): a stall, a fall and a success met; the stall out-earned the fall
        episode(7, 2, 10, False, False, 0.5, 1.0, 10), episode(7, 2, 2, False, True, -1.5, 1.0, 2),
        episode(7, 2, 4, True, True, 1.0, 1.0, 3),
        # update 2, task 8: only falls, so no stall − fall gap from this group
        episode(8, 2, 3, False, True, 0.0, 1.0, 2),
        # update 1 (λ = 0): left out of the table though its stall and fall would make a group
        episode(9, 1, 10, False, False, 0.0, 0.0, 9), episode(9, 1, 3, False, True, 0.0, 0.0, 1),
    ]
    rows = grpo_signals.guidance_rows(episodes)
    # Columns: n, mean moves, mean Σ_t r_t, then the mean shaped return under sum, mean and capped.
    # The stall: Σ = +1.0, so R = 1.00 (sum), 0.10 (mean over 10 notes), 0.00 (capped at R_env = 0).
    assert "| failed at the budget | 1 | 10.0 | +1.00 | +1.00 | +0.10 | +0.00 |" in rows
    # The falls: Σ = +0.2 (2 notes) and +0.1 (3 notes).
    assert "| failed by the env | 2 | 2.5 | +0.15 | +0.15 | +0.07 | +0.00 |" in rows
    # The success: Σ = +0.2 over 4 notes; capped keeps it (at most R_env = 1).
    assert "| solved | 1 | 4.0 | +0.20 | +1.20 | +1.05 | +1.20 |" in rows
    assert "\nsum: 0 of 3 failures earn at least the least-paid success (+1.20)" in rows
    assert "\nmean: 0 of 3 failures earn at least the least-paid success (+1.05)" in rows
    assert rows[-1].endswith("per group where both met (1): +2.00")
    assert grpo_signals.guidance_rows(episodes[4:]) == []  # never λ > 0: no table
    # Twelve positive notes on a stall out-earn a success with the paper's sum, not with the others.
    stall = episode(7, 2, 12, False, False, 0.0, 1.0, 12)
    rows = grpo_signals.guidance_rows([stall, episodes[2]])
    assert "\nsum: 1 of 1 failures earn at least the least-paid success (+1.20)" in rows
    assert "\ncapped: 0 of 1 failures earn at least the least-paid success (+1.20)" in rows


def test_grpo_signals_shows_which_way_the_notes_lean():
    import grpo_signals

    from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
    from hindsight.agent.selfguide import SelfAssessor, with_oracle_assessments
    from hindsight.envs import make
    from hindsight.llm import load_model

    # The planner's own episodes: every judged turn is oracle-positive. At update 1 their notes are
    # the oracle's; at update 2 the same notes all say "negative".
    planned = RolloutEngine(lambda: make("frozenlake", size=3, max_steps=6), load_model("oracle"),
                            RolloutConfig()).run([Task(seed=s) for s in range(4)])
    honest = [replace(with_oracle_assessments(t, SelfAssessor()), meta={"update": 1}) for t in planned]
    gloomy = [replace(t, meta={"update": 2}, steps=tuple(
        replace(step, assessment=replace(step.assessment, label="negative")) for step in t.steps)) for t in honest]
    turns = sum(t.num_steps - 1 for t in planned)
    rows = grpo_signals.agreement_rows(grpo_signals.scored_turns(honest + gloomy))
    assert turns > 0
    assert f"| 1 | {turns} | 1.000 | 1.000 | 1.00 of {turns} | – | 0.00 |" in rows
    assert f"| 2 | {turns} | 0.000 | 1.000 | 0.00 of {turns} | – | 1.00 |" in rows


def test_grpo_signals_shows_which_way_the_gradient_pushed_the_notes_label():
    import grpo_signals

    from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
    from hindsight.agent.selfguide import SelfAssessor, with_oracle_assessments
    from hindsight.algos.grpo import Aggregation
    from hindsight.envs import make
    from hindsight.llm import load_model

    # The planner's episodes, every judged turn oracle-positive, trained with advantage +1 and −1:
    # at update 1 the notes are honest, at update 2 they all say "negative".
    planned = RolloutEngine(lambda: make("frozenlake", size=3, max_steps=6), load_model("oracle"),
                            RolloutConfig()).run([Task(seed=s) for s in range(2)])
    honest = [with_oracle_assessments(t, SelfAssessor()) for t in planned]
    gloomy = [replace(t, steps=tuple(replace(step, assessment=replace(step.assessment, label="negative"))
                                     for step in t.steps)) for t in honest]
    (up, down), turns = honest, [t.num_steps - 1 for t in planned]
    assert min(turns) > 0
    episodes = [replace(up, meta={"update": 1, "grpo": {"advantage": 1.0}}),
                replace(down, meta={"update": 1, "grpo": {"advantage": -1.0}}),
                replace(gloomy[0], meta={"update": 2, "grpo": {"advantage": 0.5}}),
                replace(gloomy[1], meta={"update": 3, "grpo": {"advantage": 0.0}})]  # no gradient: left out
    rows = grpo_signals.label_push_rows(grpo_signals.scored_turns(episodes), Aggregation.TOKEN_MEAN)
    # A "positive" label raised (+1) pushes away from "negative"; one lowered (−1) toward it.
    assert f"| 1 | {sum(turns)} | {(turns[1] - turns[0]) / sum(turns):+.3f} of {sum(turns)} | – |" in rows
    assert f"| 2 | {turns[0]} | +0.500 of {turns[0]} | – |" in rows
    assert not any(row.startswith("| 3 |") for row in rows)
    # Under trajectory_mean an episode's weight is spread over its moves.
    spread = grpo_signals.label_push_rows(grpo_signals.scored_turns(episodes[2:3]), Aggregation.TRAJECTORY_MEAN)
    assert f"| 2 | {turns[0]} | {0.5 / planned[0].num_steps:+.3f} of {turns[0]} | – |" in spread
    assert grpo_signals.label_push_rows(grpo_signals.scored_turns(planned), Aggregation.TOKEN_MEAN) == []  # no notes: no table


def test_grpo_signals_refuses_a_run_whose_aggregation_it_does_not_know(tmp_path, monkeypatch, capsys):
    import grpo_signals

    run = tmp_path / "run"
    with RunDir(run).trajectory_writer("train", env="frozenlake", split="train") as writer:
        writer.write_trajectory(outcome(1, False))
    (run / "config.yaml").write_text("aggregation: median\n")
    monkeypatch.setattr(sys, "argv", ["grpo_signals", str(run)])
    with pytest.raises(SystemExit) as exit_info:
        grpo_signals.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "aggregation 'median'" in err and "token_mean" in err


def test_selfguide_table_compares_seed_2_in_float32_and_pairs_the_follow_up_in_bfloat16(tmp_path):
    # The fifth amendment: seed 2 of every arm in float32; GRPO's bfloat16 seed 2 pairs only with
    # the follow-up (bfloat16), and counts neither in GRPO's mean nor against the start.
    write_run(tmp_path / "react", "eval", [1, 0, 0, 1])
    write_run(tmp_path / "react-sg", "eval", [1, 1, 0, 1])
    write_run(tmp_path / "grpo-s2", "eval-test-final", [0, 0, 0, 0])
    write_run(tmp_path / "grpo-s2-float32", "eval-test-final", [1, 0, 0, 1])
    write_run(tmp_path / "sg-s2-float32", "eval-test-final", [1, 1, 0, 1])
    write_run(tmp_path / "grpo-token-mean-s2", "eval-test-final", [1, 0, 0, 0])
    text = table("selfguide_table", tmp_path)
    assert "| GRPO | 1 | 0.000 (s2, not in the mean), 0.500 (s2-float32) | 0.500 |" in text
    assert "| GRPO+SG (λ ≡ 0) − GRPO | +0.250 [" in text and "1 runs × 4 tasks | +0.250 (s2-float32) |" in text
    assert "| GRPO − the start (ReAct) | +0.000 [" in text and "+0.000 (s2-float32) |" in text
    assert "| GRPO, token-mean aggregation (follow-up) − GRPO | +0.250 [" in text  # against bfloat16 seed 2


def test_the_kept_outcome_tables_give_the_tables_of_the_live_runs(tmp_path):
    """Real (replayable) random-policy evaluations as a driver leaves them, and their kept form:
    every table prints the same, failure endings (replayed for the kept runs) included."""
    import keep

    from hindsight.cli.main import main

    live, kept = tmp_path / "live", tmp_path / "kept"
    for name, seed in (("start", 0), ("react", 0), ("react-sg", 1), ("grpo-s0", 2), ("echo-s0", 3), ("cso-s0", 4)):
        assert main(["eval", "--env", "frozenlake", "--set", "size=4", "--model", "random", "--episodes", "12",
                     "--seed", str(seed), "--out", str(live / name), "--json"]) == 0
        if name.endswith("-s0"):  # a trained run's final test evaluation
            (live / name / "trajectories" / "eval.jsonl").rename(live / name / "trajectories" / "eval-test-final.jsonl")
    keep.keep(live, kept, None, [])
    assert not list(kept.rglob("*.jsonl"))  # no trajectory log is kept
    for script in ("echo_table", "cso_table", "selfguide_table"):
        text = table(script, kept)
        assert text == table(script, live)
        assert "1 runs × 12 tasks" in text
        # The failed episodes' endings, where the table shows them: "fell / out of steps" counts.
        assert script == "cso_table" or re.search(r"\| \d+ / \d+ \|", text)


def test_the_learning_table_pairs_each_run_with_the_start_pooled_and_alone(tmp_path):
    write_run(tmp_path / "start", "eval", [0, 0, 1, 0, 1, 0])
    # The loop ratio rises at updates 3-5: the alarm (recomputed from the rows) fires at update 5.
    rows = [{"step": step, "rollout/success_rate": 0.4, "tide/loop_ratio": loop, "rollout/env_steps": 40 * step}
            for step, loop in enumerate([0.0, 0.0, 0.2, 0.3, 0.3], start=1)]
    rows[-1].update({"rollout/success_rate": 0.7, "final_test/oracle_agreement": 0.9})
    write_run(tmp_path / "grpo-s0", "eval-test-final", [1, 1, 1, 0, 1, 0], metrics=rows)
    write_run(tmp_path / "grpo-s1", "eval-test-final", [0, 1, 1, 0, 1, 1])
    text = table("learning_table", tmp_path)
    assert "| start (SFT) | 1 | 0.333 | 0.333 |" in text
    assert "| GRPO | 2 | 0.667, 0.667 | 0.667 | 200, 0 | 0.40 → 0.70, – | 0.900, – | 0.300, – | fired at update 5, silent |" in text
    # Each run gains two of six tasks: +1/3 pooled and run by run.
    assert "| GRPO − start (SFT) | +0.333 [" in text and "2 runs × 6 tasks" in text
    assert re.search(r"\| GRPO − start \(SFT\), s0 \| \+0\.333 \[[^]]+\] \| 1 runs × 6 tasks \| \+0\.333 \|", text)
    assert re.search(r"\| GRPO − start \(SFT\), s1 \| \+0\.333", text)
    assert "| GiGPO − start (SFT) | not yet" in text
    assert "Ablations" not in text  # none has finished
    write_run(tmp_path / "abl-lr2e-4-s0", "eval-test-final", [1, 1, 1, 1, 1, 0])
    text = table("learning_table", tmp_path)
    # Seed 0 of the recipe solved 4 of 6, the ablation 5 of the same 6 (the start 2 of them).
    assert "| lr 2e-4 − GRPO | +0.167 [" in text and "1 runs × 6 tasks" in text
    assert "| lr 2e-4 − start (SFT) | +0.500 [" in text
    # An ablation that changes one thing of another also pairs with it.
    write_run(tmp_path / "abl-lr5e-4-s0", "eval-test-final", [1, 0, 1, 0, 1, 0])
    write_run(tmp_path / "abl-gigpo-lr5e-4-s0", "eval-test-final", [1, 1, 1, 0, 1, 0])
    text = table("learning_table", tmp_path)
    assert "| GiGPO, lr 5e-4 − lr 5e-4 | +0.167 [" in text
    # Placeholder moves: no shares. The row has as many cells as the header.
    assert "\n| start (SFT) | 1 | 0.333 | 0.333 | – | – | – | – | – | – | – | – |\n" in text
    assert text.splitlines()[0].count("|") == text.splitlines()[2].count("|")


def write_graded_run(folder: Path, log: str, scores, config: dict) -> None:
    """A finished BlocksWorld run whose test episodes end with `scores` (1.0 is a success)."""
    import yaml

    run = RunDir(folder)
    with run.trajectory_writer(log, env="blocksworld", split="test") as writer:
        for task, score in enumerate(scores):
            writer.write_trajectory(replace(outcome(100 + task, score == 1.0), env="blocksworld", score=score))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    run.write_summary({"success_rate": sum(s == 1.0 for s in scores) / len(scores), "episodes": len(scores)})


def test_the_learning_table_measures_a_graded_benchmark_by_its_score(tmp_path):
    bw = {"env": "blocksworld", "env_kwargs": {"num_blocks": 4, "view": "compact"}}
    write_graded_run(tmp_path / "start", "eval", [0.5, 0.25, 1.0, 0.75], {"kind": "eval", **bw})
    write_graded_run(tmp_path / "grpo-s0", "eval-test-final", [1.0, 0.5, 1.0, 0.75], {"kind": "grpo", **bw})
    text = table("learning_table", tmp_path, "--measure", "score")
    assert "| arm | runs done | test score per run | mean |" in text
    assert "| start (SFT) | 1 | 0.625 | 0.625 |" in text and "| GRPO | 1 | 0.812 | 0.812 |" in text
    # Scores: +0.5 and +0.25 on two of four tasks; successes: one more task solved.
    score_rows, success_rows = text.split("| paired difference of test score |")[1].split(
        "| paired difference of test success |")
    assert "| GRPO − start (SFT) | +0.188 [" in score_rows and "1 runs × 4 tasks" in score_rows
    assert "| GRPO − start (SFT) | +0.250 [" in success_rows
    # The FrozenLake replays do not apply: their three columns are left out.
    assert "| start (SFT) | 1 | 0.625 | 0.625 | – | – | – | – | – |" in text  # no oracle agreement in its summary
    assert "hole" not in text and text.splitlines()[0].count("|") == text.splitlines()[2].count("|")
    summary = json.loads((tmp_path / "start" / "summary.json").read_text())
    (tmp_path / "start" / "summary.json").write_text(json.dumps({**summary, "oracle_agreement": 0.4}))
    assert "| start (SFT) | 1 | 0.625 | 0.625 | – | – | 0.400 | – | – |" in table("learning_table", tmp_path,
                                                                                 "--measure", "score")
    with pytest.raises(SystemExit):
        table("learning_table", tmp_path, "--measure", "return")


def test_the_learning_table_replays_test_moves_for_the_rule_and_hole_shares(tmp_path):
    import learning_table
    from dataclasses import replace

    from hindsight.envs.frozenlake import _read_map

    # Six test tasks played by the hole-blind rule itself, to the goal or into the first hole ahead.
    seen = []
    for seed in range(7, 400):
        start, goal, holes = _read_map(learning_table.TEST_LAKE.generate_instance(seed)["map"])
        position, actions = start, []
        while position != goal and position not in holes:
            action = learning_table.rule_move(position, goal)
            d_row, d_col = learning_table.MOVES[action]
            actions.append(action)
            position = (position[0] + d_row, position[1] + d_col)
        seen.append((seed, actions, position == goal))
        if len(seen) == 6:
            break
    episodes = []
    for seed, actions, success in seen:
        moves = outcome(seed, success, len(actions))
        episodes.append(replace(moves, steps=tuple(replace(step, action=a) for step, a in zip(moves.steps, actions))))
    run = RunDir(tmp_path / "start")
    with run.trajectory_writer("eval", env="frozenlake", split="test") as writer:
        for episode in episodes:
            writer.write_trajectory(episode)
    run.write_summary({"success_rate": 0.5, "episodes": 6, "mean_steps": 0.0, "invalid_rate": 0.0})
    shares = learning_table.run_shares(tmp_path / "start", "eval")
    assert shares.moves == sum(len(a) for _, a, _ in seen) and shares.rule == shares.moves  # the rule's every move
    # Every fall is one move into a hole beside the player, and the rule makes it whenever it lies ahead.
    assert shares.into_hole == sum(not ok for _, _, ok in seen) <= shares.beside_hole
    # Where one move toward the goal is a hole and another is not, counted by a plain loop over the moves.
    choices = chose = 0
    for seed, actions, _ in seen:
        start, goal, holes = _read_map(learning_table.TEST_LAKE.generate_instance(seed)["map"])
        position = start
        for action in actions:
            toward = []
            for d_row, d_col in learning_table.MOVES.values():
                cell = (position[0] + d_row, position[1] + d_col)
                if abs(goal[0] - cell[0]) + abs(goal[1] - cell[1]) < abs(goal[0] - position[0]) + abs(goal[1] - position[1]):
                    toward.append(cell)
            d_row, d_col = learning_table.MOVES[action]
            target = (position[0] + d_row, position[1] + d_col)
            if any(c in holes for c in toward) and any(c not in holes for c in toward):
                choices += 1
                chose += target in holes
            position = target
    assert choices and (shares.choices, shares.chose_hole) == (choices, chose)
    text = table("learning_table", tmp_path)
    assert "| start (SFT) | 1 |" in text and "| 1.00 |" in text


def test_cso_table_compares_cso_with_step_dpo_under_the_same_noisy_or_learned_prm(tmp_path):
    write_run(tmp_path / "start", "eval", [1, 0, 0, 1])
    assert "Step-DPO, learned PRM" not in table("cso_table", tmp_path)  # no issue-48 arm finished: no section
    # Pair accuracy pools the rounds by their pairs: (1.0·2 + 0.5·4) / 6 = 0.667.
    write_run(tmp_path / "cso-noisy-s0", "eval-test-final", [1, 1, 0, 1],
              [{"step": 1, "cso/pairs": 2.0, "cso/pair_accuracy": 1.0}, {"step": 2, "cso/pairs": 4.0,
                                                                         "cso/pair_accuracy": 0.5}])
    write_run(tmp_path / "step-dpo-noisy-s0", "eval-test-final", [1, 0, 0, 0],
              [{"step": 1, "cso/pairs": 8.0, "cso/pair_accuracy": 0.75}])
    text = table("cso_table", tmp_path)
    assert "| CSO, oracle PRM with 40% noise | 1 | 0.750 | 0.750 | 6 | 0.667 |" in text
    assert "| Step-DPO, oracle PRM with 40% noise | 1 | 0.250 | 0.250 | 8 | 0.750 |" in text
    assert "| CSO, learned PRM | 0 | – | – | – | – |" in text
    assert "| CSO, oracle PRM with 40% noise − Step-DPO, oracle PRM with 40% noise | +0.500 [" in text
    assert "| CSO, learned PRM − Step-DPO, learned PRM | not yet" in text


def test_critic_check_prints_both_starts_and_refuses_a_missing_one(tmp_path, capsys):
    import critic_check

    out = tmp_path / "echo"
    RunDir(out / "start-validation").write_summary({"success_rate": 0.52})
    (out / "critic").mkdir()
    rows = [{"step": 3, "critic_sft/loss": 0.1},
            {"step": 3, "final_validation/critique_match_rate": 0.54, "final_validation/unsolved": 12, "other": 1}]
    (out / "critic" / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert critic_check.main([str(out), "--label", "policy start"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["policy start, validation success: 0.52 (inside the 25%-60% headroom band)",
                       "critic, validation: {'final_validation/critique_match_rate': 0.54, "
                       "'final_validation/unsolved': 12}"]
    RunDir(out / "start-validation").write_summary({"success_rate": 0.62})  # the learning benchmark's start
    assert critic_check.main([str(out), "--label", "policy start"]) == 1
    captured = capsys.readouterr()
    assert "0.62 (outside the 25%-60% headroom band)" in captured.out
    assert "no arm should run from it" in captured.err
    RunDir(out / "start-validation").write_summary({"success_rate": 0.52})
    (out / "critic" / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        critic_check.main([str(out)])
    assert exit_info.value.code == 2 and "no final validation" in capsys.readouterr().err
    (out / "critic" / "metrics.jsonl").unlink()
    with pytest.raises(SystemExit) as exit_info:
        critic_check.main([str(out)])
    assert exit_info.value.code == 2 and "train the critic first" in capsys.readouterr().err


def test_a_table_piped_into_a_reader_that_stops_early_ends_without_a_traceback(tmp_path):
    import subprocess

    write_run(tmp_path / "start", "eval", [0, 1] * 40)
    # `true` reads nothing and exits at once, long before the script has imported its libraries.
    pipeline = f"{sys.executable} {_BENCHMARKS / 'learning_table.py'} {tmp_path} | true"
    done = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_choice_rollouts_counts_the_hole_at_choice_states_block_by_block(tmp_path, capsys):
    """Random rollouts on compass lakes, replayed by hand in the env: the script's shares must match."""
    import choice_rollouts

    from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
    from hindsight.agent.prompts import Memory
    from hindsight.envs import make
    from hindsight.envs.frozenlake import _read_map, is_choice
    from hindsight.llm import load_model
    from hindsight.types import SamplingParams

    lake = {"size": 4, "max_steps": 8, "view": "compass", "lakes": "choice"}
    seeds = make("frozenlake", **lake).split_seeds("train", 12)
    config = RolloutConfig(memory=Memory.parse("none"), sampling=SamplingParams(), split="train", model_name="random:5")
    engine = RolloutEngine(lambda: make("frozenlake", **lake), load_model("random:5"), config)
    episodes = [t.with_meta(update=1 + i // 4) for i, t in enumerate(engine.iter_run(Task(seed=s) for s in seeds))]
    run = RunDir(tmp_path / "run")
    with run.trajectory_writer("train", env="frozenlake", split="train") as writer:
        for episode in episodes:
            writer.write_trajectory(episode)
    rows = [{"step": u, "tide/action_entropy": e} for u, e in ((1, 1.0), (2, 0.5), (3, 0.2))]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    # By hand, from the logged steps alone: the position from the state key, the fall from the feedback.
    by_block = {0: [0, 0], 1: [0, 0]}  # block -> [moves at choice states, of which into the hole]
    env = make("frozenlake", **lake)
    for episode in episodes:
        _, goal, holes = _read_map(env.generate_instance(episode.seed)["map"])
        for step in episode.steps:
            row, col = (int(v) - 1 for v in step.state_key.removeprefix("pos=").split(","))
            if is_choice((row, col), goal, holes):
                by_block[(episode.meta["update"] - 1) // 2][0] += 1
                by_block[(episode.meta["update"] - 1) // 2][1] += "fell into the hole" in step.feedback
    blocks = choice_rollouts.blocks(tmp_path / "run", 2, lambda issue: None)
    assert [(b.first, b.last, b.episodes) for b in blocks] == [(1, 2, 8), (3, 3, 4)]
    import learning_table

    lakes = [env.generate_instance(e.seed)["map"] for e in episodes[8:]]
    assert blocks[1].rules["sideways first"] == sum(learning_table.rule_solves(m, "sideways", False) for m in lakes) / 4
    assert [[b.shares.choices, b.shares.chose_hole] for b in blocks] == [by_block[0], by_block[1]]
    assert sum(b.shares.choices for b in blocks) > 5 and not any(b.mismatched for b in blocks)
    assert blocks[0].action_entropy == 0.75 and blocks[1].action_entropy == 0.2
    assert blocks[0].success == sum(e.success for e in episodes[:8]) / 8
    # The script: a table per run, the broken metrics line reported, a run of another env refused.
    sys.argv, argv = ["choice_rollouts.py", str(tmp_path / "run"), "--block", "2"], sys.argv
    try:
        choice_rollouts.main()
        captured = capsys.readouterr()
        assert "| 1–2 | 8 |" in captured.out and "| 3–3 | 4 |" in captured.out
        assert "metrics.jsonl:4" in captured.err
        other = RunDir(tmp_path / "blocks")
        with other.trajectory_writer("train", env="blocksworld", split="train") as writer:
            writer.write_trajectory(replace(episodes[0], env="blocksworld"))
        sys.argv = ["choice_rollouts.py", str(tmp_path / "blocks")]
        with pytest.raises(SystemExit, match="reads FrozenLake runs"):
            choice_rollouts.main()
    finally:
        sys.argv = argv


def test_the_rules_on_the_test_lakes_and_a_run_that_plays_the_sideways_rule():
    import learning_table
    from hindsight.logs import read_run

    # The hand-drawn lake: every way toward the goal meets a hole, and the safe rule, which
    # steps back and forth beside (2,4), runs out of its 8 moves.
    lake = ["SFFF", "FHFH", "FFFH", "HFFG"]
    assert not any(learning_table.rule_solves(lake, first, safe) for first, safe in learning_table.RULES.values())
    assert learning_table.rule_solves(["SFF", "FFF", "FFG"], "vertical", False)
    seeds = learning_table.TEST_LAKE.split_seeds("test", 300)
    maps = {seed: learning_table.TEST_LAKE.generate_instance(seed)["map"] for seed in seeds}
    solved = {name: {s for s in seeds if learning_table.rule_solves(maps[s], *rule)}
              for name, rule in learning_table.RULES.items()}
    assert [len(tasks) for tasks in solved.values()] == [163, 189, 242]  # 0.543, 0.630, 0.807
    # grpo-s0 of the hole-free benchmark plays the sideways-first rule at every test move, so it
    # solves exactly the rule's tasks.
    _, outcomes = read_run(Path(__file__).resolve().parents[1] / "results" / "learning-holefree" / "grpo-s0")
    assert {o.task_seed for o in outcomes if o.success} == solved["sideways first"]


def test_the_learning_table_replays_each_run_on_the_lake_its_config_tested_on(tmp_path):
    import learning_table
    import yaml

    from hindsight.envs.frozenlake import FrozenLake

    dense = FrozenLake(size=4, max_steps=8, p_hole=0.5)
    seed = next(s for s in range(100) if dense.generate_instance(s) != learning_table.TEST_LAKE.generate_instance(s))
    # A training run: its test lakes are env_kwargs with eval_env_kwargs over them (twins off).
    train = tmp_path / "grpo-s0"
    train.mkdir()
    train.joinpath("config.yaml").write_text(yaml.safe_dump({
        "kind": "grpo", "env": "frozenlake", "env_kwargs": {"max_steps": 8, "view": "compass", "p_hole": 0.5, "twins": True},
        "eval_env_kwargs": {"twins": False}}))
    lake = learning_table.lake_tested_on(train)
    assert (lake.p_hole, lake.twins) == (0.5, False)
    assert lake.generate_instance(seed) == dense.generate_instance(seed)
    # An evaluation keeps its lake in env_kwargs.
    start = tmp_path / "start"
    start.mkdir()
    start.joinpath("config.yaml").write_text(yaml.safe_dump({
        "kind": "eval", "env": "frozenlake", "env_kwargs": {"size": 4, "max_steps": 8, "view": "compass", "p_hole": 0.5}}))
    assert learning_table.lake_tested_on(start).generate_instance(seed) == dense.generate_instance(seed)
    # No config: the benchmarks' p_hole 0.2 lake; another env: none (its moves are not replayed).
    assert learning_table.lake_tested_on(tmp_path / "missing") is learning_table.TEST_LAKE
    other = tmp_path / "other"
    other.mkdir()
    other.joinpath("config.yaml").write_text(yaml.safe_dump({"kind": "eval", "env": "sudoku"}))
    assert learning_table.lake_tested_on(other) is None


def scored_row(failure: int, at: int, policy_score: float, scores: list[float], candidate: bool) -> dict:
    """A line of a CSO round's scored.jsonl, as the round writes it."""
    from hindsight.agent.cso import ScoredStep, StepAlternatives

    actions = ("up", "down", "left")[:len(scores)]
    return asdict(ScoredStep(StepAlternatives(failure, at, "right", actions), policy_score, tuple(scores),
                                candidate))


def test_cso_scored_splits_the_prms_scores_of_the_policys_last_and_earlier_moves(tmp_path, capsys):
    import cso_scored

    round_dir = tmp_path / "cso-learned-s0" / "round-1"
    run = RunDir(round_dir)
    with run.trajectory_writer("rollouts", env="frozenlake", split="train") as writer:
        for task, (success, moves) in enumerate([(False, 2), (True, 3), (False, 1)]):
            writer.write_trajectory(outcome(task, success, moves))
    (round_dir / "trajectories" / "rollouts.jsonl").rename(round_dir / "rollouts.jsonl")
    # Failure 0 has steps 0 and 1 (its last), failure 1 (the third rollout) only step 0.
    rows = [(0, 0, 1.0, [0.25, 1.0], False), (0, 1, 1.0, [0.0], False), (1, 0, 0.0, [1.0, 0.25], True)]
    (round_dir / "scored.jsonl").write_text("".join(
        json.dumps(scored_row(f, at, p, alts, c)) + "\n" for f, at, p, alts, c in rows))
    r = cso_scored.round_scores(round_dir)
    assert (r.failures, r.rated, r.candidates) == (2, 3, 1)
    assert sorted(r.last_moves) == [0.0, 1.0] and r.earlier_moves == (1.0,)
    assert cso_scored.cell(r.last_moves) == "0.50, 1 of 2 good" and cso_scored.cell(()) == "–"
    assert cso_scored.cell(r.alternatives) == "0.50, 2 of 5 good"
    (round_dir / "scored.jsonl").write_text(json.dumps(scored_row(5, 0, 1.0, [], False)) + "\n")
    with pytest.raises(ValueError, match="failure 5 is not one of the round's 2"):
        cso_scored.round_scores(round_dir)
    with pytest.raises(ValueError, match="a live CSO round folder"):
        cso_scored.round_scores(tmp_path)


def _random_attempts(folder: Path, episodes: int = 4) -> list[Trajectory]:
    from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
    from hindsight.envs import make
    from hindsight.llm import load_model

    attempts = RolloutEngine(lambda: make("frozenlake", size=3, max_steps=6, holes="blocking"), load_model("random:0"),
                             RolloutConfig()).run([Task(seed=s) for s in range(episodes)])
    with RunDir(folder).trajectory_writer("eval", env="frozenlake", split="validation") as writer:
        for trajectory in attempts:
            writer.write_trajectory(trajectory)
    return attempts


def test_notes_heldout_judges_the_same_steps_for_every_model_and_holds_them_against_the_oracle(tmp_path, capsys):
    import notes_heldout

    from hindsight.agent.selfguide import oracle_labels
    from hindsight.algos.selfguide import Label

    attempts = _random_attempts(tmp_path / "held-out")
    oracle = [label for t in attempts for label in oracle_labels(t) if label is not None]
    negatives = sum(label == Label.NEGATIVE for label in oracle)
    assert 0 < negatives < len(oracle)  # both kinds of step, so the recalls mean something
    gloomy = tmp_path / "gloomy.json"
    gloomy.write_text(json.dumps(["Reason: The last move did not bring the goal closer.\nLabel: negative"] * len(oracle)))
    mute = tmp_path / "mute.json"
    mute.write_text(json.dumps(["I cannot tell."] * len(oracle)))
    out = tmp_path / "judged.jsonl"
    assert notes_heldout.main([str(tmp_path / "held-out"), f"scripted:{gloomy}", f"scripted:{mute}",
                               "--out", str(out)]) == 0
    table = capsys.readouterr().out
    n, share = len(oracle), negatives / len(oracle)
    assert f"| scripted:{gloomy} | {n} | {share:.3f} | {1 - share:.3f} | 1.000 | 0.000 | 1.000 | 0.000 |" in table
    assert f"| scripted:{mute} | {n} | 0.000 | {1 - share:.3f} | 0.000 | 0.000 | 0.000 | 1.000 | no |" in table
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 * n
    assert [r["oracle"] for r in records[:n]] == [label.value for label in oracle]
    assert {r["label"] for r in records[:n]} == {"negative"} and {r["label"] for r in records[n:]} == {None}
    # Paired against the first model: the mute judge loses every agreement the gloomy one had.
    assert f"| scripted:{mute} | {-share:+.3f} [" in table
    assert "| -1.000 [-1.000, -1.000] | +0.000 [+0.000, +0.000] |" in table
    # --replay prints the same tables from the written notes, without a model.
    assert notes_heldout.main(["--replay", str(out)]) == 0
    assert capsys.readouterr().out == table


def test_notes_heldout_samples_k_notes_a_step_and_pools_them(tmp_path, capsys):
    import notes_heldout

    from hindsight.agent.selfguide import oracle_labels
    from hindsight.algos.selfguide import Label

    attempts = _random_attempts(tmp_path / "held-out")
    oracle = [label for t in attempts for label in oracle_labels(t) if label is not None]
    n, negatives = len(oracle), sum(label == Label.NEGATIVE for label in oracle)
    # The scripted judge answers in order: every note of the first sample negative, of the second positive.
    script = tmp_path / "two-minds.json"
    script.write_text(json.dumps(["Reason: no.\nLabel: negative"] * n + ["Reason: yes.\nLabel: positive"] * n))
    out = tmp_path / "judged.jsonl"
    assert notes_heldout.main([str(tmp_path / "held-out"), f"scripted:{script}", "--temperature", "1",
                               "--samples", "2", "--seed", "3", "--out", str(out)]) == 0
    # Each sample agrees exactly where the other does not, so every pooled rate is one half.
    always = 1 - negatives / n
    assert f"| scripted:{script} | {2 * n} | 0.500 | {always:.3f} | 0.500 | 0.500 | 0.500 | 0.000 |" in capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["sample"] for r in records] == [0] * n + [1] * n
    assert [(r["trajectory"], r["at"]) for r in records[:n]] == [(r["trajectory"], r["at"]) for r in records[n:]]
    assert {r["label"] for r in records[:n]} == {"negative"} and {r["label"] for r in records[n:]} == {"positive"}


def test_notes_heldout_names_each_model_or_each_replayed_file_with_as(tmp_path, capsys):
    import notes_heldout

    _random_attempts(tmp_path / "held-out")
    script = tmp_path / "gloomy.json"
    script.write_text(json.dumps(["Reason: no.\nLabel: negative"] * 200))
    # One model judged twice, as two runs would: --as tells the two apart in the tables and the file.
    outs = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    for out, name in zip(outs, ("first", "second")):
        assert notes_heldout.main([str(tmp_path / "held-out"), f"scripted:{script}", "--as", name,
                                   "--out", str(out)]) == 0
        assert f"| {name} | " in capsys.readouterr().out
        assert {json.loads(line)["model"] for line in out.read_text().splitlines()} == {name}
    # A replay keeps the written names, or gives each file's notes a new one.
    assert notes_heldout.main(["--replay", *map(str, outs)]) == 0
    kept = capsys.readouterr().out
    assert "| first | " in kept and "model − first" in kept
    assert notes_heldout.main(["--replay", *map(str, outs), "--as", "T = 1", "T = 0.5"]) == 0
    named = capsys.readouterr().out
    assert "| T = 1 | " in named and "| model − T = 1 |" in named
    assert "| T = 0.5 | +0.000 [+0.000, +0.000] |" in named
    both = tmp_path / "both.jsonl"
    both.write_text(outs[0].read_text() + outs[1].read_text())
    for argv, message in ((["--replay", str(both), "--as", "x"], "holds the notes of 2 models (first, second)"),
                          (["--replay", *map(str, outs), "--as", "x"], "one name a --replay file: 2 --replay files, 1 name"),
                          (["--replay", *map(str, outs), "--as", "x", "x"], "--as names must differ"),
                          ([str(tmp_path / "held-out"), "smollm2", "--as", "a", "b"], "one name a model: 1 model, 2 names")):
        with pytest.raises(SystemExit) as exit_info:
            notes_heldout.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_notes_heldout_refuses_what_it_cannot_judge(tmp_path, capsys):
    import notes_heldout

    _random_attempts(tmp_path / "held-out", episodes=1)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("kind: grpo\n")
    for argv, message in (([str(tmp_path / "missing"), "smollm2"], "no such log or run folder"),
                          ([str(tmp_path / "held-out"), str(tmp_path / "run")], "names no model"),
                          ([str(tmp_path / "held-out"), "scripted:/no/such/script.json"], "script file not found"),
                          ([str(tmp_path / "held-out"), "smollm2", "--episodes", "0"], "at least 1"),
                          ([str(tmp_path / "held-out"), "smollm2", "--samples", "2"], "needs --temperature"),
                          ([str(tmp_path / "held-out"), "smollm2", "--temperature", "-1"], "at least 0")):
        with pytest.raises(SystemExit) as exit_info:
            notes_heldout.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"model": "m", "trajectory": "t", "at": 1, "oracle": "positive", "label": null, "text": ""}\n'
                      '{"model": "m", "trajectory": "t", "at": 2, "oracle": "sure"}\n')
    unpaired = tmp_path / "unpaired.jsonl"
    unpaired.write_text("".join(json.dumps({"model": model, "trajectory": "t", "at": at, "oracle": "positive",
                                            "label": "positive", "text": ""}) + "\n" for model, at in (("a", 1), ("b", 2))))
    for argv, message in ((["--replay", str(broken)], f"{broken}:2: not a judged note"),
                          (["--replay", str(tmp_path / "none.jsonl")], "no such file"),
                          (["--replay", str(broken), str(tmp_path / "held-out")], "no such file"),
                          ([str(tmp_path / "held-out")], "at least one model"),
                          (["--replay", str(unpaired)], "judged other steps than a: no pairing")):
        with pytest.raises(SystemExit) as exit_info:
            notes_heldout.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_notes_heldout_bootstrap_matches_a_plain_loop_over_the_same_draws():
    import notes_heldout
    import numpy as np

    rng = np.random.default_rng(3)
    trajectories, draws = 7, 50
    # counts as trajectory_counts lays them out: hits never exceed their totals; trajectory 0
    # has no oracle-negative step, so a draw of it alone has no negative recall
    totals = rng.integers(0, 4, size=(2, trajectories, 3))
    totals[:, 0, 1] = 0
    hits = rng.integers(0, 4, size=totals.shape) % (totals + 1)
    base, other = (np.stack([hits[m], totals[m]], axis=-1).reshape(trajectories, 6) for m in (0, 1))
    drawn = rng.integers(trajectories, size=(draws, trajectories))
    drawn[0] = 0

    def plain(counts, rows):
        summed = [sum(int(counts[r][i]) for r in rows) for i in range(6)]
        return [summed[i] / summed[i + 1] if summed[i + 1] else None for i in (0, 2, 4)]

    got = notes_heldout.bootstrap_differences(base, other, drawn)
    for d in range(draws):
        for k, (a, b) in enumerate(zip(plain(base, drawn[d]), plain(other, drawn[d]))):
            if a is None or b is None:
                assert np.isnan(got[d, k])
            else:
                assert got[d, k] == pytest.approx(b - a, abs=1e-12)
    assert np.isnan(got[0, 1])


def test_learning_curves_set_runs_side_by_side_per_update_live_or_kept(tmp_path, capsys):
    import gzip

    import learning_curves

    live, kept = tmp_path / "runs" / "sg-s0", tmp_path / "results" / "gr-s0"
    live.mkdir(parents=True)
    kept.mkdir(parents=True)
    (live / "metrics.jsonl").write_text(
        '{"step": 0, "eval/success_rate": 0.5}\n{"step": 1, "selfguide/positive_rate": 0.25}\n{"step": 2, "selfg\n')
    rows = [{"step": 0}, {"step": 1, "selfguide/positive_rate": 0.25, "selfguide/lambda": 0.0},
            {"step": 2, "selfguide/positive_rate": 0.5, "selfguide/lambda": 1.0},
            {"step": 2, "final_test/success_rate": 0.6}]
    (kept / "metrics.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    argv = sys.argv
    sys.argv = ["learning_curves.py", str(kept), str(live), "--metric", "selfguide/lambda", "selfguide/positive_rate"]
    try:
        learning_curves.main()
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "| update | gr-s0: selfguide/lambda | sg-s0: selfguide/lambda | gr-s0: selfguide/positive_rate "
        "| sg-s0: selfguide/positive_rate |",
        "|---|---|---|---|---|",
        "| 0 | – | – | – | – |",
        "| 1 | 0.00 | – | 0.25 | 0.25 |",
        "| 2 | 1.00 | – | 0.50 | – |",  # the live run's update 2 is a broken line; the kept final row is no update
    ]
    assert "metrics.jsonl:3" in err and "skipped" in err
    with pytest.raises(SystemExit, match="no metrics.jsonl or metrics.jsonl.gz"):
        learning_curves.read_rows(tmp_path / "nowhere")
