"""Trajectory-level DPO (ETO): summed turn log-probs, micro-batches that reproduce the batch step."""

import math

import pytest
import torch

from hindsight.methods.model_setup import load_trainable
from hindsight.train.dpo import DPOSettings
from hindsight.train.trajectory_dpo import side_logprobs, trajectory_dpo
from hindsight.train.sequences import TrainingSequence


def turn(prompt, response):
    return TrainingSequence(tuple(prompt + response), (0,) * len(prompt) + (1,) * len(response), "t", (0,))


def pairs():
    # Chosen sides take two turns, rejected ones one or three: lengths differ on purpose.
    return [([turn([5, 6, 7], [40, 41]), turn([5, 8], [42])], [turn([5, 6, 7], [50, 51])]),
            ([turn([9, 10], [43])], [turn([9, 10], [52]), turn([9, 11], [53]), turn([9, 12], [54, 55])]),
            ([turn([13], [44, 45])], [turn([13], [56])])]


def lora_state(model):
    return {n: p.detach().clone() for n, p in model.model.named_parameters() if "lora" in n}


def test_a_side_is_the_sum_of_its_turns(tiny_lora_model_dir):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    chosen, rejected = pairs()[1]
    with torch.no_grad():
        together = side_logprobs(model.model, [chosen, rejected], model.pad_id, micro_batch_size=2)
        alone = [float(side_logprobs(model.model, [[t]], model.pad_id, 1)[0]) for t in rejected]
    assert float(together[1]) == pytest.approx(sum(alone), rel=1e-5)


def test_training_starts_at_ln2_lowers_the_loss_and_micro_batches_do_not_change_the_step(tiny_lora_model_dir):
    def one_step(micro):
        model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
        torch.manual_seed(0)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.05)  # LoRA B starts at zero; any start works for this check
        stats = trajectory_dpo(model, pairs(), DPOSettings(beta=0.5, lr=1e-2, epochs=1, batch_size=3,
                                                           micro_batch_size=micro, seed=1))
        return stats, lora_state(model)

    whole, after_whole = one_step(3)
    split, after_split = one_step(1)
    assert whole.first_loss == pytest.approx(math.log(2), abs=1e-6) and whole.steps == 1
    delta = sum(float((after_whole[k] - after_split[k]).norm()) for k in after_whole)
    assert delta < 1e-4 * sum(float(v.norm()) for v in after_whole.values())

    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    stats = trajectory_dpo(model, pairs(), DPOSettings(beta=0.5, lr=3e-2, epochs=12, batch_size=3, micro_batch_size=3))
    assert stats.steps == 12 and stats.loss < stats.first_loss - 0.1 and stats.reward_accuracy == 1.0
