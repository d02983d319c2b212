"""A stand-in for `vllm serve MODEL --enable-lora`, on a thread of the test process.

It runs a transformers model and answers the part of vLLM's HTTP API that training with a
rollout server uses, computing every token and log-prob with the model:

    POST /v1/load_lora_adapter    {"lora_name", "lora_path"}: reads the PEFT folder with peft and
                                  serves a copy of the base with the adapter merged in
    POST /v1/unload_lora_adapter  {"lora_name"}
    POST /v1/chat/completions     the tokenizer's chat template, then sampling token by token
                                  (temperature, top_p, seed, stop, max_tokens); with `logprobs`
                                  the raw log-prob of each token, written `token_id:N` under
                                  `return_tokens_as_token_ids`; the end-of-turn token is kept
    POST /v1/completions          a prompt of token ids with `echo` and `logprobs`: the
                                  log-prob of each prompt token (null for the first) and of
                                  one greedy token after it

Like vLLM, a known adapter name is refused by load and an unknown one by unload and by
requests. Two faults for tests: `stale=True` accepts every adapter after the first but
keeps serving the first one's weights; `token_ids=False` ignores return_tokens_as_token_ids.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.envs.serving import serving_app


@dataclass
class FakeVLLM:
    """The served state: the base model, the loaded adapters (merged copies) and what was asked."""

    base: Any
    tokenizer: Any
    stale: bool = False
    token_ids: bool = True
    adapters: dict[str, Any] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    chats: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def load(self, name: str, path: str) -> None:
        from peft import PeftModel

        if self.stale and self.adapters:
            self.adapters[name] = next(iter(self.adapters.values()))  # accepted, never read
            return
        wrapped = PeftModel.from_pretrained(copy.deepcopy(self.base), path)
        self.adapters[name] = wrapped.merge_and_unload().eval()

    def model(self, name: str) -> Any | None:
        return self.adapters.get(name)

    def eos_ids(self) -> set[int]:
        configured = self.base.generation_config.eos_token_id
        ids = {configured} if isinstance(configured, int) else set(configured or ())
        return ids | {self.tokenizer.eos_token_id}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def _token(state: FakeVLLM, token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids and state.token_ids else state.tokenizer.decode([token_id])


@torch.no_grad()
def sample(model: Any, prompt: list[int], *, temperature: float, top_p: float, max_tokens: int, seed: int,
           stop: list[str], eos: set[int], tokenizer: Any) -> tuple[list[int], list[float], str]:
    """Tokens, their raw log-probs and the finish reason, one forward pass per token."""
    generator = torch.Generator().manual_seed(seed)
    ids, out, logprobs = list(prompt), [], []
    for _ in range(max_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        if temperature == 0:
            token = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            ordered, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, 0) - ordered < top_p
            filtered = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
            token = int(torch.multinomial(filtered / filtered.sum(), 1, generator=generator))
        out.append(token)
        logprobs.append(float(logp[token]))
        ids.append(token)
        if token in eos:
            return out, logprobs, "stop"
        if any(s in tokenizer.decode(out, skip_special_tokens=True) for s in stop):
            return out, logprobs, "stop"
    return out, logprobs, "length"


def build_app(state: FakeVLLM) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request):
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if name in state.adapters:
            return _error(400, f"The lora adapter '{name}' has already been loaded.")
        if not path or not (Path(path) / "adapter_config.json").is_file():
            return _error(400, f"No adapter found at {path}")
        with state.lock:
            state.load(name, path)
            state.loads.append(name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request):
        name = (await request.json()).get("lora_name")
        if name not in state.adapters:
            return _error(404, f"The lora adapter '{name}' cannot be found.")
        with state.lock:
            del state.adapters[name]
            state.unloads.append(name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await request.json()
        model = state.model(body.get("model"))
        if model is None:
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        text = state.tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        prompt = state.tokenizer(text, add_special_tokens=False)["input_ids"]
        with state.lock:
            state.chats += 1
            tokens, logprobs, finish = sample(
                model, prompt, temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
                max_tokens=int(body.get("max_tokens", 16)), seed=int(body.get("seed") or 0),
                stop=list(body.get("stop") or []), eos=state.eos_ids(), tokenizer=state.tokenizer)
        choice: dict[str, Any] = {
            "index": 0, "finish_reason": finish,
            "message": {"role": "assistant", "content": state.tokenizer.decode(tokens, skip_special_tokens=True)},
        }
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {"content": [{"token": _token(state, t, as_ids), "logprob": lp, "top_logprobs": []}
                                              for t, lp in zip(tokens, logprobs)]}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "model": body["model"], "choices": [choice]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        model = state.model(body.get("model"))
        if model is None:
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        prompt = body.get("prompt")
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
            return _error(400, "this fake takes the prompt as a list of token ids")
        with state.lock, torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), dim=-1)
        scored = [None] + [float(logp[i - 1, prompt[i]]) for i in range(1, len(prompt))]
        following = int(torch.argmax(logp[-1]))
        tokens = (prompt if body.get("echo") else []) + [following]
        values = (scored if body.get("echo") else []) + [float(logp[-1, following])]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "text": state.tokenizer.decode(tokens)}
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"tokens": [_token(state, t, as_ids) for t in tokens], "token_logprobs": values}
        return {"id": "cmpl-fake", "object": "text_completion", "model": body["model"], "choices": [choice]}

    return app


@contextlib.contextmanager
def fake_vllm(model_dir: Path, **faults: bool) -> Iterator[tuple[str, FakeVLLM]]:
    """Serve the model in `model_dir` like `vllm serve` would; yields (base URL ending in /v1, state)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
    state = FakeVLLM(base, tokenizer, **faults)
    with serving_app(build_app(state)) as url:
        yield f"{url}/v1", state
