"""Instance files: a fixed set of task instances saved as JSON Lines.

An instance file freezes a benchmark: whoever loads it plays exactly the same tasks,
whatever generator version they run. The first line is a header,

    {"kind": "header", "format": "hindsight.instances", "version": 1,
     "env": "frozenlake", "kwargs": {"size": 4, ...}}

and every other line is one instance,

    {"kind": "instance", "seed": 7, "split": "test", "instance": {...}}

Seeds are unique within a file. `make(env_id, instances=PATH)` plays them; the header's
kwargs become the defaults of that call.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hindsight.envs.contract import SPLITS, Env, EnvError

FORMAT = "hindsight.instances"
VERSION = 1


@dataclass(frozen=True)
class InstanceRecord:
    """One stored task: the seed it was generated from, its split and its content."""

    seed: int
    split: str
    instance: dict[str, Any]


@dataclass(frozen=True)
class InstanceFile:
    """A parsed instance file."""

    path: str
    env_id: str
    kwargs: dict[str, Any]
    records: tuple[InstanceRecord, ...]
    _by_seed: dict[int, InstanceRecord] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_seed.update((record.seed, record) for record in self.records)

    def by_seed(self) -> dict[int, InstanceRecord]:
        return self._by_seed

    def seeds(self, split: str | None = None) -> list[int]:
        """The stored seeds in ascending order, optionally only those of one split."""
        return sorted(r.seed for r in self.records if split is None or r.split == split)


def export_instances(env: Env, split: str, n: int, path: str | os.PathLike[str], *, start: int = 0) -> Path:
    """Write the first `n` instances of `split` (seeds from `start`) to `path`.

    The header records the environment's id and generator kwargs, plus its `max_steps`,
    so that loading the file rebuilds the same environment. Returns the path written.
    """
    seeds = env.split_seeds(split, n, start=start)
    kwargs = {key: value for key, value in env.config.items() if key != "instances"}
    header = {"kind": "header", "format": FORMAT, "version": VERSION, "env": env.id, "kwargs": kwargs}
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(header, sort_keys=True)]
    for seed in seeds:
        record = {"kind": "instance", "seed": seed, "split": split, "instance": env.instance_for(seed)}
        lines.append(json.dumps(record, sort_keys=True))
    # Written whole and then moved into place, so a reader never sees half a file.
    partial = target.with_name(target.name + ".partial")
    partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.replace(target)
    return target


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """A UTF-8 file's text; a missing file, a directory or other bytes is an EnvError naming `what` and the path."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EnvError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise EnvError(f"{what} {path} is a directory") from None
    except UnicodeDecodeError:
        raise EnvError(f"{what} {path} is not UTF-8 text") from None


def read_instance_file(path: str | os.PathLike[str], env_id: str | None = None) -> InstanceFile:
    """Parse and validate an instance file; with `env_id`, also insist on that environment."""
    where = str(path)
    text = read_text_file(where, "instance file")
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise EnvError(f"instance file {where} is empty")
    header = json_object_line(where, header_at + 1, lines[header_at])
    if header.get("kind") != "header" or header.get("format") != FORMAT:
        raise EnvError(f"{where}:{header_at + 1}: not a Hindsight instance file (expected a {FORMAT!r} header)")
    if header.get("version") != VERSION:
        raise EnvError(f"{where}:{header_at + 1}: instance file version {header.get('version')!r} is not supported")
    file_env = header.get("env")
    kwargs = header.get("kwargs", {})
    if not isinstance(file_env, str) or not isinstance(kwargs, dict):
        raise EnvError(f"{where}:{header_at + 1}: the header needs a string 'env' and an object 'kwargs'")
    if env_id is not None and file_env != env_id:
        raise EnvError(f"{where}: the file holds {file_env!r} instances, not {env_id!r}")
    records: list[InstanceRecord] = []
    seen: dict[int, int] = {}
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        if not line.strip():
            continue
        record = json_object_line(where, number, line)
        seed, split, instance = record.get("seed"), record.get("split"), record.get("instance")
        if record.get("kind", "instance") != "instance":
            raise EnvError(f"{where}:{number}: expected an instance record, got kind {record.get('kind')!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise EnvError(f"{where}:{number}: 'seed' must be an integer")
        if split not in SPLITS:
            raise EnvError(f"{where}:{number}: 'split' must be one of {', '.join(SPLITS)}, got {split!r}")
        if not isinstance(instance, dict):
            raise EnvError(f"{where}:{number}: 'instance' must be a JSON object")
        if seed in seen:
            raise EnvError(f"{where}:{number}: seed {seed} already appears on line {seen[seed]}")
        seen[seed] = number
        records.append(InstanceRecord(seed=seed, split=split, instance=instance))
    return InstanceFile(path=where, env_id=file_env, kwargs=kwargs, records=tuple(records))


def load_instances(path: str | os.PathLike[str], env_id: str) -> dict[int, dict[str, Any]]:
    """The instances of a file, by seed, after checking it belongs to `env_id`."""
    loaded = read_instance_file(path, env_id=env_id)
    return {record.seed: record.instance for record in loaded.records}


def json_object_line(where: str, number: int, line: str) -> dict[str, Any]:
    """One line of a JSON Lines file as an object; anything else is an EnvError naming file and line."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EnvError(f"{where}:{number}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise EnvError(f"{where}:{number}: expected a JSON object")
    return value
