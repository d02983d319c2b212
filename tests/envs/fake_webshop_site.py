"""A stand-in for WebShop's web app (`web_agent_site/app.py`) with the same routes and page
structure: instruction block, forms whose buttons POST to the next page, product links,
option radios carrying their target URL in `data-url`, and a purchase page that hides the
goal and shows the score in `#reward pre`. Its catalogue and grade are tiny and its own.
"""

from __future__ import annotations

import ast
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

PRODUCTS = {
    "B01MUG": ("Red ceramic coffee mug, 12 oz", 9.5, {"color": ["red", "blue"], "size": ["12 oz", "16 oz"]}),
    "B02MUG": ("Blue travel mug with lid", 14.0, {"color": ["blue", "black"]}),
    "B03TEA": ("Green tea sampler box", 11.0, {}),
    "B04MUG": ("Stoneware mug set of two", 21.0, {"color": ["white", "grey"]}),
    "B05CUP": ("Paper cups, pack of 50", 6.0, {"size": ["8 oz", "12 oz"]}),
}
GOALS = [
    {"text": "i want a red coffee mug in the 16 oz size, under 20 dollars", "asin": "B01MUG",
     "options": {"color": "red", "size": "16 oz"}},
    {"text": "find me a green tea sampler under 15 dollars", "asin": "B03TEA", "options": {}},
    {"text": "i need white stoneware mugs", "asin": "B04MUG", "options": {"color": "white"}},
]
PER_PAGE = 2
app = FastAPI()


def goal_of(session: str) -> dict:
    return GOALS[int(session.split("_")[-1]) % len(GOALS)]


def page(session: str, body: str, query: str = "") -> HTMLResponse:
    shown = f"<h4>Current Query: {query}</h4>" if query else ""
    return HTMLResponse(
        f"<html><head><title>WebShop</title><script>var x = 1;</script></head><body>"
        f'<div id="instruction-text"><h4>Instruction: {goal_of(session)["text"]}</h4>{shown}</div>{body}</body></html>'
    )


def button(action: str, label: str) -> str:
    return f'<form method="post" action="{action}"><button type="submit" class="btn">{label}</button></form>'


@app.api_route("/{session}", methods=["GET", "POST"])
async def index(session: str, request: Request):
    if request.method == "POST":
        form = parse_qs((await request.body()).decode())  # a browser's form post, read without extra packages
        if "search_query" in form:
            keywords = form["search_query"][0].lower().split(" ")
            return RedirectResponse(f"/search_results/{session}/{quote(str(keywords))}/1", status_code=302)
    return page(session, f'<form method="post" action="/{session}"><input id="search_input" name="search_query" '
                         f'type="text"><button type="submit" class="btn">Search</button></form>')


@app.api_route("/search_results/{session}/{keywords}/{number}", methods=["GET", "POST"])
def results(session: str, keywords: str, number: int):
    words = ast.literal_eval(keywords)
    ranked = sorted(PRODUCTS, key=lambda a: (-sum(w in PRODUCTS[a][0].lower() for w in words), a))
    shown = ranked[(number - 1) * PER_PAGE : number * PER_PAGE]
    body = [f"<h1>Results</h1><p>Page {number} of {len(ranked)} total results</p>", button(f"/{session}", "Back to Search")]
    if number > 1:
        body.append(button(f"/search_results/{session}/{quote(keywords)}/{number - 1}", "&lt; Prev"))
    if number * PER_PAGE < len(ranked):
        body.append(button(f"/search_results/{session}/{quote(keywords)}/{number + 1}", "Next &gt;"))
    for asin in shown:
        title, price, _ = PRODUCTS[asin]
        link = f"/item_page/{session}/{asin}/{quote(keywords)}/{number}/{quote(str({}))}"
        body.append(f'<div><h4><a class="product-link" href="{link}">{asin}</a></h4><h4>{title}</h4><h5>${price}</h5></div>')
    return page(session, "".join(body), " ".join(words))


@app.api_route("/item_page/{session}/{asin}/{keywords}/{number}/{options}", methods=["GET", "POST"])
def item(session: str, asin: str, keywords: str, number: int, options: str):
    chosen = ast.literal_eval(options)
    title, price, offered = PRODUCTS[asin]
    body = [button(f"/{session}", "Back to Search"),
            button(f"/search_results/{session}/{quote(keywords)}/{number}", "&lt; Prev")]
    for name, values in offered.items():
        body.append(f"<h4>{name}</h4>")
        for i, value in enumerate(values):
            url = f"/item_page/{session}/{asin}/{quote(keywords)}/{number}/{quote(str({**chosen, name: value}))}"
            body.append(f'<input type="radio" id="r_{name}{i}" name="{name}" value="{value}" data-url="{url}">'
                        f'<label for="r_{name}{i}">{value}</label>')
    body.append(f"<h2>{title}</h2><h4>Price: ${price}</h4>")
    body.append(button(f"/item_sub_page/{session}/{asin}/{quote(keywords)}/{number}/Description/{quote(options)}",
                       "Description"))
    body.append(button(f"/done/{session}/{asin}/{quote(options)}", "Buy Now"))
    return page(session, "".join(body))


@app.api_route("/item_sub_page/{session}/{asin}/{keywords}/{number}/{sub}/{options}", methods=["GET", "POST"])
def sub_page(session: str, asin: str, keywords: str, number: int, sub: str, options: str):
    back = button(f"/item_page/{session}/{asin}/{quote(keywords)}/{number}/{quote(options)}", "&lt; Prev")
    return page(session, f"{back}<p>{sub}: {PRODUCTS[asin][0]}, made with care.</p>")


@app.api_route("/done/{session}/{asin}/{options}", methods=["GET", "POST"])
def done(session: str, asin: str, options: str):
    goal = goal_of(session)
    score = 0.0
    if asin == goal["asin"]:
        score = 1.0 if ast.literal_eval(options) == goal["options"] else 0.5
    hidden = f'<div style="display:none"><h4 id="goal-asin">asin<pre>{goal["asin"]}</pre></h4></div>'
    return HTMLResponse(f"<html><body><h1>Thank you for shopping with us!</h1>{hidden}"
                        f'<h3 id="reward">Your score (min 0.0, max 1.0)<pre>{score}</pre></h3></body></html>')
