"""ReFlAct-style goal reflection: before each action the model restates the goal and where it stands.

A prompting baseline of the Self-Guide paper. Where Self-Guide judges the latest step, a goal
reflection looks forward: what the finished task looks like and what still separates the
current state from it. It is a `PreActionWriter` for the engine: written before each action,
shown in the action prompt, recorded as the step's `assessment` (kind `reflection`, no label).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hindsight.agent.selfguide import render_steps
from hindsight.types import Assessment, ChatMessage, Completion, Conversation, Step

KIND = "reflection"

SYSTEM = "You help an agent keep its goal in view while it works on a task."

REQUEST = (
    "Task:\n{instruction}\n\nSteps so far:\n{steps}\n\nCurrent situation:\n{observation}\n\n"
    "In one or two short sentences: what does the situation look like once the task is done, "
    "and what still separates the current situation from it? Do not choose an action."
)


@dataclass(frozen=True)
class GoalReflector:
    """A reflection on the goal state before each action (ReFlAct, prompting only)."""

    max_new_tokens: int = 48
    kind: str = KIND
    shown_as: str = "Your reflection on the goal:\n{assessment}"

    def prompt(self, instruction: str, history: Sequence[Step], observation: str) -> Conversation:
        # The current situation is shown on its own, so the steps need only the one before it whole.
        steps = render_steps(history, full_last=1)
        request = (REQUEST.replace("{instruction}", instruction.strip()).replace("{steps}", steps)
                   .replace("{observation}", observation.strip()))
        return (ChatMessage("system", SYSTEM), ChatMessage("user", request))

    def parse(self, completion: Completion) -> Assessment:
        if completion.error is not None:
            error = f"backend error: {completion.error}"
        else:
            error = None if completion.text.strip() else "empty reflection"
        return Assessment(kind=self.kind, text=completion.text, parse_error=error,
                          finish_reason=completion.finish_reason if completion.error is None else None,
                          token_ids=completion.token_ids, logprobs=completion.logprobs)
