"""A judge model reads ECHO's critiques: how specific each is, and whether its refinement acted on it.

Any model role plays the judge (`judge: openai:NAME`, `smollm2`, `scripted:FILE`, ...). It
answers three kinds of prompt, each in one batched `generate` call:

* granularity: the attempt and the critique → `Granularity: 1|2|3` on the rubric below;
* issue addressed: the attempt, the critique and the refinement made with it →
  `Addressed: yes|no|unclear`;
* diagnosis: a failed attempt → `Diagnosis: <one sentence>` (what the failure-drift
  embeddings can embed instead of the raw trajectory, as the ECHO paper does).

Answers are read tolerantly (a labelled line wins; otherwise a single unambiguous level or
word anywhere; `3/3`, `**2**`, `fine-grained`, `Yes.` all count). An answer that cannot be
read, or a backend error, gives the stated value None, its reason in `error`, and is counted
in the judge's `unread` tallies, so a weak judge shows up as unread answers, never as a
crash or a silent default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Generic, Sequence, TypeVar

from hindsight.agent.selfguide import render_steps
from hindsight.algos.echo_analysis import Addressed, Granularity
from hindsight.llm.base import ModelBackend
from hindsight.types import ChatMessage, Completion, Conversation, GenerationRequest, SamplingParams, Trajectory

V = TypeVar("V")

SYSTEM = ("You review how a critic coached an agent that works on tasks step by step. You follow the rubric, "
          "answer in the requested format and are brief.")

GRANULARITY_RUBRIC = (
    "1 = generic: advice that would fit almost any attempt at this kind of task (plan ahead, read the rules, "
    "be careful).\n"
    "2 = targeted: it names a kind of mistake or a part of the task that went wrong in this attempt, but not the "
    "exact turn or move.\n"
    "3 = pinpointed: it names a specific turn, state or action of this attempt and what to do there instead."
)

GRANULARITY_REQUEST = (
    "Task:\n{instruction}\n\nThe attempt:\n{attempt}\n\nThe critic's advice about it:\n{critique}\n\n"
    "How specific is this advice about this attempt?\n{rubric}\n"
    "Answer with one line: Granularity: <1, 2 or 3>"
)

ADDRESSED_REQUEST = (
    "Task:\n{instruction}\n\nFirst attempt:\n{attempt}\n\nThe critic's advice about it:\n{critique}\n\n"
    "Second attempt, made from the start with that advice:\n{refinement}\n\n"
    "Did the second attempt deal with the issue the advice raised? Judge that issue only, not whether the task "
    "was solved.\n"
    "yes = it avoided or fixed the mistake the advice named; no = it made that mistake again or did not follow "
    "the advice; unclear = the advice names no issue you can check, or the second attempt never got to where "
    "the issue arises.\n"
    "Answer with one line: Addressed: <yes, no or unclear>"
)

DIAGNOSIS_REQUEST = (
    "Task:\n{instruction}\n\nThe attempt, which failed:\n{attempt}\n\n"
    "In one sentence, name the main mistake that made this attempt fail, as a description of what the agent "
    "did wrong. Do not restate the task.\n"
    "Answer with one line: Diagnosis: <the sentence>"
)

#: Longest diagnosis kept (characters): one sentence, as asked; a rambling answer is cut.
MAX_DIAGNOSIS_CHARS = 300

_LEVEL_WORDS = {
    Granularity.GENERIC: ("generic", "coarse", "coarse-level"),
    Granularity.TARGETED: ("targeted", "mid-level"),
    Granularity.PINPOINTED: ("pinpointed", "fine-grained"),
}
_WORD_LEVEL = {word: level for level, words in _LEVEL_WORDS.items() for word in words}
_DIGIT_LEVEL = {"1": Granularity.GENERIC, "2": Granularity.TARGETED, "3": Granularity.PINPOINTED}
_LEVEL_TOKEN = r"(\d+(?:\.\d+)?|[a-z][a-z-]*)"
# A label needs its separator: "granularity of the advice" is prose, not an answer.
_GRANULARITY_LINE = re.compile(r"granularity\s*(?:level)?\s*[*_]*\s*[:=\-]\s*[*_\"'(\[]*\s*(?:level\s*)?" + _LEVEL_TOKEN,
                               re.IGNORECASE)
_OUT_OF_THREE = re.compile(r"\b([123])\s*/\s*3\b")
# Without a label a bare digit counts only where it opens the answer, and not as a list marker
# ("1. Move down ..."): a small judge that copies the task back ("Rows are numbered from 1")
# would otherwise be read as rating the advice generic.
_LEADING_DIGIT = re.compile(r"[\s*_\"'(\[]*([123])(?![\w/])(?!\s*/)(?![.)]\s*\S)")
_LEVEL_WORD_ANYWHERE = re.compile(r"(?<![\w-])(" + "|".join(
    re.escape(w) for w in sorted(_WORD_LEVEL, key=len, reverse=True)) + r")(?![\w-])", re.IGNORECASE)

_VERDICT_WORDS = {"yes": Addressed.YES, "no": Addressed.NO, "unclear": Addressed.UNCLEAR,
                  "uncertain": Addressed.UNCLEAR, "unsure": Addressed.UNCLEAR, "partially": Addressed.UNCLEAR,
                  "partly": Addressed.UNCLEAR}
_ADDRESSED_LINE = re.compile(r"addressed\s*[*_]*\s*[:=\-]\s*[*_\"'(\[]*\s*([a-z]+)", re.IGNORECASE)
_FIRST_WORD = re.compile(r"^\W*([a-z]+)", re.IGNORECASE)
_VERDICT_ANYWHERE = re.compile(r"\b(" + "|".join(_VERDICT_WORDS) + r")\b", re.IGNORECASE)
_DIAGNOSIS_LINE = re.compile(r"diagnosis\s*[:=\-]\s*(.*)", re.IGNORECASE)


def parse_granularity(text: str) -> tuple[Granularity | None, str | None]:
    """(level, None) or (None, why it could not be read). A `Granularity:` line wins; otherwise
    the answer must name exactly one level: a level word or `N/3` anywhere, or a digit 1–3 that
    opens the answer."""
    labelled = _GRANULARITY_LINE.search(text)
    if labelled:
        token = labelled.group(1).lower()
        level = _DIGIT_LEVEL.get(token) or _WORD_LEVEL.get(token)
        if level is not None:
            return level, None
        return None, f"granularity {token!r} is not 1, 2 or 3"
    # "2/3" reads as level 2, not as the levels 2 and 3.
    found = {_DIGIT_LEVEL[m.group(1)] for m in _OUT_OF_THREE.finditer(text)}
    found |= {_WORD_LEVEL[m.group(1).lower()] for m in _LEVEL_WORD_ANYWHERE.finditer(text)}
    leading = _LEADING_DIGIT.match(text)
    if leading:
        found.add(_DIGIT_LEVEL[leading.group(1)])
    if len(found) == 1:
        return found.pop(), None
    if found:
        return None, "the answer names several levels and no 'Granularity:' line"
    return None, "no granularity level in the answer"


def parse_addressed(text: str) -> tuple[Addressed | None, str | None]:
    """(verdict, None) or (None, why not). An `Addressed:` line wins, then a verdict as the first
    word; otherwise exactly one of yes / no / unclear (or unclear's synonyms) must occur."""
    labelled = _ADDRESSED_LINE.search(text)
    if labelled:
        verdict = _VERDICT_WORDS.get(labelled.group(1).lower())
        if verdict is not None:
            return verdict, None
        return None, f"addressed {labelled.group(1)!r} is not yes, no or unclear"
    # An answer that opens with its verdict ("No, it walked into the hole again") is read by
    # that word; only otherwise is the whole text searched, where "no progress" could mislead.
    first = _FIRST_WORD.match(text)
    if first and first.group(1).lower() in _VERDICT_WORDS:
        return _VERDICT_WORDS[first.group(1).lower()], None
    found = {_VERDICT_WORDS[m.group(1).lower()] for m in _VERDICT_ANYWHERE.finditer(text)}
    if len(found) == 1:
        return found.pop(), None
    if found:
        return None, "the answer says several of yes / no / unclear and has no 'Addressed:' line"
    return None, "no yes / no / unclear in the answer"


def parse_diagnosis(text: str) -> tuple[str | None, str | None]:
    """(sentence, None) or (None, why not): the `Diagnosis:` line's text, else the first non-empty line."""
    labelled = _DIAGNOSIS_LINE.search(text)
    candidate = labelled.group(1) if labelled else next((ln for ln in text.splitlines() if ln.strip()), "")
    sentence = candidate.strip().strip("*\"' ").strip()[:MAX_DIAGNOSIS_CHARS].strip()
    return (sentence, None) if sentence else (None, "empty diagnosis")


def render_attempt(trajectory: Trajectory | None) -> str:
    """An attempt as the judge reads it: its start, each move with the environment's answer, the outcome."""
    if trajectory is None:
        return "(not logged)"
    start = trajectory.steps[0].observation if trajectory.steps else trajectory.final_observation
    outcome = "solved" if trajectory.success else "not solved"
    return (f"Start:\n{start.strip()}\n\nMoves:\n{render_steps(trajectory.steps, full_last=1)}\n\n"
            f"Outcome: score {trajectory.score:.2f} of 1, {outcome}, after {trajectory.num_steps} moves.")


@dataclass(frozen=True)
class CritiqueCase:
    """A critique with the attempt it is about (None when not logged) and the refinement made with it."""

    attempt: Trajectory | None
    critique: str
    refinement: Trajectory


@dataclass(frozen=True)
class Verdict(Generic[V]):
    """One judge answer: the value read from it, or None with `error` saying why; `text` is the answer."""

    value: V | None
    error: str | None = None
    text: str = ""


@dataclass
class JudgeCounts:
    """Answers the judge gave that could not be read, per kind (the stated value was None)."""

    granularity: int = 0
    addressed: int = 0
    diagnosis: int = 0


def _fill(template: str, **fields: str) -> str:
    # str.replace, not str.format: critiques and observations may contain braces.
    for name, value in fields.items():
        template = template.replace("{" + name + "}", value)
    return template


@dataclass
class CritiqueJudge:
    """A model role answering the rubrics above; greedy by default."""

    backend: ModelBackend
    max_new_tokens: int = 64
    temperature: float = 0.0
    unread: JudgeCounts = field(default_factory=JudgeCounts)

    def granularity_prompt(self, case: CritiqueCase) -> Conversation:
        return self._conversation(_fill(GRANULARITY_REQUEST, instruction=case.refinement.instruction.strip(),
                                        attempt=render_attempt(case.attempt), critique=case.critique.strip(),
                                        rubric=GRANULARITY_RUBRIC))

    def addressed_prompt(self, case: CritiqueCase) -> Conversation:
        return self._conversation(_fill(ADDRESSED_REQUEST, instruction=case.refinement.instruction.strip(),
                                        attempt=render_attempt(case.attempt), critique=case.critique.strip(),
                                        refinement=render_attempt(case.refinement)))

    def diagnosis_prompt(self, attempt: Trajectory) -> Conversation:
        return self._conversation(_fill(DIAGNOSIS_REQUEST, instruction=attempt.instruction.strip(),
                                        attempt=render_attempt(attempt)))

    def granularity(self, cases: Sequence[CritiqueCase]) -> list[Verdict[Granularity]]:
        return self._ask([self.granularity_prompt(c) for c in cases], parse_granularity, "granularity")

    def addressed(self, cases: Sequence[CritiqueCase]) -> list[Verdict[Addressed]]:
        return self._ask([self.addressed_prompt(c) for c in cases], parse_addressed, "addressed")

    def diagnose(self, attempts: Sequence[Trajectory]) -> list[Verdict[str]]:
        return self._ask([self.diagnosis_prompt(a) for a in attempts], parse_diagnosis, "diagnosis")

    @staticmethod
    def _conversation(request: str) -> Conversation:
        return (ChatMessage("system", SYSTEM), ChatMessage("user", request))

    def _ask(self, prompts: Sequence[Conversation], parse, kind: str) -> list[Verdict]:
        if not prompts:
            return []
        params = SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        completions: list[Completion] = self.backend.generate([GenerationRequest(p) for p in prompts], params)
        verdicts = []
        for completion in completions:
            if completion.error is not None:
                value, error = None, f"backend error: {completion.error}"
            else:
                value, error = parse(completion.text)
            if value is None:
                setattr(self.unread, kind, getattr(self.unread, kind) + 1)
            verdicts.append(Verdict(value, error, completion.text))
        return verdicts
