"""Model replicas in Ray actors: `ray:SPEC` splits every batch over copies of a local model.

    backend = load_model("ray:smollm2", replicas=2)
    completions = backend.generate(requests, SamplingParams(temperature=1.0, seed=0))

Each replica is a Ray actor that loads SPEC (smollm2 or hf:PATH, with +ADAPTER) itself and
generates with the in-process backend (`HFBackend`), so it answers as that backend would:
token ids, log-probs, finish reasons. `generate` cuts the batch into one contiguous chunk
per replica (sizes differ by at most one), sends every chunk at once and puts the answers
back in order. Chunk i samples with seed + i·CHUNK_SEED_STRIDE, so identical prompts sent
to different replicas (the samples of a GRPO group) do not draw the same tokens. A replica
uses $OMP_NUM_THREADS torch threads (what `--threads` sets), 1 when it is unset.

Weights being trained (`hindsight.train.replicas` does this for a training run): replicas
of its `TrainableReplica` class, a `ModelReplica` with the trainer's LoRA shape, hold one
adapter per role. `push(role, tensors, version, probes)`
puts the adapter's matrices in Ray's object store once; every replica copies them into its
adapter, records `version` (the update the weights come from) and scores the probe token
sequences under them, for the caller to compare with its own. Every generate call names
the role and the version it expects; a replica holding another version answers with its
version only, and gets the role's latest weights (still in the object store) again before
its chunk is redone. So no chunk is ever sampled from weights the caller did not push last.

Failures: Ray starts a replica whose process died again (it loads SPEC again, without the
pushed weights). Its chunk, lost or answered by the fresh process with no weights, is
redone there once the latest weights of every role are back (`verify` sees what it then
computes on the probes). A chunk that still fails after REPLICA_RETRIES redos stops the
call with ModelError.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hindsight.llm.base import ModelBackend, ModelError
from hindsight.types import ChatMessage, Completion, GenerationRequest, SamplingParams

#: What builds a replica's model from its spec and options: `hindsight.llm.load_model`, handed
#: down by whoever starts the replicas, since this module is one of the backends it loads.
Loader = Callable[..., ModelBackend]

#: Seed offset between the chunks of one batch.
CHUNK_SEED_STRIDE = 1_000_003
#: How often one chunk of a call is redone (its replica lost, or holding other weights) before the call fails.
REPLICA_RETRIES = 3


class ModelReplica:
    """One replica (a Ray actor): SPEC loaded with `load`, generating for the base model (no roles).

    A failure to load is kept and reported by `ready`, so that the driver can show it as
    one line instead of Ray's account of a dead actor. `hindsight.train.replicas.TrainableReplica`
    adds one adapter per role, for weights pushed by a trainer.
    """

    def __init__(self, spec: str, options: dict[str, Any], load: Loader):
        self.failure: str | None = None
        # Which update each role's weights come from; the base model, without roles, is version 0.
        self.versions: dict[str | None, int] = {}
        try:
            self.backend = load(spec, **options)
            self._prepare()
        except Exception as exc:  # noqa: BLE001 - reported by ready() as one line
            self.failure = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ModelError) else str(exc)

    def _prepare(self) -> None:
        """Ready the loaded backend for generating; a plain replica generates with the base weights only."""
        self.versions[None] = 0

    def ready(self) -> tuple[int, str | None]:
        """(this process's id, why the model could not be loaded or None)."""
        return os.getpid(), self.failure

    def pid(self) -> int:
        return os.getpid()

    def load(self, role: str, tensors: dict[str, Any], version: int, probes: list[list[int]]) -> list[list[float]]:
        """Take `role`'s adapter weights of update `version`; the probes' log-probs under them."""
        self._require_model()
        raise ModelError("this replica was started without a LoRA shape, so it takes no adapter weights")

    def generate(self, conversations: list[tuple[ChatMessage, ...]], params: SamplingParams, role: str | None,
                 version: int) -> tuple[int | None, list[Completion]]:
        """(the version of `role`'s weights here, completions): none when that is not `version`."""
        self._require_model()
        held = self.versions.get(role)
        if held != version:
            return held, []
        self._activate(role)
        return held, self.backend.generate([GenerationRequest(messages) for messages in conversations], params)

    def _activate(self, role: str | None) -> None:
        """Switch on `role`'s weights; a plain replica holds only the base model's (role None)."""

    def _require_model(self) -> None:
        if self.failure is not None:  # a restarted replica that could not load the model again
            raise ModelError(self.failure)


@dataclass(frozen=True)
class _Pushed:
    """A role's latest weights: their object in Ray's store, their version, the probes to score."""

    tensors: Any
    version: int
    probes: list[list[int]]


class ReplicaBackend:
    """Batched generation over model replicas in Ray actors (see the module docstring)."""

    def __init__(self, handles: Sequence[Any], *, spec: str) -> None:
        self.handles = list(handles)
        self.spec = spec
        #: Called with (role, replica, probe log-probs) when a replica that was started again got
        #: a role's weights back; it raises to stop the run when they are not the pushed ones.
        self.verify: Callable[[str, int, list[list[float]]], object] | None = None
        #: Chunks redone since the start, because their replica was lost or held other weights.
        self.redone = 0
        self._pushed: dict[str, _Pushed] = {}

    def __repr__(self) -> str:
        return f"ReplicaBackend(spec={self.spec!r}, replicas={len(self.handles)})"

    @classmethod
    def load(cls, model_spec: str, load: Loader, /, *, spec: str, replicas: int | None = None, num_gpus: float = 0.0,
             dtype: str | None = None, max_batch_size: int | None = None) -> ReplicaBackend:
        """Start `replicas` replicas of `model_spec`, each loading it with `load` (default: one per CPU, or per
        `num_gpus` GPUs, of the cluster); each reserves `num_gpus` GPUs (a fraction shares one; 0 runs on CPU)."""
        return cls.start(model_spec, load, spec=spec, replicas=replicas, num_gpus=num_gpus, dtype=dtype,
                         max_batch_size=max_batch_size)

    @classmethod
    def start(cls, model_spec: str, load: Loader, *, spec: str, replicas: int | None = None, num_gpus: float = 0.0,
              dtype: str | None = None, max_batch_size: int | None = None,
              replica: type[ModelReplica] = ModelReplica, replica_args: tuple[Any, ...] = ()) -> ReplicaBackend:
        """`load`, with replicas of class `replica` (its arguments after spec, options and loader:
        `replica_args`); a trainer's `TrainableReplica` holds one adapter per role."""
        from hindsight.cluster import cluster_resource, connect

        ray = connect(f"ray:{model_spec}", ModelError)
        if num_gpus < 0:
            raise ModelError(f"num_gpus must be >= 0, got {num_gpus}")
        gpus = cluster_resource("GPU")
        if replicas is None:
            replicas = max(1, int(gpus // num_gpus) if num_gpus else int(cluster_resource("CPU")))
        if replicas < 1:
            raise ModelError(f"replicas must be >= 1, got {replicas}")
        if replicas * num_gpus > gpus:
            raise ModelError(f"{replicas} replicas of {num_gpus:g} GPU each need {replicas * num_gpus:g} GPUs; the "
                             f"Ray cluster has {gpus:g}")
        options = {key: value for key, value in (("dtype", dtype), ("max_batch_size", max_batch_size))
                   if value is not None}
        if not num_gpus:
            options["device"] = "cpu"  # Ray leaves the GPUs visible to an actor that reserves none
        # Restarted by Ray when their process dies; a call is never retried by Ray itself,
        # since the backend redoes a lost chunk only once the replica holds the right weights.
        actor = ray.remote(replica).options(max_restarts=-1, max_task_retries=0, num_cpus=0, num_gpus=num_gpus,
                                                 scheduling_strategy="SPREAD")
        handles = [actor.remote(model_spec, options, load, *replica_args) for _ in range(replicas)]
        backend = cls(handles, spec=spec)
        for _, failure in ray.get([handle.ready.remote() for handle in handles]):
            if failure is not None:
                backend.close()
                raise ModelError(f"a replica of {model_spec} could not load it: {failure}")
        return backend

    def pids(self) -> list[int]:
        """The replicas' process ids, in order."""
        import ray

        return ray.get([handle.pid.remote() for handle in self.handles])

    # ------------------------------------------------------------------ weights

    def push(self, role: str, tensors: dict[str, Any], version: int,
             probes: list[list[int]]) -> list[list[list[float]]]:
        """Give every replica `role`'s adapter weights of update `version`; each one's probe log-probs."""
        import ray

        self._pushed[role] = _Pushed(ray.put(tensors), version, probes)
        refs = [handle.load.remote(role, self._pushed[role].tensors, version, probes) for handle in self.handles]
        return [self._loaded(replica, role, ref) for replica, ref in enumerate(refs)]

    def _loaded(self, replica: int, role: str, ref: Any) -> list[list[float]]:
        """A replica's answer to `load`; a replica lost meanwhile is waited for and given every role's weights."""
        import ray

        from hindsight.cluster import await_restart

        for attempt in range(REPLICA_RETRIES + 1):
            try:
                if attempt == 0:
                    return self._answer(replica, ref)
                await_restart(self.handles[replica])
                return self._restore(replica)[role]
            except ray.exceptions.RayActorError:
                continue
        raise ModelError(f"model replica {replica} of {self.spec} was lost {REPLICA_RETRIES + 1} times while "
                         f"loading the {role} weights")

    def _restore(self, replica: int) -> dict[str, list[list[float]]]:
        """Push every role's latest weights to a replica that was started again, and verify them."""
        refs = {role: self.handles[replica].load.remote(role, pushed.tensors, pushed.version, pushed.probes)
                for role, pushed in self._pushed.items()}
        logprobs = {role: self._answer(replica, ref) for role, ref in refs.items()}
        if self.verify is not None:
            for role, values in logprobs.items():
                self.verify(role, replica, values)
        return logprobs

    def _answer(self, replica: int, ref: Any) -> Any:
        """`ray.get`, with an error the replica raised as one line (a lost replica stays RayActorError)."""
        import ray

        from hindsight.cluster import remote_cause

        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            raise ModelError(f"model replica {replica} of {self.spec} failed: {remote_cause(exc)}") from None

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        """One completion per request, in order, from the replicas' base model (no role)."""
        return self.sample(requests, params, None)

    def sample(self, requests: Sequence[GenerationRequest], params: SamplingParams,
               role: str | None) -> list[Completion]:
        """One completion per request, in order, from `role`'s latest pushed weights (None: the base model)."""
        if not requests:
            return []
        if role is None:
            version = 0
        elif role in self._pushed:
            version = self._pushed[role].version
        else:
            raise ModelError(f"no {role} weights were pushed to the replicas of {self.spec} yet")
        conversations = [request.messages for request in requests]
        size, extra = divmod(len(conversations), len(self.handles))
        chunks, start = [], 0
        for replica in range(len(self.handles)):
            end = start + size + (replica < extra)
            if end > start:
                seed = None if params.seed is None else params.seed + replica * CHUNK_SEED_STRIDE
                chunks.append((replica, conversations[start:end], replace(params, seed=seed)))
            start = end
        refs = [self._submit(replica, chunk, chunk_params, role, version) for replica, chunk, chunk_params in chunks]
        completions: list[Completion] = []
        for (replica, chunk, chunk_params), ref in zip(chunks, refs):
            completions += self._collect(replica, ref, chunk, chunk_params, role, version)
        return completions

    def _submit(self, replica: int, chunk: list[tuple[ChatMessage, ...]], params: SamplingParams,
                role: str | None, version: int) -> Any:
        return self.handles[replica].generate.remote(chunk, params, role, version)

    def _collect(self, replica: int, ref: Any, chunk: list[tuple[ChatMessage, ...]], params: SamplingParams,
                 role: str | None, version: int) -> list[Completion]:
        """A chunk's completions, redone on its restarted replica when it was lost or held other weights."""
        import ray

        from hindsight.cluster import await_restart

        failure = ""
        for attempt in range(REPLICA_RETRIES + 1):
            try:
                if attempt > 0:
                    self.redone += 1
                    await_restart(self.handles[replica])
                    self._restore(replica)
                    ref = self._submit(replica, chunk, params, role, version)
                held, completions = self._answer(replica, ref)
                if held == version:
                    return completions
                failure = f"it held weights of version {held}, not {version}"
            except ray.exceptions.RayActorError as exc:
                failure = f"the replica was lost ({type(exc).__name__})"
        raise ModelError(f"model replica {replica} of {self.spec} failed {REPLICA_RETRIES + 1} times in one call; "
                         f"last: {failure}")

    def close(self) -> None:
        """End the replicas' processes (they end with the Ray connection anyway)."""
        import ray

        if ray.is_initialized():
            for handle in self.handles:
                ray.kill(handle)
        self.handles = []
