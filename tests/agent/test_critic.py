"""Critic prompts (with and without planner hints), the tolerant critique parser, model critics in one batch,
the template critic, and the advice-taking refinements built from it."""

import pytest

from hindsight.agent.critic import (
    CriticPrompt, Departure, ModelCritic, NoCritic, TemplateCritic, advice_task, first_departure, parse_critique,
    planner_moves, template_critique,
)
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory, PromptBuilder
from hindsight.agent.replay import planner_distance
from hindsight.envs import make
from hindsight.llm.scripted import OracleBackend
from hindsight.types import Completion, SamplingParams
from tests.agent.fakes import RecordingBackend


def test_well_formed_answer_splits_into_reasoning_and_critique():
    parsed = parse_critique(
        "<reasoning>Turn 2 walked into the edge.</reasoning>\n<critique>You should go down first.</critique>")
    assert parsed.reasoning == "Turn 2 walked into the edge."
    assert parsed.critique == parsed.advice == "You should go down first."
    assert parsed.parse_error is None


@pytest.mark.parametrize("text, critique, error", [
    ("<REASON>x</REASON><Critic> You must stack b1 on b2. </Critic>", "You must stack b1 on b2.", None),
    ("<critique>first</critique> then <critique>You go left.</critique>", "You go left.", None),
    ("<reasoning>long thought</reasoning><critique>You should unstack b3", "You should unstack b3", "not closed"),
    ("You keep bumping into walls; go right.", "You keep bumping into walls; go right.", "no <critique>"),
    ("<reasoning>only thoughts</reasoning> and a tail", "and a tail", "no <critique>"),
    ("<reasoning>cut off before the critique", "", "no <critique> section"),
    ("   ", "", "empty answer"),
])
def test_malformed_answers_are_used_as_far_as_possible(text, critique, error):
    parsed = parse_critique(text)
    assert parsed.critique == critique
    assert (parsed.parse_error is None) if error is None else (error in parsed.parse_error)


@pytest.mark.parametrize("text", ["<critique>none</critique>", "<critique> None. </critique>",
                                  "<critique>N/A</critique>"])
def test_none_means_no_advice(text):
    parsed = parse_critique(text)
    assert parsed.critique and parsed.advice == ""


def test_long_critiques_are_cut():
    assert len(parse_critique("<critique>" + "You go. " * 500 + "</critique>").critique) <= 600


def frozenlake_attempt(moves, seed=None, **env_kwargs):
    """A FrozenLake 3×3 trajectory that plays `moves` (a function of the turn and the env's oracle move)."""
    env_kwargs = {"size": 3, "max_steps": 6, **env_kwargs}
    factory = lambda: make("frozenlake", **env_kwargs)  # noqa: E731
    seed = factory().split_seeds("train", 1)[0] if seed is None else seed
    turn = {"n": 0}

    def respond(request):
        action = moves(turn["n"], request.env.oracle_action())
        turn["n"] += 1
        return action if action.startswith("<") or not action else f"<action>{action}</action>"

    config = RolloutConfig(memory=Memory.parse("none"), concurrency=1)
    engine = RolloutEngine(factory, RecordingBackend(respond), config)
    return engine.run([Task(seed=seed)])[0]


def test_critic_prompt_shows_criteria_task_turns_and_score():
    attempt = frozenlake_attempt(lambda t, oracle: oracle if t == 0 else "jump")
    prompts = PromptBuilder(Memory.parse("none"), system_template="Walk to G. {instruction}")
    system, user = CriticPrompt("Score 1 at the goal.", prompts).build(attempt)
    assert system.role == "system" and "<critique>" in system.content and '"You"' in system.content
    assert "Score 1 at the goal." in user.content
    assert "Walk to G." in user.content  # the task as the policy was given it
    assert "<model_response><action>jump</action></model_response>" in user.content
    assert '<env_feedback>"jump" is not a move' in user.content
    assert f"{attempt.score:.2f} out of 1 (not solved, {attempt.num_steps} turns)" in user.content


def test_model_critic_asks_for_every_critique_in_one_call():
    attempts = [frozenlake_attempt(lambda t, o: "jump", seed=s) for s in (0, 1, 2)]
    answers = iter(["<critique>You A</critique>", "garbage", Completion(text="", error="timeout")] * 2)
    backend = RecordingBackend(lambda request: next(answers))
    critic = ModelCritic(backend, CriticPrompt("criteria", PromptBuilder()))
    groups = critic.critique(attempts, 2, SamplingParams(temperature=1.0, seed=3))
    assert backend.batch_sizes == [6]
    critiques = [[c.parsed.critique for c in group] for group in groups]
    assert critiques == [["You A", "garbage"], ["", "You A"], ["garbage", ""]]
    assert groups[1][0].parsed.parse_error == "backend error: timeout"
    assert groups[0][1].parsed.parse_error.startswith("no <critique>")
    assert groups[0][0].prompt == groups[0][1].prompt != groups[1][0].prompt


def test_no_critic_and_template_critic_give_n_answers_per_attempt():
    attempts = [frozenlake_attempt(lambda t, o: o, seed=0), frozenlake_attempt(lambda t, o: "jump", seed=0)]
    assert [[c.advice for c in g] for g in NoCritic().critique(attempts, 3, SamplingParams())] == [[""] * 3] * 2
    groups = TemplateCritic().critique(attempts, 2, SamplingParams())
    assert [len(g) for g in groups] == [2, 2]
    assert groups[0][0].parsed.critique == "none" and groups[0][0].advice == ""
    assert "You should answer" not in groups[1][0].advice and "turn 1" in groups[1][0].advice


def test_template_critique_points_at_the_first_turn_that_made_no_progress():
    def moves(turn, oracle):
        if turn == 1:  # the opposite of the planner's move: away from the goal, or into the edge
            return {"up": "down", "down": "up", "left": "right", "right": "left"}[oracle]
        return oracle

    # Every start is at least two moves from the goal: with two moves and a detour, the attempt fails.
    attempt = frozenlake_attempt(moves, holes="blocking", p_hole=0.0, max_steps=2)
    assert not attempt.success
    replay = make("frozenlake", size=3, holes="blocking", p_hole=0.0)
    replay.reset(attempt.seed)
    replay.step(attempt.steps[0].action)
    expected = replay.oracle_action()
    text = template_critique(attempt)
    parsed = parse_critique(text)
    assert parsed.parse_error is None
    assert parsed.critique.startswith(f'At turn 2 you chose "{attempt.steps[1].action}"')
    assert f'You should do "{expected}" there instead.' in parsed.critique
    assert "did not bring the goal any closer" in parsed.reasoning
    assert template_critique(attempt) == text  # deterministic


def test_template_critique_of_unreadable_and_refused_actions():
    unreadable = frozenlake_attempt(lambda t, o: "<think>I am not sure</think>", seed=0)
    critique = parse_critique(template_critique(unreadable)).critique
    assert critique.startswith("At turn 1 your answer had no readable action. You should answer with <action>")
    # BlocksWorld starts with an empty hand, so putting a block down is refused.
    factory = lambda: make("blocksworld", num_blocks=3, max_steps=2)  # noqa: E731
    backend = RecordingBackend(lambda r: "<action>putdown b1</action>")
    engine = RolloutEngine(factory, backend, RolloutConfig(concurrency=1))
    attempt = engine.run([Task(seed=factory().split_seeds("train", 1)[0])])[0]
    critique = parse_critique(template_critique(attempt)).critique
    assert critique.startswith('At turn 1 you chose "putdown b1", which was refused (You cannot putdown b1: ')
    assert critique.endswith(f'You should do "{_first_oracle_move(factory, attempt.seed)}" there instead.')


def _first_oracle_move(factory, seed):
    env = factory()
    env.reset(seed)
    return env.oracle_action()


def test_planner_distance_is_the_oracle_plan_length():
    env = make("frozenlake", size=3, max_steps=50)
    env.reset(0)
    before = planner_distance(env)
    steps = 0
    while not env.done:
        env.step(env.oracle_action())
        steps += 1
    assert before == steps and planner_distance(env) == 0


DETOUR_LAKE = {"size": 3, "holes": "blocking", "p_hole": 0.0}


def detour_attempt(seed=0):
    """A FrozenLake 3×3 attempt that takes the planner's move, then its opposite, then the planner's,
    with exactly the turns the planner needs: the detour makes it fail, and the advised move would not."""
    def moves(turn, oracle):
        return {"up": "down", "down": "up", "left": "right", "right": "left"}[oracle] if turn == 1 else oracle

    env = make("frozenlake", **DETOUR_LAKE)
    env.reset(seed)
    distance = int(planner_distance(env))
    assert distance >= 2  # every start is at least two moves from the goal
    return frozenlake_attempt(moves, seed=seed, **DETOUR_LAKE, max_steps=distance)


def test_first_departure_is_the_turn_the_template_critique_names():
    attempt = detour_attempt()
    departure = first_departure(attempt)
    assert departure.turn == 1 and departure.problem == "did not bring the goal any closer"
    assert f'You should do "{departure.move}" there' in template_critique(attempt)
    out_of_turns = frozenlake_attempt(lambda t, o: o, seed=attempt.seed, **DETOUR_LAKE, max_steps=1)
    assert not out_of_turns.success  # one move is not enough for any start
    assert first_departure(out_of_turns) == Departure(1, first_departure(out_of_turns).move, None)


def test_planner_hints_show_the_planner_move_before_every_turn():
    attempt = detour_attempt()
    prompts = PromptBuilder(Memory.parse("none"))
    plain = CriticPrompt("criteria", prompts).build(attempt)[1].content
    hinted = CriticPrompt("criteria", prompts, planner_hints=True).build(attempt)[1].content
    assert "<planner_move>" not in plain
    moves = planner_moves(attempt)
    assert len(moves) == attempt.num_steps and moves[0] == attempt.steps[0].action  # turn 1 followed the planner
    assert moves[1] != attempt.steps[1].action  # the detour
    for index, move in enumerate(moves):
        assert f"<env_feedback>{attempt.steps[index].feedback.splitlines()[0].strip()}</env_feedback>\n" \
               f"<planner_move>{move}</planner_move>" in hinted


def test_advice_task_replays_to_the_departure_and_takes_the_advised_move():
    attempt = detour_attempt()
    assert not attempt.success
    task = advice_task(attempt)
    departure = first_departure(attempt)
    assert task.guidance == parse_critique(template_critique(attempt)).advice and task.guidance.startswith("At turn 2")
    assert [turn.raw for turn in task.prefix[:-1]] == [attempt.steps[0].raw]
    assert task.prefix[-1].raw.endswith(f"<action>{departure.move}</action>")
    assert task.meta["advice_of"] == attempt.id
    env_kwargs = attempt.env_kwargs
    engine = RolloutEngine(lambda: make("frozenlake", **env_kwargs), OracleBackend(), RolloutConfig(concurrency=1))
    refinement = engine.run([task])[0]
    assert refinement.success and refinement.guidance == task.guidance
    assert [s.action for s in refinement.steps[:2]] == [attempt.steps[0].action, departure.move]
    solved = frozenlake_attempt(lambda t, o: o, seed=attempt.seed)
    assert advice_task(solved) is None  # solved: no advice
    with pytest.raises(ValueError, match="no departure"):
        first_departure(solved)
