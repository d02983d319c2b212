"""Set-up shared by the training loops: model, optimizer, evaluation, metrics.

The loops themselves (sft.py, grpo.py, …) stay one readable function each; what they
share lives here so that it exists once.
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

import torch

from hindsight.agent.engine import RolloutConfig
from hindsight.agent.evaluate import EvalSummary, evaluate_policy
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, Memory
from hindsight.algos.grpo import Aggregation
from hindsight.configs import ConfigError, from_mapping, option
from hindsight.logs import RunDir
from hindsight.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from hindsight.train.model import LoraSettings, TrainableModel
from hindsight.train.sequences import TrainingSequence
from hindsight.train.update import UpdateSettings, UpdateStats
from hindsight.types import SamplingParams, Trajectory

C = TypeVar("C")


def load_trainable(
    model_spec: str, roles: Sequence[str], lora_rank: int, lora_alpha: int, full_finetune: bool,
    gradient_checkpointing: bool = False,
) -> TrainableModel:
    """Load an `hf:`-family model and wrap it with one LoRA adapter per role.

    A spec with adapters (`smollm2+X`) has them merged into the base first, so the roles'
    fresh adapters train on top of base+X, and "adapters off" (the KL reference of
    `kl_reference: base`) is that merged model.
    """
    from hindsight.llm import load_model
    from hindsight.llm.base import ModelError
    from hindsight.llm.hf import HFBackend

    backend = load_model(model_spec)
    if not isinstance(backend, HFBackend):
        raise ModelError(f"{model_spec!r} is not a trainable model; training needs smollm2 or hf:PATH "
                         "(optionally +ADAPTER)")
    lora = None if full_finetune else LoraSettings(rank=lora_rank, alpha=lora_alpha)
    return TrainableModel(backend, roles=roles, lora=lora, gradient_checkpointing=gradient_checkpointing)


def make_optimizer(params: Sequence[torch.nn.Parameter], lr: float, weight_decay: float, warmup: int, total: int):
    """AdamW with linear warm-up then cosine decay to 10% over `total` steps."""
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass(frozen=True)
class TrainingBasics:
    """Config fields every training method shares (each method's config extends it)."""

    env: str = option("frozenlake", "environment id")
    env_kwargs: dict = option({}, "environment options, e.g. {size: 4, max_steps: 8}")
    model: str = option("smollm2", "base model spec (smollm2 or hf:PATH)")
    memory: str = option("none", "history the policy sees: full, none or a number of turns")
    system_prompt: str = option("", "system prompt ({instruction} = the env's rules); empty = the default")
    max_new_tokens: int = option(48, "token budget per turn")
    concurrency: int = option(64, "episodes run at once (rollout and evaluation batch size)")
    eval_temperature: float = option(0.0, "sampling temperature of evaluations (0 is greedy)")
    weight_decay: float = option(0.0, "AdamW weight decay")
    max_grad_norm: float = option(1.0, "gradient clipping norm")
    lora_rank: int = option(16, "LoRA rank (must match a checkpoint the run starts from)")
    lora_alpha: int = option(32, "LoRA alpha (must match a checkpoint the run starts from)")
    full_finetune: bool = option(False, "train all weights instead of a LoRA adapter")
    seed: int = option(0, "seed of sampling and data order")
    keep_checkpoints: int = option(2, "newest checkpoints kept on disk (0 keeps every one)")
    tensorboard: bool = option(False, "mirror metrics to TensorBoard (in the run's tensorboard/ folder)")
    wandb_project: str = option("", "mirror metrics and the config to this Weights & Biases project "
                                    "(needs `pip install wandb`; WANDB_MODE=offline works without a network)")

    def __post_init__(self) -> None:
        Memory.parse(self.memory)
        if self.keep_checkpoints < 0:
            raise ValueError("keep_checkpoints must be >= 0 (0 keeps every checkpoint)")

    def rollout_config(self, sampling: SamplingParams, split: str, seed: int | None = None) -> RolloutConfig:
        """How this run's policy is prompted and sampled."""
        return RolloutConfig(
            memory=Memory.parse(self.memory), system_template=self.system_prompt or DEFAULT_SYSTEM_TEMPLATE,
            sampling=sampling, concurrency=self.concurrency, seed=self.seed if seed is None else seed,
            model_name=self.model, split=split,
        )

    def eval_settings(self) -> EvalSettings:
        return EvalSettings(self.env, self.env_kwargs, self.rollout_config(
            SamplingParams(temperature=self.eval_temperature, max_new_tokens=self.max_new_tokens), "test"
        ))


@dataclass(frozen=True)
class SupervisedBasics(TrainingBasics):
    """Config fields of the supervised (behaviour-cloning) methods."""

    epochs: int = option(2, "passes over the training sequences")
    batch_size: int = option(16, "sequences per optimizer step")
    micro_batch_size: int = option(8, "sequences per forward/backward (gradient accumulation)")
    lr: float = option(3e-4, "peak learning rate")
    warmup_steps: int = option(5, "linear warm-up steps")
    checkpoint_every: int = option(25, "save a checkpoint every N optimizer steps (always after the last one)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")


def fit_supervised(
    run: RunDir, model: TrainableModel, role: str, sequences: Sequence[TrainingSequence], config: SupervisedBasics,
    *, resume: bool, data: Mapping[str, float], area: str,
) -> tuple[int, MetricsLog]:
    """Minimise the token-mean NLL of the masked-in tokens for `role`, with checkpoints.

    Shuffled batches of `batch_size` sequences (a remainder smaller than a batch is
    dropped each epoch), AdamW with warm-up and cosine decay, gradient accumulation over
    micro-batches, one `area/…` metric row per step (after a step-0 row of `data`), a
    checkpoint every `checkpoint_every` steps and after the last. With `resume`, the
    latest checkpoint is restored and the data order is replayed from the seed past the
    steps already taken, so the batches that follow are the ones an uninterrupted run
    would have seen. Returns (steps, the open metrics log for the caller's evaluation rows).
    """
    from hindsight.train.update import sft_loss

    steps_per_epoch = max(1, len(sequences) // config.batch_size)
    total = steps_per_epoch * config.epochs
    model.activate(role)
    optimizer, scheduler = make_optimizer(model.parameters(), config.lr, config.weight_decay, config.warmup_steps,
                                          total)
    start = resume_latest(run, model, {role: optimizer}, {role: scheduler}, ())[0] if resume else 0
    metrics = MetricsLog(run, config)
    if start == 0:
        metrics.log(0, dict(data))
    order_rng = random.Random(config.seed)
    step = 0
    model.model.train()
    with TrainingProgress(total, area, completed=start) as progress:
        for epoch in range(config.epochs):
            order = list(range(len(sequences)))
            order_rng.shuffle(order)
            for first in range(0, steps_per_epoch * config.batch_size, config.batch_size):
                if step < start:
                    step += 1
                    continue
                step_started = time.perf_counter()
                batch = [sequences[i] for i in order[first : first + config.batch_size]]
                tokens = sum(s.num_loss_tokens for s in batch)
                optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                for m in range(0, len(batch), config.micro_batch_size):
                    micro = batch[m : m + config.micro_batch_size]
                    # Weight each micro-batch by its share of target tokens: the step then
                    # minimises the token-mean loss of the whole batch.
                    loss = sft_loss(model, micro) * sum(s.num_loss_tokens for s in micro) / tokens
                    loss.backward()
                    loss_total += loss.item()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
                optimizer.step()
                scheduler.step()
                step += 1
                step_s = time.perf_counter() - step_started
                metrics.log(step, {
                    f"{area}/loss": loss_total, f"{area}/grad_norm": grad_norm,
                    f"{area}/lr": scheduler.get_last_lr()[0], f"{area}/epoch": epoch, "timing/step_s": step_s,
                })
                if step % config.checkpoint_every == 0 or step == total:
                    save_checkpoint(run.path, step, model, {role: optimizer}, {role: scheduler}, {"kind": area},
                                    keep=config.keep_checkpoints)
                progress.advance(f"epoch {epoch + 1}/{config.epochs} · loss {loss_total:.3f} · {step_s:.0f}s/step")
    model.model.eval()
    return step, metrics


@dataclass(frozen=True)
class PolicyGradientBasics(TrainingBasics):
    """Config fields of the group-relative policy-gradient methods (GRPO, ECHO)."""

    init_from: str = option("", "what initialises the policy adapter: a run directory (e.g. an SFT run; its latest "
                                "checkpoint) or checkpoint, a PEFT adapter folder, a bundled adapter name or an "
                                "adapter spec BASE+ADAPTER")
    updates: int = option(20, "number of updates")
    tasks_per_update: int = option(4, "task instances per update")
    group_size: int = option(8, "samples per task instance: GRPO's G trajectories, ECHO's N critiques and refinements")
    reward: str = option("score", "trajectory return: score (graded, final) or success (0/1)")
    temperature: float = option(1.0, "sampling temperature of training rollouts")
    lr: float = option(2e-5, "peak learning rate")
    warmup_steps: int = option(0, "linear warm-up optimizer steps")
    epochs: int = option(1, "optimizer steps on each batch of rollouts (>1 makes the clipping active)")
    micro_batch_size: int = option(8, "sequences per forward/backward")
    clip_low: float = option(0.2, "lower clip ε (ratio ≥ 1 − ε)")
    clip_high: float = option(0.2, "upper clip ε (ratio ≤ 1 + ε); DAPO's clip-higher uses 0.28")
    kl_coef: float = option(0.0, "β of the k3 KL to the reference (kl_reference); 0 disables it")
    kl_reference: str = option("base", "what kl_coef pulls each role toward: base (the base model, adapters off) or "
                                       "init (a frozen copy of the weights the role starts from: init_from for the "
                                       "policy, e.g. the SFT warm start; critic_init_from for ECHO's critic)")
    aggregation: str = option("trajectory_mean", "trajectory_mean (token mean over all turns of a trajectory, then "
                                                 "mean over trajectories: the papers' 1/|o_i|), turn_mean (each turn "
                                                 "its own unit, so longer trajectories weigh more) or token_mean (DAPO)")
    normalize_std: bool = option(True, "divide advantages by the group's standard deviation")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the update")
    eval_every: int = option(5, "evaluate on the validation split every N updates (0 disables)")
    eval_episodes: int = option(50, "tasks per evaluation")
    final_eval_split: str = option("test", "split evaluated at the end ('' skips it)")
    final_eval_episodes: int = option(100, "tasks of the final evaluation")
    checkpoint_every: int = option(5, "save a checkpoint every N updates")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reward not in ("score", "success"):
            raise ValueError("reward must be 'score' or 'success'")
        Aggregation(self.aggregation)
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2 (advantages are relative to the group)")
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        if self.kl_reference not in ("base", "init"):
            raise ValueError(f"kl_reference must be 'base' or 'init', not {self.kl_reference!r}")
        if self.kl_reference == "init" and not self.init_from:
            raise ValueError("kl_reference: init needs init_from")
        if self.kl_reference == "init" and self.full_finetune:
            raise ValueError("kl_reference: init needs LoRA; with full fine-tuning the reference is already "
                             "the weights the run starts from")

    def update_settings(self) -> UpdateSettings:
        return UpdateSettings(
            clip_low=self.clip_low, clip_high=self.clip_high, kl_coef=self.kl_coef,
            aggregation=Aggregation(self.aggregation), epochs=self.epochs,
            micro_batch_size=self.micro_batch_size, max_grad_norm=self.max_grad_norm,
        )


def open_run(
    kind: str, config_cls: type[C], config: C | None, out: str | Path, resume: bool, write: bool = True,
) -> tuple[RunDir, C]:
    """The run directory and its config: written for a new run (by the writing process), read back when resuming."""
    run = RunDir(out)
    if resume:
        config = from_mapping(config_cls, {k: v for k, v in run.read_config().items() if k != "kind"})
    elif write:
        run.write_config({"kind": kind, **asdict(config)})
    return run, config


def resume_latest(
    run: RunDir, model: TrainableModel, optimizers: Mapping[str, Any], schedulers: Mapping[str, Any],
    trajectory_logs: Sequence[str], write: bool = True,
) -> tuple[int, int]:
    """Restore the run's latest checkpoint; returns (its step, environment steps so far), (0, 0) without one.

    Metric rows and the named training-trajectory logs written after that checkpoint by
    the interrupted process are dropped (by the writing process), so the resumed run
    writes them once. Without a checkpoint the run starts over, so all of them are dropped.
    """
    checkpoints = list_checkpoints(run.path)
    state = load_checkpoint(checkpoints[-1], model, optimizers, schedulers) if checkpoints else {"step": -1}
    if write:
        drop_records_after(run.path / "metrics.jsonl", state["step"], "step")
        for name in trajectory_logs:
            drop_records_after(run.trajectories_dir / f"{name}.jsonl", state["step"], "update")
    return max(state["step"], 0), state.get("env_steps", 0)


def trajectory_return(trajectory: Trajectory, reward: str) -> float:
    """A trajectory's return: its success (0/1) or its final task score."""
    return float(trajectory.success) if reward == "success" else trajectory.score


def load_latest(model: TrainableModel, source: str | Path, role: str | None = None) -> None:
    """Initialise one role's adapter (default policy), or with full fine-tuning all weights, from `source`.

    With LoRA, `source` is anything `TrainableModel.load_adapter` takes: a run directory
    (its latest checkpoint, the `role` adapter of it), a checkpoint, a PEFT adapter
    folder, a bundled adapter name or an adapter spec; rank, alpha and targets must match.
    With full fine-tuning it must be a run directory of a full fine-tuning run.
    """
    if model.lora is not None:
        model.load_adapter(source, role or "policy")
        return
    checkpoints = list_checkpoints(source)
    if not checkpoints:
        raise ConfigError(f"no checkpoint in {source}; with full_finetune: true, init_from must be a run directory "
                          "(merge an adapter into the base with model: BASE+ADAPTER)")
    model.load(checkpoints[-1].path / "model", role)


def update_metrics(area: str, stats: UpdateStats, lr: float) -> dict[str, float]:
    """Metric row entries of one role's update, named `area/…`."""
    return {
        f"{area}/loss": stats.loss, f"{area}/pg_loss": stats.pg_loss, f"{area}/kl": stats.kl,
        f"{area}/clip_frac": stats.clip_frac, f"{area}/grad_norm": stats.grad_norm, f"{area}/lr": lr,
        f"{area}/sequences": stats.sequences, f"{area}/tokens": stats.tokens,
    }


@dataclass(frozen=True)
class EvalSettings:
    env: str
    env_kwargs: Mapping[str, Any]
    rollout: RolloutConfig


def evaluate_trainable(
    model: TrainableModel, settings: EvalSettings, split: str, episodes: int, run: RunDir, name: str, seed: int,
) -> EvalSummary:
    """Evaluate the active role on the first `episodes` tasks of a split; log trajectories."""
    from hindsight.envs import make

    seeds = make(settings.env, **settings.env_kwargs).split_seeds(split, episodes)
    rollout = replace(settings.rollout, seed=seed, split=split)
    # An evaluation is recomputed whole (e.g. after a resume): never append to an old one.
    (run.trajectories_dir / f"{name}.jsonl").unlink(missing_ok=True)
    with run.trajectory_writer(name, env=settings.env, split=split) as writer:
        _, summary = evaluate_policy(
            model.backend, lambda: make(settings.env, **settings.env_kwargs), seeds, rollout, writer=writer
        )
    return summary


def eval_metrics(prefix: str, summary: EvalSummary) -> dict[str, float]:
    return {
        f"{prefix}/success_rate": summary.success_rate,
        f"{prefix}/score_mean": summary.mean_score,
        f"{prefix}/steps_mean": summary.mean_steps,
        f"{prefix}/invalid_rate": summary.invalid_rate,
    }


class MetricsLog:
    """metrics.jsonl rows (the source of truth) plus optional TensorBoard and W&B mirrors.

    A disabled log (every data-parallel process but the first) writes nothing.
    """

    def __init__(self, run: RunDir, config: TrainingBasics, enabled: bool = True):
        self._rows = run.metrics_writer() if enabled else None
        self._tb = self._wandb = None
        if not enabled:
            return
        if config.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("tensorboard: true needs `pip install tensorboard`") from None
            self._tb = SummaryWriter(str(run.path / "tensorboard"))
        if config.wandb_project:
            try:
                import wandb
            except ImportError:
                raise ConfigError("wandb_project needs `pip install wandb`") from None
            # One W&B run per run directory, so a resumed run continues the same W&B run.
            run_id = "hs-" + hashlib.sha1(str(run.path.resolve()).encode()).hexdigest()[:16]
            self._wandb = wandb.init(project=config.wandb_project, name=run.path.name, id=run_id, resume="allow",
                                     dir=str(run.path), config=asdict(config))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self._rows is None:
            return
        self._rows.write({"step": step, "time": round(time.time(), 3), **metrics})
        scalars = {key: value for key, value in metrics.items() if isinstance(value, (int, float))}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        if self._rows is not None:
            self._rows.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def drop_records_after(path: Path, last_step: int, step_key: str) -> None:
    """Remove JSONL records whose `step_key` is beyond `last_step`.

    A resumed run starts from its last checkpoint; rows and trajectories written after
    that checkpoint by the interrupted process would otherwise appear twice. A line cut
    short by the crash is dropped too. Header lines (no `step_key`) are kept.
    """
    import json

    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        step = record.get(step_key) if isinstance(record, dict) else None
        if step is None or step <= last_step:
            kept.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)


class TrainingProgress:
    """Progress over updates or steps (on stderr) with the current phase and the last figures.

    On a terminal it is a live bar; otherwise (a log file, CI, `nohup`) every phase change
    and every finished unit is one plain line, so a long run's log shows where it is.
    """

    def __init__(self, total: int, description: str, completed: int = 0, enabled: bool = True):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self._live = console.is_terminal
        self._enabled = enabled
        self._description, self._total, self._done = description, total, completed
        self._started = time.perf_counter()
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[phase]}"), TextColumn("{task.fields[info]}"),
            console=console, disable=not (enabled and self._live),
        )
        self._task = self._progress.add_task(description, total=total, completed=completed, phase="", info="")

    def _line(self, text: str) -> None:
        if self._enabled and not self._live:
            elapsed = int(time.perf_counter() - self._started)
            print(f"{self._description} {self._done}/{self._total} {elapsed // 60}:{elapsed % 60:02d} {text}",
                  file=sys.stderr, flush=True)

    def phase(self, name: str) -> None:
        self._progress.update(self._task, phase=f"[{name}]")
        self._line(f"[{name}]")

    def advance(self, info: str) -> None:
        self._done += 1
        self._progress.update(self._task, advance=1, phase="", info=info)
        self._line(info)

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
