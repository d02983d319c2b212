"""Building the chat prompt the policy sees at each turn.

Prompt = system message (the environment's rules and the answer format, plus any
guidance given for this episode, such as a critic's advice) + the history of earlier
turns as user/assistant pairs + the current observation (followed by the assessment the
policy wrote before acting at this turn, when the run asks for one). The history mode decides how
many earlier turns are shown:

- `full`: every earlier turn;
- `none`: only the current observation (TIDE's Memory Index needs this);
- an integer k: the last k turns.

Prompts are rebuilt from a trajectory's steps, never stored per step, so logs stay
linear in the episode length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hindsight.types import Assessment, ChatMessage, Conversation, Step

DEFAULT_SYSTEM_TEMPLATE = (
    "You are an agent solving a task step by step in a text environment.\n"
    "{instruction}\n\n"
    "Answer every turn with a short reasoning inside <analysis></analysis> followed by exactly one "
    "action, written as the rules above say, inside <action></action>."
)

# Guidance sits in the system message so that it stays in view on every turn, whatever
# the history mode.
DEFAULT_GUIDANCE_TEMPLATE = "Advice from a review of your previous attempt at this same task:\n{guidance}"

INVALID_FEEDBACK = (
    "Your previous answer had no valid <action>…</action> block ({reason}). "
    "Answer with <analysis>…</analysis><action>…</action>."
)


@dataclass(frozen=True)
class Memory:
    """History mode: `full`, `none`, or the last `window` turns."""

    window: int | None

    @classmethod
    def parse(cls, text: str | int | None) -> Memory:
        """Read `full`, `none` or a non-negative integer window."""
        if text is None or (isinstance(text, str) and text.strip().lower() == "full"):
            return cls(None)
        if isinstance(text, str) and text.strip().lower() == "none":
            return cls(0)
        try:
            window = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"memory must be 'full', 'none' or a number of turns, not {text!r}") from None
        if window < 0:
            raise ValueError("memory window must be >= 0")
        return cls(window)

    def __str__(self) -> str:
        if self.window is None:
            return "full"
        return "none" if self.window == 0 else str(self.window)

    def visible(self, history: Sequence[Step]) -> Sequence[Step]:
        if self.window is None:
            return history
        return history[len(history) - self.window :] if self.window else ()


@dataclass(frozen=True)
class PromptBuilder:
    """Formats system prompt, history and observation into a conversation."""

    memory: Memory = Memory(None)
    system_template: str = DEFAULT_SYSTEM_TEMPLATE
    guidance_template: str = DEFAULT_GUIDANCE_TEMPLATE
    # How a turn's assessment (written before the action) is shown under the current
    # observation; the writer of the assessment decides it (`PreActionWriter.shown_as`).
    assessment_template: str = "{assessment}"

    def system(self, instruction: str, guidance: str = "") -> str:
        """The system message; non-empty `guidance` is appended to it."""
        text = self.system_template.replace("{instruction}", instruction.strip())
        if guidance.strip():
            text += "\n\n" + self.guidance_template.replace("{guidance}", guidance.strip())
        return text

    def build(
        self, instruction: str, history: Sequence[Step], observation: str, guidance: str = "",
        assessment: Assessment | None = None,
    ) -> Conversation:
        """The action prompt of a turn; `assessment` is what the policy wrote before it at this turn.

        Earlier turns show their own assessments the same way, so the history is the
        sequence of (observation, assessment, action) the policy went through.
        """
        shown = self.memory.visible(history)
        messages = [ChatMessage("system", self.system(instruction, guidance))]
        omitted = len(history) - len(shown)
        for position, step in enumerate(shown):
            prefix = f"(The first {omitted} turns are not shown.)\n" if position == 0 and omitted else ""
            messages.append(ChatMessage("user", prefix + self._with_assessment(step.observation, step.assessment)))
            messages.append(ChatMessage("assistant", step.raw))
        if omitted and not shown:
            observation = f"(Turn {len(history) + 1}; earlier turns are not shown.)\n{observation}"
        messages.append(ChatMessage("user", self._with_assessment(observation, assessment)))
        return tuple(messages)

    def _with_assessment(self, observation: str, assessment: Assessment | None) -> str:
        if assessment is None:
            return observation
        return observation + "\n\n" + self.assessment_template.replace("{assessment}", assessment.text.strip())
