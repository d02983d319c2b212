"""Memory Index and memory-window sweeps (TIDE, section 3.3).

Runs of the same model on the same environment that differ only in how much history the
prompt keeps form a *memory group*. Its points are (window, AUV) with the window
ordered none (0 turns of history) < 1 < 2 < ... < full, and

    MI = AUV(full history) - AUV(no history)

when both ends are present. A positive MI means the history helped, a negative one that
it hurt. Runs are grouped by (environment, model, environment settings); the history
mode comes from each run's ``memory`` setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from hindsight.diagnostics.summary import RunDiagnosis


def window_size(memory: str) -> float | None:
    """Turns of history a mode keeps: 'none' -> 0, '4' -> 4, 'full' -> inf; None if unknown."""
    if memory == "none":
        return 0.0
    if memory == "full":
        return math.inf
    if memory.isdigit():
        return float(int(memory))
    return None


def memory_index(auv_full: float, auv_none: float) -> float:
    """MI = AUV(full) - AUV(none)."""
    return auv_full - auv_none


@dataclass(frozen=True)
class MemoryPoint:
    memory: str
    window: float
    auv: float
    label: str


@dataclass(frozen=True)
class MemoryGroup:
    """Runs of one (env, model, settings) at different history windows, ordered by window."""

    env: str
    model: str
    points: tuple[MemoryPoint, ...]

    @property
    def memory_index(self) -> float | None:
        by_memory = {p.memory: p.auv for p in self.points}
        if "full" in by_memory and "none" in by_memory:
            return memory_index(by_memory["full"], by_memory["none"])
        return None


def memory_groups(runs: Iterable[RunDiagnosis], settings: dict[str, str] | None = None) -> list[MemoryGroup]:
    """Groups of at least two runs with the same env/model/settings and different windows.

    `settings` maps a run's label to a text form of its environment settings; runs whose
    settings differ are never grouped. When two runs share a window the first one wins.
    """
    settings = settings or {}
    buckets: dict[tuple[str, str, str], dict[str, RunDiagnosis]] = {}
    for run in runs:
        if window_size(run.memory) is None:
            continue
        key = (run.env, run.model, settings.get(run.label, ""))
        buckets.setdefault(key, {}).setdefault(run.memory, run)
    groups = []
    for (env, model, _), by_memory in buckets.items():
        if len(by_memory) < 2:
            continue
        points = sorted(
            (MemoryPoint(m, window_size(m), r.auv, r.label) for m, r in by_memory.items()),  # type: ignore[arg-type]
            key=lambda p: p.window,
        )
        groups.append(MemoryGroup(env, model, tuple(points)))
    return groups


def memory_index_by_label(groups: Iterable[MemoryGroup]) -> dict[str, float]:
    """The MI of each run that belongs to a group with both a full and a none run."""
    result: dict[str, float] = {}
    for group in groups:
        mi = group.memory_index
        if mi is None:
            continue
        for point in group.points:
            result[point.label] = mi
    return result
