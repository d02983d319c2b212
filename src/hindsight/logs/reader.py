"""Streaming readers for run directories and trajectory files.

Readers never load a whole file: they yield one record at a time. Lines that cannot be
parsed are reported through `on_issue` (file and line number) and skipped, so one
truncated line never hides the rest of a log.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from hindsight.logs.schema import FORMAT, METRICS_FILE, SchemaError, trajectory_from_record
from hindsight.types import Trajectory


@dataclass(frozen=True)
class LogIssue:
    """A line of a log file that was skipped, and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


IssueHandler = Callable[[LogIssue], None]


def describe_issues(issues: list[LogIssue]) -> str:
    """The first of some skipped lines, and how many more there are: where one line must stand for all."""
    return f"{issues[0]}" + (f" (and {len(issues) - 1} more)" if len(issues) > 1 else "")


def final_evaluation_log(split: str) -> str:
    """The name, under `trajectories/` and without its suffix, of a training run's final
    evaluation on `split` (what the run lifecycle writes)."""
    return f"eval-{split}-final"


def is_final_evaluation_log(path: Path) -> bool:
    """Whether `path` is a training run's final evaluation log (`final_evaluation_log`), of any split."""
    stem = path.name.split(".", 1)[0]
    return stem.startswith("eval-") and stem.endswith("-final")


def _ignore(issue: LogIssue) -> None:
    pass


def open_text(path: str | os.PathLike[str]) -> IO[str]:
    """Open a plain or gzip-compressed text file."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def trajectory_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trajectory files of a run directory, or `[path]` for a single file."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    folder = path / "trajectories" if (path / "trajectories").is_dir() else path
    # A training run's metrics log sits beside its trajectories; it is never one of them.
    return sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")) and p.name != METRICS_FILE)


def iter_json_lines(path: str | os.PathLike[str], on_issue: IssueHandler = _ignore) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every parseable non-blank line of a file."""
    with open_text(path) as handle:
        line_number = 0
        while True:
            try:
                line = handle.readline()
            except (EOFError, OSError) as exc:  # truncated gzip stream
                on_issue(LogIssue(str(path), line_number + 1, f"unreadable: {exc}"))
                return
            if not line:
                return
            line_number += 1
            if not line.strip():
                continue
            try:
                yield line_number, json.loads(line)
            except json.JSONDecodeError as exc:
                on_issue(LogIssue(str(path), line_number, f"invalid JSON: {json_fault(line, exc)}"))


def json_fault(line: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with one JSONL line, and where: "Expecting ',' delimiter at column 12".

    A line whose value is still open at its end (one cut short by a crash mid-write) says so:
    json would blame the newline ("Invalid control character") or point past the line.
    """
    if exc.pos >= len(line.rstrip("\r\n")):
        return "the line ends inside its JSON value (cut short?)"
    # json's messages end in " at" where it appends the position ("Invalid control character at").
    return f"{exc.msg.removesuffix(' at')} at column {exc.pos + 1}"


def is_training_run(folder: str | os.PathLike[str]) -> bool:
    """Whether `folder` is a training run's directory: one that holds a metrics log.

    An evaluation's folder holds trajectory logs only; a training run writes `metrics.jsonl`
    from its first update on, beside its trajectories.
    """
    return (Path(folder) / METRICS_FILE).is_file()


def metrics_path(run: str | os.PathLike[str]) -> Path:
    """The `metrics.jsonl` of a run directory (or the file itself)."""
    path = Path(run)
    return path / METRICS_FILE if path.is_dir() else path


def iter_metric_rows(run: str | os.PathLike[str], on_issue: IssueHandler = _ignore) -> Iterator[tuple[int, dict]]:
    """(line number, row) for each row of a training run's `metrics.jsonl`, in order.

    A broken line (a crash mid-write) is reported to `on_issue` and skipped, as is a line
    that is not a JSON object. The line numbers let a caller report rows it rejects itself.
    """
    path = metrics_path(run)
    if not path.exists():
        raise FileNotFoundError(f"no metrics log at {path}")
    for line_number, row in iter_json_lines(path, on_issue):
        if isinstance(row, dict):
            yield line_number, row
        else:
            on_issue(LogIssue(str(path), line_number, "not a JSON object"))


def read_metrics(run: str | os.PathLike[str], on_issue: IssueHandler = _ignore) -> list[dict[str, Any]]:
    """The rows of a training run's `metrics.jsonl` (a run directory or the file), in order (see `iter_metric_rows`)."""
    return [row for _, row in iter_metric_rows(run, on_issue)]


def read_trajectories(path: str | os.PathLike[str], on_issue: IssueHandler = _ignore) -> Iterator[Trajectory]:
    """Stream the trajectories of a run directory or a Hindsight trajectory file."""
    for file in trajectory_files(path):
        for line_number, record in iter_json_lines(file, on_issue):
            if not isinstance(record, dict):
                on_issue(LogIssue(str(file), line_number, "not a JSON object"))
                continue
            if record.get("kind") == "header":
                if record.get("format") != FORMAT:
                    on_issue(LogIssue(str(file), line_number, f"unknown log format {record.get('format')!r}"))
                continue
            try:
                yield trajectory_from_record(record)
            except SchemaError as exc:
                on_issue(LogIssue(str(file), line_number, str(exc)))
