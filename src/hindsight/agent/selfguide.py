"""Self-Guide's agent side: the self-assessment prompt, its tolerant parser, and the oracle's labels.

Before each action the policy judges its latest step (z_t): a short reason and a label in
{negative, neutral, positive}, given the task, the starting situation and the steps so
far. The action prompt then shows that judgement. At the first turn there is no step to
judge yet; as in the paper, the policy still writes z_1, about the starting situation.

A label that cannot be read counts as neutral and the assessment records why
(`parse_error`), so a run can count the failures (`selfguide/label_parse_failures`).

On the built-in environments the planner knows whether a step moved toward the goal:
`oracle_labels` gives the label a perfect judge would have written at every turn. They
measure the policy's own labels (`selfguide/label_agreement`) and are the targets of the
SFT warm start that teaches a small model the format (`with_oracle_assessments`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

from hindsight.agent.replay import planner_distance, planning_env, take_recorded
from hindsight.algos.selfguide import Label, step_reward
from hindsight.llm.base import ModelBackend
from hindsight.types import (
    Assessment,
    ChatMessage,
    Completion,
    Conversation,
    GenerationRequest,
    SamplingParams,
    Step,
    Trajectory,
)

KIND = "self-guide"

# What the labels mean and how to answer; shared by the engine's request and verl's in-conversation one.
RUBRIC = (
    "Use positive when the step clearly brought the task closer to done or found something needed later; "
    "neutral when it neither helped nor hurt; negative when it wasted a move, undid progress, was refused "
    "or left the agent stuck.\n"
    "Answer in exactly two lines:\nReason: <one short sentence>\nLabel: <negative, neutral or positive>"
)

# The rubric sits in the system message, before anything that changes from turn to turn, so every
# note prompt of a batch shares it and an episode's next note prompt extends its last one up to
# the steps (`RolloutEngine` keeps the turns it sampled): only the new steps and the question are
# computed again. After the steps it was computed again at every turn, and trained once per note.
SYSTEM = (
    "You check how an agent is doing on a task, one step at a time. You judge only the latest step, "
    "from what it changed.\n" + RUBRIC
)

REQUEST = "Task:\n{instruction}\n\nStarting situation:\n{start}\n\nSteps so far:\n{steps}\n\n{question}"

FIRST_TURN_QUESTION = "No step has been taken yet. Judge the starting situation: is the task still open?"
LATER_QUESTION = "Judge step {number}, the latest one."

# How the action prompt shows the assessment under the current observation.
SHOWN_AS = "Your check of the latest step:\n{assessment}"

_LABEL_LINE = re.compile(r"label\s*[:=\-]\s*\**\s*(negative|neutral|positive)\b", re.IGNORECASE)
_REASON_LINE = re.compile(r"reason\s*[:=\-]\s*(.+)", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAssessment:
    label: Label
    reason: str
    error: str | None


def parse_assessment(text: str) -> ParsedAssessment:
    """The label and reason of an answer; a missing or unknown label is neutral, with the error said."""
    reason_match = _REASON_LINE.search(text)
    reason = reason_match.group(1).strip() if reason_match else ""
    labels = _LABEL_LINE.findall(text)
    if not labels:
        return ParsedAssessment(Label.NEUTRAL, reason, "no 'Label: negative|neutral|positive' line")
    if len({label.lower() for label in labels}) > 1:
        return ParsedAssessment(Label.NEUTRAL, reason, "more than one label")
    return ParsedAssessment(Label(labels[0].lower()), reason, None)


def render_steps(history: Sequence[Step], full_last: int = 2) -> str:
    """The steps so far, one per line: the action as the environment took it and what it answered.

    Only the last `full_last` answers are shown whole (the state before and after the latest
    step, which is what a judgement of it needs); earlier ones by their first line. A whole
    answer often restates the full situation, and repeating it for every step would make the
    prompt grow by a full observation per step (a 5x5 FrozenLake episode of 10 steps: ~1,400
    tokens instead of ~600).
    """
    if not history:
        return "(none)"
    lines = []
    for k, step in enumerate(history):
        action = step.action if step.action is not None else "(no readable action)"
        answer = step.feedback.strip()
        if k >= len(history) - full_last:
            outcome = "\n   ".join(line.rstrip() for line in answer.splitlines())
        else:
            outcome = answer.splitlines()[0].strip() if answer else ""
        lines.append(f"{step.index + 1}. {action} -> {outcome}")
    return "\n".join(lines)


@dataclass(frozen=True)
class SelfAssessor:
    """The policy's own self-assessment before each action (a `PreActionWriter` for the engine)."""

    max_new_tokens: int = 48
    kind: str = KIND
    shown_as: str = SHOWN_AS

    def prompt(self, instruction: str, history: Sequence[Step], observation: str) -> Conversation:
        start = history[0].observation if history else observation
        question = LATER_QUESTION.format(number=len(history)) if history else FIRST_TURN_QUESTION
        request = (REQUEST.replace("{instruction}", instruction.strip()).replace("{start}", start.strip())
                   .replace("{steps}", render_steps(history)).replace("{question}", question))
        return (ChatMessage("system", SYSTEM), ChatMessage("user", request))

    def parse(self, completion: Completion) -> Assessment:
        if completion.error is not None:
            parsed = ParsedAssessment(Label.NEUTRAL, "", f"backend error: {completion.error}")
        else:
            parsed = parse_assessment(completion.text)
        return Assessment(
            kind=self.kind, text=completion.text, label=parsed.label.value, reward=step_reward(parsed.label),
            parse_error=parsed.error, finish_reason=completion.finish_reason if completion.error is None else None,
            token_ids=completion.token_ids, logprobs=completion.logprobs,
        )


def judge_move(before: float, after: float, valid: bool, stuck: bool) -> Label:
    """The planner's verdict on one move, from its distance to success before and after.

    positive when the distance shrank; negative when it grew, the move was refused or
    unreadable (`valid` False), changed nothing (`stuck`: walking into an edge, the prompt's
    "wasted a move") or the episode ended unsolved (infinite distance); neutral otherwise
    (the state changed but the distance did not).
    """
    if not valid or stuck or math.isinf(after) or after > before:
        return Label.NEGATIVE
    return Label.POSITIVE if after < before else Label.NEUTRAL


def oracle_labels(trajectory: Trajectory) -> list[Label | None]:
    """The label a perfect judge gives at each turn: None at the first (no step yet), then
    `judge_move` of step t−1. The trajectory is replayed on a fresh environment without a
    step budget.
    """
    env = planning_env(trajectory)
    try:
        labels: list[Label | None] = [None]
        before = planner_distance(env)
        for step in trajectory.steps[:-1]:
            take_recorded(env, trajectory, step)
            after = planner_distance(env)
            labels.append(judge_move(before, after, step.valid, stuck=env.state_key() == step.state_key))
            before = after
        return labels[: trajectory.num_steps]
    finally:
        env.close()


def label_agreement(trajectory: Trajectory) -> tuple[int, int]:
    """(turns whose self-assessment label equals the oracle's, turns compared); the first turn is not compared."""
    oracle = oracle_labels(trajectory)
    compared = agreed = 0
    for step, expected in zip(trajectory.steps, oracle):
        if expected is None or step.assessment is None or step.assessment.label is None:
            continue
        compared += 1
        agreed += step.assessment.label == expected.value
    return agreed, compared


@dataclass(frozen=True)
class Repeats:
    """Does a note steer the move? Counts over the moves that left the state unchanged (a
    refused move, a bump into the edge) and were followed by another turn.

    `stuck` such moves, `repeated` of them made again at the next turn; `flagged` of them
    whose next note called the last step negative, `flagged_repeated` of those made again.
    A note that carries the information and a move that ignores it show as a high
    `flagged_repeated / flagged`.
    """

    stuck: int = 0
    repeated: int = 0
    flagged: int = 0
    flagged_repeated: int = 0

    def __add__(self, other: "Repeats") -> "Repeats":
        return Repeats(self.stuck + other.stuck, self.repeated + other.repeated,
                       self.flagged + other.flagged, self.flagged_repeated + other.flagged_repeated)


def repeats_after_stuck(trajectory: Trajectory) -> Repeats:
    """`Repeats` of one trajectory: `count_repeats` of its steps' actions, states and note labels."""
    steps = trajectory.steps
    return count_repeats([step.action for step in steps], [step.state_key for step in steps],
                         [step.assessment.label if step.assessment else None for step in steps])


def count_repeats(actions: Sequence[str | None], state_keys: Sequence[str],
                  labels: Sequence[str | None] = ()) -> Repeats:
    """`Repeats` of one episode from its moves, the state before each (`Step.state_key`) and each
    turn's note label (none for a run without notes, or a kept run, which keeps no notes).

    Step t is stuck when step t+1 starts from the same state. Unreadable answers (no action, or
    "" as a kept outcome sends them) and empty state keys (an environment without them) are left
    out, since there is no move to repeat or no way to tell.
    """
    counts = Repeats()
    for t in range(min(len(actions), len(state_keys)) - 1):
        if not actions[t] or not state_keys[t] or state_keys[t + 1] != state_keys[t]:
            continue
        same = actions[t + 1] == actions[t]
        flagged = t + 1 < len(labels) and labels[t + 1] == Label.NEGATIVE.value
        counts = counts + Repeats(1, int(same), int(flagged), int(flagged and same))
    return counts


_ORACLE_REASONS = {
    None: "No step has been taken yet; the task is open.",
    Label.POSITIVE: "The last move brought the goal closer.",
    Label.NEUTRAL: "The last move neither helped nor hurt.",
    Label.NEGATIVE: "The last move did not bring the goal closer.",
}


def oracle_assessment_text(label: Label | None) -> str:
    """The two-line answer a perfect judge writes (None: the first turn, judged neutral)."""
    return f"Reason: {_ORACLE_REASONS[label]}\nLabel: {(label or Label.NEUTRAL).value}"


def with_oracle_assessments(trajectory: Trajectory, assessor: SelfAssessor) -> Trajectory:
    """The trajectory with the oracle's assessment at every turn (the SFT targets that teach the format)."""
    steps = []
    for step, label in zip(trajectory.steps, oracle_labels(trajectory)):
        judged = label or Label.NEUTRAL  # the first turn has no step to judge
        steps.append(replace(step, assessment=Assessment(kind=assessor.kind, text=oracle_assessment_text(label),
                                                         label=judged.value, reward=step_reward(judged),
                                                         finish_reason="stop")))
    return replace(trajectory, steps=tuple(steps))


@dataclass(frozen=True)
class LoggedStep:
    """A turn of a logged trajectory that judges the step before it: what an assessor is asked there
    and the oracle's label of that step."""

    trajectory: Trajectory
    at: int  # the turn; the step judged is at − 1
    oracle: Label
    request: GenerationRequest


def logged_steps_to_judge(trajectories: Sequence[Trajectory], assessor: SelfAssessor) -> list[LoggedStep]:
    """Every turn after the first of every trajectory, with the prompt the assessor would have had there.

    Only steps followed by another turn are judged (as in a rollout): the last step of an episode,
    a fall into a hole included, is never assessed.
    """
    steps = []
    for trajectory in trajectories:
        for at, label in enumerate(oracle_labels(trajectory)):
            if label is None:
                continue
            conversation = assessor.prompt(trajectory.instruction, trajectory.steps[:at],
                                           trajectory.steps[at].observation)
            steps.append(LoggedStep(trajectory, at, label, GenerationRequest(conversation)))
    return steps


def judge_logged_steps(backend: ModelBackend, assessor: SelfAssessor, steps: Sequence[LoggedStep], *,
                       batch: int = 32, temperature: float = 0.0,
                       seed: int | None = None) -> Iterator[list[Assessment]]:
    """The backend's assessments of the logged steps, in order, one list per `batch` steps.

    Every model judged gets the same steps and prompts, so two adapters' notes compare on
    fixed states rather than on the states their own rollouts happened to visit. Greedy by
    default (the gate's measure); with `temperature > 0` the notes are sampled as in a rollout,
    the k-th batch with `seed + k` when a seed is given, so a sampled judgement replays.
    Batches are yielded as they finish, so a caller can show progress.
    """
    for k, first in enumerate(range(0, len(steps), batch)):
        params = SamplingParams(temperature=temperature, max_new_tokens=assessor.max_new_tokens,
                                seed=None if seed is None or temperature == 0 else seed + k)
        chunk = steps[first : first + batch]
        yield [assessor.parse(c) for c in backend.generate([s.request for s in chunk], params)]


def judged_label(answer: Assessment) -> Label | None:
    """The label an answer gave; None when none could be read (it counts against agreement)."""
    return None if answer.parse_error else Label(answer.label)
