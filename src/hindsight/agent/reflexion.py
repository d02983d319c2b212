"""Reflexion-style retries: after a failed attempt the model writes a lesson for its next try.

A prompting baseline of the Self-Guide paper. Every task gets a first attempt; each failed one
is shown back to the same model, which writes a short reflection (what went wrong, what to do
instead). The next attempt at the same task carries every reflection written so far as its
`guidance` (the engine shows it in the system prompt). A task stops at its first success or
after `attempts` tries.

    results = run_reflexion(policy, make_env, seeds, rollout, attempts=3)

Nothing here trains: the reflections steer the next attempt only through the prompt. A
reflection that comes back empty or as a backend error is recorded as such and the next
attempt runs without a new lesson, so one bad generation never drops a task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.selfguide import render_steps
from hindsight.envs.contract import Env
from hindsight.llm.base import ModelBackend
from hindsight.types import ChatMessage, Completion, Conversation, GenerationRequest, SamplingParams, Trajectory

SYSTEM = "You review an agent's failed attempt at a task so that its next attempt goes better."

REQUEST = (
    "Task:\n{instruction}\n\nThe attempt, step by step:\n{steps}\n\nHow it ended:\n{ending}\n\n"
    "The attempt failed. In one or two short sentences, say which step was the mistake and what "
    "to do differently at that point next time."
)

#: How the reflections of earlier attempts appear in the next attempt's system prompt.
GUIDANCE_HEADER = "Lessons from your earlier failed attempts at this same task:"


@dataclass(frozen=True)
class Reflection:
    """What the model wrote after failed attempt `attempt` (1-based) of task `seed`."""

    seed: int
    attempt: int
    text: str
    error: str | None = None


def reflection_prompt(trajectory: Trajectory) -> Conversation:
    """The request shown to the model after `trajectory` failed."""
    request = (REQUEST.replace("{instruction}", trajectory.instruction.strip())
               .replace("{steps}", render_steps(trajectory.steps))
               .replace("{ending}", " ".join(trajectory.final_observation.split()) or "(no final observation)"))
    return (ChatMessage("system", SYSTEM), ChatMessage("user", request))


def parse_reflection(seed: int, attempt: int, completion: Completion) -> Reflection:
    """A reflection from one completion; an empty answer or a backend error is kept as an error."""
    if completion.error is not None:
        return Reflection(seed, attempt, "", error=f"backend error: {completion.error}")
    text = completion.text.strip()
    return Reflection(seed, attempt, text, error=None if text else "empty reflection")


def guidance_from(reflections: Sequence[Reflection]) -> str:
    """The guidance of the next attempt: every readable reflection so far, oldest first."""
    lessons = [f"- Attempt {r.attempt}: {' '.join(r.text.split())}" for r in reflections if r.text]
    return "\n".join([GUIDANCE_HEADER, *lessons]) if lessons else ""


def run_reflexion(
    policy: ModelBackend,
    make_env: Callable[[], Env],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    *,
    attempts: int,
    reflection_params: SamplingParams,
) -> Iterator[Trajectory]:
    """Yield every attempt's trajectory as it finishes, attempt by attempt.

    Each trajectory's `meta["reflexion"]` holds its attempt number (1-based) and, for a
    failed one that gets a next try, the reflection written about it and any error.
    All failed attempts of one round are reflected on in one batched `generate` call.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    engine = RolloutEngine(make_env, policy, rollout)
    lessons: dict[int, list[Reflection]] = {seed: [] for seed in seeds}
    pending = list(dict.fromkeys(seeds))
    for attempt in range(1, attempts + 1):
        tasks = [Task(seed=seed, sample=attempt - 1, guidance=guidance_from(lessons[seed]),
                      meta={"reflexion": {"attempt": attempt}}) for seed in pending]
        failed: list[Trajectory] = []
        for trajectory in engine.iter_run(tasks):
            if trajectory.success or attempt == attempts:
                yield trajectory
            else:
                failed.append(trajectory)
        if not failed:
            return
        completions = policy.generate([GenerationRequest(reflection_prompt(t)) for t in failed], reflection_params)
        for trajectory, completion in zip(failed, completions):
            reflection = parse_reflection(trajectory.seed, attempt, completion)
            lessons[trajectory.seed].append(reflection)
            yield trajectory.with_meta(reflexion={"attempt": attempt, "reflection": reflection.text,
                                                  "reflection_error": reflection.error})
        pending = [t.seed for t in failed]
