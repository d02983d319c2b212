"""Training with a rollout server, against a fake vLLM that really loads the adapters and scores tokens."""

from __future__ import annotations

import json

import pytest

from hindsight.llm import ModelError, load_model
from hindsight.llm import vllm as vllm_module
from hindsight.llm.openai import OpenAIBackend, parse_token_id
from hindsight.methods.grpo import GRPOConfig, train_grpo
from hindsight.methods.model_setup import load_trainable
from hindsight.roles import RoleBackend
from hindsight.train.served import (
    LogprobGap, ServedPolicy, ServedRolloutError, SyncReport, compare_logprobs, run_tag, sync_metrics,
)
from hindsight.types import GenerationRequest, SamplingParams, conversation
from .fake_vllm import fake_vllm
from .test_adapter_training import ALPHA, RANK, save_peft_adapter
from .test_training_loops import read_metrics

#: Both sides compute in float32 here, so a served adapter matches the trainer to ~1e-6; a
#: tight tolerance lets one update of the tiny model show as a stale server.
TOLERANCE = 1e-4


def served_config(model_dir, url, **overrides) -> GRPOConfig:
    values = dict(
        model=f"hf:{model_dir}", env_kwargs={"size": 3, "max_steps": 2}, updates=2, tasks_per_update=2, group_size=2,
        max_new_tokens=4, eval_every=0, final_eval_episodes=1, checkpoint_every=1, lr=1e-2, epochs=2,
        micro_batch_size=4, concurrency=4, lora_rank=RANK, lora_alpha=ALPHA, kl_coef=0.05,
        rollout_server=url, rollout_server_tolerance=TOLERANCE,
    )
    values.update(overrides)
    return GRPOConfig(**values)


@pytest.fixture
def random_start(tiny_lora_model_dir, tmp_path):
    """A random non-zero policy adapter: the KL term to the base then moves the weights at every
    update, whatever the returns of the tiny model's (always invalid) answers."""
    return str(save_peft_adapter(tiny_lora_model_dir, tmp_path / "start", seed=3))


def test_grpo_samples_from_the_server_and_checks_every_sync(tiny_lora_model_dir, random_start, tmp_path):
    with fake_vllm(tiny_lora_model_dir) as (url, server):
        run = train_grpo(served_config(tiny_lora_model_dir, url, init_from=random_start), tmp_path / "grpo")
    tag = run_tag(run)
    assert server.loads == [f"{tag}-policy-step-{step:06d}" for step in (0, 1, 2)]
    assert server.unloads == server.loads  # each replaced when the next arrived, the last at the end
    assert server.chats > 0

    rows = read_metrics(run)
    trained = [row for row in rows if "policy/loss" in row]
    assert [row["step"] for row in trained] == [1, 2]
    synced = [row for row in rows if "sync/adapters" in row]
    assert len(synced) == 3  # the weights before each update, and the final ones before the final evaluation
    for row in synced:
        assert row["sync/adapters"] == 1 and row["sync/seconds"] > 0
        assert row["sync/relative_gap"] <= TOLERANCE and row["sync/max_logprob_gap"] < 1e-3
        assert row["sync/confirmed"] == 1.0  # each update moved the probes by more than the tolerance
    assert "final_test/success_rate" in rows[-1]

    eos = load_model(f"hf:{tiny_lora_model_dir}").eos_ids
    turns = [step for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]
             for step in json.loads(line)["steps"]]
    assert turns and all(turn["token_ids"] and len(turn["token_ids"]) == len(turn["logprobs"]) for turn in turns)
    assert not any(turn["token_ids"][-1] in eos for turn in turns)  # cut like the in-process backend cuts it
    assert (run / "served" / "step-000002" / "policy" / "adapter_config.json").is_file()
    assert not (run / "served" / "step-000001").exists()


def test_a_server_that_keeps_the_old_weights_stops_the_run(tiny_lora_model_dir, random_start, tmp_path):
    with fake_vllm(tiny_lora_model_dir, stale=True) as (url, _):
        with pytest.raises(ServedRolloutError) as info:
            train_grpo(served_config(tiny_lora_model_dir, url, init_from=random_start), tmp_path / "grpo")
    message = str(info.value)
    assert "\n" not in message
    assert f"adapter {run_tag(tmp_path / 'grpo')}-policy-step-000001" in message
    assert "does not serve the trained weights" in message and f"tolerance {TOLERANCE:g}" in message
    rows = read_metrics(tmp_path / "grpo")
    assert [row["step"] for row in rows if "policy/loss" in row] == [1]  # it stopped before sampling update 2


def test_an_update_smaller_than_the_tolerance_is_not_counted_as_confirmed(tiny_lora_model_dir, random_start,
                                                                          tmp_path):
    # With a loose tolerance one update cannot be told from rounding: the first sync is checked
    # whole, the next ones wait until the change since it exceeds the tolerance.
    with fake_vllm(tiny_lora_model_dir) as (url, _):
        run = train_grpo(served_config(tiny_lora_model_dir, url, init_from=random_start,
                                       rollout_server_tolerance=0.5), tmp_path / "grpo")
    assert [row["sync/confirmed"] for row in read_metrics(run) if "sync/adapters" in row] == [1.0, 0.0, 0.0]


def test_a_server_without_token_ids_stops_the_run(tiny_lora_model_dir, tmp_path):
    with fake_vllm(tiny_lora_model_dir, token_ids=False) as (url, _):
        with pytest.raises(ServedRolloutError, match="without the sampled token ids") as info:
            train_grpo(served_config(tiny_lora_model_dir, url, updates=1), tmp_path / "grpo")
    assert "\n" not in str(info.value)


def test_each_role_samples_from_its_own_adapter(tiny_lora_model_dir, tmp_path):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy", "critic"), RANK, ALPHA, False)
    for seed, role in enumerate(("policy", "critic")):
        model.load_adapter(save_peft_adapter(tiny_lora_model_dir, tmp_path / role, seed=seed), role)
    request = [GenerationRequest(conversation(("user", "Go right.")))]
    params = SamplingParams(temperature=0, max_new_tokens=3)
    with fake_vllm(tiny_lora_model_dir) as (url, server):
        served = ServedPolicy.open(url, model, tmp_path / "run", tolerance=TOLERANCE, concurrency=2)
        served.updated(0)
        model.sampler = served.sampler
        answers = {"policy": model.sampler.generate(request, params)[0],
                   "critic": RoleBackend(model, "critic").generate(request, params)[0]}
        served.close()
    tag = run_tag(tmp_path / "run")
    assert server.loads == [f"{tag}-policy-step-000000", f"{tag}-critic-step-000000"] == server.unloads
    prompt = model.backend.encode_chat(request[0].messages)
    for role, other in (("policy", "critic"), ("critic", "policy")):
        answer = answers[role]
        ids = [prompt + list(answer.token_ids)]
        # The sampled tokens' log-probs are the trainer's under that role, and not under the other.
        assert model.sequence_logprobs(role, ids)[0][len(prompt) - 1:] == pytest.approx(answer.logprobs, abs=1e-4)
        assert model.sequence_logprobs(other, ids)[0][len(prompt) - 1:] != pytest.approx(answer.logprobs, abs=1e-4)


def test_the_openai_backend_reads_token_ids_only_when_it_asked_for_them(tiny_lora_model_dir, tmp_path):
    request = [GenerationRequest(conversation(("user", "Go right.")))]
    params = SamplingParams(temperature=0, max_new_tokens=3)
    with fake_vllm(tiny_lora_model_dir) as (url, server):
        server.adapters["base"] = server.base
        asked = OpenAIBackend("base", base_url=url, token_ids=True).generate(request, params)[0]
        plain = OpenAIBackend("base", base_url=url, logprobs=True).generate(request, params)[0]
    assert asked.token_ids is not None and len(asked.token_ids) == len(asked.logprobs) == 3
    assert plain.token_ids is None and plain.logprobs == asked.logprobs


@pytest.mark.parametrize(("token", "expected"), [
    ("token_id:0", 0), ("token_id:49151", 49151), ("token_id:-1", None), ("token_id:12a", None),
    ("token_id:", None), (" token_id:3", None), ("hello", None), (7, None), (None, None),
])
def test_parse_token_id(token, expected):
    assert parse_token_id(token) == expected


def test_compare_logprobs_scales_each_gap_by_the_size_of_the_log_prob():
    assert compare_logprobs([[-1.0, -2.0]], [[-1.0, -2.0]]) == LogprobGap(0.0, 0.0, 2)
    gap = compare_logprobs([[-0.5], [-12.0, -3.0]], [[-1.0], [-9.0, -3.0]])
    # 0.5 / 2 and 3 / 10 and 0, averaged; the largest gap is 3 nats.
    assert gap.mean_relative == pytest.approx((0.25 + 0.3 + 0.0) / 3) and gap.max_abs == 3.0 and gap.tokens == 3
    with pytest.raises(ValueError, match="different numbers"):
        compare_logprobs([[-1.0]], [[-1.0, -2.0]])


def test_sync_metrics_sum_the_cost_and_keep_the_worst_gap():
    reports = [SyncReport("policy", "a", 0.5, LogprobGap(1e-3, 0.2, 10)),
               SyncReport("critic", "b", 0.25, LogprobGap(2e-3, 0.1, 10))]
    assert sync_metrics(reports) == {"sync/adapters": 2.0, "sync/seconds": 0.75, "sync/max_logprob_gap": 0.2,
                                     "sync/relative_gap": 2e-3, "sync/confirmed": 0.0}
    assert sync_metrics([]) == {}


def test_without_vllm_the_vllm_spec_and_rollout_server_say_in_one_line_what_to_do(monkeypatch, tiny_model_dir,
                                                                                  tmp_path):
    monkeypatch.setattr(vllm_module, "vllm_installed", lambda: False)
    for start in (lambda: load_model("vllm:Qwen/Qwen2.5-0.5B-Instruct"),
                  lambda: train_grpo(served_config(tiny_model_dir, "vllm"), tmp_path / "grpo")):
        with pytest.raises(ModelError) as info:
            start()
        message = str(info.value)
        assert "\n" not in message
        assert "pip install vllm" in message and "openai:MODEL" in message and "rollout_server" in message


def test_rollout_server_settings_are_checked_with_the_config(tiny_model_dir):
    with pytest.raises(ValueError, match="base URL"):
        served_config(tiny_model_dir, "localhost:8000")
    with pytest.raises(ValueError, match="full_finetune"):
        served_config(tiny_model_dir, "http://localhost:8000/v1", full_finetune=True, kl_coef=0.0)
    with pytest.raises(ValueError, match="tolerance"):
        served_config(tiny_model_dir, "http://localhost:8000/v1", rollout_server_tolerance=0)
    with pytest.raises(ValueError, match="quotation"):
        served_config(tiny_model_dir, "vllm", rollout_server_args="--chat-template '/unclosed")
