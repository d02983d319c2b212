"""Error taxonomy of failed trajectories (Self-Guide, appendix B).

Each trajectory is tested against every category of its environment's family; a
trajectory may fall into several categories or none. Runs report, per category, the
share of *failed* trajectories that show it (the paper's statistic), or "not applicable"
when the environment has no notion the criterion needs (see `hindsight.diagnostics.hooks`).

Household family (ALFWorld / ScienceWorld style), with the default thresholds of
`TaxonomyThresholds`:

* looping — one action repeated at least `repeat_run` (5) times in a row, or one action
  making up at least `dominant_share` (50%) of the steps. Hindsight applies the share
  rule only to trajectories of at least `dominant_min_steps` (10) steps, because in a
  two-step episode any action is half of it; set it to 0 for the literal criterion.
* redundant exploration — at least `location_revisits` (8) moves to a location already
  visited, or one object examined at least `same_object_examined` (5) times.
* wrong-object focus — objects the task does not need examined at least
  `irrelevant_examined` (4) times in total, or at least `irrelevant_pickups` (7)
  pick-ups of such objects.

Shop family (WebShop):

* query looping — one search query issued at least `query_repeats` (3) times, compared
  after lower-casing, dropping punctuation and collapsing whitespace;
* navigation cycling — "back to search" clicked at least `back_to_search` (3) times in
  an episode with no purchase;
* premature purchase — "buy now" clicked with no option selected since the product page
  was opened. Logs do not list which options a product requires, so any option click
  between opening the product and buying counts as a selection.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from hindsight.diagnostics.hooks import HOUSEHOLD, SHOP, EnvHooks

LOOPING = "looping"
REDUNDANT_EXPLORATION = "redundant_exploration"
WRONG_OBJECT_FOCUS = "wrong_object_focus"
QUERY_LOOPING = "query_looping"
NAVIGATION_CYCLING = "navigation_cycling"
PREMATURE_PURCHASE = "premature_purchase"

CATEGORIES = {
    HOUSEHOLD: (LOOPING, REDUNDANT_EXPLORATION, WRONG_OBJECT_FOCUS),
    SHOP: (QUERY_LOOPING, NAVIGATION_CYCLING, PREMATURE_PURCHASE),
}


@dataclass(frozen=True)
class TaxonomyThresholds:
    repeat_run: int = 5
    dominant_share: float = 0.5
    dominant_min_steps: int = 10
    location_revisits: int = 8
    same_object_examined: int = 5
    irrelevant_examined: int = 4
    irrelevant_pickups: int = 7
    query_repeats: int = 3
    back_to_search: int = 3


@dataclass(frozen=True)
class TaxonomyVerdict:
    """Categories one trajectory shows, and those that could not be judged."""

    errors: frozenset[str]
    not_applicable: frozenset[str]


def applicable_categories(hooks: EnvHooks) -> tuple[tuple[str, ...], frozenset[str]]:
    """(categories of the env's family, the subset its hooks cannot judge)."""
    categories = CATEGORIES[hooks.taxonomy]
    missing: set[str] = set()
    if hooks.taxonomy == HOUSEHOLD:
        if hooks.location is None and hooks.examined is None and not hooks.state_is_location:
            missing.add(REDUNDANT_EXPLORATION)
        if hooks.task_objects is None or (hooks.examined is None and hooks.picked is None):
            missing.add(WRONG_OBJECT_FOCUS)
    else:
        if hooks.search_query is None:
            missing.add(QUERY_LOOPING)
        if hooks.click_target is None:
            missing.update((NAVIGATION_CYCLING, PREMATURE_PURCHASE))
    return categories, frozenset(missing)


def has_run(same_as_previous: Sequence[bool], length: int) -> bool:
    """Is there a stretch of `length` equal consecutive items?

    `same_as_previous[k]` tells whether item k + 1 equals item k, so such a stretch is
    `length - 1` consecutive True values; the search runs over bytes, in C.
    """
    if length <= 1:
        return True
    return b"\x01" * (length - 1) in bytes(same_as_previous)


def _looping(
    states: Sequence[object], texts: Sequence[str], state_scoped: bool, th: TaxonomyThresholds
) -> bool:
    n = len(texts)
    if n == 0:
        return False
    if state_scoped:
        same = [a == b and s == t for a, b, s, t in zip(texts, texts[1:], states, states[1:])]
    else:
        same = [a == b for a, b in zip(texts, texts[1:])]
    if n >= th.repeat_run and has_run(same, th.repeat_run):
        return True
    if n < max(th.dominant_min_steps, 1):
        return False
    needed = th.dominant_share * n
    if max(Counter(texts).values()) < needed:
        return False
    if not state_scoped:
        return True
    # A (state, action) pair is never more frequent than its state, and counting states
    # is much cheaper than counting pairs, so most trajectories stop here.
    if max(Counter(states).values()) < needed:
        return False
    return max(Counter(zip(states, texts)).values()) >= needed


def _revisits(places: Sequence[str]) -> int:
    """How many entries of a sequence name a place that appeared earlier in it."""
    return len(places) - len(set(places))


def classify_household(
    states: Sequence[object],
    actions: Sequence[str | None],
    instruction: str,
    hooks: EnvHooks,
    th: TaxonomyThresholds = TaxonomyThresholds(),
    final_state: object | None = None,
) -> TaxonomyVerdict:
    """Household-family categories of one trajectory (see the module docstring)."""
    _, missing = applicable_categories(hooks)
    errors = set()
    texts = actions if None not in actions else [a if a is not None else "" for a in actions]
    if _looping(states, texts, hooks.state_scoped_actions, th):  # type: ignore[arg-type]
        errors.add(LOOPING)

    if REDUNDANT_EXPLORATION not in missing:
        if hooks.state_is_location:
            # Arrivals are the states after each action: s_1 .. s_T (s_T when logged).
            arrivals = list(states[1:]) + ([final_state] if final_state is not None else [])
            visited = [states[0], *arrivals] if states else arrivals
            revisits = _revisits(visited)
        else:
            locations = [loc for loc in map(hooks.location, texts) if loc] if hooks.location else []
            revisits = _revisits(locations)
        examined = [obj for obj in map(hooks.examined, texts) if obj] if hooks.examined else []
        most_examined = Counter(examined).most_common(1)[0][1] if examined else 0
        if revisits >= th.location_revisits or most_examined >= th.same_object_examined:
            errors.add(REDUNDANT_EXPLORATION)

    if WRONG_OBJECT_FOCUS not in missing:
        needed = hooks.task_objects(instruction)  # type: ignore[misc]
        examined = [obj for obj in map(hooks.examined, texts) if obj] if hooks.examined else []
        picked = [obj for obj in map(hooks.picked, texts) if obj] if hooks.picked else []
        irrelevant_examined = sum(1 for obj in examined if hooks.object_type(obj) not in needed)
        irrelevant_picked = sum(1 for obj in picked if hooks.object_type(obj) not in needed)
        if irrelevant_examined >= th.irrelevant_examined or irrelevant_picked >= th.irrelevant_pickups:
            errors.add(WRONG_OBJECT_FOCUS)
    return TaxonomyVerdict(frozenset(errors), missing)


_NON_WORD = re.compile(r"[^\w\s]")

# Clicks that navigate rather than choose a product option.
_NAVIGATION_CLICKS = frozenset(
    ("back to search", "next >", "< prev", "description", "features", "reviews", "attributes", "buy now")
)
_PRODUCT_ID = re.compile(r"^[a-z0-9]{10}$")


def normalise_query(query: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed: 'Red  Shoes!' -> 'red shoes'."""
    return " ".join(_NON_WORD.sub(" ", query.lower()).split())


def classify_shop(
    actions: Sequence[str | None], hooks: EnvHooks, th: TaxonomyThresholds = TaxonomyThresholds()
) -> TaxonomyVerdict:
    """Shop-family categories of one trajectory (see the module docstring)."""
    _, missing = applicable_categories(hooks)
    errors = set()
    texts = [a if a is not None else "" for a in actions]
    if QUERY_LOOPING not in missing:
        queries = [normalise_query(q) for q in map(hooks.search_query, texts) if q is not None]  # type: ignore[arg-type]
        if queries and Counter(queries).most_common(1)[0][1] >= th.query_repeats:
            errors.add(QUERY_LOOPING)
    if NAVIGATION_CYCLING not in missing:
        clicks = [c for c in map(hooks.click_target, texts) if c is not None]  # type: ignore[arg-type]
        bought = "buy now" in clicks
        if not bought and clicks.count("back to search") >= th.back_to_search:
            errors.add(NAVIGATION_CYCLING)
        on_product = False
        option_chosen = False
        for click in clicks:
            if _PRODUCT_ID.match(click):
                on_product, option_chosen = True, False
            elif click == "buy now":
                if not option_chosen:
                    errors.add(PREMATURE_PURCHASE)
            elif click == "back to search":
                on_product, option_chosen = False, False
            elif click not in _NAVIGATION_CLICKS and on_product:
                option_chosen = True
    return TaxonomyVerdict(frozenset(errors), missing)


def classify(
    states: Sequence[object],
    actions: Sequence[str | None],
    instruction: str,
    hooks: EnvHooks,
    th: TaxonomyThresholds = TaxonomyThresholds(),
    final_state: object | None = None,
) -> TaxonomyVerdict:
    """The taxonomy verdict of one trajectory under its environment's family."""
    if hooks.taxonomy == SHOP:
        return classify_shop(actions, hooks, th)
    return classify_household(states, actions, instruction, hooks, th, final_state)
