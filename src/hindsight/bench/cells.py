"""What a bench is made of: cells, the `hindsight` commands they run, how their numbers are read,
and the tables those numbers fill.

A **cell** is one named unit of work with its own folder, DIR/cells/NAME/: a few steps, each
an existing `hindsight` command (train, eval, echo-compare, diagnose, report), then readouts
that take its numbers from the files those commands wrote. Each step knows how to continue
where an interrupted run of it stopped, so a cell started again repeats only unfinished work.
When every step has finished and its numbers are read, the cell writes `cell.json` (a
`CellRecord`), and a later bench skips it.

Our side of each paper table is an `OurTable`: rows of quantities over cells (a mean over
seeds, a sum of phases, a relative change), evaluated on whatever cells have finished.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from hindsight.bench.published import PublishedTable
from hindsight.logs import LogIssue, describe_issues, read_metrics
from hindsight.logs.reader import METRICS_FILE, is_training_run

#: Names of the JSON files the bench reads and writes.
SUMMARY = "summary.json"
CELL_RECORD = "cell.json"

#: Statuses of a cell record.
DONE, FAILED, BLOCKED = "done", "failed", "blocked"


@dataclass(frozen=True)
class Invocation:
    """One run of `hindsight ARGS`; `stdout`, when set, is the file its standard output is kept in."""

    args: tuple[str, ...]
    stdout: Path | None = None

    def line(self) -> str:
        """The command as a shell line."""
        text = shlex.join(("hindsight", *self.args))
        return f"{text} > {shlex.quote(str(self.stdout))}" if self.stdout else text


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Train:
    """`hindsight train METHOD ARGS --out RUN`; once RUN has a config it continues with `--resume RUN`
    from its latest checkpoint; finished once RUN/summary.json exists."""

    method: str
    run: Path
    args: tuple[str, ...]

    def command(self) -> Invocation:
        return Invocation(("train", self.method, *self.args, "--out", str(self.run)))

    def next(self) -> Invocation | None:
        """What to run now: nothing when finished, the resume of an interrupted run, or the command."""
        if (self.run / SUMMARY).is_file():
            return None
        if (self.run / "config.yaml").is_file():
            return Invocation(("train", self.method, "--resume", str(self.run)))
        return self.command()


@dataclass(frozen=True)
class Evaluate:
    """`hindsight eval ARGS --out RUN`; an interrupted one continues with `--resume RUN`, keeping the
    tasks it finished."""

    run: Path
    args: tuple[str, ...]

    def command(self) -> Invocation:
        return Invocation(("eval", *self.args, "--out", str(self.run), "--json"))

    def next(self) -> Invocation | None:
        summary = _read_json(self.run / SUMMARY)
        if isinstance(summary, dict) and not summary.get("interrupted"):
            return None
        if (self.run / "trajectories" / "eval.jsonl").is_file():
            return Invocation(("eval", "--resume", str(self.run), "--json"))
        return self.command()


@dataclass(frozen=True)
class CompareCritic:
    """`hindsight echo-compare RUN --step N ARGS --out OUT` (ECHO's Table 5 at one checkpoint). It cannot
    resume, so an unfinished one (no OUT/summary.json) runs again whole."""

    run: Path
    step: int
    out: Path
    args: tuple[str, ...]

    def command(self) -> Invocation:
        return Invocation(("echo-compare", str(self.run), "--step", str(self.step), *self.args, "--out", str(self.out),
                           "--json"))

    def next(self) -> Invocation | None:
        return None if (self.out / SUMMARY).is_file() else self.command()


@dataclass(frozen=True)
class Diagnose:
    """`hindsight diagnose RUN --json`, its JSON line kept in `output` (written only when it succeeds)."""

    run: Path
    output: Path

    def command(self) -> Invocation:
        return Invocation(("diagnose", str(self.run), "--json"), stdout=self.output)

    def next(self) -> Invocation | None:
        return None if self.output.is_file() else self.command()


@dataclass(frozen=True)
class Report:
    """`hindsight report RUN -o OUT`: a training run's own report (learning curves, live TIDE)."""

    run: Path
    out: Path
    title: str

    def command(self) -> Invocation:
        return Invocation(("report", str(self.run), "-o", str(self.out), "--title", self.title))

    def next(self) -> Invocation | None:
        return None if (self.out / "index.html").is_file() else self.command()


Step = Train | Evaluate | CompareCritic | Diagnose | Report


class ReadoutError(ValueError):
    """A finished cell's files do not hold the numbers its readouts expect."""


@dataclass(frozen=True)
class JsonFields:
    """Numeric fields of one JSON object file (summary.json of a run, echo-compare's numbers, the
    diagnosis), keyed `prefix + field`. A field that is null there (e.g. AUV of no trajectory) is left out."""

    path: Path
    fields: tuple[str, ...]
    prefix: str = ""

    def read(self) -> dict[str, float]:
        data = _read_json(self.path)
        if not isinstance(data, dict):
            raise ReadoutError(f"{self.path}: missing or not a JSON object")
        values = {}
        for name in self.fields:
            if name not in data:
                raise ReadoutError(f"{self.path}: no field {name!r}")
            if data[name] is not None:
                values[self.prefix + name] = float(data[name])
        return values


@dataclass(frozen=True)
class Metrics:
    """Metrics of a training run's metrics.jsonl, each reduced over the rows that have it: the mean
    (e.g. seconds per update of a phase) or the sum (e.g. preference pairs over rounds)."""

    run: Path
    names: tuple[str, ...]
    reduce: Literal["mean", "sum"] = "mean"

    def read(self) -> dict[str, float]:
        if not is_training_run(self.run):
            raise ReadoutError(f"{self.run}: no {METRICS_FILE}")
        broken: list[LogIssue] = []
        rows = read_metrics(self.run, broken.append)
        if broken:
            # The mean or sum of the rows that could be read would be a number of another run.
            raise ReadoutError(describe_issues(broken))
        values = {}
        for name in self.names:
            seen = [float(row[name]) for row in rows if row.get(name) is not None]
            if seen:
                values[name] = sum(seen) / len(seen) if self.reduce == "mean" else sum(seen)
        return values


Readout = JsonFields | Metrics


@dataclass(frozen=True)
class Cell:
    """One unit of the bench: its steps, where its numbers come from, its time budget (seconds on one
    core) and the cells whose output it uses. `blocker` says why it cannot run for the chosen model
    and environment (empty when it can)."""

    name: str
    paper: str
    title: str
    dir: Path
    steps: tuple[Step, ...]
    readouts: tuple[Readout, ...]
    budget_s: int
    needs: tuple[str, ...] = ()
    blocker: str = ""

    @property
    def record_path(self) -> Path:
        return self.dir / CELL_RECORD

    @property
    def log_path(self) -> Path:
        return self.dir / "log.txt"

    def commands(self) -> tuple[str, ...]:
        """Every step's command line, as the plan wrote it (resumes aside)."""
        return tuple(step.command().line() for step in self.steps)

    def outputs(self) -> tuple[tuple[str, Path], ...]:
        """What the report links to: each run directory, comparison and training report of the cell."""
        links: list[tuple[str, Path]] = []
        for step in self.steps:
            if isinstance(step, (Train, Evaluate)):
                links.append(("run", step.run))
            elif isinstance(step, CompareCritic):
                links.append((f"update {step.step}", step.out))
            elif isinstance(step, Report):
                links.append(("training report", step.out / "index.html"))
        return tuple(links)

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for readout in self.readouts:
            values.update(readout.read())
        return values


@dataclass(frozen=True)
class CellRecord:
    """What DIR/cells/NAME/cell.json holds once a cell has finished, failed or been blocked by a
    cell it needs: its numbers, the commands of its steps, what this bench actually ran (resumes
    included) and, for a failure, the error with the tail of its log."""

    name: str
    status: str
    values: dict[str, float] = field(default_factory=dict)
    commands: tuple[str, ...] = ()
    executed: tuple[str, ...] = ()
    wall_s: float = 0.0
    budget_s: int = 0
    error: str = ""
    finished: str = ""

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> CellRecord | None:
        data = _read_json(path)
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{**data, "commands": tuple(data.get("commands", ())),
                          "executed": tuple(data.get("executed", ()))})
        except TypeError:
            return None  # written by another version: the cell runs again


@dataclass(frozen=True)
class Estimate:
    """A table entry: its value, the per-seed values behind it, and how many of its cells have no number yet."""

    value: float
    samples: tuple[float, ...]
    missing: int


Values = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Measured:
    """One key of the cells' numbers, times `factor` (100 turns a rate into %), averaged over the cells
    (one per seed) that have it."""

    cells: tuple[str, ...]
    key: str
    factor: float = 100.0

    def estimate(self, values: Values) -> Estimate | None:
        got = tuple(values[c][self.key] * self.factor for c in self.cells if self.key in values.get(c, {}))
        if not got:
            return None
        return Estimate(sum(got) / len(got), got, len(self.cells) - len(got))

    def sources(self) -> tuple[str, ...]:
        return self.cells


@dataclass(frozen=True)
class Total:
    """The sum of several quantities (e.g. ECHO's stages of one update); known once each part is."""

    parts: tuple[Measured, ...]

    def estimate(self, values: Values) -> Estimate | None:
        got = [part.estimate(values) for part in self.parts]
        if any(g is None for g in got):
            return None
        return Estimate(sum(g.value for g in got), (), max(g.missing for g in got))

    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for part in self.parts for c in part.sources()))


@dataclass(frozen=True)
class PercentChange:
    """(new / base − 1) × 100: e.g. ECHO's time overhead over GRPO."""

    new: Total
    base: Total

    def estimate(self, values: Values) -> Estimate | None:
        new, base = self.new.estimate(values), self.base.estimate(values)
        if new is None or base is None or base.value == 0:
            return None
        return Estimate((new.value / base.value - 1.0) * 100.0, (), max(new.missing, base.missing))

    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.new.sources() + self.base.sources()))


Quantity = Measured | Total | PercentChange


@dataclass(frozen=True)
class OurRow:
    label: str
    values: tuple[Quantity | None, ...]


@dataclass(frozen=True)
class OurTable:
    """Our side of a paper table: rows of quantities over cells, in `unit`, shown with `digits` decimals."""

    columns: tuple[str, ...]
    rows: tuple[OurRow, ...]
    unit: str
    digits: int = 1

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row.values) != len(self.columns):
                raise ValueError(f"row {row.label!r} has {len(row.values)} values for {len(self.columns)} columns")

    def cells(self) -> tuple[str, ...]:
        """Every cell a value of the table reads, in the order they first appear."""
        return tuple(dict.fromkeys(c for row in self.rows for q in row.values if q is not None for c in q.sources()))


@dataclass(frozen=True)
class BenchTable:
    """A paper table beside ours, with a sentence or two on how our rows and columns stand for its own."""

    published: PublishedTable
    ours: OurTable
    mapping: str

    @property
    def anchor(self) -> str:
        words = f"{self.published.paper} {self.published.table}".lower()
        return "".join(ch if ch.isalnum() else "-" for ch in words).strip("-")

