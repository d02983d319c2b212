"""TIDE numbers of one training update's own rollouts: the live `tide/…` metrics.

Every RL loop (GRPO with or without Self-Guide's switches, ECHO, CSO's failure rollouts)
adds these entries to its metrics row, computed from the trajectories the update logged:

    tide/auv           AUV of the update's success-by-turn curve P_t (`curves.auv`)
    tide/loop_ratio    loop steps / all steps, pooled (`loops`, the official finder, exact states)
    tide/invalid_rate  invalid steps / all steps, pooled
    tide/action_entropy  mean action-token entropy (nats) over the steps whose backend reported it
                       (the collapse alarm, `health`, watches it fall)

The horizon t_max follows the offline diagnosis (`summary.choose_t_max`): TIDE's value for
the environment, else the episodes' `max_steps`, else the longest episode. So running
`hindsight diagnose` on one update's records of `trajectories/train.jsonl` gives the same
numbers, and the report can recompute the curves of runs logged before these metrics
existed from that file alone.

The work is split in two so both uses share it: `tally` reduces one trajectory to the few
counts the numbers need, and `live_tide_from_tallies` pools tallies. A report reading a
long log keeps tallies, never whole trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from hindsight.diagnostics.curves import auv, success_curve
from hindsight.diagnostics.hooks import hooks_for
from hindsight.diagnostics.loops import loop_mask
from hindsight.diagnostics.summary import choose_t_max
from hindsight.logs.importers import view_from_trajectory
from hindsight.types import Trajectory

AUV = "tide/auv"
LOOP_RATIO = "tide/loop_ratio"
INVALID_RATE = "tide/invalid_rate"
ACTION_ENTROPY = "tide/action_entropy"
LIVE_METRICS = (AUV, LOOP_RATIO, INVALID_RATE, ACTION_ENTROPY)


@dataclass(frozen=True)
class RolloutTally:
    """What the live numbers need of one episode."""

    env: str
    length: int
    success: bool
    loop_steps: int
    invalid_steps: int
    max_steps: int | None = None
    entropy_sum: float = 0.0
    entropy_steps: int = 0

    @property
    def success_turn(self) -> int | None:
        return self.length if self.success else None


@dataclass(frozen=True)
class LiveTide:
    """The TIDE numbers of one update's rollouts; the ratios are None when no step was taken."""

    auv: float
    loop_ratio: float | None
    invalid_rate: float | None
    t_max: int
    trajectories: int
    action_entropy: float | None = None

    def metrics(self) -> dict[str, float]:
        """The metrics-row entries (a ratio with no step behind it is left out, not logged as 0)."""
        row = {AUV: self.auv}
        if self.loop_ratio is not None:
            row[LOOP_RATIO] = self.loop_ratio
        if self.invalid_rate is not None:
            row[INVALID_RATE] = self.invalid_rate
        if self.action_entropy is not None:
            row[ACTION_ENTROPY] = self.action_entropy
        return row


def tally(trajectory: Trajectory) -> RolloutTally:
    """One episode's counts: its length, outcome, loop steps and invalid steps."""
    view = view_from_trajectory(trajectory)
    max_steps = trajectory.env_kwargs.get("max_steps")
    entropies = [e for e in view.entropies or () if e is not None]
    return RolloutTally(
        env=view.env, length=view.length, success=view.success, loop_steps=sum(loop_mask(view)),
        invalid_steps=view.valid.count(False), max_steps=max_steps if isinstance(max_steps, int) else None,
        entropy_sum=sum(entropies), entropy_steps=len(entropies),
    )


def live_tide_from_tallies(tallies: Sequence[RolloutTally], t_max: int | None = None) -> LiveTide | None:
    """Pool the tallies of one update; None when there are none."""
    if not tallies:
        return None
    first = tallies[0]
    horizon, _ = choose_t_max(t_max, hooks_for(first.env), first.max_steps, (t.length for t in tallies))
    steps = sum(t.length for t in tallies)
    entropy_steps = sum(t.entropy_steps for t in tallies)
    return LiveTide(
        auv=auv(success_curve((t.success_turn for t in tallies), horizon)),
        loop_ratio=sum(t.loop_steps for t in tallies) / steps if steps else None,
        invalid_rate=sum(t.invalid_steps for t in tallies) / steps if steps else None,
        t_max=horizon,
        trajectories=len(tallies),
        action_entropy=sum(t.entropy_sum for t in tallies) / entropy_steps if entropy_steps else None,
    )


def live_tide(trajectories: Iterable[Trajectory], t_max: int | None = None) -> LiveTide | None:
    """The TIDE numbers of an update's trajectories (None when it has none)."""
    return live_tide_from_tallies([tally(t) for t in trajectories], t_max)


def live_tide_metrics(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """The `tide/…` entries of an update's metrics row; empty when it rolled nothing out."""
    result = live_tide(trajectories)
    return result.metrics() if result is not None else {}


__all__ = [
    "ACTION_ENTROPY", "AUV", "INVALID_RATE", "LIVE_METRICS", "LOOP_RATIO", "LiveTide", "RolloutTally", "live_tide",
    "live_tide_from_tallies", "live_tide_metrics", "tally",
]
