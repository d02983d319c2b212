"""benchmarks/cso_signals.py: the planner's verdicts behind the CSO comparison's test successes."""

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from hindsight.envs import make
from hindsight.logs import RunDir, read_trajectories
from hindsight.logs.schema import trajectory_to_record
from hindsight.types import Step, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import cso_signals  # noqa: E402

LAKE = {"size": 5, "max_steps": 10}


def play(seed: int, moves, p: float = 0.9, kwargs=LAKE) -> Trajectory:
    """A real FrozenLake episode of the given moves (each logged with probability p), stopped where the env ends it."""
    env = make("frozenlake", **kwargs)
    observation, _ = env.reset(seed)
    steps, terminated, truncated = [], False, False
    for index, move in enumerate(moves):
        state = env.state_key()
        next_observation, reward, terminated, truncated, _ = env.step(move)
        steps.append(Step(index=index, observation=observation, state_key=state, raw=f"<action>{move}</action>",
                          action=move, analysis=None, valid=True, reward=reward, score=env.score(), feedback="",
                          logprobs=(math.log(p),)))
        observation = next_observation
        if terminated or truncated:
            break
    return Trajectory(env="frozenlake", seed=seed, instruction="", steps=tuple(steps), final_observation=observation,
                      final_state_key=env.state_key(), success=env.is_success(), score=env.score(),
                      terminated=terminated, truncated=truncated, split="test", id=f"frozenlake:{seed}:0",
                      env_kwargs=dict(kwargs))


def oracle_moves(seed: int, first: str | None = None) -> list[str]:
    """The planner's path (after `first`, if given) to the goal."""
    env = make("frozenlake", **{**LAKE, "max_steps": 50})
    env.reset(seed)
    moves = [first] if first else []
    if first:
        env.step(first)
    while not env.done:
        moves.append(env.oracle_action())
        env.step(moves[-1])
    return moves


def neighbours(seed: int) -> dict[str, str]:
    """Each move from the task's start and the planner's verdict on it."""
    env = make("frozenlake", **{**LAKE, "max_steps": 50})
    env.reset(seed)
    return {move: cso_signals.move_kind(env, move) for move in ("up", "down", "left", "right")}


def first_task(want, other_than: int = -1) -> int:
    return next(seed for seed in range(500) if seed != other_than and want(neighbours(seed)))


def write(folder: Path, log: str, trajectories) -> None:
    run = RunDir(folder)
    with run.trajectory_writer(log, env="frozenlake", split="test") as writer:
        for trajectory in trajectories:
            writer.write_trajectory(trajectory)
    run.write_summary({"success_rate": sum(t.success for t in trajectories) / len(trajectories)})


@pytest.fixture()
def comparison(tmp_path):
    """The start falls into a hole confidently on one task and walks the planner's path on the other,
    unsure of its first move; the trained run solves the first and takes a worse first move on the other."""
    fall = first_task(lambda kinds: "fatal" in kinds.values())
    detour = first_task(lambda kinds: "away" in kinds.values() or "stay" in kinds.values(), other_than=fall)
    fatal = next(m for m, kind in neighbours(fall).items() if kind == "fatal")
    worse = next(m for m, kind in neighbours(detour).items() if kind in ("away", "stay"))
    start = [play(fall, [fatal], p=0.95), play(detour, oracle_moves(detour), p=0.55)]
    trained = [play(fall, oracle_moves(fall)), play(detour, oracle_moves(detour, first=worse), p=0.6)]
    write(tmp_path / "start", "eval", start)
    write(tmp_path / "cso-s0", "eval-test-final", trained)
    rounds = tmp_path / "cso-s0" / "round-1"
    rounds.mkdir()
    pair = {"env": "frozenlake", "env_kwargs": LAKE, "seed": fall, "prefix_actions": [],
            "chosen_action": oracle_moves(fall)[0], "rejected_action": fatal}
    (rounds / "pairs.jsonl").write_text(json.dumps(pair) + "\n")
    # Verification of the planner's first move with a 2-move budget: the continuation runs out of moves.
    short = {**LAKE, "max_steps": 2}
    branch = {"pick": {"trajectory": 0, "at": 0, "alternative": 0, "action": oracle_moves(fall)[0]},
              "continuations": [trajectory_to_record(play(fall, oracle_moves(fall)[:2], kwargs=short))]}
    own_move = {"pick": {"trajectory": 0, "at": 0, "alternative": -1, "action": fatal},
                "continuations": [trajectory_to_record(play(fall, [fatal], kwargs=short))]}
    (rounds / "branches.jsonl").write_text(json.dumps(branch) + "\n" + json.dumps(own_move) + "\n")
    # A judge PRM's ratings of the round's one failure at its first step: the fatal move and the planner's.
    (rounds / "rollouts.jsonl").write_text(json.dumps(trajectory_to_record(play(fall, [fatal]))) + "\n")
    scored = {"alternatives": {"trajectory": 0, "at": 0, "policy_action": fatal, "actions": [oracle_moves(fall)[0]],
                               "unreadable": 0, "repeats": 0},
              "policy_score": 0.2, "scores": [0.9], "candidate": True, "prm_failures": 1}
    (rounds / "scored.jsonl").write_text(json.dumps(scored) + "\n")
    (tmp_path / "cso-s0" / "config.yaml").write_text("method: cso\nprm: smollm2\n")
    return tmp_path, fall, detour


def row(text: str, first_cell: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_signals_show_where_a_run_left_the_start_and_what_its_pairs_and_branches_were(comparison, capsys):
    out, fall, detour = comparison
    assert cso_signals.main([str(out)]) == 0
    text = capsys.readouterr().out
    sections = text.split("\n\n")

    changes = row(sections[1], "cso-s0")
    assert changes[:4] == ["cso-s0", "2", "1 / 1 / 0", "0.75"]  # median of the start's 0.95 and 0.55
    trained = {t.seed: t for t in read_trajectories(out / "cso-s0" / "trajectories" / "eval-test-final.jsonl")}
    probabilities = [0.9] * trained[fall].num_steps + [0.6] * trained[detour].num_steps
    assert changes[4] == f"{statistics.median(probabilities):.2f}"
    assert "fatal → toward 1" in changes[5]

    assert "1 above 0.8" in sections[2]
    assert row(sections[3], "cso-s0") == ["cso-s0", "1", "0"]  # the confident fall solved

    rejected, chosen = row(sections[5], "cso-s0")[2:]
    assert rejected == "0 / 0 / 0 / 0 / 1" and chosen == "1 / 0 / 0 / 0 / 0"
    # The policy's own-move rollout is left out; the alternative's continuation ran out of moves,
    # and with a 2-move budget the planner's path (longer) could never have succeeded.
    assert row(sections[9], "cso-s0") == ["cso-s0", "1", "0", "0", "1", "1"]

    # The judge's score of each move by the planner's verdict, and its unreadable answer.
    assert row(sections[7], "cso-s0") == ["cso-s0", "smollm2", "0.90 (1)", "–", "–", "–", "0.20 (1)", "1"]


def test_without_the_start_the_signals_say_what_is_missing(tmp_path, capsys):
    assert cso_signals.main([str(tmp_path)]) == 2
    assert "no evaluation of the start" in capsys.readouterr().err
