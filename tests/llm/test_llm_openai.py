"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1.

The server runs in a thread; each test installs a handler that decides, per request,
the status, headers, body and an optional delay. Nothing is mocked on the client side.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hindsight.llm import ModelError, load_model
from hindsight.llm.openai import OpenAIBackend
from hindsight.types import GenerationRequest, SamplingParams, conversation

SECRET = "sk-test-9f8e7d6c5b4a-do-not-leak"
PARAMS = SamplingParams(temperature=0, max_new_tokens=16)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def chat_reply(text: str, **extra: Any) -> Reply:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", **extra}
    return Reply(body={"id": "x", "object": "chat.completion", "choices": [choice]})


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    payload: dict[str, Any]


class FakeServer:
    """A threaded HTTP server whose answers come from `self.handler(seen, attempt)`."""

    def __init__(self) -> None:
        self.handler: Callable[[Seen, int], Reply] = lambda seen, attempt: chat_reply("ok")
        self.seen: list[Seen] = []
        self.attempts: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = {}
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, payload)
                key = payload.get("messages", [{}])[-1].get("content", "")
                with server._lock:
                    server.seen.append(seen)
                    server.attempts[key] += 1
                    attempt = server.attempts[key]
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                try:
                    reply = server.handler(seen, attempt)
                    if reply.delay:
                        time.sleep(reply.delay)
                    body = reply.body if isinstance(reply.body, (bytes, str)) else json.dumps(reply.body)
                    data = body.encode() if isinstance(body, str) else body
                    self.send_response(reply.status)
                    content_type = "application/json" if not isinstance(reply.body, (bytes, str)) else "text/html"
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test); nothing to answer
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.close()


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def backend_for(server: FakeServer, **options: Any) -> OpenAIBackend:
    options = {"backoff": 0.001, "max_backoff": 0.05, "timeout": 5.0, **options}
    return OpenAIBackend("test-model", base_url=server.url, **options)


def req(text: str) -> GenerationRequest:
    return GenerationRequest(conversation(("system", "be brief"), ("user", text)))


def test_normal_answers_in_order_with_payload_and_key(server, keyed):
    server.handler = lambda seen, attempt: chat_reply(f"echo {seen.payload['messages'][-1]['content']}")
    with backend_for(server) as backend:
        params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32, seed=11, stop=("</action>",))
        out = backend.generate([req(f"q{i}") for i in range(5)], params)
    assert [c.text for c in out] == [f"echo q{i}" for i in range(5)]
    assert all(c.error is None and c.finish_reason == "stop" for c in out)
    seen = server.seen[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    payload = seen.payload
    assert payload["model"] == "test-model"
    assert payload["messages"][0] == {"role": "system", "content": "be brief"}
    assert (payload["temperature"], payload["top_p"], payload["max_tokens"]) == (0.7, 0.9, 32)
    assert payload["seed"] == 11 and payload["stop"] == ["</action>"]
    assert "logprobs" not in payload


def test_seed_and_stop_are_omitted_when_unset(server, keyed):
    with backend_for(server) as backend:
        backend.generate([req("q")], SamplingParams())
    assert "seed" not in server.seen[0].payload and "stop" not in server.seen[0].payload


def test_empty_batch_sends_nothing(server, keyed):
    with backend_for(server) as backend:
        assert backend.generate([], PARAMS) == []
    assert server.seen == []


def test_logprobs_requested_and_parsed(server, keyed):
    logprobs = {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.25}]}
    server.handler = lambda seen, attempt: chat_reply("ab", logprobs=logprobs)
    with backend_for(server, logprobs=True, max_tokens_field="max_completion_tokens") as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.logprobs == (-0.5, -1.25) and out.token_ids is None
    assert server.seen[0].payload["logprobs"] is True
    assert server.seen[0].payload["max_completion_tokens"] == 16


def test_extra_body_is_merged(server, keyed):
    with backend_for(server, extra_body={"top_k": 20, "repetition_penalty": 1.1}) as backend:
        backend.generate([req("q")], PARAMS)
    assert server.seen[0].payload["top_k"] == 20 and server.seen[0].payload["repetition_penalty"] == 1.1


def test_stop_string_is_cut_client_side_too(server, keyed):
    server.handler = lambda seen, attempt: chat_reply("<action>up</action> trailing")
    with backend_for(server) as backend:
        (out,) = backend.generate([req("q")], SamplingParams(stop=("</action>",)))
    assert out.text == "<action>up" and out.finish_reason == "stop"


def test_requests_overlap_up_to_max_concurrency(server, keyed):
    server.handler = lambda seen, attempt: Reply(body=chat_reply("slow").body, delay=0.4)
    with backend_for(server, max_concurrency=8) as backend:
        out = backend.generate([req(f"q{i}") for i in range(8)], PARAMS)
    assert all(c.text == "slow" for c in out)
    # Counted by the server, not timed: several requests were open at once.
    assert server.peak_in_flight >= 4


def test_concurrency_is_capped(server, keyed):
    server.handler = lambda seen, attempt: Reply(body=chat_reply("slow").body, delay=0.15)
    with backend_for(server, max_concurrency=2) as backend:
        backend.generate([req(f"q{i}") for i in range(6)], PARAMS)
    assert server.peak_in_flight == 2


def test_non_json_body_is_an_error_completion(server, keyed):
    server.handler = lambda seen, attempt: Reply(body="<html>gateway hiccup</html>")
    with backend_for(server) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.text == "" and out.finish_reason == "error"
    assert "not JSON" in out.error and "gateway hiccup" in out.error


@pytest.mark.parametrize("body", [{"object": "chat.completion"}, {"choices": []}, ["a", "list"], {"choices": ["x"]}])
def test_json_without_choices_is_an_error_completion(server, keyed, body):
    server.handler = lambda seen, attempt: Reply(body=body)
    with backend_for(server) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.error and "no choices" in out.error


def test_null_content_reads_as_empty_text(server, keyed):
    server.handler = lambda seen, attempt: chat_reply(None)  # type: ignore[arg-type]
    with backend_for(server) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.text == "" and out.error is None


def test_server_error_is_retried_then_succeeds(server, keyed):
    server.handler = lambda seen, attempt: (
        Reply(500, {"error": {"message": "boom"}}) if attempt == 1 else chat_reply("fine")
    )
    with backend_for(server, max_retries=2) as backend:
        out = backend.generate([req("a"), req("b")], PARAMS)
    assert [c.text for c in out] == ["fine", "fine"]
    assert server.attempts == Counter({"a": 2, "b": 2})


def record_backoff(monkeypatch) -> list[float]:
    """The backend's waits between attempts, recorded instead of slept (so nothing is timed)."""
    waits: list[float] = []
    monkeypatch.setattr("hindsight.llm.openai.time.sleep", waits.append)
    return waits


def test_429_honours_retry_after(server, keyed, monkeypatch):
    def handler(seen: Seen, attempt: int) -> Reply:
        if attempt == 1:
            return Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"})
        return chat_reply("after wait")

    server.handler = handler
    waits = record_backoff(monkeypatch)
    with backend_for(server, max_backoff=5.0) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.text == "after wait"
    assert waits == [pytest.approx(1.0, abs=1e-6)]


def test_retry_after_is_capped_by_max_backoff(server, keyed, monkeypatch):
    def handler(seen: Seen, attempt: int) -> Reply:
        if attempt == 1:
            return Reply(429, {}, headers={"Retry-After": "3600"})
        return chat_reply("ok")

    server.handler = handler
    waits = record_backoff(monkeypatch)
    with backend_for(server, max_backoff=0.1) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.text == "ok" and len(waits) == 1 and waits[0] <= 0.1


def test_slow_answer_times_out_after_retries_in_bounded_time(server, keyed):
    server.handler = lambda seen, attempt: Reply(body=chat_reply("late").body, delay=2.0)
    with backend_for(server, timeout=0.25, max_retries=1) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    # Had the client waited for the 2 s answer, it would have read "late": both attempts gave up.
    assert out.error and "timed out" in out.error and "2 attempts" in out.error
    assert server.attempts["q"] == 2


def test_persistent_failure_gives_up_after_max_retries(server, keyed):
    server.handler = lambda seen, attempt: Reply(503, {"error": {"message": "overloaded"}})
    with backend_for(server, max_retries=3) as backend:
        out = backend.generate([req("a"), req("b")], PARAMS)
    assert all(c.error and "4 attempts" in c.error and "HTTP 503: overloaded" in c.error for c in out)
    assert server.attempts == Counter({"a": 4, "b": 4})


def test_client_errors_are_not_retried(server, keyed):
    server.handler = lambda seen, attempt: Reply(400, {"error": {"message": "bad parameter top_p"}})
    with backend_for(server, max_retries=3) as backend:
        (out,) = backend.generate([req("q")], PARAMS)
    assert out.error == "HTTP 400: bad parameter top_p"
    assert server.attempts["q"] == 1


def test_one_bad_request_does_not_sink_the_batch(server, keyed):
    def handler(seen: Seen, attempt: int) -> Reply:
        if seen.payload["messages"][-1]["content"] == "poison":
            return Reply(422, {"error": "cannot process"})
        return chat_reply("good")

    server.handler = handler
    with backend_for(server) as backend:
        out = backend.generate([req("x"), req("poison"), req("y")], PARAMS)
    assert [c.text for c in out] == ["good", "", "good"]
    assert out[1].error == "HTTP 422: cannot process"


def test_unreachable_server_is_an_error_completion(keyed):
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.001, timeout=2.0)
    (out,) = backend.generate([req("q")], PARAMS)
    assert out.error and "connection error" in out.error
    backend.close()


def test_key_never_leaks_into_errors_logs_or_repr(server, keyed, caplog):
    echo = f"invalid key: Bearer {SECRET}"

    def handler(seen: Seen, attempt: int) -> Reply:
        if seen.payload["messages"][-1]["content"] == "html":
            return Reply(body=f"<pre>{seen.headers['authorization']}</pre>")
        status = 401 if seen.payload["messages"][-1]["content"] == "auth" else 500
        return Reply(status, {"error": {"message": echo}})

    server.handler = handler
    caplog.set_level(logging.DEBUG)
    with backend_for(server, max_retries=1) as backend:
        out = backend.generate([req("auth"), req("flaky"), req("html")], PARAMS)
        text = repr(backend) + str(vars(backend))
    assert all(c.error for c in out)
    assert "[redacted]" in out[0].error and "[redacted]" in out[1].error
    for completion in out:
        assert SECRET not in completion.error
    assert SECRET not in caplog.text
    assert SECRET not in text
    assert "retry" in caplog.text  # the retry path was logged, without the key


def test_missing_key_is_a_configuration_error_only_where_required(monkeypatch, server):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY is not set"):
        OpenAIBackend("gpt-4o-mini")
    with pytest.raises(ModelError, match="MY_KEY is not set"):
        OpenAIBackend("m", base_url=server.url, api_key_env="MY_KEY", require_key=True)
    with OpenAIBackend("m", base_url=server.url) as local:
        (out,) = local.generate([req("q")], PARAMS)
    assert out.text == "ok"
    assert "authorization" not in server.seen[0].headers


def test_api_key_env_names_another_variable(monkeypatch, server):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-secret")
    with OpenAIBackend("m", base_url=server.url, api_key_env="LOCAL_LLM_KEY") as backend:
        backend.generate([req("q")], PARAMS)
    assert server.seen[0].headers["authorization"] == "Bearer local-secret"


def test_openai_base_url_environment_variable_is_honoured(monkeypatch, server, keyed):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
    backend = load_model("openai:env-model", backoff=0.001)
    try:
        (out,) = backend.generate([req("q")], PARAMS)
    finally:
        backend.close()
    assert out.text == "ok"
    assert server.seen[0].payload["model"] == "env-model"
    assert backend.spec == "openai:env-model"


def test_bad_base_url_and_options_are_configuration_errors(keyed):
    with pytest.raises(ModelError, match="http"):
        OpenAIBackend("m", base_url="ftp://example.org")
    with pytest.raises(ModelError, match="max_concurrency"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9", max_concurrency=0)


def test_credentials_in_base_url_are_hidden(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = OpenAIBackend("m", base_url="http://user:hunter2@127.0.0.1:9/v1")
    assert "hunter2" not in repr(backend) and "hunter2" not in backend.base_url
    backend.close()
