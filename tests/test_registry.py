import pytest

from hindsight.registry import Registry, UnknownName


def test_register_and_get_by_name_and_alias():
    reg: Registry = Registry("thing")

    @reg.register("one", "uno")
    def one():
        return 1

    assert reg.get("one") is one and reg.get("uno") is one
    assert reg.names() == ("one", "uno")
    assert "one" in reg and "two" not in reg and len(reg) == 2


def test_unknown_name_lists_known_names():
    reg: Registry = Registry("advantage estimator")
    reg.add("grpo", object())
    with pytest.raises(UnknownName) as err:
        reg.get("gpro")
    assert str(err.value) == "unknown advantage estimator 'gpro'; known: grpo"
    assert isinstance(err.value, KeyError)


def test_duplicate_and_blank_names_are_refused():
    reg: Registry = Registry("thing")
    reg.add("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.add("a", 2)
    with pytest.raises(ValueError, match="non-empty"):
        reg.add(" b", 3)
    assert reg.get("a") == 1
