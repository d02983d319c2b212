"""Critics: written advice on a finished attempt, for ECHO's critique-and-refine round.

A critic reads one trajectory (the task as the policy was given it, the environment's
scoring criteria, every model turn with the environment's reply, and the official
final score) and answers in two sections:

    <reasoning>what the attempt missed and where it went wrong</reasoning>
    <critique>one or two short suggestions to the agent, as "You …"; "none" at a full score</critique>

The critique section becomes the `guidance` of the policy's next attempt at the same
task instance. Parsing is tolerant and never raises: whatever the critic wrote is used
and scored like any other critique, with the problem recorded in `parse_error`.

Three critics share one interface, `critique(attempts, n, sampling)`:

- `ModelCritic`: any backend — the critic adapter of the model being trained, a
  separate local model, an API model.
- `TemplateCritic`: rule-based, from an oracle comparison (`template_critique`): replay
  the attempt with the environment's planner and point at the first turn after which
  the planner's remaining plan got no shorter. A baseline, and the source of the
  supervised targets that warm-start a small critic (`methods/critic_sft.py`).
- `NoCritic`: writes nothing, which turns refinement into plain regeneration.

They are registered by name in `CRITICS` (`model`, `template`, `none`), each built by one
factory; `critic_name` reads a config's critic role value and its `no_critic` switch as one of
those names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from hindsight.agent.engine import Task, branch_task
from hindsight.agent.prompts import PromptBuilder
from hindsight.agent.replay import planner_distance, planning_env, take_recorded
from hindsight.envs.contract import Env
from hindsight.llm.base import ModelBackend
from hindsight.registry import Registry
from hindsight.types import ChatMessage, Conversation, GenerationRequest, SamplingParams, Trajectory

CRITIC_SYSTEM_PROMPT = (
    "You review one attempt by an agent at a task, so that its next attempt at the same task does better. "
    "You are shown how the task is scored, the task as the agent was given it, each of the agent's turns with "
    "the environment's reply, and the official score of the attempt. The official score is correct and final; "
    "do not dispute it.\n"
    "Answer with exactly two sections and nothing else:\n"
    "<reasoning>Which scoring requirements the attempt missed, and the turn where it first went wrong.</reasoning>\n"
    "<critique>One or two short, concrete suggestions that fix the most important problem, speaking to the agent "
    'as "You". No praise. If the score is already full, write only: none</critique>'
)

#: Longest critique (in characters) put into the policy's prompt; longer text is cut.
MAX_CRITIQUE_CHARS = 600

_CRITIQUE_NAMES = "critique|critic|feedback|advice"
_REASONING_NAMES = "reasoning|reason|analysis|think"
_CLOSED = {
    kind: re.compile(rf"<\s*({names})\s*>(.*?)<\s*/\s*\1\s*>", re.IGNORECASE | re.DOTALL)
    for kind, names in (("critique", _CRITIQUE_NAMES), ("reasoning", _REASONING_NAMES))
}
_OPEN_CRITIQUE = re.compile(rf"<\s*(?:{_CRITIQUE_NAMES})\s*>(.*)$", re.IGNORECASE | re.DOTALL)
_OPEN_REASONING = re.compile(
    rf"<\s*(?:{_REASONING_NAMES})\s*>(.*?)(?=<\s*(?:{_CRITIQUE_NAMES})\s*>|$)", re.IGNORECASE | re.DOTALL
)
# Only the answer's own section tags are stripped: a critique may quote e.g. <action>…</action>.
_SECTION_TAG = re.compile(rf"<\s*/?\s*(?:{_CRITIQUE_NAMES}|{_REASONING_NAMES})\s*>", re.IGNORECASE)
_NONE_ANSWERS = {"none", "n/a", "no suggestions", "nothing"}


@dataclass(frozen=True)
class ParsedCritique:
    """The two sections of a critic's answer.

    `critique` is the critique section as written (cut to MAX_CRITIQUE_CHARS), or the
    best stand-in when the section is missing; `parse_error` says what was wrong.
    """

    reasoning: str | None
    critique: str
    parse_error: str | None = None

    @property
    def advice(self) -> str:
        """What the policy is shown: the critique, or nothing when it says "none"."""
        return "" if self.critique.strip().strip(".!\"'").lower() in _NONE_ANSWERS else self.critique


def _tidy(text: str) -> str:
    return _SECTION_TAG.sub(" ", text).strip()[:MAX_CRITIQUE_CHARS].strip()


def parse_critique(text: str) -> ParsedCritique:
    """Split a critic's answer into reasoning and critique. Never raises.

    The last closed `<critique>` section wins (synonyms: critic, feedback, advice). A
    section cut off by the token budget is used as far as it goes. Without any
    critique tag, the text outside the reasoning section is used instead, so a
    malformed answer still reaches the policy and is scored like any other.
    """
    if not isinstance(text, str) or not text.strip():
        return ParsedCritique(None, "", "empty answer")
    closed_reasoning = _CLOSED["reasoning"].findall(text)
    open_reasoning = _OPEN_REASONING.search(text)
    if closed_reasoning:
        reasoning: str | None = closed_reasoning[-1][1].strip()
    else:
        reasoning = _tidy(open_reasoning.group(1)) if open_reasoning else None
    sections = _CLOSED["critique"].findall(text)
    if sections:
        return ParsedCritique(reasoning, _tidy(sections[-1][1]))
    dangling = _OPEN_CRITIQUE.search(text)
    if dangling:
        return ParsedCritique(reasoning, _tidy(dangling.group(1)), "critique section not closed")
    rest = _tidy(_CLOSED["reasoning"].sub(" ", text)) if closed_reasoning else ("" if open_reasoning else _tidy(text))
    if not rest:
        return ParsedCritique(reasoning, "", "no <critique> section")
    return ParsedCritique(reasoning, rest, "no <critique> section; the rest of the answer is used")


@dataclass(frozen=True)
class Critique:
    """One critic answer about one attempt.

    `prompt`, `token_ids` and `finish_reason` are set for model critics: they are what
    training the critic needs. Rule-based critics leave them empty.
    """

    output: str
    parsed: ParsedCritique
    prompt: Conversation = ()
    token_ids: tuple[int, ...] | None = None
    finish_reason: str | None = None

    @property
    def advice(self) -> str:
        return self.parsed.advice

    @property
    def generated(self) -> bool:
        """Whether a model produced this answer (so it can be trained on)."""
        return bool(self.prompt) and self.finish_reason in ("stop", "length")


def _feedback_line(feedback: str) -> str:
    return next((line.strip() for line in feedback.splitlines() if line.strip()), "")


@dataclass(frozen=True)
class CriticPrompt:
    """Builds what the critic reads about one attempt.

    `task_prompts` is how the policy was prompted: its system message (without any
    guidance) is the task the critic is shown. Each turn is the model's full response
    and the first line of the environment's reply (the sentence saying what happened);
    the start and final states are shown in full.
    """

    criteria: str
    task_prompts: PromptBuilder
    system: str = CRITIC_SYSTEM_PROMPT
    #: Show the planner's move at every turn: privileged information for a critic that should
    #: know the right move but is too small to plan (it still has to find where the attempt went wrong).
    planner_hints: bool = False

    def build(self, attempt: Trajectory) -> Conversation:
        start = attempt.steps[0].observation if attempt.steps else attempt.final_observation
        hints = ([f"\n<planner_move>{move}</planner_move>" for move in planner_moves(attempt)]
                 if self.planner_hints else [""] * attempt.num_steps)
        turns = [
            f"Turn {step.index + 1}:\n<model_response>{step.raw.strip()}</model_response>\n"
            f"<env_feedback>{_feedback_line(step.feedback)}</env_feedback>{hint}"
            for step, hint in zip(attempt.steps, hints)
        ]
        outcome = "solved" if attempt.success else "not solved"
        user = "\n\n".join([
            f"## Scoring criteria\n{self.criteria.strip()}",
            f"## Task given to the agent\n{self.task_prompts.system(attempt.instruction)}",
            f"## Start state\n{start.strip()}",
            "## The attempt\n" + ("\n".join(turns) if turns else "(the agent stopped before its first action)"),
            f"## Final state\n{attempt.final_observation.strip()}",
            f"## Official score\n{attempt.score:.2f} out of 1 ({outcome}, {attempt.num_steps} turns).",
        ])
        return (ChatMessage("system", self.system), ChatMessage("user", user))


class Critic(Protocol):
    """Writes n critiques of each attempt."""

    name: str

    def critique(self, attempts: Sequence[Trajectory], n: int, sampling: SamplingParams) -> list[list[Critique]]:
        """[len(attempts)][n] critiques, in attempt order."""


class ModelCritic:
    """A language-model critic: every critique of a batch in one `generate` call."""

    def __init__(self, backend: ModelBackend, prompt: CriticPrompt, name: str = ""):
        self.backend = backend
        self.prompt = prompt
        self.name = name or backend.spec

    def critique(self, attempts: Sequence[Trajectory], n: int, sampling: SamplingParams) -> list[list[Critique]]:
        prompts = [self.prompt.build(attempt) for attempt in attempts]
        requests = [GenerationRequest(messages=messages) for messages in prompts for _ in range(n)]
        completions = self.backend.generate(requests, sampling)
        if len(completions) != len(requests):
            raise RuntimeError(f"critic {self.name!r} returned {len(completions)} answers for {len(requests)} prompts")
        groups = []
        for index, messages in enumerate(prompts):
            group = []
            for completion in completions[index * n : (index + 1) * n]:
                if completion.error is not None:
                    parsed = ParsedCritique(None, "", f"backend error: {completion.error}")
                else:
                    parsed = parse_critique(completion.text)
                group.append(Critique(completion.text, parsed, messages, completion.token_ids,
                                      completion.finish_reason))
            groups.append(group)
        return groups


class TemplateCritic:
    """The rule-based critic: the same oracle-comparison critique, n times."""

    name = "template"

    def critique(self, attempts: Sequence[Trajectory], n: int, sampling: SamplingParams) -> list[list[Critique]]:
        groups = []
        for attempt in attempts:
            text = template_critique(attempt)
            groups.append([Critique(text, parse_critique(text))] * n)
        return groups


class NoCritic:
    """No advice at all: refinement becomes a plain re-attempt (the regeneration baseline)."""

    name = "none"

    def critique(self, attempts: Sequence[Trajectory], n: int, sampling: SamplingParams) -> list[list[Critique]]:
        return [[Critique("", ParsedCritique(None, ""))] * n for _ in attempts]


#: The critics, by name. An entry takes the backend that writes (model critics only), what
#: the critic is shown (model critics only) and a name for the critic's logs.
CRITICS: Registry[Callable[[ModelBackend | None, CriticPrompt | None, str], Critic]] = Registry("critic")


@CRITICS.register("model")
def _model_critic(backend: ModelBackend | None, prompt: CriticPrompt | None, name: str) -> Critic:
    if backend is None or prompt is None:
        raise ValueError("a model critic needs the backend that writes its critiques and the prompt it is shown")
    return ModelCritic(backend, prompt, name=name)


@CRITICS.register("template")
def _template_critic(backend: ModelBackend | None, prompt: CriticPrompt | None, name: str) -> Critic:
    return TemplateCritic()


@CRITICS.register("none")
def _no_critic(backend: ModelBackend | None, prompt: CriticPrompt | None, name: str) -> Critic:
    return NoCritic()


def critic_name(value: str, *, no_critic: bool = False) -> str:
    """The registered critic a config's critic role value names: `none` with its `no_critic` switch, `template`
    for the rule-based critic, `model` for any model role (an adapter or a model spec)."""
    if no_critic:
        return "none"
    return value if value in ("template", "none") else "model"


# -- the template critic ------------------------------------------------------------


def planner_moves(attempt: Trajectory) -> list[str]:
    """The planner's move at the state before each turn of the attempt (replayed without a step budget)."""
    env = planning_env(attempt)
    try:
        moves = []
        for step in attempt.steps:
            moves.append(env.oracle_action())
            take_recorded(env, attempt, step)
        return moves
    finally:
        env.close()


def _quote(text: str) -> str:
    return '"' + " ".join(text.split()) + '"'


@dataclass(frozen=True)
class Departure:
    """Where a failed attempt left a good path, by the planner: the turn (0-based; the number
    of turns when every turn made progress), the planner's move there, and what went wrong
    (`problem` is None when every turn made progress)."""

    turn: int
    move: str
    problem: str | None


def first_departure(attempt: Trajectory) -> Departure:
    """The first turn after which the planner's remaining plan is no shorter than before.

    The attempt is replayed on a fresh environment (without a step budget). A departure is
    an unreadable answer, a refused action, a move that ends the episode unsolved, or one
    that makes no progress. When every turn made progress, the departure is the turn after
    the last (the attempt stopped early or ran out of turns).
    """
    if attempt.success:
        raise ValueError(f"{attempt.id} solved its task: it has no departure from a good path")
    env = planning_env(attempt)
    try:
        return _departure_on(env, attempt)
    finally:
        env.close()


def _departure_on(env: Env, attempt: Trajectory) -> Departure:
    """`first_departure`, replaying the attempt on `env` (fresh, reset to its task)."""
    before = planner_distance(env)
    for step in attempt.steps:
        move = env.oracle_action()
        take_recorded(env, attempt, step)
        after = planner_distance(env)
        if after < before:
            before = after
            continue
        if step.action is None:
            problem = "had no readable action"
        elif not step.valid:
            problem = f"was refused ({_feedback_line(step.feedback)})"
        elif math.isinf(after):
            problem = "ended the episode without solving the task"
        else:
            problem = "did not bring the goal any closer"
        return Departure(step.index, move, problem)
    return Departure(attempt.num_steps, env.oracle_action(), None)


def template_critique(attempt: Trajectory) -> str:
    """A critique in the critic's format, from comparing the attempt with the env's planner.

    The critique names the attempt's `first_departure` and the planner's move there. A
    solved attempt gets "none".

    The planner is exact for FrozenLake and Sudoku; BlocksWorld's is a good but not
    always shortest plan, so an equally good move can occasionally be flagged.
    """
    if attempt.success:
        return "<reasoning>The attempt solved the task; the score is full.</reasoning>\n<critique>none</critique>"
    return _critique_of(attempt, first_departure(attempt))


def _critique_of(attempt: Trajectory, departure: Departure) -> str:
    """The template critique of a failed attempt that left a good path at `departure`."""
    score = f"The attempt scored {attempt.score:.2f} of 1."
    move, problem = departure.move, departure.problem
    if problem is not None:
        turn = departure.turn + 1
        step = attempt.steps[departure.turn]
        progress = {1: "", 2: "Turn 1 made progress. "}.get(turn, f"Turns 1 to {turn - 1} made progress. ")
        if step.action is None:
            advice = (f"At turn {turn} your answer had no readable action. "
                      f"You should answer with <action>{move}</action> there.")
        else:
            advice = (f"At turn {turn} you chose {_quote(step.action)}, which {problem}. "
                      f"You should do {_quote(move)} there instead.")
        reasoning = f"{score} {progress}Turn {turn} {problem}; the planner's move there is {_quote(move)}."
        return f"<reasoning>{reasoning}</reasoning>\n<critique>{advice}</critique>"
    if attempt.meta.get("stopped_by_agent"):
        reasoning = f"{score} Every turn made progress, but the agent stopped before the task was solved."
        advice = f"You stopped too early. You should continue with {_quote(move)}."
    else:
        reasoning = f"{score} Every turn made progress, but the attempt ran out of turns before the task was solved."
        advice = f"You ran out of turns. You should keep going without pauses; the next move needed was {_quote(move)}."
    return f"<reasoning>{reasoning}</reasoning>\n<critique>{advice}</critique>"


def advice_task(attempt: Trajectory, *, sample: int = 0) -> Task | None:
    """A refinement of a failed attempt that takes the template critic's advice (None: solved).

    It replays the attempt up to its `first_departure`, takes the planner's move there and
    continues from it; the advice is the episode's guidance, as in an ECHO refinement. Run by
    the oracle, such tasks are demonstrations of a policy taking advice (`hindsight train sft
    --set advice_demos=RUN`).
    """
    if attempt.success:
        return None
    departure = first_departure(attempt)  # replayed once, for the critique and the branch
    advice = parse_critique(_critique_of(attempt, departure)).advice
    task = branch_task(attempt, departure.turn, departure.move, sample=sample)
    return replace(task, guidance=advice, meta={**task.meta, "advice_of": attempt.id})
