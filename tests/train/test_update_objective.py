"""The micro-batched update takes the gradient of the objective as the papers write it.

The objective is written here as a plain loop over trajectories and their turns, each turn
scored on its own (no padding, no batching); the update's weight change under SGD must be
minus that gradient, for every aggregation, whatever the micro-batch size.
"""

import pytest
import torch

from hindsight.algos.grpo import Aggregation, sequence_weights
from hindsight.methods.model_setup import load_trainable
from hindsight.train.model import collate
from hindsight.train.sequences import TrainingSequence
from hindsight.train.update import UpdateSettings, policy_gradient_update


def turn(trajectory: str, index: int, prompt: int, answer: int) -> TrainingSequence:
    start = 40 + 7 * index + prompt
    ids = tuple(range(start, start + prompt + answer))
    return TrainingSequence(ids, (0,) * prompt + (1,) * answer, trajectory, (index,))


# Trajectory t0 has three turns, t1 one, t2 two (zero advantage: it counts, but adds no gradient).
TURNS = [turn("t0", 0, 5, 3), turn("t1", 1, 6, 9), turn("t0", 2, 4, 2), turn("t2", 3, 7, 4), turn("t0", 4, 3, 6),
         turn("t2", 5, 5, 5)]
ADVANTAGE = {"t0": 1.0, "t1": -1.5, "t2": 0.0}
# The same turns behind one shared system prompt: the update encodes it once per micro-batch.
PROMPT = tuple(range(900, 912))
PROMPTED = [TrainingSequence(PROMPT + s.input_ids, (0,) * len(PROMPT) + s.loss_mask, s.trajectory_id, s.turns)
            for s in TURNS]


def plain_loop_objective(model, aggregation: Aggregation, turns=TURNS) -> torch.Tensor:
    """−A·ρ summed the way `aggregation` says, one turn at a time (ρ = 1 in value, with its gradient)."""
    per_turn = []  # (trajectory, summed per-token loss, tokens)
    for sequence in turns:
        logp = model.logprobs(collate([sequence], model.pad_id))
        mask = collate([sequence], model.pad_id).loss_mask
        terms = -ADVANTAGE[sequence.trajectory_id] * torch.exp(logp - logp.detach()) * mask
        per_turn.append((sequence.trajectory_id, terms.sum(), float(mask.sum())))
    if aggregation is Aggregation.TOKEN_MEAN:
        return sum(t for _, t, _ in per_turn) / sum(n for _, _, n in per_turn)
    if aggregation is Aggregation.TURN_MEAN:
        return sum(t / n for _, t, n in per_turn) / len(per_turn)
    trajectories = sorted({name for name, _, _ in per_turn})
    means = [sum(t for name, t, _ in per_turn if name == trajectory) / sum(n for name, _, n in per_turn if name == trajectory)
             for trajectory in trajectories]
    return sum(means) / len(means)


def perturbed_model(model_dir):
    """A LoRA policy on the tiny model with every adapter weight moved off its start: peft starts
    lora_B at zero, where lora_A gets no gradient."""
    torch.manual_seed(0)
    model = load_trainable(f"hf:{model_dir}", ("policy",), lora_rank=4, lora_alpha=8, full_finetune=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.mark.parametrize("aggregation", list(Aggregation))
@pytest.mark.parametrize("micro_batch_size", [1, 4])
@pytest.mark.parametrize(("turns", "shared_tokens"), [(TURNS, True), (PROMPTED, True), (PROMPTED, False)],
                         ids=["distinct", "prompt-shared", "prompt-pushed-whole"])
def test_update_follows_the_plain_loop_gradient(tiny_lora_model_dir, aggregation, micro_batch_size, turns,
                                                shared_tokens):
    model = perturbed_model(tiny_lora_model_dir)
    params = model.parameters()
    expected = torch.autograd.grad(plain_loop_objective(model, aggregation, turns), params)
    before = [p.detach().clone() for p in params]

    optimizer = torch.optim.SGD(params, lr=1.0)
    settings = UpdateSettings(aggregation=aggregation, micro_batch_size=micro_batch_size, max_grad_norm=1e9,
                              shared_tokens=shared_tokens)
    stats = policy_gradient_update(model, turns, [ADVANTAGE[s.trajectory_id] for s in turns], optimizer, None,
                                   settings)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
    gradient = torch.cat([g.flatten() for g in expected])
    # Batching and padding reassociate float sums: compare relative to the gradient's size.
    assert (step + gradient).norm() <= 1e-4 * gradient.norm()
    assert stats.sequences == 4  # t2's turns have no advantage and no KL term: skipped, yet counted
    tokens = [sum(s.loss_mask[1:]) for s in turns]
    units = aggregation.units(tokens, [s.trajectory_id for s in turns])
    weights = sequence_weights(tokens, [s.trajectory_id for s in turns], aggregation, units)
    assert stats.net_advantage == pytest.approx(
        float(sum(w * ADVANTAGE[s.trajectory_id] * n for w, s, n in zip(weights.tolist(), turns, tokens))))
    trained = [s for s in turns if ADVANTAGE[s.trajectory_id]]
    whole = sum(len(s.input_ids) for s in trained)
    shared = shared_tokens and micro_batch_size > 1 and turns is PROMPTED
    # The four trained turns form one micro-batch of 4, which pushes the prompt once, not four times.
    assert stats.tokens == (whole - 3 * len(PROMPT) if shared else whole)
    assert stats.distinct_tokens == whole - (len(PROMPT) * (len(trained) - 1) if turns is PROMPTED else 0)


def test_the_aggregations_give_different_steps(tiny_lora_model_dir):
    model = perturbed_model(tiny_lora_model_dir)
    gradients = {a: torch.cat([g.flatten() for g in torch.autograd.grad(plain_loop_objective(model, a),
                                                                        model.parameters())])
                 for a in Aggregation}
    trajectory, per_turn = gradients[Aggregation.TRAJECTORY_MEAN], gradients[Aggregation.TURN_MEAN]
    # t0's three turns weigh 3/5 of the per-turn objective and 1/3 of the trajectory one.
    assert (trajectory - per_turn).norm() > 0.1 * trajectory.norm()


def test_a_token_cap_splits_micro_batches_and_leaves_the_step_unchanged(tiny_lora_model_dir):
    from hindsight.train.update import _micro_batches

    # Rows × the longest row stays within the cap; a row longer than the cap goes alone.
    groups = _micro_batches(PROMPTED, 4, max_tokens=40)
    assert sorted(i for group in groups for i in group) == list(range(len(PROMPTED)))
    for group in groups:
        assert len(group) == 1 or len(group) * max(len(PROMPTED[i].input_ids) for i in group) <= 40
    assert len(groups) > len(_micro_batches(PROMPTED, 4))
    assert _micro_batches(PROMPTED, 4, max_tokens=1) == [[i] for group in _micro_batches(PROMPTED, 1) for i in group]

    model = perturbed_model(tiny_lora_model_dir)
    params = model.parameters()
    expected = torch.autograd.grad(plain_loop_objective(model, Aggregation.TOKEN_MEAN, PROMPTED), params)
    before = [p.detach().clone() for p in params]
    settings = UpdateSettings(aggregation=Aggregation.TOKEN_MEAN, micro_batch_size=4, micro_batch_tokens=40,
                              max_grad_norm=1e9)
    policy_gradient_update(model, PROMPTED, [ADVANTAGE[s.trajectory_id] for s in PROMPTED],
                           torch.optim.SGD(params, lr=1.0), None, settings)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
    gradient = torch.cat([g.flatten() for g in expected])
    assert (step + gradient).norm() <= 1e-4 * gradient.norm()


def plain_loop_entropy(model, turns=TURNS) -> torch.Tensor:
    """Token mean, over every generated token of `turns`, of the entropy of the full next-token
    distribution, computed from the logits of one turn at a time."""
    total, tokens = 0.0, 0
    for sequence in turns:
        ids = torch.tensor([sequence.input_ids])
        logits = model.model(input_ids=ids).logits[0, :-1].float()
        log_dist = torch.log_softmax(logits, dim=-1)
        for t, generated in enumerate(sequence.loss_mask[1:]):
            if generated:
                total = total - (log_dist[t].exp() * log_dist[t]).sum()
                tokens += 1
    return total / tokens


def test_the_entropy_bonus_trains_every_turn_and_follows_the_plain_loop_gradient(tiny_lora_model_dir):
    model = perturbed_model(tiny_lora_model_dir)
    params = model.parameters()
    coef = 0.3
    objective = plain_loop_objective(model, Aggregation.TOKEN_MEAN, PROMPTED) - coef * plain_loop_entropy(model, PROMPTED)
    expected = torch.autograd.grad(objective, params)
    entropy_before = float(plain_loop_entropy(model, PROMPTED).detach())
    before = [p.detach().clone() for p in params]
    settings = UpdateSettings(aggregation=Aggregation.TOKEN_MEAN, micro_batch_size=4, max_grad_norm=1e9,
                              entropy_coef=coef)
    stats = policy_gradient_update(model, PROMPTED, [ADVANTAGE[s.trajectory_id] for s in PROMPTED],
                                   torch.optim.SGD(params, lr=1.0), None, settings)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
    gradient = torch.cat([g.flatten() for g in expected])
    assert (step + gradient).norm() <= 1e-4 * gradient.norm()
    assert stats.sequences == len(PROMPTED)  # t2's zero-advantage turns now train: the bonus applies to them
    assert stats.entropy == pytest.approx(entropy_before, rel=1e-4)


def test_no_entropy_is_computed_or_logged_without_the_bonus(tiny_lora_model_dir):
    from hindsight.methods.metrics import update_metrics

    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), lora_rank=4, lora_alpha=8, full_finetune=False)
    stats = policy_gradient_update(model, TURNS, [ADVANTAGE[s.trajectory_id] for s in TURNS],
                                   torch.optim.SGD(model.parameters(), lr=0.1), None, UpdateSettings())
    assert stats.entropy is None
    assert "policy/entropy" not in update_metrics("policy", stats, 0.1)
    with_bonus = policy_gradient_update(model, TURNS, [ADVANTAGE[s.trajectory_id] for s in TURNS],
                                        torch.optim.SGD(model.parameters(), lr=0.1), None,
                                        UpdateSettings(entropy_coef=0.01))
    assert update_metrics("policy", with_bonus, 0.1)["policy/entropy"] == pytest.approx(with_bonus.entropy)
