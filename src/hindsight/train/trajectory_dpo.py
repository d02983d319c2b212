"""DPO between whole trajectories (ETO): each side's log-probability is the sum over its turns.

    stats = trajectory_dpo(model, [(chosen_turns, rejected_turns), ...], DPOSettings(...))

A side is the list of its turns' training sequences (prompt of that moment + response, the
response masked in), so a pair can compare trajectories of different lengths whose turns
were prompted differently, which a one-prompt DPO trainer cannot express. The reference is
the policy as it is when the call starts (a frozen copy, `frozen_reference`); its sums are computed once.
Pairs are processed in groups of `micro_batch_size` per backward pass, each group's loss
weighted by its share of the batch, so the accumulated gradient is the batch mean's.
"""

from __future__ import annotations

from typing import Sequence

import torch

from hindsight.algos.dpo import dpo_loss
from hindsight.train.dpo import DPOSettings, DPOStats, frozen_reference
from hindsight.train.model import TrainableModel, collate, token_logprobs
from hindsight.train.sequences import TrainingSequence

Side = Sequence[TrainingSequence]


def side_logprobs(module: torch.nn.Module, sides: Sequence[Side], pad_id: int, micro_batch_size: int) -> torch.Tensor:
    """Σ over each side's turns of log p(response tokens): [len(sides)] (with grad if enabled)."""
    flat = [(k, sequence) for k, side in enumerate(sides) for sequence in side]
    device = next(module.parameters()).device
    sums = torch.zeros(len(sides), device=device)
    for start in range(0, len(flat), micro_batch_size):
        chunk = flat[start:start + micro_batch_size]
        batch = collate([sequence for _, sequence in chunk], pad_id, device)
        per_sequence = token_logprobs(module, batch).sum(dim=1)
        sums = sums.index_add(0, torch.tensor([k for k, _ in chunk], device=device), per_sequence)
    return sums


def trajectory_dpo(model: TrainableModel, pairs: Sequence[tuple[Side, Side]], settings: DPOSettings) -> DPOStats:
    """Train the active role with DPO on (chosen, rejected) trajectory pairs; AdamW, constant lr."""
    if not pairs:
        raise ValueError("DPO needs at least one pair")
    if any(not chosen or not rejected for chosen, rejected in pairs):
        raise ValueError("every side of a trajectory pair needs at least one turn")
    micro = settings.micro_batch_size
    reference = frozen_reference(model)
    with torch.no_grad():
        ref_chosen = side_logprobs(reference, [c for c, _ in pairs], model.pad_id, micro)
        ref_rejected = side_logprobs(reference, [r for _, r in pairs], model.pad_id, micro)
    del reference
    parameters = model.parameters()
    optimizer = torch.optim.AdamW(parameters, lr=settings.lr, weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(settings.seed)
    losses, last_terms, steps = [], None, 0
    model.model.train()
    for _ in range(settings.epochs):
        order = torch.randperm(len(pairs), generator=generator).tolist()
        for start in range(0, len(order), settings.batch_size):
            batch = order[start:start + settings.batch_size]
            optimizer.zero_grad(set_to_none=True)
            batch_loss, chosen_rewards, rejected_rewards, chosen_logps, rejected_logps = 0.0, [], [], [], []
            for group_start in range(0, len(batch), micro):
                group = batch[group_start:group_start + micro]
                chosen = side_logprobs(model.model, [pairs[i][0] for i in group], model.pad_id, micro)
                rejected = side_logprobs(model.model, [pairs[i][1] for i in group], model.pad_id, micro)
                terms = dpo_loss(chosen, rejected, ref_chosen[group], ref_rejected[group], settings.beta)
                (terms.loss * len(group) / len(batch)).backward()
                batch_loss += float(terms.loss.detach()) * len(group) / len(batch)
                chosen_rewards.append(terms.chosen_rewards)
                rejected_rewards.append(terms.rejected_rewards)
                chosen_logps.append(chosen.detach())
                rejected_logps.append(rejected.detach())
            torch.nn.utils.clip_grad_norm_(parameters, settings.max_grad_norm)
            optimizer.step()
            steps += 1
            losses.append(batch_loss)
            last_terms = [torch.cat(x) for x in (chosen_rewards, rejected_rewards, chosen_logps, rejected_logps)]
    model.model.eval()
    won, lost, chosen_logp, rejected_logp = last_terms
    return DPOStats(
        steps=steps, loss=losses[-1], first_loss=losses[0],
        reward_accuracy=float((won > lost).float().mean()), reward_margin=float((won - lost).mean()),
        chosen_logp=float(chosen_logp.mean()), rejected_logp=float(rejected_logp.mean()),
    )
