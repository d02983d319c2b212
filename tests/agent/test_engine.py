import pytest

from hindsight.agent.engine import (
    RolloutConfig, RolloutEngine, Task, branch_task, replay_prefix,
)
from hindsight.agent.prompts import Memory
from hindsight.agent.replay import ReplayDivergence
from hindsight.types import Assessment, ChatMessage, Completion

from .fakes import LineEnv, RecordingBackend

RIGHT = "<analysis>go on</analysis><action>right</action>"


def engine(respond, concurrency=32, **kw):
    backend = RecordingBackend(respond)
    return RolloutEngine(lambda: LineEnv(**kw), backend, RolloutConfig(concurrency=concurrency)), backend


def test_one_batched_call_per_turn_for_all_active_episodes():
    eng, backend = engine(lambda r: RIGHT)
    trajectories = eng.run([Task(seed=s) for s in range(6)])
    # Even seeds need 3 moves, odd seeds 2: three turns, the last with only the 3 even seeds.
    assert backend.batch_sizes == [6, 6, 3]
    assert sorted(t.seed for t in trajectories) == list(range(6))
    assert all(t.success and t.terminated and not t.truncated for t in trajectories)
    assert {t.num_steps for t in trajectories if t.seed % 2} == {2}


def test_the_engine_closes_every_environment_it_makes():
    made = []

    def make_env():
        made.append(LineEnv())
        return made[-1]

    eng = RolloutEngine(make_env, RecordingBackend(lambda r: RIGHT), RolloutConfig(concurrency=2))
    assert len(eng.run([Task(seed=s) for s in range(5)])) == 5
    assert len(made) == 5 and [env.closed for env in made] == [1] * 5


def test_environments_still_running_are_closed_when_the_caller_stops_early():
    made = []

    def make_env():
        made.append(LineEnv())
        return made[-1]

    eng = RolloutEngine(make_env, RecordingBackend(lambda r: RIGHT), RolloutConfig(concurrency=4))
    run = eng.iter_run([Task(seed=s) for s in (1, 0, 0, 0)])  # seed 1 finishes a turn before the others
    first = next(run)
    assert first.seed == 1 and [env.closed for env in made] == [1, 0, 0, 0]
    run.close()
    assert [env.closed for env in made] == [1, 1, 1, 1]


def test_finished_slots_are_refilled_from_the_queue():
    eng, backend = engine(lambda r: RIGHT, concurrency=2)
    trajectories = eng.run([Task(seed=s) for s in (1, 0, 1, 0)])
    assert len(trajectories) == 4
    assert max(backend.batch_sizes) == 2
    # seed 1 finishes after two turns, and a queued task joins the third turn.
    assert backend.batch_sizes[:3] == [2, 2, 2]
    assert sum(backend.batch_sizes) == 2 + 3 + 2 + 3


def test_run_returns_task_order_while_iter_run_yields_as_episodes_finish():
    tasks = [Task(seed=s, sample=j) for s in (0, 1, 2, 3) for j in range(2)]  # odd seeds finish first
    finished = [(t.seed, t.id) for t in engine(lambda r: RIGHT, concurrency=3)[0].iter_run(tasks)]
    ordered = [(t.seed, t.id) for t in engine(lambda r: RIGHT, concurrency=3)[0].run(tasks)]
    assert ordered == [(task.seed, f"line:{task.seed}:{task.sample}") for task in tasks]
    assert finished != ordered and sorted(finished) == sorted(ordered)


def test_steps_record_state_before_action_and_feedback_after():
    eng, _ = engine(lambda r: RIGHT)
    (trajectory,) = eng.run([Task(seed=0)])
    keys = [s.state_key for s in trajectory.steps]
    assert keys == ["pos=0", "pos=1", "pos=2"]
    assert trajectory.final_state_key == "pos=3"
    assert trajectory.steps[0].feedback == trajectory.steps[1].observation
    assert [s.reward for s in trajectory.steps] == [0.0, 0.0, 1.0]
    assert trajectory.score == 1.0 and trajectory.success_turn == 3


def test_unparseable_and_failed_responses_are_invalid_steps():
    answers = iter(["I think right", Completion(text="", error="timeout"), RIGHT, RIGHT, RIGHT])
    eng, _ = engine(lambda r: next(answers))
    (trajectory,) = eng.run([Task(seed=0)])
    first, second = trajectory.steps[:2]
    assert first.action is None and not first.valid and "no <action>" in first.parse_error
    assert first.raw == "I think right"
    assert second.parse_error == "backend error: timeout"
    assert "no valid <action>" in second.observation  # the model is told what went wrong
    assert trajectory.success and trajectory.num_steps == 5


def test_invalid_action_counts_against_the_budget():
    eng, _ = engine(lambda r: "<action>jump</action>", max_steps=4)
    (trajectory,) = eng.run([Task(seed=0)])
    assert trajectory.num_steps == 4 and trajectory.truncated and not trajectory.terminated
    assert all(s.action == "jump" and not s.valid and s.parse_error is None for s in trajectory.steps)


def test_stop_action_ends_the_episode():
    answers = iter([RIGHT, "<action>STOP</action>"])
    eng, _ = engine(lambda r: next(answers))
    (trajectory,) = eng.run([Task(seed=0)])
    assert trajectory.num_steps == 1 and not trajectory.success
    assert trajectory.meta["stopped_by_agent"] is True


def test_prompts_follow_the_memory_mode():
    seen = []
    backend = RecordingBackend(lambda r: seen.append(r.messages) or RIGHT)
    RolloutEngine(lambda: LineEnv(), backend, RolloutConfig(memory=Memory.parse("none"))).run([Task(seed=0)])
    assert [len(m) for m in seen] == [2, 2, 2]
    seen.clear()
    RolloutEngine(lambda: LineEnv(), backend, RolloutConfig(memory=Memory.parse("full"))).run([Task(seed=0)])
    assert [len(m) for m in seen] == [2, 4, 6]


def test_sampling_seed_advances_per_call():
    eng, backend = engine(lambda r: RIGHT)
    eng.run([Task(seed=0)])
    assert [p.seed for p in backend.params] == [0, 1, 2]


def test_branch_replays_prefix_substitutes_and_continues():
    answers = iter(["<action>left</action>", RIGHT, "<action>left</action>", RIGHT, RIGHT, RIGHT])
    eng, _ = engine(lambda r: next(answers))
    (original,) = eng.run([Task(seed=0)])
    assert original.num_steps == 6

    continuation, backend = engine(lambda r: RIGHT)
    (branched,) = continuation.run([branch_task(original, at=2, action="right")])
    assert [s.raw for s in branched.steps[:2]] == [s.raw for s in original.steps[:2]]
    assert branched.steps[2].action == "right"
    assert branched.success and branched.num_steps == 4
    assert branched.meta["branch_of"] == original.id and branched.meta["branch_at"] == 2
    assert backend.batch_sizes == [1]  # only the turn after the substitution asks the policy


def test_replay_detects_a_diverging_environment():
    eng, _ = engine(lambda r: RIGHT)
    (original,) = eng.run([Task(seed=0)])
    prefix = replay_prefix(original, 2)
    # Odd seeds start elsewhere, so replaying seed 0's prefix on seed 1 must be refused.
    with pytest.raises(ReplayDivergence):
        engine(lambda r: RIGHT)[0].run([Task(seed=1, prefix=prefix)])


def test_backend_returning_wrong_count_is_an_error():
    class Short(RecordingBackend):
        def generate(self, requests, params):
            return super().generate(requests, params)[:-1]

    with pytest.raises(RuntimeError, match="returned"):
        RolloutEngine(lambda: LineEnv(), Short(lambda r: RIGHT), RolloutConfig()).run([Task(seed=0), Task(seed=1)])


def test_task_guidance_reaches_every_prompt_and_the_trajectory():
    systems = []

    def respond(request):
        systems.append(request.messages[0].content)
        return RIGHT

    eng, _ = engine(respond)
    advised, plain = sorted(eng.run([Task(seed=0, guidance="You go right."), Task(seed=2, sample=1)]),
                            key=lambda t: t.seed)
    assert advised.guidance == "You go right." and plain.guidance == ""
    assert sum(text.endswith("You go right.") for text in systems) == advised.num_steps
    assert len(systems) == advised.num_steps + plain.num_steps


class CountingWriter:
    """A pre-action writer that labels every turn and remembers what it was asked."""

    kind = "test"
    max_new_tokens = 7
    shown_as = "Check: {assessment}"

    def __init__(self):
        self.histories = []

    def prompt(self, instruction, history, observation):
        self.histories.append(len(history))
        return (ChatMessage("user", f"ASSESS {observation}"),)

    def parse(self, completion):
        return Assessment(kind=self.kind, text=completion.text, label="neutral")


def assessing_engine(concurrency=32):
    def respond(request):
        prompt = request.messages[-1].content
        return f"looks fine ({prompt.split()[-1]})" if prompt.startswith("ASSESS") else RIGHT

    backend = RecordingBackend(respond)
    writer = CountingWriter()
    config = RolloutConfig(concurrency=concurrency, pre_action=writer, seed=10)
    return RolloutEngine(lambda: LineEnv(), backend, config), backend, writer


def test_a_turn_batches_every_assessment_then_every_action():
    eng, backend, writer = assessing_engine()
    trajectories = eng.run([Task(seed=s) for s in range(4)])
    # Even seeds take 3 turns, odd ones 2: each turn is one assessment call, then one action call.
    assert backend.batch_sizes == [4, 4, 4, 4, 2, 2]
    assert [p.max_new_tokens for p in backend.params] == [7, 96, 7, 96, 7, 96]
    assert [p.seed for p in backend.params] == list(range(10, 16))
    assert writer.histories[:4] == [0, 0, 0, 0] and writer.histories[4:8] == [1, 1, 1, 1]
    even = trajectories[0]
    assert [s.assessment.text for s in even.steps] == [f"looks fine ({s.observation.split()[-1]})" for s in even.steps]
    # The action prompt shows the turn's assessment under the observation, and training rebuilds it.
    rebuilt = eng.prompts.build(even.instruction, even.steps[:1], even.steps[1].observation,
                                assessment=even.steps[1].assessment)
    assert rebuilt[-1].content == f"{even.steps[1].observation}\n\nCheck: {even.steps[1].assessment.text}"


def test_a_branch_replays_the_assessments_of_its_prefix():
    eng, _, _ = assessing_engine()
    original = eng.run([Task(seed=0)])[0]
    branch = eng.run([branch_task(original, 1, "left")])[0]
    assert branch.steps[0].assessment == original.steps[0].assessment
    assert branch.steps[1].action == "left" and branch.steps[1].assessment is None
    assert all(step.assessment is not None for step in branch.steps[2:])


def test_a_turn_limit_samples_actions_at_a_replayed_state_in_one_call():
    eng, backend = engine(lambda r: "<action>left</action>")
    walked = engine(lambda r: RIGHT)[0].run([Task(seed=0)])[0]
    prefix = replay_prefix(walked, 2)
    # Five one-turn continuations of the same two-step prefix: one batched call, five actions.
    samples = eng.run([Task(seed=0, sample=j, prefix=prefix, max_turns=1) for j in range(5)])
    assert backend.batch_sizes == [5]
    for sample in samples:
        assert [s.action for s in sample.steps] == ["right", "right", "left"]
        assert sample.meta["turn_limit"] is True and not (sample.terminated or sample.truncated)
        assert sample.steps[2].state_key == walked.steps[2].state_key
    # An episode that ends within its limit is not marked.
    (done,) = engine(lambda r: RIGHT)[0].run([Task(seed=1, max_turns=5)])
    assert done.success and "turn_limit" not in done.meta
    with pytest.raises(ValueError, match="max_turns"):
        Task(seed=0, max_turns=0)


def test_best_of_n_takes_the_first_best_candidate_and_records_every_rated_one():
    from itertools import count

    from hindsight.agent.prm import BestOfN
    from hindsight.agent.prm import PRMScore

    class SaysRightIsBest:
        """Rates `right` 0.9; cannot read its own answer about `left` and falls back to 0.5."""

        name = "stub"

        def score(self, queries):
            return [PRMScore(0.9) if q.action == "right" else PRMScore(0.5, error="no score") for q in queries]

    answers = count()
    replies = ("<action>left</action>", "no action here", RIGHT)  # each turn's 3 candidates, in order

    backend = RecordingBackend(lambda request: replies[next(answers) % 3])
    config = RolloutConfig(concurrency=4, best_of=BestOfN(3, SaysRightIsBest()))
    (trajectory,) = RolloutEngine(lambda: LineEnv(), backend, config).run([Task(seed=0)])
    assert trajectory.success and trajectory.num_steps == 3 and backend.batch_sizes == [3, 3, 3]
    for step in trajectory.steps:
        assert step.action == "right"
        left, unreadable, right = step.candidates
        assert (left.action, left.score, left.prm_error) == ("left", 0.5, "no score")
        assert (unreadable.action, unreadable.score, unreadable.prm_error) == (None, None, None)
        assert (right.action, right.score, right.prm_error) == ("right", 0.9, None)
