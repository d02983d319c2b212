"""One round of DPO on preference pairs, with TRL's `DPOTrainer`, on a `TrainableModel`'s policy.

    stats = dpo_round(model, pairs, DPOSettings(beta=0.5, ...), work_dir)

The pairs are HF-datasets-compatible records with conversational `prompt`, `chosen` and
`rejected` (what `hindsight.agent.cso.make_pairs` writes). The reference is the policy as
it is when the round starts (CSO: the previous round's policy): a frozen copy of the whole
model, so the trained adapter and the reference never share weights.
TRL trains the active adapter in place; the `TrainableModel` keeps working afterwards.
"""

from __future__ import annotations

import copy
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch

from hindsight.train.model import TrainableModel


@dataclass(frozen=True)
class DPOSettings:
    beta: float = 0.5
    lr: float = 5e-5
    epochs: int = 1
    batch_size: int = 8
    micro_batch_size: int = 4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_length: int = 2048
    seed: int = 0
    shared_tokens: bool = True  # trajectory DPO: each micro-batch's common prefix once (TRL's DPO ignores it)

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError("beta must be > 0")
        if self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size:
            raise ValueError("batch_size must be a positive multiple of micro_batch_size")


@dataclass(frozen=True)
class DPOStats:
    """What a DPO round's optimizer steps reported (TRL's own metrics where TRL trains).

    The reward and log-prob fields are the round's last step's. That step can be a remainder
    batch of a single pair, so its loss alone is a noisy reading of the round; `mean_loss`
    averages every step's.
    """

    step_losses: tuple[float, ...]  # one per optimizer step, in order
    reward_accuracy: float
    reward_margin: float
    chosen_logp: float
    rejected_logp: float

    @property
    def steps(self) -> int:
        return len(self.step_losses)

    @property
    def loss(self) -> float:
        return self.step_losses[-1]

    @property
    def first_loss(self) -> float:
        return self.step_losses[0]

    @property
    def mean_loss(self) -> float:
        return sum(self.step_losses) / len(self.step_losses)

    def metrics(self, area: str = "dpo") -> dict[str, float]:
        return {f"{area}/loss": self.loss, f"{area}/mean_loss": self.mean_loss, f"{area}/first_loss": self.first_loss,
                f"{area}/reward_accuracy": self.reward_accuracy, f"{area}/reward_margin": self.reward_margin,
                f"{area}/logp_chosen": self.chosen_logp, f"{area}/logp_rejected": self.rejected_logp,
                f"{area}/optimizer_steps": float(self.steps)}


def frozen_reference(model: TrainableModel) -> torch.nn.Module:
    """A frozen copy of the active policy, adapters and all.

    The adapter stays unmerged: merging adds s·BA into bfloat16 base weights and rounds it,
    which moved the reference off the policy it copies (a first loss of 0.666 instead of
    ln 2 for CSO from frozenlake3 in bfloat16). Unmerged, the copy computes what the policy
    computes, so the first step's loss is exactly ln 2 in every dtype.
    """
    reference = copy.deepcopy(model.model)
    if model.lora is not None:
        # The transformers model inside the peft wrapper, its LoRA layers in place: TRL
        # patches a reference's forward and expects that class, not a PeftModel.
        reference = reference.base_model.model
    reference.eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets' progress bars off inside the block, restored after it."""
    from datasets.utils import logging as datasets_logging

    were_on = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if were_on:
            datasets_logging.enable_progress_bar()


@contextmanager
def _labelled_positions_only() -> Iterator[None]:
    """Inside, TRL's fused output head scores only the positions that carry a label on a CPU too.

    TRL scores only those on Triton devices, and every position elsewhere so that a compiler
    (Neuron's) sees one tile shape per batch. Nothing is compiled on a CPU, where the prompt's
    positions, most of every pair, scored over the whole vocabulary forward and backward were
    most of a round's time. The log-probs of the labelled positions, and so the loss, are the
    same either way (tests/train/test_dpo.py).
    """
    from trl.trainer import utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:  # another TRL: leave it as it is
        yield
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original


def dpo_round(model: TrainableModel, pairs: Sequence[Mapping[str, Any]], settings: DPOSettings,
              work_dir: str | Path | None = None) -> DPOStats:
    """Train the active role on `pairs` with DPO against its own state at the start of the call."""
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import DPOConfig, DPOTrainer

    if not pairs:
        raise ValueError("DPO needs at least one pair")
    dataset = Dataset.from_list([{"prompt": list(p["prompt"]), "chosen": list(p["chosen"]),
                                  "rejected": list(p["rejected"])} for p in pairs])
    reference = frozen_reference(model)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:  # TRL wants an output folder; we save ourselves
        args = DPOConfig(
            output_dir=scratch, beta=settings.beta, learning_rate=settings.lr, num_train_epochs=settings.epochs,
            per_device_train_batch_size=settings.micro_batch_size,
            gradient_accumulation_steps=settings.batch_size // settings.micro_batch_size,
            warmup_steps=settings.warmup_steps, weight_decay=settings.weight_decay,
            max_grad_norm=settings.max_grad_norm, max_length=settings.max_length, seed=settings.seed,
            logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
            # TRL defaults to bf16 autocast. On a CPU that is many times slower than fp32, and its
            # rounding alone moved the policy away from its merged reference (a first loss of
            # 0.675 instead of ln 2 on the bundled model), so fp32 unless a GPU does bf16.
            bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        )
        with _quiet_datasets():  # DPOTrainer tokenizes the pairs here, under datasets' progress bars
            trainer = DPOTrainer(model=model.model, ref_model=reference, args=args, train_dataset=dataset,
                                 processing_class=model.backend.tokenizer)
        # With tqdm off, transformers prints every log row as a dict; the method logs its own metrics.
        trainer.remove_callback(PrinterCallback)
        with _labelled_positions_only():
            trainer.train()
    model.model.eval()
    logged = [row for row in trainer.state.log_history if "loss" in row]  # logging_steps=1: a row per step
    if not logged:
        raise RuntimeError("DPO ran no optimizer step (fewer pairs than one batch?)")
    last = logged[-1]
    return DPOStats(
        step_losses=tuple(float(row["loss"]) for row in logged),
        reward_accuracy=float(last.get("rewards/accuracies", float("nan"))),
        reward_margin=float(last.get("rewards/margins", float("nan"))),
        chosen_logp=float(last.get("logps/chosen", float("nan"))),
        rejected_logp=float(last.get("logps/rejected", float("nan"))),
    )
