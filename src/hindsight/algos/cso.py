"""Critical Step Optimization's selection rules: which steps are candidates, which pairs are formed.

Pure functions over process-reward scores and verification outcomes; the pipeline that
samples, scores and verifies lives in `hindsight.agent.cso`.

A step t of a failed trajectory is a *candidate* critical step when the process reward
model rates the policy's own action low and at least one expert alternative high:

    r_policy < γ_low  and  max_j r_alt_j > γ_high            (defaults 0.45, 0.65)

Each alternative rated above γ_high is then verified by a branch rollout; a verified
alternative becomes the chosen side of a pair whose rejected side is, by default, the
policy's own logged action at t (never an alternative compared with itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

GAMMA_LOW = 0.45
GAMMA_HIGH = 0.65

#: Where the two sides of a pair come from (the paper's Table 2).
EXPERT_POLICY = "expert+policy"  # chosen: a verified expert alternative; rejected: the policy's own action
EXPERT_EXPERT = "expert+expert"  # chosen: a verified expert alternative; rejected: an expert alternative that failed
POLICY_POLICY = "policy+policy"  # chosen: a verified policy sample; rejected: the policy's own action
PAIR_SOURCES = (EXPERT_POLICY, EXPERT_EXPERT, POLICY_POLICY)


def check_thresholds(low: float, high: float) -> None:
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"need 0 <= gamma_low <= gamma_high <= 1, got {low} and {high}")


def is_candidate(policy_score: float, alternative_scores: Sequence[float], low: float = GAMMA_LOW,
                 high: float = GAMMA_HIGH) -> bool:
    """Is the step a candidate critical step (the policy's action rated low, an alternative rated high)?"""
    return policy_score < low and any(score > high for score in alternative_scores)


def worth_verifying(alternative_scores: Sequence[float], high: float = GAMMA_HIGH) -> list[int]:
    """Indices of the alternatives a candidate step branches on: those rated above γ_high."""
    return [j for j, score in enumerate(alternative_scores) if score > high]


@dataclass(frozen=True)
class PairChoice:
    """Indices into a step's alternatives: `chosen`, and `rejected` (None = the policy's own action)."""

    chosen: int
    rejected: int | None


def choose_pairs(actions: Sequence[str], verified: Sequence[bool | None], policy_action: str,
                 source: str = EXPERT_POLICY) -> list[PairChoice]:
    """The pairs one step yields.

    actions: the step's alternatives; verified[j]: True (its branch succeeded), False (it
    failed) or None (not branched). Every verified alternative is a chosen side. With
    `expert+policy` and `policy+policy` the rejected side is the policy's own action; with
    `expert+expert` it is a failed alternative (paired in order, so each is used once).
    A chosen action equal to the rejected one never forms a pair.
    """
    if source not in PAIR_SOURCES:
        raise ValueError(f"unknown pair source {source!r}; choose from {', '.join(PAIR_SOURCES)}")
    if len(actions) != len(verified):
        raise ValueError("one verification outcome per alternative")
    good = [j for j, ok in enumerate(verified) if ok]
    if source == EXPERT_EXPERT:
        bad = [j for j, ok in enumerate(verified) if ok is False]
        return [PairChoice(g, b) for g, b in zip(good, bad) if actions[g] != actions[b]]
    return [PairChoice(j, None) for j in good if actions[j] != policy_action]
