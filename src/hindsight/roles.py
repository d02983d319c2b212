"""Model roles: who plays the policy, critic, expert, PRM and judge, each resolved one way.

Every method names its roles with the same values:

    oracle          the environment's exact planner (it needs the live environment: expert, prm)
    policy          the policy being trained, as it is at that moment
    adapter         a LoRA adapter of its own on the policy's base model, trained by the method
                    (ECHO's critic); `critic_init_from`-style options initialise it
    adapter:SOURCE  a frozen LoRA adapter on the shared base, loaded from SOURCE (a run
                    directory, checkpoint, PEFT folder or bundled adapter name): a second model
                    for the price of a few MB
    template        ECHO's rule-based critic (critic only)
    MODEL SPEC      a separate backend: smollm2+ADAPTER, hf:PATH, openai:NAME, scripted:FILE, ...

    spec = parse_role("expert", "adapter:runs/sft-big")   # checked when the config is built
    model = load_trainable(base, ("policy", *adapter_roles([spec])), ...)
    attach(model, spec)                                    # loads the frozen adapter
    backend = resolve(spec, model)                         # a ModelBackend for the engine
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from hindsight.llm.base import ModelBackend
from hindsight.types import Completion, GenerationRequest, SamplingParams

ROLE_NAMES = ("policy", "critic", "expert", "prm", "judge")
KINDS = ("oracle", "policy", "adapter", "template", "backend")


@dataclass(frozen=True)
class RoleSpec:
    """A parsed role value: `kind` (one of KINDS) and its `source` (adapter source or model spec)."""

    role: str
    kind: str
    source: str = ""

    @property
    def trained_adapter(self) -> bool:
        return self.kind == "adapter" and not self.source

    @property
    def on_shared_base(self) -> bool:
        return self.kind == "adapter"


def parse_role(role: str, value: str, allowed: Iterable[str] = KINDS) -> RoleSpec:
    """Parse one role's value; ValueError names the role, the value and what is allowed."""
    from hindsight.llm import ModelError, parse_spec

    if role not in ROLE_NAMES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLE_NAMES)}")
    allowed = tuple(allowed)
    text = value.strip()
    if text in ("oracle", "policy", "adapter", "template"):
        spec = RoleSpec(role, text)
    elif text.startswith("adapter:"):
        if not text[len("adapter:"):].strip():
            raise ValueError(f"{role}: 'adapter:' needs a source (a run directory, PEFT folder or bundled name)")
        spec = RoleSpec(role, "adapter", text[len("adapter:"):].strip())
    else:
        try:
            parse_spec(text)
        except ModelError as exc:
            raise ValueError(f"{role}: {exc}") from None
        spec = RoleSpec(role, "backend", text)
    if spec.kind not in allowed:
        raise ValueError(f"{role} cannot be {value!r}: it can be {', '.join(_describe(k) for k in allowed)}")
    return spec


def _describe(kind: str) -> str:
    return {"backend": "a model spec", "adapter": "adapter[:SOURCE]"}.get(kind, kind)


def adapter_roles(specs: Sequence[RoleSpec]) -> tuple[str, ...]:
    """The roles that need an adapter of their own on the shared model, in order."""
    return tuple(spec.role for spec in specs if spec.on_shared_base)


def attach(model: object, spec: RoleSpec) -> None:
    """Load a frozen `adapter:SOURCE` role into the shared model (nothing to do for other kinds).

    A run directory or checkpoint as SOURCE gives its policy adapter: `adapter:runs/sft` is
    "the policy that run trained", whichever role it now plays.
    """
    if spec.on_shared_base and spec.source:
        model.load_adapter(spec.source, spec.role, source_role="policy")


class RoleBackend:
    """One adapter of a shared `TrainableModel`, switched on while it generates."""

    def __init__(self, model: object, role: str):
        self.model = model
        self.role = role
        self.spec = f"{model.backend.spec}#{role}"

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        with self.model.role(self.role):
            return self.model.sampler.generate(requests, params)


def resolve(spec: RoleSpec, model: object | None = None) -> ModelBackend:
    """The backend that plays a role. `model` (a TrainableModel) is needed for policy and adapter roles."""
    from hindsight.llm import load_model

    if spec.kind == "oracle":
        return load_model("oracle")
    if spec.kind == "backend":
        return load_model(spec.source)
    if spec.kind == "template":
        raise ValueError(f"{spec.role}: the template critic is not a model backend")
    if model is None:
        raise ValueError(f"{spec.role}: {spec.kind} needs the model being trained")
    return RoleBackend(model, "policy" if spec.kind == "policy" else spec.role)
