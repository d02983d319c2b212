"""Small stand-ins for an environment and a backend, to test the agent layer alone."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hindsight.types import Completion, GenerationRequest, SamplingParams


class LineEnv:
    """Walk right along a line from 0 to `goal`; `left`/`right` are the only actions."""

    id = "line"

    def __init__(self, goal: int = 3, max_steps: int = 6):
        self.goal = goal
        self.max_steps = max_steps
        self.config: dict[str, Any] = {"goal": goal, "max_steps": max_steps}
        self.position = 0
        self.steps = 0
        self.resets: list[int] = []
        self.closed = 0  # close() calls: the engine closes every environment it makes

    @property
    def instruction(self) -> str:
        return f"Reach position {self.goal}."

    def _info(self, valid: bool) -> dict[str, Any]:
        return {
            "score": 1.0 if self.position == self.goal else 0.0,
            "success": self.position == self.goal,
            "valid": valid,
            "state_key": f"pos={self.position}",
            "admissible_actions": ["left", "right"],
        }

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.resets.append(seed)
        self.position = seed % 2  # odd seeds start one step closer
        self.steps = 0
        return f"You are at {self.position}.", self._info(True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        valid = action in ("left", "right")
        if action == "right":
            self.position += 1
        elif action == "left":
            self.position = max(0, self.position - 1)
        self.steps += 1
        success = self.position == self.goal
        truncated = not success and self.steps >= self.max_steps
        feedback = f"You are at {self.position}." if valid else f"'{action}' is not an action. You are at {self.position}."
        return feedback, float(success), success, truncated, self._info(valid)

    def oracle_action(self) -> str:
        return "right"

    def admissible_actions(self) -> Sequence[str]:
        return ["left", "right"]

    def close(self) -> None:
        self.closed += 1


class RecordingBackend:
    """Answers with `respond(request)` and records the size of every batch."""

    spec = "fake"

    def __init__(self, respond: Callable[[GenerationRequest], str | Completion]):
        self.respond = respond
        self.batch_sizes: list[int] = []
        self.params: list[SamplingParams] = []

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.batch_sizes.append(len(requests))
        self.params.append(params)
        answers = [self.respond(request) for request in requests]
        return [a if isinstance(a, Completion) else Completion(text=a) for a in answers]
