"""TIDE diagnostics: pure functions over trajectory logs.

Nothing here imports torch, transformers or numpy; diagnosing a log needs only the log.
Entry points: `discover_runs` + `diagnose_source` for logs on disk, `RunAccumulator` or
`diagnose_trajectory` for views in memory (`hindsight.logs.importers.view_from_trajectory`
turns a `Trajectory` into one), and `live_tide` for the `tide/…` metrics a training update
logs about its own rollouts.
"""

from hindsight.diagnostics.curves import (
    DEFAULT_T_MAX, SubsetAUV, auv, progress_curve, progress_milestones, subset_auv, success_curve, trajectory_auv,
)
from hindsight.diagnostics.equality import EQUALITIES, EmbeddingCosine, ExactState, NormalisedText, make_equality
from hindsight.diagnostics.hooks import EnvHooks, hooks_for, register_hooks
from hindsight.diagnostics.live import LiveTide, live_tide, live_tide_metrics
from hindsight.diagnostics.loops import (
    LOOP_VARIANTS, OFFICIAL, PAPER, LoopSummary, loop_mask, official_loop_mask, paper_loop_mask, summarise_loops,
)
from hindsight.diagnostics.memory import MemoryGroup, memory_groups, memory_index, memory_index_by_label
from hindsight.diagnostics.recall import RecallDistribution, quantile, recall_distances, recall_distribution
from hindsight.diagnostics.runs import DiagnosedRun, RunSource, diagnose_source, discover_runs
from hindsight.diagnostics.summary import (
    CategoryShare, DiagnoseOptions, LoopSplit, LoopSplitSums, ProgressSummary, RecallByOutcome, RunAccumulator,
    RunDiagnosis, TrajectoryDiagnosis, diagnose_trajectory,
)
from hindsight.diagnostics.taxonomy import TaxonomyThresholds, classify

__all__ = [
    "DEFAULT_T_MAX", "EQUALITIES", "LOOP_VARIANTS", "OFFICIAL", "PAPER",
    "CategoryShare", "DiagnoseOptions", "DiagnosedRun", "EmbeddingCosine", "EnvHooks", "ExactState", "LiveTide",
    "LoopSplit", "LoopSplitSums", "LoopSummary", "MemoryGroup", "NormalisedText", "ProgressSummary", "RecallByOutcome",
    "RecallDistribution", "RunAccumulator", "RunDiagnosis", "RunSource", "SubsetAUV", "TaxonomyThresholds",
    "TrajectoryDiagnosis",
    "auv", "classify", "diagnose_source", "diagnose_trajectory", "discover_runs", "hooks_for", "live_tide",
    "live_tide_metrics", "loop_mask",
    "make_equality", "memory_groups", "memory_index", "memory_index_by_label", "official_loop_mask",
    "paper_loop_mask", "progress_curve", "progress_milestones", "quantile", "recall_distances",
    "recall_distribution", "register_hooks", "subset_auv", "success_curve", "summarise_loops", "trajectory_auv",
]
