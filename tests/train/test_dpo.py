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
