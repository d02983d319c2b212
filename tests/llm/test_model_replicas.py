"""Model replicas in Ray actors (`ray:SPEC`): a batch split over them answers as the in-process model
would, pushed weights are the only ones sampled from, and a replica killed mid-run is redone."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest

from hindsight.llm import ModelError, ModelSpec, describe_spec, load_model, parse_spec
from hindsight.types import GenerationRequest, SamplingParams, conversation

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
REQUESTS = [GenerationRequest(conversation(("user", f"Count to {n}."))) for n in range(5)]


def test_ray_specs_name_replicas_of_a_local_model():
    assert parse_spec("ray:smollm2+frozenlake3") == ModelSpec("ray", "smollm2+frozenlake3")
    assert str(parse_spec(" ray:hf:/models/tiny ")) == "ray:hf:/models/tiny"
    assert describe_spec("ray:smollm2").endswith("in replicas that are Ray actors")
    for spec in ("ray:oracle", "ray:openai:gpt", "ray:", "ray:ray:smollm2"):
        with pytest.raises(ModelError) as info:
            parse_spec(spec)
        assert "\n" not in str(info.value)


def test_without_ray_a_ray_spec_says_how_to_install_it(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "ray" else find_spec(name, *args))
    with pytest.raises(ModelError, match=r"Ray is not installed; install it with `pip install -e \.\[ray\]`"):
        load_model("ray:smollm2", replicas=1)


def expected(local, replicas: int, requests=REQUESTS, params=PARAMS):
    """What the in-process backend answers to the chunks the replicas get, under the chunks' seeds."""
    from hindsight.llm.replicas import CHUNK_SEED_STRIDE

    size, extra = divmod(len(requests), replicas)
    answers, start = [], 0
    for replica in range(replicas):
        end = start + size + (replica < extra)
        answers += local.generate(requests[start:end], replace(params, seed=params.seed + replica * CHUNK_SEED_STRIDE))
        start = end
    return answers


def same(answers, reference) -> bool:
    """The same tokens, text and finish, and log-probs equal to rounding (the replicas may use other thread counts)."""
    import math

    return len(answers) == len(reference) and all(
        (a.text, a.token_ids, a.finish_reason, a.error) == (b.text, b.token_ids, b.finish_reason, b.error)
        and all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(a.logprobs, b.logprobs))
        for a, b in zip(answers, reference))


def kill_after_submitting(backend, replica: int):
    """Kill a replica's process right after its chunk of the next call was sent to it."""
    submit, pid = backend._submit, backend.pids()[replica]

    def submit_then_kill(index, *args):
        ref = submit(index, *args)
        if index == replica and backend._submit is submit_then_kill:
            backend._submit = submit
            os.kill(pid, signal.SIGKILL)
        return ref

    backend._submit = submit_then_kill


@pytest.mark.slow
def test_replicas_split_a_batch_and_answer_as_the_local_model(ray_cluster, tiny_model_dir):
    backend = load_model(f"ray:hf:{tiny_model_dir}", replicas=2)
    try:
        local = load_model(f"hf:{tiny_model_dir}")
        assert len(set(backend.pids())) == 2
        assert same(backend.generate(REQUESTS, PARAMS), expected(local, 2))
        assert same(backend.generate(REQUESTS[:1], PARAMS), local.generate(REQUESTS[:1], PARAMS))  # one chunk only
        # A replica lost mid-call is the next test's (its restart is most of a test's time).
    finally:
        backend.close()


def test_a_replica_that_cannot_load_its_model_is_a_one_line_model_error(ray_cluster, tmp_path):
    with pytest.raises(ModelError, match="could not load it: model path not found") as info:
        load_model(f"ray:hf:{tmp_path / 'absent'}", replicas=1)
    assert "\n" not in str(info.value)
    with pytest.raises(ModelError, match="need 2 GPUs; the Ray cluster has 0"):
        load_model("ray:smollm2", replicas=2, num_gpus=1)


@pytest.fixture
def trained(tiny_lora_model_dir):
    """A trainable tiny model whose policy adapter is random, so that pushed weights change what is sampled."""
    import torch

    from hindsight.train.model import LoraSettings, TrainableModel

    model = TrainableModel(load_model(f"hf:{tiny_lora_model_dir}"), ("policy",), LoraSettings(rank=4, alpha=8))
    torch.manual_seed(0)
    model.load_adapter_state("policy", {key: torch.randn_like(value) * 0.5
                                        for key, value in model.adapter_state("policy").items()})
    return model


@pytest.mark.slow
def test_pushed_weights_are_the_only_ones_sampled_from(ray_cluster, tiny_lora_model_dir, trained):
    from hindsight.llm.replicas import ReplicaBackend
    from hindsight.train.replicas import TrainableReplica
    from hindsight.train.served import compare_logprobs, probe_sequences

    backend = ReplicaBackend.start(f"hf:{tiny_lora_model_dir}", load_model, spec="ray:tiny", replicas=2,
                                   replica=TrainableReplica, replica_args=(trained.lora, trained.roles))
    try:
        with pytest.raises(ModelError, match="no policy weights were pushed"):
            backend.sample(REQUESTS, PARAMS, "policy")
        probes = probe_sequences(trained.backend)
        mine = trained.sequence_logprobs("policy", probes)
        for theirs in backend.push("policy", trained.adapter_state("policy"), 1, probes):
            assert compare_logprobs(theirs, mine).max_abs < 1e-4
        assert same(backend.sample(REQUESTS, PARAMS, "policy"), expected(trained.backend, 2))
        assert backend.redone == 0

        # A caller that expects the weights of another update gets no answer from those of update 1:
        # every replica is given the latest weights again, under the expected version, and redoes its chunk.
        backend._pushed["policy"] = replace(backend._pushed["policy"], version=2)
        verified = []
        backend.verify = lambda role, replica, logprobs: verified.append((role, replica, logprobs))
        assert same(backend.sample(REQUESTS, PARAMS, "policy"), expected(trained.backend, 2))
        assert backend.redone == 2 and sorted(replica for _, replica, _ in verified) == [0, 1]

        # A replica killed while it samples comes back without any pushed weights: they are pushed
        # back (and verified) before its chunk is redone.
        verified.clear()
        before = backend.pids()
        kill_after_submitting(backend, 0)
        assert same(backend.sample(REQUESTS, PARAMS, "policy"), expected(trained.backend, 2))
        after = backend.pids()
        assert after[0] != before[0] and after[1] == before[1]  # the killed one was restarted, the other kept
        assert backend.redone >= 3 and verified and verified[-1][:2] == ("policy", 0)
        assert compare_logprobs(verified[-1][2], mine).max_abs < 1e-4
    finally:
        backend.close()
