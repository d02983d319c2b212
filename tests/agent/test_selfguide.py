"""Self-Guide's agent side: the assessment prompt, the tolerant label parser, the oracle's labels."""

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.selfguide import (
    Repeats, SelfAssessor, judge_logged_steps, label_agreement, logged_steps_to_judge, oracle_labels, parse_assessment,
    repeats_after_stuck, with_oracle_assessments,
)
from hindsight.algos.selfguide import Label
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.types import Completion

from .fakes import RecordingBackend


@pytest.mark.parametrize("text, label, error", [
    ("Reason: it moved closer to G.\nLabel: positive", Label.POSITIVE, None),
    ("reason - stuck at the wall\nLABEL = Negative.", Label.NEGATIVE, None),
    ("Reason: nothing changed\n**Label:** neutral", Label.NEUTRAL, None),
    ("Reason: hard to say\nLabel: great", Label.NEUTRAL, "no 'Label"),
    ("The move was fine.", Label.NEUTRAL, "no 'Label"),
    ("Label: positive\nLabel: negative", Label.NEUTRAL, "more than one label"),
])
def test_labels_are_parsed_tolerantly_and_unreadable_ones_are_neutral(text, label, error):
    parsed = parse_assessment(text)
    assert parsed.label == label
    assert (parsed.error is None) if error is None else error in parsed.error


def test_the_assessor_records_label_reward_and_failures():
    assessor = SelfAssessor()
    good = assessor.parse(Completion(text="Reason: closer.\nLabel: positive", token_ids=(1, 2), finish_reason="stop"))
    assert (good.kind, good.label, good.reward, good.parse_error, good.token_ids) == (
        "self-guide", "positive", 0.1, None, (1, 2))
    bad = assessor.parse(Completion(text="", error="timeout"))
    assert (bad.label, bad.reward) == ("neutral", 0.0) and "timeout" in bad.parse_error


def oracle_runs(seeds, respond=None):
    env = lambda: make("frozenlake", size=3, max_steps=6)  # noqa: E731
    backend = load_model("oracle") if respond is None else RecordingBackend(respond)
    return RolloutEngine(env, backend, RolloutConfig()).run(
        [Task(seed=s) for s in seeds])


def test_the_prompt_shows_the_task_the_start_and_every_step():
    trajectory = oracle_runs([3])[0]
    assessor = SelfAssessor()
    first = assessor.prompt(trajectory.instruction, (), trajectory.steps[0].observation)[-1].content
    assert "No step has been taken yet" in first and "(none)" in first
    later = assessor.prompt(trajectory.instruction, trajectory.steps[:2], trajectory.steps[2].observation
                            if trajectory.num_steps > 2 else trajectory.final_observation)[-1].content
    assert trajectory.steps[0].observation.strip() in later and "Judge step 2" in later
    assert f"2. {trajectory.steps[1].action} ->" in later


def test_oracle_labels_follow_the_planner():
    for trajectory in oracle_runs(range(8)):
        labels = oracle_labels(trajectory)
        # The planner's own moves always shorten the plan.
        assert labels == [None] + [Label.POSITIVE] * (trajectory.num_steps - 1)
    # An answer with no action is refused: the next turn's label is negative.
    wrong = oracle_runs([0], respond=lambda request: "<action>jump</action>")[0]
    assert oracle_labels(wrong) == [None] + [Label.NEGATIVE] * (wrong.num_steps - 1)
    # Walking into the edge changes nothing: a wasted move, negative like a step away.
    bumps = 0
    for trajectory in oracle_runs(range(6), respond=lambda request: "<action>up</action>"):
        labels = oracle_labels(trajectory)
        for before, after, label in zip(trajectory.steps, trajectory.steps[1:], labels[1:]):
            if before.state_key == after.state_key:
                bumps += 1
                assert label == Label.NEGATIVE
    assert bumps > 0


def test_oracle_assessments_are_well_formed_and_agree_with_themselves():
    trajectory = with_oracle_assessments(oracle_runs([5])[0], SelfAssessor())
    assert all(parse_assessment(step.assessment.text).error is None for step in trajectory.steps)
    assert trajectory.steps[0].assessment.label == "neutral"
    agreed, compared = label_agreement(trajectory)
    assert compared == trajectory.num_steps - 1 and agreed == compared


def test_repeats_count_stuck_moves_made_again_and_the_notes_beside_them():
    from dataclasses import replace

    # Always "up": once on the top row every move bumps the edge and is made again.
    bumping = [with_oracle_assessments(t, SelfAssessor())
               for t in oracle_runs(range(6), respond=lambda request: "<action>up</action>")]
    stuck = sum(a.state_key == b.state_key for t in bumping for a, b in zip(t.steps, t.steps[1:]))
    counts = sum((repeats_after_stuck(t) for t in bumping), Repeats())
    # The oracle's notes call every bump negative, and the move never changes.
    assert counts == Repeats(stuck=stuck, repeated=stuck, flagged=stuck, flagged_repeated=stuck) and stuck > 0
    # The planner never stays put.
    assert sum((repeats_after_stuck(t) for t in oracle_runs(range(6))), Repeats()) == Repeats()

    # One trajectory edited by hand: stuck at every step, the second move changed, its note made positive.
    trajectory = next(t for t in bumping if t.num_steps >= 3 and len({s.state_key for s in t.steps}) == 1)
    first, second, *rest = trajectory.steps
    second = replace(second, action="left", assessment=replace(second.assessment, label="positive"))
    edited = replace(trajectory, steps=(first, second, *rest))
    # (up, left): stuck, not repeated, not flagged; (left, up): stuck, not repeated, flagged;
    # then (up, up) pairs: repeated and flagged.
    later = len(rest) - 1
    assert repeats_after_stuck(edited) == Repeats(stuck=2 + later, repeated=later, flagged=1 + later,
                                                  flagged_repeated=later)
    # A step without a state key is not judged.
    unknown = replace(trajectory, steps=tuple(replace(s, state_key="") for s in trajectory.steps))
    assert repeats_after_stuck(unknown) == Repeats()


def test_only_the_latest_answers_are_shown_whole():
    from hindsight.agent.selfguide import render_steps

    trajectory = next(t for t in oracle_runs(range(12)) if t.num_steps >= 3)
    text = render_steps(trajectory.steps)
    lines_of = [len(step.feedback.strip().splitlines()) for step in trajectory.steps]
    # Earlier steps take one line each; the last two show their whole answer (the map included).
    assert len(text.splitlines()) == (trajectory.num_steps - 2) + lines_of[-2] + lines_of[-1]
    first_line = trajectory.steps[0].feedback.strip().splitlines()[0].strip()
    assert text.splitlines()[0] == f"1. {trajectory.steps[0].action} -> {first_line}"
    assert trajectory.steps[-1].feedback.strip().splitlines()[-1].strip() in text.splitlines()[-1]
    assert len(render_steps(trajectory.steps, full_last=0).splitlines()) == trajectory.num_steps


def test_logged_steps_are_judged_where_a_rollout_would_judge_them():
    trajectories = oracle_runs([1, 2]) + oracle_runs([0], respond=lambda request: "<action>up</action>")
    assessor = SelfAssessor()
    steps = logged_steps_to_judge(trajectories, assessor)
    # Every turn after the first judges the step before it; the last step is never judged.
    assert len(steps) == sum(t.num_steps - 1 for t in trajectories)
    for step in steps:
        assert step.oracle == oracle_labels(step.trajectory)[step.at]
        history = step.trajectory.steps[: step.at]
        assert step.request.messages == assessor.prompt(step.trajectory.instruction, history,
                                                        step.trajectory.steps[step.at].observation)
    assert {step.oracle for step in steps} == {Label.POSITIVE, Label.NEGATIVE}


@pytest.mark.parametrize("temperature, seed", [(0.0, 7), (1.0, 7), (1.0, None)])
def test_logged_steps_are_judged_greedily_unless_sampled_and_each_sampled_batch_has_its_own_seed(temperature, seed):
    trajectories = oracle_runs([1, 2, 3])
    assessor = SelfAssessor(max_new_tokens=24)
    steps = logged_steps_to_judge(trajectories, assessor)
    backend = RecordingBackend(lambda request: "Reason: closer.\nLabel: positive")
    judged = list(judge_logged_steps(backend, assessor, steps, batch=2, temperature=temperature, seed=seed))
    batches = -(-len(steps) // 2)
    assert batches >= 2 and backend.batch_sizes == [len(answers) for answers in judged]
    assert sum(backend.batch_sizes) == len(steps) and len(judged) == batches
    sampled_with_seed = temperature > 0 and seed is not None
    assert [params.seed for params in backend.params] == ([seed + k for k in range(batches)] if sampled_with_seed
                                                          else [None] * batches)
    assert {(params.temperature, params.max_new_tokens) for params in backend.params} == {(temperature, 24)}
    assert all(answer.label == Label.POSITIVE for answers in judged for answer in answers)
