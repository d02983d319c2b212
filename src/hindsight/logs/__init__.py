"""Run directories and the trajectory log format."""

from hindsight.logs.reader import LogIssue, iter_json_lines, read_trajectories, trajectory_files
from hindsight.logs.schema import FORMAT, VERSION, SchemaError, trajectory_from_record, trajectory_to_record
from hindsight.logs.writer import JsonlAppender, RunDir, TrajectoryWriter

__all__ = [
    "FORMAT", "VERSION", "JsonlAppender", "LogIssue", "RunDir", "SchemaError", "TrajectoryWriter",
    "iter_json_lines", "read_trajectories", "trajectory_files", "trajectory_from_record", "trajectory_to_record",
]
