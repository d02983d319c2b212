"""Rollouts sampled by an inference server that serves the adapters being trained.

With `rollout_server` set, a run generates every rollout and evaluation on an
OpenAI-compatible server with runtime LoRA loading (vLLM) instead of the in-process
model; the trainer only computes log-probs and gradients. `ServedPolicy` keeps the
server in step with the trainer, role by role (policy, critic, …):

    updated   the run says the weights changed (`TrainingRun`: at the start, after each step)
    sync      before a role next generates, its adapter is written in PEFT format to
              RUN/served/step-NNNNNN/ROLE, loaded under a new name (`POST
              /v1/load_lora_adapter`), checked, and the role's previous adapter unloaded
    check     the server's log-probs of a few fixed probe sequences under the new adapter
              (`/v1/completions`, the prompt as token ids, echoed) against the trainer's
              own (`TrainableModel.sequence_logprobs`): a gap beyond the tolerance stops
              the run, naming the adapter and the gap
    generate  chat completions that name the role's adapter as their `model`, with vLLM's
              token ids and log-probs (`return_tokens_as_token_ids`); a completion without
              them stops the run, since the update must score exactly the sampled tokens

The gap of one probe token is |server − trainer| / (1 + |trainer|): an absolute error in
nats for likely tokens, a relative one for unlikely tokens, whose log-probs carry an error
that grows with their size in low precision (a bf16 logit is exact to about 0.4 %, and an
unlikely token's log-prob is a large difference of logits). The check takes the mean over
every probe token, which a server that serves other weights shifts as a whole, while a
few tokens of a correct server may stray further in bf16; it reports the largest as well.

An update too small to move the probes by more than the tolerance cannot be told from
rounding, so a server that kept the previous weights would pass that sync. Each sync
therefore also measures how far the trainer's probe log-probs moved since the role's last
*confirmed* sync (one whose change exceeded the tolerance): `sync/confirmed` is 1 when it
did. Until then the change accumulates, so a server that never takes the new weights fails
the check at the latest once the weights have moved by more than the tolerance in all.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hindsight.configs import ConfigError
from hindsight.llm.base import ModelError
from hindsight.types import Completion, GenerationRequest, SamplingParams, conversation

if TYPE_CHECKING:
    from hindsight.llm.hf import HFBackend
    from hindsight.llm.openai import OpenAIBackend
    from hindsight.llm.vllm import VLLMServer
    from hindsight.train.model import TrainableModel

logger = logging.getLogger(__name__)

#: The rollout_server value that starts a vLLM server on the run's base model.
START_VLLM = "vllm"

#: Probe conversations and replies, in the answer format the policies are trained to write:
#: their tokens are where a trained adapter differs most from the base.
PROBES = (
    ("You are on a frozen lake. The goal is two steps to your right. What do you do?",
     "<analysis>The goal is to the right and the ice there is safe.</analysis><action>right</action>"),
    ("Blocks: A is on the table, B is on A. Goal: A on B.",
     "<analysis>B must come off A first.</analysis><action>unstack B from A</action>"),
    ("Find a red mug for less than 20 dollars.",
     "<analysis>Search the shop first.</analysis><action>search[red mug]</action>"),
)


class ServedRolloutError(ModelError):
    """The rollout server does not serve what the trainer trains, or answers without token ids."""


@dataclass(frozen=True)
class LogprobGap:
    """How far a server's log-probs of the probe tokens are from the trainer's.

    mean_relative: mean over tokens of |server − trainer| / (1 + |trainer|), what the check
    holds against the tolerance. max_abs: the largest |server − trainer|, in nats.
    """

    mean_relative: float
    max_abs: float
    tokens: int


def compare_logprobs(served: Sequence[Sequence[float]], trained: Sequence[Sequence[float]]) -> LogprobGap:
    """The gap between two sets of log-probs of the same token sequences (see the module docstring)."""
    if len(served) != len(trained) or any(len(s) != len(t) for s, t in zip(served, trained)):
        raise ValueError("the server and the trainer scored different numbers of tokens")
    pairs = [(s, t) for row_s, row_t in zip(served, trained) for s, t in zip(row_s, row_t)]
    if not pairs:
        raise ValueError("no probe tokens to compare")
    relative = sum(abs(s - t) / (1 + abs(t)) for s, t in pairs) / len(pairs)
    return LogprobGap(mean_relative=relative, max_abs=max(abs(s - t) for s, t in pairs), tokens=len(pairs))


@dataclass(frozen=True)
class ServedAdapter:
    """An adapter the server serves: its name there and the PEFT folder it was loaded from."""

    name: str
    folder: Path


@dataclass(frozen=True)
class SyncReport:
    """One adapter put on the server: which, how long it took (save, load, check), the gap found."""

    role: str
    adapter: str
    seconds: float
    gap: LogprobGap
    #: The trainer's own change on the probes since the role's last confirmed sync, and
    #: whether it exceeded the tolerance (so that stale weights would have failed the check).
    change: LogprobGap | None = None
    confirmed: bool = False


def probe_change(trained: Sequence[Sequence[float]], last_confirmed: Sequence[Sequence[float]] | None,
                 tolerance: float) -> tuple[LogprobGap | None, bool]:
    """How far the trainer's probe log-probs moved since a role's last confirmed sync, and whether
    this sync is confirmed: the first one is (it compares base, tokenizer and adapter format),
    a later one when the change exceeds the tolerance (so that stale weights would fail the check)."""
    change = compare_logprobs(trained, last_confirmed) if last_confirmed is not None else None
    return change, change is None or change.mean_relative > tolerance


def sync_metrics(reports: Sequence[SyncReport]) -> dict[str, float]:
    """Metric entries of the syncs of one step (none when there was none)."""
    if not reports:
        return {}
    return {
        "sync/adapters": float(len(reports)),
        "sync/seconds": sum(report.seconds for report in reports),
        "sync/max_logprob_gap": max(report.gap.max_abs for report in reports),
        "sync/relative_gap": max(report.gap.mean_relative for report in reports),
        "sync/confirmed": float(all(report.confirmed for report in reports)),
    }


def probe_sequences(backend: HFBackend) -> list[list[int]]:
    """Token ids of the probes: each conversation as the chat template renders it, its reply, end of turn."""
    sequences = []
    for question, reply in PROBES:
        prompt = backend.encode_chat(conversation(("user", question)))
        answer = backend.tokenizer.encode(reply, add_special_tokens=False)
        sequences.append(prompt + answer + [backend.tokenizer.eos_token_id])
    return sequences


class ServedPolicy:
    """Keeps a server's adapters in step with a `TrainableModel` and samples from them (module docstring)."""

    def __init__(self, model: TrainableModel, client: OpenAIBackend, folder: Path, tag: str, tolerance: float,
                 server: VLLMServer | None = None) -> None:
        self.model = model
        self.client = client
        self.folder = folder
        self.tag = tag
        self.tolerance = tolerance
        self.server = server
        self.sampler = ServedSampler(self)
        self._probes = probe_sequences(model.backend)
        self._serving: dict[str, ServedAdapter] = {}  # role -> what the server serves it as
        self._stale: set[str] = set(model.roles)
        self._confirmed: dict[str, list[list[float]]] = {}  # role -> trainer's probe log-probs at its last confirmed sync
        self._step = 0
        self._reports: list[SyncReport] = []

    @classmethod
    def open(cls, target: str, model: TrainableModel, run_dir: Path, *, tolerance: float, concurrency: int,
             serve_args: Sequence[str] = ()) -> ServedPolicy:
        """Connect to the server at base URL `target`, or start one (`target` = vllm, with `serve_args`)
        on the base model.

        RUN/served/ is emptied first: adapters written by an interrupted process are stale.
        """
        from hindsight.llm.openai import OpenAIBackend
        from hindsight.llm.vllm import API_KEY_ENV

        folder = run_dir / "served"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        server = None
        if target == START_VLLM:
            from hindsight.llm.vllm import VLLMServer, require_vllm

            require_vllm("rollout_server: vllm")
            server = VLLMServer(str(served_base(model.backend)), enable_lora=True, max_lora_rank=model.lora.rank,
                                serve_args=serve_args, log_path=folder / "vllm.log")
            target = server.url
        tag = run_tag(run_dir)
        client = OpenAIBackend(tag, base_url=target, api_key_env=API_KEY_ENV, require_key=False, token_ids=True,
                               max_concurrency=max(1, concurrency), spec=f"served:{target}")
        return cls(model, client, folder, tag, tolerance, server)

    def updated(self, step: int) -> None:
        """The model's weights are those after `step`: each role syncs before it next generates."""
        self._step = step
        self._stale = set(self.model.roles)

    def adapter(self, role: str) -> str:
        """The name the server serves `role`'s current weights under (synced first when stale)."""
        if role in self._stale:
            self._sync(role)
        return self._serving[role].name

    def take_metrics(self) -> dict[str, float]:
        """The `sync/…` entries of the syncs since the last call."""
        reports, self._reports = self._reports, []
        return sync_metrics(reports)

    def _sync(self, role: str) -> None:
        from hindsight.llm.vllm import load_adapter, prompt_token_logprobs, unload_adapter

        started = time.perf_counter()
        name = f"{self.tag}-{role}-step-{self._step:06d}"
        folder = (self.folder / f"step-{self._step:06d}" / role).resolve()
        shutil.rmtree(folder, ignore_errors=True)
        self.model.save_peft(role, folder, {"written_by": "hindsight rollout sync", "role": role,
                                            "step": self._step, "base_model": self.model.backend.spec})
        # The name may still be loaded by an interrupted process of the same run.
        unload_adapter(self.client, name, missing_ok=True)
        load_adapter(self.client, name, folder)
        served = [prompt_token_logprobs(self.client, name, ids) for ids in self._probes]
        trained = [list(row) for row in self.model.sequence_logprobs(role, self._probes)]
        gap = compare_logprobs(served, trained)
        if gap.mean_relative > self.tolerance:
            raise ServedRolloutError(
                f"the rollout server {self.client.base_url} does not serve the trained weights: under adapter {name} "
                f"its log-probs of the probe tokens are {gap.mean_relative:.3g} from the trainer's (mean |server − "
                f"trainer| / (1 + |log p|); tolerance {self.tolerance:g}; largest gap {gap.max_abs:.3g} nats): it "
                "kept older weights, or serves another base model or tokenizer"
            )
        change, confirmed = probe_change(trained, self._confirmed.get(role), self.tolerance)
        if confirmed:
            self._confirmed[role] = trained
        previous = self._serving.get(role)
        self._serving[role] = ServedAdapter(name, folder)
        self._stale.discard(role)
        if previous is not None and previous.name != name:
            unload_adapter(self.client, previous.name, missing_ok=True)
            # The server may read a folder again whenever it evicts and reloads an adapter it
            # serves, so a folder goes only once its adapter is unloaded.
            shutil.rmtree(previous.folder, ignore_errors=True)
            if not any(previous.folder.parent.iterdir()):
                previous.folder.parent.rmdir()
        self._reports.append(SyncReport(role, name, time.perf_counter() - started, gap, change, confirmed))
        logger.info("rollout server serves %s (gap %.2g, %.1f s)", name, gap.mean_relative,
                    time.perf_counter() - started)

    def checked(self, completion: Completion, adapter: str) -> Completion:
        """A server's completion made fit for training: token ids and log-probs present, end of turn cut.

        The in-process backend leaves the end-of-turn token out of `token_ids` (training adds
        it back from `finish_reason`); vLLM keeps it, so it is cut here the same way.
        """
        if completion.error is not None:
            return completion  # recorded as a failed turn, as any backend's error is
        ids, logprobs = completion.token_ids, completion.logprobs
        if ids is None or logprobs is None or len(ids) != len(logprobs):
            raise ServedRolloutError(
                f"the rollout server {self.client.base_url} answered adapter {adapter} without the sampled token ids "
                "and their log-probs, which training needs (vLLM gives them for logprobs: true with "
                "return_tokens_as_token_ids: true; this server ignored them)"
            )
        if ids and ids[-1] in self.model.backend.eos_ids:
            ids, logprobs = ids[:-1], logprobs[:-1]
        return replace(completion, token_ids=ids, logprobs=logprobs)

    def close(self) -> None:
        """Unload this run's adapters, close the connections, stop a server this run started."""
        from hindsight.llm.vllm import unload_adapter

        try:
            for adapter in self._serving.values():
                unload_adapter(self.client, adapter.name, missing_ok=True)
        except ModelError as exc:
            logger.warning("could not unload the run's adapters from the rollout server: %s", exc)
        self._serving.clear()
        self.client.close()
        if self.server is not None:
            self.server.close()


class ServedSampler:
    """The backend a served run generates with: the active role's adapter on the server."""

    def __init__(self, policy: ServedPolicy) -> None:
        self.policy = policy
        self.spec = policy.client.spec

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        adapter = self.policy.adapter(self.policy.model.active)
        completions = self.policy.client.with_model(adapter).generate(requests, params)
        return [self.policy.checked(completion, adapter) for completion in completions]


def run_tag(run_dir: Path) -> str:
    """A prefix for a run's adapter names: its folder's name and a short hash of its path, so that
    runs sharing a server never load under each other's names."""
    resolved = str(run_dir.resolve())
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_dir.resolve().name).strip("-") or "run"
    return f"{readable}-{hashlib.sha256(resolved.encode()).hexdigest()[:6]}"


def served_base(backend: HFBackend) -> Path:
    """The folder a started vLLM server loads the base model from: the run's model folder, or the
    converted copy of a GGUF file. A base with merged adapters exists only in memory."""
    from hindsight.llm.hf import convert_gguf

    if "+" in backend.spec or backend.source is None:
        raise ConfigError(f"rollout_server: vllm serves the base model from its folder, and {backend.spec} has "
                          "none (adapters merged in memory); save the merged model, start `vllm serve` on it "
                          "with --enable-lora, and give its URL as rollout_server")
    return convert_gguf(backend.source) if backend.source.is_file() else backend.source
