"""A real WebShop site as an environment: `make("webshop-site", url="http://HOST:3000")`.

WebShop (Yao et al., 2022) ships a Flask web app (`web_agent_site/app.py`) over its own
product data. When a user runs it, this adapter plays it through the same HTML pages a
browser gets: it follows the links and submits the forms the page holds, reads the page's
visible text, and takes the score the site prints after a purchase. Nothing of the site's
code or data is needed here, only its address.

- Seed n is the site's fixed goal n: the episode opens the session `fixed-TOKEN_n`, for
  which the site serves the n-th goal of its own (fixed) goal order, under a fresh TOKEN
  so that episodes never share a session. The splits are the WebShop baselines': goals
  0-499 test, 500-1499 validation, the rest train.
- Actions are the generated shop's: `search[QUERY]` on the search page and `click[TARGET]`
  for a button, a product id or an option value the page shows in square brackets.
- The site's score after "Buy Now" is the graded score; success is a score of 1.
- The site keeps its goal to itself until a purchase, so there is no oracle.
- A site that cannot be reached, answers with an error or times out raises `EnvFailure`;
  the rollout engine then replays the episode on a fresh session.

HTML is parsed with BeautifulSoup, as WebShop's own text environment does.
"""

from __future__ import annotations

import ast
import copy
import os
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import unquote, urljoin, urlsplit

from hindsight.envs.base import TextEnv, echo, float_knob
from hindsight.envs.contract import SPLITS, EnvError, EnvFailure
from hindsight.envs.webshop import ACTION_PATTERN, normalise

#: The WebShop baselines' goal ranges per split: (first goal, one past the last; None = no end).
SPLIT_GOALS: Mapping[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "validation": (500, 1500),
    "train": (1500, None),
}
_BUTTON_ALIASES = {"next": "next >", "next>": "next >", "prev": "< prev", "<prev": "< prev"}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none", re.IGNORECASE)


@dataclass(frozen=True)
class Clickable:
    """Something `click[...]` can reach on a page: where it leads and how."""

    label: str
    method: str  # "GET" (a link or an option) or "POST" (a form's button)
    url: str
    option: str | None = None  # the option name, for an option value


@dataclass
class Page:
    """What the adapter reads from one HTML page."""

    path: str
    lines: list[str] = field(default_factory=list)
    clickables: dict[str, Clickable] = field(default_factory=dict)
    search_url: str | None = None  # the search form's target, on the search page only
    instruction: str = ""
    score: float | None = None  # the site's score, on the page after a purchase
    chosen: dict[str, str] = field(default_factory=dict)  # options chosen, on an item's pages


def read_page(html: str, url: str) -> Page:
    """The visible text, clickables, search form, instruction and score of a WebShop page."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for hidden in soup.find_all(lambda tag: tag.has_attr("hidden") or _HIDDEN_STYLE.search(tag.get("style", ""))):
        hidden.decompose()  # the page after a purchase hides the goal in such blocks
    for tag in soup.find_all(["script", "style", "head", "title", "iframe"]):
        tag.decompose()
    page = Page(path=urlsplit(url).path, chosen=_chosen_options(urlsplit(url).path))
    instruction = soup.find(id="instruction-text")
    if instruction is not None:
        first = instruction.find("h4") or instruction
        page.instruction = re.sub(r"^\s*Instruction:\s*", "", first.get_text(" ", strip=True))
    search = soup.find("input", attrs={"name": "search_query"})
    if search is not None and search.find_parent("form") is not None:
        page.search_url = urljoin(url, search.find_parent("form").get("action") or url)
    reward = soup.find(id="reward")
    if reward is not None:
        shown = reward.find("pre")
        try:
            page.score = float((shown or reward).get_text(strip=True))
        except ValueError:
            raise EnvFailure(f"webshop-site: the purchase page shows no readable score: {echo(reward.get_text())}") from None
    for button in soup.find_all("button"):
        form = button.find_parent("form")
        label = normalise(button.get_text(" ", strip=True))
        if form is not None and label and label != "search":
            page.clickables.setdefault(label, Clickable(label, "POST", urljoin(url, form.get("action") or url)))
    for link in soup.find_all("a", class_="product-link"):
        label = normalise(link.get_text(" ", strip=True))
        if label and link.get("href"):
            page.clickables.setdefault(label, Clickable(label, "GET", urljoin(url, link["href"])))
    for radio in soup.find_all("input", attrs={"type": "radio"}):
        value = normalise(radio.get("value", ""))
        if value and radio.get("data-url"):
            page.clickables.setdefault(value, Clickable(value, "GET", urljoin(url, radio["data-url"]), radio.get("name")))
    page.lines = _visible_lines(soup)
    return page


def _chosen_options(path: str) -> dict[str, str]:
    """The options an item page's URL carries (its last part is a Python dict literal)."""
    parts = path.split("/")
    if len(parts) < 3 or parts[1] not in ("item_page", "item_sub_page"):
        return {}
    try:
        options = ast.literal_eval(unquote(parts[-1]))
    except (ValueError, SyntaxError):
        return {}
    return {str(k): str(v) for k, v in options.items()} if isinstance(options, dict) else {}


def _visible_lines(soup: Any) -> list[str]:
    """The page's text, one line per block, with what can be clicked in square brackets."""
    for tag in soup.find_all(["button", "label"]) + soup.find_all("a", class_="product-link"):
        text = tag.get_text(" ", strip=True)
        if text and normalise(text) != "search":
            tag.string = f"[{text}]"
    lines = []
    for line in soup.get_text("\n").splitlines():
        line = " ".join(line.split())
        if line and line != "Search":
            lines.append(line)
    return lines


class WebShopSite(TextEnv):
    """Shop on a real WebShop site that the user runs (the adapter of `webshop`)."""

    id = "webshop-site"
    default_max_steps = 15
    description = "Shop on a real WebShop site the user runs (url=http://HOST:PORT or $WEBSHOP_URL), via its pages."
    criteria = (
        "Nothing is scored until an item is bought; buying ends the episode. The site grades the purchase with "
        "WebShop's reward (product type, requested attributes and options, price limit); success is a score of 1."
    )
    has_oracle = False

    def __init__(self, *, url: str | None = None, timeout: float = 30.0, max_steps: int | None = None,
                 instances: Any = None):
        url = url or os.environ.get("WEBSHOP_URL")
        if not url:
            raise EnvError("webshop-site needs the address of a running WebShop site: url=http://HOST:PORT "
                           "(or $WEBSHOP_URL); start one with WebShop's `web_agent_site/app.py`")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EnvError(f"webshop-site: url must be an http(s) address, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = float_knob("timeout", timeout, 0.1, 3600.0)
        super().__init__(max_steps=max_steps, instances=instances, url=self.url, timeout=self.timeout)
        self._client: Any = None
        self._session = ""
        self._page = Page(path="")

    def __deepcopy__(self, memo: dict[int, Any]) -> WebShopSite:
        # Every page is named by its URL, so a copy browses the same session on its own; it
        # only needs its own connection.
        clone = copy.copy(self)
        clone._client = None
        clone.instance = copy.deepcopy(self.instance, memo)
        clone.kwargs = dict(self.kwargs)
        return clone

    # -- instances and splits -------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        if seed < 0:
            raise EnvError(f"webshop-site: seed {seed} is not a goal number (0 or more)")
        return {"goal": int(seed)}

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        goal = instance.get("goal")
        if isinstance(goal, bool) or not isinstance(goal, int) or goal < 0:
            raise EnvError("'goal' must be the number of one of the site's goals (0 or more)")

    def seed_split(self, seed: int) -> str:
        if self.instance_file is not None:
            return super().seed_split(seed)
        return next(split for split, (low, high) in SPLIT_GOALS.items() if seed >= low and (high is None or seed < high))

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        if self.instance_file is not None:
            return super().split_seeds(split, n, start)
        if split not in SPLITS:
            raise EnvError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        low, high = SPLIT_GOALS[split]
        first = max(low, int(start))
        last = first + int(n)
        if high is not None and last > high:
            raise EnvError(f"webshop-site: the {split} split has goals {low}..{high - 1}; {n} from {first} requested")
        return list(range(first, last))

    # -- HTTP ----------------------------------------------------------------------
    def _fetch(self, method: str, url: str, data: Mapping[str, str] | None = None) -> Page:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, follow_redirects=True)
        try:
            response = self._client.request(method, url, data=data)
        except httpx.TimeoutException:
            raise EnvFailure(f"webshop-site: {self.url} did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise EnvFailure(f"webshop-site: cannot reach {self.url} ({type(exc).__name__})") from None
        if response.status_code >= 400:
            raise EnvFailure(f"webshop-site: {self.url} answered HTTP {response.status_code} for {urlsplit(url).path}")
        return read_page(response.text, str(response.url))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- episode -------------------------------------------------------------------
    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        # The site picks goal n for any session id holding "fixed" and ending in "_n".
        self._session = f"fixed-{secrets.token_hex(4)}_{instance['goal']}"
        self._page = self._fetch("GET", f"{self.url}/{self._session}")
        if not self._page.instruction:
            raise EnvFailure(f"webshop-site: {self.url}/{self._session} is not a WebShop page (no instruction)")

    def _step(self, action: str) -> tuple[bool, bool, str]:
        parsed = ACTION_PATTERN.match(action)
        if parsed is None:
            return False, False, (f"{echo(action)} is not an action. Use search[your query] on the search page, or "
                                  "click[...] with something the page shows in square brackets.")
        verb, argument = parsed.group(1).lower(), parsed.group(2)
        if verb == "search":
            if self._page.search_url is None:
                return False, False, "You can only search from the search page; click[back to search] first."
            query = normalise(argument)
            if not query:
                return False, False, "search[...] needs some words to look for, e.g. search[red cotton t-shirt]."
            self._page = self._fetch("POST", self._page.search_url, {"search_query": query})
            return True, False, f"You searched for {echo(query, 120)}."
        target = normalise(argument)
        target = _BUTTON_ALIASES.get(target, target)
        clickable = self._page.clickables.get(target)
        if clickable is None:
            listed = ", ".join(self._page.clickables) or "nothing (use search[...])"
            return False, False, f"There is no {echo(target)} to click on this page. You can click: {listed}."
        self._page = self._fetch(clickable.method, clickable.url)
        if self._page.score is not None:
            return True, True, f"You bought it. The site scored the purchase {self._page.score:.2f}."
        return True, False, f"You clicked {clickable.label}."

    # -- observation ---------------------------------------------------------------
    def render(self) -> str:
        lines = list(self._page.lines)
        if self._page.search_url is not None:
            lines.append("This is the search page: search[your query] lists matching products.")
        if self._page.chosen:
            lines.append("Chosen options: " + "; ".join(f"{name}: {value}" for name, value in self._page.chosen.items()))
        return "\n".join(lines)

    def state_key(self) -> str:
        # The page's path names the state (query, page, item, options); the session id differs
        # between replays of the same episode, so it is left out.
        path = unquote(self._page.path).replace(self._session, "SESSION")
        return f"{path}|score={self._page.score}" if self._page.score is not None else path

    def score(self) -> float:
        return self._page.score or 0.0

    def is_success(self) -> bool:
        return self._page.score is not None and self._page.score >= 1.0

    def _oracle_action(self) -> str:
        raise EnvError("webshop-site: the site reveals its goal only after a purchase, so there is no oracle; "
                       "the generated `webshop` env has one")

    def _admissible_actions(self) -> list[str]:
        if self._page.search_url is not None:
            # A search takes free text; the one listed is the instruction itself, as a start.
            return [f"search[{normalise(self._page.instruction)}]"]
        return [f"click[{label}]" for label in self._page.clickables]

    @property
    def instruction(self) -> str:
        return (
            "You are shopping on a web store. Every page shows your task: a product with some attributes, option "
            "values (such as colour or size) and a price limit. Find a matching product, choose the requested "
            "options and buy it. Actions, one per turn:\n"
            "- search[QUERY]: only on the search page; lists the products that best match QUERY.\n"
            "- click[TARGET]: click something the page shows in square brackets: a button (such as next >, < prev, "
            "back to search, description, buy now), a product id on a results page (it opens the product), or an "
            "option value on a product page (it chooses that value).\n"
            f"Buy Now buys the open product with the chosen options and ends the episode. Upper or lower case does "
            f"not matter. You have at most {self.max_steps} actions."
        )
