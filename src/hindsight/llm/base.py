"""The model-backend interface.

Every backend turns a batch of chat conversations into completions in one call:

    backend.generate([GenerationRequest(messages), ...], SamplingParams(...))

Backends are addressed by a spec string, `provider:name` (see `hindsight.llm.load_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from hindsight.types import Completion, GenerationRequest, SamplingParams


class ModelError(Exception):
    """A user-facing model error: unknown spec, missing file, bad configuration."""


@runtime_checkable
class ModelBackend(Protocol):
    """Batched chat generation.

    `generate` returns one `Completion` per request, in order. A request that fails
    after the backend's own retries comes back with `Completion.error` set rather than
    raising, so one bad request never sinks a whole batch of rollouts.
    """

    spec: str

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]: ...
