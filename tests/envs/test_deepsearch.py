"""DeepSearch: answer scoring worked by hand, the invented world, search, actions, the oracle and user files."""

import itertools
import json
import os
import random
import re
import subprocess
import sys

import pytest

from hindsight.envs import EnvError, instance_split, make
from hindsight.envs.checker import check_env
from hindsight.envs.deepsearch import (
    _RESERVED,
    DEFAULT_WORLD_SIZE,
    MAX_WORLD_SIZE,
    MIN_WORLD_SIZE,
    PERSON,
    RELATIONS,
    YEAR,
    _build_world,
    _word,
    answer_scores,
    compose_question,
    exact_match,
    generated_world,
    kind_counts,
    normalize_answer,
    parse_action,
    token_f1,
)
from hindsight.envs.instances import export_instances


# -- answer scoring, worked by hand ------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Ossel River!", "ossel river"),
        ("  an Apple, a Pear  ", "apple pear"),
        ("Saint-Ives", "saintives"),  # SQuAD drops punctuation without leaving a space
        ("Theodora", "theodora"),  # only whole-word articles go
        ("1873.", "1873"),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize(
    ("prediction", "truth", "em", "f1"),
    [
        ("the Ossel river.", "Ossel River", 1.0, 1.0),
        # One shared token of one predicted and two gold: P = 1, R = 1/2, F1 = 2/3.
        ("Ossel", "Ossel River", 0.0, 2 / 3),
        # {red, big, house} against {big, red, barn}: 2 shared, P = R = 2/3.
        ("the red big house", "a big red barn", 0.0, 2 / 3),
        # Counted with multiplicity: x x y against x y y shares one x and one y.
        ("x x y", "x y y", 0.0, 2 / 3),
        # Three predicted tokens, one of them right: P = 1/3, R = 1, F1 = 1/2.
        ("Talsa Vorniq Brenn", "Vorniq", 0.0, 0.5),
        ("Fubro", "Mukaithand", 0.0, 0.0),
        # An answer that normalises to nothing matches only an equally empty truth.
        ("the", "Ossel", 0.0, 0.0),
        ("a", "the", 1.0, 1.0),
    ],
)
def test_exact_match_and_token_f1(prediction, truth, em, f1):
    assert exact_match(prediction, truth) == em
    assert token_f1(prediction, truth) == pytest.approx(f1)


def test_answer_scores_take_the_best_accepted_answer():
    assert answer_scores("Ossel", ["Ossel River", "Ossel"]) == (1.0, 1.0)
    em, f1 = answer_scores("river", ["Ossel River", "Ossel"])
    assert em == 0.0 and f1 == pytest.approx(2 / 3)
    assert answer_scores("anything", []) == (0.0, 0.0)


# -- the invented world --------------------------------------------------------------------
def test_the_world_is_deterministic_and_depends_on_the_corpus_seed_and_size():
    first, again, other = _build_world(0, 500), _build_world(0, 500), _build_world(1, 500)
    assert first.corpus.documents == again.corpus.documents
    assert first.corpus.links == again.corpus.links and first.corpus.values == again.corpus.values
    assert [e.facts for e in first.entities] == [e.facts for e in again.entities]
    assert first.corpus.documents != other.corpus.documents
    bigger = _build_world(0, 600)
    assert len(bigger.corpus) == 600 and bigger.corpus.documents[:500] != first.corpus.documents
    assert generated_world(0) is generated_world(0, DEFAULT_WORLD_SIZE)  # built once per process


@pytest.mark.parametrize("world_size", [MIN_WORLD_SIZE, 101, 302, 777, DEFAULT_WORLD_SIZE, MAX_WORLD_SIZE])
def test_kind_counts_add_up_to_the_world_size(world_size):
    counts = kind_counts(world_size)
    assert sum(counts.values()) == world_size and min(counts.values()) >= 3
    assert counts[PERSON] % 2 == 0  # people marry in pairs
    if world_size == 302:  # the shares are those of the first, fixed-size world
        assert counts == {"country": 10, "river": 24, "town": 60, "person": 120, "company": 48, "invention": 40}


def test_world_is_deterministic_under_another_hash_seed():
    code = (
        "import json; from hindsight.envs.deepsearch import _build_world; w = _build_world(3, 500); "
        "print(json.dumps([[d.id, d.title, d.text] for d in w.corpus.documents]))"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    ]  # fmt: skip
    assert runs[0] == runs[1]
    assert json.loads(runs[0]) == [[d.id, d.title, d.text] for d in _build_world(3, 500).corpus.documents]


# The words that say what kind of thing a name belongs to, shared by many names.
KIND_WORDS = {"river", "works", "foundry", "mills", "holdings", "shipping", "textiles", "instruments", "optics",
              "loom", "lamp", "engine", "press", "compass", "pump", "kiln", "lathe", "sextant", "telegraph",
              "valve", "furnace"}  # fmt: skip


def test_invented_names_ids_and_words_are_unique():
    world = generated_world(0)
    names = [e.name.casefold() for e in world.entities]
    assert len(set(names)) == len(names) == len(world.corpus) == DEFAULT_WORLD_SIZE
    ids = [d.id for d in world.corpus.documents]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    assert all(len(doc_id) == 5 and doc_id[0] == "d" and doc_id[1:].isdigit() for doc_id in ids)
    # Each invented word names one thing only (the kind words aside).
    words = [w for name in names for w in name.split() if w not in KIND_WORDS]
    assert len(set(words)) == len(words)
    # Every document is titled by its entity's name and mentions it in its text.
    for entity, index in zip(world.entities, world.doc_of, strict=True):
        doc = world.corpus.documents[index]
        assert doc.title == entity.name and entity.name in doc.text


def test_names_and_template_words_never_overlap():
    world = generated_world(0)
    invented = {w for e in world.entities for w in e.name.casefold().split()} - KIND_WORDS
    assert not invented & _RESERVED
    # `_RESERVED` must list every word the templates write, or the check above proves nothing.
    written = {w for doc in world.corpus.documents for w in re.findall(r"[^\W\d]+", doc.text.casefold())}
    assert written <= invented | _RESERVED, sorted(written - invented - _RESERVED)


class _ScriptedRandom:
    """Returns the given picks from `choice`, in order, to spell chosen words."""

    def __init__(self, *picks):
        self.picks = iter(picks)

    def choice(self, options):
        pick = next(self.picks)
        assert pick in options
        return pick


def test_a_word_the_templates_use_is_never_a_name():
    # "Maker" (ma-ke-r) can be spelled but is refused; the next try, "Bakon", is taken.
    used = set()
    assert _word(_ScriptedRandom(2, "m", "a", "k", "e", "r", 2, "b", "a", "k", "o", "n"), used) == "Bakon"
    assert used == {"bakon"}


@pytest.mark.parametrize(("corpus_seed", "world_size"), [(0, DEFAULT_WORLD_SIZE), (2, 1000)])
def test_search_finds_each_entity_document_by_its_name(corpus_seed, world_size):
    world = generated_world(corpus_seed, world_size)
    first = 0
    for entity, index in zip(world.entities, world.doc_of, strict=True):
        results, matches = world.corpus.search(entity.name, 5)
        assert index in results and matches >= len(results), entity.name
        first += results[0] == index
    # A short document that names another entity twice can edge ahead of that entity's own.
    assert first >= 0.98 * len(world.entities)


def test_search_breaks_ties_by_doc_id_and_ignores_unknown_words():
    corpus = generated_world(0).corpus
    results, matches = corpus.search("headquarters", len(corpus))
    assert matches == len(results) > 5
    scores = {}
    everything = corpus.index().scores("headquarters")
    for index in results:
        scores.setdefault(float(everything[index]), []).append(index)
    assert any(len(tied) > 1 for tied in scores.values())
    for tied in scores.values():
        assert [corpus.documents[i].id for i in tied] == sorted(corpus.documents[i].id for i in tied)
    assert corpus.search("qqqzzz xxyyww", 5) == ([], 0)
    assert corpus.search("the of and", 5) == ([], 0)  # nothing but stopwords


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_question_chains_follow_the_facts(hops):
    world = generated_world(0)
    by_doc = {world.corpus.documents[i].id: e for i, e in zip(world.doc_of, world.entities, strict=True)}
    for seed in range(60):
        instance = compose_question(world, random.Random(seed), hops)
        chain = [by_doc[doc_id] for doc_id in instance["chain"]]
        assert len(chain) == hops and len({e.name for e in chain}) == hops
        assert chain[0].mention in instance["question"] and instance["question"].endswith("?")
        # Each document on the chain states the fact that leads to the next entity, the last one the answer.
        for here, there in itertools.pairwise(chain):
            assert any(world.entities[t] is there for r, t in here.facts.items() if _target(r) != YEAR)
            assert there.mention in world.corpus.documents[world.doc_of[world.entities.index(here)]].text
        last = chain[-1]
        answers = [str(t) if _target(r) == YEAR else world.entities[t].name for r, t in last.facts.items()]
        assert instance["answer"] in answers
        assert instance["answer"] in world.corpus.documents[world.doc_of[world.entities.index(last)]].text
        assert instance["answer"].casefold() not in instance["question"].casefold()
        assert all(a in instance["answer"] for a in instance["aliases"])


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_the_defaults_give_enough_distinct_test_questions(hops):
    env = make("deepsearch", hops=hops)
    seeds = env.split_seeds("test", 300)
    assert len({json.dumps(env.generate_instance(s), sort_keys=True) for s in seeds}) == 300


def test_a_small_world_runs_out_of_one_hop_questions():
    # About 350 one-hop questions in all: the question space grows with the world.
    with pytest.raises(EnvError, match=r"give only \d+ distinct test instances"):
        make("deepsearch", hops=1, world_size=MIN_WORLD_SIZE).split_seeds("test", 100)


def test_the_smallest_world_still_has_four_hop_questions():
    env = make("deepsearch", hops=4, world_size=MIN_WORLD_SIZE)
    assert len(env.corpus) == MIN_WORLD_SIZE
    for seed in env.split_seeds("train", 20):
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action())
        assert env.is_success()


def _target(relation):
    return next(r.target for r in RELATIONS if r.name == relation)


# -- actions ---------------------------------------------------------------------------
@pytest.fixture
def episode():
    env = make("deepsearch")
    env.reset(3)
    return env


def test_reset_shows_the_question_first(episode):
    observation, info = episode.reset(3)
    assert observation.startswith("Question: In which ")
    assert "You have not searched yet." in observation
    assert info["state_key"] == "start|opened=-|answer=-"
    assert info["admissible_actions"] == [f"search[{episode.instance['question']}]"]
    assert (info["score"], info["success"]) == (0.0, False)


def test_search_open_and_answer(episode):
    start = episode.corpus.documents[episode.corpus.index_of(episode.instance["chain"][0])]
    observation, reward, terminated, _, info = episode.step(f"  SEARCH [ {start.title.upper()} ] ")
    assert info["valid"] and not terminated and reward == 0.0
    assert observation.startswith(f'You searched for "{start.title.lower()}".\nQuestion: ')
    assert f"1. [{start.id}] {start.title}: " in observation
    assert info["state_key"] == f'search="{start.title.lower()}"|opened=-|answer=-'
    assert f"open[{start.id}]" in info["admissible_actions"]

    observation, _, _, _, info = episode.step(f"open[{start.title.lower()}]")  # by title, any case
    assert info["valid"] and start.text in observation
    assert info["state_key"] == f"open={start.id}|opened={start.id}|answer=-"
    assert any(a.startswith("answer[") for a in info["admissible_actions"])

    observation, reward, terminated, truncated, info = episode.step("answer[ Nowhere ]")
    assert terminated and not truncated and info["valid"]
    assert (reward, info["score"], info["success"]) == (0.0, 0.0, False)
    assert 'Your answer: "Nowhere" (exact match: no; token F1: 0.00).' in observation
    assert info["state_key"] == f'answered|opened={start.id}|answer="Nowhere"'
    assert info["admissible_actions"] == []
    with pytest.raises(EnvError, match="episode is over"):
        episode.step("answer[again]")


def test_a_partly_right_answer_earns_its_f1(episode):
    gold = episode.instance["answer"]
    _, reward, terminated, _, info = episode.step(f"answer[{gold} Junior]")
    words = len(gold.split())
    assert terminated and not info["success"]
    assert reward == info["score"] == pytest.approx(2 * words / (2 * words + 1))
    env = make("deepsearch")
    env.reset(3)
    _, reward, _, _, info = env.step(f"answer[the {gold.upper()}.]")
    assert (reward, info["score"], info["success"]) == (1.0, 1.0, True)


@pytest.mark.parametrize(
    ("action", "feedback"),
    [
        ("hello", '"hello" is not an action. Use search[query], open[doc id or title] or answer[text].'),
        ("search omvale", "search needs square brackets around its argument, as in search[...]."),
        ("Open d0001", "open needs square brackets around its argument"),
        ("search[   ]", "search[] is empty; put a query between the brackets."),
        ("answer[]", "answer[] is empty; put your answer between the brackets."),
        ("open[d9999]", 'There is no document "d9999". Open a document by the id shown in the search results'),
        ("open[Atlantis]", 'There is no document "Atlantis".'),
        ("click[d0001]", "is not an action"),
        ("search[a] open[b]", None),  # one action per turn: read as a search for "a] open[b"
    ],
)
def test_invalid_actions_change_nothing_but_count(episode, action, feedback):
    before = episode.state_key()
    observation, reward, terminated, truncated, info = episode.step(action)
    if feedback is None:
        assert info["valid"]
        return
    assert not info["valid"] and not terminated and not truncated and reward == 0.0
    assert info["state_key"] == before and episode.steps_taken == 1
    assert observation.startswith(feedback) or feedback in observation.splitlines()[0]
    assert observation.splitlines()[1].startswith("Question: ")


def test_an_ambiguous_title_asks_for_an_id(user_files):
    env = make("deepsearch", **user_files)
    env.reset(0)
    _, _, _, _, info = env.step("open[notes]")
    assert not info["valid"]
    observation, _, _, _, info = env.step("open[Notes on birds]")  # not a title either
    assert not info["valid"] and "no document" in observation
    assert "2 documents have the title" in env.step("open[NOTES]")[0]
    assert env.step("open[dup-2]")[4]["valid"]


def test_parse_action_tolerates_case_space_and_a_full_stop():
    assert parse_action(" Answer [ The  Ossel River ]. ") == ("answer", "The Ossel River")
    assert parse_action("OPEN[[d0042]]") == ("open", "[d0042]")
    assert parse_action("search(x)") is None and parse_action("") is None


def test_open_accepts_an_id_copied_with_its_brackets(episode):
    doc = episode.corpus.documents[7]
    assert episode.step(f"open[[{doc.id.upper()}]]")[4]["state_key"] == f"open={doc.id}|opened={doc.id}|answer=-"


def test_top_k_limits_the_results():
    env = make("deepsearch", top_k=2)
    env.reset(0)
    observation = env.step("search[river]")[0]
    assert "(2 shown of " in observation and "\n3. [" not in observation
    assert "2 documents that best match" in env.instruction


def test_steps_run_out_at_the_budget():
    env = make("deepsearch", hops=1)
    assert env.max_steps == 8 and make("deepsearch", hops=4).max_steps == 20
    env.reset(0)
    for step in range(1, 9):
        _, _, terminated, truncated, _ = env.step("search[river]")
        assert not terminated and truncated == (step == 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hops": 0}, "hops must be between 1 and 4"),
        ({"hops": 5}, "hops must be between 1 and 4"),
        ({"hops": "two"}, "hops must be an integer"),
        ({"top_k": 0}, "top_k must be between 1 and 20"),
        ({"corpus_seed": -1}, "corpus_seed must be between 0"),
        ({"world_size": 99}, "world_size must be between 100 and 50000, got 99"),
        ({"world_size": 50_001}, "world_size must be between 100 and 50000"),
        ({"world_size": "huge"}, "world_size must be an integer"),
        ({"corpus": ""}, "corpus must be the path of a JSON Lines file"),
        ({"qa": 3}, "qa must be the path of a JSON Lines file"),
    ],
)
def test_bad_knobs_are_refused(kwargs, message):
    with pytest.raises(EnvError, match=message):
        make("deepsearch", **kwargs)


def test_texts_for_agents_and_critics():
    env = make("deepsearch", hops=3)
    assert "search[query]" in env.instruction and "open[doc id or title]" in env.instruction
    assert "answer[text]" in env.instruction and "at most 16 actions" in env.instruction
    assert "token F1" in env.criteria and "exact match" in env.criteria
    assert env.description and "\n" not in env.description


def test_importing_and_making_stays_cheap():
    code = (
        "import sys, hindsight.envs; from hindsight.envs import deepsearch, make; env = make('deepsearch'); "
        "print(deepsearch._WORLDS == {}, 'bm25s' in sys.modules); env.reset(0); "
        "print(list(deepsearch._WORLDS) == [(0, 5000)], env.corpus._index is None, 'bm25s' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "True", "True", "False"]


# -- the oracle ---------------------------------------------------------------------------
@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_oracle_reads_the_chain_and_answers(hops):
    env = make("deepsearch", hops=hops)
    solved = 0
    for seed in range(50):
        env.reset(seed)
        actions = []
        while not env.done:
            actions.append(env.oracle_action())
            info = env.step(actions[-1])[4]
            assert info["valid"]
        solved += info["success"]
        assert len(actions) == 2 * hops + 1
        assert [a.split("[")[0] for a in actions] == ["search", "open"] * hops + ["answer"]
    assert solved / 50 >= 0.95


def test_oracle_recovers_from_a_detour(episode):
    episode.step("search[headquarters]")
    episode.step("open[d0001]")
    episode.step("search[qqqzzz]")
    while not episode.done:
        episode.step(episode.oracle_action())
    assert episode.is_success()


# -- a user's corpus and questions -----------------------------------------------------------
CORPUS = [
    {"id": "lib1", "title": "Harrowgate Library", "text": "The Harrowgate Library was built in 1822 by the mason "
     "Ulla Brenn. It stands beside the canal."},
    {"id": "p-ulla", "title": "Ulla Brenn", "text": "Ulla Brenn was a mason from the village of Sedgemoor. "
     "She trained under Pim Tallow."},
    {"id": "v-sedge", "title": "Sedgemoor", "text": "Sedgemoor is a village of reed cutters on the Lune marshes."},
    {"id": "p-pim", "title": "Pim Tallow", "text": "Pim Tallow carved the north gate of Harrowgate in 1801."},
    {"id": "canal", "title": "Harrowgate  Canal", "text": "The Harrowgate Canal opened in 1790."},
    {"id": 42, "title": "Reed cutting", "text": "Reed cutting is the main trade of the marshes."},
    {"id": "dup-1", "title": "Notes", "text": "Notes on the marsh birds."},
    {"id": "dup-2", "title": "Notes", "text": "Notes on the canal locks."},
]  # fmt: skip
QA = [
    {"question": "In which village was the builder of the Harrowgate Library born?", "answer": "Sedgemoor",
     "chain": ["lib1", "p-ulla"], "split": "test"},
    {"question": "Who built the Harrowgate Library?", "answer": "Ulla Brenn", "aliases": ["Brenn"], "chain": ["lib1"]},
    {"question": "When did the Harrowgate Canal open?", "answer": "1790"},
    {"question": "Who trained Ulla Brenn?", "answer": "Pim Tallow", "chain": ["P-ULLA"], "split": "train"},
    {"question": "What is the main  trade of the marshes?", "answer": "reed cutting", "chain": [42],
     "split": "validation"},
    {"question": "What did Pim Tallow carve?", "answer": "the north gate of Harrowgate", "aliases": ["north gate"],
     "chain": ["p-pim"], "split": "train"},
    {"question": "Which canal did the Harrowgate Library stand beside?", "answer": "Harrowgate Canal",
     "chain": ["lib1"], "split": "test"},
]  # fmt: skip


def _write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


@pytest.fixture
def user_files(tmp_path):
    return {"corpus": _write_jsonl(tmp_path / "corpus.jsonl", CORPUS), "qa": _write_jsonl(tmp_path / "qa.jsonl", QA)}


def test_user_corpus_and_questions_round_trip(user_files, tmp_path):
    env = make("deepsearch", **user_files)
    assert "open[lib1]" in env.instruction and "invented" not in env.instruction
    assert env.config == {"hops": 2, "top_k": 5, "corpus_seed": 0, "world_size": 5000, **user_files, "max_steps": 12}
    assert env.generate_instance(3) == {"question": "Who trained Ulla Brenn?", "answer": "Pim Tallow",
                                        "aliases": [], "chain": ["p-ulla"]}  # fmt: skip
    assert env.generate_instance(4)["question"] == "What is the main trade of the marshes?"
    assert env.generate_instance(4)["chain"] == ["42"]
    with pytest.raises(EnvError, match=r"seed 7 is not in .*qa.jsonl \(it holds seeds 0..6\)"):
        env.reset(7)

    observation, _ = env.reset(0)
    assert observation.startswith("Question: In which village was the builder of the Harrowgate Library born?")
    observation = env.step("search[harrowgate library]")[0]
    assert "1. [lib1] Harrowgate Library: The Harrowgate Library was built in 1822 by the mason Ulla Brenn." in (
        observation
    )
    info = env.step("open[42]")[4]
    assert info["valid"] and info["state_key"] == "open=42|opened=42|answer=-"
    assert info["admissible_actions"] == [f"search[{QA[0]['question']}]", "answer[Reed cutting]"]
    assert env.step("open[harrowgate canal]")[4]["valid"]  # a title's inner spaces are tolerated
    assert env.step("answer[Sedgemoor.]")[4]["success"]

    env.reset(1)
    assert env.step("answer[brenn]")[4]["score"] == 1.0  # an accepted alias

    # Recorded splits are kept; the others follow the instance hash.
    splits = [env.seed_split(s) for s in range(7)]
    assert [splits[s] for s in (0, 3, 4, 5, 6)] == ["test", "train", "validation", "train", "test"]
    assert [splits[s] for s in (1, 2)] == [instance_split(env.generate_instance(s)) for s in (1, 2)]
    tests = [s for s in range(7) if splits[s] == "test"]
    assert env.split_seeds("test", len(tests)) == tests and {0, 6} <= set(tests)
    assert env.split_seeds("train", 1, start=4) == [5]
    with pytest.raises(EnvError, match=r"holds \d distinct validation questions; 9 requested"):
        env.split_seeds("validation", 9)

    # Frozen into an instance file, the same questions replay on the same corpus.
    path = export_instances(env, "test", 2, tmp_path / "frozen.jsonl")
    replay = make("deepsearch", instances=str(path))
    assert replay.config["corpus"] == user_files["corpus"] and replay.split_seeds("test", 2) == tests[:2]
    for seed in tests[:2]:
        assert replay.reset(seed) == env.reset(seed)
        assert replay.step("search[canal]") == env.step("search[canal]")


def test_user_files_oracle_and_contract(user_files):
    env = make("deepsearch", **user_files)
    for seed, expected in [(0, 5), (1, 3), (2, 1), (3, 3), (4, 3), (5, 3), (6, 3)]:
        env.reset(seed)
        steps = 0
        while not env.done:
            assert env.step(env.oracle_action())[4]["valid"]
            steps += 1
        assert env.is_success() and steps == expected, seed
    report = check_env("deepsearch", user_files, seeds=[0, 2, 4], prefixes=1, split_n=1)
    assert report.ok, "\n".join(report.violations)


@pytest.mark.parametrize(
    ("corpus", "qa", "message"),
    [
        ([{"id": "a", "title": "A"}], QA[:1], r"corpus.jsonl:1: missing 'text'"),
        ([CORPUS[0], "{not json"], QA[:1], r"corpus.jsonl:2: not valid JSON"),
        ([CORPUS[0], "[1, 2]"], QA[:1], r"corpus.jsonl:2: expected a JSON object"),
        (["", "  "], QA[:1], r"corpus file .*corpus.jsonl is empty"),
        ([CORPUS[0], {**CORPUS[1], "id": "LIB1"}], QA[:1], r"corpus.jsonl:2: duplicate id 'LIB1' \(line 1 has 'lib1'"),
        ([{**CORPUS[0], "id": ""}], QA[:1], r"corpus.jsonl:1: 'id' must be a non-empty string or an integer"),
        ([{**CORPUS[0], "text": " "}], QA[:1], r"corpus.jsonl:1: 'text' of document 'lib1' is empty"),
        ([{**CORPUS[0], "title": None}], QA[:1], r"corpus.jsonl:1: 'title' and 'text' must be strings"),
        (CORPUS, [{"question": "Why?"}], r"qa.jsonl:1: missing 'answer'"),
        (CORPUS, [QA[1], {"answer": "x"}], r"qa.jsonl:2: missing 'question'"),
        (CORPUS, [QA[1], "oops"], r"qa.jsonl:2: not valid JSON"),
        (CORPUS, [], r"QA file .*qa.jsonl is empty"),
        (CORPUS, [{**QA[1], "answer": ""}], r"qa.jsonl:1: 'answer' must be a non-empty string"),
        (CORPUS, [{**QA[1], "aliases": "Brenn"}], r"qa.jsonl:1: 'aliases' must be a list of non-empty strings"),
        (CORPUS, [{**QA[1], "split": "dev"}], r"qa.jsonl:1: 'split' must be one of train, validation, test"),
        (CORPUS, [{**QA[1], "chain": ["lib9"]}], r"qa.jsonl:1: 'chain' names document 'lib9', which the corpus lacks"),
    ],
)
def test_bad_user_files_are_reported_with_file_and_line(tmp_path, corpus, qa, message):
    files = {"corpus": _write_jsonl(tmp_path / "corpus.jsonl", corpus), "qa": _write_jsonl(tmp_path / "qa.jsonl", qa)}
    with pytest.raises(EnvError, match=message):
        make("deepsearch", **files)


def test_missing_files_and_a_corpus_without_questions(tmp_path, user_files):
    with pytest.raises(EnvError, match=r"corpus file .*nowhere.jsonl does not exist"):
        make("deepsearch", corpus=str(tmp_path / "nowhere.jsonl"), qa=user_files["qa"])
    with pytest.raises(EnvError, match="corpus= needs qa= too"):
        make("deepsearch", corpus=user_files["corpus"])


def test_questions_about_the_generated_world(tmp_path):
    world = generated_world(0)
    entity = world.entities[0]
    doc = world.corpus.documents[world.doc_of[0]]
    qa = _write_jsonl(tmp_path / "qa.jsonl", [{"question": f"What is {entity.name}?", "answer": "a country",
                                               "chain": [doc.id]}])  # fmt: skip
    env = make("deepsearch", qa=qa)
    env.reset(0)
    assert env.oracle_action() == f"search[{entity.name}]"


# -- diagnostics ------------------------------------------------------------------------------
def test_diagnostic_hooks_judge_query_looping_only():
    from hindsight.diagnostics import hooks_for
    from hindsight.diagnostics.taxonomy import classify

    hooks = hooks_for("deepsearch")
    assert hooks.t_max is None and hooks.recall_skip_reason
    actions = ["search[Omvale  Works]", "open[d0001]", "SEARCH[omvale works!]", "search[omvale works]", "answer[x]"]
    verdict = classify([None] * len(actions), actions, "", hooks)
    assert verdict.errors == {"query_looping"}
    assert verdict.not_applicable == {"navigation_cycling", "premature_purchase"}
    assert classify([None] * 2, actions[:2], "", hooks).errors == set()


# -- determinism -------------------------------------------------------------------------------
def test_replaying_the_same_actions_gives_the_same_transitions():
    actions = ["search[river]", "open[d0010]", "bogus", "search[Works 1850]", "open[d0200]", "answer[x]"]
    first, second = make("deepsearch", hops=3), make("deepsearch", hops=3)
    for seed in (0, 5):
        assert first.reset(seed) == second.reset(seed)
        for action in actions:
            assert first.step(action) == second.step(action)
    assert make("deepsearch").generate_instance(11) == make("deepsearch").generate_instance(11)


def test_generated_questions_freeze_into_an_instance_file(tmp_path):
    source = make("deepsearch", hops=3, top_k=4, corpus_seed=2, world_size=800)
    path = export_instances(source, "validation", 3, tmp_path / "ds.jsonl")
    replay = make("deepsearch", instances=str(path))
    assert replay.config == {**source.config, "instances": str(path)}
    for seed in source.split_seeds("validation", 3):
        assert replay.reset(seed) == source.reset(seed)
        assert replay.step(source.oracle_action()) == source.step(source.oracle_action())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"chain": ["d0', '"chain": ["x0'))
    with pytest.raises(EnvError, match=r"'chain' names document 'x0\d+', which this environment's corpus lacks"):
        make("deepsearch", instances=str(bad))
    # The same doc ids exist in every world, so a file read against another world is caught by its answers.
    bad.write_text(path.read_text().replace('"corpus_seed": 2', '"corpus_seed": 3'))
    with pytest.raises(EnvError, match=r"seed \d+: the answer .* is not in d\d+, the last document of 'chain'"):
        make("deepsearch", instances=str(bad))
    assert make("deepsearch").generate_instance(11) != make("deepsearch", corpus_seed=4).generate_instance(11)
