"""Group-relative policy optimisation maths: advantages, clipped loss, KL.

Pure functions over tensors, no I/O and no model objects. Shapes use
B = sequences in the batch, T = padded sequence length, G = group size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Sequence

import torch

from hindsight.registry import Registry


#: Standard-deviation conventions of std normalisation: population divides by G, sample (verl's,
#: `torch.std`'s default) by G − 1, which makes advantages √((G − 1)/G) times the population ones.
STD_CONVENTIONS = ("population", "sample")


def group_advantages(
    rewards: torch.Tensor, *, normalize_std: bool = True, std: str = "population", eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantages A_i = (R_i − mean(R)) / (std(R) + eps).

    rewards: [num_groups, G] returns of G samples of the same task.
    Returns [num_groups, G] in the dtype of `rewards`. `std` is the convention of the
    standard deviation (`STD_CONVENTIONS`). With `normalize_std=False` only the mean is
    subtracted (Dr. GRPO style).

    A group whose returns are all equal gets exactly zero, whatever the values: the maths
    runs in float64 and such groups are set to 0, because a mean of equal values that are
    not representable (0.97, 1/3) can round off them, and dividing that rounding by
    std + eps ≈ eps would turn it into advantages of order 0.1. A group of one is such a group.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    if std not in STD_CONVENTIONS:
        raise ValueError(f"std must be one of {', '.join(STD_CONVENTIONS)}, not {std!r}")
    values = rewards.to(torch.float64)
    centred = values - values.mean(dim=1, keepdim=True)
    if normalize_std:
        # A group of one has no sample std (torch warns and gives NaN); it is all-equal and
        # masked to 0 below, so its correction may be 0 like any other single value's.
        correction = 1 if std == "sample" and values.shape[1] > 1 else 0
        spread = values.std(dim=1, correction=correction, keepdim=True)
        centred = centred / (spread + eps)
    equal = (values.max(dim=1, keepdim=True).values == values.min(dim=1, keepdim=True).values)
    return torch.where(equal, torch.zeros_like(centred), centred).to(rewards.dtype)


def nonzero_variance_groups(rewards: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """DAPO's dynamic-sampling filter: which groups carry any learning signal.

    rewards: [num_groups, G]. Returns a bool mask [num_groups], False where all G returns
    are equal (every advantage would be zero).
    """
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > tol


def top_spread_groups(rewards: torch.Tensor, fraction: float) -> torch.Tensor:
    """RAGEN's variance filter (StarPO-S): keep the groups whose returns differ the most.

    rewards: [num_groups, G]. Returns a bool mask [num_groups], True for the
    ceil(fraction · num_groups) groups of largest return std (at least one; ties go to the
    earlier group). fraction = 1 keeps every group.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    groups = rewards.shape[0]
    keep = min(groups, max(1, math.ceil(fraction * groups - 1e-9)))
    spread = rewards.to(torch.float64).std(dim=1, correction=0)
    # A stable sort on the negated spread: equal spreads keep their order.
    order = torch.sort(-spread, stable=True).indices[:keep]
    mask = torch.zeros(groups, dtype=torch.bool)
    mask[order] = True
    return mask


@dataclass(frozen=True)
class LossUnits:
    """What a loss aggregation averages over, for a batch of S sequences.

    unit_tokens: [S] float64, the generated tokens of the unit each sequence's token sum is
    averaged over (1 when every token is its own unit). units: how many units hold loss
    tokens on this process; summed over data-parallel processes it is the batch's denominator.
    """

    unit_tokens: torch.Tensor
    units: float


#: A loss aggregation: (loss_tokens [S], unit_ids [S]) -> LossUnits. `loss_tokens` are the
#: generated tokens of each sequence, `unit_ids` the trajectory each sequence belongs to.
LossAggregation = Callable[[Sequence[int], Sequence[str]], LossUnits]

#: Loss aggregations by the name a config's `aggregation` gives.
LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry("loss aggregation")


def _counts(loss_tokens: Sequence[int]) -> torch.Tensor:
    return torch.tensor([float(n) for n in loss_tokens], dtype=torch.float64)


@LOSS_AGGREGATIONS.register("trajectory_mean")
def trajectory_mean(loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> LossUnits:
    """Mean over every token the model generated in a trajectory, all turns together, then mean
    over trajectories: the 1/|o_i| of GRPO for multi-turn agents. A trajectory with more turns
    does not weigh more."""
    tokens_of: dict[str, float] = {}
    for unit, n in zip(unit_ids, loss_tokens):
        tokens_of[unit] = tokens_of.get(unit, 0.0) + n
    return LossUnits(torch.tensor([tokens_of[unit] for unit in unit_ids], dtype=torch.float64),
                     float(len({unit for unit, n in zip(unit_ids, loss_tokens) if n > 0})))


# `sequence_mean` is the name configs written before the trajectory-level default gave the
# per-turn form; their runs still resume with the objective they started with.
@LOSS_AGGREGATIONS.register("turn_mean", "sequence_mean")
def turn_mean(loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> LossUnits:
    """Each turn's sequence is its own unit (mean over its tokens, then over turns), so a
    trajectory weighs in proportion to its number of turns."""
    return LossUnits(_counts(loss_tokens), float(sum(1 for n in loss_tokens if n > 0)))


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> LossUnits:
    """Mean over all tokens of the batch (DAPO), so long answers weigh more."""
    return LossUnits(torch.ones(len(loss_tokens), dtype=torch.float64), float(sum(loss_tokens)))


class Aggregation(str, Enum):
    """The built-in loss aggregations by name (see `LOSS_AGGREGATIONS` for what each does).

    A member is its name (a `str`), so it can stand wherever an aggregation name is taken;
    aggregations registered elsewhere are used by their names alone.
    """

    TRAJECTORY_MEAN = "trajectory_mean"
    TURN_MEAN = "turn_mean"
    TOKEN_MEAN = "token_mean"

    @classmethod
    def _missing_(cls, value: object) -> Aggregation | None:
        return cls.TURN_MEAN if value == "sequence_mean" else None

    def units(self, loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> float:
        """What the loss is averaged over: trajectories, turns or tokens (those with loss tokens).

        loss_tokens: [S] generated tokens of each sequence; unit_ids: [S] the trajectory each
        sequence belongs to. Summed over data-parallel processes, this is the denominator
        every process passes to `sequence_weights`.
        """
        return aggregation_units(self, loss_tokens, unit_ids)


def aggregation_units(aggregation: str, loss_tokens: Sequence[int], unit_ids: Sequence[str]) -> float:
    """`LossUnits.units` of the aggregation called `aggregation` (an `Aggregation` or a registered name)."""
    return LOSS_AGGREGATIONS.get(_name(aggregation))(loss_tokens, unit_ids).units


def _name(aggregation: str) -> str:
    return aggregation.value if isinstance(aggregation, Aggregation) else aggregation


def sequence_weights(
    loss_tokens: Sequence[int], unit_ids: Sequence[str], aggregation: str, total_units: float,
) -> torch.Tensor:
    """Weight w_s of each sequence's token sum, so that Σ_s w_s Σ_t mask[s, t]·x[s, t] is the
    aggregated loss of the whole batch.

    loss_tokens: [S] generated (masked-in) tokens of each sequence; unit_ids: [S] the
    trajectory of each sequence (the turns of one trajectory share it); aggregation: an
    `Aggregation` or the name of a registered one; total_units: the batch's
    `aggregation_units(...)`, over every process. Returns [S] float64:
    1 / (unit tokens × total_units) for a sequence with loss tokens, else 0.

    The weights of a sequence depend only on its own trajectory and the batch totals, so
    any split of the sequences into micro-batches (or processes) sums to the same loss.
    """
    if len(loss_tokens) != len(unit_ids):
        raise ValueError("one unit id per sequence is needed")
    counts = _counts(loss_tokens)
    if total_units <= 0:
        return torch.zeros_like(counts)
    per_unit = LOSS_AGGREGATIONS.get(_name(aggregation))(loss_tokens, unit_ids).unit_tokens
    return torch.where(counts > 0, 1.0 / (per_unit.clamp(min=1) * total_units), 0.0)


def net_advantage(advantages: Sequence[float], loss_tokens: Sequence[int], weights: torch.Tensor) -> float:
    """Σ_s w_s · A_s · n_s: the aggregated advantage of every trained token.

    advantages: [S] one per sequence; loss_tokens: [S] its generated tokens n_s; weights: [S]
    from `sequence_weights`. A group's advantages sum to zero, but its tokens need not: under
    token_mean, a group whose successes are longer than its failures puts more tokens behind
    the positive advantages. This number is the weight the update gives to "make every sampled
    token likelier", a push that sharpens the policy toward what it already does (it lowers
    the entropy). Under trajectory_mean it is the mean advantage over trajectories: zero for
    whole groups, whatever their lengths.
    """
    if not len(advantages) == len(loss_tokens) == len(weights):
        raise ValueError("one advantage, token count and weight per sequence are needed")
    values = torch.tensor([float(a) * n for a, n in zip(advantages, loss_tokens)], dtype=torch.float64)
    return float((values * weights.to(torch.float64)).sum())


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
    entropy: float = 0.0  # aggregated like the loss; 0 when no entropies were given


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
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO/GRPO clipped surrogate with an optional k3 KL penalty and entropy bonus.

    logp:       [B, T] log-probs of the sampled tokens under the policy being trained.
    logp_old:   [B, T] log-probs under the policy that sampled them (no gradient).
    advantages: [B] one advantage per sequence, shared by all its tokens.
    mask:       [B, T] 1 for model-generated tokens, 0 for prompt, observation and padding.
    weights:    [B] weight of each sequence's token sum (`sequence_weights`); by default
                each sequence is its own trajectory (mean per sequence, then over them).
    logp_ref:   [B, T] log-probs under the frozen reference, needed when kl_coef > 0.
    entropy:    [B, T] entropy of the policy's whole next-token distribution at each
                position (with gradient), needed when entropy_coef > 0.

    Per token: −min(ρ·A, clip(ρ, 1 − clip_low, 1 + clip_high)·A) + kl_coef·k3
    − entropy_coef·H, with ρ = exp(logp − logp_old), aggregated with `weights`. The bonus
    pays every generated token for keeping its distribution wide, whatever the advantage,
    which is what holds exploration up when most groups have tied returns (verl's
    `entropy_coeff`). Returns (loss, stats).
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
    if entropy_coef and entropy is None:
        raise ValueError("entropy_coef > 0 needs the entropy of each position")
    mean_entropy = aggregate(entropy, mask, weights) if entropy is not None else pg_loss.new_zeros(())
    loss = pg_loss + kl_coef * kl - entropy_coef * mean_entropy
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        clip_frac = (((clipped < unclipped).to(logp.dtype)) * mask).sum() / tokens
        stats = PolicyLossStats(
            loss=float(loss),
            pg_loss=float(pg_loss),
            kl=float(kl),
            clip_frac=float(clip_frac),
            ratio_mean=float((ratio * mask).sum() / tokens),
            entropy=float(mean_entropy),
        )
    return loss, stats
