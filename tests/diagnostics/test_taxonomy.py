from hindsight.diagnostics import TaxonomyThresholds, classify, hooks_for
from hindsight.diagnostics.hooks import alfworld_task_objects
from hindsight.diagnostics.taxonomy import (
    LOOPING, NAVIGATION_CYCLING, PREMATURE_PURCHASE, QUERY_LOOPING, REDUNDANT_EXPLORATION, WRONG_OBJECT_FOCUS,
    applicable_categories, normalise_query,
)

ALF = hooks_for("alfworld")
TASK = "You are in the middle of a room.\nYour task is to: put a clean apple in fridge."


def alf(actions, instruction=TASK):
    return classify(list(range(len(actions))), actions, instruction, ALF).errors


def test_looping_by_consecutive_repeats():
    assert LOOPING in alf(["look"] * 5)
    assert LOOPING not in alf(["look"] * 4 + ["inventory"])


def test_looping_by_dominant_action_needs_enough_steps():
    ten = ["inventory", "look"] * 5  # 'look' is half of ten steps
    assert LOOPING in alf(ten)
    # Two steps of which one is half: not looping under the default minimum length...
    assert LOOPING not in alf(["look", "inventory"])
    # ...but it is under the literal criterion.
    literal = TaxonomyThresholds(dominant_min_steps=0)
    assert LOOPING in classify([0, 1], ["look", "inventory"], TASK, ALF, literal).errors


def test_redundant_exploration_by_revisits_or_repeated_examination():
    tour = [f"go to cabinet {k}" for k in range(1, 5)]
    # Three rounds of the same four places: 8 moves go somewhere already visited.
    assert REDUNDANT_EXPLORATION in alf(tour * 3)
    assert REDUNDANT_EXPLORATION not in alf(tour * 2 + tour[:3])  # 7 revisits
    examine = ["examine drawer 1", "go to desk 1"] * 5
    assert REDUNDANT_EXPLORATION in alf(examine)
    assert REDUNDANT_EXPLORATION not in alf(examine[:8])


def test_wrong_object_focus_uses_the_task_objects():
    assert alfworld_task_objects(TASK) == {"apple", "fridge", "sinkbasin"}
    assert WRONG_OBJECT_FOCUS in alf(["examine mug 1", "examine mug 2", "examine book 1", "examine pen 3"])
    assert WRONG_OBJECT_FOCUS not in alf(["examine apple 1", "examine fridge 1", "examine apple 2", "examine mug 1"])
    pickups = [f"take mug {k} from desk 1" for k in range(7)]
    assert WRONG_OBJECT_FOCUS in alf(pickups)
    assert WRONG_OBJECT_FOCUS not in alf(pickups[:6] + ["take apple 1 from desk 1"])


def test_grid_envs_count_repeats_only_from_the_same_state():
    fl = hooks_for("frozenlake")
    # Five moves right across the grid: different states, so progress, not looping.
    assert LOOPING not in classify(["0,0", "0,1", "0,2", "0,3", "0,4"], ["right"] * 5, "", fl).errors
    # Five moves right into the same wall: looping.
    assert LOOPING in classify(["0,4"] * 5, ["right"] * 5, "", fl).errors


def test_grid_revisits_are_arrivals_at_earlier_states():
    fl = hooks_for("frozenlake")
    back_and_forth = ["a", "b"] * 5  # arrivals b a b a ... (+ final): 9 revisits counting the final state
    verdict = classify(back_and_forth, ["right", "left"] * 5, "", fl, final_state="a")
    assert REDUNDANT_EXPLORATION in verdict.errors
    assert REDUNDANT_EXPLORATION not in classify(["a", "b", "a", "b"], ["r", "l", "r", "l"], "", fl).errors
    assert verdict.not_applicable == {WRONG_OBJECT_FOCUS}


def test_shop_query_looping_is_normalised():
    shop = hooks_for("webshop")
    assert normalise_query("  Red SHOES, size-9!") == "red shoes size 9"
    queries = ["search[red shoes]", "search[Red  shoes!]", "click[back to search]", "search[red shoes]"]
    assert QUERY_LOOPING in classify([], queries, "", shop).errors
    assert QUERY_LOOPING not in classify([], queries[:2], "", shop).errors


def test_shop_navigation_cycling_needs_no_purchase():
    shop = hooks_for("webshop")
    back = ["search[x]", "click[back to search]"] * 3
    assert NAVIGATION_CYCLING in classify([], back, "", shop).errors
    assert NAVIGATION_CYCLING not in classify([], back[:4], "", shop).errors
    assert NAVIGATION_CYCLING not in classify([], back + ["click[b0123abcde]", "click[large]", "click[buy now]"], "",
                                              shop).errors


def test_shop_premature_purchase():
    shop = hooks_for("webshop")
    rushed = ["search[lamp]", "click[b0123abcde]", "click[description]", "click[< prev]", "click[buy now]"]
    assert PREMATURE_PURCHASE in classify([], rushed, "", shop).errors
    careful = ["search[lamp]", "click[b0123abcde]", "click[blue]", "click[buy now]"]
    assert PREMATURE_PURCHASE not in classify([], careful, "", shop).errors
    # An option chosen on an earlier product does not carry over to a new one.
    switched = careful[:3] + ["click[back to search]", "search[lamp]", "click[b999999999]", "click[buy now]"]
    assert PREMATURE_PURCHASE in classify([], switched, "", shop).errors


def test_unknown_env_judges_looping_only():
    hooks = hooks_for("mystery-env")
    categories, missing = applicable_categories(hooks)
    assert categories == (LOOPING, REDUNDANT_EXPLORATION, WRONG_OBJECT_FOCUS)
    assert missing == {REDUNDANT_EXPLORATION, WRONG_OBJECT_FOCUS}
    assert classify([0] * 6, ["wait"] * 6, "", hooks).errors == {LOOPING}


def test_run_search_and_missing_actions():
    from hindsight.diagnostics.taxonomy import has_run

    assert has_run([True, True, False], 3) and not has_run([True, False, True], 3) and has_run([], 1)
    # Unparsed actions (None) repeat like any other text.
    assert LOOPING in alf([None] * 5)
