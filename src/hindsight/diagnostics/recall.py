"""Memory recall distance (TIDE, appendix C.5).

How long ago did the agent last see an object it now acts on? With o_t the observation
the agent sees before action a_t, E(o) the object instances an observation shows, and
G the object classes the task needs:

    LastSeen(obj, t) = max { k : k < t, obj in E(o_k) }           (undefined if none)
    d_t(obj)         = t - LastSeen(obj, t)    for obj touched by a_t, class(obj) in G
    D(τ)             = mean of d_t(obj) over all such defined (t, obj) pairs

LastSeen looks strictly before t, as the paper defines it: an object first noticed in the
current observation is acted on from perception, not from memory, and is not counted.
Only environments with object hooks (ALFWorld-style text) support this; for the others
`recall_distances` is never called and the run reports why (`EnvHooks.recall_skip_reason`).

Beyond the mean, `recall_distribution` describes how the distances are spread: every
defined d_t(obj) of a group of trajectories is one sample, and the distribution reports
their count, mean, quartiles, 90th percentile, maximum and a histogram with one bin per
distance. The run summary builds one for successful and one for failed trajectories,
since a long tail of old recalls is what separates the two in the paper's ALFWorld
analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from hindsight.diagnostics.hooks import EnvHooks


def recall_distances(
    observations: Sequence[str], actions: Sequence[str | None], instruction: str, hooks: EnvHooks
) -> list[int]:
    """Every defined d_t(obj) of one trajectory, in step order."""
    if hooks.visible_objects is None or hooks.acted_objects is None or hooks.task_objects is None:
        raise ValueError(f"environment {hooks.env_id!r} has no object hooks: {hooks.recall_skip_reason}")
    # ALFWorld states the task in the first observation ("Your task is to: ..."), not always in the
    # instruction; the task-object extractor takes the first task sentence of the two.
    needed = hooks.task_objects(f"{instruction}\n{observations[0]}" if observations else instruction)
    last_seen: dict[str, int] = {}
    distances = []
    for t, (observation, action) in enumerate(zip(observations, actions)):
        if action:
            for obj in sorted(hooks.acted_objects(action)):
                if hooks.object_type(obj) in needed and obj in last_seen:
                    distances.append(t - last_seen[obj])
        for obj in hooks.visible_objects(observation):
            last_seen[obj] = t
    return distances


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of ascending values by linear interpolation between order statistics.

    With n values, the quantile sits at position h = q * (n - 1) of the sorted list and
    is ordered[floor(h)] + (h - floor(h)) * (ordered[floor(h) + 1] - ordered[floor(h)])
    (numpy's default rule): q = 0 is the minimum, q = 1 the maximum, 0.5 the median.
    """
    if not ordered:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


@dataclass(frozen=True)
class RecallDistribution:
    """How the recall distances of a group of trajectories are spread.

    `n` counts (step, object) recalls and `n_trajectories` the trajectories of the group
    with at least one. `histogram` is ((distance, count), ...) for every distance that
    occurs, ascending. The statistics are None when the group has no recall.
    """

    n: int
    n_trajectories: int
    mean: float | None
    p25: float | None
    median: float | None
    p75: float | None
    p90: float | None
    max: int | None
    histogram: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, object]:
        return {
            "n": self.n, "n_trajectories": self.n_trajectories, "mean": self.mean, "p25": self.p25,
            "median": self.median, "p75": self.p75, "p90": self.p90, "max": self.max,
            "histogram": [list(pair) for pair in self.histogram],
        }


def recall_distribution(per_trajectory: Iterable[Sequence[int]]) -> RecallDistribution:
    """The distribution of the recall distances of some trajectories (one sequence each)."""
    pooled: list[int] = []
    contributing = 0
    for distances in per_trajectory:
        if distances:
            contributing += 1
            pooled.extend(int(d) for d in distances)
    if not pooled:
        return RecallDistribution(0, 0, None, None, None, None, None, None, ())
    pooled.sort()
    counts: dict[int, int] = {}
    for d in pooled:
        counts[d] = counts.get(d, 0) + 1
    return RecallDistribution(
        n=len(pooled),
        n_trajectories=contributing,
        mean=math.fsum(pooled) / len(pooled),
        p25=quantile(pooled, 0.25),
        median=quantile(pooled, 0.5),
        p75=quantile(pooled, 0.75),
        p90=quantile(pooled, 0.9),
        max=pooled[-1],
        histogram=tuple(sorted(counts.items())),
    )
