"""The trainable model and its optimizers: loaded, initialised from a start, scheduled."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch

from hindsight.configs import ConfigError
from hindsight.train.checkpoint import list_checkpoints
from hindsight.train.model import LoraSettings, TrainableModel


def load_trainable(
    model_spec: str, roles: Sequence[str], lora_rank: int, lora_alpha: int, full_finetune: bool,
    gradient_checkpointing: bool = False, dtype: str = "auto",
) -> TrainableModel:
    """Load an `hf:`-family model and wrap it with one LoRA adapter per role.

    A spec with adapters (`smollm2+X`) has them merged into the base first, so the roles'
    fresh adapters train on top of base+X, and "adapters off" (the KL reference of
    `kl_reference: base`) is that merged model.
    """
    from hindsight.llm import load_model
    from hindsight.llm.base import ModelError
    from hindsight.llm.hf import HFBackend

    backend = load_model(model_spec, dtype=dtype)  # the frozen base; peft keeps the LoRA weights in float32
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
