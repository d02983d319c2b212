"""One policy-gradient update of one role on a batch of scored sequences.

Shared by GRPO, ECHO and Self-Guide: the methods decide *which* sequences and *which*
advantages; this module turns them into an optimizer step with the clipped objective
of `hindsight.algos.grpo`, micro-batched so memory stays bounded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from hindsight.algos.grpo import (
    Aggregation, aggregation_units, clipped_policy_loss, net_advantage, sequence_weights,
)
from hindsight.train.distributed import Workers
from hindsight.train.model import TrainableModel, collate, distinct_tokens
from hindsight.train.sequences import TrainingSequence


@dataclass(frozen=True)
class UpdateSettings:
    """Objective and batching of a policy-gradient update."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    entropy_coef: float = 0.0  # weight of the entropy bonus (every generated token, any advantage)
    aggregation: str = Aggregation.TRAJECTORY_MEAN  # a name in LOSS_AGGREGATIONS
    epochs: int = 1
    micro_batch_size: int = 4
    micro_batch_tokens: int = 0  # at most rows × longest row per micro-batch (0: no limit)
    max_grad_norm: float = 1.0
    shared_tokens: bool = True  # encode each micro-batch's common prefix once (`collate`)


@dataclass(frozen=True)
class UpdateStats:
    """Means over the update's epochs (loss terms) and totals (sizes, time)."""

    loss: float
    pg_loss: float
    kl: float
    clip_frac: float
    grad_norm: float
    entropy: float | None  # mean next-token entropy of the trained tokens (None: no bonus, not computed)
    net_advantage: float  # the aggregated advantage of every token (`algos.grpo.net_advantage`): > 0 sharpens
    sequences: int
    tokens: int  # pushed through the model in one epoch (a shared prefix once, no padding)
    distinct_tokens: int  # the batch's prefix tree: the floor of `tokens`
    loss_tokens: int
    forward_backward_s: float
    seconds: float


def _micro_batches(sequences: Sequence[TrainingSequence], size: int, by_prefix: bool = False,
                   max_tokens: int = 0) -> list[list[int]]:
    """Indices of `sequences` per micro-batch: at most `size` rows and, with `max_tokens`, at
    most that many padded tokens (rows × the longest row); a longer sequence goes alone."""
    # Similar lengths share a micro-batch, which keeps padding (wasted compute) small; with
    # shared prefixes, the token order puts sequences that share the most next to each
    # other (a group's turns with the same prompt, every turn's system prompt).
    order = sorted(range(len(sequences)),
                   key=(lambda i: sequences[i].input_ids) if by_prefix else (lambda i: len(sequences[i].input_ids)))
    # The token cap matters once whole episodes train as one sequence each (`memory: full`):
    # eight 5k-token household episodes in one forward would need tens of GB of activations.
    batches: list[list[int]] = []
    longest = 0
    for i in order:
        length = len(sequences[i].input_ids)
        if batches and len(batches[-1]) < size and (
                not max_tokens or max(longest, length) * (len(batches[-1]) + 1) <= max_tokens):
            batches[-1].append(i)
            longest = max(longest, length)
        else:
            batches.append([i])
            longest = length
    return batches


def policy_gradient_update(
    model: TrainableModel,
    sequences: Sequence[TrainingSequence],
    advantages: Sequence[float],
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    settings: UpdateSettings,
    workers: Workers = Workers(),
) -> UpdateStats | None:
    """Run `settings.epochs` optimizer steps of the clipped objective on the active role.

    The loss is aggregated by `settings.aggregation` over the sequences' `trajectory_id`s:
    with the default, the turns of one trajectory form one unit (token mean over all its
    generated tokens, then the mean over trajectories). Each sequence's token sum gets a
    weight (`sequence_weights`) fixed before micro-batching, so any split into
    micro-batches sums to the whole-batch loss.

    The behaviour log-probs (logp_old) are those of the weights before the first step.
    With one epoch they equal the current log-probs, so their forward pass is skipped.
    Sequences with zero advantage contribute no policy gradient; when there is also no
    KL term and no entropy bonus they are skipped entirely but still count in the loss's denominator, so the
    objective is the same as if they had been computed. Returns None when nothing is
    left to train on.

    With several `workers` (data parallelism), each process passes its own sequences (a
    trajectory's turns all on one process); the denominator counts the units of all of
    them and the gradients are summed, so every process takes the step one process would
    take on the union. Returned losses and sizes are totals over the processes.
    """
    if len(sequences) != len(advantages):
        raise ValueError("one advantage per sequence is needed")
    started = time.perf_counter()
    aggregation = settings.aggregation
    device = next(model.model.parameters()).device
    # The first token has no prediction, so it never carries loss (collate drops it too).
    loss_tokens = [sum(s.loss_mask[1:]) for s in sequences]
    unit_ids = [s.trajectory_id for s in sequences]
    keep = [i for i, a in enumerate(advantages) if a != 0.0 or settings.kl_coef > 0 or settings.entropy_coef > 0]
    kept_tokens = sum(loss_tokens[i] for i in keep)
    total_units, total_kept, total_kept_tokens = workers.sum(
        [aggregation_units(aggregation, loss_tokens, unit_ids), len(keep), kept_tokens])
    # Every process takes this decision from the same sums, so none is left waiting.
    if total_units == 0 or total_kept == 0:
        return None
    weights = sequence_weights(loss_tokens, unit_ids, aggregation, total_units)
    push = net_advantage(advantages, loss_tokens, weights)
    kept = [sequences[i] for i in keep]
    kept_adv = [float(advantages[i]) for i in keep]
    kept_weights = weights[keep]
    share = model.shares_prefixes(settings.shared_tokens)
    groups = _micro_batches(kept, settings.micro_batch_size, by_prefix=share, max_tokens=settings.micro_batch_tokens)
    batches = [collate([kept[i] for i in group], model.pad_id, device, share_prefix=share) for group in groups]
    batch_adv = [torch.tensor([kept_adv[i] for i in group], device=device) for group in groups]
    batch_weights = [kept_weights[group].to(device) for group in groups]

    model.model.train()
    old = ref = None
    with torch.no_grad():
        if settings.epochs > 1:
            old = [model.logprobs(batch) for batch in batches]
        if settings.kl_coef > 0:
            ref = [model.reference_logprobs(batch) for batch in batches]

    totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
    compute_s = 0.0
    for _ in range(settings.epochs):
        optimizer.zero_grad(set_to_none=True)
        for index, batch in enumerate(batches):
            compute_started = time.perf_counter()
            entropy = None
            if settings.entropy_coef > 0:
                logp, entropy = model.logprobs_and_entropy(batch)
            else:
                logp = model.logprobs(batch)
            logp_old = old[index] if old is not None else logp.detach()
            loss, stats = clipped_policy_loss(
                logp, logp_old, batch_adv[index], batch.loss_mask, batch_weights[index],
                clip_low=settings.clip_low, clip_high=settings.clip_high,
                logp_ref=ref[index] if ref is not None else None, kl_coef=settings.kl_coef,
                entropy=entropy, entropy_coef=settings.entropy_coef,
            )
            # The weights already hold the batch's normaliser: micro-batch losses just add up.
            loss.backward()
            compute_s += time.perf_counter() - compute_started
            for key in ("loss", "pg_loss", "kl", "entropy"):
                totals[key] += getattr(stats, key) / settings.epochs
            # The share of clipped tokens, whatever the micro-batching.
            token_share = float(batch.loss_mask.sum()) / total_kept_tokens
            totals["clip_frac"] += stats.clip_frac * token_share / settings.epochs
        workers.sum_gradients(model.parameters())
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        totals["grad_norm"] += float(grad_norm) / settings.epochs
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    model.model.eval()
    loss_terms = ("loss", "pg_loss", "kl", "entropy", "clip_frac", "net_advantage")
    totals["net_advantage"] = push
    summed = workers.sum([totals[key] for key in loss_terms] + [
        len(kept), sum(b.num_tokens for b in batches), sum(float(b.loss_mask.sum()) for b in batches),
        distinct_tokens(kept)])
    totals.update(zip(loss_terms, summed[:6]))
    entropy = totals.pop("entropy")
    return UpdateStats(
        **totals,
        entropy=entropy if settings.entropy_coef > 0 else None,
        sequences=int(summed[6]),
        tokens=int(summed[7]),
        loss_tokens=int(summed[8]),
        distinct_tokens=int(summed[9]),
        forward_backward_s=compute_s,
        seconds=time.perf_counter() - started,
    )


def sft_loss(model: TrainableModel, sequences: Sequence[TrainingSequence], device: Any = None,
             shared_tokens: bool = True) -> tuple[torch.Tensor, int]:
    """Mean negative log-likelihood of the masked-in tokens (token-level mean), and the tokens
    pushed through the model for it; with `shared_tokens` the sequences' common prefix is
    encoded once (`collate`)."""
    batch = collate(sequences, model.pad_id, device or next(model.model.parameters()).device,
                    share_prefix=model.shares_prefixes(shared_tokens))
    logp = model.logprobs(batch)
    return -(logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1), batch.num_tokens
