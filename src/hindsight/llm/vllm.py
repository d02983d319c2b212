"""vLLM: starting `vllm serve`, swapping LoRA adapters in a running server, scoring tokens.

What a vLLM server offers beyond the OpenAI protocol, and what Hindsight uses of it
(`hindsight.train.served` for training with a rollout server, `vllm:MODEL` otherwise):

- `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` reads a PEFT adapter folder and
  serves it under that name; `POST /v1/unload_lora_adapter {"lora_name"}` drops it. Both
  exist only when the server runs with `--enable-lora` and the environment variable
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`. A request names the adapter as its `model`.
- `/v1/completions` with the prompt given as token ids, `echo: true` and `logprobs`
  answers the log-prob of every prompt token (`prompt_token_logprobs`): the server's own
  scoring of a fixed token sequence, with no tokenizer in between.
- `return_tokens_as_token_ids: true` writes each token of a log-prob list as `token_id:N`.

`VLLMServer` runs `vllm serve` as a subprocess on a free local port (a `LocalServer`); `VLLMBackend` is the
`vllm:MODEL` spec: such a server plus an `OpenAIBackend` that talks to it. Without the
vllm package both refuse with one line that says how to get it or how to point at a
server started elsewhere.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hindsight.llm.base import ModelError
from hindsight.llm.openai import OpenAIBackend, parse_token_id
from hindsight.net import free_port

#: The environment variable vLLM reads its API key from; clients of the servers here send it.
API_KEY_ENV = "VLLM_API_KEY"
#: The LoRA ranks vLLM's `--max-lora-rank` accepts.
MAX_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
#: Seconds between two readiness checks of a starting server.
POLL_SECONDS = 2.0


def vllm_installed() -> bool:
    """Whether the vllm package can be imported here (it is not imported)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm(what: str) -> None:
    """Refuse, in one line, to start a server without the vllm package."""
    if not vllm_installed():
        raise ModelError(
            f"{what} starts `vllm serve`, but the vllm package is not installed here: install it on a GPU "
            "machine (pip install vllm), or point at a server that is already running: openai:MODEL with "
            "OPENAI_BASE_URL=http://HOST:8000/v1, or for training rollout_server: http://HOST:8000/v1"
        )


class LocalServer:
    """An HTTP model server run as a subprocess on a free local port, until `close` (or the end
    of this process): `command(port)` is its command line; it is ready once `GET /health`
    answers 200. Its output goes to `log_path` (default: a temporary file), which errors name;
    a server that exits or is not ready within `startup_timeout` raises `ModelError`. It runs
    in a session of its own, so `close` also stops the processes it started.
    """

    def __init__(
        self,
        name: str,
        command: Callable[[int], list[str]],
        *,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 900.0,
        log_path: Path | None = None,
    ) -> None:
        port = free_port()
        if log_path is None:
            handle, path = tempfile.mkstemp(prefix=f"{name.split()[0]}-serve-", suffix=".log")
            os.close(handle)
            log_path = Path(path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{port}/v1"
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(command(port), stdout=log, stderr=subprocess.STDOUT,
                                            env=dict(env) if env is not None else None, start_new_session=True)
        atexit.register(self.close)
        try:
            self._wait_until_ready(port, startup_timeout)
        except BaseException:
            self.close()
            raise

    def _wait_until_ready(self, port: int, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise ModelError(f"{self.name} exited with code {code} before it was ready: "
                                 f"{_last_line(self.log_path)} (log: {self.log_path})")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=POLL_SECONDS).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ModelError(f"{self.name} was not ready after {timeout:g} s (log: {self.log_path})")
            time.sleep(POLL_SECONDS)

    def close(self) -> None:
        """Stop the server and the processes it started (idempotent)."""
        if self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


class VLLMServer(LocalServer):
    """`vllm serve MODEL` on a free local port, until `close` (or the end of this process).

    `enable_lora` adds `--enable-lora`, `--max-lora-rank` (the smallest rank vLLM accepts
    that holds `max_lora_rank`) and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, so adapters
    can be loaded while it runs. `serve_args` go to `vllm serve` as they are. The server's
    output goes to `log_path` (default: a temporary file), which errors name. Callers check
    `require_vllm` first, for a message in their own terms.
    """

    def __init__(
        self,
        model: str,
        *,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        serve_args: Sequence[str] = (),
        startup_timeout: float = 900.0,
        log_path: Path | None = None,
    ) -> None:
        options: list[str] = []
        env = dict(os.environ)
        if enable_lora:
            rank = next((r for r in MAX_LORA_RANKS if r >= max_lora_rank), max_lora_rank)
            options += ["--enable-lora", "--max-lora-rank", str(rank)]
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        options += list(serve_args)
        vllm = _vllm_command()
        self.model = model
        super().__init__(
            f"vllm serve {model}",
            lambda port: [vllm, "serve", model, "--host", "127.0.0.1", "--port", str(port), *options],
            env=env, startup_timeout=startup_timeout, log_path=log_path)


class VLLMBackend(OpenAIBackend):
    """The `vllm:MODEL` spec: starts `vllm serve MODEL` and generates through it.

    Options: `enable_lora` (start it ready for runtime adapter loading, as training with a
    rollout server needs), `serve_args` (more `vllm serve` arguments), `startup_timeout`
    (seconds; loading a large model takes minutes), and the OpenAI backend's
    `max_concurrency`, `timeout`, `max_retries`, `logprobs`, `token_ids`. `close` stops the
    server. The key, if the server is to require one, is read from `VLLM_API_KEY` by both.
    """

    def __init__(
        self,
        model: str,
        *,
        enable_lora: bool = False,
        serve_args: Sequence[str] = (),
        startup_timeout: float = 900.0,
        max_concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 3,
        logprobs: bool = False,
        token_ids: bool = False,
        spec: str | None = None,
    ) -> None:
        require_vllm("vllm:MODEL")
        self.server = VLLMServer(model, enable_lora=enable_lora, serve_args=serve_args,
                                 startup_timeout=startup_timeout)
        try:
            super().__init__(model, base_url=self.server.url, api_key_env=API_KEY_ENV, require_key=False,
                             max_concurrency=max_concurrency, timeout=timeout, max_retries=max_retries,
                             logprobs=logprobs, token_ids=token_ids, spec=spec or f"vllm:{model}")
        except BaseException:
            self.server.close()
            raise

    def close(self) -> None:
        """Close the connections and stop the server (shared with every `with_model` copy)."""
        super().close()
        self.server.close()


# ---------------------------------------------------------------- runtime adapters


def load_adapter(client: OpenAIBackend, name: str, path: Path) -> None:
    """Serve the PEFT adapter folder `path` under `name` (the server must be able to read `path`)."""
    try:
        client.post("/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
    except ModelError as exc:
        raise ModelError(f"the server did not load adapter {name}: {exc} (vLLM loads adapters only when started "
                         "with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)") from None


def unload_adapter(client: OpenAIBackend, name: str, *, missing_ok: bool = False) -> None:
    """Stop serving adapter `name`; with `missing_ok`, an adapter the server does not know is fine."""
    # vLLM answers an unknown name with 404, older versions with 400.
    tolerate = (400, 404) if missing_ok else ()
    client.post("/unload_lora_adapter", {"lora_name": name}, tolerate=tolerate)


def prompt_token_logprobs(client: OpenAIBackend, model: str, token_ids: Sequence[int]) -> list[float]:
    """The server's log p(token t | tokens before it) for t = 1 … n − 1 of a token sequence under `model`.

    One `/completions` request with the sequence as its prompt, echoed with log-probs;
    the server generates one token, which is not used. Raises `ModelError` when the answer
    holds no such log-probs, or when it echoes other tokens than were sent.
    """
    ids = list(token_ids)
    response = client.post("/completions", {
        "model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1,
        "return_tokens_as_token_ids": True,
    })
    where = f"{client.base_url}/completions ({model})"
    try:
        data = response.json()
    except ValueError:
        raise ModelError(f"{where} answered something that is not JSON") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    block = choice.get("logprobs") if isinstance(choice, dict) else None
    values = block.get("token_logprobs") if isinstance(block, dict) else None
    if not isinstance(values, list) or len(values) < len(ids):
        raise ModelError(f"{where} did not echo the prompt's log-probs (a server without echo with logprobs?)")
    scored = values[1 : len(ids)]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in scored):
        raise ModelError(f"{where} echoed prompt log-probs that are not numbers")
    tokens = block.get("tokens")
    echoed = [parse_token_id(token) for token in tokens[: len(ids)]] if isinstance(tokens, list) else []
    if echoed and all(token is not None for token in echoed) and echoed != ids:
        raise ModelError(f"{where} scored other tokens than it was sent; it must take the prompt as token ids")
    return [float(value) for value in scored]


# ---------------------------------------------------------------- helpers


def _vllm_command() -> str:
    # The console script installed with the package, next to this interpreter or on PATH.
    beside = Path(sys.executable).parent / "vllm"
    found = str(beside) if beside.is_file() else shutil.which("vllm")
    if found is None:
        raise ModelError("the vllm package is installed but its `vllm` command is not found next to "
                         f"{sys.executable} or on PATH")
    return found


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "no output"
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else "no output"
