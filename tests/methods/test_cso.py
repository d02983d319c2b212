"""CSO end to end on a tiny model: the funnel, pairs on disk, DPO through TRL, resumable stages."""

import json
import shutil

import pytest
import torch

from hindsight.configs import ConfigError, from_mapping
from hindsight.methods.cso import CSOConfig, train_cso
from hindsight.train.checkpoint import list_checkpoints

from .test_training_loops import read_metrics


def cso_config(model_dir, **overrides) -> CSOConfig:
    values = dict(model=f"hf:{model_dir}", env_kwargs={"size": 3, "max_steps": 4}, rounds=2, tasks_per_round=4, k=2,
                  max_new_tokens=6, final_eval_episodes=2, batch_size=4, micro_batch_size=2, epochs=1, lr=1e-3,
                  keep_checkpoints=0)
    values.update(overrides)
    return CSOConfig(**values)


def adapter_weights(run, step):
    checkpoint = next(c for c in list_checkpoints(run) if c.step == step)
    return {k: v for k, v in torch.load(checkpoint.path / "model" / "weights.pt").items() if "lora" in k}


def test_a_round_without_verification_trains_dpo_on_prm_pairs(tiny_model_dir, tmp_path):
    # The untrained tiny policy fails everything and its branches could not verify anything,
    # so this run uses the PRM-only ablation to reach DPO.
    # Two-step episodes: DPO's cost grows with every token of every pair, and two steps give each
    # round its pairs.
    run = train_cso(cso_config(tiny_model_dir, verification=False, tasks_per_round=2,
                               env_kwargs={"size": 3, "max_steps": 2}), tmp_path / "cso")
    rows = [r for r in read_metrics(run) if "cso/pairs" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r, row in enumerate(rows, start=1):
        pairs = [json.loads(line) for line in (run / f"round-{r}" / "pairs.jsonl").read_text().splitlines()]
        assert row["cso/pairs"] == len(pairs) > 0 and row["cso/failed_trajectories"] == 2
        assert row["cso/branched"] == 0 and row["cso/candidates"] > 0
        assert "cso/verification_rate" not in row  # nothing branched: no rate, rather than a 0 that reads as failure
        assert row["tide/auv"] == 0.0 and 0.0 <= row["tide/loop_ratio"] <= 1.0  # every rollout failed
        assert row["dpo/optimizer_steps"] >= 1 and row["dpo/first_loss"] == pytest.approx(0.6931, abs=1e-3)
        assert all(p["round"] == r and p["branch"] is None and p["chosen"] != p["rejected"] for p in pairs)
        # The exact oracle's pairs are all right by the planner; its scores carry no noise.
        assert row["cso/pair_accuracy"] == 1.0 and all(p["planner_prefers_chosen"] for p in pairs)
        assert "cso/prm_noised" not in row
    # DPO moved the policy adapter between rounds (the reference is the round's starting policy).
    first, second = adapter_weights(run, 1), adapter_weights(run, 2)
    assert any(not torch.equal(first[k], second[k]) for k in first)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["kind"] == "cso" and summary["episodes"] == 2


def test_a_noisy_prm_logs_what_it_changed_and_the_pairs_it_got_wrong(tiny_model_dir, tmp_path):
    run = train_cso(cso_config(tiny_model_dir, method="step-dpo", prm="noisy:0.6:oracle", rounds=1, tasks_per_round=3,
                               env_kwargs={"size": 3, "max_steps": 2},
                               final_eval_split=""), tmp_path / "step-dpo")
    (row,) = [r for r in read_metrics(run) if "cso/pairs" in r]
    scored = [json.loads(line) for line in (run / "round-1" / "scored.jsonl").read_text().splitlines()]
    ratings = [(a, c) for step in scored for a, c in zip([step["policy_score"], *step["scores"]], step["clean_scores"])]
    assert len(ratings) == sum(1 + len(step["scores"]) for step in scored) > 0  # every rating has its clean score
    assert row["cso/prm_noised"] == pytest.approx(sum(a != c for a, c in ratings) / len(ratings))
    assert 0.0 < row["cso/prm_noised"] < 1.0
    pairs = [json.loads(line) for line in (run / "round-1" / "pairs.jsonl").read_text().splitlines()]
    assert pairs and row["cso/pair_accuracy"] == pytest.approx(sum(p["planner_prefers_chosen"] for p in pairs) / len(pairs))


def test_with_verification_an_unverifiable_policy_gets_no_pairs_and_no_update(tiny_model_dir, tmp_path):
    run = train_cso(cso_config(tiny_model_dir, rounds=1, final_eval_episodes=0, final_eval_split=""),
                    tmp_path / "cso")
    (row,) = [r for r in read_metrics(run) if "cso/pairs" in r]
    branches = (run / "round-1" / "branches.jsonl").read_text().splitlines()
    assert row["cso/branched"] == len(branches) > 0
    assert row["cso/verified"] == 0 and row["cso/pairs"] == 0 and "dpo/loss" not in row
    assert row["cso/verification_rate"] == 0.0


def test_a_resumed_run_reuses_the_finished_stages_of_its_round(tiny_model_dir, tmp_path):
    run = train_cso(cso_config(tiny_model_dir, final_eval_episodes=0, final_eval_split=""), tmp_path / "cso")
    rollouts = (run / "round-2" / "rollouts.jsonl").read_text()
    branches = (run / "round-2" / "branches.jsonl").read_text()
    # Lose round 2's checkpoint, its later stages and the summary: as if the process died
    # while verifying round 2.
    for checkpoint in list_checkpoints(run):
        if checkpoint.step == 2:
            shutil.rmtree(checkpoint.path)
    (run / "summary.json").unlink()
    (run / "round-2" / "branches.jsonl").unlink()
    (run / "round-2" / "pairs.jsonl").unlink()
    train_cso(None, run, resume=True)
    assert (run / "round-2" / "rollouts.jsonl").read_text() == rollouts  # reused, not rolled out again
    assert (run / "round-2" / "branches.jsonl").read_text() == branches  # recomputed the same way
    assert [r["step"] for r in read_metrics(run) if "cso/pairs" in r] == [1, 2]
    assert (run / "round-2" / "pairs.jsonl").exists() and (run / "summary.json").exists()


@pytest.mark.parametrize("values, message", [
    ({"pair_source": "policy+policy"}, "go together"),
    ({"expert": "policy"}, "go together"),
    ({"gamma_low": 0.8, "gamma_high": 0.6}, "gamma_low <= gamma_high"),
    ({"pair_source": "expert+expert", "verification": False}, "needs verification"),
    ({"k": 0}, "k must be"),
    ({"method": "ppo"}, "method must be one of"),
    ({"self_guide": True}, "self_guide is a GRPO switch"),
    ({"prm": "noisy:2:oracle"}, "noisy:EPS:PRM"),
    ({"batch_size": 6, "micro_batch_size": 4}, "multiple of micro_batch_size"),
])
def test_bad_cso_configs_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        from_mapping(CSOConfig, values)


def test_the_ipr_baseline_branches_every_action_several_times(tiny_model_dir, tmp_path):
    run = train_cso(cso_config(tiny_model_dir, method="ipr", rounds=1, tasks_per_round=2, k=1, mc_rollouts=2,
                               final_eval_split=""), tmp_path / "ipr")
    (row,) = [r for r in read_metrics(run) if "cso/pairs" in r]
    scored = [json.loads(line) for line in (run / "round-1" / "scored.jsonl").read_text().splitlines()]
    branches = [json.loads(line) for line in (run / "round-1" / "branches.jsonl").read_text().splitlines()]
    # The policy's own action and each alternative, at every step, each continued twice.
    assert len(branches) == row["cso/branched"] == sum(1 + len(s["alternatives"]["actions"]) for s in scored)
    assert all(len(b["continuations"]) == 2 for b in branches)


def test_eto_pairs_the_experts_success_with_the_policys_failure_on_the_same_task(tiny_model_dir, tmp_path):
    from hindsight.methods.eto import ETOConfig, train_eto

    config = ETOConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3, "max_steps": 6}, rounds=1,
                       tasks_per_round=3, max_new_tokens=6, batch_size=2, micro_batch_size=1, epochs=2, lr=1e-3,
                       final_eval_split="")
    run = train_eto(config, tmp_path / "eto")
    (row,) = [r for r in read_metrics(run) if "eto/pairs" in r]
    pairs = [json.loads(line) for line in (run / "round-1" / "pairs.jsonl").read_text().splitlines()]
    assert row["eto/failed_trajectories"] == 3 and row["eto/pairs"] == len(pairs) == 3  # the oracle solves each
    assert row["dpo/first_loss"] == pytest.approx(0.6931, abs=1e-3) and row["dpo/optimizer_steps"] == 4
    for pair in pairs:  # the chosen side replays to a success with the registry alone
        from hindsight.envs import make

        env = make(pair["env"], **pair["env_kwargs"])
        env.reset(pair["seed"])
        for action in pair["chosen_actions"]:
            _, _, _, _, info = env.step(action)
        assert info["success"] and pair["chosen_actions"] != pair["rejected_actions"]
    with pytest.raises(ConfigError, match="expert cannot be 'policy'"):
        from_mapping(ETOConfig, {"expert": "policy"})
