"""Process reward models: how good is one action at one recorded state, in [0, 1]; and best-of-N.

CSO asks a PRM to rate the policy's logged action at step t of a failed trajectory and each
expert alternative at the same state. Two PRMs:

* `OraclePRM`, on the built-in environments: the environment's planner measures the moves
  left to success before and after the action. Solving the task scores 1; a move that
  shortens the plan scores 1, one that leaves it as long 0.5; one that lengthens it, changes
  nothing (walking into an edge) or is refused scores 0.25, and one after which the task can
  no longer be solved (a fall into a hole) scores 0.
* `NoisyPRM` (`noisy:EPS:PRM`) wraps either: with probability EPS a score is replaced by an
  independent uniform draw, the clean one kept beside it. The draw is seeded by the query
  (trajectory, step, action), so two methods rating the same steps see the same noise.
* `JudgePRM`: any model role answers a rubric prompt with a score. With `quoted:` in front
  of its value (`quoted:adapter:RUN`) the prompt also quotes, under the proposed move, the
  lines of the current observation that name a word of it ("Up: a hole." under "up"), so a
  small judge reads what the state says about the move in one place. The answer is parsed
  tolerantly (`0.8`, `Score: 80%`, `7/10`, `score = .35`), but a stray number inside other
  text is not taken for a score (`parse_score`); when no score can be read the
  PRM returns its stated `fallback` and counts the failure, so a bad answer is visible and
  never a crash.

    scores = prm.score([StepQuery(trajectory, t, action), ...])   # one PRMScore per query

PRMs are registered by name in `PRMS`, and `build_prm` makes one from a `prm` role value the
one way every method and command does (`oracle`, or a model role that answers the rubric).
`BestOfN` is step-level best-of-N at inference: the rollout engine samples n candidate actions
per turn and takes the one a PRM rates highest.
"""

from __future__ import annotations

import copy
import math
import random
import re
from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from hindsight.agent.parser import parse_response
from hindsight.agent.replay import planner_distance, replay_to
from hindsight.agent.selfguide import judge_move, render_steps
from hindsight.algos.selfguide import Label
from hindsight.envs.contract import Env
from hindsight.llm.base import ModelBackend
from hindsight.registry import Registry
from hindsight.roles import RoleSpec, parse_role, resolve
from hindsight.types import (
    Candidate,
    ChatMessage,
    Completion,
    Conversation,
    GenerationRequest,
    SamplingParams,
    Trajectory,
)


@dataclass(frozen=True)
class StepQuery:
    """Rate `action` taken at step `at` of `trajectory` (the state after its first `at` steps)."""

    trajectory: Trajectory
    at: int
    action: str


@dataclass(frozen=True)
class PRMScore:
    """A score in [0, 1]; `error` says why the PRM fell back to a stated value."""

    value: float
    error: str | None = None
    text: str = ""
    clean: float | None = None  # a noisy PRM's score before the noise (None where unknown)


class ProcessRewardModel(Protocol):
    name: str

    def score(self, queries: Sequence[StepQuery]) -> list[PRMScore]:
        """One score per query, in order."""


#: The oracle PRM's score of each verdict of `judge_move`. Planner distances are whole moves,
#: so this is 0.5 + 0.5 · (before − after) clipped to [0, 1] for a move that keeps the task
#: solvable, with 1 for the move that solves it and 0.25 for a refused or wasted one.
VERDICT_SCORE = {Label.NEGATIVE: 0.25, Label.NEUTRAL: 0.5, Label.POSITIVE: 1.0}
#: The score of a move after which the task cannot be solved any more. It sits below every
#: recoverable mistake because best-of-N takes the highest score: with a fall and a detour
#: both at 0, a tie handed best-of-5 the fall in 18 of its 67 falls (docs/results.md, issue 13).
FATAL_SCORE = 0.0


class OraclePRM:
    """The planner's verdict on one move (built-in environments only): Self-Guide's oracle
    label (`judge_move`) as a number."""

    name = "oracle"

    def score(self, queries: Sequence[StepQuery]) -> list[PRMScore]:
        scores = []
        states: dict[tuple[int, int], Env] = {}  # one replay per (trajectory, step), copied per action
        try:
            for query in queries:
                key = (id(query.trajectory), query.at)
                if key not in states:
                    states[key] = replay_to(query.trajectory, query.at)
                env = copy.deepcopy(states[key])
                try:
                    before, state = planner_distance(env), env.state_key()
                    _, _, _, _, info = env.step(query.action)
                    after = planner_distance(env)
                    stuck = env.state_key() == state
                finally:
                    env.close()
                verdict = judge_move(before, after, bool(info.get("valid", True)), stuck=stuck)
                value = FATAL_SCORE if math.isinf(after) else VERDICT_SCORE[verdict]
                scores.append(PRMScore(value, text=f"plan {before:g} -> {after:g} moves: {verdict.value}"))
            return scores
        finally:
            for replayed in states.values():
                replayed.close()


JUDGE_SYSTEM = "You grade single moves of an agent that works on a task. You are strict and brief."

JUDGE_REQUEST = (
    "Task:\n{instruction}\n\nSteps so far:\n{steps}\n\nCurrent situation:\n{observation}\n\n"
    "Proposed next move: {action}\n\n"
    "How much does this move help finish the task from here? Think of whether it makes real progress, "
    "whether it is allowed here, and whether it risks ending the task in failure.\n"
    "1 = clearly the right move, 0.5 = harmless but no progress, 0 = useless, refused or harmful.\n"
    "Answer with one line: Score: <a number from 0 to 1>"
)

_WORD = re.compile(r"\w+")


def action_lines(observation: str, action: str) -> list[str]:
    """The lines of `observation` that name a word of `action`, whole words in any case, in order.

    FrozenLake's local view gives "Up: a hole." for `up` (and the goal line when it names the
    direction); BlocksWorld gives every line about the blocks `stack b1 b2` names.
    """
    words = {word.lower() for word in _WORD.findall(action)}
    return [line.strip() for line in observation.splitlines()
            if words & {word.lower() for word in _WORD.findall(line)}]


_SCORE = re.compile(r"score\s*[:=\-]?\s*\**\s*(\d+(?:\.\d+)?|\.\d+)\s*(%|/\s*10\b|/\s*100\b)?", re.IGNORECASE)
_SCALED = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%|/\s*10\b|/\s*100\b)")
_LEADING = re.compile(r"[\s*\"'`]*(\d+(?:\.\d+)?|\.\d+)(?![\d/%])")
# "1. right -> ..." or "1. 1. 1." opens a numbered list (or repeats one), not a score of 1.
_LIST_MARKER = re.compile(r"\d+[.)]\s+\S")


def parse_score(text: str) -> float | None:
    """The score an answer gives, scaled to [0, 1]; None when there is none or it is out of range.

    A `Score:` line wins; then a number with a scale anywhere (`80%`, `80/100` are 0.8, `7/10` is
    0.7); then a bare number, but only one that opens the answer. A small judge often answers by
    copying the prompt ("Rows are numbered from 1 at the top ...") or by listing moves ("1. right
    -> ...", "1. 1. 1."): a number inside such text is not a score, and reading it as one would
    turn an unreadable answer into a confident rating.
    """
    match = _SCORE.search(text) or _SCALED.search(text)
    if match is None:
        match = _LEADING.match(text)
        if match is None or _LIST_MARKER.match(text, match.start(1)):
            return None
    value = float(match.group(1))
    unit = (match.group(2) or "").replace(" ", "") if match.re is not _LEADING else ""
    if unit in ("%", "/100"):
        value /= 100
    elif unit == "/10":
        value /= 10
    return value if 0.0 <= value <= 1.0 else None


@dataclass
class JudgePRM:
    """A model role answers the rubric; unreadable answers score `fallback` and are counted."""

    backend: ModelBackend
    fallback: float = 0.5
    max_new_tokens: int = 16
    temperature: float = 0.0
    name: str = "judge"
    failures: int = 0
    quote: bool = False  # quote the observation's lines about the move under it (`action_lines`)

    def __post_init__(self) -> None:
        if not 0.0 <= self.fallback <= 1.0:
            raise ValueError("the judge's fallback score must be in [0, 1]")

    def prompt(self, query: StepQuery) -> Conversation:
        trajectory, at = query.trajectory, query.at
        observation = trajectory.steps[at].observation if at < trajectory.num_steps else trajectory.final_observation
        action = query.action
        if self.quote:
            lines = action_lines(observation, action)
            action += "\nWhat the current situation says about it:\n" + ("\n".join(lines) if lines else "(nothing)")
        request = (JUDGE_REQUEST.replace("{instruction}", trajectory.instruction.strip())
                   .replace("{steps}", render_steps(trajectory.steps[:at], full_last=0))
                   .replace("{observation}", observation.strip()).replace("{action}", action))
        return (ChatMessage("system", JUDGE_SYSTEM), ChatMessage("user", request))

    def score(self, queries: Sequence[StepQuery]) -> list[PRMScore]:
        if not queries:
            return []
        params = SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        completions = self.backend.generate([GenerationRequest(self.prompt(q)) for q in queries], params)
        scores = []
        for completion in completions:
            if completion.error is not None:
                value, error = None, f"backend error: {completion.error}"
            else:
                value = parse_score(completion.text)
                error = None if value is not None else "no score from 0 to 1 in the answer"
            if value is None:
                self.failures += 1
                scores.append(PRMScore(self.fallback, error=error, text=completion.text))
            else:
                scores.append(PRMScore(value, text=completion.text))
        return scores


@dataclass
class NoisyPRM:
    """`inner`'s scores, each replaced with probability `noise` by an independent uniform draw.

    CSO's premise is a PRM that is often wrong. This makes any PRM wrong at a known rate: the
    clean score stays in `PRMScore.clean`, so the log can tell which ratings the noise changed.
    The draw depends only on `seed` and the query (trajectory id, step, action), not on the
    order or batching of queries: a resumed round and a second method scoring the same steps
    get the same noise.
    """

    inner: ProcessRewardModel
    noise: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"a noisy PRM's noise must be in [0, 1], not {self.noise!r}")
        self.name = f"noisy:{self.noise:g}:{self.inner.name}"

    def draw(self, query: StepQuery) -> float | None:
        """The uniform score that replaces this query's, or None when it keeps its own."""
        rng = random.Random(f"{self.seed}|{query.trajectory.id}|{query.at}|{query.action}")
        # Both draws are taken whatever the noise, so a query's replacement is the same at every
        # EPS, and the ratings replaced at a lower EPS are a subset of those at a higher one.
        replaced = rng.random() < self.noise
        value = rng.random()
        return value if replaced else None

    def score(self, queries: Sequence[StepQuery]) -> list[PRMScore]:
        scores = []
        for query, score in zip(queries, self.inner.score(queries), strict=True):
            value = self.draw(query)
            scores.append(replace(score, clean=score.value) if value is None else
                          replace(score, value=value, clean=score.value, text=f"{score.text} [noise: {value:.3f}]"))
        return scores


NOISY = "noisy:"
QUOTED = "quoted:"


@dataclass(frozen=True)
class PRMSpec:
    """A parsed `prm` value: the role that rates, the noise put over its scores (0: none), and
    whether a judge's prompt quotes the observation's lines about the move."""

    role: RoleSpec
    noise: float = 0.0
    quote: bool = False


def parse_prm(value: str, allowed: Sequence[str] = ("oracle", "backend")) -> PRMSpec:
    """`[noisy:EPS:][quoted:]ROLE` (e.g. `noisy:0.4:oracle`, `quoted:adapter:runs/prm`); ValueError
    says what is wrong."""
    text, noise = value.strip(), 0.0
    if text.startswith(NOISY):
        eps, sep, inner = text[len(NOISY):].partition(":")
        try:
            noise = float(eps)
        except ValueError:
            noise = math.nan
        if not sep or not inner.strip() or not 0.0 <= noise <= 1.0:
            raise ValueError(f"prm: {value!r} is not noisy:EPS:PRM with EPS in [0, 1], e.g. noisy:0.4:oracle")
        if inner.strip().startswith(NOISY):
            raise ValueError(f"prm: {value!r} puts noise over noise; write one noisy: with the total rate")
        text = inner.strip()
    quote = text.startswith(QUOTED)
    if quote:
        text = text[len(QUOTED):].strip()
    role = parse_role("prm", text, allowed)
    if quote and role.kind == "oracle":
        raise ValueError(f"prm: {value!r} quotes lines to the oracle, which reads no prompt; quoted: is for a judge")
    return PRMSpec(role, noise, quote)


#: The PRMs, by name. An entry takes the backend of the `prm` role (None for a PRM that needs
#: no model) and the score an unreadable answer falls back to, and returns the PRM.
PRMS: Registry[Callable[[ModelBackend | None, float], ProcessRewardModel]] = Registry("PRM")


@PRMS.register("oracle")
def _oracle(backend: ModelBackend | None, fallback: float) -> ProcessRewardModel:
    return OraclePRM()


@PRMS.register("judge")
def _judge(backend: ModelBackend | None, fallback: float) -> ProcessRewardModel:
    if backend is None:
        raise ValueError("the judge PRM needs a model role to answer its rubric")
    return JudgePRM(backend, fallback=fallback)


def prm_name(role: RoleSpec) -> str:
    """The registered PRM a `prm` role value stands for: the oracle itself, or any model as a judge."""
    return "oracle" if role.kind == "oracle" else "judge"


def build_prm(value: str, model: object | None = None, *, fallback: float = 0.5,
              allowed: Sequence[str] = ("oracle", "backend"), seed: int = 0) -> ProcessRewardModel:
    """The PRM a `prm` value names (`allowed` role kinds only, `noisy:EPS:` in front for noise drawn
    from `seed`, `quoted:` before a judge's role for its quoting prompt); `model` plays policy
    and adapter roles."""
    spec = parse_prm(value, allowed)
    backend = None if spec.role.kind == "oracle" else resolve(spec.role, model)
    prm = PRMS.get(prm_name(spec.role))(backend, fallback)
    if spec.quote:
        prm = replace(prm, quote=True, name="quoted:judge")
    return NoisyPRM(prm, spec.noise, seed) if spec.noise > 0 else prm


@dataclass(frozen=True)
class BestOfN:
    """Step-level best-of-N: `n` sampled candidates per turn, the PRM's favourite is taken.

    `prm` rates every readable candidate of every episode of the turn in one `score` call. A
    turn whose candidates are all unreadable takes the first, which records the parse error
    as usual.
    """

    n: int
    prm: ProcessRewardModel

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("best-of-N needs n >= 1")

    def choose(self, so_far: Sequence[Trajectory],
               completions: Sequence[Completion]) -> list[tuple[int, tuple[Candidate, ...]]]:
        """For each episode (its trajectory so far), the position of the chosen one of its n candidates
        (`completions[k*n:(k+1)*n]` are episode k's) and all n, rated."""
        n = self.n
        actions: list[str | None] = []
        queries, queried = [], []  # queried: the index in `completions` of each query
        for k, trajectory in enumerate(so_far):
            for j in range(n):
                completion = completions[k * n + j]
                action = parse_response(completion.text).action if completion.error is None else None
                actions.append(action or None)
                if action:
                    queries.append(StepQuery(trajectory, trajectory.num_steps, action))
                    queried.append(k * n + j)
        rated = dict(zip(queried, self.prm.score(queries)))
        picks = []
        for k in range(len(so_far)):
            candidates = tuple(
                Candidate(actions[i], rated[i].value, rated[i].error) if i in rated else Candidate(actions[i])
                for i in range(k * n, (k + 1) * n))
            scored = [j for j, candidate in enumerate(candidates) if candidate.score is not None]
            # The first of the best on a tie; all unreadable: the first, whose parse error is recorded.
            best = max(scored, key=lambda j: candidates[j].score) if scored else 0
            picks.append((best, candidates))
        return picks
