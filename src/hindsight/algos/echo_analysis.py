"""ECHO's analyses as plain maths: training stages, failure drift and judge-rating tallies.

Pure functions over numbers and numpy arrays; no I/O, no models. `hindsight echo-analyze`
(`methods/echo_analysis.py`) feeds them.

Stages. A run's updates first..last are cut into `n` contiguous ranges whose lengths differ
by at most one update. Stages are ranges of training time, not equal shares of failures:
a policy that improves leaves fewer failures in its later stages, and that thinning is
itself part of the picture.

Drift. Every failure is a unit vector (its text's embedding, scaled to length 1, so only
directions count and any encoder gives distances on the same 0..2 scale). A stage's
centroid is the mean of its failures' vectors. The drift of a run is the Euclidean
distance between the centroid of its first stage and that of its last (both non-empty).
Two centroids of a few dozen noisy points are never equal even when nothing changed, so
the same distance is measured again after shuffling the stage labels among the failures
(the stage sizes kept): the mean of those is the drift expected by chance, and the share
of shuffles that reach the observed drift (counting the observation itself) is its
p-value. The spread of a stage is the mean distance of its failures to their centroid,
the scale against which a centroid shift can be read.

Ratings. Each rated critique carries its stage, whether its refinement improved on the
attempt (s_r > s_o), a granularity level (or none, when the judge's answer could not be
read) and an issue-addressed verdict (or none). `tally_ratings` counts them per stage,
split by improvement. The issue-addressed rate is yes / (yes + no): unclear and unreadable
verdicts are counted and shown, but left out of the rate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Stage:
    """Stage `index` (0-based) of a run: the updates first_update..last_update, both included."""

    index: int
    first_update: int
    last_update: int

    @property
    def label(self) -> str:
        if self.first_update == self.last_update:
            return f"update {self.first_update}"
        return f"updates {self.first_update}–{self.last_update}"

    def holds(self, update: int) -> bool:
        return self.first_update <= update <= self.last_update


def split_stages(first: int, last: int, stages: int) -> tuple[Stage, ...]:
    """`stages` contiguous ranges covering first..last, lengths differing by at most one.

    A run with fewer updates than stages gets one stage per update.
    """
    if stages < 1:
        raise ValueError("stages must be >= 1")
    if last < first:
        raise ValueError(f"no updates between {first} and {last}")
    span = last - first + 1
    n = min(stages, span)
    # Boundary k sits at floor(k·span/n): the remainder spreads over the stages one update each.
    bounds = [first + k * span // n for k in range(n + 1)]
    return tuple(Stage(k, bounds[k], bounds[k + 1] - 1) for k in range(n))


def stage_of(update: int, stages: Sequence[Stage]) -> int | None:
    """The index of the stage holding `update`; None outside every stage."""
    for stage in stages:
        if stage.holds(update):
            return stage.index
    return None


def sample_per_stage(items: Sequence[T], stage: Callable[[T], int], cap: int, seed: int = 0) -> list[T]:
    """At most `cap` items of each stage (all of them when cap is 0), in their original order.

    Which items are kept is a seeded random choice, so a rerun keeps the same ones.
    """
    if cap < 0:
        raise ValueError("cap must be >= 0")
    by_stage: dict[int, list[int]] = {}
    for k, item in enumerate(items):
        by_stage.setdefault(stage(item), []).append(k)
    rng = random.Random(seed)
    kept: list[int] = []
    for key in sorted(by_stage):
        positions = by_stage[key]
        kept += positions if cap == 0 or len(positions) <= cap else rng.sample(positions, cap)
    return [items[k] for k in sorted(kept)]


# -- drift ---------------------------------------------------------------------------------


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1 (a zero row stays zero). vectors: [n, d] → [n, d] float64."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"expected embeddings [n, d], got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


@dataclass(frozen=True)
class StageSpread:
    """A stage's failures: how many, and their mean distance to the stage's centroid (None when empty)."""

    stage: int
    failures: int
    spread: float | None


@dataclass(frozen=True)
class Drift:
    """How far the failures moved between stages (module docstring: the definitions).

    `drift`: first-to-last centroid distance; `steps`: distances between the centroids of
    consecutive non-empty stages; `chance_drift`: the mean drift over `permutations`
    shuffles of the stage labels; `p_value`: (1 + shuffles reaching `drift`) / (1 +
    permutations). All None (with `reason`) when fewer than two stages have failures.
    """

    stages: tuple[StageSpread, ...]
    first_stage: int | None
    last_stage: int | None
    drift: float | None
    steps: tuple[float, ...]
    chance_drift: float | None
    p_value: float | None
    permutations: int
    reason: str = ""

    @property
    def excess(self) -> float | None:
        """Drift beyond what shuffled labels give: drift − chance_drift."""
        if self.drift is None or self.chance_drift is None:
            return None
        return self.drift - self.chance_drift


#: The drift number in one sentence, written into analysis.json beside it.
DRIFT_DEFINITION = (
    "Euclidean distance between the mean unit-length embedding of the first stage's failures and that of the "
    "last stage's (0 to 2); chance_drift is its mean over shuffles of the stage labels, p_value the share of "
    "shuffles (counting the observation) at least as large."
)


def _centroid_distance(vectors: np.ndarray, labels: np.ndarray, a: int, b: int) -> float:
    return float(np.linalg.norm(vectors[labels == a].mean(axis=0) - vectors[labels == b].mean(axis=0)))


def failure_drift(embeddings: np.ndarray, labels: Sequence[int], stages: int, *, permutations: int = 200,
                  seed: int = 0) -> Drift:
    """The drift of failures across `stages` stages. embeddings: [n, d] (any scale; rows are
    made unit length); labels: the stage (0..stages-1) of each row."""
    vectors = unit_rows(embeddings)
    labels_array = np.asarray(labels, dtype=np.int64)
    if labels_array.shape != (vectors.shape[0],):
        raise ValueError(f"{vectors.shape[0]} embeddings but {labels_array.shape[0]} labels")
    if labels_array.size and (labels_array.min() < 0 or labels_array.max() >= stages):
        raise ValueError(f"labels must lie in 0..{stages - 1}")
    if permutations < 0:
        raise ValueError("permutations must be >= 0")
    spreads = []
    for k in range(stages):
        members = vectors[labels_array == k]
        spread = float(np.linalg.norm(members - members.mean(axis=0), axis=1).mean()) if len(members) else None
        spreads.append(StageSpread(k, len(members), spread))
    present = [k for k in range(stages) if spreads[k].failures]
    if len(present) < 2:
        return Drift(tuple(spreads), None, None, None, (), None, None, permutations,
                     reason="fewer than two stages have failures")
    first, last = present[0], present[-1]
    drift = _centroid_distance(vectors, labels_array, first, last)
    steps = tuple(_centroid_distance(vectors, labels_array, a, b) for a, b in zip(present, present[1:]))
    chance, p_value = None, None
    if permutations:
        rng = np.random.default_rng(seed)
        shuffled = [_centroid_distance(vectors, labels_array[rng.permutation(labels_array.size)], first, last)
                    for _ in range(permutations)]
        chance = float(np.mean(shuffled))
        # A small tolerance so that a shuffle that happens to reproduce the observation counts as reaching it.
        p_value = (1 + sum(d >= drift - 1e-12 for d in shuffled)) / (1 + permutations)
    return Drift(tuple(spreads), first, last, drift, steps, chance, p_value, permutations)


# -- judge ratings -------------------------------------------------------------------------


class Granularity(Enum):
    """How specific a critique is (the judge's rubric: `agent/critique_judge.py`)."""

    GENERIC = "generic"
    TARGETED = "targeted"
    PINPOINTED = "pinpointed"

    @property
    def level(self) -> int:
        return {"generic": 1, "targeted": 2, "pinpointed": 3}[self.value]


class Addressed(Enum):
    """Whether a refinement dealt with the issue its critique raised."""

    YES = "yes"
    NO = "no"
    UNCLEAR = "unclear"


@dataclass(frozen=True)
class RatedCritique:
    """One critique as the tallies see it; None ratings are answers the judge gave that could not be read."""

    stage: int
    improved: bool
    granularity: Granularity | None
    addressed: Addressed | None


@dataclass(frozen=True)
class RatingTally:
    """Counts of a set of rated critiques."""

    critiques: int = 0
    generic: int = 0
    targeted: int = 0
    pinpointed: int = 0
    granularity_unread: int = 0
    addressed_yes: int = 0
    addressed_no: int = 0
    addressed_unclear: int = 0
    addressed_unread: int = 0

    @property
    def graded(self) -> int:
        """Critiques with a readable granularity."""
        return self.generic + self.targeted + self.pinpointed

    def granularity_share(self, level: Granularity) -> float | None:
        """Share of the readable granularities at `level`; None when there is none."""
        count = {Granularity.GENERIC: self.generic, Granularity.TARGETED: self.targeted,
                 Granularity.PINPOINTED: self.pinpointed}[level]
        return count / self.graded if self.graded else None

    @property
    def mean_granularity(self) -> float | None:
        """Mean level (1 generic, 2 targeted, 3 pinpointed) of the readable granularities."""
        if not self.graded:
            return None
        return (self.generic + 2 * self.targeted + 3 * self.pinpointed) / self.graded

    @property
    def issue_addressed_rate(self) -> float | None:
        """yes / (yes + no); None when neither was answered."""
        decided = self.addressed_yes + self.addressed_no
        return self.addressed_yes / decided if decided else None


def tally(critiques: Sequence[RatedCritique]) -> RatingTally:
    """Counts of one set of rated critiques."""

    def count(match: Callable[[RatedCritique], bool]) -> int:
        return sum(1 for c in critiques if match(c))

    return RatingTally(
        critiques=len(critiques),
        generic=count(lambda c: c.granularity is Granularity.GENERIC),
        targeted=count(lambda c: c.granularity is Granularity.TARGETED),
        pinpointed=count(lambda c: c.granularity is Granularity.PINPOINTED),
        granularity_unread=count(lambda c: c.granularity is None),
        addressed_yes=count(lambda c: c.addressed is Addressed.YES),
        addressed_no=count(lambda c: c.addressed is Addressed.NO),
        addressed_unclear=count(lambda c: c.addressed is Addressed.UNCLEAR),
        addressed_unread=count(lambda c: c.addressed is None),
    )


@dataclass(frozen=True)
class StageRatings:
    """A stage's tallies: all its rated critiques, and those whose refinement improved or did not."""

    stage: int
    all: RatingTally
    improved: RatingTally
    not_improved: RatingTally


@dataclass(frozen=True)
class RatingTables:
    """Tallies per stage and over the whole run."""

    stages: tuple[StageRatings, ...]
    overall: StageRatings


def _split(stage: int, critiques: Sequence[RatedCritique]) -> StageRatings:
    return StageRatings(stage, tally(critiques), tally([c for c in critiques if c.improved]),
                        tally([c for c in critiques if not c.improved]))


def tally_ratings(critiques: Sequence[RatedCritique], stages: int) -> RatingTables:
    """Per-stage (0..stages-1) and overall tallies; the overall entry has stage -1."""
    bad = [c.stage for c in critiques if not 0 <= c.stage < stages]
    if bad:
        raise ValueError(f"stage {bad[0]} is outside 0..{stages - 1}")
    per_stage = tuple(_split(k, [c for c in critiques if c.stage == k]) for k in range(stages))
    return RatingTables(per_stage, _split(-1, critiques))
