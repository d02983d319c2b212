"""Pre-action writers by name: what the policy writes before each action, built one way.

    writer = build_pre_action("self-guide", max_new_tokens=48)   # a PreActionWriter, or None for "none"

`PRE_ACTION_WRITERS` holds one factory per writer: Self-Guide's self-assessment
(`self-guide`, `hindsight.agent.selfguide`) and ReFlAct's goal reflection (`reflection`,
`hindsight.agent.reflection`). Configs written before the registry name a writer with a
switch (`self_guide: true`, `reflact: true`); `pre_action_name` is the one place that reads
those switches as names.
"""

from __future__ import annotations

from typing import Callable

from hindsight.agent.engine import PreActionWriter
from hindsight.agent.reflection import GoalReflector
from hindsight.agent.selfguide import SelfAssessor
from hindsight.registry import Registry

#: The name that asks for no writer.
NONE = "none"

#: Pre-action writers by name; an entry takes the token budget of one note.
PRE_ACTION_WRITERS: Registry[Callable[[int], PreActionWriter]] = Registry("pre-action writer")


@PRE_ACTION_WRITERS.register("self-guide")
def _self_assessment(max_new_tokens: int) -> PreActionWriter:
    return SelfAssessor(max_new_tokens=max_new_tokens)


@PRE_ACTION_WRITERS.register("reflection")
def _goal_reflection(max_new_tokens: int) -> PreActionWriter:
    return GoalReflector(max_new_tokens=max_new_tokens)


def pre_action_name(name: str = "", *, self_guide: bool = False, reflact: bool = False) -> str:
    """The writer a config asks for: its `pre_action` name, or the one its switch stands for (`none` without).

    Raises ValueError when a config names more than one writer, and UnknownName for a name
    the registry does not hold.
    """
    asked = [written for written, on in ((name, bool(name)), ("self-guide", self_guide), ("reflection", reflact))
             if on]
    if len(asked) > 1:
        raise ValueError("choose one of pre_action, self_guide and reflact: each writes the one note before an action")
    chosen = asked[0] if asked else NONE
    if chosen != NONE:
        PRE_ACTION_WRITERS.get(chosen)
    return chosen


def build_pre_action(name: str, max_new_tokens: int) -> PreActionWriter | None:
    """The writer called `name` with that token budget per note; None for `none`."""
    return None if name == NONE else PRE_ACTION_WRITERS.get(name)(max_new_tokens)
