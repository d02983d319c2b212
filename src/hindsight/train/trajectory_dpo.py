"""DPO between whole trajectories (ETO): each side's log-probability is the sum over its turns.

    stats = trajectory_dpo(model, [(chosen_turns, rejected_turns), ...], DPOSettings(...))

A side is the list of its turns' training sequences (prompt of that moment + response, the
response masked in), so a pair can compare trajectories of different lengths whose turns
were prompted differently, which a one-prompt DPO trainer cannot express. The reference is
the policy as it is when the call starts (a frozen copy, `frozen_reference`); its sums are computed once.
Memory is bounded by `micro_batch_size` turn sequences, not by the length of the pairs. A
side can hold ten turns, so keeping the graph of every turn of a batch alive until one
backward pass held 4 pairs × 2 sides × 10 turns of activations and was OOM-killed at 20.7 GB
on a 5×5 lake. Instead each batch takes two passes (`backward_through_sides`):

1. without a graph, the side sums s_k and the batch's DPO loss L; autograd on L alone gives
   the scalars g_k = ∂L/∂s_k;
2. per micro-batch of turn sequences, a forward with a graph and a backward of Σ g_k · log p,
   which accumulates Σ_k g_k ∂s_k/∂θ = ∂L/∂θ (the chain rule, since s_k is a sum of turns).

The gradient is the whole batch's exactly, as long as the two forwards agree (no dropout:
LoRA dropout is 0 and `trajectory_dpo` refuses a model with active dropout), for one more
forward pass per batch.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator, Sequence

import torch

from hindsight.algos.dpo import dpo_loss
from hindsight.train.dpo import DPOSettings, DPOStats, frozen_reference
from hindsight.train.model import TrainableModel, collate, token_logprobs
from hindsight.train.sequences import TrainingSequence

Side = Sequence[TrainingSequence]


def _turn_chunks(module: torch.nn.Module, sides: Sequence[Side], pad_id: int, micro_batch_size: int,
                 share_prefix: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Per micro-batch of turn sequences: (log p of each sequence's response [n], its side's index [n]).

    With `share_prefix`, the turns go in token order, so a pair's two sides (the same
    prompt up to the step they differ at) share a micro-batch and its prefix is encoded once.
    """
    flat = [(k, sequence) for k, side in enumerate(sides) for sequence in side]
    if share_prefix:
        flat.sort(key=lambda item: item[1].input_ids)
    device = next(module.parameters()).device
    for start in range(0, len(flat), micro_batch_size):
        chunk = flat[start:start + micro_batch_size]
        batch = collate([sequence for _, sequence in chunk], pad_id, device, share_prefix=share_prefix)
        yield token_logprobs(module, batch).sum(dim=1), torch.tensor([k for k, _ in chunk], device=device)


def side_logprobs(module: torch.nn.Module, sides: Sequence[Side], pad_id: int, micro_batch_size: int,
                  share_prefix: bool = False) -> torch.Tensor:
    """Σ over each side's turns of log p(response tokens): [len(sides)] (with grad if enabled).

    With grad enabled, the graph of every turn stays alive until backward: call it under
    `torch.no_grad()` for long sides and train with `backward_through_sides`.
    """
    sums = torch.zeros(len(sides), device=next(module.parameters()).device)
    for per_sequence, side_index in _turn_chunks(module, sides, pad_id, micro_batch_size, share_prefix):
        sums = sums.index_add(0, side_index, per_sequence)
    return sums


def backward_through_sides(module: torch.nn.Module, sides: Sequence[Side], side_grads: torch.Tensor, pad_id: int,
                           micro_batch_size: int, share_prefix: bool = False) -> None:
    """Accumulate Σ_k side_grads[k] · ∇θ side_logprob_k into the parameters' `.grad`.

    side_grads [len(sides)]: ∂L/∂s_k for a loss L of the side sums s_k. One micro-batch of
    `micro_batch_size` turn sequences holds a graph at a time.
    """
    side_grads = side_grads.detach().to(next(module.parameters()).device)
    for per_sequence, side_index in _turn_chunks(module, sides, pad_id, micro_batch_size, share_prefix):
        (per_sequence * side_grads[side_index]).sum().backward()


def _active_dropout(module: torch.nn.Module) -> list[str]:
    return [name for name, sub in module.named_modules() if isinstance(sub, torch.nn.Dropout) and sub.p > 0]


def trajectory_dpo(model: TrainableModel, pairs: Sequence[tuple[Side, Side]], settings: DPOSettings,
                   on_step: Callable[[int, int, float], None] | None = None) -> DPOStats:
    """Train the active role with DPO on (chosen, rejected) trajectory pairs; AdamW, constant lr.

    `on_step(done, total, loss)` hears of every optimizer step (a round of whole dialogues takes
    many minutes on a CPU, so the caller can show progress)."""
    if not pairs:
        raise ValueError("DPO needs at least one pair")
    if any(not chosen or not rejected for chosen, rejected in pairs):
        raise ValueError("every side of a trajectory pair needs at least one turn")
    dropout = _active_dropout(model.model)
    if dropout:
        raise ValueError(f"trajectory DPO recomputes each forward for its backward, so dropout must be 0; "
                         f"active in {', '.join(dropout[:3])}")
    micro = settings.micro_batch_size
    share = model.shares_prefixes(settings.shared_tokens)
    reference = frozen_reference(model)
    with torch.no_grad():
        ref_chosen = side_logprobs(reference, [c for c, _ in pairs], model.pad_id, micro, share)
        ref_rejected = side_logprobs(reference, [r for _, r in pairs], model.pad_id, micro, share)
    del reference
    parameters = model.parameters()
    optimizer = torch.optim.AdamW(parameters, lr=settings.lr, weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(settings.seed)
    losses, last_terms = [], None
    total = settings.epochs * math.ceil(len(pairs) / settings.batch_size)
    model.model.train()
    for _ in range(settings.epochs):
        order = torch.randperm(len(pairs), generator=generator).tolist()
        for start in range(0, len(order), settings.batch_size):
            batch = order[start:start + settings.batch_size]
            optimizer.zero_grad(set_to_none=True)
            sides = [pairs[i][0] for i in batch] + [pairs[i][1] for i in batch]
            with torch.no_grad():  # pass 1: the sums, no graph
                sums = side_logprobs(model.model, sides, model.pad_id, micro, share)
            sums.requires_grad_(True)
            chosen, rejected = sums[:len(batch)], sums[len(batch):]
            terms = dpo_loss(chosen, rejected, ref_chosen[batch], ref_rejected[batch], settings.beta)
            (side_grads,) = torch.autograd.grad(terms.loss, sums)
            backward_through_sides(model.model, sides, side_grads, model.pad_id, micro, share)  # pass 2
            torch.nn.utils.clip_grad_norm_(parameters, settings.max_grad_norm)
            optimizer.step()
            losses.append(float(terms.loss.detach()))
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
            last_terms = [terms.chosen_rewards, terms.rejected_rewards, chosen.detach(), rejected.detach()]
    model.model.eval()
    won, lost, chosen_logp, rejected_logp = last_terms
    return DPOStats(
        step_losses=tuple(losses),
        reward_accuracy=float((won > lost).float().mean()), reward_margin=float((won - lost).mean()),
        chosen_logp=float(chosen_logp.mean()), rejected_logp=float(rejected_logp.mean()),
    )
