"""Diagnosing a set of trajectories: per-trajectory results and the run summary.

`RunAccumulator` consumes `TrajectoryView`s one at a time (a log is never held in memory
whole) and produces a `RunDiagnosis` with every TIDE number of the run:

* SR, the P_t curve and AUV over the horizon t_max (`hindsight.diagnostics.curves`),
  and the same for the trajectories with a loop and those without one;
* the progress-rate curve and its area, when the log grades progress per step;
* the Loop Ratio, pooled and per-trajectory mean (`hindsight.diagnostics.loops`);
* the invalid-action rate = invalid steps / all steps, pooled;
* the mean action-token entropy at loop steps and at the other steps, over the steps
  that logged one, and apart from it the mean whole-response surprisal split the same
  way (see `TrajectoryView` for the difference);
* error-taxonomy shares among failed trajectories (`hindsight.diagnostics.taxonomy`), and
  what ended them (the environment, the step budget, or neither), where the log says;
* the memory recall distance where the environment supports it: its mean, and its
  distribution over successful and over failed trajectories
  (`hindsight.diagnostics.recall`).

t_max is chosen, in order: the caller's value, the TIDE default for the environment, the
run's step budget (``max_steps``), the longest trajectory. The choice is recorded in
`RunDiagnosis.t_max_source`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from hindsight.diagnostics.curves import (
    SubsetAUV, auv, progress_curve, progress_milestones, subset_auv, success_curve, trajectory_auv,
)
from hindsight.diagnostics.equality import ExactState, StateEquality
from hindsight.diagnostics.hooks import EnvHooks, hooks_for
from hindsight.diagnostics.loops import OFFICIAL, LoopSummary, loop_mask, summarise_loops
from hindsight.diagnostics.recall import RecallDistribution, recall_distances, recall_distribution
from hindsight.diagnostics.taxonomy import TaxonomyThresholds, applicable_categories, classify
from hindsight.logs.importers import ENDINGS, TrajectoryView


@dataclass(frozen=True)
class DiagnoseOptions:
    """How to diagnose: horizon override, loop finder, state equality, taxonomy thresholds."""

    t_max: int | None = None
    loop_variant: str = OFFICIAL
    equality: StateEquality = ExactState()
    thresholds: TaxonomyThresholds = TaxonomyThresholds()


@dataclass(frozen=True)
class LoopSplitSums:
    """Sum and count of a per-step quantity over loop steps and over the other steps."""

    loop_sum: float = 0.0
    loop_n: int = 0
    other_sum: float = 0.0
    other_n: int = 0

    @classmethod
    def of(cls, mask: Sequence[bool], values: Sequence[float | None] | None) -> LoopSplitSums:
        """Split `values[i]` by `mask[i]` (True = loop step); None and non-finite values are left out."""
        if values is None:
            return cls()
        loop_sum = other_sum = 0.0
        loop_n = other_n = 0
        for is_loop, value in zip(mask, values):
            if value is None or not math.isfinite(value):
                continue
            if is_loop:
                loop_sum += value
                loop_n += 1
            else:
                other_sum += value
                other_n += 1
        return cls(loop_sum, loop_n, other_sum, other_n)

    def __add__(self, other: LoopSplitSums) -> LoopSplitSums:
        return LoopSplitSums(self.loop_sum + other.loop_sum, self.loop_n + other.loop_n,
                             self.other_sum + other.other_sum, self.other_n + other.other_n)

    @property
    def loop_mean(self) -> float | None:
        return self.loop_sum / self.loop_n if self.loop_n else None

    @property
    def other_mean(self) -> float | None:
        return self.other_sum / self.other_n if self.other_n else None

    @property
    def steps(self) -> int:
        return self.loop_n + self.other_n


@dataclass(frozen=True)
class TrajectoryDiagnosis:
    """The per-trajectory results a run summary and a report are built from.

    `progress` is the trajectory's `progress_milestones`, or None when its log grades no
    progress.
    """

    id: str
    source: str
    length: int
    success: bool
    loop_steps: int
    invalid_steps: int
    errors: frozenset[str]
    entropy: LoopSplitSums = LoopSplitSums()
    surprisal: LoopSplitSums = LoopSplitSums()
    recall: tuple[int, ...] = ()
    progress: tuple[tuple[int, float], ...] | None = None
    graded: bool = False
    ending: str | None = None

    @property
    def success_turn(self) -> int | None:
        return self.length if self.success else None

    @property
    def loop_ratio(self) -> float:
        return self.loop_steps / self.length if self.length else 0.0


def diagnose_trajectory(
    view: TrajectoryView, hooks: EnvHooks, options: DiagnoseOptions = DiagnoseOptions()
) -> tuple[TrajectoryDiagnosis, list[bool]]:
    """One trajectory's results, and its loop mask (True at loop steps)."""
    mask = loop_mask(view, options.loop_variant, options.equality)
    states = view.states
    verdict = classify(states, view.actions, view.instruction, hooks, options.thresholds, view.final_state)
    recall: tuple[int, ...] = ()
    if not hooks.recall_skip_reason and hooks.visible_objects is not None:
        recall = tuple(recall_distances(view.observations, view.actions, view.instruction, hooks))
    diagnosis = TrajectoryDiagnosis(
        id=view.id,
        source=view.source,
        length=view.length,
        success=view.success,
        loop_steps=sum(mask),
        invalid_steps=view.valid.count(False),
        errors=verdict.errors,
        entropy=LoopSplitSums.of(mask, view.entropies),
        surprisal=LoopSplitSums.of(mask, view.surprisals),
        recall=recall,
        # A trajectory without steps made no progress; it does not lack a progress log.
        progress=progress_milestones(view.progress or ()) if view.progress is not None or not view.length else None,
        graded=view.progress is not None and any(p is not None and 0.0 < p < 1.0 for p in view.progress),
        ending=view.ending,
    )
    return diagnosis, mask


def choose_t_max(
    given: int | None, hooks: EnvHooks, max_steps: int | None, lengths: Iterable[int]
) -> tuple[int, str]:
    """The AUV horizon and where it came from (the order is the module docstring's).

    Shared by the offline diagnosis and the live `tide/…` training metrics, so that a
    training update's AUV and `hindsight diagnose` on the same trajectories agree.
    """
    if given is not None:
        return given, "given"
    if hooks.t_max is not None:
        return hooks.t_max, f"TIDE default for {hooks.env_id}"
    if max_steps:
        return int(max_steps), "the run's max_steps"
    longest = max(lengths, default=1)
    return max(longest, 1), "longest trajectory (no default for this environment)"


@dataclass(frozen=True)
class CategoryShare:
    """How many failed trajectories show one error category; share is None when not judged."""

    category: str
    applicable: bool
    count: int
    n_failed: int

    @property
    def share(self) -> float | None:
        if not self.applicable or self.n_failed == 0:
            return None
        return self.count / self.n_failed


@dataclass(frozen=True)
class LoopSplit:
    """SR, P_t and AUV of the trajectories that contain a loop and of those that do not.

    A trajectory "contains a loop" when the loop finder marks at least one of its steps,
    i.e. some cycle in it is repeated at once (TIDE's split of its GUI trajectories).
    """

    with_loops: SubsetAUV
    without_loops: SubsetAUV


@dataclass(frozen=True)
class ProgressSummary:
    """The progress-rate curve R_0 .. R_{t_max} and its area (`curves.progress_curve`).

    `graded` says whether any logged score lay strictly between 0 and 1; when it is
    False the scores are binary and the curve repeats the success curve.
    """

    p_curve: tuple[float, ...]
    auv: float
    graded: bool


@dataclass(frozen=True)
class RecallByOutcome:
    """Recall-distance distributions of the successful and of the failed trajectories."""

    success: RecallDistribution
    failure: RecallDistribution


@dataclass(frozen=True)
class RunDiagnosis:
    """Every TIDE number of one run (one environment of one log source).

    `entropy_*` are action-token entropies, `surprisal_*` whole-response surprisals;
    `progress` is None unless every trajectory of the run logged graded progress.
    """

    label: str
    path: str
    env: str
    model: str
    memory: str
    formats: tuple[str, ...]
    n_trajectories: int
    n_steps: int
    success_rate: float
    t_max: int
    t_max_source: str
    p_curve: tuple[float, ...]
    auv: float
    loops: LoopSummary
    invalid_rate: float | None
    taxonomy: tuple[CategoryShare, ...]
    entropy_loop: float | None
    entropy_other: float | None
    entropy_steps: int
    recall_distance: float | None
    recall_pairs: int
    recall_note: str
    loop_split: LoopSplit
    recall_by_outcome: RecallByOutcome
    surprisal_loop: float | None = None
    surprisal_other: float | None = None
    surprisal_steps: int = 0
    progress: ProgressSummary | None = None
    skipped_lines: int = 0
    #: How many failed trajectories each `ENDINGS` entry ended (failures whose log does not say are left out).
    failure_endings: tuple[tuple[str, int], ...] = ()
    trajectories: tuple[TrajectoryDiagnosis, ...] = field(default=(), repr=False)

    @property
    def loop_ratio(self) -> float | None:
        return self.loops.ratio

    @property
    def n_failed(self) -> int:
        return sum(1 for t in self.trajectories if not t.success)

    def failure_ending_shares(self) -> dict[str, float]:
        """Each ending's share of the failures whose log says how they ended (empty: none does)."""
        known = sum(n for _, n in self.failure_endings)
        return {ending: n / known for ending, n in self.failure_endings}

    def to_json(self, memory_index: float | None = None) -> dict[str, Any]:
        """The JSON object `hindsight diagnose --json` prints for this run."""
        return {
            "label": self.label,
            "path": self.path,
            "env": self.env,
            "model": self.model,
            "memory": self.memory,
            "formats": list(self.formats),
            "n_trajectories": self.n_trajectories,
            "n_steps": self.n_steps,
            "success_rate": self.success_rate,
            "auv": self.auv,
            "t_max": self.t_max,
            "t_max_source": self.t_max_source,
            "p_t": list(self.p_curve),
            "loop_ratio": self.loops.ratio,
            "loop_ratio_per_trajectory": self.loops.per_trajectory_mean,
            "loop_variant": self.loops.variant,
            "invalid_rate": self.invalid_rate,
            "taxonomy": {c.category: c.share for c in self.taxonomy},
            "n_failed": self.n_failed,
            "failure_endings": dict(self.failure_endings),
            "auv_with_loops": self.loop_split.with_loops.auv,
            "auv_without_loops": self.loop_split.without_loops.auv,
            "n_with_loops": self.loop_split.with_loops.n,
            "n_without_loops": self.loop_split.without_loops.n,
            "success_rate_with_loops": self.loop_split.with_loops.success_rate,
            "success_rate_without_loops": self.loop_split.without_loops.success_rate,
            "p_t_with_loops": list(self.loop_split.with_loops.p_curve),
            "p_t_without_loops": list(self.loop_split.without_loops.p_curve),
            "progress_auv": self.progress.auv if self.progress else None,
            "progress_p_t": list(self.progress.p_curve) if self.progress else None,
            "progress_graded": self.progress.graded if self.progress else None,
            "entropy_loop": self.entropy_loop,
            "entropy_non_loop": self.entropy_other,
            "entropy_steps": self.entropy_steps,
            "surprisal_loop": self.surprisal_loop,
            "surprisal_non_loop": self.surprisal_other,
            "surprisal_steps": self.surprisal_steps,
            "recall_distance": self.recall_distance,
            "recall_pairs": self.recall_pairs,
            "recall_note": self.recall_note,
            "recall_success": self.recall_by_outcome.success.to_json(),
            "recall_failure": self.recall_by_outcome.failure.to_json(),
            "memory_index": memory_index,
            "skipped_lines": self.skipped_lines,
        }


@dataclass(frozen=True)
class KeptTrajectory:
    """A trajectory kept whole for the report's viewer."""

    view: TrajectoryView
    mask: list[bool]
    diagnosis: TrajectoryDiagnosis


class RunAccumulator:
    """Streams views of one environment into a `RunDiagnosis`.

    With `keep` > 0 it also keeps up to that many whole trajectories for a viewer,
    preferring failed trajectories with loops, then successes, then other failures.
    """

    def __init__(self, env: str, options: DiagnoseOptions = DiagnoseOptions(), keep: int = 0):
        self.env = env
        self.hooks = hooks_for(env)
        self.options = options
        self.keep = keep
        self.results: list[TrajectoryDiagnosis] = []
        self.models: set[str] = set()
        self.memories: set[str] = set()
        self._kept: dict[str, list[KeptTrajectory]] = {"loop": [], "success": [], "other": []}

    def add(self, view: TrajectoryView) -> TrajectoryDiagnosis:
        diagnosis, mask = diagnose_trajectory(view, self.hooks, self.options)
        self.results.append(diagnosis)
        if view.model:
            self.models.add(view.model)
        if view.memory:
            self.memories.add(view.memory)
        if self.keep:
            bucket = "success" if view.success else ("loop" if diagnosis.loop_steps else "other")
            if len(self._kept[bucket]) < self.keep:
                self._kept[bucket].append(KeptTrajectory(view, mask, diagnosis))
        return diagnosis

    def kept(self) -> list[KeptTrajectory]:
        loops, wins, others = self._kept["loop"], self._kept["success"], self._kept["other"]
        parts = [loops[: self.keep // 2], wins[: self.keep // 4]]
        parts.append(others[: self.keep - len(parts[0]) - len(parts[1])])
        # Quotas left unused by a short pool go to the others, in preference order.
        for k, pool in enumerate((loops, wins, others)):
            room = self.keep - sum(map(len, parts))
            if room > 0:
                parts[k] = pool[: len(parts[k]) + room]
        return [kept for part in parts for kept in part]

    def _t_max(self, max_steps: int | None) -> tuple[int, str]:
        return choose_t_max(self.options.t_max, self.hooks, max_steps, (r.length for r in self.results))

    def finish(
        self,
        *,
        label: str,
        path: str,
        model: str = "",
        memory: str = "",
        formats: tuple[str, ...] = (),
        max_steps: int | None = None,
        skipped_lines: int = 0,
    ) -> RunDiagnosis:
        results = self.results
        if not results:
            raise ValueError(f"{label}: no trajectories to diagnose")
        t_max, t_max_source = self._t_max(max_steps)
        curve = success_curve((r.success_turn for r in results), t_max)
        n_steps = sum(r.length for r in results)
        failed = [r for r in results if not r.success]
        categories, missing = applicable_categories(self.hooks)
        taxonomy = tuple(
            CategoryShare(c, c not in missing, sum(1 for r in failed if c in r.errors), len(failed)) for c in categories
        )
        entropy = sum((r.entropy for r in results), LoopSplitSums())
        surprisal = sum((r.surprisal for r in results), LoopSplitSums())
        recall = [d for r in results for d in r.recall]
        recall_note = self.hooks.recall_skip_reason or (
            "" if recall else "no task object was acted on after being seen"
        )
        return RunDiagnosis(
            label=label,
            path=path,
            env=self.env,
            model=model or ", ".join(sorted(self.models)),
            memory=memory or ", ".join(sorted(self.memories)),
            formats=formats,
            n_trajectories=len(results),
            n_steps=n_steps,
            success_rate=sum(1 for r in results if r.success) / len(results),
            t_max=t_max,
            t_max_source=t_max_source,
            p_curve=curve,
            auv=auv(curve),
            loops=summarise_loops_from_counts(results, self.options.loop_variant),
            invalid_rate=sum(r.invalid_steps for r in results) / n_steps if n_steps else None,
            taxonomy=taxonomy,
            entropy_loop=entropy.loop_mean,
            entropy_other=entropy.other_mean,
            entropy_steps=entropy.steps,
            recall_distance=sum(recall) / len(recall) if recall else None,
            recall_pairs=len(recall),
            recall_note=recall_note,
            loop_split=LoopSplit(
                with_loops=subset_auv([r.success_turn for r in results if r.loop_steps], t_max),
                without_loops=subset_auv([r.success_turn for r in results if not r.loop_steps], t_max),
            ),
            recall_by_outcome=RecallByOutcome(
                success=recall_distribution(r.recall for r in results if r.success),
                failure=recall_distribution(r.recall for r in results if not r.success),
            ),
            surprisal_loop=surprisal.loop_mean,
            surprisal_other=surprisal.other_mean,
            surprisal_steps=surprisal.steps,
            progress=_progress_summary(results, t_max),
            skipped_lines=skipped_lines,
            failure_endings=tuple((e, n) for e in ENDINGS if (n := sum(r.ending == e for r in failed))),
            trajectories=tuple(results),
        )


def _progress_summary(results: list[TrajectoryDiagnosis], t_max: int) -> ProgressSummary | None:
    milestones = [r.progress for r in results]
    if any(m is None for m in milestones):
        return None
    curve = progress_curve(milestones, t_max)  # type: ignore[arg-type]  # no None left
    return ProgressSummary(p_curve=curve, auv=auv(curve), graded=any(r.graded for r in results))


def summarise_loops_from_counts(results: list[TrajectoryDiagnosis], variant: str) -> LoopSummary:
    """`summarise_loops` from stored per-trajectory counts instead of masks."""
    loop_steps = sum(r.loop_steps for r in results)
    total = sum(r.length for r in results)
    ratios = [r.loop_steps / r.length for r in results if r.length]
    return LoopSummary(loop_steps, total, sum(ratios) / len(ratios) if ratios else None, variant)


def trajectory_points(run: RunDiagnosis) -> list[tuple[float, float]]:
    """(loop ratio, single-trajectory AUV) per trajectory, for LR-vs-AUV scatter plots."""
    return [(r.loop_ratio, trajectory_auv(r.success_turn, run.t_max)) for r in run.trajectories]


__all__ = [
    "CategoryShare", "DiagnoseOptions", "KeptTrajectory", "LoopSplit", "LoopSplitSums", "ProgressSummary",
    "RecallByOutcome", "RunAccumulator", "RunDiagnosis", "TrajectoryDiagnosis",
    "choose_t_max", "diagnose_trajectory", "summarise_loops", "summarise_loops_from_counts", "trajectory_points",
]
