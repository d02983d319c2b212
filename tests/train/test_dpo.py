"""The DPO round's frozen reference: a copy that computes exactly what the policy computes."""

import pytest
import torch

from hindsight.methods.model_setup import load_trainable
from hindsight.train.dpo import frozen_reference


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_reference_scores_every_token_as_the_policy_does_in_either_dtype(tiny_lora_model_dir, dtype):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False, dtype=dtype)
    torch.manual_seed(0)
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.05)  # a trained adapter: B ≠ 0, so merging it would round
    model.model.eval()
    ids = torch.tensor([[5, 6, 7, 40, 41, 42, 9, 10]])
    reference = frozen_reference(model)
    with torch.no_grad():
        policy_logits = model.model(input_ids=ids).logits
        reference_logits = reference(input_ids=ids).logits
    assert next(p for p in model.model.parameters() if not p.requires_grad).dtype == getattr(torch, dtype)
    # Equal to the bit: DPO's first loss is then ln 2 exactly, whatever the dtype.
    assert torch.equal(policy_logits, reference_logits)
    assert not any(p.requires_grad for p in reference.parameters())
    # Training the policy leaves the copy where it was.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1)
        assert not torch.equal(model.model(input_ids=ids).logits, reference(input_ids=ids).logits)
        assert torch.equal(reference(input_ids=ids).logits, reference_logits)


def test_a_round_reports_every_optimizer_steps_loss_so_a_one_pair_remainder_does_not_stand_for_it(
        tiny_lora_model_dir, capfd):
    from hindsight.train.dpo import DPOSettings, dpo_round

    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    pairs = [{"prompt": [{"role": "user", "content": f"Task {i}: which way?"}],
              "chosen": [{"role": "assistant", "content": "<action>down</action>"}],
              "rejected": [{"role": "assistant", "content": "<action>left</action>"}]} for i in range(3)]
    # Three pairs in batches of two: each epoch ends on a one-pair remainder step.
    stats = dpo_round(model, pairs, DPOSettings(beta=0.5, lr=1e-2, epochs=2, batch_size=2, micro_batch_size=1))
    assert stats.steps == len(stats.step_losses) == 4
    assert stats.first_loss == pytest.approx(0.6931, abs=1e-3)  # the reference is the policy at the start
    assert stats.loss == stats.step_losses[-1]
    assert stats.mean_loss == pytest.approx(sum(stats.step_losses) / 4, rel=1e-9)
    row = stats.metrics()
    assert row["dpo/mean_loss"] == stats.mean_loss and row["dpo/optimizer_steps"] == 4.0
    # The round prints nothing of its own: no log dicts, no tokenizing bars (the method logs its metrics).
    printed = capfd.readouterr()
    assert "'loss'" not in printed.out + printed.err and "Tokenizing" not in printed.out + printed.err


def test_on_a_cpu_trl_scores_only_the_labelled_positions_and_trains_the_same(tiny_lora_model_dir, monkeypatch):
    """TRL's fused head would score every prompt position over the whole vocabulary on a CPU;
    `dpo_round` has it score the completions' alone, with the same losses and the same update."""
    import contextlib

    from trl.trainer import utils as trl_utils

    from hindsight.train import dpo

    pairs = [{"prompt": [{"role": "user", "content": f"Task {i}: the lake is 4 by 4, which way now?"}],
              "chosen": [{"role": "assistant", "content": "<action>down</action>"}],
              "rejected": [{"role": "assistant", "content": "<action>left</action>"}]} for i in range(4)]
    apply = trl_utils._ChunkedLogProbFunction.apply

    def round_(compact: bool):
        if not compact:
            monkeypatch.setattr(dpo, "_labelled_positions_only", contextlib.nullcontext)
        scored = []

        def counting(hidden, *args):
            scored.append(hidden.shape[0])
            return apply(hidden, *args)

        monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)
        torch.manual_seed(0)  # LoRA's A is drawn from the global generator, which TRL reseeds
        model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
        stats = dpo.dpo_round(model, pairs, dpo.DPOSettings(beta=0.5, lr=1e-2, batch_size=2, micro_batch_size=2))
        monkeypatch.undo()
        return stats, model.adapter_state("policy"), sum(scored)

    full, full_weights, full_rows = round_(compact=False)
    compact, compact_weights, compact_rows = round_(compact=True)
    assert compact_rows < full_rows / 3  # the prompts are most of each sequence
    assert compact.step_losses == pytest.approx(full.step_losses, abs=1e-5)
    assert all(torch.allclose(compact_weights[k], full_weights[k], atol=1e-5) for k in full_weights)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in compact_weights.items() if "lora_B" in k)
    assert trl_utils._use_triton(torch.device("cpu")) is False  # put back after the round
