"""Oracle agreement: the share of moves among the planner's best, logged by every evaluation."""

import dataclasses

from hindsight.agent.agreement import INVALID, best_moves, oracle_agreement
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.evaluate import summarize, summarize_evaluation
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.methods.metrics import eval_metrics
from hindsight.types import SamplingParams

LAKE = {"size": 4, "max_steps": 8}


def run(spec, episodes=6, env_kwargs=LAKE):
    seeds = make("frozenlake", **env_kwargs).split_seeds("test", episodes)
    config = RolloutConfig(memory=Memory.parse("none"), sampling=SamplingParams(), split="test", model_name=spec)
    engine = RolloutEngine(lambda: make("frozenlake", **env_kwargs), load_model(spec), config)
    return list(engine.iter_run(Task(seed=s) for s in seeds))


def test_the_oracle_agrees_with_itself_and_the_summary_says_so():
    trajectories = run("oracle")
    summary = summarize_evaluation(trajectories)
    assert summary.success_rate == 1.0 and summary.oracle_agreement == 1.0
    assert sum(summary.action_mix.values()) == summary.steps
    row = eval_metrics("eval", summary)
    assert row["eval/oracle_agreement"] == 1.0 and 0.25 <= row["eval/top_action_share"] <= 1.0


def test_a_random_policy_agrees_exactly_where_its_move_was_among_the_best():
    trajectories = run("random:3")
    result = oracle_agreement(trajectories)
    expected = 0
    for trajectory in trajectories:  # by hand: replay every move and ask the planner at each state
        env = make("frozenlake", **{**trajectory.env_kwargs, "max_steps": 100})
        env.reset(trajectory.seed)
        for step in trajectory.steps:
            expected += step.action in best_moves(env, ["up", "down", "left", "right"])
            env.step(step.action)
    assert result.steps == sum(result.actions.values()) == sum(t.num_steps for t in trajectories)
    assert result.agreeing == expected < result.steps
    assert result.diverged == 0


def test_the_chance_level_is_a_random_admissible_moves_agreement_at_the_same_states():
    trajectories = run("random:4")
    result = oracle_agreement(trajectories)
    chance = []
    for trajectory in trajectories:  # by hand: the share of the four moves that are among the best, state by state
        env = make("frozenlake", **{**trajectory.env_kwargs, "max_steps": 100})
        env.reset(trajectory.seed)
        for step in trajectory.steps:
            chance.append(len(best_moves(env, ["up", "down", "left", "right"])) / 4)
            env.step(step.action)
    assert len(chance) == result.steps
    assert abs(result.chance - sum(chance) / len(chance)) < 1e-12
    assert 0.0 < result.chance < 1.0
    summary = summarize_evaluation(trajectories)
    assert summary.oracle_chance == round(result.chance, 6)
    assert eval_metrics("eval", summary)["eval/oracle_chance"] == summary.oracle_chance


def test_an_invalid_step_counts_as_a_disagreeing_move():
    trajectory = run("oracle", episodes=1)[0]
    first = trajectory.steps[0]
    broken = dataclasses.replace(trajectory, steps=(dataclasses.replace(first, valid=False),) + trajectory.steps[1:])
    result = oracle_agreement([broken])
    assert result.actions[INVALID] == 1 and result.agreeing == result.steps - 1
    # Among the valid moves alone, the oracle still agrees with itself every time.
    assert result.valid == result.steps - 1 and result.valid_rate == 1.0
    summary = summarize_evaluation([broken])
    assert summary.oracle_agreement < summary.oracle_agreement_valid == 1.0


def test_the_local_view_rates_the_same_moves_as_the_grid():
    grid = oracle_agreement(run("random:5", episodes=4))
    local = oracle_agreement(run("random:5", episodes=4, env_kwargs={**LAKE, "view": "local"}))
    assert (local.steps, local.agreeing, local.actions) == (grid.steps, grid.agreeing, grid.actions)


def test_nothing_to_rate_gives_no_agreement_and_a_plain_summary():
    assert oracle_agreement([]) is None
    summary = summarize_evaluation([])
    assert summary.oracle_agreement is None and summary.action_mix == {}
    assert "eval/oracle_agreement" not in eval_metrics("eval", summarize([]))
