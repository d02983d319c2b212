"""The registry: make, list_envs, register and their error messages."""

import pytest

import hindsight.envs as envs
from hindsight.envs import SPLITS, EnvError, EnvSpec, TextEnv, list_envs, make, register


def test_exports():
    assert {"EnvError", "TextEnv", "make", "list_envs", "SPLITS"} <= set(envs.__all__)
    assert SPLITS == ("train", "validation", "test")


def test_list_envs_reports_defaults_and_budgets():
    specs = {spec.id: spec for spec in list_envs()}
    assert list(specs) == ["blocksworld", "deepsearch", "frozenlake", "household", "scienceworld", "sudoku", "webshop",
                           "webshop-site"]
    assert specs["frozenlake"] == EnvSpec(
        id="frozenlake",
        description=specs["frozenlake"].description,
        defaults={"size": 4, "p_hole": 0.2, "holes": "fatal", "score": "goal"},
        max_steps=30,
    )
    assert specs["blocksworld"].defaults == {"num_blocks": 4} and specs["blocksworld"].max_steps == 20
    assert specs["sudoku"].defaults == {"size": 4, "blanks": 6} and specs["sudoku"].max_steps == 20
    assert specs["deepsearch"].defaults == {
        "hops": 2, "top_k": 5, "corpus_seed": 0, "world_size": 5000, "corpus": None, "qa": None,
    }  # fmt: skip
    assert specs["deepsearch"].max_steps == 12
    assert specs["webshop"].defaults == {"catalogue_size": 2000, "results_per_page": 10}
    assert specs["webshop"].max_steps == 15
    assert all(spec.description for spec in specs.values())


def test_make_builds_with_knobs_and_is_case_tolerant():
    env = make("FrozenLake", size=5, holes="blocking", max_steps=12)
    assert isinstance(env, TextEnv)
    assert env.config == {"size": 5, "p_hole": 0.2, "holes": "blocking", "score": "goal", "max_steps": 12}


def test_unknown_id_suggests_the_closest():
    with pytest.raises(EnvError) as caught:
        make("frozen_lake")
    message = str(caught.value)
    assert "\n" not in message
    assert "Did you mean 'frozenlake'?" in message
    assert "Known: blocksworld, deepsearch, frozenlake, household, scienceworld, sudoku, webshop, webshop-site." in message


def test_unknown_keyword_names_the_accepted_ones():
    with pytest.raises(
        EnvError,
        match=r"unknown keyword 'num_block' \(did you mean 'num_blocks'\?\); "
        r"accepted: num_blocks, view, max_steps, instances",
    ):
        make("blocksworld", num_block=5)


def test_register_rejects_clashes_and_non_envs():
    register(envs.FrozenLake)  # registering the same class again is harmless

    class Impostor(envs.FrozenLake):
        id = "frozenlake"

    with pytest.raises(EnvError, match="already registered"):
        register(Impostor)
    with pytest.raises(EnvError):
        register(dict)


def test_split_seeds_are_disjoint_distinct_and_stable():
    env = make("sudoku")
    chosen = {split: env.split_seeds(split, 20) for split in SPLITS}
    assert chosen == {split: make("sudoku").split_seeds(split, 20) for split in SPLITS}
    assert not set(chosen["test"]) & set(chosen["train"])
    assert not set(chosen["test"]) & set(chosen["validation"])
    for split, seeds in chosen.items():
        instances = [env.generate_instance(s) for s in seeds]
        assert len({str(i) for i in instances}) == len(seeds)
        assert all(env.seed_split(s) == split for s in seeds)
    assert env.split_seeds("test", 5, start=chosen["test"][2]) == chosen["test"][2:7]
    with pytest.raises(EnvError, match="unknown split"):
        env.split_seeds("dev", 3)


def test_state_machine_misuse_raises():
    env = make("frozenlake")
    with pytest.raises(EnvError, match="reset"):
        env.step("up")
    with pytest.raises(EnvError, match="reset"):
        env.oracle_action()


def test_an_env_whose_requirements_are_missing_is_listed_as_unavailable(monkeypatch):
    import shutil

    from hindsight.envs import list_envs

    monkeypatch.setattr(shutil, "which", lambda name: None)  # as on a machine without Java
    listed = {spec.id: spec for spec in list_envs()}
    assert "[unavailable here: scienceworld needs Java" in listed["scienceworld"].description
    assert listed["frozenlake"].description.endswith("without stepping into a hole.")
