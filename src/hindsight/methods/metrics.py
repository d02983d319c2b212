"""The metrics log of a training run and the names of its entries (`area/name`)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Mapping

from hindsight.agent.evaluate import EvalSummary
from hindsight.configs import ConfigError
from hindsight.llm.hf import PrefillCounts
from hindsight.logs import RunDir
from hindsight.train.update import UpdateStats

if TYPE_CHECKING:
    from hindsight.methods.basics import TrainingBasics


def update_metrics(area: str, stats: UpdateStats, lr: float) -> dict[str, float]:
    """Metric row entries of one role's update, named `area/…`."""
    row = {
        f"{area}/loss": stats.loss, f"{area}/pg_loss": stats.pg_loss, f"{area}/kl": stats.kl,
        f"{area}/clip_frac": stats.clip_frac, f"{area}/grad_norm": stats.grad_norm, f"{area}/lr": lr,
        f"{area}/sequences": stats.sequences, f"{area}/tokens": stats.tokens,
        f"{area}/net_advantage": stats.net_advantage,
    }
    if stats.entropy is not None:  # computed only for the entropy bonus
        row[f"{area}/entropy"] = stats.entropy
    return row


def redundancy_metrics(*stats: UpdateStats | None) -> dict[str, float]:
    """`throughput/redundancy` of an update's roles together: tokens pushed through the model
    ÷ the distinct tokens of their batches (1: every token computed once)."""
    done = [s for s in stats if s is not None]
    distinct = sum(s.distinct_tokens for s in done)
    return {"throughput/redundancy": sum(s.tokens for s in done) / distinct} if distinct else {}


def prefill_counts(sampler: Any) -> PrefillCounts | None:
    """A copy of the sampler's running prompt-token counts (None for a sampler that keeps none,
    e.g. an inference server)."""
    counts = getattr(sampler, "prefill", None)
    return replace(counts) if isinstance(counts, PrefillCounts) else None


def prefill_metrics(sampler: Any, before: PrefillCounts | None) -> dict[str, float]:
    """`throughput/prefill_redundancy` since `before`: prompt tokens pushed through the model
    ÷ the distinct prompt tokens of the batches sampled (1: every prompt token once)."""
    after = prefill_counts(sampler)
    if before is None or after is None or after.distinct_tokens == before.distinct_tokens:
        return {}
    return {"throughput/prefill_redundancy": (after.pushed_tokens - before.pushed_tokens)
            / (after.distinct_tokens - before.distinct_tokens)}


def eval_metrics(prefix: str, summary: EvalSummary) -> dict[str, float]:
    row = {
        f"{prefix}/success_rate": summary.success_rate,
        f"{prefix}/score_mean": summary.mean_score,
        f"{prefix}/steps_mean": summary.mean_steps,
        f"{prefix}/invalid_rate": summary.invalid_rate,
    }
    if summary.oracle_agreement is not None:
        row[f"{prefix}/oracle_agreement"] = summary.oracle_agreement
        row[f"{prefix}/oracle_agreement_valid"] = summary.oracle_agreement_valid
        row[f"{prefix}/oracle_chance"] = summary.oracle_chance
        moves = sum(summary.action_mix.values())
        # The largest share of one action: near 1, the policy answers the same whatever the state.
        row[f"{prefix}/top_action_share"] = max(summary.action_mix.values()) / moves if moves else 0.0
    return row


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
