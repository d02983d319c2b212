"""Adapters in training: `model: BASE+ADAPTER`, init_from / critic_init_from / kl_reference: init
from PEFT folders and adapter specs, and ECHO's frozen critic given as a spec with an adapter."""

from __future__ import annotations

import shutil

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from hindsight.agent.critic import ModelCritic
from hindsight.configs import ConfigError
from hindsight.llm import ModelError
from hindsight.llm.adapters import role_name
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.methods.echo import ECHOConfig, build_critic, load_echo_model
from hindsight.methods.grpo import train_grpo
from hindsight.train.checkpoint import list_checkpoints
from hindsight.train.model import DEFAULT_TARGETS, collate
from hindsight.train.sequences import TrainingSequence

from .test_training_loops import grpo_config, read_metrics

RANK, ALPHA = 4, 8


def save_peft_adapter(base_dir, out, seed: int, **lora):
    """A standard PEFT adapter folder with random (non-zero) LoRA matrices for the model in `base_dir`."""
    settings = {**dict(r=RANK, lora_alpha=ALPHA, target_modules=list(DEFAULT_TARGETS), task_type="CAUSAL_LM"), **lora}
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(**settings))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.save_pretrained(out)
    return out


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def assert_close_logits(actual, expected, relative: float = 1e-4):
    # Merged weights reassociate float sums: equal to rounding relative to the logits' size.
    assert (actual - expected).abs().max() <= relative * expected.abs().max()


@pytest.fixture(scope="module")
def peft_dir(tiny_lora_model_dir, tmp_path_factory):
    return save_peft_adapter(tiny_lora_model_dir, tmp_path_factory.mktemp("peft") / "adapter", seed=1)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 2000, (2, 12), generator=torch.Generator().manual_seed(0))


def adapter_weights(model, role: str) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.model.named_parameters() if f".{role}." in name}


def file_weights(folder, role: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {role_name(name, role): t for name, t in load_file(folder / "adapter_model.safetensors").items()}


def a_batch():
    sequence = TrainingSequence(input_ids=tuple(range(5, 17)), loss_mask=(0,) * 4 + (1,) * 8, trajectory_id="x",
                                turns=(0,))
    return collate([sequence], pad_id=0)


def test_training_on_a_merged_adapter_starts_from_it(tiny_lora_model_dir, peft_dir, ids):
    model = load_trainable(f"hf:{tiny_lora_model_dir}+{peft_dir}", ("policy",), RANK, ALPHA, False)
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lora_model_dir), peft_dir)
    # Adapters off (the kl_reference: base reference) is the merged model; the fresh policy
    # adapter changes nothing yet.
    with model.model.disable_adapter():
        assert_close_logits(logits(model.model, ids), logits(merged, ids))
    batch = a_batch()
    assert torch.equal(model.logprobs(batch).detach(), model.reference_logprobs(batch))
    assert model.backend.spec == f"hf:{tiny_lora_model_dir}+{peft_dir}"


@pytest.mark.parametrize("form", ["folder", "spec", "bundled"])
def test_init_from_an_adapter_copies_its_weights_into_the_policy(tiny_lora_model_dir, peft_dir, form, monkeypatch,
                                                                 tmp_path):
    source = {"folder": str(peft_dir), "spec": f"hf:{tiny_lora_model_dir}+{peft_dir}", "bundled": "demo"}[form]
    if form == "bundled":
        from hindsight.llm import adapters

        shutil.copytree(peft_dir, tmp_path / "demo")
        monkeypatch.setattr(adapters, "bundled_adapters_dir", lambda: tmp_path)
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), RANK, ALPHA, False)
    load_latest(model, source)
    assert adapter_weights(model, "policy").keys() == file_weights(peft_dir, "policy").keys()
    assert all(torch.equal(adapter_weights(model, "policy")[k], v) for k, v in file_weights(peft_dir, "policy").items())


def test_init_from_an_exported_run_reproduces_its_weights(tiny_lora_model_dir, tmp_path):
    from hindsight.cli.main import main
    from hindsight.train.checkpoint import save_checkpoint

    source = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), RANK, ALPHA, False)
    with torch.no_grad():
        for name, parameter in source.model.named_parameters():
            if "lora_" in name:
                parameter.normal_(0, 0.3)
    save_checkpoint(tmp_path / "run", 1, source, {}, {}, {})
    (tmp_path / "run" / "config.yaml").write_text(f"model: hf:{tiny_lora_model_dir}\nlora_rank: {RANK}\n"
                                                  f"lora_alpha: {ALPHA}\n")
    saved = torch.load(list_checkpoints(tmp_path / "run")[-1].path / "model" / "weights.pt")
    for dtype in ("float32", "float16"):
        assert main(["export-adapter", str(tmp_path / "run"), str(tmp_path / dtype), "--dtype", dtype]) == 0
        model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), RANK, ALPHA, False)
        load_latest(model, tmp_path / dtype)
        loaded = adapter_weights(model, "policy")
        assert loaded.keys() == saved.keys()
        # float32 is exact; float16 is the run's weights rounded once, cast back to float32.
        assert all(torch.equal(loaded[k], saved[k].to(getattr(torch, dtype)).float()) for k in saved)


@pytest.mark.parametrize(("settings", "match"), [
    (dict(lora_rank=8), "LoRA rank 4, but this run's lora_rank is 8; set lora_rank: 4"),
    (dict(lora_alpha=16), "LoRA alpha 8, but this run's lora_alpha is 16; set lora_alpha: 8"),
])
def test_init_from_an_adapter_of_another_shape_says_which_setting_differs(tiny_lora_model_dir, peft_dir, settings,
                                                                          match):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), settings.get("lora_rank", RANK),
                           settings.get("lora_alpha", ALPHA), False)
    with pytest.raises(ConfigError, match=match) as info:
        load_latest(model, peft_dir)
    assert "\n" not in str(info.value)


def test_init_from_an_adapter_with_other_targets_or_variants_is_refused(tiny_lora_model_dir, tmp_path):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), RANK, ALPHA, False)
    narrow = save_peft_adapter(tiny_lora_model_dir, tmp_path / "narrow", seed=2, target_modules=["q_proj", "v_proj"])
    with pytest.raises(ConfigError, match="adapts q_proj, v_proj, but this run's LoRA adapts down_proj, gate_proj"):
        load_latest(model, narrow)
    rslora = save_peft_adapter(tiny_lora_model_dir, tmp_path / "rslora", seed=2, use_rslora=True)
    with pytest.raises(ConfigError, match="uses use_rslora"):
        load_latest(model, rslora)
    with pytest.raises(ModelError, match="adapter not found"):
        load_latest(model, tmp_path / "absent")
    full = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), RANK, ALPHA, True)
    with pytest.raises(ConfigError, match="init_from must be a run directory"):
        load_latest(full, narrow)


def test_kl_reference_init_from_an_adapter_anchors_grpo_to_it(tiny_lora_model_dir, peft_dir, tmp_path):
    common = dict(updates=1, epochs=1, eval_every=0, final_eval_split="", lora_rank=RANK, lora_alpha=ALPHA)
    anchored = read_metrics(train_grpo(grpo_config(tiny_lora_model_dir, init_from=str(peft_dir),
                                                   kl_reference="init", **common), tmp_path / "init"))
    # model: BASE+ADAPTER with the default reference: "adapters off" is the merged model.
    merged = read_metrics(train_grpo(grpo_config(tiny_lora_model_dir, model=f"hf:{tiny_lora_model_dir}+{peft_dir}",
                                                 **common), tmp_path / "merged"))
    based = read_metrics(train_grpo(grpo_config(tiny_lora_model_dir, init_from=str(peft_dir), **common),
                                    tmp_path / "base"))
    assert anchored[-1]["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    assert merged[-1]["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    assert based[-1]["policy/kl"] > 1e-3


def test_echo_critic_specs_with_adapters(tiny_lora_model_dir, peft_dir):
    assert ECHOConfig(critic="smollm2+frozenlake3").critic == "smollm2+frozenlake3"  # syntax only
    assert ECHOConfig(critic="hf:/models/x+/adapters/y").critic == "hf:/models/x+/adapters/y"
    with pytest.raises(ValueError, match="critic: a LoRA adapter"):
        ECHOConfig(critic="openai:gpt-4o+x")

    spec = f"hf:{tiny_lora_model_dir}+{peft_dir}"
    config = ECHOConfig(model=f"hf:{tiny_lora_model_dir}", critic=spec, lora_rank=RANK, lora_alpha=ALPHA)
    model = load_echo_model(config)
    critic = build_critic(config, model, "criteria")
    assert isinstance(critic, ModelCritic) and critic.backend.spec == spec


def test_critic_init_from_an_adapter_starts_only_the_critic(tiny_lora_model_dir, peft_dir):
    model = load_echo_model(ECHOConfig(model=f"hf:{tiny_lora_model_dir}", critic_init_from=str(peft_dir),
                                       lora_rank=RANK, lora_alpha=ALPHA))
    expected = file_weights(peft_dir, "critic")
    critic = adapter_weights(model, "critic")
    assert critic.keys() == expected.keys() and all(torch.equal(critic[k], expected[k]) for k in expected)
    assert not any(p.abs().sum() > 0 for k, p in adapter_weights(model, "policy").items() if "lora_B" in k)


def test_a_bfloat16_base_trains_float32_adapters_close_to_float32(tiny_lora_model_dir, peft_dir):
    spec = f"hf:{tiny_lora_model_dir}+{peft_dir}"
    exact = load_trainable(spec, ("policy",), RANK, ALPHA, False)
    fast = load_trainable(spec, ("policy",), RANK, ALPHA, False, dtype="bfloat16")
    frozen = {p.dtype for n, p in fast.model.named_parameters() if not p.requires_grad}
    trained = {p.dtype for n, p in fast.model.named_parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and trained == {torch.float32}  # the optimizer steps in float32
    batch = a_batch()
    reference, logprobs = exact.logprobs(batch), fast.logprobs(batch)
    assert logprobs.dtype == torch.float32  # the log-softmax runs in float32 on bfloat16 logits
    # bfloat16 keeps 8 significant bits: logits are off by ~2^-8 of their size, and so are the
    # log-probs, by far less than the gap between an unmerged and a merged adapter (checked above).
    assert (logprobs - reference).abs().max() <= 2**-5 * reference.abs().max()
    logprobs.sum().backward()
    grads = [p.grad for p in fast.model.parameters() if p.requires_grad]
    assert all(g is not None and g.dtype == torch.float32 and bool(torch.isfinite(g).all()) for g in grads)
    assert any(bool(g.abs().sum() > 0) for g in grads)


def test_training_configs_refuse_an_unknown_dtype_and_bfloat16_full_finetuning():
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, bfloat16"):
        ECHOConfig(dtype="float16")
    with pytest.raises(ValueError, match="with full_finetune: true"):
        ECHOConfig(dtype="bfloat16", full_finetune=True)
