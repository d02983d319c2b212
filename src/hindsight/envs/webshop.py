"""WebShop-style shopping: search a generated catalogue, open an item, choose its options, buy.

A pure-Python take on WebShop (Yao et al., 2022). The catalogue is generated from a fixed
seed (its own word lists, no WebShop data), built once per process on first use and
shared by every environment of the same `catalogue_size`; search ranks items with BM25
(`bm25s`), ties broken by item id. A task asks for a kind of product with some attributes,
some option values and a price limit; buying ends the episode and the purchase is graded
with WebShop's reward (`purchase_reward`).

Actions follow WebShop's grammar: `search[QUERY]` on the search page and
`click[TARGET]` for a button, an item id or an option value shown on the page.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hindsight.envs.base import TextEnv, echo, int_knob
from hindsight.envs.contract import EnvError
from hindsight.envs.search import BM25Index

#: Seed of the catalogue generator. Changing it changes every item and so every task.
CATALOGUE_SEED = 20_220_701
MIN_CATALOGUE, MAX_CATALOGUE = 100, 5000
MIN_PER_PAGE, MAX_PER_PAGE = 3, 25
#: A search lists at most this many items, as WebShop does.
MAX_RESULTS = 50

BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
DESCRIPTION = "description"
BUY_NOW = "buy now"
_BUTTON_ALIASES = {"next": NEXT_PAGE, "next>": NEXT_PAGE, "prev": PREV_PAGE, "<prev": PREV_PAGE}

# Queries are quoted in full up to this length (the oracle's title searches fit).
_QUERY_SHOWN = 120
ACTION_PATTERN = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)

# -- word lists -------------------------------------------------------------------------
COLOURS = (
    "black", "white", "navy blue", "olive green", "charcoal grey", "burgundy", "sky blue", "sand beige",
    "forest green", "coral pink", "mustard yellow", "slate blue",
)  # fmt: skip
DEVICE_COLOURS = ("black", "white", "silver", "space grey", "rose gold", "midnight blue", "sage green")
SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
CAPACITIES = ("12 oz", "16 oz", "20 oz", "24 oz", "32 oz", "40 oz")
PACKS = ("1 pack", "2 pack", "3 pack", "4 pack", "6 pack", "12 pack")
SCENTS = ("unscented", "lavender", "citrus", "eucalyptus mint", "vanilla bean", "sea salt", "green tea", "cedarwood")
VOLUMES = ("2 fl oz", "4 fl oz", "8 fl oz", "12 fl oz", "16 fl oz")
BED_SIZES = ("twin", "full", "queen", "king", "california king")

Options = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class ProductType:
    """A kind of product: what its items may be described with and offered in."""

    name: str
    article: str  # "a", "an", or "" for plurals and mass nouns, so instructions read naturally
    category: str
    attributes: tuple[str, ...]
    options: Options
    price_range: tuple[int, int]  # whole dollars, inclusive


def _kind(
    name: str, article: str, category: str, attributes: str, options: Options, low: int, high: int
) -> ProductType:
    return ProductType(name, article, category, tuple(attributes.split("; ")), options, (low, high))


PRODUCT_TYPES: tuple[ProductType, ...] = (
    _kind("t-shirt", "a", "clothing", "organic cotton; moisture wicking; machine washable; slim fit; relaxed fit; "
          "short sleeve; long sleeve; tagless", (("colour", COLOURS), ("size", SIZES)), 9, 35),
    _kind("hoodie", "a", "clothing", "fleece lined; pullover; zip up; heavyweight; oversized; recycled polyester; "
          "kangaroo pocket; machine washable", (("colour", COLOURS), ("size", SIZES)), 22, 70),
    _kind("jeans", "", "clothing", "slim fit; straight leg; high waisted; stretch denim; distressed; bootcut; "
          "relaxed fit; button fly", (("colour", COLOURS), ("size", SIZES)), 25, 90),
    _kind("rain jacket", "a", "clothing", "waterproof; packable; hooded; breathable; lightweight; windproof; "
          "seam sealed; reflective trim", (("colour", COLOURS), ("size", SIZES)), 35, 160),
    _kind("wool socks", "", "clothing", "merino wool; cushioned; moisture wicking; crew length; ankle length; "
          "odor resistant; arch support", (("colour", COLOURS), ("size", SIZES), ("pack", PACKS)), 8, 30),
    _kind("knit sweater", "a", "clothing", "cashmere blend; cable knit; crew neck; v neck; oversized; cropped; "
          "hand wash only; soft touch", (("colour", COLOURS), ("size", SIZES)), 28, 110),
    _kind("running shoes", "", "footwear", "lightweight; breathable mesh; cushioned; non slip; wide toe box; "
          "arch support; carbon plate; waterproof", (("colour", COLOURS), ("shoe size", SHOE_SIZES)), 45, 180),
    _kind("hiking boots", "", "footwear", "waterproof; ankle support; rubber lug sole; leather upper; insulated; "
          "lightweight; vegan leather; breathable", (("colour", COLOURS), ("shoe size", SHOE_SIZES)), 60, 220),
    _kind("slippers", "", "footwear", "memory foam; fuzzy lining; non slip sole; machine washable; open toe; "
          "closed back; indoor outdoor", (("colour", COLOURS), ("shoe size", SHOE_SIZES)), 12, 45),
    _kind("sandals", "", "footwear", "adjustable straps; arch support; waterproof; cork footbed; vegan leather; "
          "non slip; lightweight", (("colour", COLOURS), ("shoe size", SHOE_SIZES)), 18, 80),
    _kind("coffee mug", "a", "kitchen", "ceramic; dishwasher safe; microwave safe; insulated; stainless steel; "
          "spill proof lid; stackable; handmade", (("colour", COLOURS), ("capacity", CAPACITIES)), 8, 35),
    _kind("water bottle", "a", "kitchen", "stainless steel; insulated; leak proof; bpa free; dishwasher safe; "
          "straw lid; wide mouth; vacuum sealed", (("colour", COLOURS), ("capacity", CAPACITIES)), 10, 45),
    _kind("frying pan", "a", "kitchen", "nonstick; cast iron; stainless steel; induction compatible; oven safe; "
          "dishwasher safe; pfoa free; ceramic coated",
          (("pan size", ("8 inch", "9.5 inch", "10 inch", "11 inch", "12 inch", "14 inch")),), 18, 120),
    _kind("cutting board", "a", "kitchen", "bamboo; acacia wood; juice groove; dishwasher safe; non slip feet; "
          "reversible; knife friendly; easy grip handle", (("pack", PACKS),), 12, 60),
    _kind("bed sheet set", "a", "home", "cotton; bamboo viscose; deep pocket; cooling; wrinkle resistant; "
          "400 thread count; sateen weave; hypoallergenic", (("colour", COLOURS), ("bed size", BED_SIZES)), 30, 140),
    _kind("throw pillow", "a", "home", "down alternative; velvet; removable cover; linen; hidden zipper; "
          "machine washable; decorative; extra plump", (("colour", COLOURS), ("pack", PACKS)), 12, 55),
    _kind("desk lamp", "a", "home", "led; dimmable; usb charging port; adjustable arm; touch control; eye caring; "
          "clamp mount; energy efficient", (("colour", DEVICE_COLOURS),), 18, 75),
    _kind("blackout curtains", "", "home", "thermal insulated; noise reducing; grommet top; room darkening; "
          "machine washable; energy saving; wrinkle free",
          (("colour", COLOURS), ("curtain length", ("63 in", "84 in", "95 in", "108 in", "120 in"))), 20, 90),
    _kind("scented candle", "a", "home", "soy wax; long lasting; lead free wick; essential oils; glass jar; "
          "hand poured; clean burning", (("scent", SCENTS), ("pack", PACKS)), 10, 45),
    _kind("wireless earbuds", "", "electronics", "noise cancelling; water resistant; long battery life; "
          "fast charging; touch control; wireless charging case; low latency; bluetooth 5.3",
          (("colour", DEVICE_COLOURS),), 25, 200),
    _kind("over-ear headphones", "", "electronics", "noise cancelling; foldable; wired and wireless; "
          "memory foam cushions; long battery life; built-in microphone; lightweight",
          (("colour", DEVICE_COLOURS),), 35, 300),
    _kind("phone case", "a", "electronics", "shockproof; slim; clear back; magnetic; raised edges; drop tested; "
          "wireless charging compatible; kickstand",
          (("colour", DEVICE_COLOURS), ("phone model", ("nova 12", "nova 13", "nova 13 plus", "zephyr s",
                                                       "zephyr s max", "lumen x", "lumen x mini"))), 9, 40),
    _kind("usb-c cable", "a", "electronics", "fast charging; braided nylon; data transfer; tangle free; "
          "right angle; 100w power delivery; durable",
          (("colour", DEVICE_COLOURS), ("length", ("3 ft", "6 ft", "10 ft", "15 ft")), ("pack", PACKS)), 6, 30),
    _kind("bluetooth speaker", "a", "electronics", "waterproof; portable; stereo sound; long battery life; "
          "built-in microphone; dustproof; floating; deep bass", (("colour", DEVICE_COLOURS),), 20, 180),
    _kind("mechanical keyboard", "a", "electronics", "rgb backlit; hot swappable; wireless; compact; tenkeyless; "
          "aluminum frame; quiet typing",
          (("colour", DEVICE_COLOURS), ("switch", ("red switch", "brown switch", "blue switch", "silent switch"))),
          40, 200),
    _kind("wireless mouse", "a", "electronics", "ergonomic; silent click; rechargeable; adjustable dpi; bluetooth; "
          "lightweight; ambidextrous", (("colour", DEVICE_COLOURS),), 10, 90),
    _kind("shampoo", "", "personal care", "sulfate free; paraben free; dry hair formula; curly hair formula; "
          "color safe; vegan; moisturizing; clarifying", (("scent", SCENTS), ("volume", VOLUMES)), 6, 40),
    _kind("body lotion", "a", "personal care", "non greasy; fast absorbing; shea butter; hypoallergenic; vitamin e; "
          "dry skin formula; dermatologist tested", (("scent", SCENTS), ("volume", VOLUMES)), 6, 35),
    _kind("lip balm", "", "personal care", "spf 15; beeswax; moisturizing; vegan; tinted; long lasting; "
          "natural ingredients", (("scent", SCENTS), ("pack", PACKS)), 3, 20),
    _kind("deodorant", "", "personal care", "aluminum free; sensitive skin formula; long lasting; "
          "natural ingredients; baking soda free; travel size; vegan", (("scent", SCENTS), ("pack", PACKS)), 5, 25),
    _kind("yoga mat", "a", "sports", "non slip; extra thick; eco friendly; lightweight; carrying strap; "
          "sweat resistant; natural rubber; alignment lines",
          (("colour", COLOURS), ("thickness", ("4 mm", "5 mm", "6 mm", "8 mm", "10 mm"))), 18, 95),
    _kind("dumbbells", "", "sports", "neoprene coated; cast iron; hexagon shape; non slip grip; adjustable; "
          "rust resistant; chrome handle",
          (("weight", ("5 lb", "10 lb", "15 lb", "20 lb", "25 lb", "30 lb", "40 lb")),), 20, 160),
    _kind("camping tent", "a", "sports", "waterproof; easy setup; double wall; freestanding; ultralight; "
          "rainfly included; mesh windows", (("colour", COLOURS), ("capacity", ("1 person", "2 person",
                                                                           "3 person", "4 person", "6 person"))),
          45, 320),
    _kind("sleeping bag", "a", "sports", "lightweight; compressible; water resistant; mummy shape; rectangular; "
          "down filled; synthetic insulation",
          (("colour", COLOURS), ("temperature rating", ("15 f", "20 f", "30 f", "40 f", "50 f"))), 30, 220),
    _kind("hiking backpack", "a", "sports", "water resistant; hydration compatible; padded straps; rain cover; "
          "lightweight; ventilated back; hip belt",
          (("colour", COLOURS), ("volume", ("20 l", "30 l", "40 l", "50 l", "65 l"))), 30, 190),
    _kind("dog collar", "a", "pets", "adjustable; reflective; quick release buckle; padded; nylon; leather; "
          "waterproof; tag ring", (("colour", COLOURS), ("size", SIZES)), 7, 40),
    _kind("cat bed", "a", "pets", "washable; self warming; donut shape; non slip bottom; plush; calming; "
          "orthopedic", (("colour", COLOURS), ("size", SIZES)), 15, 70),
    _kind("dog leash", "a", "pets", "reflective; padded handle; heavy duty; hands free; tangle free; nylon; "
          "traffic handle", (("colour", COLOURS), ("length", ("4 ft", "5 ft", "6 ft", "8 ft", "15 ft"))), 8, 45),
    _kind("spiral notebook", "a", "office", "hardcover; thick paper; perforated pages; pocket folder; "
          "recycled paper; lay flat; 100 sheets",
          (("colour", COLOURS), ("ruling", ("college ruled", "wide ruled", "dot grid", "graph", "blank")),
           ("pack", PACKS)), 4, 30),
    _kind("gel pens", "", "office", "quick drying; smooth writing; fine point; retractable; smudge proof; "
          "refillable; comfort grip", (("ink", ("black ink", "blue ink", "red ink", "assorted ink")), ("pack", PACKS)),
          5, 30),
    _kind("office chair", "an", "office", "ergonomic; lumbar support; adjustable height; breathable mesh; "
          "padded armrests; swivel; high back", (("colour", COLOURS),), 80, 320),
    _kind("ground coffee", "", "grocery", "arabica beans; medium roast; dark roast; organic; fair trade; low acid; "
          "small batch", (("flavor", ("original", "french vanilla", "hazelnut", "caramel", "mocha", "cinnamon")),
                          ("pack", PACKS)), 8, 45),
    _kind("protein bars", "", "grocery", "gluten free; high protein; low sugar; keto friendly; plant based; "
          "non gmo; no artificial sweeteners",
          (("flavor", ("chocolate chip", "peanut butter", "cookie dough", "lemon", "salted caramel", "berry")),
           ("pack", PACKS)), 12, 50),
)  # fmt: skip

BRANDS = (
    "Northpine", "Larkspur", "Bramblewood", "Tidewell", "Oakhollow", "Quillmark", "Sunvale", "Fernwick",
    "Maplecrest", "Brightloom", "Stoneharbor", "Wrenfield", "Kestrel", "Marlow", "Pebblebrook", "Driftwood",
    "Halcyon", "Juniper", "Emberly", "Cloudberry", "Silverbirch", "Foxglove", "Harborline", "Clearwater",
    "Ironbark", "Meadowlark", "Saltmarsh", "Windrose", "Copperfield", "Glenmore", "Ashgrove", "Bluefin",
    "Hollowtree", "Nimbus", "Orchardly", "Petalworks", "Quarryhill", "Riverstone", "Thistledown", "Zephyrine",
)  # fmt: skip
LINES = (
    "Classic", "Essential", "Pro", "Everyday", "Summit", "Urban", "Trail", "Studio", "Voyager", "Basics",
    "Elite", "Aero", "Comfort", "Heritage", "Prime", "Terra", "Drift", "Core", "Horizon", "Lumen",
)  # fmt: skip
_CATEGORY_BLURBS = {
    "clothing": "Cut for everyday comfort and easy care.",
    "footwear": "Shaped for a secure fit from the first wear.",
    "kitchen": "Made for daily use in a busy kitchen.",
    "home": "Adds comfort and a finished look to any room.",
    "electronics": "Covered by a one-year limited warranty.",
    "personal care": "Gentle enough for every day.",
    "sports": "Tested outdoors and built to last.",
    "pets": "Designed with curious, active pets in mind.",
    "office": "Keeps a workspace tidy and productive.",
    "grocery": "Packed fresh and sealed to keep its flavour.",
}
_OPENERS = ("I'm looking for", "I need", "Find me", "I want to buy", "Please find")
_ID_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


# -- the catalogue -----------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One product of the catalogue. Options are (name, offered values) in display order."""

    id: str
    product_type: str
    category: str
    title: str
    attributes: tuple[str, ...]
    options: Options
    price: float
    description: str

    def option_values(self, name: str) -> tuple[str, ...]:
        return next((values for option, values in self.options if option == name), ())

    def option_of(self, value: str) -> str | None:
        """The option a value belongs to (values are distinct within an item), or None."""
        return next((name for name, values in self.options if value in values), None)


def _capitalised(text: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in text.split())


def _make_item(rng: random.Random, item_id: str, kind: ProductType) -> tuple[Item, tuple[str, ...]]:
    """An item of `kind` and the key that must be unique for its title to stay distinctive."""
    brand, line = rng.choice(BRANDS), rng.choice(LINES)
    attributes = tuple(rng.sample(kind.attributes, rng.randint(3, 4)))
    options = []
    for name, pool in kind.options:
        chosen = set(rng.sample(pool, rng.randint(min(3, len(pool)), min(6, len(pool)))))
        options.append((name, tuple(value for value in pool if value in chosen)))
    low, high = kind.price_range
    price = rng.randint(low, high) + rng.choice((0.49, 0.95, 0.99))
    # The title names two of the attributes; the rest only appear in the description.
    title = f"{brand} {line} {_capitalised(kind.name)}, {_capitalised(attributes[0])}, {_capitalised(attributes[1])}"
    offered = "; ".join(f"{name}: {', '.join(values)}" for name, values in options)
    description = (
        f"The {brand} {line} {kind.name}. Features: {', '.join(attributes)}. "
        f"{_CATEGORY_BLURBS[kind.category]} Available in {offered}."
    )
    item = Item(item_id, kind.name, kind.category, title, attributes, tuple(options), round(price, 2), description)
    return item, (brand, line, kind.name, *sorted(attributes[:2]))


@functools.lru_cache(maxsize=4)
def catalogue(size: int) -> tuple[Item, ...]:
    """The first `size` items of the fixed catalogue (the same items in every process).

    Items are drawn one after another from one generator, so a smaller catalogue is a
    prefix of a larger one. No two items share a brand, line, product type and pair of
    title attributes, so every title tells its item apart.
    """
    rng = random.Random(CATALOGUE_SEED)
    items: list[Item] = []
    ids: set[str] = set()
    keys: set[tuple[str, ...]] = set()
    while len(items) < size:
        item_id = "B0" + "".join(rng.choices(_ID_CHARS, k=8))
        item, key = _make_item(rng, item_id, rng.choice(PRODUCT_TYPES))
        if item_id in ids or key in keys:
            continue
        ids.add(item_id)
        keys.add(key)
        items.append(item)
    return tuple(items)


@functools.lru_cache(maxsize=4)
def _items_by_id(size: int) -> dict[str, Item]:
    return {item.id: item for item in catalogue(size)}


class SearchIndex:
    """BM25 over each item's title, category and description (`BM25Index`), ties broken by item id."""

    def __init__(self, items: Sequence[Item]):
        self._ids = [item.id for item in items]
        self._index = BM25Index(self._ids, [f"{item.title}. {item.category}. {item.description}" for item in items])

    def search(self, query: str, limit: int = MAX_RESULTS) -> tuple[str, ...]:
        """Ids of the items matching `query` (best first), at most `limit` of them."""
        return tuple(self._ids[i] for i in self._index.search(query, limit)[0])


@functools.lru_cache(maxsize=4)
def search_index(size: int) -> SearchIndex:
    """The search index of `catalogue(size)`, built once per process."""
    return SearchIndex(catalogue(size))


# -- the reward --------------------------------------------------------------------------
@dataclass(frozen=True)
class PurchaseReward:
    """WebShop's reward of a purchase, with its parts."""

    r_type: float
    attributes_matched: int
    attributes_total: int
    options_matched: int
    options_total: int
    price_ok: bool

    @property
    def value(self) -> float:
        hits = self.attributes_matched + self.options_matched + int(self.price_ok)
        return self.r_type * hits / (self.attributes_total + self.options_total + 1)


def purchase_reward(
    *,
    item_type: str,
    item_category: str,
    item_attributes: Sequence[str],
    item_price: float,
    chosen_options: Mapping[str, str],
    goal_type: str,
    goal_category: str,
    goal_attributes: Sequence[str],
    goal_options: Mapping[str, str],
    price_upper: float,
) -> PurchaseReward:
    """Grade a purchase against a goal with WebShop's reward (Yao et al., 2022, section 3.2).

        r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[price <= price_upper]) / (|U_att| + |U_opt| + 1)

    U_att and U_opt are the goal's attributes and options, Y_att the bought item's
    attributes and Y_opt the options chosen before buying: a goal option counts when the
    value chosen for that option is the goal's value. WebShop's r_type compares product
    types by fuzzy text match and grades 1, 0.5, 0.1 or 0; the generated catalogue
    names its types and categories exactly, so here r_type is 1 for the goal's product
    type, 0.5 for another type of the same category and 0 otherwise.
    """
    if item_type == goal_type:
        r_type = 1.0
    elif item_category == goal_category:
        r_type = 0.5
    else:
        r_type = 0.0
    owned = set(item_attributes)
    return PurchaseReward(
        r_type=r_type,
        attributes_matched=sum(attribute in owned for attribute in goal_attributes),
        attributes_total=len(goal_attributes),
        options_matched=sum(chosen_options.get(name) == value for name, value in goal_options.items()),
        options_total=len(goal_options),
        price_ok=item_price <= price_upper,
    )


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def _listing(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _button_row(buttons: Sequence[str]) -> str:
    return "Buttons: " + " ".join(f"[{button}]" for button in buttons)


# -- the environment ---------------------------------------------------------------------
class WebShop(TextEnv):
    """Find and buy the product an instruction describes in a generated web store."""

    id = "webshop"
    default_max_steps = 15
    description = "Search a generated web store, open items, choose options and buy what the instruction asks for."
    criteria = (
        "Nothing is scored until an item is bought; buying ends the episode. The purchase is then graded as in "
        "WebShop: count the requested attributes the bought item has, the requested options that were chosen "
        "with the requested value, and 1 more if its price is within the limit; divide by the number of requested "
        "attributes plus requested options plus 1; and multiply by a product-type factor: 1 for the requested kind "
        "of product, 0.5 for another kind from the same category, 0 otherwise. Success means a score of 1."
    )

    def __init__(
        self,
        *,
        catalogue_size: int = 2000,
        results_per_page: int = 10,
        max_steps: int | None = None,
        instances: Any = None,
    ):
        self.catalogue_size = int_knob("catalogue_size", catalogue_size, MIN_CATALOGUE, MAX_CATALOGUE)
        self.results_per_page = int_knob("results_per_page", results_per_page, MIN_PER_PAGE, MAX_PER_PAGE)
        super().__init__(
            max_steps=max_steps,
            instances=instances,
            catalogue_size=self.catalogue_size,
            results_per_page=self.results_per_page,
        )
        # The state is a handful of strings so that copies of the env stay cheap; the
        # catalogue and the index live in per-process caches.
        self._goal: dict[str, Any] = {}
        self._page = "search"
        self._query = ""
        self._results: tuple[str, ...] = ()
        self._results_page = 0
        self._item: str | None = None
        self._chosen: dict[str, str] = {}
        self._reward: PurchaseReward | None = None

    # -- instances ----------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A task built from a random target item of the catalogue.

        The goal asks for the target's product type, two or three of its attributes, one
        offered value of each of its options, and a price limit one to three tens of
        dollars above the next multiple of ten below its price. The target meets every
        part, so a perfect purchase always exists (often more than one).
        """
        rng = random.Random(seed)
        item = catalogue(self.catalogue_size)[rng.randrange(self.catalogue_size)]
        attributes = rng.sample(item.attributes, rng.randint(2, 3))
        options = {name: rng.choice(values) for name, values in item.options}
        price_upper = 10.0 * (int(item.price // 10) + rng.randint(1, 3))
        kind = next(kind for kind in PRODUCT_TYPES if kind.name == item.product_type)
        wanted = " ".join(part for part in (kind.article, kind.name) if part)
        chosen = _listing([f"{name}: {value}" for name, value in options.items()])
        instruction = (
            f"{rng.choice(_OPENERS)} {wanted} featuring {_listing(attributes)}, with {chosen}, "
            f"and price lower than {price_upper:.2f} dollars."
        )
        return {
            "item": item.id,
            "product_type": item.product_type,
            "category": item.category,
            "attributes": attributes,
            "options": options,
            "price_upper": price_upper,
            "instruction": instruction,
        }

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        item_id = instance.get("item")
        item = _items_by_id(self.catalogue_size).get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise EnvError(f"'item' must be the id of an item of the {self.catalogue_size}-item catalogue")
        if instance.get("product_type") != item.product_type or instance.get("category") != item.category:
            raise EnvError(f"'product_type' and 'category' must be those of item {item.id}")
        attributes = instance.get("attributes")
        if not isinstance(attributes, list) or not attributes or any(a not in item.attributes for a in attributes):
            raise EnvError(f"'attributes' must be a non-empty list of attributes of item {item.id}")
        options = instance.get("options")
        if not isinstance(options, dict) or any(
            not isinstance(value, str) or value not in item.option_values(name) for name, value in options.items()
        ):
            raise EnvError(f"'options' must map option names of item {item.id} to values it offers")
        price = instance.get("price_upper")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < item.price:
            raise EnvError(f"'price_upper' must be a number of at least the item's price ({item.price:.2f})")
        text = instance.get("instruction")
        if not isinstance(text, str) or not text.strip():
            raise EnvError("'instruction' must be a non-empty string")

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        self._goal = dict(instance)
        self._page = "search"
        self._query = ""
        self._results = ()
        self._results_page = 0
        self._item = None
        self._chosen = {}
        self._reward = None

    # -- pages --------------------------------------------------------------------
    def _lookup(self, item_id: str) -> Item:
        return _items_by_id(self.catalogue_size)[item_id]

    def _page_count(self) -> int:
        return max(1, -(-len(self._results) // self.results_per_page))

    def _page_items(self) -> tuple[str, ...]:
        start = (self._results_page - 1) * self.results_per_page
        return self._results[start : start + self.results_per_page]

    def _buttons(self) -> list[str]:
        if self._page == "results":
            buttons = [BACK_TO_SEARCH]
            if self._results_page > 1:
                buttons.append(PREV_PAGE)
            if self._results_page < self._page_count():
                buttons.append(NEXT_PAGE)
            return buttons
        if self._page == "item":
            return [PREV_PAGE, BACK_TO_SEARCH, DESCRIPTION, BUY_NOW]
        if self._page == "description":
            return [PREV_PAGE, BACK_TO_SEARCH]
        return []

    def _clickables(self) -> list[str]:
        """Everything `click[...]` accepts on the current page, in display order."""
        targets = self._buttons()
        if self._page == "results":
            targets += list(self._page_items())
        elif self._page == "item" and self._item is not None:
            targets += [value for _, values in self._lookup(self._item).options for value in values]
        return targets

    def suggested_query(self) -> str:
        """The instruction's key words: the requested attributes and product type."""
        return " ".join([*self._goal["attributes"], self._goal["product_type"]])

    # -- dynamics -----------------------------------------------------------------
    def _step(self, action: str) -> tuple[bool, bool, str]:
        parsed = ACTION_PATTERN.match(action)
        if parsed is None:
            usage = (
                "Use search[your query] on the search page, or click[...] with a button, an item id or an option "
                "value shown on the page."
            )
            return False, False, f"{echo(action)} is not an action. {usage}"
        verb, argument = parsed.group(1).lower(), parsed.group(2)
        if verb == "search":
            return self._search(argument)
        return self._click(normalise(argument))

    def _search(self, text: str) -> tuple[bool, bool, str]:
        if self._page != "search":
            return False, False, f"You can only search from the search page; click[{BACK_TO_SEARCH}] first."
        query = normalise(text)
        if not query:
            return False, False, "search[...] needs some words to look for, e.g. search[red cotton t-shirt]."
        self._query = query
        self._results = search_index(self.catalogue_size).search(query)
        self._results_page = 1
        self._page = "results"
        return True, False, f"You searched for {echo(query, _QUERY_SHOWN)}: {len(self._results)} items found."

    def _click(self, target: str) -> tuple[bool, bool, str]:
        if self._page == "search":
            return False, False, "The search page has nothing to click; use search[your query]."
        target = _BUTTON_ALIASES.get(target, target)
        clickables = {normalise(c): c for c in self._clickables()}
        if target not in clickables:
            if target == NEXT_PAGE and self._page == "results":
                return False, False, "There is no next page: this is the last page of results."
            if target == PREV_PAGE and self._page == "results":
                return False, False, "There is no previous page: this is the first page of results."
            listed = ", ".join(self._clickables())
            return False, False, f"There is no {echo(target)} to click on this page. You can click: {listed}."
        clicked = clickables[target]
        if clicked == BACK_TO_SEARCH:
            self._page, self._query, self._results, self._results_page = "search", "", (), 0
            self._item, self._chosen = None, {}
            return True, False, "You went back to the search page."
        if self._page == "results":
            return self._click_on_results(clicked)
        if self._page == "item":
            return self._click_on_item(clicked)
        # The description page offers only "< prev" besides "back to search".
        self._page = "item"
        return True, False, "You went back to the item page."

    def _click_on_results(self, clicked: str) -> tuple[bool, bool, str]:
        if clicked == NEXT_PAGE:
            self._results_page += 1
            return True, False, f"You went to page {self._results_page} of the results."
        if clicked == PREV_PAGE:
            self._results_page -= 1
            return True, False, f"You went back to page {self._results_page} of the results."
        self._page, self._item, self._chosen = "item", clicked, {}
        return True, False, f"You opened item {clicked}."

    def _click_on_item(self, clicked: str) -> tuple[bool, bool, str]:
        item = self._lookup(self._item or "")
        if clicked == PREV_PAGE:
            self._page, self._item, self._chosen = "results", None, {}
            return True, False, f"You went back to page {self._results_page} of the results."
        if clicked == DESCRIPTION:
            self._page = "description"
            return True, False, f"You opened the description of item {item.id}."
        if clicked == BUY_NOW:
            self._reward = purchase_reward(
                item_type=item.product_type,
                item_category=item.category,
                item_attributes=item.attributes,
                item_price=item.price,
                chosen_options=self._chosen,
                goal_type=self._goal["product_type"],
                goal_category=self._goal["category"],
                goal_attributes=self._goal["attributes"],
                goal_options=self._goal["options"],
                price_upper=float(self._goal["price_upper"]),
            )
            self._page = "done"
            return True, True, f"You bought item {item.id}."
        name = item.option_of(clicked) or ""
        if self._chosen.get(name) == clicked:
            return True, False, f"{name} is already {clicked}."
        self._chosen[name] = clicked
        return True, False, f"You chose {name}: {clicked}."

    # -- observation --------------------------------------------------------------
    def render(self) -> str:
        lines = [f"Task: {self._goal['instruction']}"]
        if self._page == "search":
            lines.append("You are on the search page. Search with search[your query].")
        elif self._page == "results":
            lines += self._render_results()
        elif self._page == "item":
            lines += self._render_item()
        elif self._page == "description":
            item = self._lookup(self._item or "")
            lines += [f"Description of item {item.id}: {item.title}", item.description, _button_row(self._buttons())]
        else:
            lines += self._render_purchase()
        return "\n".join(lines)

    def _render_results(self) -> list[str]:
        where = f"Search results for {echo(self._query, _QUERY_SHOWN)}"
        if not self._results:
            return [f"{where}: no items match. Go back and try other words.", _button_row(self._buttons())]
        lines = [
            f"{where}: page {self._results_page} of {self._page_count()} ({len(self._results)} items).",
            _button_row(self._buttons()),
        ]
        for item_id in self._page_items():
            item = self._lookup(item_id)
            lines.append(f"[{item.id}] {item.title} - ${item.price:.2f}")
        return lines

    def _render_item(self) -> list[str]:
        item = self._lookup(self._item or "")
        lines = [
            f"Item {item.id}, opened from page {self._results_page} of the results for {echo(self._query, _QUERY_SHOWN)}.",
            item.title,
            f"Price: ${item.price:.2f}",
            "Options (click a value to choose it):",
        ]
        for name, values in item.options:
            chosen = self._chosen.get(name)
            state = f"chosen: {chosen}" if chosen else "not chosen"
            lines.append(f"  {name}: {' '.join(f'[{value}]' for value in values)} ({state})")
        lines.append(_button_row(self._buttons()))
        return lines

    def _render_purchase(self) -> list[str]:
        item = self._lookup(self._item or "")
        reward = self._reward
        assert reward is not None  # the done page is only reached by buying
        chosen = "; ".join(f"{name}: {self._chosen.get(name, 'not chosen')}" for name, _ in item.options)
        kind = {1.0: "the requested one", 0.5: "another kind from the requested category"}.get(reward.r_type, "wrong")
        grade = (
            f"Score: {reward.value:.2f}. Product type: {kind}. "
            f"Requested attributes it has: {reward.attributes_matched} of {reward.attributes_total}. "
            f"Requested options chosen: {reward.options_matched} of {reward.options_total}. "
            f"Price within the limit: {'yes' if reward.price_ok else 'no'}."
        )
        return [f"You bought item {item.id} ({item.title}) for ${item.price:.2f}, with {chosen}.", grade]

    def state_key(self) -> str:
        if self._page == "search":
            return "page=search"
        chosen = ",".join(f"{name}={value}" for name, value in sorted(self._chosen.items()))
        return (
            f"page={self._page}|query={json.dumps(self._query)}|results_page={self._results_page}"
            f"|item={self._item or '-'}|options={chosen or '-'}"
        )

    def score(self) -> float:
        return 0.0 if self._reward is None else self._reward.value

    def is_success(self) -> bool:
        return self._reward is not None and self._reward.value == 1.0

    # -- planner ------------------------------------------------------------------
    def oracle_query(self) -> str:
        """The oracle's search: the target's title, which ranks the target first or nearly so."""
        return normalise(self._lookup(self._goal["item"]).title.replace(",", " "))

    def _oracle_action(self) -> str:
        # Search for the target by its title, page to it, choose the requested option
        # values and buy. From anywhere else, retreat towards the search page; from a
        # results list that holds the target, page towards it instead.
        target = self._goal["item"]
        if self._page == "search":
            return f"search[{self.oracle_query()}]"
        if self._page == "description":
            return f"click[{PREV_PAGE}]"
        if self._page == "item":
            if self._item != target:
                return f"click[{PREV_PAGE}]"
            for name, value in sorted(self._goal["options"].items()):
                if self._chosen.get(name) != value:
                    return f"click[{value}]"
            return f"click[{BUY_NOW}]"
        if target in self._page_items():
            return f"click[{target}]"
        if target in self._results:
            page = self._results.index(target) // self.results_per_page + 1
            return f"click[{NEXT_PAGE if page > self._results_page else PREV_PAGE}]"
        return f"click[{BACK_TO_SEARCH}]"

    def _admissible_actions(self) -> list[str]:
        if self._page == "search":
            # A search takes free text; the one listed is the instruction's key words.
            return [f"search[{self.suggested_query()}]"]
        return [f"click[{target}]" for target in self._clickables()]

    @property
    def instruction(self) -> str:
        return (
            "You are shopping in a web store. Every page shows your task: a kind of product with some attributes, "
            "some option values (such as colour or size) and a price limit. Find a matching item, choose the "
            "requested options and buy it. Actions, one per turn:\n"
            "- search[QUERY]: only on the search page; lists the items that best match the words of QUERY, "
            f"{self.results_per_page} per page (at most {MAX_RESULTS} items).\n"
            "- click[TARGET]: click something the page shows in square brackets: a button "
            f"({NEXT_PAGE}, {PREV_PAGE}, {BACK_TO_SEARCH}, {DESCRIPTION}, {BUY_NOW}), an item id on a results page "
            "(it opens the item), or an option value on an item page (it chooses that value; one value per "
            "option, a new click replaces the old one).\n"
            f"On a results page, {NEXT_PAGE} and {PREV_PAGE} turn the pages; on an item page {PREV_PAGE} returns "
            f"to the results and forgets the chosen options; on a description page it returns to the item. "
            f"{DESCRIPTION} lists all of an item's features. {BUY_NOW} buys the open item with the chosen options "
            "and ends the episode. Upper or lower case does not matter. "
            f"You have at most {self.max_steps} actions."
        )
