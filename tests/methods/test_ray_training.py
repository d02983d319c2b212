"""GRPO through Ray workers: environments in env actors, rollouts sampled by a model replica that holds
the weights of the last update, checked at every sync."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hindsight.methods.grpo import GRPOConfig, train_grpo

from .test_adapter_training import ALPHA, RANK, save_peft_adapter
from .test_training_loops import read_metrics

#: Trainer and replica compute in float32 on CPU: their probe log-probs agree to ~1e-6.
TOLERANCE = 1e-4


def ray_config(model_dir, **overrides) -> GRPOConfig:
    values = dict(
        model=f"hf:{model_dir}", env="ray:frozenlake", env_kwargs={"size": 3, "max_steps": 2}, updates=2,
        tasks_per_update=2, group_size=2, max_new_tokens=4, eval_every=0, final_eval_episodes=2, checkpoint_every=1,
        lr=1e-2, epochs=2, micro_batch_size=4, concurrency=4, lora_rank=RANK, lora_alpha=ALPHA, kl_coef=0.05,
        model_workers=1, rollout_server_tolerance=TOLERANCE,
    )
    values.update(overrides)
    return GRPOConfig(**values)


def turns(run):
    return [[(step["raw"], step["state_key"]) for step in json.loads(line)["steps"]]
            for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]


@pytest.mark.slow
def test_grpo_trains_with_env_actors_and_a_model_replica(ray_cluster, tiny_lora_model_dir, tmp_path):
    # A random non-zero start: the KL term then moves the weights at every update, whatever the
    # returns of the tiny model's (always invalid) answers, so each sync pushes new weights.
    start = str(save_peft_adapter(tiny_lora_model_dir, tmp_path / "start", seed=3))
    config = ray_config(tiny_lora_model_dir, init_from=start)
    run = train_grpo(config, tmp_path / "ray")
    rows = read_metrics(run)
    assert [row["step"] for row in rows if "policy/loss" in row] == [1, 2]
    synced = [row for row in rows if "sync/adapters" in row]
    assert len(synced) == 3  # the weights before each update, and the final ones before the final evaluation
    for row in synced:
        assert row["sync/relative_gap"] <= TOLERANCE and row["sync/confirmed"] == 1.0
    assert not any("workers/redone_chunks" in row for row in rows)
    assert "final_test/success_rate" in rows[-1]

    # One replica samples with the seed the in-process model would use, from the same weights:
    # the run is the one the trainer would have made alone, environments in-process.
    alone = train_grpo(replace(config, env="frozenlake", model_workers=0), tmp_path / "alone")
    assert turns(run) == turns(alone)
    train = [json.loads(line) for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]
    assert {t["env"] for t in train} == {"frozenlake"} and train[0]["env_kwargs"]["size"] == 3


def test_model_workers_take_adapters_and_no_rollout_server():
    with pytest.raises(ValueError, match="set one"):
        GRPOConfig(model_workers=2, rollout_server="http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="trains no adapter"):
        GRPOConfig(model_workers=2, full_finetune=True)
    with pytest.raises(ValueError, match=">= 0"):
        GRPOConfig(model_workers=-1)
