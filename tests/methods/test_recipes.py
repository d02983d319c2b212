"""Every shipped recipe loads into the config of the method its own usage line names."""

import re
from pathlib import Path

import pytest

from hindsight.configs import load_config
from hindsight.envs import make
from hindsight.envs.proxy import parse_ray_env
from hindsight.methods.registry import load_training_methods

RECIPES = sorted((Path(__file__).parents[2] / "recipes").glob("*.yaml"))


def test_recipes_exist():
    assert len(RECIPES) >= 8


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_loads_into_its_methods_config(recipe):
    usage = re.search(rf"hindsight train ([a-z-]+)[^\n]*--config recipes/{re.escape(recipe.name)}", recipe.read_text())
    assert usage, f"{recipe.name} has no `hindsight train METHOD --config recipes/{recipe.name}` usage line"
    config_cls = load_training_methods().get(usage.group(1)).config
    # Recipes that start from another run name it with --set (a path, or an upper-case
    # placeholder such as ATTEMPTS_RUN); a placeholder path stands in for it.
    named = set(re.findall(r"--set ([a-z_]+)=[A-Z]", recipe.read_text()))  # --set KEY=PLACEHOLDER
    overrides = [f"{key}=runs/placeholder" for key in ("init_from", "critic_init_from", "policy_from")
                 if key in config_cls.__dataclass_fields__]
    overrides += [f"{key}=runs/placeholder" for key in sorted(named - {"init_from", "critic_init_from", "policy_from"})]
    config = load_config(config_cls, recipe, overrides)
    # The env knobs are valid too (checked in-process: a ray: recipe's environment is the same one).
    make(parse_ray_env(config.env) or config.env, **config.env_kwargs)
