"""The learned PRM: oracle-scored moves, balancing, agreement, SFT of the prm adapter alone, and CSO reading it."""

import json
import sys
from pathlib import Path

import pytest
import torch

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import StepQuery, build_prm, parse_score
from hindsight.envs import make
from hindsight.llm.adapters import export_adapter
from hindsight.llm import load_model
from hindsight.logs import TrajectoryWriter
from hindsight.methods.prm_sft import (PRMSFTConfig, ScoredMove, agreement, balance_scores, oracle_moves, score_text,
                                       train_prm_sft)
from hindsight.methods.cso import CSOConfig
from hindsight.train.checkpoint import list_checkpoints
from hindsight.types import SamplingParams

from .test_training_loops import read_metrics

LAKE = {"size": 3, "max_steps": 3}


def random_attempts(count: int, split: str = "train"):
    engine = RolloutEngine(lambda: make("frozenlake", **LAKE), load_model("random"),
                           RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=4), split=split))
    seeds = make("frozenlake", **LAKE).split_seeds(split, count)
    return engine.run([Task(seed=s) for s in seeds])


def write(path, attempts):
    with TrajectoryWriter(path, env="frozenlake") as writer:
        for attempt in attempts:
            writer.write_trajectory(attempt)
    return str(path)


def test_oracle_moves_score_every_readable_move_as_the_oracle_prm_does():
    attempts = random_attempts(6)
    moves = oracle_moves(attempts)
    assert len(moves) == sum(t.num_steps for t in attempts)
    assert {m.score for m in moves} <= {0.0, 0.25, 0.5, 1.0}
    for move in moves:  # a fall scores 0, and only a fall
        fell = "fell into the hole" in (move.query.trajectory.steps[move.query.at].feedback or "")
        assert (move.score == 0.0) == fell


def test_all_moves_score_every_admissible_move_at_each_state_the_own_one_first():
    attempts = random_attempts(4)
    own, every = oracle_moves(attempts), oracle_moves(attempts, "all")
    states = [(m.query.trajectory.id, m.query.at) for m in every]
    assert len(every) == 4 * len(own) and sorted(set(states)) == sorted((m.query.trajectory.id, m.query.at) for m in own)
    assert [m for m in every if m.query.action == m.query.trajectory.steps[m.query.at].action] == own
    for k in range(0, len(every), 4):  # the own move first, then the others, each once
        state = every[k:k + 4]
        assert len({m.query.action for m in state}) == 4
        # Every state met before the end is safe on a solvable map: some move keeps the task open.
        assert max(m.score for m in state) >= 0.25


def test_balance_scores_caps_the_commonest_score_at_the_next_count():
    moves = [ScoredMove(StepQuery(None, i, "up"), score) for i, score in enumerate([1, 1, 1, 1, 0.25, 1, 0, 0.25, 1])]
    kept = balance_scores(moves)
    assert [m.query.at for m in kept] == [0, 1, 4, 6, 7]  # 1 keeps two: 0.25's count
    assert balance_scores(moves[:4]) == moves[:4]  # one score only: nothing to balance against


def test_score_text_reads_back_as_the_score():
    for score in (0.0, 0.25, 0.5, 1.0):
        assert parse_score(score_text(score)) == score


def test_agreement_against_the_oracle_and_the_majority_scorer():
    oracle = [1.0, 1.0, 0.25, 0.0, 0.0, 0.5]
    learned = [1.0, 0.25, 0.25, 0.1, None, 0.75]
    result = agreement(learned, oracle, majority=1.0)
    assert result.moves == 6 and result.agreement == pytest.approx(3 / 6)  # 1, 0.25, and 0.1 for 0
    assert result.side_agreement == pytest.approx(4 / 6)  # the None and the 1 → 0.25 are on the wrong side
    assert result.fatal_recall == pytest.approx(1 / 2) and result.unreadable == pytest.approx(1 / 6)
    assert result.majority_agreement == pytest.approx(2 / 6) and result.majority_side_agreement == pytest.approx(3 / 6)
    assert agreement([0.5], [1.0], 1.0).fatal_recall is None
    with pytest.raises(ValueError):
        agreement([], [], 1.0)


def test_prm_sft_trains_only_the_prm_adapter_and_cso_reads_it(tiny_lora_model_dir, tmp_path):
    # The tiny model writes no moves of its own: logged random attempts stand in for the policy's.
    held_out = random_attempts(3, "validation")
    config = PRMSFTConfig(model=f"hf:{tiny_lora_model_dir}", env_kwargs=LAKE, attempts=write(tmp_path / "a.jsonl",
                          random_attempts(12)), eval_attempts=write(tmp_path / "held-out.jsonl", held_out), epochs=4,
                          batch_size=4, micro_batch_size=4, lr=5e-2, warmup_steps=0, eval_episodes=2, max_new_tokens=4,
                          checkpoint_every=4)
    run = train_prm_sft(config, tmp_path / "prm-sft")
    rows = read_metrics(run)
    losses = [row["prm_sft/loss"] for row in rows if "prm_sft/loss" in row]
    assert losses[-1] < losses[0] - 1  # it fits the scores
    moves = rows[0]["data/moves"]
    assert rows[0]["data/kept"] <= moves and rows[0]["data/majority_score"] in (0.0, 0.25, 0.5, 1.0)
    final = rows[-1]
    assert 0 <= final["final_validation/agreement"] <= 1 and "final_validation/majority_agreement" in final
    scored = [json.loads(line) for line in (run / "trajectories" / "eval-validation-final.jsonl").read_text()
              .splitlines()[1:]]
    assert final["final_validation/moves"] == sum(t.num_steps for t in held_out)
    assert sum(len(t["prm_scores"]) for t in scored) == final["final_validation/moves"]

    saved = torch.load(list_checkpoints(run)[-1].path / "model" / "weights.pt")
    trained = {k for k, v in saved.items() if "lora_B" in k and v.abs().sum() > 0}
    assert trained and all(".prm." in k for k in trained)

    # Exported, the adapter is a judge PRM that CSO builds from `prm: adapter:OUT`.
    exported = export_adapter(run, tmp_path / "prm", role="prm", dtype="float32")
    cso = CSOConfig(model=f"hf:{tiny_lora_model_dir}", env_kwargs=LAKE, prm=f"adapter:{exported}", max_new_tokens=4)
    expert_role, prm_role = cso.role_specs()
    model = cso.load_policy([expert_role, prm_role])
    current = dict(model.model.named_parameters())
    assert all(torch.equal(current[k], saved[k]) for k in saved if ".prm." in k)
    prm = build_prm(cso.prm, model, allowed=("oracle", "policy", "adapter", "backend"))
    attempt = random_attempts(1)[0]
    [score] = prm.score([StepQuery(attempt, 0, attempt.steps[0].action)])
    assert 0.0 <= score.value <= 1.0


def test_prm_sft_refuses_attempts_without_moves(tiny_lora_model_dir, tmp_path):
    config = PRMSFTConfig(model=f"hf:{tiny_lora_model_dir}", env_kwargs=LAKE, attempts=write(tmp_path / "e.jsonl", []),
                          eval_episodes=0)
    with pytest.raises(ValueError, match="no readable frozenlake moves"):
        train_prm_sft(config, tmp_path / "prm-sft")


def test_prm_probabilities_reads_the_first_answer_token_of_every_held_out_move(tiny_lora_model_dir, tmp_path,
                                                                              monkeypatch, capsys):
    """benchmarks/prm_probabilities.py on a tiny prm-sft run."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import prm_probabilities

    assert prm_probabilities.auc([0.9, 0.5], [0.5, 0.1]) == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert prm_probabilities.auc([], [0.1]) is None
    held_out = random_attempts(3, "validation")
    config = PRMSFTConfig(model=f"hf:{tiny_lora_model_dir}", env_kwargs=LAKE, attempts=write(tmp_path / "a.jsonl",
                          random_attempts(6)), eval_attempts=write(tmp_path / "h.jsonl", held_out), epochs=1,
                          batch_size=4, micro_batch_size=4, eval_episodes=2, max_new_tokens=4, quote=True)
    run = train_prm_sft(config, tmp_path / "prm-sft")
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["prm_probabilities.py", str(run), "--json"])
    prm_probabilities.main()
    result = json.loads(capsys.readouterr().out)
    assert result["moves"] == sum(t.num_steps for t in held_out)
    assert all(0.0 <= p <= 1.0 for p in result["mean_p1_by_oracle_score"].values())
    monkeypatch.setattr(sys, "argv", ["prm_probabilities.py", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="does not exist"):
        prm_probabilities.main()
