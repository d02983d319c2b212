"""Run directories and the trajectory log format."""

from hindsight.logs.importers import TrajectoryView, detect_format, import_trajectories, read_views
from hindsight.logs.outcomes import (
    Outcome, OutcomeError, RunInfo, outcomes_from_trajectories, read_outcomes, read_run, write_run,
)
from hindsight.logs.reader import (
    LogIssue, describe_issues, is_training_run, iter_json_lines, iter_metric_rows, read_metrics, read_trajectories,
    trajectory_files,
)
from hindsight.logs.schema import FORMAT, VERSION, SchemaError, trajectory_from_record, trajectory_to_record
from hindsight.logs.writer import JsonlAppender, RunDir, TrajectoryWriter

__all__ = [
    "FORMAT", "VERSION", "JsonlAppender", "LogIssue", "Outcome", "OutcomeError", "RunDir", "RunInfo", "SchemaError",
    "TrajectoryView", "TrajectoryWriter", "describe_issues", "detect_format", "import_trajectories", "is_training_run",
    "iter_json_lines", "iter_metric_rows",
    "outcomes_from_trajectories", "read_metrics", "read_outcomes", "read_run", "read_trajectories", "read_views",
    "trajectory_files", "trajectory_from_record", "trajectory_to_record", "write_run",
]
