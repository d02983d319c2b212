"""Backend for any OpenAI-compatible `/chat/completions` endpoint, over plain httpx.

Works with the OpenAI API and with self-hosted servers that speak the same protocol
(vLLM, llama.cpp, SGLang, ...). Configuration follows the official SDK:
`OPENAI_BASE_URL` (default https://api.openai.com/v1) and `OPENAI_API_KEY`; both can be
overridden per backend (`base_url=`, `api_key_env=` names another variable). Keys are
read from the environment only.

Failure policy: each request is retried on connection errors, timeouts, HTTP 429 and
HTTP 5xx with exponential backoff and jitter (a server's `Retry-After` is honoured, up
to `max_backoff`). Other 4xx answers are not retried. A request that still fails, or
whose answer is unreadable, comes back as a `Completion` with `error` set; `generate`
never raises for a bad request. Only configuration mistakes raise `ModelError`, at
construction.

The API key never leaves the Authorization header: it is kept out of `repr`, logs and
error texts, and is scrubbed from anything a server echoes back.

Token ids: with `token_ids=True` each request asks for log-probs with vLLM's
`return_tokens_as_token_ids`, which writes every sampled token as `token_id:N`; the
completion then carries the ids the server sampled (`Completion.token_ids`), which a
trainer needs to score exactly those tokens. Servers that ignore the field answer with
text tokens, and the completion has no ids. `post` reaches the server's other endpoints
(vLLM's adapter loading, `/completions`) with the same retries.
"""

from __future__ import annotations

import copy
import email.utils
import logging
import os
import random
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import httpx

from hindsight.llm.base import ModelError
from hindsight.types import Completion, GenerationRequest, SamplingParams

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
REDACTED = "[redacted]"
#: Hosts that always need a key; other endpoints (local servers) may run without one.
KEYED_HOSTS = frozenset({"api.openai.com"})
#: Longest server text quoted in an error message.
SNIPPET_CHARS = 200
#: How vLLM writes a token under `return_tokens_as_token_ids`.
_TOKEN_ID = re.compile(r"token_id:(\d+)")


class _Secret:
    """Holds the API key so that printing or logging the holder shows nothing."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


@dataclass(frozen=True)
class _Attempt:
    """The outcome of one HTTP attempt: a completion or an accepted response, or a reason plus whether to retry."""

    completion: Completion | None = None
    response: httpx.Response | None = None
    reason: str = ""
    retry: bool = False
    retry_after: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.completion is not None or self.response is not None


class OpenAIBackend:
    """Concurrent chat completions against an OpenAI-compatible server.

    Options:
        model: the model name sent in each request.
        base_url: endpoint root (ending in `/v1` for most servers); default `$OPENAI_BASE_URL`,
            else https://api.openai.com/v1.
        api_key_env: environment variable holding the key (default `OPENAI_API_KEY`).
        require_key: refuse to start without a key; default True only for api.openai.com.
        max_concurrency: requests in flight at once (default 8).
        timeout: seconds allowed per HTTP attempt (default 60).
        max_retries: extra attempts after the first (default 3).
        backoff: first retry delay in seconds, doubled each retry, with jitter (default 0.5).
        max_backoff: cap on any single delay, `Retry-After` included (default 30).
        logprobs: ask the server for per-token log-probs (default False).
        token_ids: also ask for the sampled token ids (vLLM's `return_tokens_as_token_ids`;
            implies logprobs; default False).
        max_tokens_field: JSON field carrying `max_new_tokens`; newer OpenAI models want
            `max_completion_tokens` (default `max_tokens`, which other servers expect).
        extra_body: extra JSON fields merged into every request (server-specific knobs).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        require_key: bool | None = None,
        max_concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        logprobs: bool = False,
        token_ids: bool = False,
        max_tokens_field: str = "max_tokens",
        extra_body: Mapping[str, Any] | None = None,
        spec: str | None = None,
    ) -> None:
        if not model:
            raise ModelError("openai: needs a model name, e.g. openai:gpt-4o-mini")
        if max_concurrency < 1:
            raise ModelError("max_concurrency must be >= 1")
        if timeout <= 0:
            raise ModelError("timeout must be > 0 seconds")
        if max_retries < 0 or backoff < 0 or max_backoff < 0:
            raise ModelError("max_retries, backoff and max_backoff must be >= 0")

        url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ModelError(f"base URL must be an http(s) URL, got {_strip_userinfo(url)!r}")
        key_value = os.environ.get(api_key_env, "").strip()
        needs_key = require_key if require_key is not None else parts.hostname in KEYED_HOSTS
        if needs_key and not key_value:
            raise ModelError(f"{api_key_env} is not set; {parts.hostname} needs an API key from the environment")

        self.model = model
        self.spec = spec or f"openai:{model}"
        self.base_url = _strip_userinfo(url)
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.logprobs = logprobs or token_ids
        self.token_ids = token_ids
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self._key = _Secret(key_value) if key_value else None
        self._jitter = random.Random()
        headers = {"Authorization": f"Bearer {key_value}"} if key_value else {}
        self._client = httpx.Client(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )

    def __repr__(self) -> str:
        keyed = "set" if self._key else "none"
        return f"OpenAIBackend(spec={self.spec!r}, base_url={self.base_url!r}, key={keyed})"

    def close(self) -> None:
        """Close the pooled HTTP connections (shared with every `with_model` copy)."""
        self._client.close()

    def with_model(self, model: str) -> OpenAIBackend:
        """This backend asking for another model of the same server (e.g. a LoRA adapter by its
        name), on the same connection pool and with the same settings."""
        if not model:
            raise ModelError("with_model needs a model name")
        other = copy.copy(self)
        other.model, other.spec = model, f"openai:{model}"
        return other

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- generation

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        """Send every request (up to `max_concurrency` at once); one completion each, in order."""
        payloads = [self._payload(request, params) for request in requests]
        if len(payloads) <= 1:
            return [self._complete(payload, params) for payload in payloads]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(payloads))) as pool:
            return list(pool.map(lambda payload: self._complete(payload, params), payloads))

    def _payload(self, request: GenerationRequest, params: SamplingParams) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            self.max_tokens_field: params.max_new_tokens,
        }
        if params.stop:
            payload["stop"] = list(params.stop)
        if params.seed is not None:
            payload["seed"] = params.seed
        if self.logprobs:
            payload["logprobs"] = True
        if self.token_ids:
            payload["return_tokens_as_token_ids"] = True
        payload.update(self.extra_body)
        return payload

    def post(self, path: str, payload: Mapping[str, Any], *, tolerate: Collection[int] = ()) -> httpx.Response:
        """POST a JSON body to another endpoint of the server (`path` under the base URL), with the
        same retries; the accepted response, or one whose status is in `tolerate`.

        Raises `ModelError` (one line, key scrubbed) when the request still fails.
        """
        outcome = self._with_retries(lambda: self._send(path, dict(payload), tolerate))
        if outcome.response is None:
            raise ModelError(f"{self.base_url}{path}: {outcome.reason}")
        return outcome.response

    def _complete(self, payload: dict[str, Any], params: SamplingParams) -> Completion:
        outcome = self._with_retries(lambda: self._attempt(payload, params))
        return outcome.completion if outcome.completion is not None else self._fail(outcome.reason)

    def _with_retries(self, attempt_once: Callable[[], _Attempt]) -> _Attempt:
        """The first attempt that succeeds, else a failed attempt whose reason says why (scrubbed)."""
        attempts = self.max_retries + 1
        reason = "no attempt made"
        for attempt in range(attempts):
            last = attempt_once()
            if last.succeeded:
                return last
            # Scrub before the reason goes anywhere: servers sometimes echo the
            # Authorization header back in their error bodies.
            reason = self._redact(last.reason)
            if not last.retry:
                return _Attempt(reason=reason)
            if attempt + 1 < attempts:
                delay = self._delay(attempt, last.retry_after)
                logger.info("%s: %s; retry %d/%d in %.2f s", self.spec, reason, attempt + 1, self.max_retries, delay)
                time.sleep(delay)
        plural = "s" if attempts != 1 else ""
        return _Attempt(reason=f"gave up after {attempts} attempt{plural}: {reason}")

    def _attempt(self, payload: dict[str, Any], params: SamplingParams) -> _Attempt:
        sent = self._send("/chat/completions", payload)
        return self._parse(sent.response, params) if sent.response is not None else sent

    def _send(self, path: str, payload: dict[str, Any], tolerate: Collection[int] = ()) -> _Attempt:
        try:
            response = self._client.post(path, json=payload)
        except httpx.TimeoutException:
            return _Attempt(reason=f"timed out after {self.timeout:g} s", retry=True)
        except httpx.TransportError as exc:
            return _Attempt(reason=f"connection error ({type(exc).__name__})", retry=True)

        status = response.status_code
        if status in tolerate:
            return _Attempt(response=response)
        if status == 429 or status >= 500:
            return _Attempt(
                reason=f"HTTP {status}: {self._server_message(response)}",
                retry=True,
                retry_after=_retry_after_seconds(response.headers.get("retry-after")),
            )
        if status >= 400:
            return _Attempt(reason=f"HTTP {status}: {self._server_message(response)}")
        if not 200 <= status < 300:
            return _Attempt(reason=f"unexpected HTTP {status}")
        return _Attempt(response=response)

    def _parse(self, response: httpx.Response, params: SamplingParams) -> _Attempt:
        try:
            data = response.json()
        except ValueError:
            return _Attempt(reason=f"response is not JSON: {_snippet(response.text)!r}")
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return _Attempt(reason=f"response has no choices: {_snippet(response.text)!r}")
        choice = choices[0]
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str):
            return _Attempt(reason="response message content is not text")
        text = content or ""
        finish = choice.get("finish_reason") or "stop"
        # Servers apply `stop` themselves; cutting here too keeps the result the same
        # for servers that echo the stop string or ignore the field.
        cut = _first_stop(text, params.stop)
        if cut is not None:
            text, finish = text[:cut], "stop"
        token_ids, logprobs = _parse_logprobs(choice, self.token_ids)
        return _Attempt(completion=Completion(text=text, token_ids=token_ids, logprobs=logprobs,
                                              finish_reason=str(finish)))

    def _server_message(self, response: httpx.Response) -> str:
        try:
            data = response.json()
        except ValueError:
            return _snippet(response.text) or response.reason_phrase
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _snippet(error["message"])
        if isinstance(error, str):
            return _snippet(error)
        return _snippet(response.text)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        ceiling = min(self.max_backoff, self.backoff * 2**attempt)
        # "Equal jitter": at least half the exponential step, so clients that failed
        # together spread out without any of them retrying immediately.
        return ceiling / 2 + self._jitter.uniform(0, ceiling / 2)

    def _fail(self, reason: str) -> Completion:
        logger.warning("%s: request failed: %s", self.spec, reason)
        return Completion(text="", finish_reason="error", error=reason)

    def _redact(self, text: str) -> str:
        if self._key is not None:
            text = text.replace(self._key.reveal(), REDACTED)
        return text


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    positions = [found for found in (text.find(stop) for stop in stops if stop) if found >= 0]
    return min(positions) if positions else None


def parse_token_id(token: object) -> int | None:
    """The id in vLLM's `token_id:N` form of a token (`return_tokens_as_token_ids`), else None."""
    match = _TOKEN_ID.fullmatch(token) if isinstance(token, str) else None
    return int(match.group(1)) if match else None


def _parse_logprobs(
    choice: Mapping[str, Any], with_ids: bool,
) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """(token ids, log-probs) of a chat choice's `logprobs.content`; each None where unreadable.

    Ids are read only when they were asked for (`with_ids`): only then is `token_id:N` a
    promise of the server rather than text the model happened to write.
    """
    block = choice.get("logprobs")
    entries = block.get("content") if isinstance(block, dict) else None
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        return None, None
    values = [entry.get("logprob") for entry in entries]
    numeric = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values)
    logprobs = tuple(float(value) for value in values) if numeric else None
    if not with_ids:
        return None, logprobs
    ids = [parse_token_id(entry.get("token")) for entry in entries]
    return (tuple(ids) if all(token_id is not None for token_id in ids) else None), logprobs


def _retry_after_seconds(header: str | None) -> float | None:
    """Seconds from a Retry-After header: a number of seconds or an HTTP date."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def _strip_userinfo(url: str) -> str:
    # Credentials embedded in a URL (https://user:pass@host) are as secret as the key.
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{REDACTED}@{host}", parts.path, parts.query, parts.fragment))
