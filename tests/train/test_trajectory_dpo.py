"""Trajectory-level DPO (ETO): summed turn log-probs, a two-pass backward, micro-batches that keep the step."""

import math

import pytest
import torch

from hindsight.algos.dpo import dpo_loss
from hindsight.methods.model_setup import load_trainable
from hindsight.train.dpo import DPOSettings
from hindsight.train.sequences import TrainingSequence
from hindsight.train.trajectory_dpo import backward_through_sides, side_logprobs, trajectory_dpo


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
    heard = []
    stats = trajectory_dpo(model, pairs(), DPOSettings(beta=0.5, lr=3e-2, epochs=12, batch_size=3, micro_batch_size=3),
                           on_step=lambda done, total, loss: heard.append((done, total, loss)))
    assert stats.steps == 12 and stats.loss < stats.first_loss - 0.1 and stats.reward_accuracy == 1.0
    assert heard == [(i + 1, 12, loss) for i, loss in enumerate(stats.step_losses)]  # progress of every step


def test_progress_counts_the_remainder_batch(tiny_lora_model_dir):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    heard = []
    trajectory_dpo(model, pairs(), DPOSettings(beta=0.5, lr=1e-3, epochs=2, batch_size=2, micro_batch_size=2),
                   on_step=lambda done, total, loss: heard.append((done, total)))
    assert heard == [(1, 4), (2, 4), (3, 4), (4, 4)]  # 3 pairs in batches of 2: two steps an epoch


def test_the_two_pass_backward_gives_the_one_graph_gradient(tiny_lora_model_dir):
    """Pass 1 without a graph plus a per-micro-batch pass 2 equals autograd through every turn at once."""
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    chosen, rejected = [c for c, _ in pairs()], [r for _, r in pairs()]
    reference = torch.tensor([-9.0, -14.0, -7.5]), torch.tensor([-8.0, -20.0, -6.0])

    def loss_of(sums):
        return dpo_loss(sums[:3], sums[3:], *reference, beta=0.5).loss

    model.model.zero_grad(set_to_none=True)
    loss_of(side_logprobs(model.model, chosen + rejected, model.pad_id, micro_batch_size=100)).backward()
    one_graph = {n: p.grad.clone() for n, p in model.model.named_parameters() if p.grad is not None}

    model.model.zero_grad(set_to_none=True)
    with torch.no_grad():
        sums = side_logprobs(model.model, chosen + rejected, model.pad_id, micro_batch_size=2)
    sums.requires_grad_(True)
    (side_grads,) = torch.autograd.grad(loss_of(sums), sums)
    backward_through_sides(model.model, chosen + rejected, side_grads, model.pad_id, micro_batch_size=2)
    two_pass = {n: p.grad for n, p in model.model.named_parameters() if p.grad is not None}

    assert one_graph.keys() == two_pass.keys() and one_graph
    scale = sum(float(g.norm()) for g in one_graph.values())
    assert scale > 0
    assert sum(float((one_graph[n] - two_pass[n]).norm()) for n in one_graph) < 1e-5 * scale


def test_dropout_is_refused_because_the_backward_recomputes_the_forward(tiny_lora_model_dir):
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), 4, 8, False)
    model.model.add_module("extra_dropout", torch.nn.Dropout(0.1))
    with pytest.raises(ValueError, match="dropout must be 0"):
        trajectory_dpo(model, pairs(), DPOSettings(batch_size=3, micro_batch_size=1))
