"""When are two states "the same"? Pluggable state equality for loop detection.

Loop finders only compare states for equality, so each rule here maps the states of one
trajectory to hashable "tokens" such that equal tokens mean equal states:

* `ExactState` — the canonical ``state_key`` when the log has one, otherwise the
  observation text, compared exactly. This is the default. Official TIDE logs carry no
  state key, so for them it compares observation text (as the TIDE analysis does).
* `NormalisedText` — observation text compared after lower-casing and collapsing
  whitespace, for logs whose renderings differ only in formatting.
* `EmbeddingCosine` — two states are the same when the cosine similarity of their
  embedding vectors is at least a threshold (TIDE uses 0.999 on screenshot embeddings).
  Vectors come from the log (the generic schema's per-step ``embedding``) or from an
  ``embed`` function the caller supplies. Similarity is not transitive, so each state
  joins the first earlier cluster whose representative (its first member) is similar
  enough; this makes the grouping deterministic and order-dependent, like the greedy
  matching in the reference analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Protocol, Sequence

from hindsight.logs.importers import TrajectoryView


class StateEquality(Protocol):
    """Maps a trajectory's states to hashable tokens; equal tokens mean equal states."""

    name: str

    def tokens(self, view: TrajectoryView, include_final: bool = False) -> Sequence[Hashable]:
        """Tokens for the state before each step (and the final state when asked and known)."""


def _with_final(states: Sequence[str], final: str | None, include_final: bool) -> Sequence[str]:
    if include_final and final is not None:
        return (*states, final)
    return states


@dataclass(frozen=True)
class ExactState:
    name: str = "exact"

    def tokens(self, view: TrajectoryView, include_final: bool = False) -> Sequence[Hashable]:
        # The texts themselves are the tokens: hashing a string once is cheaper than
        # mapping it to an integer first.
        return _with_final(view.states, view.final_state, include_final)


def normalise_text(text: str) -> str:
    """Lower case with runs of whitespace collapsed to one space and the ends trimmed."""
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class NormalisedText:
    name: str = "text"

    def tokens(self, view: TrajectoryView, include_final: bool = False) -> Sequence[Hashable]:
        texts = _with_final(view.observations, view.final_observation, include_final)
        return [normalise_text(text) for text in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """cos(a, b) = a·b / (|a| |b|); 1.0 for two zero vectors (identical), 0.0 for one."""
    dot = math.fsum(x * y for x, y in zip(a, b))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norm == 0.0:
        return 1.0 if not any(a) and not any(b) else 0.0
    return dot / norm


@dataclass(frozen=True)
class EmbeddingCosine:
    threshold: float = 0.999
    embed: Callable[[str], Sequence[float]] | None = None
    name: str = "embedding"

    def __post_init__(self) -> None:
        if not -1.0 <= self.threshold <= 1.0:
            raise ValueError("cosine threshold must be in [-1, 1]")

    def _vectors(self, view: TrajectoryView, include_final: bool) -> list[Sequence[float]]:
        if self.embed is not None:
            texts = _with_final(view.observations, view.final_observation, include_final)
            return [self.embed(text) for text in texts]
        if view.embeddings is None or any(vector is None for vector in view.embeddings):
            raise ValueError(
                f"trajectory {view.id or view.source!r} has no per-step embeddings; "
                "log them or pass an embed function"
            )
        # Logs carry no embedding of the final state, so it is never included here.
        return list(view.embeddings)  # type: ignore[arg-type]

    def tokens(self, view: TrajectoryView, include_final: bool = False) -> list[int]:
        representatives: list[Sequence[float]] = []
        tokens = []
        for vector in self._vectors(view, include_final):
            for token, rep in enumerate(representatives):
                if cosine(vector, rep) >= self.threshold:
                    tokens.append(token)
                    break
            else:
                tokens.append(len(representatives))
                representatives.append(vector)
        return tokens


def make_equality(name: str, threshold: float = 0.999) -> StateEquality:
    """The equality rule called `name` ("exact", "text" or "embedding")."""
    if name == "exact":
        return ExactState()
    if name == "text":
        return NormalisedText()
    if name == "embedding":
        return EmbeddingCosine(threshold=threshold)
    raise ValueError(f"unknown state equality {name!r}; expected exact, text or embedding")


EQUALITIES = ("exact", "text", "embedding")
