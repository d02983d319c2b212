"""Self-Guide's maths: the step reward of a self-assessment, the trust schedule λ(u), the shaped return.

Pure functions of numbers, labels and tensors; no I/O, no model objects.

    r_t  = +0.1 / 0 / −0.1 for a positive / neutral / negative self-assessment z_t
    λ(u) = trapezoid over the run's progress u ∈ [0, 1]:
           0 until `start`, linear up to 1 at `full`, 1 until `hold_until`, linear down to 0 at `end`
    R    = R_env + λ(u) · Σ_t r_t                      (the paper; `GuidanceForm` has two length-safe forms)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import torch


class Label(str, Enum):
    """A self-assessment's verdict on the latest step."""

    NEGATIVE = "negative"
    NEUTRAL = "neutral"
    POSITIVE = "positive"


STEP_REWARD = {Label.POSITIVE: 0.1, Label.NEUTRAL: 0.0, Label.NEGATIVE: -0.1}


def step_reward(label: Label | str) -> float:
    """r_t of one label (+0.1, 0 or −0.1)."""
    return STEP_REWARD[Label(label)]


@dataclass(frozen=True)
class TrustSchedule:
    """The breakpoints of λ(u), as fractions of the run (0 ≤ start ≤ full ≤ hold_until ≤ end ≤ 1).

    The paper's default: no internal reward for the first 40% of updates, a ramp to full
    weight by 50%, full weight until 70%, an anneal back to 0 by 80%. `hold_until` = `end`
    = 1 never anneals ("no annealing"); `start` = `full` = 0 is full weight from the first
    update ("immediate"); an earlier `start` and `full` is an "early entry".
    """

    start: float = 0.4
    full: float = 0.5
    hold_until: float = 0.7
    end: float = 0.8

    def __post_init__(self) -> None:
        points = (self.start, self.full, self.hold_until, self.end)
        if any(p < 0 for p in points) or list(points) != sorted(points):
            raise ValueError(f"trust schedule needs 0 <= start <= full <= hold_until <= end, got {points}")

    def weight(self, progress: float) -> float:
        """λ(u) at run progress u (the fraction of updates done)."""
        return trust_weight(progress, self.start, self.full, self.hold_until, self.end)


def trust_weight(progress: float, start: float, full: float, hold_until: float, end: float) -> float:
    """The trapezoid λ(u): 0 → ramp → 1 → anneal → 0. A zero-length ramp is a step."""
    if progress < start:
        return 0.0
    if progress < full:
        return (progress - start) / (full - start)
    if progress <= hold_until:
        return 1.0
    if progress < end:
        return (end - progress) / (end - hold_until)
    return 0.0


def update_progress(update: int, updates: int) -> float:
    """u of update `update` (1-based) of `updates`: the fraction of the run done before it."""
    if updates < 1 or not 1 <= update <= updates:
        raise ValueError(f"update {update} is outside 1..{updates}")
    return (update - 1) / updates


class GuidanceForm(str, Enum):
    """How the step rewards of a trajectory's self-assessments become its guidance term.

    SUM is the paper's λ·Σ_t r_t. With notes that keep saying "positive" it grows with the
    episode's length, so a long stall can earn more than a short success (docs/results.md,
    issue 12). MEAN divides by the number of notes: a trajectory's notes then weigh the same
    whatever its length. CAPPED keeps the sum but lets its positive part reach at most R_env:
    notes can still cost a failure, never pay it.
    """

    SUM = "sum"
    MEAN = "mean"
    CAPPED = "capped"


def guidance_term(labels: Sequence[Label | str], weight: float, form: GuidanceForm | str = GuidanceForm.SUM,
                  env_return: float = 0.0) -> float:
    """λ·Σ_t r_t (SUM), λ·mean_t r_t (MEAN, 0 without a note) or min(λ·Σ_t r_t, R_env) when positive (CAPPED)."""
    total = weight * sum(step_reward(label) for label in labels)
    form = GuidanceForm(form)
    if form is GuidanceForm.MEAN:
        return total / len(labels) if labels else 0.0
    if form is GuidanceForm.CAPPED and total > 0:
        return min(total, max(env_return, 0.0))
    return total


def shaped_return(env_return: float, labels: Sequence[Label | str], weight: float,
                  form: GuidanceForm | str = GuidanceForm.SUM) -> float:
    """R = R_env + the guidance term of `form` (the paper's: R_env + λ · Σ_t r_t)."""
    return env_return + guidance_term(labels, weight, form, env_return)


def guidance_only_groups(env_returns: torch.Tensor, shaped_returns: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """Which groups carry a learning signal only because of the guidance reward.

    env_returns, shaped_returns: [num_groups, G], R_env and R = R_env + λ·Σ_t r_t of the same
    samples. Returns a bool mask [num_groups]: True where the G env returns are all equal and the
    shaped returns are not. Such a group would be left out (or get zero advantage) without the
    guidance reward; with it, the group-normalised advantage rescales a gap of a few 0.1s to the
    size a success gap gets, so these groups train on the self-assessments alone.
    """
    if env_returns.shape != shaped_returns.shape or env_returns.dim() != 2:
        raise ValueError(f"returns must be two [num_groups, G] tensors of one shape, got "
                         f"{tuple(env_returns.shape)} and {tuple(shaped_returns.shape)}")
    spread = lambda r: r.max(dim=1).values - r.min(dim=1).values  # noqa: E731
    return (spread(env_returns) <= tol) & (spread(shaped_returns) > tol)


#: Issue 49's gate for an assessor worth rewarding: it must beat the judge that always says
#: "positive" by this much agreement, and catch at least this share of the bad steps.
GATE_MARGIN = 0.10
GATE_NEGATIVE_RECALL = 0.5


@dataclass(frozen=True)
class LabelAgreement:
    """An assessor's labels of held-out steps against the oracle's, beside two judges that read nothing.

    `always_positive` is the agreement of a judge that says "positive" every time (the share of
    positive steps); `label_mix` the expected agreement of one that guesses at random with the
    held-out steps' own label mix (Σ share²). An unreadable label agrees with nothing.
    """

    steps: int
    agreement: float
    negative_recall: float | None  # share of the oracle's negative steps labelled negative (None: there were none)
    said_negative: float  # share of all steps labelled negative
    unreadable: float
    always_positive: float
    label_mix: float

    @property
    def passes_gate(self) -> bool:
        """Agreement at least GATE_MARGIN above always-positive, and negatives recalled at least half the time."""
        return (self.agreement >= self.always_positive + GATE_MARGIN
                and self.negative_recall is not None and self.negative_recall >= GATE_NEGATIVE_RECALL)

    def metrics(self, prefix: str) -> dict[str, float]:
        values = {name: value for name, value in vars(self).items() if value is not None}
        return {f"{prefix}/{name}": float(value) for name, value in values.items()} | {
            f"{prefix}/passes_gate": float(self.passes_gate)}


def label_agreement_stats(predicted: Sequence[Label | None], oracle: Sequence[Label]) -> LabelAgreement:
    """Compare an assessor's labels (None: unreadable) with the oracle's, step by step."""
    if not oracle or len(predicted) != len(oracle):
        raise ValueError(f"need one predicted label per oracle label, and at least one; got {len(predicted)} "
                         f"and {len(oracle)}")
    n = len(oracle)
    shares = {label: sum(truth == label for truth in oracle) / n for label in Label}
    negatives = [said for said, truth in zip(predicted, oracle) if truth == Label.NEGATIVE]
    return LabelAgreement(
        steps=n,
        agreement=sum(said == truth for said, truth in zip(predicted, oracle)) / n,
        negative_recall=sum(said == Label.NEGATIVE for said in negatives) / len(negatives) if negatives else None,
        said_negative=sum(said == Label.NEGATIVE for said in predicted) / n,
        unreadable=sum(said is None for said in predicted) / n,
        always_positive=shares[Label.POSITIVE],
        label_mix=sum(share * share for share in shares.values()),
    )


def balanced_label_indices(labels: Sequence[Label | None], seed: int) -> list[int]:
    """The indices kept when no class outnumbers the second most common judged label.

    labels: the oracle label of each assessment, None for a first turn (no step to judge yet).
    The cap is the count of the second most common of negative / neutral / positive; every
    class, first turns included, keeps at most that many, drawn at random from `seed`. With
    fewer than two judged labels present nothing is dropped. The kept indices are in order.
    """
    counts = sorted((sum(label == kind for label in labels) for kind in Label), reverse=True)
    if counts[1] == 0:
        return list(range(len(labels)))
    cap, rng = counts[1], random.Random(seed)
    kept: list[int] = []
    for kind in (*Label, None):
        members = [i for i, label in enumerate(labels) if label == kind]
        kept += members if len(members) <= cap else rng.sample(members, cap)
    return sorted(kept)
