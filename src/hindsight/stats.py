"""Comparing two arms of an experiment on the same test tasks: the paired difference and its interval.

Both arms are trained with the same seeds and evaluated on the same test tasks, so the
outcome of arm A on (seed s, task t) is paired with arm B's on the same (s, t). Two sources
of chance move the difference: which tasks were drawn, and the training randomness a seed
stands for. The interval resamples both, seeds and tasks with replacement (a two-level
bootstrap), so three seeds give an honestly wide interval instead of the narrow one that
pooling 3 × 300 evaluations as if independent would give.

    result = paired_difference(outcomes_a, outcomes_b)   # {(seed, task): 0/1 or score}
    print(f"{result.difference:+.3f} [{result.low:+.3f}, {result.high:+.3f}]")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class PairedDifference:
    """Arm B minus arm A over the (seed, task) pairs both arms have."""

    mean_a: float
    mean_b: float
    difference: float
    low: float
    high: float
    level: float
    seeds: tuple[int, ...]
    tasks: int
    #: B − A within each seed, in the order of `seeds`.
    per_seed: tuple[float, ...]


def paired_difference(
    a: Mapping[tuple[int, int], float],
    b: Mapping[tuple[int, int], float],
    *,
    level: float = 0.95,
    resamples: int = 10_000,
    rng_seed: int = 0,
) -> PairedDifference:
    """The mean of B − A and its percentile interval from a two-level bootstrap.

    a, b: outcome per (seed, task id). Both must hold the same keys and every seed the same
    tasks (a full seeds × tasks grid), or the pairing is not what it claims; otherwise
    ValueError says which keys differ.
    Bootstrap replicate r draws S seeds and T tasks with replacement (S, T: the grid's
    size) and averages D[s, t] over the drawn seeds × drawn tasks, D = B − A of shape (S, T).
    """
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:3]
        raise ValueError(f"the arms were not evaluated on the same (seed, task) pairs, e.g. {only}")
    if not a:
        raise ValueError("no outcomes to compare")
    seeds = sorted({seed for seed, _ in a})
    tasks = sorted({task for _, task in a})
    if len(a) != len(seeds) * len(tasks):
        raise ValueError(f"every seed needs the same tasks: {len(a)} outcomes for {len(seeds)} seeds × "
                         f"{len(tasks)} tasks")
    grid_a = np.array([[float(a[s, t]) for t in tasks] for s in seeds])
    grid_b = np.array([[float(b[s, t]) for t in tasks] for s in seeds])
    diff = grid_b - grid_a  # (S, T)
    rng = np.random.default_rng(rng_seed)
    seed_draws = rng.integers(0, len(seeds), size=(resamples, len(seeds)))  # (R, S)
    task_draws = rng.integers(0, len(tasks), size=(resamples, len(tasks)))  # (R, T)
    # Mean over the drawn tasks within every seed, (S, R); then over the drawn seeds, (R,).
    by_seed = np.stack([diff[s][task_draws].mean(axis=1) for s in range(len(seeds))])
    replicates = np.take_along_axis(by_seed.T, seed_draws, axis=1).mean(axis=1)
    tail = (1.0 - level) / 2
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return PairedDifference(
        mean_a=float(grid_a.mean()), mean_b=float(grid_b.mean()), difference=float(diff.mean()),
        low=float(low), high=float(high), level=level, seeds=tuple(seeds), tasks=len(tasks),
        per_seed=tuple(float(x) for x in diff.mean(axis=1)),
    )


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a success rate (95% with the default z).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n
    successes: 0 of 32 gives [0, 0.107], so "0%" on a small sample reads as what it is.
    """
    if not 0 <= successes <= trials or trials < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * (p * (1 - p) / trials + z * z / (4 * trials * trials)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)
