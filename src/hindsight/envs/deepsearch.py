"""DeepSearch: answer multi-hop questions by searching and reading a document collection.

The built-in collection describes an invented world: people, towns, countries, rivers,
companies and inventions whose names are made from syllables, linked by facts such as
"born in", "founded by" or "flows through". No language model has seen these facts, so
an agent can only answer by retrieving them. A question follows a chain of facts ("In
which town was the founder of Omvale Works born?"), and each hop means finding and
reading one more document.

The agent works with three actions: `search[query]` ranks the documents by BM25 (the
`bm25s` library) and lists the best few with a snippet, `open[doc id or title]` shows
one document in full, and `answer[text]` submits an answer and ends the episode. The
score is the token F1 of the answer against the gold answer after SQuAD-style
normalisation; success is an exact match after the same normalisation.

A user's own collection can be played instead: `corpus=PATH` (JSON Lines of
{"id", "title", "text"}) with `qa=PATH` (JSON Lines of {"question", "answer"} and,
optionally, "aliases", "split" and "chain"). Seed i is then the i-th question.

The generated world has `world_size` entities, one document each, and the number of
distinct questions grows with it. It is built once per process, corpus seed and size,
the BM25 index on the first search, so importing `hindsight.envs` stays cheap.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hindsight.envs.base import TextEnv, echo, instance_digest, int_knob
from hindsight.envs.contract import SPLITS, EnvError
from hindsight.envs.instances import json_object_line, read_text_file
from hindsight.envs.search import BM25Index

MIN_HOPS, MAX_HOPS = 1, 4
MAX_TOP_K = 20
SNIPPET_CHARS = 160
VERBS = ("search", "open", "answer")

# -- answer scoring (SQuAD conventions) ---------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and the articles a/an/the removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    """1.0 when the two strings are equal after `normalize_answer`, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(truth))


def token_f1(prediction: str, truth: str) -> float:
    """Harmonic mean of token precision and recall after `normalize_answer`.

    Tokens are counted with multiplicity. When either side normalises to nothing, the
    score is 1.0 if both do and 0.0 otherwise.
    """
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not predicted or not gold:
        return float(predicted == gold)
    shared = sum((Counter(predicted) & Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def answer_scores(prediction: str, truths: Sequence[str]) -> tuple[float, float]:
    """(exact match, token F1) of a prediction, each the best over the accepted answers."""
    return (
        max((exact_match(prediction, t) for t in truths), default=0.0),
        max((token_f1(prediction, t) for t in truths), default=0.0),
    )


# -- documents and search -------------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# The token pattern bm25s uses, so snippets pick sentences by the same words the ranking saw.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def _lookup_key(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class Document:
    """One document: a stable id, a title and the text."""

    id: str
    title: str
    text: str


class Corpus:
    """An immutable document collection with id and title look-up and a lazy BM25 index.

    `links[i]` and `values[i]` are the entity names and years that document i mentions;
    the generated world fills them (they make admissible actions), a user's corpus
    leaves them empty. A corpus is shared, never copied: `deepcopy` returns it as is.
    """

    def __init__(
        self,
        documents: Sequence[Document],
        links: Sequence[tuple[str, ...]] | None = None,
        values: Sequence[tuple[str, ...]] | None = None,
    ):
        self.documents = tuple(documents)
        self.links = tuple(links) if links is not None else ((),) * len(self.documents)
        self.values = tuple(values) if values is not None else ((),) * len(self.documents)
        self._by_id = {_lookup_key(doc.id): i for i, doc in enumerate(self.documents)}
        self._by_title: dict[str, list[int]] = {}
        for i, doc in enumerate(self.documents):
            self._by_title.setdefault(_lookup_key(doc.title), []).append(i)
        self._index: BM25Index | None = None

    def __len__(self) -> int:
        return len(self.documents)

    def __deepcopy__(self, memo: dict[int, Any]) -> Corpus:
        return self

    def index_of(self, doc_id: str) -> int | None:
        """The position of the document with this id (case and spacing ignored), or None."""
        return self._by_id.get(_lookup_key(doc_id))

    def lookup(self, reference: str) -> list[int]:
        """Documents a reference names: the one with that id, else every one with that title."""
        key = _lookup_key(reference)
        # Models often copy the brackets or quotes around an id from the results list.
        for candidate in (key, _lookup_key(key.strip("[]()\"'`<>"))):
            if candidate in self._by_id:
                return [self._by_id[candidate]]
            if candidate in self._by_title:
                return list(self._by_title[candidate])
        return []

    def search(self, query: str, k: int) -> tuple[list[int], int]:
        """The top `k` documents for a query and how many match at all.

        Documents are ranked by BM25 score over title and text; equal scores go in doc id
        order, so the ranking never depends on the index's internal order. Documents
        that share no word with the query are never listed.
        """
        return self.index().search(query, k)

    def snippet(self, index: int, query: str) -> str:
        """The sentence of a document that shares the most words with the query, shortened."""
        words = set(_TOKEN.findall(query.lower()))
        sentences = [s for s in _SENTENCE_END.split(self.documents[index].text.strip()) if s]
        if not sentences:
            return ""
        # The earliest sentence wins a tie, so snippets are stable.
        _, _, best = max((len(words & set(_TOKEN.findall(s.lower()))), -i, s) for i, s in enumerate(sentences))
        flat = " ".join(best.split())
        return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"

    def index(self) -> BM25Index:
        """The BM25 index of the documents, built at the first search."""
        if self._index is None:
            self._index = BM25Index([doc.id for doc in self.documents],
                                    [f"{doc.title}. {doc.text}" for doc in self.documents])
        return self._index


# -- the generated world ------------------------------------------------------------------
PERSON, TOWN, COUNTRY, RIVER, COMPANY, INVENTION = "person", "town", "country", "river", "company", "invention"
YEAR = "year"
# Each kind's share of the entities, in generation order: a town has on average two
# people born there, a country six towns, a river two or three.
KIND_SHARES = {COUNTRY: 5, RIVER: 12, TOWN: 30, PERSON: 60, COMPANY: 24, INVENTION: 20}
# Entities (one document each). The default gives about 17,000 distinct one-hop questions
# and more at each longer chain, so the test split (a tenth of them by hash) holds well over
# 1,000 at any hops; it is built in a few tenths of a second. The minimum still has every
# kind and four-hop chains; the maximum (about 3 s to build, 3 s to index) bounds the wait.
DEFAULT_WORLD_SIZE = 5000
MIN_WORLD_SIZE, MAX_WORLD_SIZE = 100, 50_000


@dataclass(frozen=True)
class Relation:
    """A functional fact: every subject of its kind has exactly one target."""

    name: str
    subject: str
    target: str  # an entity kind, or YEAR for a value
    phrase: str  # a noun phrase for the target, "{x}" standing for the subject; "" for values
    question: str  # a question asking for the target


RELATIONS = (
    Relation("birthplace", PERSON, TOWN, "the birthplace of {x}", "In which town was {x} born?"),
    Relation("deathplace", PERSON, TOWN, "the town where {x} died", "In which town did {x} die?"),
    Relation("spouse", PERSON, PERSON, "the spouse of {x}", "Whom did {x} marry?"),
    Relation("born", PERSON, YEAR, "", "In which year was {x} born?"),
    Relation("died", PERSON, YEAR, "", "In which year did {x} die?"),
    Relation("river", TOWN, RIVER, "the river that flows through {x}", "Which river flows through {x}?"),
    Relation("country", TOWN, COUNTRY, "the country in which {x} lies", "In which country does {x} lie?"),
    Relation("capital", COUNTRY, TOWN, "the capital of {x}", "What is the capital of {x}?"),
    Relation("source", RIVER, COUNTRY, "the country where {x} rises", "In which country does {x} rise?"),
    Relation("founder", COMPANY, PERSON, "the founder of {x}", "Who founded {x}?"),
    Relation(
        "headquarters", COMPANY, TOWN, "the town where {x} has its headquarters",
        "In which town does {x} have its headquarters?",
    ),
    Relation("founded", COMPANY, YEAR, "", "In which year was {x} founded?"),
    Relation("inventor", INVENTION, PERSON, "the inventor of {x}", "Who invented {x}?"),
    Relation(
        "shown", INVENTION, TOWN, "the town where {x} was first shown",
        "In which town was {x} first shown to the public?",
    ),
    Relation("invented", INVENTION, YEAR, "", "In which year was {x} invented?"),
)  # fmt: skip
_RELATION = {relation.name: relation for relation in RELATIONS}
_RELATIONS_OF = {kind: tuple(r for r in RELATIONS if r.subject == kind) for kind in KIND_SHARES}

_ONSETS = (
    "b", "br", "c", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kr", "l", "m", "n",
    "p", "pr", "r", "s", "st", "t", "tr", "v", "w", "z",
)  # fmt: skip
# Plain vowels twice, so that most names stay easy to read and to type.
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "u", "ai", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "nd", "rk", "x")
# bm25s drops English stopwords; those of five letters or more all start with "th"
# (their, there, these), which is never an onset here, so no name is lost to tokenizing.
_MIN_NAME_LETTERS = 5
_COUNTRY_SUFFIXES = ("ia", "ora", "mark", "eth", "and")
_COMPANY_SUFFIXES = ("Works", "Foundry", "Mills", "Holdings", "Shipping", "Textiles", "Instruments", "Optics")
_DEVICES = {
    "Loom": "weaving machine", "Lamp": "safety lamp for mine shafts", "Engine": "steam engine",
    "Press": "printing press", "Compass": "navigation compass", "Pump": "water pump",
    "Kiln": "kiln for firing porcelain", "Lathe": "lathe for turning brass", "Sextant": "sextant for sailors",
    "Telegraph": "signalling telegraph", "Valve": "pressure valve", "Furnace": "smelting furnace",
}  # fmt: skip
_OCCUPATIONS = (
    "clockmaker", "cartographer", "chemist", "shipwright", "weaver", "botanist", "printer", "glassblower",
    "surveyor", "engineer", "physician", "architect", "brewer", "astronomer", "merchant",
)  # fmt: skip
_PRODUCTS = (
    "clocks", "rope", "glassware", "paper", "dyes", "bicycles", "lenses", "pumps", "ceramics", "canvas",
    "telegraph cables", "soap",
)  # fmt: skip
# Every word the paragraph templates of `_Writer` use besides names and numbers.
_TEMPLATE_WORDS = (
    "a about and are as banks born by capital country died first flows for founded has headquarters hills in "
    "include invented inventing is it its kilometres live long maker make married of on people public "
    "remembered rise rises river shown that the there through to town towns was whose worked"
)
# No invented word may be a word the documents use anyway: the syllables can spell some
# ("maker", "river", "water"), and a name containing one would match every document that
# uses the word, burying the documents that mention the name.
_RESERVED = frozenset(
    word.lower()
    for text in (_TEMPLATE_WORDS, *_COMPANY_SUFFIXES, *_DEVICES, *_DEVICES.values(), *_OCCUPATIONS, *_PRODUCTS)
    for word in text.split()
)
GENERATOR = "deepsearch-world-v2"


@dataclass
class Entity:
    """One thing in the generated world and the facts about it."""

    kind: str
    name: str  # the document title and the gold answer
    mention: str  # how sentences and questions refer to it ("the Ossel River")
    aliases: tuple[str, ...] = ()
    facts: dict[str, int] = field(default_factory=dict)  # relation -> entity index, or a year


@dataclass(frozen=True)
class World:
    """The generated entities, their documents, and the document of each entity."""

    entities: tuple[Entity, ...]
    doc_of: tuple[int, ...]  # entity index -> corpus index
    corpus: Corpus

    def __deepcopy__(self, memo: dict[int, Any]) -> World:
        return self


def _word(rng: random.Random, used: set[str], suffix: str = "") -> str:
    """A new invented word: two or three syllables, a coda, then `suffix`; never one produced
    before in this world, nor a word of the templates."""
    while True:
        syllables = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 2, 3)))]
        word = "".join(syllables) + rng.choice(_CODAS) + suffix
        if len(word) >= _MIN_NAME_LETTERS and word not in used and word not in _RESERVED:
            used.add(word)
            return word.capitalize()


def kind_counts(world_size: int) -> dict[str, int]:
    """How many entities of each kind a world of `world_size` entities holds, in generation order.

    Each kind gets its share, rounded down; people come in married pairs, so their count is
    even; companies take what rounding left over, so the counts add up exactly.
    """
    total = sum(KIND_SHARES.values())
    counts = {kind: world_size * share // total for kind, share in KIND_SHARES.items()}
    counts[PERSON] -= counts[PERSON] % 2
    counts[COMPANY] += world_size - sum(counts.values())
    return counts


def _new_entities(rng: random.Random, counts: Mapping[str, int]) -> list[Entity]:
    """Every entity with a unique name, in generation order (no facts yet)."""
    used: set[str] = set()
    entities: list[Entity] = []
    for _ in range(counts[COUNTRY]):
        name = _word(rng, used, rng.choice(_COUNTRY_SUFFIXES))
        entities.append(Entity(COUNTRY, name, name))
    for _ in range(counts[RIVER]):
        base = _word(rng, used)
        entities.append(Entity(RIVER, f"{base} River", f"the {base} River", aliases=(base,)))
    for _ in range(counts[TOWN]):
        name = _word(rng, used)
        entities.append(Entity(TOWN, name, name))
    for _ in range(counts[PERSON]):
        name = f"{_word(rng, used)} {_word(rng, used)}"
        entities.append(Entity(PERSON, name, name))
    devices = sorted(_DEVICES)
    for _ in range(counts[COMPANY]):
        base = _word(rng, used)
        name = f"{base} {rng.choice(_COMPANY_SUFFIXES)}"
        entities.append(Entity(COMPANY, name, name, aliases=(base,)))
    for _ in range(counts[INVENTION]):
        name = f"{_word(rng, used)} {rng.choice(devices)}"
        entities.append(Entity(INVENTION, name, f"the {name}"))
    return entities


def _link_facts(rng: random.Random, entities: list[Entity]) -> None:
    """Draw the facts. Every country gets a town and every river flows through one."""
    of_kind: dict[str, list[int]] = {kind: [] for kind in KIND_SHARES}
    for i, entity in enumerate(entities):
        of_kind[entity.kind].append(i)
    towns, countries, rivers, persons = of_kind[TOWN], of_kind[COUNTRY], of_kind[RIVER], of_kind[PERSON]
    shuffled = list(towns)
    rng.shuffle(shuffled)
    for position, town in enumerate(shuffled):
        covering_country = position < len(countries)
        entities[town].facts["country"] = countries[position] if covering_country else rng.choice(countries)
        covering_river = position < len(rivers)
        entities[town].facts["river"] = rivers[position] if covering_river else rng.choice(rivers)
    towns_in: dict[int, list[int]] = {country: [] for country in countries}
    for town in towns:
        towns_in[entities[town].facts["country"]].append(town)
    for country in countries:
        entities[country].facts["capital"] = rng.choice(towns_in[country])
    for river in rivers:
        entities[river].facts["source"] = rng.choice(countries)
    pairs = list(persons)
    rng.shuffle(pairs)
    for a, b in zip(pairs[::2], pairs[1::2], strict=True):
        entities[a].facts["spouse"], entities[b].facts["spouse"] = b, a
    for person in persons:
        born = rng.randint(1760, 1900)
        entities[person].facts["birthplace"] = rng.choice(towns)
        entities[person].facts["born"] = born
        entities[person].facts["deathplace"] = rng.choice(towns)
        # Later than any company founding (born + 55 at most) or invention (born + 60).
        entities[person].facts["died"] = born + rng.randint(61, 95)
    for company in of_kind[COMPANY]:
        founder = rng.choice(persons)
        entities[company].facts["founder"] = founder
        entities[company].facts["headquarters"] = rng.choice(towns)
        entities[company].facts["founded"] = entities[founder].facts["born"] + rng.randint(22, 55)
    for invention in of_kind[INVENTION]:
        inventor = rng.choice(persons)
        entities[invention].facts["inventor"] = inventor
        entities[invention].facts["shown"] = rng.choice(towns)
        entities[invention].facts["invented"] = entities[inventor].facts["born"] + rng.randint(20, 60)


def _listing(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:]


class _Writer:
    """Writes one encyclopedic paragraph per entity, noting the names and years it mentions."""

    def __init__(self, rng: random.Random, entities: Sequence[Entity]):
        self.rng = rng
        self.entities = entities
        self.incoming: dict[int, list[tuple[str, int]]] = {i: [] for i in range(len(entities))}
        for i, entity in enumerate(entities):
            for relation, target in entity.facts.items():
                if _RELATION[relation].target != YEAR:
                    self.incoming[target].append((relation, i))
        self.links: list[str] = []
        self.values: list[str] = []

    def ref(self, index: int) -> str:
        """A mention of another entity, recorded as a link of the document being written."""
        name = self.entities[index].name
        if name not in self.links:
            self.links.append(name)
        return self.entities[index].mention

    def year(self, value: int) -> str:
        if str(value) not in self.values:
            self.values.append(str(value))
        return str(value)

    def sources(self, index: int, relation: str) -> list[int]:
        return [source for name, source in self.incoming[index] if name == relation]

    def write(self, index: int) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        self.links, self.values = [], []
        entity = self.entities[index]
        sentences = getattr(self, f"_{entity.kind}")(index, entity)
        return " ".join(_sentence(s) for s in sentences), tuple(self.links), tuple(self.values)

    def _person(self, index: int, e: Entity) -> list[str]:
        rng, family, facts = self.rng, e.name.split()[-1], e.facts
        occupation = rng.choice(_OCCUPATIONS)
        place, born = self.ref(facts["birthplace"]), self.year(facts["born"])
        if rng.random() < 0.5:
            out = [f"{e.name} was a {occupation} born in {place} in {born}."]
        else:
            out = [f"born in {place} in {born}, {e.name} worked as a {occupation}."]
        married = rng.choice(("married", "was married to"))
        out.append(f"{family} {married} {self.ref(facts['spouse'])}.")
        for company in self.sources(index, "founder"):
            out.append(
                f"in {self.year(self.entities[company].facts['founded'])}, {family} founded {self.ref(company)}."
            )
        for invention in self.sources(index, "inventor"):
            year = self.year(self.entities[invention].facts["invented"])
            out.append(f"{family} is remembered for inventing {self.ref(invention)} in {year}.")
        # A second town and year in the text, so a question about either needs careful reading.
        out.append(f"{family} died in {self.ref(facts['deathplace'])} in {self.year(facts['died'])}.")
        return out

    def _town(self, index: int, e: Entity) -> list[str]:
        country, river = self.ref(e.facts["country"]), self.ref(e.facts["river"])
        if self.rng.random() < 0.5:
            out = [f"{e.name} is a town in {country} on the banks of {river}."]
        else:
            out = [f"{e.name} is a town on {river}, in {country}."]
        for capital_of in self.sources(index, "capital"):
            out.append(f"it is the capital of {self.ref(capital_of)}.")
        out.append(f"about {self.rng.randrange(2_000, 400_000, 100):,} people live there.")
        for company in self.sources(index, "headquarters"):
            out.append(f"{self.ref(company)} has its headquarters in {e.name}.")
        return out

    def _country(self, index: int, e: Entity) -> list[str]:
        out = [f"{e.name} is a country whose capital is {self.ref(e.facts['capital'])}."]
        towns = [self.ref(t) for t in self.sources(index, "country")[:5]]
        out.append(f"the towns of {e.name} include {_listing(towns)}.")
        rivers = [self.ref(r) for r in self.sources(index, "source")]
        if rivers:
            out.append(f"{_listing(rivers)} {'rises' if len(rivers) == 1 else 'rise'} in the hills of {e.name}.")
        return out

    def _river(self, index: int, e: Entity) -> list[str]:
        out = [f"{e.mention} is a river that rises in {self.ref(e.facts['source'])}."]
        out.append(f"it is about {self.rng.randrange(40, 1200, 5)} kilometres long.")
        towns = [self.ref(t) for t in self.sources(index, "river")]
        out.append(f"it flows through {_listing(towns)}.")
        return out

    def _company(self, index: int, e: Entity) -> list[str]:
        product, founder = self.rng.choice(_PRODUCTS), self.ref(e.facts["founder"])
        founded = self.year(e.facts["founded"])
        if self.rng.random() < 0.5:
            out = [f"{e.name} is a maker of {product}, founded in {founded} by {founder}."]
        else:
            out = [f"{e.name} was founded by {founder} in {founded} to make {product}."]
        out.append(f"its headquarters are in {self.ref(e.facts['headquarters'])}.")
        return out

    def _invention(self, index: int, e: Entity) -> list[str]:
        device = _DEVICES[e.name.split()[-1]]
        inventor, year = self.ref(e.facts["inventor"]), self.year(e.facts["invented"])
        return [
            f"{e.mention} is a {device} invented by {inventor} in {year}.",
            f"it was first shown to the public in {self.ref(e.facts['shown'])}.",
        ]


# Per process: (corpus seed, world size) -> world.
_WORLDS: dict[tuple[int, int], World] = {}


def generated_world(corpus_seed: int, world_size: int = DEFAULT_WORLD_SIZE) -> World:
    """The invented world of a corpus seed and size: built on first use, then shared by the process."""
    key = (corpus_seed, world_size)
    world = _WORLDS.get(key)
    if world is None:
        world = _WORLDS[key] = _build_world(corpus_seed, world_size)
    return world


def _build_world(corpus_seed: int, world_size: int = DEFAULT_WORLD_SIZE) -> World:
    rng = random.Random(f"{GENERATOR}:{corpus_seed}:{world_size}")
    entities = _new_entities(rng, kind_counts(world_size))
    _link_facts(rng, entities)
    # Doc ids are shuffled so that an id says nothing about the kind of entity behind it.
    numbers = list(range(1, len(entities) + 1))
    rng.shuffle(numbers)
    width = max(4, len(str(len(entities))))
    writer = _Writer(rng, entities)
    rows = []  # (doc id, entity index, text, links, values), then sorted by doc id
    for index in range(len(entities)):
        rows.append((f"d{numbers[index]:0{width}d}", index, *writer.write(index)))
    rows.sort()
    doc_of = [0] * len(entities)
    for position, row in enumerate(rows):
        doc_of[row[1]] = position
    corpus = Corpus(
        [Document(doc_id, entities[index].name, text) for doc_id, index, text, _, _ in rows],
        links=[row[3] for row in rows],
        values=[row[4] for row in rows],
    )
    return World(tuple(entities), tuple(doc_of), corpus)


def compose_question(world: World, rng: random.Random, hops: int) -> dict[str, Any]:
    """A question that follows `hops` facts from a random entity, with its gold chain.

    The chain lists the documents to read, one per hop: the document of the start
    entity states the first fact, the document of the entity it leads to states the
    second, and so on. No entity appears twice on a chain, so a question never loops back
    to where it started ("whom did the spouse of X marry?").
    """
    entities = world.entities
    for _ in range(1000):
        path = [rng.randrange(len(entities))]
        relations: list[Relation] = []
        answer: int | None = None
        for hop in range(hops):
            final = hop == hops - 1
            here = entities[path[-1]]
            options = [r for r in _RELATIONS_OF[here.kind] if final or r.target != YEAR]
            relation = rng.choice(options)
            target = here.facts[relation.name]
            if relation.target == YEAR:
                answer = target
                relations.append(relation)
                break
            if target in path:
                break
            relations.append(relation)
            path.append(target)
        if len(relations) != hops:
            continue
        phrase = entities[path[0]].mention
        for relation in relations[:-1]:
            phrase = relation.phrase.format(x=phrase)
        last = relations[-1]
        if last.target == YEAR:
            gold, aliases = str(answer), []
        else:
            gold, aliases = entities[path[-1]].name, list(entities[path[-1]].aliases)
        return {
            "question": last.question.format(x=phrase),
            "answer": gold,
            "aliases": aliases,
            "chain": [world.corpus.documents[world.doc_of[i]].id for i in path[:hops]],
        }
    raise EnvError(f"deepsearch: no {hops}-hop question found")  # pragma: no cover - the world always has chains


# -- a user's corpus and questions ------------------------------------------------------------
@dataclass(frozen=True)
class QARecord:
    """One question of a user's QA file."""

    question: str
    answer: str
    aliases: tuple[str, ...]
    split: str | None
    chain: tuple[str, ...]

    def instance(self) -> dict[str, Any]:
        """The question as an instance, the form `generate_instance` returns."""
        return {
            "question": self.question,
            "answer": self.answer,
            "aliases": list(self.aliases),
            "chain": list(self.chain),
        }


# Per process: (absolute path, modification time, size) -> parsed corpus.
_CORPUS_FILES: dict[tuple[str, int, int], Corpus] = {}


def _read_lines(path: str, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) for every non-blank line of a JSON Lines file."""
    text = read_text_file(path, f"{what} file")
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        records.append((number, json_object_line(str(path), number, line)))
    if not records:
        raise EnvError(f"{what} file {path} is empty")
    return records


def _require(path: str, number: int, record: Mapping[str, Any], keys: Iterable[str]) -> None:
    missing = [key for key in keys if key not in record]
    if missing:
        raise EnvError(f"{path}:{number}: missing {', '.join(repr(k) for k in missing)}")


def read_corpus_file(path: str | os.PathLike[str]) -> Corpus:
    """Parse and check a corpus file: one {"id", "title", "text"} object per line.

    Ids are strings or integers, unique without regard to case; titles and texts are
    strings, texts non-empty. The parsed corpus is cached per process until the file changes.
    """
    where = os.fspath(path)
    try:
        stat = os.stat(where)
        key = (os.path.abspath(where), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    if key is not None and key in _CORPUS_FILES:
        return _CORPUS_FILES[key]
    documents: list[Document] = []
    seen: dict[str, tuple[str, int]] = {}
    for number, record in _read_lines(where, "corpus"):
        _require(where, number, record, ("id", "title", "text"))
        doc_id, title, text = record["id"], record["title"], record["text"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
            raise EnvError(f"{where}:{number}: 'id' must be a non-empty string or an integer")
        doc_id = " ".join(str(doc_id).split())
        if not isinstance(title, str) or not isinstance(text, str):
            raise EnvError(f"{where}:{number}: 'title' and 'text' must be strings")
        if not text.strip():
            raise EnvError(f"{where}:{number}: 'text' of document {doc_id!r} is empty")
        first = seen.get(_lookup_key(doc_id))
        if first is not None:
            raise EnvError(
                f"{where}:{number}: duplicate id {doc_id!r} (line {first[1]} has {first[0]!r}; ids ignore case)"
            )
        seen[_lookup_key(doc_id)] = (doc_id, number)
        documents.append(Document(doc_id, title.strip(), text.strip()))
    corpus = Corpus(documents)
    if key is not None:
        _CORPUS_FILES[key] = corpus
    return corpus


def read_qa_file(path: str | os.PathLike[str], corpus: Corpus) -> tuple[QARecord, ...]:
    """Parse and check a QA file against its corpus; seed i is the i-th record.

    Each line holds "question" and "answer" (non-empty strings) and optionally "aliases"
    (more accepted answers), "split" (train, validation or test) and "chain" (ids of the
    documents that lead to the answer, in reading order).
    """
    where = os.fspath(path)
    records = []
    for number, record in _read_lines(where, "QA"):
        _require(where, number, record, ("question", "answer"))
        question, answer = record["question"], record["answer"]
        if not isinstance(question, str) or not question.strip():
            raise EnvError(f"{where}:{number}: 'question' must be a non-empty string")
        if not isinstance(answer, str) or not answer.strip():
            raise EnvError(f"{where}:{number}: 'answer' must be a non-empty string")
        aliases = record.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise EnvError(f"{where}:{number}: 'aliases' must be a list of non-empty strings")
        split = record.get("split")
        if split is not None and split not in SPLITS:
            raise EnvError(f"{where}:{number}: 'split' must be one of {', '.join(SPLITS)}, got {split!r}")
        chain = record.get("chain", [])
        if not isinstance(chain, list) or not all(isinstance(c, (str, int)) and not isinstance(c, bool) for c in chain):
            raise EnvError(f"{where}:{number}: 'chain' must be a list of document ids")
        ids = []
        for doc_id in chain:
            index = corpus.index_of(str(doc_id))
            if index is None:
                raise EnvError(f"{where}:{number}: 'chain' names document {str(doc_id)!r}, which the corpus lacks")
            ids.append(corpus.documents[index].id)
        accepted = tuple(a.strip() for a in aliases)
        records.append(QARecord(" ".join(question.split()), answer.strip(), accepted, split, tuple(ids)))
    return tuple(records)


def _optional_path(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and os.fspath(value).strip():
        return os.fspath(value)
    raise EnvError(f"{name} must be the path of a JSON Lines file, got {value!r}")


_ACTION = re.compile(r"^\s*(search|open|answer)\s*\[(.*)\]\s*[.!]?\s*$", re.IGNORECASE | re.DOTALL)
_BARE_VERB = re.compile(r"^\s*(search|open|answer)\b", re.IGNORECASE)
_SYNTAX = "Use search[query], open[doc id or title] or answer[text]."


def parse_action(action: str) -> tuple[str, str] | None:
    """(verb, argument) from text such as "Search[ omvale works ]"; None when unreadable."""
    found = _ACTION.match(action)
    if found is None:
        return None
    return found.group(1).lower(), " ".join(found.group(2).split())


class DeepSearch(TextEnv):
    """Answer a multi-hop question by searching, opening and reading documents."""

    id = "deepsearch"
    default_max_steps = 12
    description = "Answer multi-hop questions about an invented world by searching and reading its documents (BM25)."
    criteria = (
        "Only the submitted answer counts. It is compared with the gold answer (and any accepted alternative) "
        "after lower-casing and removing punctuation, the articles a/an/the and extra spaces. "
        "The score is the token F1 of that comparison, the best over the accepted answers: partial credit for an "
        "answer that shares some words with the gold one. It is 0 until an answer is given. "
        "Success means an exact match after the same normalisation. Searching and opening documents earn nothing."
    )

    def __init__(
        self,
        *,
        hops: int = 2,
        top_k: int = 5,
        corpus_seed: int = 0,
        world_size: int = DEFAULT_WORLD_SIZE,
        corpus: str | None = None,
        qa: str | None = None,
        max_steps: int | None = None,
        instances: Any = None,
    ):
        self.hops = int_knob("hops", hops, MIN_HOPS, MAX_HOPS)
        self.top_k = int_knob("top_k", top_k, 1, MAX_TOP_K)
        self.corpus_seed = int_knob("corpus_seed", corpus_seed, 0, 2**31 - 1)
        self.world_size = int_knob("world_size", world_size, MIN_WORLD_SIZE, MAX_WORLD_SIZE)
        self.corpus_path = _optional_path("corpus", corpus)
        self.qa_path = _optional_path("qa", qa)
        if self.corpus_path is not None and self.qa_path is None:
            raise EnvError("deepsearch: corpus= needs qa= too (a JSON Lines file of questions about that corpus)")
        # A user's files are read now, so a broken file fails at `make` and not mid-run;
        # the generated world waits until an instance is first needed.
        self._corpus: Corpus | None = read_corpus_file(self.corpus_path) if self.corpus_path else None
        self._qa: tuple[QARecord, ...] | None = (
            read_qa_file(self.qa_path, self.corpus) if self.qa_path is not None else None
        )
        super().__init__(
            max_steps=max_steps, instances=instances, hops=self.hops, top_k=self.top_k, corpus_seed=self.corpus_seed,
            world_size=self.world_size, corpus=self.corpus_path, qa=self.qa_path,
        )  # fmt: skip
        self._question = ""
        self._answers: list[str] = []
        self._chain: list[int] = []
        self._view = "start"  # start, search, doc or answered
        self._query = ""
        self._results: list[int] = []
        self._matches = 0
        self._doc: int | None = None
        self._opened: set[int] = set()
        self._answer: str | None = None
        self._em = 0.0
        self._f1 = 0.0

    @property
    def corpus(self) -> Corpus:
        """The documents this environment searches (the generated world's unless a file was given)."""
        if self._corpus is None:
            return generated_world(self.corpus_seed, self.world_size).corpus
        return self._corpus

    def _default_max_steps(self) -> int:
        # The oracle needs 2 * hops + 1 actions (a search and an open per hop, then the
        # answer); the rest is slack for searches that miss.
        return 4 * self.hops + 4

    # -- instances ----------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A generated question with `hops` hops, or the seed-th question of the QA file."""
        if self._qa is not None:
            if not 0 <= seed < len(self._qa):
                last = len(self._qa) - 1
                raise EnvError(f"deepsearch: seed {seed} is not in {self.qa_path} (it holds seeds 0..{last})")
            return self._qa[seed].instance()
        return compose_question(generated_world(self.corpus_seed, self.world_size), random.Random(seed), self.hops)

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        question, answer, aliases, chain = (instance.get(k) for k in ("question", "answer", "aliases", "chain"))
        if not isinstance(question, str) or not question.strip():
            raise EnvError("'question' must be a non-empty string")
        if not isinstance(answer, str) or not answer.strip():
            raise EnvError("'answer' must be a non-empty string")
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise EnvError("'aliases' must be a list of strings")
        if not isinstance(chain, list) or not all(isinstance(c, str) for c in chain):
            raise EnvError("'chain' must be a list of document ids")
        unknown = [c for c in chain if self.corpus.index_of(c) is None]
        if unknown:
            raise EnvError(f"'chain' names document {unknown[0]!r}, which this environment's corpus lacks")
        if self._qa is None and chain:
            # Every generated world uses the same doc ids, so a question frozen from another
            # world (another generator version, corpus_seed or world_size) would pass the check
            # above and then play as nonsense; its answer missing from its last document gives it away.
            last = self.corpus.documents[self.corpus.index_of(chain[-1])]
            if answer not in last.text:
                raise EnvError(
                    f"the answer {answer!r} is not in {last.id}, the last document of 'chain': the instance comes "
                    "from another generated world (generator version, corpus_seed or world_size)"
                )

    def seed_split(self, seed: int) -> str:
        """The split a QA file records for the seed when it records one; else as in TextEnv."""
        if self.instance_file is None and self._qa is not None and 0 <= int(seed) < len(self._qa):
            recorded = self._qa[int(seed)].split
            if recorded is not None:
                return recorded
        return super().seed_split(seed)

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """As in TextEnv; with a QA file, only its seeds are scanned and its recorded splits kept."""
        if self.instance_file is not None or self._qa is None:
            return super().split_seeds(split, n, start)
        if split not in SPLITS:
            raise EnvError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        n = int(n)
        if n < 0:
            raise EnvError("the number of seeds must be >= 0")
        chosen: list[int] = []
        seen: set[str] = set()
        for seed in range(max(int(start), 0), len(self._qa)):
            if len(chosen) == n:
                break
            if self.seed_split(seed) != split:
                continue
            digest = instance_digest(self.generate_instance(seed))
            if digest not in seen:
                seen.add(digest)
                chosen.append(seed)
        if len(chosen) < n:
            raise EnvError(
                f"{self.qa_path} holds {len(chosen)} distinct {split} questions"
                f"{f' from seed {start}' if start else ''}; {n} requested"
            )
        return chosen

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        corpus = self.corpus
        self._question = str(instance["question"])
        self._answers = [str(instance["answer"]), *instance["aliases"]]
        self._chain = [index for index in (corpus.index_of(c) for c in instance["chain"]) if index is not None]
        self._view, self._query, self._results, self._matches, self._doc = "start", "", [], 0, None
        self._opened = set()
        self._answer = None
        self._em = self._f1 = 0.0

    # -- dynamics -----------------------------------------------------------------
    def _step(self, action: str) -> tuple[bool, bool, str]:
        parsed = parse_action(action)
        if parsed is None:
            bare = _BARE_VERB.match(action)
            if bare:
                verb = bare.group(1).lower()
                return False, False, f"{verb} needs square brackets around its argument, as in {verb}[...]. {_SYNTAX}"
            return False, False, f"{echo(action)} is not an action. {_SYNTAX}"
        verb, argument = parsed
        if not argument:
            needs = {"search": "a query", "open": "a document id or title", "answer": "your answer"}[verb]
            return False, False, f"{verb}[] is empty; put {needs} between the brackets."
        if verb == "search":
            return self._search(argument)
        if verb == "open":
            return self._open(argument)
        self._answer = argument
        self._em, self._f1 = answer_scores(argument, self._answers)
        self._view = "answered"
        return True, True, f"You answered {echo(argument, 80)}. The episode is over."

    def _search(self, query: str) -> tuple[bool, bool, str]:
        self._query = query.casefold()
        self._results, self._matches = self.corpus.search(self._query, self.top_k)
        self._view, self._doc = "search", None
        if not self._results:
            return True, False, f"You searched for {echo(self._query, 80)}; no document matches."
        return True, False, f"You searched for {echo(self._query, 80)}."

    def _open(self, reference: str) -> tuple[bool, bool, str]:
        corpus = self.corpus
        found = corpus.lookup(reference)
        if not found:
            example = corpus.documents[self._results[0] if self._results else 0].id
            hint = f"Open a document by the id shown in the search results (such as {example}) or by its exact title."
            return False, False, f"There is no document {echo(reference)}. {hint}"
        if len(found) > 1:
            ids = ", ".join(corpus.documents[i].id for i in found)
            return False, False, f"{len(found)} documents have the title {echo(reference)} ({ids}); open one by its id."
        self._doc = found[0]
        self._opened.add(self._doc)
        self._view, self._query, self._results, self._matches = "doc", "", [], 0
        doc = corpus.documents[self._doc]
        return True, False, f"You opened {doc.id} ({doc.title or 'untitled'})."

    # -- observation --------------------------------------------------------------
    def render(self) -> str:
        corpus = self.corpus
        lines = [f"Question: {self._question}"]
        if self._view == "start":
            lines.append("You have not searched yet.")
        elif self._view == "search":
            if self._results:
                lines.append(
                    f"Search results for {json.dumps(self._query, ensure_ascii=False)} "
                    f"({len(self._results)} shown of {self._matches} matching):"
                )
                for rank, index in enumerate(self._results, start=1):
                    doc = corpus.documents[index]
                    lines.append(f"{rank}. [{doc.id}] {doc.title or 'untitled'}: {corpus.snippet(index, self._query)}")
            else:
                lines.append(f"No document matches {json.dumps(self._query, ensure_ascii=False)}.")
        elif self._view == "doc" and self._doc is not None:
            doc = corpus.documents[self._doc]
            lines.append(f"Document {doc.id}: {doc.title or 'untitled'}")
            lines.append(doc.text)
        elif self._answer is not None:
            verdict = "yes" if self._em == 1.0 else "no"
            lines.append(f"Your answer: {json.dumps(self._answer, ensure_ascii=False)} "
                         f"(exact match: {verdict}; token F1: {self._f1:.2f}).")  # fmt: skip
        if self._opened:
            opened = "; ".join(f"{corpus.documents[i].id} ({corpus.documents[i].title or 'untitled'})"
                               for i in sorted(self._opened, key=lambda i: corpus.documents[i].id))  # fmt: skip
            lines.append(f"Documents opened so far: {opened}.")
        else:
            lines.append("You have not opened any document yet.")
        return "\n".join(lines)

    def state_key(self) -> str:
        corpus = self.corpus
        if self._view == "search":
            view = f"search={json.dumps(self._query, ensure_ascii=True)}"
        elif self._view == "doc" and self._doc is not None:
            view = f"open={corpus.documents[self._doc].id}"
        else:
            view = self._view
        opened = ",".join(sorted(corpus.documents[i].id for i in self._opened)) or "-"
        answer = "-" if self._answer is None else json.dumps(self._answer, ensure_ascii=True)
        return f"{view}|opened={opened}|answer={answer}"

    def score(self) -> float:
        return self._f1

    def is_success(self) -> bool:
        return self._em == 1.0

    # -- planner ------------------------------------------------------------------
    def _oracle_action(self) -> str:
        # Read the gold chain in order: search for the next unread document's title, open
        # it from the results (or straight by id when the search did not list it), and
        # answer once every document on the chain has been read. Without a chain (a user's
        # QA file that gives none) the oracle answers at once.
        corpus = self.corpus
        for index in self._chain:
            if index in self._opened:
                continue
            doc = corpus.documents[index]
            searched = self._view == "search" and self._query == _lookup_key(doc.title)
            if index in self._results or searched or not doc.title.strip():
                return f"open[{doc.id}]"
            return f"search[{doc.title}]"
        return f"answer[{self._answers[0]}]"

    def _admissible_actions(self) -> list[str]:
        corpus = self.corpus
        actions = [f"search[{self._question}]"]
        if self._view == "search":
            actions += [f"open[{corpus.documents[i].id}]" for i in self._results]
        elif self._view == "doc" and self._doc is not None:
            links = corpus.links[self._doc]
            actions += [f"search[{name}]" for name in links]
            candidates = [*links, *corpus.values[self._doc]] or [corpus.documents[self._doc].title]
            actions += [f"answer[{text}]" for text in candidates if text.strip()]
        return list(dict.fromkeys(actions))

    @property
    def instruction(self) -> str:
        if self._corpus is None:
            source = (
                "The answer is written in the documents; do not rely on what you already know, because the people, "
                "places and things in them are invented."
            )
            example, short = "d0042", "a name or a year"
        else:
            source = "The answer is written in the documents; go by them rather than by what you remember."
            example, short = self._corpus.documents[0].id, "a few words"
        return (
            f"Answer the question using a collection of documents. {source} "
            "A question may need several facts in a row: find the first one, then look up what it leads to. "
            "Each turn, take exactly one action:\n"
            f"- search[query]: list the {self.top_k} documents that best match the words of the query, each with "
            "its id in square brackets, its title and a short extract.\n"
            f"- open[doc id or title]: show one document in full, for example open[{example}].\n"
            f"- answer[text]: give your final answer, as short as possible ({short}). This ends the episode.\n"
            "Only the answer is scored: token overlap with the correct answer, ignoring case, punctuation and "
            f"articles. You have at most {self.max_steps} actions."
        )
