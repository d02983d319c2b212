"""Model spec strings: their forms, and the parser that checks and splits them.

    parse_spec("smollm2+frozenlake3")   # ModelSpec(provider="smollm2", adapter="frozenlake3")

Parsing never touches the disk or the network; `hindsight.llm.load_model` builds the backend
a parsed spec names. The backend modules read specs here, so none of them imports the package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hindsight.llm.base import ModelError
from hindsight.registry import Registry

#: The form a LoRA adapter on a local model takes; not a prefix, so no provider holds it.
ADAPTER_FORM = ("BASE+ADAPTER", "smollm2 or hf:PATH with a LoRA adapter merged in: a bundled adapter name, a "
                                "PEFT adapter folder, or a Hindsight run directory or checkpoint (BASE+A+B merges A, "
                                "then B)")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed spec string: `provider` is a prefix of `MODEL_PROVIDERS` (smollm2, hf, openai, vllm, oracle, …).

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


@dataclass(frozen=True)
class ModelProvider:
    """One spec prefix: how its specs read and what builds their backend.

    forms: (form, meaning) pairs listed in `SPEC_FORMS` and errors. argument: what follows
    `PREFIX:` ("path", "model name", "seed"; empty: the prefix stands alone); optional: the
    prefix alone is accepted too. check: validates the argument (raising ModelError), in place
    of the default "not empty". adapters: a local transformers model, which `+ADAPTER` can
    modify. wraps: the argument is a whole spec of such a model (`ray:SPEC`). load: (the
    parsed spec, the options of `load_model`) -> the backend. describe: the parsed spec (without
    adapters) -> one line for listings.
    """

    prefix: str
    forms: tuple[tuple[str, str], ...]
    load: Callable[[ModelSpec, dict[str, Any]], Any]
    describe: Callable[[ModelSpec], str]
    argument: str = ""
    optional: bool = False
    check: Callable[[str], None] | None = None
    adapters: bool = False
    wraps: bool = False


#: Model providers by spec prefix, filled by `model_provider` in `hindsight.llm`.
MODEL_PROVIDERS: Registry[ModelProvider] = Registry("model provider")

Loader = Callable[[ModelSpec, dict[str, Any]], Any]


def model_provider(prefix: str, *forms: tuple[str, str], describe: Callable[[ModelSpec], str], argument: str = "",
                   optional: bool = False, check: Callable[[str], None] | None = None, adapters: bool = False,
                   wraps: bool = False) -> Callable[[Loader], Loader]:
    """Decorator: register the decorated backend factory `(spec, options) -> backend` under `prefix`.

    The other arguments are `ModelProvider`'s. The factory should import its backend module
    inside its body, so that importing `hindsight.llm` stays cheap.
    """

    def add(load: Loader) -> Loader:
        MODEL_PROVIDERS.add(prefix, ModelProvider(prefix, forms, load, describe, argument, optional, check, adapters,
                                                  wraps))
        return load

    return add


def spec_forms() -> tuple[tuple[str, str], ...]:
    """Every accepted spec form with its meaning: the providers' own, `BASE+ADAPTER`, then wrapping ones."""
    providers = [provider for _, provider in MODEL_PROVIDERS.items()]
    return (*(form for p in providers if not p.wraps for form in p.forms), ADAPTER_FORM,
            *(form for p in providers if p.wraps for form in p.forms))


def adapter_bases() -> tuple[str, ...]:
    """Prefixes of the local transformers models, the only ones a LoRA adapter can modify."""
    return tuple(name for name, provider in MODEL_PROVIDERS.items() if provider.adapters)


def _local_models() -> str:
    return " or ".join(p.forms[0][0] for _, p in MODEL_PROVIDERS.items() if p.adapters)


def parse_spec(spec: str) -> ModelSpec:
    """Check a spec's syntax (not whether its file or endpoint exists) and split it."""
    text = spec.strip() if isinstance(spec, str) else ""
    prefix, sep, name = text.partition(":")
    provider = MODEL_PROVIDERS.get(prefix.lower()) if prefix.lower() in MODEL_PROVIDERS else None
    if provider is not None and provider.wraps and sep:
        inner = parse_spec(name)  # checked whole: its adapters belong to the wrapped model
        if inner.provider not in adapter_bases():
            raise ModelError(f"{provider.forms[0][0]} runs replicas of a local model ({_local_models()}, with "
                             f"+ADAPTER), not {name.strip()!r}")
        return ModelSpec(provider.prefix, str(inner))
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
        if base.provider not in adapter_bases():
            raise ModelError(f"a LoRA adapter (+ADAPTER) needs a {_local_models()} base, not {base_text!r}")
        return ModelSpec(base.provider, base.name, "+".join(adapters))
    if provider is not None and not provider.wraps:
        if not sep and (provider.optional or not provider.argument):
            return ModelSpec(provider.prefix)
        if sep and provider.check is not None:
            provider.check(name)
            return ModelSpec(provider.prefix, name)
        if sep and provider.argument:
            if not name.strip():
                raise ModelError(f"{provider.prefix}: needs a {provider.argument} after the colon")
            return ModelSpec(provider.prefix, name.strip())
    accepted = ", ".join(form for form, _ in spec_forms())
    raise ModelError(f"unknown model spec {spec!r}; accepted forms: {accepted}")
