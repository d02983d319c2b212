"""ECHO maths: how much a critique helped, as the critic's reward, and refinement statistics.

Pure functions over tensors, no I/O and no model objects. Shapes use Q = queries
(initial trajectories) in a batch and N = critiques per query, each followed by one
refinement. Scores are task scores in [0, 1].

The critic is rewarded by the gain its critique produced, s_o → s_r. The linear gain
s_r − s_o treats every step alike. The saturation-aware gain weights a score change by
how close it is to the ceiling, with weight w(s) = 1 / (1 − s + η), and integrates it:

    g(s_o, s_r) = ∫ w(s) ds from s_o to s_r = ln((1 − s_o + η) / (1 − s_r + η))

so 0.9 → 1.0 earns more than 0.1 → 0.2. g is antisymmetric (a regression costs what
the same improvement earns), additive over intermediate scores, and 0 when nothing
changed (including s_o = s_r = 1). η > 0 keeps it finite at s = 1.
"""

from __future__ import annotations

from enum import Enum

import torch


class Gain(Enum):
    """How a refinement's score change becomes the critic's reward."""

    SATURATION_AWARE = "sa"
    LINEAR = "linear"


def _check_shapes(initial: torch.Tensor, refined: torch.Tensor) -> None:
    if initial.dim() != 1 or refined.dim() != 2 or refined.shape[0] != initial.shape[0]:
        raise ValueError(
            f"expected initial scores [Q] and refined scores [Q, N], "
            f"got {tuple(initial.shape)} and {tuple(refined.shape)}"
        )


def saturation_aware_gain(initial: torch.Tensor, refined: torch.Tensor, eta: float = 0.1) -> torch.Tensor:
    """g = ln((1 − s_o + η) / (1 − s_r + η)) for every refinement.

    initial: [Q] scores s_o of the initial trajectories.
    refined: [Q, N] scores s_r of the refinements of each.
    Returns [Q, N]. Positive for an improvement, negative for a regression, 0 for none.
    """
    _check_shapes(initial, refined)
    if eta <= 0:
        raise ValueError("eta must be > 0 (it keeps the gain finite at a full score)")
    return torch.log((1 - initial.unsqueeze(1) + eta) / (1 - refined + eta))


def linear_gain(initial: torch.Tensor, refined: torch.Tensor) -> torch.Tensor:
    """Δs = s_r − s_o for every refinement. initial: [Q]; refined: [Q, N]; returns [Q, N]."""
    _check_shapes(initial, refined)
    return refined - initial.unsqueeze(1)


def critic_rewards(
    initial: torch.Tensor, refined: torch.Tensor, *, gain: Gain = Gain.SATURATION_AWARE, eta: float = 0.1,
    negative_weight: float = 1.0,
) -> torch.Tensor:
    """The critic's reward r_c for each critique: its refinement's gain, negative gains × λ.

    initial: [Q]; refined: [Q, N]; returns [Q, N]. `negative_weight` (λ) scales the
    penalty for a critique whose refinement scored below the initial attempt (1 keeps
    the gain antisymmetric; 0 ignores regressions).
    """
    if negative_weight < 0:
        raise ValueError("negative_weight must be >= 0")
    if gain is Gain.SATURATION_AWARE:
        raw = saturation_aware_gain(initial, refined, eta)
    else:
        raw = linear_gain(initial, refined)
    return torch.where(raw < 0, raw * negative_weight, raw)


def improvement_rate(initial: torch.Tensor, refined: torch.Tensor) -> float:
    """Share of refinements that scored above their initial attempt. initial: [Q]; refined: [Q, N]."""
    _check_shapes(initial, refined)
    if refined.numel() == 0:
        return 0.0
    return float((refined > initial.unsqueeze(1)).float().mean())


def near_ceiling_improvements(initial: torch.Tensor, refined: torch.Tensor, threshold: float) -> tuple[int, int]:
    """(refinements whose initial score was near the ceiling, how many of those improved).

    Near the ceiling means threshold ≤ s_o < 1: the last-mile cases the
    saturation-aware gain is meant to reward. initial: [Q]; refined: [Q, N].
    """
    _check_shapes(initial, refined)
    near = ((initial >= threshold) & (initial < 1)).unsqueeze(1).expand_as(refined)
    improved = near & (refined > initial.unsqueeze(1))
    return int(near.sum()), int(improved.sum())


def mean_gain(initial: torch.Tensor, refined: torch.Tensor) -> float:
    """Average over queries of (mean refined score − initial score): the reward gain of a
    second attempt (ECHO's Table 5). initial: [Q]; refined: [Q, N]."""
    _check_shapes(initial, refined)
    if initial.numel() == 0:
        return 0.0
    return float((refined.mean(dim=1) - initial).mean())
