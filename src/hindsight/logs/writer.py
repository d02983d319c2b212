"""Writing a run directory.

    run/
      config.yaml          resolved configuration of the run
      trajectories/*.jsonl one header line, then one trajectory per line
      metrics.jsonl        one row per update (training runs)
      summary.json         closing numbers of the run, and the machine they were written on
      checkpoints/         training state (training runs)
      report/              HTML report (written by `hindsight report`)

Every record is flushed as soon as it is written, so a crash loses at most the
trajectory in flight.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from hindsight.logs.machine import machine
from hindsight.logs.schema import METRICS_FILE, header_record, trajectory_to_record
from hindsight.types import Trajectory


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(_jsonable(record), ensure_ascii=False, allow_nan=False) + "\n"


def rewrite_jsonl(path: str | os.PathLike[str], records: list[Mapping[str, Any]]) -> None:
    """Replace a JSON Lines file with `records`, atomically (a crash leaves the old file whole)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(_line(record) for record in records), encoding="utf-8")
    tmp.replace(path)


class JsonlAppender:
    """Append-only JSON Lines file, flushed after every record."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    @property
    def is_empty(self) -> bool:
        return self._file.tell() == 0

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(_line(record))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrajectoryWriter(JsonlAppender):
    """A trajectory file: a header line, then one record per finished trajectory."""

    def __init__(self, path: str | os.PathLike[str], **header: Any):
        super().__init__(path)
        if self.is_empty:
            self.write(header_record(**header))

    def write_trajectory(self, trajectory: Trajectory) -> None:
        self.write(trajectory_to_record(trajectory))


class RunDir:
    """A run directory on disk."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def trajectories_dir(self) -> Path:
        return self.path / "trajectories"

    def write_config(self, config: Any) -> Path:
        import yaml

        target = self.path / "config.yaml"
        target.write_text(yaml.safe_dump(_jsonable(config), sort_keys=False), encoding="utf-8")
        return target

    def read_config(self) -> dict[str, Any]:
        import yaml

        target = self.path / "config.yaml"
        return yaml.safe_load(target.read_text(encoding="utf-8")) if target.exists() else {}

    def trajectory_writer(self, name: str, **header: Any) -> TrajectoryWriter:
        return TrajectoryWriter(self.trajectories_dir / f"{name}.jsonl", **header)

    def replace_trajectories(self, name: str, trajectories: Iterable[Trajectory], **header: Any) -> Path:
        """Write `trajectories` as the log `name`, in place of any earlier log of that name.

        A trajectory writer appends (a resumed rollout continues its log); a log that is
        rewritten whole (an evaluation run again, the attempts a run trained on) must start
        empty, or it would hold both versions.
        """
        path = self.trajectories_dir / f"{name}.jsonl"
        path.unlink(missing_ok=True)
        with TrajectoryWriter(path, **header) as writer:
            for trajectory in trajectories:
                writer.write_trajectory(trajectory)
        return path

    def metrics_writer(self) -> JsonlAppender:
        return JsonlAppender(self.path / METRICS_FILE)

    def write_summary(self, summary: Mapping[str, Any]) -> Path:
        """summary.json, atomically, with the machine it was written on (`machine`) unless given."""
        target = self.path / "summary.json"
        tmp = target.with_suffix(".json.tmp")
        record = {**summary, "machine": summary.get("machine", machine())}
        tmp.write_text(json.dumps(_jsonable(record), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, target)
        return target
