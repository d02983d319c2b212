"""Rollouts sampled by model replicas in Ray actors, kept in step with the weights being trained.

With `model_workers: N` a run starts N replicas of its base model (`hindsight.llm.replicas`),
each with the trainer's LoRA shape and roles; every rollout and evaluation generates there,
the batch split over the replicas, and the trainer only computes log-probs and gradients.
`ReplicaPolicy` keeps the replicas in step with the trainer, role by role, as
`hindsight.train.served` does for an inference server:

    updated   the run says the weights changed (`TrainingRun`: at the start, after each step)
    sync      before a role next generates, its adapter matrices go to Ray's object store once
              and every replica copies them in, recording the step they come from
    check     each replica's log-probs of the fixed probe sequences under the new weights
              against the trainer's (`compare_logprobs`): a gap beyond the tolerance stops
              the run, naming the replica and the gap
    generate  every call names the step its weights must come from; a replica holding other
              weights (one that Ray started again after its process died) gets the latest ones
              back, checked the same way, and its part of the batch is redone

Metrics: the `sync/…` entries of a server run (a sync is one role pushed to every replica;
its gaps are the largest over the replicas) and `workers/redone_chunks`, the parts of
batches redone since the previous row because their replica was lost or held other weights.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hindsight.llm.base import ModelError
from hindsight.llm.replicas import Loader, ModelReplica, ReplicaBackend
from hindsight.train.served import LogprobGap, SyncReport, compare_logprobs, probe_change, probe_sequences, sync_metrics
from hindsight.types import Completion, GenerationRequest, SamplingParams

if TYPE_CHECKING:
    from hindsight.train.model import LoraSettings, TrainableModel

logger = logging.getLogger(__name__)


class TrainableReplica(ModelReplica):
    """A model replica (a Ray actor) with the trainer's LoRA shape: one adapter per role, for pushed weights."""

    def __init__(self, spec: str, options: dict[str, Any], load: Loader, lora: LoraSettings,
                 roles: tuple[str, ...]):
        self.lora, self.roles = lora, roles
        self.model: TrainableModel | None = None
        super().__init__(spec, options, load)

    def _prepare(self) -> None:
        from hindsight.train.model import TrainableModel  # torch and peft load in the replica's process only

        self.model = TrainableModel(self.backend, self.roles, self.lora)

    def load(self, role: str, tensors: dict[str, Any], version: int, probes: list[list[int]]) -> list[list[float]]:
        self._require_model()
        self.model.load_adapter_state(role, tensors)
        self.versions[role] = version
        return self.model.sequence_logprobs(role, probes)

    def _activate(self, role: str | None) -> None:
        if role is not None:
            self.model.activate(role)


class ReplicaSyncError(ModelError):
    """A model replica does not compute, under the pushed weights, what the trainer computes."""


class ReplicaPolicy:
    """Keeps model replicas' adapters in step with a `TrainableModel` and samples from them (module docstring)."""

    def __init__(self, model: TrainableModel, backend: ReplicaBackend, tolerance: float) -> None:
        self.model = model
        self.backend = backend
        self.tolerance = tolerance
        self.sampler = ReplicaSampler(self)
        backend.verify = self._check
        self._probes = probe_sequences(model.backend)
        self._trained: dict[str, list[list[float]]] = {}  # role -> trainer's probe log-probs of its pushed weights
        self._confirmed: dict[str, list[list[float]]] = {}  # role -> the same at its last confirmed sync
        self._stale: set[str] = set(model.roles)
        self._step = 0
        self._reports: list[SyncReport] = []
        self._redone = 0

    @classmethod
    def open(cls, model: TrainableModel, model_spec: str, *, workers: int, gpus: float,
             tolerance: float, dtype: str = "auto") -> ReplicaPolicy:
        """Start `workers` replicas of `model_spec` (the run's base model) with `model`'s LoRA shape and roles."""
        from hindsight.llm import load_model

        backend = ReplicaBackend.start(model_spec, load_model, spec=f"ray:{model_spec}", replicas=workers,
                                       num_gpus=gpus, dtype=dtype, replica=TrainableReplica,
                                       replica_args=(model.lora, tuple(model.roles)))
        return cls(model, backend, tolerance)

    def updated(self, step: int) -> None:
        """The model's weights are those after `step`: each role syncs before it next generates."""
        self._step = step
        self._stale = set(self.model.roles)

    def generate(self, role: str, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        """`role`'s completions from the replicas, synced first when its weights changed."""
        if role in self._stale:
            self._sync(role)
        return self.backend.sample(requests, params, role)

    def take_metrics(self) -> dict[str, float]:
        """The `sync/…` entries of the syncs since the last call, and `workers/redone_chunks`."""
        reports, self._reports = self._reports, []
        redone, self._redone = self.backend.redone - self._redone, self.backend.redone
        return {**sync_metrics(reports), **({"workers/redone_chunks": float(redone)} if redone else {})}

    def close(self) -> None:
        """End the replicas."""
        self.backend.close()

    def _sync(self, role: str) -> None:
        started = time.perf_counter()
        trained = self.model.sequence_logprobs(role, self._probes)
        self._trained[role] = trained
        served = self.backend.push(role, self.model.adapter_state(role), self._step, self._probes)
        gap = max((self._check(role, replica, logprobs) for replica, logprobs in enumerate(served)),
                  key=lambda found: found.mean_relative)
        change, confirmed = probe_change(trained, self._confirmed.get(role), self.tolerance)
        if confirmed:
            self._confirmed[role] = trained
        self._stale.discard(role)
        seconds = time.perf_counter() - started
        self._reports.append(SyncReport(role, f"{role}-step-{self._step:06d}", seconds, gap, change, confirmed))
        logger.info("%d replicas hold %s of step %d (gap %.2g, %.1f s)", len(served), role, self._step,
                    gap.mean_relative, seconds)

    def _check(self, role: str, replica: int, logprobs: list[list[float]]) -> LogprobGap:
        """The gap between a replica's probe log-probs and the trainer's; beyond the tolerance, the run stops."""
        gap = compare_logprobs(logprobs, self._trained[role])
        if gap.mean_relative > self.tolerance:
            raise ReplicaSyncError(
                f"model replica {replica} does not compute what the trainer computes under the {role} weights of "
                f"step {self._step}: its log-probs of the probe tokens are {gap.mean_relative:.3g} from the "
                f"trainer's (tolerance {self.tolerance:g}; largest gap {gap.max_abs:.3g} nats); does it load "
                "another base model, or run in another precision?"
            )
        return gap


class ReplicaSampler:
    """The backend a run with model replicas generates with: the active role's weights on the replicas."""

    def __init__(self, policy: ReplicaPolicy) -> None:
        self.policy = policy
        self.spec = policy.backend.spec

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        return self.policy.generate(self.policy.model.active, requests, params)
