"""Finding runs on disk and diagnosing them.

A PATH given to `hindsight diagnose` / `hindsight report` is one of:

* a trajectory file (``.jsonl`` or ``.jsonl.gz``, any supported format);
* a run directory: a Hindsight run (``config.yaml`` + ``trajectories/``) or an official
  TIDE experiment folder (``config.yaml`` + result ``.jsonl`` files). A training run (one
  with ``metrics.jsonl``) stands for its final evaluation's logs once they exist;
* a folder of run directories (for example the output of ``hindsight sweep memory``),
  which stands for each run inside it.

What the run is (environment, model, history mode, step budget) is read from a
``config.yaml`` beside the logs when there is one: Hindsight keys ``env``, ``model``,
``memory``, ``env_kwargs.max_steps``; TIDE keys ``task``, ``agent_proxy.max_steps`` and
the agent's model name. Otherwise the records say it, and failing that the environment
is guessed from a path component that names a known environment (``res/frozen_lake/``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from hindsight.diagnostics.curves import DEFAULT_T_MAX
from hindsight.diagnostics.hooks import known_env_ids
from hindsight.diagnostics.summary import DiagnoseOptions, KeptTrajectory, RunAccumulator, RunDiagnosis
from hindsight.logs.importers import detect_format, normalise_env_id, read_views
from hindsight.logs.reader import (
    LogIssue, is_final_evaluation_log, is_training_run, iter_json_lines, trajectory_files,
)

#: A dataclass with a `label` and a `path` (a run source, a training log).
Labelled = TypeVar("Labelled")


@dataclass(frozen=True)
class RunSource:
    """One run to diagnose: where its logs are and what its configuration says."""

    path: Path
    label: str
    files: tuple[Path, ...]
    env: str = ""
    model: str = ""
    memory: str = ""
    max_steps: int | None = None
    env_kwargs: str = ""
    read: str = ""  # what was read, where it is not every log of `path`


@dataclass(frozen=True)
class DiagnosedRun:
    """The diagnoses of one source (one per environment found in it), plus what was kept."""

    source: RunSource
    runs: tuple[RunDiagnosis, ...] = ()
    kept: Mapping[str, tuple[KeptTrajectory, ...]] = field(default_factory=dict)
    issues: tuple[LogIssue, ...] = ()


def _is_log(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz"))


def _has_logs(folder: Path) -> bool:
    inner = folder / "trajectories"
    if inner.is_dir():
        return True
    return any(_is_log(p) for p in folder.iterdir())


def read_run_config(folder: Path) -> Mapping[str, Any]:
    """The run's `config.yaml` as a mapping; empty when it is missing or unreadable."""
    target = folder / "config.yaml"
    if not target.is_file():
        return {}
    import yaml  # only runs that have a config pay for the import

    try:
        loaded = yaml.safe_load(target.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def memory_label(value: Any) -> str:
    """A history mode as text: 'full', 'none', or a window size such as '4'."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "full" if value else "none"
    text = str(value).strip().lower()
    if text in ("full", "all", "inf"):
        return "full"
    if text in ("none", "no", "0", "off"):
        return "none"
    for prefix in ("window-", "window", "last-", "k="):
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            text = text[len(prefix):]
    return str(int(text)) if text.isdigit() else text


def _from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    env = config.get("env") or config.get("task") or ""
    model = config.get("model") or _get(config, "client_agent", "model_name") or ""
    if not model:
        model_path = _get(config, "vllm_agent", "model_path")
        model = str(model_path).rstrip("/").rsplit("/", 1)[-1] if model_path else ""
    max_steps = (
        _get(config, "env_kwargs", "max_steps") or config.get("max_steps") or _get(config, "agent_proxy", "max_steps")
    )
    env_kwargs = config.get("env_kwargs")
    return {
        "env": normalise_env_id(str(env)) if env else "",
        "model": str(model),
        "memory": memory_label(config.get("memory")),
        "max_steps": int(max_steps) if isinstance(max_steps, (int, float, str)) and str(max_steps).isdigit() else None,
        "env_kwargs": repr(sorted(env_kwargs.items())) if isinstance(env_kwargs, dict) else "",
    }


def env_from_path(path: Path) -> str:
    """The first path component (innermost first) naming a known environment, or ''."""
    known = set(known_env_ids()) | set(DEFAULT_T_MAX)
    for part in reversed(path.resolve().parts):
        stem = part.split(".", 1)[0]
        key = normalise_env_id(stem)
        if key in known:
            return key
        for env in known:
            if env in key:
                return env
    return ""


def discover_runs(paths: Iterable[str | os.PathLike[str]]) -> list[RunSource]:
    """The runs the given paths stand for. Raises FileNotFoundError for a missing path."""
    sources: list[RunSource] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such file or directory: {path}")
        if path.is_dir() and not _has_logs(path):
            children = sorted(p for p in path.iterdir() if p.is_dir() and _has_logs(p))
            if children:
                sources.extend(_source(child) for child in children)
                continue
        sources.append(_source(path))
    disambiguate(sources)
    return sources


def _source(path: Path) -> RunSource:
    if path.is_file():
        folder = path.parent.parent if path.parent.name == "trajectories" else path.parent
        files: tuple[Path, ...] = (path,)
        label = path.name
    else:
        folder = path
        files = tuple(trajectory_files(path))
        label = path.name
    read = ""
    training = is_training_run(folder)
    final = final_evaluation_files(files) if training and path.is_dir() else ()
    if final:
        files = final
        read = ", ".join(str(f) for f in final)
    info = _from_config(read_run_config(folder))
    env = info["env"] or env_from_path(path)
    model = info["model"]
    if model and training:
        # A training run's config names the base it trained; its episodes are the run's own
        # adapters' (`BASE+RUN`, the spec that loads its latest checkpoint), not the base's.
        model = f"{model}+{folder}"
    return RunSource(path=path, label=label, files=files, env=env, model=model, memory=info["memory"],
                     max_steps=info["max_steps"], env_kwargs=info["env_kwargs"], read=read)


def final_evaluation_files(files: Iterable[Path]) -> tuple[Path, ...]:
    """The final evaluation logs among a training run's `files` (`eval-SPLIT-final.jsonl`), or ()
    when it has none yet.

    A training run's other logs are its sampled training episodes and its validation
    evaluations of earlier policies: pooled with the final evaluation, they would describe no
    one policy. The report's training section draws them per update instead.
    """
    return tuple(f for f in files if is_final_evaluation_log(f))


def disambiguate(items: list[Labelled]) -> None:
    """Give every item whose label another one shares its full path as label (in place)."""
    seen: dict[str, int] = {}
    for s in items:
        seen[s.label] = seen.get(s.label, 0) + 1
    for k, s in enumerate(items):
        if seen[s.label] > 1:
            items[k] = replace(s, label=str(s.path))  # type: ignore[type-var]


def _file_format(file: Path) -> str | None:
    for _, record in iter_json_lines(file):
        return detect_format(record)
    return None


def diagnose_source(
    source: RunSource,
    options: DiagnoseOptions = DiagnoseOptions(),
    *,
    env: str = "",
    keep: int = 0,
    on_issue: Callable[[LogIssue], None] | None = None,
) -> DiagnosedRun:
    """Diagnose every trajectory of a source, one `RunDiagnosis` per environment in it.

    `env` overrides the environment for records that do not name one. Skipped lines are
    collected in `DiagnosedRun.issues` (and passed to `on_issue` as they happen).
    """
    issues: list[LogIssue] = []

    def record_issue(issue: LogIssue) -> None:
        issues.append(issue)
        if on_issue is not None:
            on_issue(issue)

    env_hint = env or source.env
    accumulators: dict[str, RunAccumulator] = {}
    formats: list[str] = []
    for file in source.files:
        fmt = _file_format(file)
        if fmt and fmt not in formats:
            formats.append(fmt)
        for view in read_views(file, record_issue, env_hint):
            key = view.env or env_hint or "unknown"
            acc = accumulators.get(key)
            if acc is None:
                acc = accumulators[key] = RunAccumulator(key, options, keep=keep)
            acc.add(view)
    runs = []
    kept: dict[str, tuple[KeptTrajectory, ...]] = {}
    for key, acc in accumulators.items():
        label = source.label if len(accumulators) == 1 else f"{source.label} [{key}]"
        runs.append(
            acc.finish(
                label=label,
                path=source.read or str(source.path),
                model=source.model,
                memory=source.memory,
                formats=tuple(formats),
                max_steps=source.max_steps,
                skipped_lines=len(issues),
            )
        )
        if keep:
            kept[label] = tuple(acc.kept())
    return DiagnosedRun(source, tuple(runs), kept, tuple(issues))
