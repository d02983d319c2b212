"""benchmarks/assessor_ceiling.py: what a FrozenLake self-assessment can know, judge by judge."""

import sys
from pathlib import Path

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.agent.selfguide import oracle_labels
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.logs import TrajectoryWriter
from hindsight.types import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import assessor_ceiling  # noqa: E402

LAKE = {"size": 4, "max_steps": 8, "view": "local"}


def attempts(spec, episodes=12):
    seeds = make("frozenlake", **LAKE).split_seeds("validation", episodes)
    config = RolloutConfig(memory=Memory.parse("none"), sampling=SamplingParams(), split="validation", model_name=spec)
    return list(RolloutEngine(lambda: make("frozenlake", **LAKE), load_model(spec), config).iter_run(
        Task(seed=s) for s in seeds))


def write(trajectories, path):
    with TrajectoryWriter(path) as writer:
        for trajectory in trajectories:
            writer.write_trajectory(trajectory)
    return str(path)


def test_the_goal_line_and_the_blocked_check():
    observation = "You are at row 4, column 3. The goal is 3 rows up and 1 column left.\nUp: a hole.\nLeft: a hole."
    assert assessor_ceiling.goal_distance(observation) == 4
    assert assessor_ceiling.blocked_toward_goal(observation)
    assert not assessor_ceiling.blocked_toward_goal(observation.replace("Left: a hole", "Left: safe ice"))
    with pytest.raises(ValueError, match="local view"):
        assessor_ceiling.goal_distance("SFFG\nFHFH")


def test_judges_are_counted_against_the_oracle_step_by_step(tmp_path):
    trajectories = attempts("random:4")
    result = assessor_ceiling.ceiling(write(trajectories, tmp_path / "random.jsonl"))
    oracle = [label for t in trajectories for label in oracle_labels(t) if label is not None]
    assert result.steps == len(oracle) == sum(sum(kind.values()) for kind in result.oracle_by_kind.values())
    # A random walk bumps into edges; a bump is always negative to the oracle too.
    assert result.oracle_by_kind["bump"].get("negative", 0) > 0 and not result.oracle_by_kind["bump"].get("positive")
    always = result.judges["always positive"]
    assert always["agreement"] == pytest.approx(oracle.count(oracle[0].POSITIVE) / len(oracle))
    # The distance judge is right on every negative bump or step farther and every positive step closer.
    by_kind = result.oracle_by_kind
    right = (by_kind["bump"].get("negative", 0) + by_kind["farther"].get("negative", 0)
             + by_kind["closer"].get("positive", 0))
    assert result.judges["distance"]["agreement"] == pytest.approx(right / len(oracle))
    assert result.judges["look-ahead"]["said_negative"] >= result.judges["distance"]["said_negative"]
    assert "assessor" not in result.judges


def test_an_assessors_labels_are_read_from_its_evaluation(tmp_path, capsys):
    trajectories = attempts("oracle", episodes=4)
    # An assessor that called every judged step negative: it agrees exactly where the oracle does.
    judged = [t.with_meta(judged=[{"at": at, "label": "negative"} for at in range(1, t.num_steps)])
              for t in trajectories]
    result = assessor_ceiling.ceiling(write(judged, tmp_path / "judged.jsonl"))
    assert result.judges["assessor"]["said_negative"] == 1.0
    assert result.judges["assessor"]["agreement"] == pytest.approx(1 - result.judges["always positive"]["agreement"])
    assert assessor_ceiling.main([str(tmp_path / "judged.jsonl")]) == 0
    assert "the gate needs agreement" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="does not exist"):
        assessor_ceiling.main([str(tmp_path / "missing")])
