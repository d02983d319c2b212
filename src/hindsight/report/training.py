"""Training runs for the report: learning curves, seed groups and each method's own data.

A training run directory (`hindsight train …`) holds `config.yaml` and `metrics.jsonl`, one
row per update. `read_training_log` turns it into a `TrainingLog`: one curve per numeric
metric (x = the row's `step`), plus what `trajectories/train.jsonl` adds: ECHO's (s_o, s_r)
pairs, and for runs logged before the live `tide/…` metrics existed, those curves
recomputed from the same records (`hindsight.diagnostics.live`, the function the training
loops call), and the collapse alarm read over its rows (`hindsight.diagnostics.health`, the
function the run lifecycle calls after every update).

Runs whose configurations differ only in their seed (or in settings that do not change what
is learned, `NOT_SETTINGS`) form a `RunGroup`; `seed_band` gives its mean curve with the
min–max spread over its runs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from hindsight.diagnostics.health import HealthConfig, HealthReport, first_alarm
from hindsight.diagnostics.live import AUV, RolloutTally, live_tide_from_tallies, tally
from hindsight.diagnostics.runs import disambiguate, read_run_config
from hindsight.logs.importers import normalise_env_id
from hindsight.logs.reader import (
    METRICS_FILE, LogIssue, is_training_run, iter_metric_rows, metrics_path, read_trajectories,
)
#: Config keys that change how a run is executed or logged, not what it learns.
NOT_SETTINGS = frozenset({
    "seed", "concurrency", "keep_checkpoints", "checkpoint_every", "tensorboard", "wandb_project",
    "rollout_server", "rollout_server_args", "rollout_server_tolerance", "model_workers", "model_worker_gpus",
})
#: Overlay runs that share their whole configuration except the seed, or every run of a method on an env.
OVERLAY_MODES = ("config", "method")

Point = tuple[float, float]
IssueHandler = Callable[[LogIssue], None]


@dataclass(frozen=True)
class TrainingLog:
    """One training run as the report draws it."""

    path: Path
    label: str
    method: str
    env: str
    seed: int | None
    settings: tuple[tuple[str, str], ...]
    rows: int
    curves: Mapping[str, tuple[Point, ...]] = field(default_factory=dict)
    echo_scores: tuple[Point, ...] = ()
    tide_from_trajectories: bool = False
    issues: tuple[LogIssue, ...] = ()
    alarm: HealthReport | None = None  # the collapse alarm at the first update it fired; None if it never did

    def curve(self, metric: str) -> tuple[Point, ...]:
        return self.curves.get(metric, ())

    def has(self, metric: str) -> bool:
        return bool(self.curves.get(metric))

    @property
    def last_step(self) -> float | None:
        return max((x for points in self.curves.values() for x, _ in points), default=None)

    def final_success(self) -> tuple[str, float] | None:
        """The final evaluation's split and success rate (`final_SPLIT/success_rate`), if logged."""
        for metric, points in sorted(self.curves.items()):
            if metric.startswith("final_") and metric.endswith("/success_rate") and points:
                return metric[len("final_"):-len("/success_rate")], points[-1][1]
        return None


@dataclass(frozen=True)
class BandPoint:
    """A group's curve at one update: the mean over the runs that logged it, and their spread."""

    x: float
    mean: float
    low: float
    high: float
    runs: int


@dataclass(frozen=True)
class RunGroup:
    """Runs drawn as one curve: seeds of one configuration (or one method on one env)."""

    label: str
    runs: tuple[TrainingLog, ...]

    def has(self, metric: str) -> bool:
        return any(run.has(metric) for run in self.runs)

    def band(self, metric: str) -> tuple[BandPoint, ...]:
        return seed_band([run.curve(metric) for run in self.runs])

    def mean_total(self, metric: str) -> float | None:
        """The mean over the runs that logged `metric` of the sum of its values (e.g. pairs over all rounds)."""
        totals = [math.fsum(y for _, y in run.curve(metric)) for run in self.runs if run.has(metric)]
        return math.fsum(totals) / len(totals) if totals else None


@dataclass(frozen=True)
class Density:
    """Counts of (x, y) pairs on a bins × bins grid over [low, high]²; counts[i][j]: x bin i, y bin j."""

    low: float
    high: float
    counts: tuple[tuple[int, ...], ...]

    @property
    def bins(self) -> int:
        return len(self.counts)

    @property
    def total(self) -> int:
        return sum(map(sum, self.counts))

    def edges(self) -> tuple[float, ...]:
        step = (self.high - self.low) / self.bins
        return tuple(self.low + k * step for k in range(self.bins + 1))


def seed_band(curves: Iterable[Sequence[Point]]) -> tuple[BandPoint, ...]:
    """Mean, minimum and maximum at every x any curve has, over the curves that have it.

    A run that stopped early (or is still running) leaves the later points to the others;
    `runs` says how many curves each point stands for.
    """
    by_x: dict[float, list[float]] = {}
    for curve in curves:
        for x, y in curve:
            by_x.setdefault(x, []).append(y)
    return tuple(BandPoint(x, math.fsum(ys) / len(ys), min(ys), max(ys), len(ys)) for x, ys in sorted(by_x.items()))


def score_density(pairs: Iterable[Point], bins: int = 10) -> Density:
    """Bin (s_o, s_r) pairs on a square grid covering [0, 1] and any score outside it."""
    pairs = list(pairs)
    values = [v for pair in pairs for v in pair]
    low, high = min([0.0, *values]), max([1.0, *values])
    counts = [[0] * bins for _ in range(bins)]

    def index(value: float) -> int:
        # The small nudge keeps a value on an edge (0.3 with width 0.1) in the bin it opens.
        return min(int((value - low) * bins / (high - low) + 1e-9), bins - 1)

    for x, y in pairs:
        counts[index(x)][index(y)] += 1
    return Density(low, high, tuple(tuple(row) for row in counts))


def _number(value: Any) -> float | None:
    """A finite JSON number as float; None for anything else (bools, text, NaN, infinities)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def metric_curves(run: Path, on_issue: IssueHandler) -> tuple[dict[str, tuple[Point, ...]], int]:
    """Every numeric metric of `metrics.jsonl` as (step, value) points, and the number of rows read.

    Two rows of one step are merged, the later value winning: the final evaluation's row
    shares the last update's step, and a resumed run logs nothing twice.
    """
    points: dict[str, dict[float, float]] = {}
    rows = 0
    for line, row in iter_metric_rows(run, on_issue):
        step = _number(row.get("step"))
        if step is None:
            on_issue(LogIssue(str(metrics_path(run)), line, "row without a numeric step"))
            continue
        rows += 1
        for name, raw in row.items():
            value = _number(raw)
            if name not in ("step", "time") and value is not None:
                points.setdefault(name, {})[step] = value
    return {name: tuple(sorted(by_step.items())) for name, by_step in points.items()}, rows


def without_undefined_rates(curves: dict[str, tuple[Point, ...]]) -> dict[str, tuple[Point, ...]]:
    """The curves less the verification rates of CSO rounds that branched nothing.

    Runs logged before the rate was left out of such rounds hold 0.0 there (Step-DPO, no
    verification), which would draw as "no branch verified".
    """
    rate, branched = curves.get("cso/verification_rate"), dict(curves.get("cso/branched", ()))
    if not rate:
        return curves
    kept = tuple((x, y) for x, y in rate if branched.get(x) != 0.0)
    cleaned = {name: points for name, points in curves.items() if name != "cso/verification_rate"}
    return cleaned | ({"cso/verification_rate": kept} if kept else {})


def scan_train_log(path: Path, on_issue: IssueHandler, *, want_tide: bool) -> tuple[
        tuple[Point, ...], dict[str, tuple[Point, ...]]]:
    """ECHO's (s_o, s_r) pairs and, with `want_tide`, the `tide/…` curves of a run's training records."""
    echo: list[Point] = []
    tallies: dict[int, list[RolloutTally]] = {}
    for trajectory in read_trajectories(path, on_issue):
        scores = trajectory.meta.get("echo")
        if isinstance(scores, Mapping):
            s_o, s_r = _number(scores.get("s_o")), _number(scores.get("s_r"))
            if s_o is not None and s_r is not None:
                echo.append((s_o, s_r))
        update = trajectory.meta.get("update")
        if want_tide and isinstance(update, int) and not isinstance(update, bool):
            tallies.setdefault(update, []).append(tally(trajectory))
    curves: dict[str, list[Point]] = {}
    for update in sorted(tallies):
        result = live_tide_from_tallies(tallies[update])
        for name, value in (result.metrics() if result is not None else {}).items():
            curves.setdefault(name, []).append((float(update), value))
    return tuple(echo), {name: tuple(points) for name, points in curves.items()}


def method_name(config: Mapping[str, Any]) -> str:
    """What trained the run, with the switches that make it another method (GRPO+SG+GR, CSO's baselines)."""
    kind = str(config.get("kind") or "training")
    if kind == "grpo" and config.get("self_guide"):
        return "grpo+sg+gr" if config.get("guidance_reward") else "grpo+sg"
    if kind == "cso" and config.get("method") not in (None, "", "cso"):
        return str(config["method"])
    return kind


def read_training_log(path: str | os.PathLike[str], on_issue: IssueHandler = lambda issue: None) -> TrainingLog:
    """A training run directory as a `TrainingLog`; unreadable lines go to `on_issue` and are skipped."""
    folder = Path(path)
    issues: list[LogIssue] = []

    def note(issue: LogIssue) -> None:
        issues.append(issue)
        on_issue(issue)

    config = read_run_config(folder)
    curves, rows = metric_curves(folder, note)
    curves = without_undefined_rates(curves)
    train_log = folder / "trajectories" / "train.jsonl"
    echo: tuple[Point, ...] = ()
    recomputed = False
    if train_log.is_file():
        echo, tide = scan_train_log(train_log, note, want_tide=AUV not in curves)
        recomputed = bool(tide)
        curves.update(tide)
    seed = config.get("seed")
    updates = config.get("updates")
    health = HealthConfig().for_updates(updates if isinstance(updates, int) and not isinstance(updates, bool) else 0)
    return TrainingLog(
        path=folder, label=folder.name, method=method_name(config),
        env=normalise_env_id(str(config.get("env") or "")) or "unknown env",
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        settings=tuple(sorted((str(k), repr(v)) for k, v in config.items() if k not in NOT_SETTINGS)),
        rows=rows, curves=curves, echo_scores=echo, tide_from_trajectories=recomputed, issues=tuple(issues),
        alarm=first_alarm(curve_rows(curves), health),
    )


def curve_rows(curves: Mapping[str, Sequence[Point]]) -> list[dict[str, float]]:
    """The curves back as one row per step, as the collapse alarm reads them."""
    rows: dict[float, dict[str, float]] = {}
    for name, points in curves.items():
        for x, y in points:
            rows.setdefault(x, {"step": x})[name] = y
    return [rows[x] for x in sorted(rows)]


def discover_training_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The training run directories among the paths: those holding a metrics log, or their parent folders."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file() and path.name == METRICS_FILE:
            candidates = [path.parent]
        elif path.is_dir() and is_training_run(path):
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(child for child in path.iterdir() if is_training_run(child))
        else:
            candidates = []
        found += [c for c in candidates if c not in found]
    return found


def read_training_logs(paths: Iterable[str | os.PathLike[str]],
                       on_issue: IssueHandler = lambda issue: None) -> list[TrainingLog]:
    """Every training run the paths stand for, labelled by folder name (by path where names clash)."""
    logs = [read_training_log(path, on_issue) for path in discover_training_runs(paths)]
    disambiguate(logs)
    return logs


def _group_key(log: TrainingLog, overlay: str) -> tuple:
    if overlay == "method":
        return (log.method, log.env)
    return log.settings


def _differing_settings(runs: Sequence[TrainingLog], others: Sequence[TrainingLog]) -> str:
    """The settings that tell this group apart from others of the same method and env ("lr=0.001")."""
    mine = dict(runs[0].settings)
    keys: set[str] = set()
    for other in others:
        theirs = dict(other.settings)
        keys |= {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)}
    return ", ".join(f"{k}={mine.get(k, '–')}" for k in sorted(keys)[:3])


def group_runs(logs: Sequence[TrainingLog], overlay: str = "config") -> list[RunGroup]:
    """Runs overlaid as one curve each, in the order their first run was given.

    A group of one run carries the run's label. A group of several is named by method and
    environment, plus the settings that set it apart from another group of the same method
    and environment.
    """
    if overlay not in OVERLAY_MODES:
        raise ValueError(f"overlay must be one of {OVERLAY_MODES}")
    members: dict[tuple, list[TrainingLog]] = {}
    for log in logs:
        members.setdefault(_group_key(log, overlay), []).append(log)
    groups = []
    for runs in members.values():
        if len(runs) == 1:
            groups.append(RunGroup(runs[0].label, (runs[0],)))
            continue
        label = f"{runs[0].method} on {runs[0].env} ({len(runs)} runs)"
        rivals = [other[0] for other in members.values()
                  if other is not runs and (other[0].method, other[0].env) == (runs[0].method, runs[0].env)]
        if rivals:
            label += f" [{_differing_settings(runs, rivals)}]"
        groups.append(RunGroup(label, tuple(runs)))
    return groups


__all__ = [
    "METRICS_FILE", "NOT_SETTINGS", "OVERLAY_MODES", "BandPoint", "Density", "RunGroup", "TrainingLog",
    "curve_rows", "discover_training_runs", "group_runs", "method_name", "metric_curves", "read_training_log",
    "read_training_logs", "scan_train_log", "score_density", "seed_band",
]
