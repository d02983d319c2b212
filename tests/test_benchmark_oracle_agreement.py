"""benchmarks/oracle_agreement.py: how often a policy's moves are among the planner's best."""

import sys
from pathlib import Path

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.types import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import oracle_agreement  # noqa: E402


def run(spec, episodes=6):
    env_kwargs = {"size": 4, "max_steps": 8}
    seeds = make("frozenlake", **env_kwargs).split_seeds("test", episodes)
    config = RolloutConfig(memory=Memory.parse("none"), sampling=SamplingParams(), split="test", model_name=spec)
    engine = RolloutEngine(lambda: make("frozenlake", **env_kwargs), load_model(spec), config)
    return list(engine.iter_run(Task(seed=s) for s in seeds))


def test_the_oracle_always_agrees_with_itself():
    result = oracle_agreement.agreement(run("oracle"), "oracle")
    assert result.successes == result.episodes == 6
    assert result.agreeing == result.steps == result.valid > 0 and result.rate == result.valid_rate == 1.0
    assert 0.25 <= result.chance <= 1.0  # at least one of the four moves is among the best wherever it stood


def test_a_random_policy_agrees_exactly_where_its_move_was_among_the_best():
    trajectories = run("random:3")
    result = oracle_agreement.agreement(trajectories, "random")
    assert 0 < result.steps == sum(result.actions.values())
    # Count by hand: replay each move and ask the planner which moves were best there.
    expected = 0
    for trajectory in trajectories:
        env = make("frozenlake", **{**trajectory.env_kwargs, "max_steps": 100})
        env.reset(trajectory.seed)
        for step in trajectory.steps:
            expected += step.action in oracle_agreement.best_moves(env, ["up", "down", "left", "right"])
            env.step(step.action)
    assert result.agreeing == expected < result.steps


def test_the_command_reads_a_run_folder_and_refuses_an_empty_one(tmp_path, capsys):
    assert oracle_agreement.main([str(tmp_path)]) == 2
    assert "no evaluation log" in capsys.readouterr().err
