"""The WebShop-style shop: the reward worked by hand, the catalogue, search, pages and the oracle."""

import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hindsight.envs import EnvError, make
from hindsight.envs.webshop import (
    MAX_RESULTS,
    PRODUCT_TYPES,
    SearchIndex,
    catalogue,
    purchase_reward,
    search_index,
)

GOAL = {
    "goal_type": "hiking boots",
    "goal_category": "footwear",
    "goal_attributes": ["waterproof", "ankle support", "insulated"],
    "goal_options": {"colour": "black", "shoe size": "9"},
    "price_upper": 60.0,
}


def reward(**bought):
    item = {
        "item_type": "hiking boots",
        "item_category": "footwear",
        "item_attributes": ["waterproof", "ankle support", "insulated", "leather upper"],
        "item_price": 54.99,
        "chosen_options": {"colour": "black", "shoe size": "9"},
    }
    return purchase_reward(**{**item, **bought}, **GOAL)


# -- the reward, worked by hand ---------------------------------------------------------
# Three goal attributes, two goal options and the price: the denominator is 3 + 2 + 1 = 6.
@pytest.mark.parametrize(
    ("bought", "expected"),
    [
        ({}, 1.0),
        # 2 attributes + 2 options + price = 5 of 6.
        ({"item_attributes": ["waterproof", "insulated", "breathable"]}, 5 / 6),
        # 3 + 1 (the size is wrong) + 1 = 5 of 6.
        ({"chosen_options": {"colour": "black", "shoe size": "10"}}, 5 / 6),
        # 3 + 0 + 1: nothing chosen.
        ({"chosen_options": {}}, 4 / 6),
        # 3 + 2 + 0: over the limit.
        ({"item_price": 60.49}, 5 / 6),
        # A price exactly at the limit is within it.
        ({"item_price": 60.0}, 1.0),
        # 1 + 1 + 0 = 2 of 6.
        ({"item_attributes": ["insulated"], "chosen_options": {"colour": "black"}, "item_price": 75.0}, 2 / 6),
        # Another type of the same category halves the sum: 0.5 * 6/6.
        ({"item_type": "sandals"}, 0.5),
        # 0.5 * (1 + 0 + 1) / 6.
        ({"item_type": "slippers", "item_attributes": ["waterproof"], "chosen_options": {}}, 0.5 * 2 / 6),
        # Another category scores nothing at all.
        ({"item_type": "rain jacket", "item_category": "clothing"}, 0.0),
    ],
)
def test_purchase_reward_matches_hand_worked_examples(bought, expected):
    assert reward(**bought).value == pytest.approx(expected)


def test_purchase_reward_reports_its_parts():
    parts = reward(item_attributes=["waterproof"], chosen_options={"colour": "white", "shoe size": "9"}, item_price=80)
    assert (parts.r_type, parts.attributes_matched, parts.attributes_total) == (1.0, 1, 3)
    assert (parts.options_matched, parts.options_total, parts.price_ok) == (1, 2, False)
    assert parts.value == pytest.approx(2 / 6)
    # An option chosen under another name, or one the goal does not ask for, earns nothing.
    assert reward(chosen_options={"size": "9", "pack": "2 pack"}).value == pytest.approx(4 / 6)


def test_a_perfect_purchase_is_exactly_one():
    assert reward().value == 1.0


# -- the catalogue ------------------------------------------------------------------------
def test_catalogue_is_fixed_cached_and_prefix_stable():
    items = catalogue(2000)
    assert len(items) == 2000 and catalogue(2000) is items
    assert catalogue(300) == items[:300]
    assert len({item.id for item in items}) == 2000
    assert len({item.title for item in items}) == 2000
    kinds = {kind.name: kind for kind in PRODUCT_TYPES}
    for item in items:
        kind = kinds[item.product_type]
        assert item.category == kind.category and set(item.attributes) <= set(kind.attributes)
        low, high = kind.price_range
        assert low <= item.price <= high + 1
        values = [value for _, offered in item.options for value in offered]
        # Clicking a value must name one option unambiguously.
        assert len(values) == len(set(values)) and len(values) >= 3
        assert all(offered for _, offered in item.options)
    assert len({item.product_type for item in items}) == len(PRODUCT_TYPES)


def test_importing_the_envs_does_not_build_or_import_search():
    code = (
        "import sys, hindsight.envs as e; e.make('webshop'); e.list_envs(); "
        "from hindsight.envs import webshop; "
        "assert 'bm25s' not in sys.modules and webshop.catalogue.cache_info().currsize == 0"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- search ----------------------------------------------------------------------------
def test_search_by_title_ranks_every_item_first():
    index = search_index(2000)
    for item in catalogue(2000)[::7]:
        assert index.search(item.title)[0] == item.id


def test_search_finds_the_target_from_the_instruction_words():
    env = make("webshop")
    for seed in range(40):
        env.reset(seed)
        results = search_index(2000).search(env.suggested_query())
        assert env.instance["item"] in results and len(results) <= MAX_RESULTS


def test_search_is_deterministic_and_ties_go_to_the_smaller_id():
    index = search_index(2000)
    results = index.search("waterproof hiking boots")
    assert results == index.search("  WATERPROOF   hiking boots ") and len(results) == MAX_RESULTS
    assert index.search("the and of") == () and index.search("xyzzy") == ()
    # Three items with the same text tie on every query; they come back in id order.
    base, other = catalogue(2000)[0], catalogue(2000)[1]
    twins = SearchIndex([replace(base, id=i) if i else other for i in ("B0ZZZZZZZZ", None, "B0AAAAAAAA", "B0MMMMMMMM")])
    assert twins.search(base.title)[:3] == ("B0AAAAAAAA", "B0MMMMMMMM", "B0ZZZZZZZZ")


# -- pages and actions -----------------------------------------------------------------
@pytest.fixture
def env():
    env = make("webshop")
    env.reset(3)
    return env


def play(env, *actions):
    """Take valid actions; the last step's return value."""
    result = None
    for action in actions:
        result = env.step(action)
        assert result[4]["valid"], result[0]
    return result


def test_search_page_shows_the_task_and_suggests_its_key_words(env):
    observation = env.render()
    assert observation.startswith(f"Task: {env.instance['instruction']}")
    assert "search page" in observation
    assert env.state_key() == "page=search"
    words = " ".join([*env.instance["attributes"], env.instance["product_type"]])
    assert env.admissible_actions() == [f"search[{words}]"]
    assert env.instance["instruction"].endswith(f"price lower than {env.instance['price_upper']:.2f} dollars.")


def test_results_pages_list_ten_items_and_turn(env):
    query = env.suggested_query()
    observation, *_ = play(env, f"search[{query}]")
    assert f'Search results for "{query}": page 1 of 5 (50 items).' in observation
    assert "Buttons: [back to search] [next >]" in observation
    first = search_index(2000).search(query)
    assert env.admissible_actions() == ["click[back to search]", "click[next >]"] + [f"click[{i}]" for i in first[:10]]
    assert env.state_key() == f'page=results|query="{query}"|results_page=1|item=-|options=-'
    observation, *_ = play(env, "click[next >]", "click[next >]")
    assert "page 3 of 5" in observation and "[back to search] [< prev] [next >]" in observation
    assert f"[{first[20]}]" in observation and f"[{first[19]}]" not in observation
    play(env, "click[next >]", "click[next >]")
    assert env.admissible_actions()[:2] == ["click[back to search]", "click[< prev]"]
    play(env, "click[< prev]")
    assert env.state_key().endswith("results_page=4|item=-|options=-")


def test_item_page_options_description_and_back(env):
    query = env.suggested_query()
    target = env.instance["item"]
    play(env, f"search[{query}]")
    item = next(i for i in catalogue(2000) if i.id == target)
    while f"[{target}]" not in env.render():
        play(env, "click[next >]")
    observation, *_ = play(env, f"click[{target.lower()}]")
    assert item.title in observation and f"Price: ${item.price:.2f}" in observation
    assert "Buttons: [< prev] [back to search] [description] [buy now]" in observation
    (name, values), *_ = item.options
    observation, *_ = play(env, f"click[{values[0]}]")
    assert f"You chose {name}: {values[0]}." in observation and f"(chosen: {values[0]})" in observation
    observation, *_ = play(env, f"click[{values[1]}]")  # another value replaces the first
    assert env.state_key().endswith(f"item={target}|options={name}={values[1]}")
    observation, *_ = play(env, f"click[{values[1]}]")
    assert f"{name} is already {values[1]}." in observation
    observation, *_ = play(env, "click[description]")
    assert item.description in observation and "page=description" in env.state_key()
    assert env.admissible_actions() == ["click[< prev]", "click[back to search]"]
    play(env, "click[< prev]")  # back on the item, the choice kept
    assert env.state_key().endswith(f"item={target}|options={name}={values[1]}")
    play(env, "click[< prev]")  # back on the results, the choice forgotten
    assert env.state_key().endswith("item=-|options=-") and env.state_key().startswith("page=results")
    play(env, "click[back to search]")
    assert env.state_key() == "page=search"


def test_actions_tolerate_case_spaces_and_arrowless_buttons(env):
    play(env, "  SEARCH[  Donut   Shape Cat BED ]  ")
    assert env.state_key().startswith('page=results|query="donut shape cat bed"')
    play(env, "Click [ NEXT ]", "click[Prev]", "click[ Back To Search ]")
    assert env.state_key() == "page=search"


@pytest.mark.parametrize(
    ("setup", "action", "feedback"),
    [
        ([], "click[buy now]", "The search page has nothing to click; use search[your query]."),
        ([], "search[   ]", "search[...] needs some words to look for"),
        ([], "buy the boots", '"buy the boots" is not an action.'),
        (["search[cat bed]"], "search[dog bed]", "You can only search from the search page"),
        (["search[cat bed]"], "click[< prev]", "There is no previous page: this is the first page of results."),
        (["search[cat bed]"], "click[buy now]", 'There is no "buy now" to click on this page. You can click: back'),
        (["search[cat bed]"], "click[B0NOTHERE1]", 'There is no "b0nothere1" to click'),
        (["search[cat bed]"] + ["click[next >]"] * 4, "click[next >]", "There is no next page"),
        (["search[xyzzy]"], "click[next >]", "There is no next page"),
    ],
)
def test_invalid_actions_leave_the_state_and_say_why(env, setup, action, feedback):
    play(env, *setup)
    before = env.state_key()
    observation, reward, terminated, _, info = env.step(action)
    assert not info["valid"] and not terminated and reward == 0.0
    assert info["state_key"] == before and env.steps_taken == len(setup) + 1
    assert feedback in observation.splitlines()[0]


def test_an_option_of_another_item_cannot_be_clicked(env):
    play(env, "search[cat bed]")
    play(env, env.admissible_actions()[2])  # the first item listed
    observation, _, _, _, info = env.step("click[nova 13]")
    assert not info["valid"] and "You can click: < prev, back to search, description, buy now" in observation


def test_an_empty_search_shows_no_items_and_only_the_way_back(env):
    observation, *_ = play(env, "search[xyzzy plugh]")
    assert "no items match" in observation
    assert env.admissible_actions() == ["click[back to search]"]


def test_buying_ends_the_episode_with_the_graded_score(env):
    target = next(i for i in catalogue(2000) if i.id == env.instance["item"])
    play(env, f"search[{target.title}]", f"click[{target.id}]")
    assert env.score() == 0.0
    # Buy with no option chosen: attributes and price hold, options do not.
    observation, reward, terminated, truncated, info = play(env, "click[buy now]")
    expected = (len(env.instance["attributes"]) + 1) / (len(env.instance["attributes"]) + len(target.options) + 1)
    assert terminated and not truncated and not info["success"]
    assert reward == pytest.approx(expected) and info["score"] == pytest.approx(expected)
    assert f"Requested options chosen: 0 of {len(target.options)}." in observation
    assert info["admissible_actions"] == [] and env.state_key().startswith("page=done")
    with pytest.raises(EnvError, match="episode is over"):
        env.step("click[buy now]")


def test_buying_another_kind_of_product_scores_nothing(env):
    # The task wants a cat bed (pets); a t-shirt is neither the type nor the category.
    shirt = next(i for i in catalogue(2000) if i.product_type == "t-shirt")
    play(env, f"search[{shirt.title}]", f"click[{shirt.id}]")
    _, reward, terminated, _, info = play(env, "click[buy now]")
    assert terminated and reward == 0.0 and info["score"] == 0.0 and not info["success"]
    assert "Product type: wrong." in env.render()


# -- the oracle ------------------------------------------------------------------------
def test_oracle_solves_nearly_every_instance_within_the_budget():
    env = make("webshop")
    assert env.max_steps == 15
    solved = 0
    for seed in range(50):
        env.reset(seed)
        while not env.done:
            _, _, _, _, info = env.step(env.oracle_action())
            assert info["valid"]
        solved += info["success"] and info["score"] == 1.0
    assert solved >= 48


def test_oracle_recovers_from_a_detour(env):
    shirt = next(i for i in catalogue(2000) if i.product_type == "t-shirt")
    play(env, f"search[{shirt.title}]", f"click[{shirt.id}]", f"click[{shirt.options[0][1][0]}]", "click[description]")
    actions = []
    while not env.done:
        actions.append(env.oracle_action())
        env.step(actions[-1])
    assert env.is_success()
    assert actions[:2] == ["click[< prev]", "click[< prev]"]


def test_oracle_pages_towards_a_target_in_the_current_results():
    env = make("webshop", results_per_page=3)
    env.reset(3)
    query = env.suggested_query()
    rank = search_index(2000).search(query).index(env.instance["item"])
    assert rank >= 3  # the target is not on the first page
    env.step(f"search[{query}]")
    assert env.oracle_action() == "click[next >]"


# -- knobs, instances, determinism -------------------------------------------------------
def test_knobs_are_validated_and_recorded():
    env = make("webshop", catalogue_size="500", results_per_page=5)
    assert env.config == {"catalogue_size": 500, "results_per_page": 5, "max_steps": 15}
    env.reset(0)
    assert catalogue(2000).index(next(i for i in catalogue(2000) if i.id == env.instance["item"])) < 500
    env.step(f"search[{env.suggested_query()}]")
    assert sum(a.startswith("click[B0") for a in env.admissible_actions()) == 5
    for bad in ({"catalogue_size": 50}, {"catalogue_size": 9000}, {"results_per_page": 0}, {"results_per_page": "ten"}):
        with pytest.raises(EnvError, match=next(iter(bad))):
            make("webshop", **bad)


def test_instances_are_deterministic_and_self_consistent():
    env = make("webshop")
    for seed in range(30):
        instance = env.generate_instance(seed)
        assert instance == make("webshop").generate_instance(seed)
        env.check_instance(instance)
        assert set(instance) == {"item", "product_type", "category", "attributes", "options", "price_upper",
                                 "instruction"}  # fmt: skip
        assert 2 <= len(instance["attributes"]) <= 3 and instance["price_upper"] % 10 == 0


def test_instance_files_are_checked_against_the_catalogue(instance_file):
    good = make("webshop").generate_instance(0)
    path = instance_file("webshop", [(0, "test", good)])
    env = make("webshop", instances=str(path))
    assert env.reset(0)[0] == make("webshop").reset(0)[0]
    for broken in ({"item": "B0XXXXXXXX"}, {"attributes": ["shiny"]}, {"options": {"colour": "plaid"}},
                   {"price_upper": 1.0}, {"product_type": "dumbbells"}):  # fmt: skip
        path = instance_file("webshop", [(0, "test", {**good, **broken})])
        with pytest.raises(EnvError, match="seed 0"):
            make("webshop", instances=str(path))


ACTION_WORDS = st.sampled_from(
    ["search[", "click[", "]", "next >", "< prev", "back to search", "buy now", "description", "cat bed",
     "black", "small", "B0QQMK69D0", " ", "waterproof"]
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 500), actions=st.lists(st.lists(ACTION_WORDS, max_size=4).map("".join), max_size=12))
def test_any_text_keeps_the_contract_and_replays(seed, actions):
    first, second = make("webshop"), make("webshop")
    assert first.reset(seed) == second.reset(seed)
    for action in actions:
        if first.done:
            break
        before = first.state_key()
        admissible = set(first.admissible_actions())
        result = first.step(action)
        assert result == second.step(action)
        info = result[4]
        assert 0.0 <= info["score"] <= 1.0
        if not info["valid"]:
            assert info["state_key"] == before
        if action in admissible:
            assert info["valid"]
