"""The collapse alarm: is a policy-gradient run falling into RAGEN's "echo trap"?

RAGEN describes how multi-turn RL collapses: the returns inside each group stop differing
first, then the policy's entropy falls, then success. TIDE adds what such a policy does: it
walks in circles (loop ratio) or stops answering in the environment's format (invalid rate).
This module reads the rows of a run's `metrics.jsonl` (mappings with a `step`) and says, for
each update, whether the run is collapsing and which signal moved. It is a pure function of
the rows: the run lifecycle calls it after every update, and the report calls it on a
finished run's log.

    signal                  metric                          collapse means
    return spread           rollout/return_spread           falls to (1 − spread_fall) × baseline
    zero-variance groups    rollout/zero_variance_groups    rises by zero_variance_rise
    action entropy          tide/action_entropy             falls to (1 − entropy_fall) × baseline
    loop ratio              tide/loop_ratio                 rises by loop_rise
    invalid rate            tide/invalid_rate               rises by invalid_rise

Each signal's baseline is the median of its first `baseline_updates` values (for a run of N
updates, `HealthConfig.for_updates(N)` widens it to the first `baseline_fraction` × N). An
update *moves* a signal when its value is past the threshold; the signal *fires* when at
least `persistence` of its last `window` updates after the baseline moved it, so one noisy
update never fires it. The run is collapsing at an update when any signal fires there. A signal a
run does not log is skipped (supervised runs log none: their report is `known = False`).

The spread, the zero-variance share and the entropy also fall (or rise) in a run that is
learning: a policy that solves every task has equal returns in every group and is sure of
its moves. So these three count an update as moved only while the score has not risen
`score_rise` above its own baseline. The score is the greedy evaluation (`eval/success_rate`,
the latest at or before the update, against the one before any update) where the run
evaluates at step 0, else the training rollouts' `rollout/score_mean` (or
`rollout/success_rate`) against the median of its baseline updates.

How the defaults were chosen, and what they rest on. The only kept runs with these metrics
are the 16 GRPO runs of the Self-Guide comparison (`results/selfguide/*/metrics.jsonl.gz`:
FrozenLake 5×5, 8 updates of 4 tasks × G = 4). Their test logs say which learned to loop
(docs/results.md, "Issue 12 (Self-Guide)"): GRPO seeds 1 and 2 (bfloat16 and float32), the
token-mean follow-up at seeds 0 and 2, GRPO+SG and GRPO+SG+GR at seed 0 and the early-entry
schedule run; the other eight looped no more than their start. Every looping run's training
loop ratio peaked at update 5. The thresholds were fitted on these runs (a grid over the
baseline length, the window, the persistence and the rise): the only rules that flag the
three looping GRPO runs by update 5 and stay silent on all eight non-looping runs take the
first update as the baseline and need 3 of the last 4 updates at least 0.04–0.06 above it;
`loop_rise` = 0.05 is the middle. The margin is thin, and the fit is not a test: the
healthy runs of the learning benchmark (issue 45) are the held-out check. The first update
as the baseline is also the principled one for a short run: its rollouts are the only ones
sampled before any gradient step. The zero-variance share of these runs was already 0.25 to
1 at update 1 and never rose for 3 of 4 updates at any threshold, so its threshold comes from
simulated healthy runs instead (success rising, each group's returns tied with probability
0.4): 0.25, one group in four, fired on 8–68 of 200 runs; `zero_variance_rise` = 0.5 fired on
at most 14 of 200 runs of 4 groups per update and none of 8 groups, over 8 to 200 updates, with
the baseline widened to a tenth of the run (`baseline_fraction`, which leaves these 8-update
runs at one update). No kept run logs an invalid rate above 0.02, nor the return spread or the
action entropy: `invalid_rise`, `spread_fall` and `entropy_fall` are chosen, not fitted
(5 points of invalid steps; half of the baseline spread or entropy).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

RETURN_SPREAD = "rollout/return_spread"
ZERO_VARIANCE_GROUPS = "rollout/zero_variance_groups"
ACTION_ENTROPY = "tide/action_entropy"
LOOP_RATIO = "tide/loop_ratio"
INVALID_RATE = "tide/invalid_rate"
SCORE_METRICS = ("rollout/score_mean", "rollout/success_rate")
EVAL_SCORE = "eval/success_rate"
COLLAPSING = "health/collapsing"


@dataclass(frozen=True)
class Signal:
    """One collapse signal: the metric it reads and which way, and by how much, collapse moves it.

    A rising signal moves when it is `threshold` above its baseline; a falling one when it is
    below (1 − `threshold`) × its baseline. `gated` signals also move in a run that learns,
    so they count only while the score has not risen.
    """

    name: str
    label: str
    metric: str
    rises: bool
    threshold: float
    gated: bool

    def moved(self, value: float, baseline: float) -> bool:
        if self.rises:
            return value - baseline >= self.threshold
        return baseline > 0 and value <= (1.0 - self.threshold) * baseline


@dataclass(frozen=True)
class HealthConfig:
    """Thresholds of the collapse alarm (the module docstring says how they were chosen)."""

    baseline_updates: int = 1
    baseline_fraction: float = 0.1
    window: int = 4
    persistence: int = 3
    loop_rise: float = 0.05
    invalid_rise: float = 0.05
    zero_variance_rise: float = 0.5
    spread_fall: float = 0.5
    entropy_fall: float = 0.5
    score_rise: float = 0.10

    def __post_init__(self) -> None:
        if self.baseline_updates < 1:
            raise ValueError("baseline_updates must be >= 1")
        if not 1 <= self.persistence <= self.window:
            raise ValueError("persistence must be between 1 and window")
        if not (0 < self.spread_fall < 1 and 0 < self.entropy_fall < 1):
            raise ValueError("spread_fall and entropy_fall are fractions of the baseline, in (0, 1)")

    def for_updates(self, updates: int) -> HealthConfig:
        """This config for a run of `updates` updates: the baseline spans `baseline_fraction` of them (at least
        `baseline_updates`), so a long run's baseline is not one noisy update."""
        return replace(self, baseline_updates=max(self.baseline_updates, int(self.baseline_fraction * updates)))

    def signals(self) -> tuple[Signal, ...]:
        return (
            Signal("return_spread", "return spread", RETURN_SPREAD, False, self.spread_fall, True),
            Signal("zero_variance_groups", "zero-variance groups", ZERO_VARIANCE_GROUPS, True,
                   self.zero_variance_rise, True),
            Signal("action_entropy", "action entropy", ACTION_ENTROPY, False, self.entropy_fall, True),
            Signal("loop_ratio", "loop ratio", LOOP_RATIO, True, self.loop_rise, False),
            Signal("invalid_rate", "invalid rate", INVALID_RATE, True, self.invalid_rise, False),
        )


@dataclass(frozen=True)
class SignalMove:
    """A signal that fired: its baseline, its level (median of the window) and the first moved update in it."""

    name: str
    label: str
    baseline: float
    value: float
    since: int

    def describe(self) -> str:
        return f"{self.label} {self.baseline:.2f}→{self.value:.2f} since update {self.since}"


@dataclass(frozen=True)
class HealthReport:
    """The alarm's reading of one update: which logged signals it judged, and which of them fired."""

    update: int | None
    observed: tuple[str, ...]
    moved: tuple[SignalMove, ...]

    @property
    def known(self) -> bool:
        """Whether the run logs any signal (supervised runs log none)."""
        return bool(self.observed)

    @property
    def collapsing(self) -> bool:
        return bool(self.moved)

    def metrics(self) -> dict[str, float]:
        """The row's `health/…` entries: `health/collapsing` and one 0/1 flag per logged signal."""
        if not self.known:
            return {}
        fired = {move.name for move in self.moved}
        return {COLLAPSING: float(self.collapsing), **{f"health/{name}": float(name in fired)
                                                        for name in self.observed}}

    def describe(self) -> str:
        """"collapsing: loop ratio 0.00→0.43 since update 3", or "" when nothing fired."""
        return "collapsing: " + ", ".join(move.describe() for move in self.moved) if self.moved else ""


def health_history(rows: Sequence[Mapping[str, Any]], config: HealthConfig = HealthConfig()) -> tuple[
        HealthReport, ...]:
    """The alarm's reading after every update that logged a signal, in step order.

    Rows of one step are merged, the later value winning (the final evaluation's row shares
    the last update's step). Values that are not finite numbers are skipped.
    """
    by_step = _merged(rows)
    steps = sorted(step for step, row in by_step.items() if any(s.metric in row for s in config.signals()))
    score = _score_gate(by_step, config)
    fires = {signal.name: _fires(signal, _series(by_step, signal.metric), score, config)
             for signal in config.signals()}
    latest: dict[str, SignalMove | None] = {}  # each signal's state at its last update so far
    position = dict.fromkeys(fires, 0)
    reports = []
    for step in steps:
        for name, states in fires.items():
            while position[name] < len(states) and states[position[name]][0] <= step:
                latest[name] = states[position[name]][1]
                position[name] += 1
        observed = tuple(s.name for s in config.signals() if s.name in latest)
        moved = tuple(latest[name] for name in observed if latest[name] is not None)
        reports.append(HealthReport(step, observed, moved))
    return tuple(reports)


def assess(rows: Sequence[Mapping[str, Any]], config: HealthConfig = HealthConfig()) -> HealthReport:
    """The alarm's reading of the latest update; `known` is False when no row logs a signal."""
    history = health_history(rows, config)
    return history[-1] if history else HealthReport(None, (), ())


def first_alarm(rows: Sequence[Mapping[str, Any]], config: HealthConfig = HealthConfig()) -> HealthReport | None:
    """The reading of the first update at which the run was collapsing; None if it never was."""
    return next((report for report in health_history(rows, config) if report.collapsing), None)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _merged(rows: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    by_step: dict[int, dict[str, float]] = {}
    for row in rows:
        step = _number(row.get("step"))
        if step is None:
            continue
        merged = by_step.setdefault(int(step), {})
        for key, raw in row.items():
            value = _number(raw)
            if value is not None:
                merged[key] = value
    return by_step


def _series(by_step: Mapping[int, Mapping[str, float]], metric: str) -> list[tuple[int, float]]:
    # Step 0 is the run's state before any update (an evaluation): never a rollout signal.
    return [(step, row[metric]) for step, row in sorted(by_step.items()) if step > 0 and metric in row]


@dataclass(frozen=True)
class _ScoreGate:
    """Whether the run's score has risen by an update: the gated signals stay quiet while it has."""

    baseline: float | None
    values: tuple[tuple[int, float], ...]  # (step, score), in step order
    carried: bool  # an evaluation's score holds until the next evaluation; a rollout's only at its update

    def rose(self, step: int, by: float) -> bool:
        if self.baseline is None:
            return False
        if self.carried:
            known = [value for at, value in self.values if at <= step]
            return bool(known) and known[-1] - self.baseline >= by
        value = dict(self.values).get(step)
        return value is not None and value - self.baseline >= by


def _score_gate(by_step: Mapping[int, Mapping[str, float]], config: HealthConfig) -> _ScoreGate:
    """The score the gate reads: the greedy evaluations, where the run evaluates before its first
    update (`eval/success_rate` at step 0) and so has a baseline that no update moved; else the
    training rollouts' score, against the median of its first `baseline_updates` values.

    The evaluations are preferred because they score the same tasks every time. A rollout's
    success depends on which tasks it drew: with 8 tasks an update, the learning benchmark's
    lr 1e-3 run had 0.19–0.30 in its baseline updates and 0.62 once its entropy had collapsed,
    which the rollout gate read as learning (docs/results.md, issue 45).
    """
    evaluations = tuple((step, row[EVAL_SCORE]) for step, row in sorted(by_step.items()) if EVAL_SCORE in row)
    if evaluations and evaluations[0][0] == 0:
        return _ScoreGate(evaluations[0][1], evaluations, carried=True)
    for metric in SCORE_METRICS:
        series = _series(by_step, metric)
        if series:
            k = config.baseline_updates
            baseline = statistics.median(value for _, value in series[:k]) if len(series) >= k else None
            return _ScoreGate(baseline, tuple(series), carried=False)
    return _ScoreGate(None, (), carried=False)


def _fires(signal: Signal, series: list[tuple[int, float]], score: _ScoreGate,
           config: HealthConfig) -> list[tuple[int, SignalMove | None]]:
    """For each update of the signal's series, the move it fired there (None while it did not)."""
    k = config.baseline_updates
    if len(series) <= k:
        return [(step, None) for step, _ in series]
    baseline = statistics.median(value for _, value in series[:k])
    out: list[tuple[int, SignalMove | None]] = [(step, None) for step, _ in series[:k]]
    moved: list[bool] = []
    for index, (step, value) in enumerate(series[k:]):
        learning = signal.gated and score.rose(step, config.score_rise)
        moved.append(signal.moved(value, baseline) and not learning)
        first = max(0, index + 1 - config.window)
        recent = moved[first:]
        if sum(recent) < config.persistence:
            out.append((step, None))
            continue
        window = series[k + first : k + index + 1]
        since = next(s for (s, _), m in zip(window, recent) if m)
        out.append((step, SignalMove(signal.name, signal.label, baseline,
                                     statistics.median(v for _, v in window), since)))
    return out


__all__ = [
    "ACTION_ENTROPY", "COLLAPSING", "INVALID_RATE", "LOOP_RATIO", "RETURN_SPREAD", "ZERO_VARIANCE_GROUPS",
    "HealthConfig", "HealthReport", "Signal", "SignalMove", "assess", "first_alarm", "health_history",
]
