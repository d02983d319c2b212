"""Group-relative policy optimisation maths: advantages, clipped loss, KL.

Pure functions over tensors, no I/O and no model objects. Shapes use
B = sequences in the batch, T = padded sequence length, G = group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

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


def _token_mean_per_sequence(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    per_sequence = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    has_tokens = mask.sum(dim=1) > 0
    return per_sequence[has_tokens].mean() if has_tokens.any() else values.sum() * 0


def _token_level(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


class Aggregation(Enum):
    """How per-token losses become one number.

    SEQUENCE_MEAN: mean over each sequence's tokens, then mean over sequences (the
    1/|o_i| of GRPO). TOKEN_MEAN: mean over all tokens of the batch (DAPO), so long
    sequences weigh more.
    """

    SEQUENCE_MEAN = "sequence_mean"
    TOKEN_MEAN = "token_mean"

    def reduce(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _REDUCERS[self](values, mask)

    def units(self, mask: torch.Tensor) -> float:
        """How many units a batch's loss is averaged over (sequences with tokens, or tokens).

        Splitting a batch into micro-batches and weighting each micro-batch's reduced
        loss by units(micro) / units(batch) reproduces the reduction over the whole batch.
        """
        if self is Aggregation.SEQUENCE_MEAN:
            return float((mask.sum(dim=1) > 0).sum())
        return float(mask.sum())


_REDUCERS: dict[Aggregation, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Aggregation.SEQUENCE_MEAN: _token_mean_per_sequence,
    Aggregation.TOKEN_MEAN: _token_level,
}


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
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = Aggregation.SEQUENCE_MEAN,
    logp_ref: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO/GRPO clipped surrogate with optional k3 KL penalty.

    logp:       [B, T] log-probs of the sampled tokens under the policy being trained.
    logp_old:   [B, T] log-probs under the policy that sampled them (no gradient).
    advantages: [B] one advantage per sequence, shared by all its tokens.
    mask:       [B, T] 1 for model-generated tokens, 0 for prompt, observation and padding.
    logp_ref:   [B, T] log-probs under the frozen reference, needed when kl_coef > 0.

    Per token: −min(ρ·A, clip(ρ, 1 − clip_low, 1 + clip_high)·A) + kl_coef·k3, with
    ρ = exp(logp − logp_old), reduced by `aggregation`. Returns (loss, stats).
    """
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - logp_old.detach())
    adv = advantages.detach().to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    pg_loss = aggregation.reduce(per_token, mask)
    if kl_coef and logp_ref is None:
        raise ValueError("kl_coef > 0 needs logp_ref")
    kl = aggregation.reduce(k3_kl(logp, logp_ref.detach()), mask) if logp_ref is not None else pg_loss.new_zeros(())
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
