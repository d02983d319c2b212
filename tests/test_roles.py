"""Model roles: one way to say who plays policy, critic, expert, PRM and judge."""

import contextlib

import pytest

from hindsight.roles import RoleBackend, RoleSpec, adapter_roles, attach, parse_role, resolve
from hindsight.types import Completion


@pytest.mark.parametrize("role, value, expected", [
    ("expert", "oracle", RoleSpec("expert", "oracle")),
    ("prm", "policy", RoleSpec("prm", "policy")),
    ("critic", "adapter", RoleSpec("critic", "adapter")),
    ("expert", "adapter: runs/sft", RoleSpec("expert", "adapter", "runs/sft")),
    ("judge", "openai:gpt-4o-mini", RoleSpec("judge", "backend", "openai:gpt-4o-mini")),
    ("expert", "smollm2+frozenlake3", RoleSpec("expert", "backend", "smollm2+frozenlake3")),
])
def test_role_values_parse_one_way(role, value, expected):
    assert parse_role(role, value) == expected


@pytest.mark.parametrize("role, value, allowed, message", [
    ("coach", "oracle", ("oracle",), "unknown role"),
    ("expert", "adapter:", ("adapter",), "needs a source"),
    ("expert", "template", ("oracle", "backend"), "expert cannot be 'template'"),
    ("prm", "nosuch:thing", ("backend",), "prm: "),
])
def test_bad_role_values_say_what_is_allowed(role, value, allowed, message):
    with pytest.raises(ValueError, match=message):
        parse_role(role, value, allowed)


class SharedModel:
    """Records which adapter is active while the backend generates (TrainableModel's `sampler`)."""

    def __init__(self):
        self.active = "policy"
        self.loaded = []
        model = self

        class Backend:
            spec = "hf:base"

            def generate(self, requests, params):
                return [Completion(text=model.active) for _ in requests]

        self.backend = self.sampler = Backend()

    @contextlib.contextmanager
    def role(self, name):
        previous, self.active = self.active, name
        try:
            yield
        finally:
            self.active = previous

    def load_adapter(self, source, role, source_role=None):
        self.loaded.append((source, role, source_role))


def test_adapter_roles_share_the_base_and_switch_adapters_while_they_write():
    model = SharedModel()
    expert, prm = parse_role("expert", "adapter:runs/big"), parse_role("prm", "policy")
    assert adapter_roles([expert, prm]) == ("expert",)
    attach(model, expert)
    attach(model, prm)
    assert model.loaded == [("runs/big", "expert", "policy")]  # a run's policy adapter plays the expert
    backend = resolve(expert, model)
    assert isinstance(backend, RoleBackend) and backend.spec == "hf:base#expert"
    assert [c.text for c in backend.generate([None, None], None)] == ["expert", "expert"]
    assert model.active == "policy"  # switched back
    assert resolve(prm, model).generate([None], None)[0].text == "policy"
    assert resolve(parse_role("expert", "oracle")).spec == "oracle"
    with pytest.raises(ValueError, match="needs the model"):
        resolve(expert)
