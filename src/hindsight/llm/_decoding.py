"""Decoding hooks for `HFBackend`, kept apart so that `hindsight.llm.hf` imports without torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each distribution given by normalised log-probabilities.

    `log_probs` has shape (..., V) and each row along the last axis is a log-softmax:
    the result has shape (...) and holds H = -sum_v p_v log p_v. Entries of probability
    0 (log-prob -inf, as after masking) contribute nothing instead of NaN.
    """
    return torch.special.entr(log_probs.exp()).sum(dim=-1)


class LogprobRecorder(LogitsProcessor):
    """Records log p(token) of each generated token, and the entropy it was drawn from.

    At step t it sees the token chosen at step t-1 (the last column of `input_ids`) and
    reads its log-probability from the distribution saved at step t-1; `finish` reads
    the final token. The entropy of each step's whole distribution is taken when the
    distribution arrives (one extra vocabulary-sized pass). Only one step's distribution
    is held at a time, so memory does not grow with the number of new tokens. It must run
    before any processor that edits the logits (the backend guarantees this) to report
    the unfiltered distribution.
    """

    def __init__(self) -> None:
        self._previous: torch.Tensor | None = None
        self._collected: list[torch.Tensor] = []
        self._entropies: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._previous is not None:
            self._collected.append(self._previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        self._entropies.append(entropy_from_log_probs(self._previous))
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """Log-probs of all generated tokens, shape (batch, new tokens)."""
        if self._previous is not None:
            self._collected.append(self._previous.gather(1, sequences[:, -1:]).squeeze(1))
            self._previous = None
        if not self._collected:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self._collected, dim=1)

    def entropies(self, batch: int) -> torch.Tensor:
        """Entropy of the distribution of every generated position, shape (batch, new tokens)."""
        if not self._entropies:
            return torch.zeros((batch, 0))
        return torch.stack(self._entropies, dim=1)


class StopStrings(StoppingCriteria):
    """A row is done once its generated text contains one of the stop strings.

    Only a tail window of each row is decoded per step: a stop string of n characters
    spans at most about n tokens (a few more when tokens split multi-byte characters).
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str], *, prompt_width: int) -> None:
        self._tokenizer = tokenizer
        self._stops = tuple(stop for stop in stops if stop)
        self._prompt_width = prompt_width
        self._window = 4 * max((len(stop) for stop in self._stops), default=1) + 8

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None, **kwargs: Any
    ) -> torch.BoolTensor:
        start = max(self._prompt_width, input_ids.shape[1] - self._window)
        tails = self._tokenizer.batch_decode(input_ids[:, start:].tolist(), skip_special_tokens=True)
        done = [any(stop in tail for stop in self._stops) for tail in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
