"""Group-relative policy optimisation maths: advantages, clipped loss, KL.

Pure functions over tensors, no I/O and no model objects. Shapes use
B = sequences in the batch, T = padded sequence length, G = group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import torch


def group_advantages(rewards: torch.Tensor, *, normalize_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantages A_i = (R_i − mean(R)) / (std(R) + eps).

    rewards: [num_groups, G] returns of G samples of the same task.
    Returns [num_groups, G]. `std` is the population standard deviation, so a group
    whose returns are all equal gets zero advantage rather than NaN. With
    `normalize_std=False` only the mean is subtracted (Dr. GRPO style).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not normalize_std:
        return centred
    return centred / (rewards.std(dim=1, unbiased=False, keepdim=True) + eps)


def nonzero_variance_groups(rewards: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """DAPO's dynamic-sampling filter: which groups carry any learning signal.

    rewards: [num_groups, G]. Returns a bool mask [num_groups], False where all G returns
    are equal (every advantage would be zero).
    """
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > tol


class Aggregation(Enum):
    """How per-token losses become one number: a weight for every sequence's token sum.

    TRAJECTORY_MEAN (default): mean over every token the model generated in a trajectory,
    all turns together, then mean over trajectories: the 1/|o_i| of GRPO for multi-turn
    agents. A trajectory with more turns does not weigh more.
    TURN_MEAN: each turn's sequence is its own unit (mean over its tokens, then over
    turns), so a trajectory weighs in proportion to its number of turns.
    TOKEN_MEAN: mean over all tokens of the batch (DAPO), so long answers weigh more.
    """

    TRAJECTORY_MEAN = "trajectory_mean"
    TURN_MEAN = "turn_mean"
    TOKEN_MEAN = "token_mean"

    @classmethod
    def _missing_(cls, value: object) -> Aggregation | None:
        # Configs written before the trajectory-level default called the per-turn form
        # `sequence_mean`; their runs still resume with the objective they started with.
        return cls.TURN_MEAN if value == "sequence_mean" else None

    def units(self, loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> float:
        """What the loss is averaged over: trajectories, turns or tokens (those with loss tokens).

        loss_tokens: [S] generated tokens of each sequence; unit_ids: [S] the trajectory each
        sequence belongs to. Summed over data-parallel processes, this is the denominator
        every process passes to `sequence_weights`.
        """
        if self is Aggregation.TOKEN_MEAN:
            return float(sum(loss_tokens))
        if self is Aggregation.TURN_MEAN:
            return float(sum(1 for n in loss_tokens if n > 0))
        return float(len({unit for unit, n in zip(unit_ids, loss_tokens) if n > 0}))


def sequence_weights(
    loss_tokens: Sequence[int], unit_ids: Sequence[str], aggregation: Aggregation, total_units: float,
) -> torch.Tensor:
    """Weight w_s of each sequence's token sum, so that Σ_s w_s Σ_t mask[s, t]·x[s, t] is the
    aggregated loss of the whole batch.

    loss_tokens: [S] generated (masked-in) tokens of each sequence; unit_ids: [S] the
    trajectory of each sequence (the turns of one trajectory share it); total_units: the
    batch's `aggregation.units(...)`, over every process. Returns [S] float64.

    The weights of a sequence depend only on its own trajectory and the batch totals, so
    any split of the sequences into micro-batches (or processes) sums to the same loss.
    """
    if len(loss_tokens) != len(unit_ids):
        raise ValueError("one unit id per sequence is needed")
    counts = torch.tensor([float(n) for n in loss_tokens], dtype=torch.float64)
    if total_units <= 0:
        return torch.zeros_like(counts)
    if aggregation is Aggregation.TOKEN_MEAN:
        return torch.where(counts > 0, 1.0 / total_units, 0.0)
    if aggregation is Aggregation.TURN_MEAN:
        per_unit = counts
    else:
        tokens_of: dict[str, float] = {}
        for unit, n in zip(unit_ids, loss_tokens):
            tokens_of[unit] = tokens_of.get(unit, 0.0) + n
        per_unit = torch.tensor([tokens_of[unit] for unit in unit_ids], dtype=torch.float64)
    return torch.where(counts > 0, 1.0 / (per_unit.clamp(min=1) * total_units), 0.0)


def aggregate(values: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_s weights[s] · Σ_t mask[s, t] · values[s, t].

    values, mask: [B, T]; weights: [B] from `sequence_weights`. Returns a scalar.
    """
    return ((values * mask).sum(dim=1) * weights.to(values.dtype)).sum()


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(π || π_ref): exp(r) − r − 1 with r = logp_ref − logp.

    logp, logp_ref: [B, T]. Returns [B, T], non-negative, zero where the two agree.
    """
    log_ratio = logp_ref - logp
    return torch.exp(log_ratio) - log_ratio - 1


@dataclass(frozen=True)
class PolicyLossStats:
    """Detached diagnostics of one loss evaluation."""

    loss: float
    pg_loss: float
    kl: float
    clip_frac: float
    ratio_mean: float


def clipped_policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    logp_ref: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO/GRPO clipped surrogate with optional k3 KL penalty.

    logp:       [B, T] log-probs of the sampled tokens under the policy being trained.
    logp_old:   [B, T] log-probs under the policy that sampled them (no gradient).
    advantages: [B] one advantage per sequence, shared by all its tokens.
    mask:       [B, T] 1 for model-generated tokens, 0 for prompt, observation and padding.
    weights:    [B] weight of each sequence's token sum (`sequence_weights`); by default
                each sequence is its own trajectory (mean per sequence, then over them).
    logp_ref:   [B, T] log-probs under the frozen reference, needed when kl_coef > 0.

    Per token: −min(ρ·A, clip(ρ, 1 − clip_low, 1 + clip_high)·A) + kl_coef·k3, with
    ρ = exp(logp − logp_old), aggregated with `weights`. Returns (loss, stats).
    """
    mask = mask.to(logp.dtype)
    if weights is None:
        tokens = mask.sum(dim=1).tolist()
        ids = [str(row) for row in range(len(tokens))]
        aggregation = Aggregation.TRAJECTORY_MEAN
        weights = sequence_weights(tokens, ids, aggregation, aggregation.units(tokens, ids))
    ratio = torch.exp(logp - logp_old.detach())
    adv = advantages.detach().to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    pg_loss = aggregate(per_token, mask, weights)
    if kl_coef and logp_ref is None:
        raise ValueError("kl_coef > 0 needs logp_ref")
    kl = aggregate(k3_kl(logp, logp_ref.detach()), mask, weights) if logp_ref is not None else pg_loss.new_zeros(())
    loss = pg_loss + kl_coef * kl
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        clip_frac = (((clipped < unclipped).to(logp.dtype)) * mask).sum() / tokens
        stats = PolicyLossStats(
            loss=float(loss),
            pg_loss=float(pg_loss),
            kl=float(kl),
            clip_frac=float(clip_frac),
            ratio_mean=float((ratio * mask).sum() / tokens),
        )
    return loss, stats
