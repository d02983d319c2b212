"""Reflexion: a lesson written after a failed attempt reaches the next attempt at the same task."""

import json

from hindsight.agent.engine import RolloutConfig
from hindsight.agent.evaluate import EvalConfig, run_eval, summarize
from hindsight.agent.reflexion import GUIDANCE_HEADER, SYSTEM, run_reflexion
from hindsight.cli.main import main
from hindsight.logs import read_trajectories
from hindsight.types import Completion, SamplingParams

from .fakes import LineEnv, RecordingBackend


def lesson_follower(reflection: str | Completion):
    """Walks left (failing) until its system prompt holds a lesson, then walks right."""
    def respond(request):
        system = request.messages[0]
        if system.content == SYSTEM:  # asked to reflect
            return reflection
        return "<action>right</action>" if GUIDANCE_HEADER in system.content else "<action>left</action>"
    return respond


def run(backend, seeds, attempts):
    rollout = RolloutConfig(sampling=SamplingParams(max_new_tokens=8))
    return list(run_reflexion(backend, lambda: LineEnv(goal=2, max_steps=3), seeds, rollout, attempts=attempts,
                              reflection_params=SamplingParams(max_new_tokens=16)))


def test_a_failed_attempt_is_reflected_on_and_the_lesson_steers_the_next_one():
    backend = RecordingBackend(lesson_follower("Step 1 went left; go right instead."))
    trajectories = run(backend, [0, 1, 2], attempts=3)
    assert len(trajectories) == 6  # every task fails once, then succeeds with the lesson
    first = [t for t in trajectories if t.meta["reflexion"]["attempt"] == 1]
    second = [t for t in trajectories if t.meta["reflexion"]["attempt"] == 2]
    assert not any(t.success for t in first) and all(t.success for t in second)
    assert all(t.meta["reflexion"]["reflection"] == "Step 1 went left; go right instead." for t in first)
    assert all("Attempt 1: Step 1 went left; go right instead." in t.guidance for t in second)
    assert sorted(t.seed for t in second) == [0, 1, 2]
    # One batched reflection call for the three failures, between the two rounds of attempts.
    reflection_calls = [size for size, params in zip(backend.batch_sizes, backend.params) if params.max_new_tokens == 16]
    assert reflection_calls == [3]
    summary = summarize(trajectories)
    assert summary.success_by_attempt == (0.0, 1.0) and summary.success_rate == 1.0
    assert (summary.episodes, summary.attempts) == (3, 6)


def test_an_unreadable_reflection_is_recorded_and_the_task_still_gets_its_attempts():
    backend = RecordingBackend(lesson_follower(Completion(text="", error="timeout")))
    trajectories = run(backend, [0], attempts=2)
    assert [t.meta["reflexion"]["attempt"] for t in trajectories] == [1, 2]
    assert trajectories[0].meta["reflexion"]["reflection_error"] == "backend error: timeout"
    assert trajectories[1].guidance == "" and not trajectories[1].success
    assert summarize(trajectories).success_by_attempt == (0.0, 0.0)


def test_eval_reflexion_writes_every_attempt_and_the_success_after_each(tmp_path, capsys):
    script = tmp_path / "script.json"
    # Attempt 1 walks into the edge twice (max_steps=2) and fails; the lesson; attempt 2 fails too.
    script.write_text(json.dumps(["<action>left</action>", "<action>left</action>", "Go down, not left.",
                                  "<action>up</action>", "<action>up</action>"]))
    out = tmp_path / "rx"
    assert main(["eval", "--env", "frozenlake", "--model", f"scripted:{script}", "--episodes", "1", "--max-steps", "2",
                 "--reflexion", "2", "--out", str(out)]) == 0
    assert "solved by attempt 1 0.0%, 2 0.0% (2 attempts run)" in capsys.readouterr().out
    first, second = read_trajectories(out)
    assert first.meta["reflexion"] == {"attempt": 1, "reflection": "Go down, not left.", "reflection_error": None}
    assert "Go down, not left." in second.guidance and [s.action for s in second.steps] == ["up", "up"]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes"], summary["attempts"], summary["success_by_attempt"]) == (1, 2, [0.0, 0.0])


def test_reflexion_attempts_must_be_positive():
    import pytest
    with pytest.raises(ValueError, match="reflexion_attempts"):
        EvalConfig(env="frozenlake", model="oracle", reflexion_attempts=0)
    assert run_eval  # imported for the CLI path above
