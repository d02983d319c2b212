"""The registries the loops and the CLI dispatch through: advantage estimators and loss aggregations from the
configs, training methods in `hindsight train`, model providers in `load_model`."""

import json

import pytest
import torch

from hindsight.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageOptions, Advantages, GroupBatch, StepParts, step_parts
from hindsight.algos.grpo import LOSS_AGGREGATIONS, Aggregation, aggregation_units, group_advantages, sequence_weights
from hindsight.configs import ConfigError, from_mapping
from hindsight.methods.grpo import GRPOConfig, train_grpo
from hindsight.types import Step, Trajectory
from tests.methods.test_training_loops import grpo_config, read_metrics


def trajectory(states, score, sample):
    steps = tuple(Step(index=i, observation="", state_key=key, raw="<action>up</action>", action="up", analysis=None,
                       valid=True, reward=0.0, score=0.0, feedback="") for i, key in enumerate(states))
    return Trajectory(env="frozenlake", seed=0, instruction="", steps=steps, final_observation="", final_state_key="",
                      success=score == 1, score=score, terminated=True, truncated=False, id=f"t{sample}")


def test_the_configs_choose_estimators_and_aggregations_by_name():
    config = from_mapping(GRPOConfig, {})
    assert (config.advantage_estimator, config.aggregation, config.advantage_std) == ("grpo", "trajectory_mean",
                                                                                      "population")
    assert config.update_settings().aggregation == "trajectory_mean"
    # Names configs already use stay valid, the per-turn form's old name included.
    for name in ("trajectory_mean", "turn_mean", "token_mean", "sequence_mean"):
        assert from_mapping(GRPOConfig, {"aggregation": name}).aggregation == name
    assert from_mapping(GRPOConfig, {"advantage_estimator": "gigpo", "advantage_std": "sample"}).gamma == 0.95
    with pytest.raises(ConfigError, match="unknown advantage estimator 'gipgo'; known: grpo, gigpo"):
        from_mapping(GRPOConfig, {"advantage_estimator": "gipgo"})
    with pytest.raises(ConfigError, match="unknown loss aggregation 'mean'"):
        from_mapping(GRPOConfig, {"aggregation": "mean"})
    with pytest.raises(ConfigError, match="advantage_std must be one of population, sample"):
        from_mapping(GRPOConfig, {"advantage_std": "unbiased"})


def test_loss_aggregations_by_name_match_the_enum():
    assert LOSS_AGGREGATIONS.names() == ("trajectory_mean", "turn_mean", "sequence_mean", "token_mean")
    tokens, ids = [3, 0, 5, 2], ["a", "a", "b", "a"]
    for member in Aggregation:
        units = member.units(tokens, ids)
        assert aggregation_units(member.value, tokens, ids) == units
        assert torch.equal(sequence_weights(tokens, ids, member.value, units), sequence_weights(tokens, ids, member,
                                                                                                 units))
    assert torch.equal(sequence_weights(tokens, ids, "sequence_mean", 3.0), sequence_weights(tokens, ids, "turn_mean",
                                                                                              3.0))


def test_the_configs_grpo_estimator_gives_the_old_direct_advantages():
    config = from_mapping(GRPOConfig, {})
    returns = [1.0, 0.0, 0.97, 0.97, 0.5, 0.25]
    trajectories = [trajectory(("a", "b"), r, i) for i, r in enumerate(returns)]
    out = config.advantages(trajectories, returns, [0, 0, 1, 1, 2, 2])
    direct = group_advantages(torch.tensor(returns).view(3, 2), normalize_std=True).flatten()
    assert out.steps is None
    assert torch.allclose(out.trajectory.float(), direct, atol=1e-6)
    assert out.trajectory[2].item() == out.trajectory[3].item() == 0.0  # equal returns: exactly zero


def test_the_configs_gigpo_puts_the_return_on_the_last_step():
    config = from_mapping(GRPOConfig, {"advantage_estimator": "gigpo", "gamma": 0.5, "step_advantage_weight": 2.0})
    trajectories = [trajectory(("a", "b", "c"), 1.0, 0), trajectory(("a", "c"), 0.0, 1)]
    out = config.advantages(trajectories, [1.0, 0.0], [0, 0])
    batch = GroupBatch(torch.tensor([1.0, 0.0], dtype=torch.float64), (0, 0), ((0.0, 0.0, 1.0), (0.0, 0.0)),
                       (("a", "b", "c"), ("a", "c")))
    expected = ADVANTAGE_ESTIMATORS.get("gigpo")(batch, AdvantageOptions(gamma=0.5, step_weight=2.0))
    assert torch.equal(out.trajectory, expected.trajectory)
    assert all(torch.equal(a, b) for a, b in zip(out.steps, expected.steps))
    assert out.at(0, (0,)) != out.at(0, (1,))  # the step advantage varies by turn


def test_grpo_trains_with_gigpo_and_logs_step_advantages(tiny_model_dir, tmp_path):
    run = train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="",
                                 advantage_estimator="gigpo"), tmp_path / "gigpo")
    train = [json.loads(line) for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]
    assert len(train) == 4
    for record in train:
        assert len(record["grpo"]["step_advantages"]) == len(record["steps"])
    row = read_metrics(run)[-1]
    assert "policy/sequences" in row  # the KL term keeps every sequence in the batch
    # The step-level parts, logged as the shares step_parts counts on the logged advantages.
    parts = StepParts()
    for record in train:
        parts += step_parts(Advantages(torch.tensor([record["grpo"]["advantage"]], dtype=torch.float64),
                                       (torch.tensor(record["grpo"]["step_advantages"], dtype=torch.float64),)))
    assert row["advantage/step_part_share"] == pytest.approx(parts.with_part / parts.steps, abs=1e-12)
    assert row["advantage/step_part_opposing"] == pytest.approx(parts.opposing / max(1, parts.with_part), abs=1e-12)
    assert row["advantage/step_part_first_turn"] == pytest.approx(parts.first_turn / max(1, parts.with_part), abs=1e-12)
    plain = train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split=""), tmp_path / "grpo")
    assert not any(key.startswith("advantage/") for key in read_metrics(plain)[-1])  # GRPO has no step parts


def test_training_methods_are_registered_and_dispatched(capsys):
    from hindsight.cli.main import main
    from hindsight.methods.critic_sft import CriticSFTConfig, train_critic_sft
    from hindsight.methods.registry import load_training_methods

    methods = load_training_methods()
    assert set(methods.names()) == {"sft", "grpo", "echo", "critic-sft", "prm-sft", "cso", "eto"}
    entry = methods.get("critic-sft")
    assert (entry.config, entry.train) == (CriticSFTConfig, train_critic_sft) and entry.help
    assert main(["train", "grpo", "--show-config"]) == 0
    assert "advantage_estimator (default 'grpo')" in capsys.readouterr().out
    with pytest.raises(SystemExit) as help_exit:
        main(["train", "--help"])
    assert help_exit.value.code == 0
    listing = capsys.readouterr().out
    assert all(f"  {name}" in listing for name in methods.names())


@pytest.mark.parametrize("argv,message", [
    (["train", "grop", "--out", "x"], "unknown training method 'grop'; known: "),
    (["train", "grpo", "--out", "x", "--set", "advantage_estimator=gipgo"], "unknown advantage estimator 'gipgo'"),
    (["train", "grpo", "--out", "x", "--set", "aggregation=token-sum"], "unknown loss aggregation 'token-sum'"),
])
def test_unknown_names_are_one_line_and_exit_code_2(capsys, tmp_path, monkeypatch, argv, message):
    from hindsight.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hindsight: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_model_providers_dispatch_by_prefix():
    from hindsight.llm import MODEL_PROVIDERS, SPEC_FORMS, load_model
    from hindsight.llm.scripted import OracleBackend, RandomBackend

    assert MODEL_PROVIDERS.names() == ("smollm2", "hf", "openai", "vllm", "oracle", "random", "scripted", "ray")
    assert [form for form, _ in SPEC_FORMS] == ["smollm2", "hf:PATH", "openai:MODEL", "vllm:MODEL", "oracle", "random",
                                                "scripted:FILE", "BASE+ADAPTER", "ray:SPEC"]
    assert sorted(name for name, p in MODEL_PROVIDERS.items() if p.adapters) == ["hf", "smollm2"]
    assert isinstance(load_model("oracle"), OracleBackend)
    assert isinstance(load_model("random:3"), RandomBackend)
