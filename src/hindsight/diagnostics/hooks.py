"""What diagnostics need to know about an environment, keyed by environment id.

Diagnostics run on logs, possibly without the environment installed, so environment
knowledge lives here as small text functions rather than in `hindsight.envs`:

* the default AUV horizon t_max;
* which error taxonomy applies (Self-Guide appendix B): the ``household`` family
  (looping, redundant exploration, wrong-object focus — ALFWorld and ScienceWorld style)
  or the ``shop`` family (query looping, navigation cycling, premature purchase);
* what a *location* (a place the agent goes to), an *examined object*, a *picked-up
  object*, a *search query* or a *purchase* is in the action text;
* which objects a task needs, and which objects an observation shows or an action touches
  (for memory recall distance).

The built-in puzzles (FrozenLake, BlocksWorld, Sudoku) are fully observable and have no
separate "go to" action: there the *location* is the state itself, and an action counts
as repeated only when it is issued again from the same state (moving Right five times is
progress on a grid; pushing into the same wall five times is a loop).

DeepSearch (research QA) belongs to the shop family: it searches with WebShop's
``search[...]`` syntax, so query looping applies, but it has no clicks, so navigation
cycling and premature purchase are reported as not applicable. Its step budget grows with
the number of hops, so it has no fixed t_max and a run's own max_steps is the horizon.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from hindsight.diagnostics.curves import DEFAULT_T_MAX, GUI_ENVS
from hindsight.logs.importers import normalise_env_id

HOUSEHOLD = "household"
SHOP = "shop"


@dataclass(frozen=True)
class EnvHooks:
    """Environment knowledge for one environment id.

    Any extractor left as None means "this notion does not exist here"; the categories
    that need it are then reported as not applicable instead of as zero.
    """

    env_id: str
    t_max: int | None
    taxonomy: str = HOUSEHOLD
    #: True: an action's identity for the looping criteria is (state, action text).
    state_scoped_actions: bool = False
    #: True: arriving at a state seen before is a location revisit (no "go to" action).
    state_is_location: bool = False
    location: Callable[[str], str | None] | None = None
    examined: Callable[[str], str | None] | None = None
    picked: Callable[[str], str | None] | None = None
    task_objects: Callable[[str], frozenset[str]] | None = None
    object_type: Callable[[str], str] = field(default=lambda name: name)
    search_query: Callable[[str], str | None] | None = None
    click_target: Callable[[str], str | None] | None = None
    visible_objects: Callable[[str], frozenset[str]] | None = None
    acted_objects: Callable[[str], frozenset[str]] | None = None
    #: Why memory recall distance is not computed here (empty when it is).
    recall_skip_reason: str = ""


# ---- household text heuristics (ALFWorld-style action grammar) -----------------------

_GO_TO = re.compile(r"^\s*go\s+to\s+(.+?)\s*$", re.IGNORECASE)
_EXAMINE = re.compile(r"^\s*(?:examine|look\s+at)\s+(.+?)(?:\s+under\s+.*)?\s*$", re.IGNORECASE)
_TAKE = re.compile(r"^\s*(?:take|pick\s+up)\s+(.+?)(?:\s+from\s+.*)?\s*$", re.IGNORECASE)
_TELEPORT = re.compile(r"^\s*(?:teleport\s+to|go\s+to)\s+(.+?)\s*$", re.IGNORECASE)
_INSTANCE = re.compile(r"\b([a-z]+)\s+(\d+)\b")
_TASK_SENTENCE = re.compile(r"your task is to:?\s*(.+)", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"[a-z]+")

# Words of an ALFWorld task sentence that never name an object.
_TASK_STOPWORDS = frozenset(
    "a an the some two put place find and it them in on into onto with under at look examine "
    "clean cool heat hot cold cooled heated cleaned use turn of to from then your task is".split()
)
# Receptacles a task uses without naming them.
_IMPLICIT_RECEPTACLES = {"clean": "sinkbasin", "cool": "fridge", "heat": "microwave"}


def _match(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    def extract(action: str) -> str | None:
        found = pattern.match(action)
        return found.group(1).lower() if found else None

    return extract


def alfworld_object_type(name: str) -> str:
    """'apple 1' -> 'apple': the object class without its instance number."""
    return name.split()[0].lower() if name.split() else name.lower()


def alfworld_task_objects(instruction: str) -> frozenset[str]:
    """Object classes the task sentence names, plus receptacles it implies.

    "Your task is to: put a clean apple in fridge." -> {apple, fridge, sinkbasin}.
    """
    found = _TASK_SENTENCE.search(instruction)
    sentence = (found.group(1) if found else instruction).lower()
    sentence = sentence.split("\n", 1)[0]
    words = set(_WORD.findall(sentence))
    objects = {word for word in words if word not in _TASK_STOPWORDS}
    for verb, receptacle in _IMPLICIT_RECEPTACLES.items():
        if verb in words or f"{verb}ed" in words or (verb == "heat" and "hot" in words):
            objects.add(receptacle)
    return frozenset(objects)


def alfworld_instances(text: str) -> frozenset[str]:
    """Object instances ('apple 1', 'countertop 2') mentioned in a text."""
    return frozenset(f"{name} {number}" for name, number in _INSTANCE.findall(text.lower()))


# ---- shop text heuristics (WebShop action grammar) -----------------------------------

_SEARCH = re.compile(r"^\s*search\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_CLICK = re.compile(r"^\s*click\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


def webshop_query(action: str) -> str | None:
    found = _SEARCH.match(action)
    return found.group(1) if found else None


def webshop_click(action: str) -> str | None:
    found = _CLICK.match(action)
    return found.group(1).strip().lower() if found else None


_FULLY_OBSERVABLE = "fully observable: every object is in every observation, so there is nothing to recall"

_HOOKS: dict[str, EnvHooks] = {
    "frozenlake": EnvHooks(
        "frozenlake", DEFAULT_T_MAX["frozenlake"], state_scoped_actions=True, state_is_location=True,
        recall_skip_reason=_FULLY_OBSERVABLE,
    ),
    "blocksworld": EnvHooks(
        "blocksworld", DEFAULT_T_MAX["blocksworld"], state_scoped_actions=True, state_is_location=True,
        recall_skip_reason=_FULLY_OBSERVABLE,
    ),
    "sudoku": EnvHooks(
        "sudoku", DEFAULT_T_MAX["sudoku"], state_scoped_actions=True, state_is_location=True,
        recall_skip_reason=_FULLY_OBSERVABLE,
    ),
    "alfworld": EnvHooks(
        "alfworld", DEFAULT_T_MAX["alfworld"],
        location=_match(_GO_TO), examined=_match(_EXAMINE), picked=_match(_TAKE),
        task_objects=alfworld_task_objects, object_type=alfworld_object_type,
        visible_objects=alfworld_instances, acted_objects=alfworld_instances,
    ),
    # The built-in ALFWorld-style environment writes ALFWorld's grammar and task sentences.
    "household": EnvHooks(
        "household", DEFAULT_T_MAX["alfworld"],
        location=_match(_GO_TO), examined=_match(_EXAMINE), picked=_match(_TAKE),
        task_objects=alfworld_task_objects, object_type=alfworld_object_type,
        visible_objects=alfworld_instances, acted_objects=alfworld_instances,
    ),
    # t_max 30: Self-Guide's per-episode budget for ScienceWorld (TIDE has no ScienceWorld setting).
    "scienceworld": EnvHooks(
        "scienceworld", 30,
        location=_match(_TELEPORT), examined=_match(_EXAMINE), picked=_match(_TAKE),
        recall_skip_reason="no task-object extractor for ScienceWorld instructions",
    ),
    "webshop": EnvHooks(
        "webshop", DEFAULT_T_MAX["webshop"], taxonomy=SHOP,
        search_query=webshop_query, click_target=webshop_click,
        recall_skip_reason="shopping pages are not object-location tasks",
    ),
    "deepsearch": EnvHooks(
        "deepsearch", None, taxonomy=SHOP, search_query=webshop_query,
        recall_skip_reason="research QA gathers facts from documents; no objects sit in locations to recall",
    ),
}


# GUI trajectories (TIDE's per-instance files): screenshots and pointer actions carry no
# words to extract objects or locations from, so only the looping criterion applies.
for _gui in GUI_ENVS:
    _HOOKS[_gui] = EnvHooks(_gui, DEFAULT_T_MAX[_gui],
                            recall_skip_reason="GUI screenshots: no object extractor for observations")


def hooks_for(env: str) -> EnvHooks:
    """The hooks registered for an environment id, or generic ones (looping only)."""
    key = normalise_env_id(env)
    hooks = _HOOKS.get(key)
    if hooks is not None:
        return hooks
    name = key or "unknown"
    return EnvHooks(name, None, recall_skip_reason=f"no object extractor for environment {name!r}")


def register_hooks(hooks: EnvHooks) -> None:
    """Add or replace the hooks of an environment id (for environments added later)."""
    _HOOKS[normalise_env_id(hooks.env_id)] = hooks


def known_env_ids() -> tuple[str, ...]:
    return tuple(_HOOKS)
