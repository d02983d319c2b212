"""The run lifecycle, in one place, so that each training loop keeps only its algorithm.

    open      `TrainingRun(kind, ConfigClass, config, out, resume=…)`: the run directory and
              its config (written for a new run, read back when resuming); seeds set
    begin     `run.begin(model, optimizers, schedulers, schedule, logs=…)`: continue from the
              latest checkpoint when resuming (weights, optimizers, schedulers, RNGs, step,
              environment steps), dropping the metric rows, training-trajectory records and
              evaluations an interrupted process wrote after it, so the resumed run writes
              them once; open the metrics log and the named trajectory logs
    loop      `for step in run.steps(total, name)`: the progress bar; for a new run, first a
              step-0 row with an evaluation on the validation split (when the schedule says so)
    each step `run.end_step(step, row, info)`: an evaluation at the schedule's cadence, the
              collapse alarm (`health/…`, diagnostics/health.py) read over every row so far,
              the metrics row, a checkpoint at its cadence and after the last step, progress;
              with the schedule's `stop_on_collapse`, the loop ends after an update that fired
              the alarm (checkpoint saved)
    finish    `run.finish(**fields)`: the final evaluation, summary.json (with `stopped:
              collapse` when the alarm ended the run), every log closed

An evaluation cut short keeps its finished tasks: the resumed run evaluates only the others
(`evaluate_trainable`), since the weights it evaluates are the same. Evaluations of steps
after the checkpoint, and a final evaluation when steps were trained again, are removed.

With `rollout_server`, `begin` puts the server behind `model.sampler` (`ServedPolicy`), so
every rollout and evaluation of every method samples there, and each step tells it that
the weights changed: each role's adapter is synced and checked before it next generates.
`model_workers` does the same with model replicas in Ray actors (`ReplicaPolicy`). A row
carries the `sync/…` metrics of the syncs made during its step.

Under data parallelism every process runs the lifecycle; only the first one writes,
evaluates and saves.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

from hindsight.agent.evaluate import EvalSummary, evaluate_policy, keep_finished_tasks, summarize_evaluation
from hindsight.configs import ConfigError, from_mapping
from hindsight.diagnostics.health import HealthConfig, HealthReport, assess
from hindsight.logs import RunDir, read_trajectories
from hindsight.logs.machine import kernel_change, machine
from hindsight.logs.reader import METRICS_FILE, final_evaluation_log, iter_json_lines
from hindsight.logs.writer import rewrite_jsonl
from hindsight.methods.basics import EvalSettings, Schedule, TrainingBasics
from hindsight.methods.metrics import MetricsLog, eval_metrics
from hindsight.methods.progress import TrainingProgress
from hindsight.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint, seed_everything
from hindsight.train.distributed import Workers
from hindsight.train.model import TrainableModel
from hindsight.train.replicas import ReplicaPolicy
from hindsight.train.served import ServedPolicy
from hindsight.types import Trajectory

C = TypeVar("C", bound=TrainingBasics)

# (split, episodes, log name, metric prefix) -> (metric entries `prefix/…`, summary fields)
Evaluator = Callable[[str, int, str, str], tuple[dict[str, float], dict[str, Any]]]


class TrainingRun(Generic[C]):
    """One training run's directory, logs, evaluations and checkpoints (see the module docstring)."""

    def __init__(
        self, kind: str, config_cls: type[C], config: C | None, out: str | Path, *, resume: bool = False,
        workers: Workers | None = None,
    ):
        self.kind = kind
        self.workers = workers or Workers()
        self.main = self.workers.is_main
        self.dir = RunDir(out)
        if resume:
            config = from_mapping(config_cls, {k: v for k, v in self.dir.read_config().items() if k != "kind"})
        if config.rollout_server and self.workers.world > 1:
            raise ConfigError("rollout_server takes one trainer process; the server batches the rollouts of all "
                              "tasks itself")
        if config.model_workers and self.workers.world > 1:
            raise ConfigError("model_workers takes one trainer process; the replicas share the rollouts of all "
                              "tasks themselves")
        if not resume and self.main:
            self.dir.write_config({"kind": kind, **asdict(config)})
        self.config: C = config
        self.resuming = resume
        self.start = 0
        self.env_steps = 0
        seed_everything(config.seed)
        self._model: TrainableModel | None = None
        self._optimizers: Mapping[str, Any] = {}
        self._schedulers: Mapping[str, Any] = {}
        self._schedule = Schedule(checkpoint_every=1, keep_checkpoints=0)
        self._evaluate: Evaluator | None = None
        self._metrics: MetricsLog | None = None
        self._logs: dict[str, Any] = {}
        self._progress: TrainingProgress | None = None
        self._served: ServedPolicy | ReplicaPolicy | None = None  # what samples, when not the model in-process
        self._total = 0
        self._rows: list[dict[str, Any]] = []  # every row logged so far: what the collapse alarm reads
        self._health = HealthConfig()
        self.collapse: HealthReport | None = None  # the alarm that ended the run (stop_on_collapse)
        self._last_step = 0
        self._machine = machine()  # what each checkpoint records; it does not change within a process

    @property
    def path(self) -> Path:
        return self.dir.path

    def begin(
        self, model: TrainableModel, optimizers: Mapping[str, Any], schedulers: Mapping[str, Any],
        schedule: Schedule, *, logs: Iterable[str] = (), evaluate: Evaluator | None = None,
    ) -> None:
        """Attach what the run saves and how it evaluates; resume from the latest checkpoint.

        `logs` name the training-trajectory files (trajectories/NAME.jsonl) the loop writes
        with `write`; their records carry the step in `update`. `evaluate` defaults to the
        policy alone on the config's evaluation settings.
        """
        self._model, self._optimizers, self._schedulers, self._schedule = model, optimizers, schedulers, schedule
        self._evaluate = evaluate or policy_evaluator(model, self.config.eval_settings(), self.dir, self.config.seed)
        logs = tuple(logs)
        if self.resuming:
            checkpoints = list_checkpoints(self.path)
            state = load_checkpoint(checkpoints[-1], model, optimizers, schedulers) if checkpoints else {"step": -1}
            change = kernel_change(state.get("machine", {}), self._machine)
            if change and self.main:
                print(f"hindsight: note: {change}", file=sys.stderr, flush=True)
            if self.main:
                drop_records_after(self.path / METRICS_FILE, state["step"], "step")
                for name in logs:
                    drop_records_after(self.dir.trajectories_dir / f"{name}.jsonl", state["step"], "update")
                drop_evaluations_after(self.dir.trajectories_dir, max(state["step"], 0))
            self.start, self.env_steps = max(state["step"], 0), state.get("env_steps", 0)
            metrics = self.path / METRICS_FILE
            # Every process reads the rows (the stop decision must agree); a row past the checkpoint
            # another process has yet to drop does not count.
            self._rows = [row for _, row in (iter_json_lines(metrics) if metrics.exists() else ())
                          if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= self.start]
        self._last_step = self.start
        # One switch for every token computed once: the sampler's shared prefills and stored turns too.
        backend = getattr(model, "backend", None)
        if hasattr(backend, "share_prefill"):
            backend.share_prefill = self.config.shared_tokens
        if self.config.rollout_server:
            self._served = ServedPolicy.open(self.config.rollout_server, model, self.path,
                                             tolerance=self.config.rollout_server_tolerance,
                                             concurrency=self.config.concurrency,
                                             serve_args=shlex.split(self.config.rollout_server_args))
        elif self.config.model_workers:
            self._served = ReplicaPolicy.open(model, self.config.model, workers=self.config.model_workers,
                                              gpus=self.config.model_worker_gpus, dtype=self.config.dtype,
                                              tolerance=self.config.rollout_server_tolerance)
        if self._served is not None:
            self._served.updated(self.start)
            model.sampler = self._served.sampler
        self._metrics = MetricsLog(self.dir, self.config, enabled=self.main)
        if self.main:
            self._logs = {name: self.dir.trajectory_writer(name, env=self.config.env, split="train") for name in logs}

    def steps(
        self, total: int, description: str, first_row: Mapping[str, Any] | None = None,
        with_first_eval: Mapping[str, Any] | None = None,
    ) -> Iterator[int]:
        """The steps still to run, 1-based, under a progress bar.

        A new run first logs a step-0 row: `first_row` (e.g. the data's size) and, when the
        schedule evaluates during the run, an evaluation on the validation split with the
        entries of `with_first_eval`. Nothing is logged at step 0 when neither applies.
        """
        self._require_begun()
        self._total = total
        self._health = HealthConfig().for_updates(total)
        if self.start == 0 and self.main:
            row = dict(first_row or {})
            if self._schedule.eval_every:
                row.update(self._evaluate("validation", self._schedule.eval_episodes, "eval-validation-000000",
                                          "eval")[0])
                row.update(with_first_eval or {})
                row.update(self._sync_metrics())
            if row:
                self.log(0, row)
        with TrainingProgress(total, description, completed=self.start, enabled=self.main) as progress:
            self._progress = progress
            for step in range(self.start + 1, total + 1):
                yield step
                if self.collapse is not None:
                    break
        self._progress = None

    def phase(self, name: str) -> None:
        """Show what the current step is doing."""
        if self._progress is not None:
            self._progress.phase(name)

    def write(self, log: str, trajectories: Iterable[Trajectory]) -> None:
        """Append training trajectories to one of the logs named in `begin`."""
        if self.main:
            for trajectory in trajectories:
                self._logs[log].write_trajectory(trajectory)

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        self._require_begun()
        self._rows.append({"step": step, **row})
        self._metrics.log(step, row)

    def end_step(self, step: int, row: dict[str, Any], info: str = "") -> None:
        """Evaluate at the schedule's cadence (into `row`), read the collapse alarm, log the row, save at the
        checkpoint cadence (and when the alarm stops the run).

        The step has changed the weights: a rollout server syncs them before its next generation.
        Every process reads the alarm from the same gathered rollout metrics, so with data
        parallelism they all stop after the same update.
        """
        schedule = self._schedule
        if self._served is not None:
            self._served.updated(step)
        if self.main and schedule.eval_every and step % schedule.eval_every == 0:
            self.phase("eval")
            row.update(self._evaluate("validation", schedule.eval_episodes, f"eval-validation-{step:06d}", "eval")[0])
        row.update(self._sync_metrics())
        health = assess([*self._rows, {"step": step, **row}], self._health)
        row.update(health.metrics())
        if health.collapsing:
            info = " · ".join(part for part in (info, health.describe()) if part)
            if schedule.stop_on_collapse:
                self.collapse = health
                info += " · stopping (stop_on_collapse)"
        self.log(step, row)
        self._last_step = step
        if self.main and (step % schedule.checkpoint_every == 0 or step == self._total or self.collapse is not None):
            save_checkpoint(self.path, step, self._model, self._optimizers, self._schedulers,
                            {"env_steps": self.env_steps, "machine": asdict(self._machine)}, keep=schedule.keep_checkpoints)
        if self._progress is not None:
            self._progress.advance(info)

    def finish(self, final_row: Mapping[str, Any] | None = None, **fields: Any) -> Path:
        """The final evaluation (if scheduled) logged with `final_row`, summary.json
        {kind, **fields, **evaluation}, logs closed."""
        self._require_begun()
        for writer in self._logs.values():
            writer.close()
        if self.main:
            summary = {"kind": self.kind, **fields}
            if self.collapse is not None:
                summary.update(stopped="collapse", stopped_at=self._last_step, collapse=self.collapse.describe())
            split = self._schedule.final_split
            if split and self.start < self._total:
                # This process trained: a final evaluation left by an earlier one saw other weights.
                (self.dir.trajectories_dir / f"{final_evaluation_log(split)}.jsonl").unlink(missing_ok=True)
            if split:
                row, result = self._evaluate(split, self._schedule.final_episodes, final_evaluation_log(split),
                                             f"final_{split}")
                last = self._last_step if self.collapse is not None else self._total or self.start
                self.log(last, {**row, **(final_row or {}), **self._sync_metrics()})
                summary.update(result)
            self.dir.write_summary(summary)
        self._metrics.close()
        if self._served is not None:
            self._served.close()
        self.workers.close()
        return self.path

    def _sync_metrics(self) -> dict[str, float]:
        return self._served.take_metrics() if self._served is not None else {}

    def _require_begun(self) -> None:
        if self._metrics is None:
            raise RuntimeError("TrainingRun.begin() must come before the loop")


def policy_evaluator(model: TrainableModel, settings: EvalSettings, run: RunDir, seed: int) -> Evaluator:
    """The active role of `model` alone, on the first tasks of a split."""

    def evaluate(split: str, episodes: int, name: str, prefix: str) -> tuple[dict[str, float], dict[str, Any]]:
        summary = evaluate_trainable(model, settings, split, episodes, run, name, seed)
        return eval_metrics(prefix, summary), asdict(summary)

    return evaluate


def evaluate_trainable(
    model: TrainableModel, settings: EvalSettings, split: str, episodes: int, run: RunDir, name: str, seed: int,
) -> EvalSummary:
    """Evaluate the active role on the first `episodes` tasks of a split; log trajectories.

    A log `name` left by an interrupted process is continued: its finished tasks are kept
    and only the others run (TrainingRun removes the logs whose weights are gone). Progress
    (tasks done, how many of them were solved, their mean score) goes to stderr, a line per tenth in a log file.
    """
    from hindsight.envs import make

    seeds = make(settings.env, **settings.env_kwargs).split_seeds(split, episodes)
    rollout = replace(settings.rollout, seed=seed, split=split)
    path = run.trajectories_dir / f"{name}.jsonl"
    done = keep_finished_tasks(path) if path.exists() else []
    finished = {t.seed for t in done}
    started = time.perf_counter()

    def count(trajectory: Trajectory) -> None:
        # Counted over the finished tasks only, and said so: episodes run side by side, so the short
        # ones (often all failures, or all successes) finish first and an early rate misleads.
        done.append(trajectory)
        progress.advance(f"solved {sum(t.success for t in done)} of {len(done)} finished · "
                         f"mean score {sum(t.score for t in done) / len(done):.3f}")

    with (run.trajectory_writer(name, env=settings.env, split=split) as writer,
          TrainingProgress(len(seeds), f"{split} evaluation", completed=len(done),
                           plain_every=max(1, len(seeds) // 10)) as progress):
        evaluate_policy(model.sampler, lambda: make(settings.env, **settings.env_kwargs),
                        [s for s in seeds if s not in finished], rollout, writer=writer, on_trajectory=count)
    return summarize_evaluation(read_trajectories(path), time.perf_counter() - started)


def drop_evaluations_after(trajectories_dir: Path, last_step: int) -> None:
    """Remove the evaluation logs of steps after `last_step` (eval-SPLIT-NNNNNN[-…].jsonl)."""
    for path in trajectories_dir.glob("eval-*.jsonl"):
        match = re.match(r"eval-[a-z]+-(\d{6})", path.name)
        if match and int(match.group(1)) > last_step:
            path.unlink()


def drop_records_after(path: Path, last_step: int, step_key: str) -> None:
    """Remove JSONL records whose `step_key` is beyond `last_step`.

    A resumed run starts from its last checkpoint; rows and trajectories written after
    that checkpoint by the interrupted process would otherwise appear twice. A line cut
    short by the crash is dropped too. Header lines (no `step_key`) are kept.
    """
    if not path.exists():
        return
    rewrite_jsonl(path, [record for _, record in iter_json_lines(path)
                         if not isinstance(record, dict) or record.get(step_key) is None
                         or record[step_key] <= last_step])

