"""Core value types shared by every layer.

Everything here is a frozen dataclass built from plain Python values, so it can be
hashed, compared, pickled and written to JSON without special cases. This module
imports nothing from the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat conversation."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown chat role {self.role!r}; expected one of {ROLES}")


Conversation = tuple[ChatMessage, ...]


@runtime_checkable
class EnvView(Protocol):
    """What a privileged policy (oracle, random) may ask of the live environment.

    Language-model backends never see this; it lets `oracle` and `random` act on the
    true state without the model layer importing the environment layer. The whole
    environment contract, `hindsight.envs.contract.Env`, extends it.
    """

    def oracle_action(self) -> str:
        """An optimal next action from the current state."""

    def admissible_actions(self) -> Sequence[str]:
        """Legal actions from the current state (may be empty when unknown)."""


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings passed to every backend.

    `seed` makes sampling reproducible where the backend allows it; `None` means
    nondeterministic. `temperature == 0` means greedy decoding.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt for a backend. `env` is only read by privileged policies."""

    messages: Conversation
    env: EnvView | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Completion:
    """A backend's answer to one request.

    `token_ids` / `logprobs` are the generated tokens and their log-probabilities under
    the sampling distribution, when the backend can report them. `error` is set (and
    `text` is empty) when the backend gave up on this request; the agent loop records
    such a turn as an invalid step instead of crashing.

    Backends that see the whole next-token distribution (the transformers backend) also
    fill `entropies` and `token_ends`, one entry per generated token: `entropies[i]` is
    the entropy in nats of the model's distribution over the vocabulary at the position
    token i was drawn from, and `token_ends[i]` is the character offset in `text` where
    the text of tokens 0..i ends. Together they let the agent keep the entropy of the
    tokens of the parsed action only. Both are None when the backend cannot say.
    """

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str = "stop"
    error: str | None = None
    entropies: tuple[float, ...] | None = None
    token_ends: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Assessment:
    """What the policy wrote before its action at one turn, shown to it in the action prompt.

    `kind` names the writer: `self-guide` (Self-Guide's self-assessment z_t of the latest
    step, with a `label` in {negative, neutral, positive} and its step `reward`) or
    `reflection` (ReFlAct's reflection on the goal, no label). `text` is the answer as
    generated; `parse_error` says why no label could be read (the label then counts as
    neutral). Token ids, log-probs and the finish reason are the backend's, for training.
    """

    kind: str
    text: str
    label: str | None = None
    reward: float = 0.0
    parse_error: str | None = None
    finish_reason: str | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Candidate:
    """One sampled candidate of a step-level best-of-N turn.

    `action` is what parsing the candidate's response found (None when it was unreadable);
    `score` is the process reward model's rating of it (None when it was not rated, as an
    unreadable candidate is not). `prm_error` says why the PRM fell back to a stated score
    instead (an LLM judge's unreadable answer), so a run shows how often its choices rest on that.
    """

    action: str | None
    score: float | None = None
    prm_error: str | None = None


@dataclass(frozen=True)
class Step:
    """One agent turn: what it saw, what it said, what happened.

    `observation` and `state_key` describe the state *before* the action. `reward` and
    `score` are what the environment returned for this action; `feedback` is the
    observation the action produced (the next step's `observation`, or the final one).
    `finish_reason` is the backend's ("stop" or "length"); training uses it to decide
    whether the response ended with an end-of-turn token. `assessment` is a generation
    the policy wrote before acting at this turn, if the run asked for one.
    `action_entropies` holds, for each token of the parsed action inside `raw`, the
    entropy (nats) of the model's next-token distribution at that token; None when the
    backend reported no entropies or no action was found in the response.
    `candidates` holds, at a step-level best-of-N turn, every sampled candidate with its
    process reward, in sampling order; the step's own response is the highest-rated one.
    """

    index: int
    observation: str
    state_key: str
    raw: str
    action: str | None
    analysis: str | None
    valid: bool
    reward: float
    score: float
    feedback: str
    parse_error: str | None = None
    finish_reason: str | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    admissible_actions: tuple[str, ...] | None = None
    assessment: Assessment | None = None
    action_entropies: tuple[float, ...] | None = None
    candidates: tuple[Candidate, ...] | None = None


@dataclass(frozen=True)
class Trajectory:
    """A whole episode on one task instance.

    `success` and `score` are the final values reported by the environment. A
    trajectory that succeeded has `success_turn == len(steps)`. `guidance` is advice
    the policy was shown in its system prompt for this episode (e.g. an ECHO critique;
    empty for a plain attempt); prompts are rebuilt from it, so it is part of the record.
    """

    env: str
    seed: int
    instruction: str
    steps: tuple[Step, ...]
    final_observation: str
    final_state_key: str
    success: bool
    score: float
    terminated: bool
    truncated: bool
    split: str = "test"
    model: str = ""
    memory: str = "full"
    id: str = ""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    guidance: str = ""

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def success_turn(self) -> int | None:
        return len(self.steps) if self.success else None

    def with_meta(self, **meta: Any) -> Trajectory:
        return replace(self, meta={**self.meta, **meta})


def conversation(*pairs: tuple[str, str]) -> Conversation:
    """Build a conversation from (role, content) pairs."""
    return tuple(ChatMessage(role, content) for role, content in pairs)
