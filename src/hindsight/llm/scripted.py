"""Deterministic and privileged policies that answer in the agent's output format.

- `OracleBackend` asks the live environment for an optimal action (`EnvView.oracle_action`).
- `RandomBackend` picks uniformly among the admissible actions with its own seeded RNG.
- `ScriptedBackend` replays fixed responses, in order, across calls.

None of them run a language model: they return no token ids or log-probs. They never
raise while generating; a request they cannot answer comes back as an error completion
(`finish_reason == "error"`), which the agent loop records as an invalid step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import string
import threading
from collections.abc import Sequence
from pathlib import Path

from hindsight.llm.base import ModelError
from hindsight.types import Completion, GenerationRequest, SamplingParams

logger = logging.getLogger(__name__)

#: Plain-text scripts separate responses with a line holding only this marker.
SCRIPT_SEPARATOR = "---"


def format_response(analysis: str, action: str) -> str:
    """A response in the agent's `<analysis>…</analysis><action>…</action>` format."""
    return f"<analysis>{analysis}</analysis><action>{action}</action>"


def error_completion(message: str) -> Completion:
    """A completion that reports failure instead of text."""
    return Completion(text="", finish_reason="error", error=message)


class OracleBackend:
    """Answers every request with the environment's own optimal action.

    Needs `GenerationRequest.env`; a request without it gets an error completion, as
    does one whose `oracle_action()` raises (the exception text is kept as the error).

    With `seed` set (`oracle:SEED`) it breaks ties: where the environment lists several
    optimal actions (`oracle_actions()`, e.g. FrozenLake's moves that each shorten the path),
    it picks one by a hash of the seed and the prompt, so the same prompt always gets the
    same answer while demonstrations do not all prefer the first move in a fixed order.
    Behaviour cloning of a planner that always breaks ties one way learns that order, and
    a policy sure of it has nothing to explore.
    """

    def __init__(self, *, seed: int | None = None, spec: str = "oracle") -> None:
        self.spec = spec
        self.seed = seed

    def __repr__(self) -> str:
        return f"OracleBackend(spec={self.spec!r}, seed={self.seed!r})"

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        return [self._answer(request) for request in requests]

    def _answer(self, request: GenerationRequest) -> Completion:
        if request.env is None:
            return error_completion("the oracle needs the live environment, but the request carries no env")
        if self.seed is not None and not hasattr(request.env, "oracle_actions"):
            return error_completion(f"{self.spec} breaks ties, but {type(request.env).__name__} lists one optimal "
                                    "action only (it has no oracle_actions); use `oracle` without a seed")
        try:
            action = request.env.oracle_action() if self.seed is None else self._tie_broken(request)
        except Exception as exc:  # an env bug must cost one step, not the whole batch of rollouts
            logger.warning("oracle_action() failed", exc_info=True)
            return error_completion(f"oracle_action() failed: {type(exc).__name__}: {exc}")
        reason = "An exact planner over the true state picks this as an optimal next step."
        return Completion(text=format_response(reason, action))

    def _tie_broken(self, request: GenerationRequest) -> str:
        actions = list(request.env.oracle_actions())  # type: ignore[union-attr]  # checked by the caller
        text = "\n".join([str(self.seed), *(f"{m.role}: {m.content}" for m in request.messages)])
        digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        return actions[digest % len(actions)]


class RandomBackend:
    """Picks uniformly among `env.admissible_actions()` with its own RNG.

    With `seed` set, the sequence of choices is reproducible (the global `random`
    module is never touched). When the request has no env, or the env lists no
    admissible actions, it answers with a random lowercase word instead, which the
    environment will treat as an invalid action.
    """

    def __init__(self, *, seed: int | None = None, spec: str = "random") -> None:
        self.spec = spec
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RandomBackend(spec={self.spec!r}, seed={self.seed!r})"

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        return [self._answer(request) for request in requests]

    def _answer(self, request: GenerationRequest) -> Completion:
        try:
            actions = list(request.env.admissible_actions()) if request.env is not None else []
        except Exception as exc:  # same policy as the oracle: one failed step, not a crashed batch
            logger.warning("admissible_actions() failed", exc_info=True)
            return error_completion(f"admissible_actions() failed: {type(exc).__name__}: {exc}")
        with self._lock:
            if actions:
                action = self._rng.choice(actions)
                reason = f"Choosing uniformly at random among {len(actions)} admissible actions."
            else:
                length = self._rng.randint(3, 8)
                action = "".join(self._rng.choice(string.ascii_lowercase) for _ in range(length))
                reason = "No admissible actions are known, so this is a random word."
        return Completion(text=format_response(reason, action))


class ScriptedBackend:
    """Replays a fixed list of responses, one per request, in order across calls.

    Once the script runs out, every further request gets the error completion
    "script exhausted". Safe to share between threads.
    """

    def __init__(self, responses: Sequence[str], *, spec: str = "scripted") -> None:
        bad = [i for i, response in enumerate(responses) if not isinstance(response, str)]
        if bad:
            raise ModelError(
                f"scripted responses must be strings; entry {bad[0]} is {type(responses[bad[0]]).__name__}"
            )
        self.spec = spec
        self.responses: tuple[str, ...] = tuple(responses)
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path, *, spec: str | None = None) -> ScriptedBackend:
        """Load a script with `load_script` (see there for the accepted formats)."""
        return cls(load_script(path), spec=spec or f"scripted:{path}")

    def __repr__(self) -> str:
        return f"ScriptedBackend(spec={self.spec!r}, responses={len(self.responses)}, used={self.used})"

    @property
    def used(self) -> int:
        """How many responses have been handed out so far."""
        return self._next

    @property
    def remaining(self) -> int:
        """How many responses are left."""
        return len(self.responses) - self._next

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        with self._lock:
            out = []
            for _ in requests:
                if self._next < len(self.responses):
                    out.append(Completion(text=self.responses[self._next]))
                    self._next += 1
                else:
                    out.append(error_completion(f"script exhausted: all {len(self.responses)} responses were used"))
            return out


def load_script(path: str | Path) -> list[str]:
    """Read scripted responses from a file; the format follows the file's suffix.

    - `.json`: a JSON list of strings.
    - `.jsonl` / `.ndjson`: one JSON value per non-blank line, either a string or an
      object with a string `"response"`.
    - anything else: plain text; responses are separated by lines holding only `---`,
      and each response is stripped of surrounding whitespace. A trailing separator
      does not add an empty response.

    Raises `ModelError` for a missing file, malformed content, or an empty script.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"script file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read script {path}: {exc}") from exc

    suffix = path.suffix.lower()
    if suffix == ".json":
        responses = _parse_json_script(text, path)
    elif suffix in (".jsonl", ".ndjson"):
        responses = _parse_jsonl_script(text, path)
    else:
        responses = _parse_text_script(text)
    if not responses:
        raise ModelError(f"script {path} holds no responses")
    return responses


def _parse_json_script(text: str, path: Path) -> list[str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"script {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise ModelError(f"script {path} must be a JSON list of strings")
    return data


def _parse_jsonl_script(text: str, path: Path) -> list[str]:
    responses = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ModelError(f"script {path} line {number} is not valid JSON: {exc}") from exc
        if isinstance(item, dict) and isinstance(item.get("response"), str):
            item = item["response"]
        if not isinstance(item, str):
            raise ModelError(f'script {path} line {number} must be a string or an object with a string "response"')
        responses.append(item)
    return responses


def _parse_text_script(text: str) -> list[str]:
    chunks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == SCRIPT_SEPARATOR:
            chunks.append([])
        else:
            chunks[-1].append(line)
    responses = ["\n".join(lines).strip() for lines in chunks]
    if responses and responses[-1] == "":
        responses.pop()
    return responses
