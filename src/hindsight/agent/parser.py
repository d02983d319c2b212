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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_ACTION_CHARS = 200

_ACTION_TAG = re.compile(r"<\s*action\s*>(.*?)<\s*/\s*action\s*>", re.IGNORECASE | re.DOTALL)
_OPEN_ACTION_TAG = re.compile(r"<\s*action\s*>(.*)$", re.IGNORECASE | re.DOTALL)
_ANALYSIS_TAG = re.compile(
    r"<\s*(analysis|think|reasoning)\s*>(.*?)(?:<\s*/\s*\1\s*>|(?=<\s*action\s*>)|$)", re.IGNORECASE | re.DOTALL
)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_ANALYSIS_KEYS = ("think", "analysis", "reasoning", "thought")


@dataclass(frozen=True)
class ParsedResponse:
    action: str | None
    analysis: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.action is not None


def _clean_action(text: str) -> str | None:
    action = " ".join(text.strip().strip("`'\"").split())
    if not action:
        return None
    return action[:MAX_ACTION_CHARS]


def _from_tags(text: str) -> ParsedResponse | None:
    matches = _ACTION_TAG.findall(text)
    analysis_match = _ANALYSIS_TAG.search(text)
    analysis = analysis_match.group(2).strip() if analysis_match else None
    if matches:
        # The last complete action block wins: models sometimes restate an example first.
        action = _clean_action(matches[-1])
        if action is None:
            return ParsedResponse(None, analysis, "empty <action> block")
        return ParsedResponse(action, analysis)
    dangling = _OPEN_ACTION_TAG.search(text)
    if dangling:
        lines = [line for line in dangling.group(1).split("<", 1)[0].splitlines() if line.strip()]
        action = _clean_action(lines[0]) if lines else None
        if action is None:
            return ParsedResponse(None, analysis, "empty <action> block")
        return ParsedResponse(action, analysis)
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
    return ParsedResponse(action, analysis)


def parse_response(text: str) -> ParsedResponse:
    """Extract the action (and reasoning) from a model response."""
    if not isinstance(text, str) or not text.strip():
        return ParsedResponse(None, None, "empty response")
    return (
        _from_tags(text)
        or _from_json(text)
        or ParsedResponse(None, None, "no <action>…</action> block or JSON action found")
    )
