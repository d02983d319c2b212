"""Turning a model's free-text response into an action.

Accepted formats, tried in order:

1. Tags: `<analysis>…</analysis>` (optional) and `<action>…</action>`. Tag names are
   case-insensitive, whitespace around them is ignored, and a final `<action>` whose
   closing tag was cut off by the token budget still counts when something follows it.
   `<think>`/`<reasoning>` are accepted as synonyms of `<analysis>`.
2. JSON: an object with an `action` key and optionally `think`/`analysis`/`reasoning`,
   on its own or inside a ```json fence or surrounded by prose.

Anything else is an unparseable response: the parser returns `action=None` with a reason,
and the agent loop records an invalid step. The parser never raises.

A parsed action also says where it sits in the response (`action_span`, character
offsets of the action text with surrounding spaces and quotes left out), so that
per-token quantities such as the entropy of the model's next-token distribution can be
kept for the action tokens alone (`tokens_in_span`).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

MAX_ACTION_CHARS = 200

_ACTION_TAG = re.compile(r"<\s*action\s*>(.*?)<\s*/\s*action\s*>", re.IGNORECASE | re.DOTALL)
_OPEN_ACTION_TAG = re.compile(r"<\s*action\s*>(.*)$", re.IGNORECASE | re.DOTALL)
_ANALYSIS_TAG = re.compile(
    r"<\s*(analysis|think|reasoning)\s*>(.*?)(?:<\s*/\s*\1\s*>|(?=<\s*action\s*>)|$)", re.IGNORECASE | re.DOTALL
)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_ANALYSIS_KEYS = ("think", "analysis", "reasoning", "thought")


_STRIPPED = " \t\r\n`'\""


@dataclass(frozen=True)
class ParsedResponse:
    """What a response says. `action_span` is (start, end) of the action in the response
    text, end exclusive, or None when there is no action or it could not be located."""

    action: str | None
    analysis: str | None
    error: str | None = None
    action_span: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return self.action is not None


def _clean_action(text: str) -> str | None:
    action = " ".join(text.strip().strip("`'\"").split())
    if not action:
        return None
    return action[:MAX_ACTION_CHARS]


def _trimmed_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """[start, end) without the spaces and quotes `_clean_action` strips; None if nothing is left."""
    while start < end and text[start] in _STRIPPED:
        start += 1
    while end > start and text[end - 1] in _STRIPPED:
        end -= 1
    return (start, end) if start < end else None


def _from_tags(text: str) -> ParsedResponse | None:
    matches = list(_ACTION_TAG.finditer(text))
    analysis_match = _ANALYSIS_TAG.search(text)
    analysis = analysis_match.group(2).strip() if analysis_match else None
    if matches:
        # The last complete action block wins: models sometimes restate an example first.
        last = matches[-1]
        action = _clean_action(last.group(1))
        if action is None:
            return ParsedResponse(None, analysis, "empty <action> block")
        return ParsedResponse(action, analysis, action_span=_trimmed_span(text, *last.span(1)))
    dangling = _OPEN_ACTION_TAG.search(text)
    if dangling:
        body_start = dangling.start(1)
        body = dangling.group(1).split("<", 1)[0]
        offset = 0
        for line in body.splitlines(keepends=True):
            if line.strip():
                action = _clean_action(line)
                if action is None:
                    break
                span = _trimmed_span(text, body_start + offset, body_start + offset + len(line))
                return ParsedResponse(action, analysis, action_span=span)
            offset += len(line)
        return ParsedResponse(None, analysis, "empty <action> block")
    return None


def _from_json(text: str) -> ParsedResponse | None:
    candidate = _JSON_OBJECT.search(text)
    if not candidate:
        return None
    try:
        data = json.loads(candidate.group(0))
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or "action" not in data:
        return None
    analysis = next((str(data[key]) for key in _ANALYSIS_KEYS if key in data and data[key] is not None), None)
    raw_action = data["action"]
    if not isinstance(raw_action, (str, int, float)) or isinstance(raw_action, bool):
        return ParsedResponse(None, analysis, "JSON action is not a string")
    action = _clean_action(str(raw_action))
    if action is None:
        return ParsedResponse(None, analysis, "empty JSON action")
    return ParsedResponse(action, analysis, action_span=_json_action_span(text, candidate.start(), str(raw_action)))


def _json_action_span(text: str, start: int, value: str) -> tuple[int, int] | None:
    """Where the action value of a JSON answer sits, when it appears verbatim after its key."""
    key = re.compile(r'"action"\s*:\s*"?').search(text, start)
    if key is None:
        return None
    found = text.find(value, key.end())
    if found < 0:
        return None
    return _trimmed_span(text, found, found + len(value))


def parse_response(text: str) -> ParsedResponse:
    """Extract the action (and reasoning) from a model response."""
    if not isinstance(text, str) or not text.strip():
        return ParsedResponse(None, None, "empty response")
    return (
        _from_tags(text)
        or _from_json(text)
        or ParsedResponse(None, None, "no <action>…</action> block or JSON action found")
    )


def tokens_in_span(token_ends: Sequence[int], span: tuple[int, int]) -> tuple[int, int]:
    """The tokens whose text overlaps the character span [start, end).

    `token_ends[i]` is the character offset where the text of tokens 0..i ends (so token
    i covers [token_ends[i-1], token_ends[i]), with token -1 ending at 0). Returns the
    token range [first, last) of every token that shares at least one character with
    the span; a token that straddles a span boundary (a leading space glued to the first
    word, a tag glued to the last) is included. Empty (k, k) when no token overlaps.
    """
    start, end = span
    first = bisect_right(token_ends, start)
    last = first
    while last < len(token_ends) and (token_ends[last - 1] if last else 0) < end:
        last += 1
    return first, last
