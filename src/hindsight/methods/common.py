"""Set-up shared by the training loops: model, optimizer, evaluation, metrics.

The loops themselves (sft.py, grpo.py, …) stay one readable function each; what they
share lives here so that it exists once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from hindsight.agent.engine import RolloutConfig
from hindsight.agent.evaluate import EvalSummary, evaluate_policy
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, Memory
from hindsight.configs import option
from hindsight.logs import RunDir
from hindsight.train.model import LoraSettings, TrainableModel
from hindsight.types import SamplingParams


def load_trainable(
    model_spec: str, roles: Sequence[str], lora_rank: int, lora_alpha: int, full_finetune: bool,
    gradient_checkpointing: bool = False,
) -> TrainableModel:
    """Load an `hf:`-family model and wrap it with one LoRA adapter per role."""
    from hindsight.llm import load_model
    from hindsight.llm.base import ModelError
    from hindsight.llm.hf import HFBackend

    backend = load_model(model_spec)
    if not isinstance(backend, HFBackend):
        raise ModelError(f"{model_spec!r} is not a trainable model; training needs smollm2 or hf:PATH")
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
    tensorboard: bool = option(False, "mirror metrics to TensorBoard")

    def __post_init__(self) -> None:
        Memory.parse(self.memory)

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
    """metrics.jsonl rows plus an optional TensorBoard mirror."""

    def __init__(self, run: RunDir, tensorboard: bool = False):
        self._rows = run.metrics_writer()
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise RuntimeError("tensorboard logging needs `pip install tensorboard`") from exc
            self._tb = SummaryWriter(str(run.path / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._rows.write({"step": step, "time": round(time.time(), 3), **metrics})
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._rows.close()
        if self._tb is not None:
            self._tb.close()


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
        if record.get(step_key, 0) <= last_step:
            kept.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)


class TrainingProgress:
    """A progress bar over updates (on stderr) showing the current phase and the last timings."""

    def __init__(self, total: int, description: str, completed: int = 0):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[phase]}"), TextColumn("{task.fields[info]}"),
            console=Console(stderr=True),
        )
        self._task = self._progress.add_task(description, total=total, completed=completed, phase="", info="")

    def phase(self, name: str) -> None:
        self._progress.update(self._task, phase=f"[{name}]")

    def advance(self, info: str) -> None:
        self._progress.update(self._task, advance=1, phase="", info=info)

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
