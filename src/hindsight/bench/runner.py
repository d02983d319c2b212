"""Running a bench: its cells in dependency order, up to `jobs` at once, each on its own core.

A cell whose `cell.json` says it finished is skipped. Any other cell runs its steps, each of
which continues what an interrupted run of it left (a training run from its latest checkpoint,
an evaluation from its last finished task), so Ctrl-C or a crash costs at most the running
cells' work since their last checkpoint. A failing step fails its cell: the record keeps the
command, its exit code and the tail of the log, and the bench goes on with every cell that does
not need the failed one. One line is printed when a cell starts or ends, with the elapsed time
and an ETA from the cells' time budgets.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Protocol, Sequence

from hindsight.bench.cells import BLOCKED, DONE, FAILED, Cell, CellRecord, Invocation, ReadoutError
from hindsight.bench.plan import Plan

#: Exit codes of a command stopped by Ctrl-C: `hindsight` returns 130, a process killed by SIGINT -2.
INTERRUPTED = (130, -signal.SIGINT)
#: Log lines kept in a failed cell's record.
TAIL_LINES = 30
#: Seconds the running commands get at each stage of stopping after an interrupt (see `stop`).
STOP_GRACE_S = 10


class BenchError(ValueError):
    """The bench cannot start (its output folder belongs to another bench)."""


class Executor(Protocol):
    """Runs one `hindsight` invocation, appending its output to `log`; returns its exit code."""

    def run(self, invocation: Invocation, log: Path, core: int | None) -> int: ...

    def stop(self) -> None:
        """Stop every invocation still running (after an interrupt)."""


class SubprocessExecutor:
    """`python -m hindsight ARGS` in a child process. With a core, the child is pinned to it
    (`taskset`) and uses one thread, as benchmarks/lib.sh runs its jobs side by side."""

    def __init__(self) -> None:
        self._children: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def run(self, invocation: Invocation, log: Path, core: int | None) -> int:
        argv = [sys.executable, "-m", "hindsight", *invocation.args]
        env = dict(os.environ)
        if core is not None:
            env.update(HINDSIGHT_THREADS="1", OMP_NUM_THREADS="1")
            if shutil.which("taskset"):
                argv = ["taskset", "-c", str(core), *argv]
        target = invocation.stdout.with_name(invocation.stdout.name + ".tmp") if invocation.stdout else None
        with open(log, "a", encoding="utf-8") as err, \
                (open(target, "w", encoding="utf-8") if target else contextlib.nullcontext(err)) as out:
            err.write(f"\n$ {invocation.line()}\n")
            err.flush()
            child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
            with self._lock:
                self._children.add(child)
            try:
                code = child.wait()
            finally:
                with self._lock:
                    self._children.discard(child)
        if target is not None:
            if code == 0:
                target.replace(invocation.stdout)  # only a complete output counts as done
            else:
                target.unlink(missing_ok=True)
        return code

    def stop(self) -> None:
        with self._lock:
            children = list(self._children)
        # Ctrl-C in a terminal reaches the children too: first let them finish their own clean-up
        # (an evaluation writes its summary, marked interrupted), then interrupt those still running
        # (the signal went to the bench alone), and kill what outlives the grace period.
        for signal_to_send in (None, signal.SIGINT, signal.SIGKILL):
            deadline = time.monotonic() + STOP_GRACE_S
            for child in children:
                if signal_to_send is not None and child.poll() is None:
                    child.send_signal(signal_to_send)
            for child in children:
                try:
                    child.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if all(child.poll() is not None for child in children):
                return


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def run_cell(cell: Cell, executor: Executor, core: int | None, stopping: threading.Event) -> CellRecord | None:
    """Run what is left of a cell's steps, read its numbers and write its record; None when the bench or
    one of the cell's commands was interrupted (the cell is left unrecorded, for the next bench to continue)."""
    started = time.monotonic()
    cell.dir.mkdir(parents=True, exist_ok=True)
    executed: list[str] = []

    def record(status: str, values: dict[str, float] | None = None, error: str = "") -> CellRecord:
        result = CellRecord(cell.name, status, values or {}, cell.commands(), tuple(executed),
                            round(time.monotonic() - started, 1), cell.budget_s, error, _now())
        result.write(cell.record_path)
        return result

    for step in cell.steps:
        invocation = step.next()
        if invocation is None:
            continue
        executed.append(invocation.line())
        code = executor.run(invocation, cell.log_path, core)
        if stopping.is_set() or code in INTERRUPTED:
            return None
        if code != 0:
            return record(FAILED, error=f"{invocation.line()}\nexited with code {code}; the end of "
                                        f"{cell.log_path}:\n{log_tail(cell.log_path)}")
    try:
        return record(DONE, cell.read())
    except ReadoutError as exc:
        return record(FAILED, error=f"its commands finished, but its numbers could not be read: {exc}")


def read_records(plan: Plan) -> dict[str, CellRecord]:
    """The records of the plan's cells that have one."""
    found = {cell.name: CellRecord.read(cell.record_path) for cell in plan.cells}
    return {name: record for name, record in found.items() if record is not None}


def check_settings(plan: Plan) -> None:
    """Tie the output folder to one bench: finished cells of another scale or target must not be
    mistaken for this one's. The first bench in a folder writes bench.json; later ones compare."""
    settings = {"scale": plan.scale.name, "model": plan.target.model, "env": plan.target.env}
    path = plan.out / "bench.json"
    if path.is_file():
        try:
            earlier = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            earlier = None
        if earlier != settings:
            raise BenchError(f"{plan.out} holds a bench of {earlier} and this one is {settings}; "
                             "choose another --out")
        return
    plan.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings) + "\n", encoding="utf-8")


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


@dataclass
class Outcome:
    """What one bench did: the cells it finished or failed now, those finished before, and those
    blocked (a cell they need failed) or unable to run for this model and environment."""

    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not (self.failed or self.blocked or self.interrupted)


def _ranks(plan: Plan) -> dict[str, int]:
    """Each cell's budget plus the longest chain of budgets that waits for it: cells with the most
    waiting on them start first, so the two cores stay busy until the end."""
    users: dict[str, list[str]] = {cell.name: [] for cell in plan.cells}
    for cell in plan.cells:
        for need in cell.needs:
            users[need].append(cell.name)
    ranks: dict[str, int] = {}
    for cell in reversed(plan.cells):  # users come after what they need
        ranks[cell.name] = cell.budget_s + max((ranks[u] for u in users[cell.name]), default=0)
    return ranks


class _Progress:
    """The bench's progress lines and ETA: budgets of the cells not started, plus what is left of the
    budgets of the running ones, shared by the jobs."""

    def __init__(self, total: int, jobs: int, say: Callable[[str], None]):
        self.started = time.monotonic()
        self.total, self.jobs, self.say = total, jobs, say
        self.finished = 0

    def line(self, text: str, waiting: Sequence[Cell], running: Sequence[tuple[Cell, float]]) -> None:
        now = time.monotonic()
        left = sum(c.budget_s for c in waiting) + sum(max(0.0, c.budget_s - (now - t)) for c, t in running)
        self.say(f"{datetime.now():%H:%M:%S} {text} · {self.finished}/{self.total} cells · elapsed "
                 f"{duration(now - self.started)} · ETA {duration(left / self.jobs)}")


def run_bench(plan: Plan, selected: Sequence[str], executor: Executor, *, jobs: int = 1,
              say: Callable[[str], None] = print, after_cell: Callable[[], None] = lambda: None) -> Outcome:
    """Run the selected cells of the plan (their unfinished needs must be selected too).

    `after_cell` runs after each cell ends (the CLI rewrites the report there). A KeyboardInterrupt
    stops the running commands, leaves their cells unrecorded and is raised again.
    """
    outcome = Outcome()
    # Only finished cells count from earlier benches: failed and blocked ones are tried again.
    status = {name: DONE for name, record in read_records(plan).items() if record.status == DONE}
    ranks = _ranks(plan)
    pending: list[Cell] = []
    for cell in plan.cells:
        if cell.name not in selected:
            continue
        if status.get(cell.name) == DONE:
            outcome.earlier.append(cell.name)
        elif cell.blocker:
            outcome.unavailable.append(cell.name)
            say(f"cannot run {cell.name}: {cell.blocker}")
        else:
            pending.append(cell)
    pending.sort(key=lambda c: -ranks[c.name])
    if outcome.earlier:
        say(f"finished before, skipped: {', '.join(outcome.earlier)}")
    cpus = os.cpu_count() or 1
    progress = _Progress(len(pending), jobs, say)
    stopping = threading.Event()
    running: dict[Future, tuple[Cell, int, float]] = {}
    free = list(range(jobs))

    def block(cell: Cell, need: str) -> None:
        what = {FAILED: "failed", BLOCKED: "was blocked"}.get(status.get(need, ""), "did not run")
        reason = f"needs {need}, which {what}"
        CellRecord(cell.name, BLOCKED, commands=cell.commands(), budget_s=cell.budget_s, error=reason,
                   finished=_now()).write(cell.record_path)
        status[cell.name] = BLOCKED
        outcome.blocked.append(cell.name)
        pending.remove(cell)
        progress.finished += 1
        progress.line(f"blocked {cell.name}: {reason}", pending, [(c, t) for c, _, t in running.values()])

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while pending or running:
                for cell in list(pending):
                    failed = next((n for n in cell.needs if status.get(n) in (FAILED, BLOCKED)), None)
                    if failed is not None:
                        block(cell, failed)
                    elif free and all(status.get(n) == DONE for n in cell.needs):
                        slot = free.pop(0)
                        core = slot % cpus if jobs > 1 else None
                        pending.remove(cell)
                        running[pool.submit(run_cell, cell, executor, core, stopping)] = (cell, slot, time.monotonic())
                        where = f" on core {core}" if core is not None else ""
                        progress.line(f"start {cell.name}{where} (budget {duration(cell.budget_s)})", pending,
                                      [(c, t) for c, _, t in running.values()])
                if not running:
                    for cell in list(pending):  # waiting on a cell that is neither selected nor finished
                        block(cell, next(n for n in cell.needs if status.get(n) != DONE))
                    continue
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    cell, slot, _ = running.pop(future)
                    free.append(slot)
                    record = future.result()
                    if record is None:  # its command was interrupted, not by the bench: it stays unfinished
                        outcome.interrupted = True
                        progress.line(f"interrupted {cell.name}; the next bench continues it", pending,
                                      [(c, t) for c, _, t in running.values()])
                        continue
                    status[cell.name] = record.status
                    progress.finished += 1
                    if record.status == DONE:
                        outcome.done.append(cell.name)
                        text = f"done {cell.name} in {duration(record.wall_s)} (budget {duration(cell.budget_s)})"
                    else:
                        outcome.failed.append(cell.name)
                        text = f"FAILED {cell.name} after {duration(record.wall_s)}: {record.error.splitlines()[0]}"
                    progress.line(text, pending, [(c, t) for c, _, t in running.values()])
                    after_cell()
        except KeyboardInterrupt:
            stopping.set()
            executor.stop()
            outcome.interrupted = True
            raise
    return outcome
