"""The ECHO loop end to end on a tiny random model: both tracks, switches, logging, resume, echo-compare."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hindsight.cli.main import main
from hindsight.configs import ConfigError, from_mapping
from hindsight.methods.echo import ECHOConfig, train_echo
from hindsight.train.checkpoint import list_checkpoints
from hindsight.types import Trajectory

from .test_training_loops import comparable, read_metrics

ECHO_FIELDS = (
    "group", "s_o", "s_r", "eta", "gain", "critic_reward", "critic_advantage", "policy_advantage", "critique",
)


def text_score(record: dict) -> float:
    """A score in {0, .25, …, 1} decided by the first response's text."""
    return (sum(map(ord, record["steps"][0]["raw"])) % 5) / 4 if record["steps"] else 0.0


@pytest.fixture(autouse=True)
def varied_returns(monkeypatch):
    """A random tiny model never writes a valid action, so every return would be equal and no
    update would carry a gradient. Returns that depend on the sampled text give both tracks a
    signal; everything downstream of the return is the real code."""
    monkeypatch.setattr(ECHOConfig, "trajectory_return",
                        lambda self, trajectory: text_score({"steps": [{"raw": s.raw} for s in trajectory.steps]}))


def echo_config(model_dir: Path, **overrides) -> ECHOConfig:
    values = dict(
        model=f"hf:{model_dir}", env="blocksworld", env_kwargs={"num_blocks": 3, "max_steps": 2}, memory="none",
        updates=2, tasks_per_update=2, group_size=3, max_new_tokens=4, critic_max_new_tokens=6, eval_every=0,
        final_eval_episodes=2, checkpoint_every=1, keep_checkpoints=10, lr=1e-2, critic_lr=1e-2, micro_batch_size=4,
    )
    values.update(overrides)
    return ECHOConfig(**values)


def records(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectories" / f"{name}.jsonl").read_text().splitlines()[1:]]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(list_checkpoints(run)[-1].path / "model" / "weights.pt")


def adapter_moved(weights: dict[str, torch.Tensor], role: str) -> bool:
    # peft starts every lora_B at zero: a non-zero one was trained.
    return any(f".{role}." in k and "lora_B" in k and v.abs().sum() > 0 for k, v in weights.items())


def test_echo_trains_policy_and_critic_and_logs_every_refinement(tiny_model_dir, tmp_path):
    config = echo_config(tiny_model_dir, eval_with_critic=True)
    run = train_echo(config, tmp_path / "echo")

    rows = read_metrics(run)
    for key in ("rollout/initial_score_mean", "rollout/refined_score_mean", "echo/improvement_rate",
                "echo/near_ceiling_improvements", "critic/reward_mean", "critic/critique_tokens_mean",
                "critic/template_match_rate",
                "timing/policy_rollout_s", "timing/critic_rollout_s", "timing/refine_s", "timing/update_s",
                "policy/loss", "critic/loss", "rollout/env_steps", "tide/auv", "tide/loop_ratio", "tide/invalid_rate",
                "throughput/redundancy", "throughput/prefill_redundancy"):
        assert key in rows[0], key
    assert "final_test_refined/success_rate" in rows[-1] and "final_test/success_rate" in rows[-1]

    initial = {(r["update"], r["echo"]["group"]): r for r in records(run, "initial")}
    refined = records(run, "train")
    assert len(initial) == 2 * 2 and len(refined) == 2 * 2 * 3
    for record in refined:
        echo = record["echo"]
        assert all(field in echo for field in ECHO_FIELDS)
        attempt = initial[(record["update"], echo["group"])]
        assert echo["s_o"] == attempt["echo"]["s_o"] == text_score(attempt)
        assert echo["s_r"] == text_score(record)
        assert echo["critic_reward"] == pytest.approx(math.log((1.1 - echo["s_o"]) / (1.1 - echo["s_r"])), abs=1e-6)
        assert record.get("guidance", "") in ("", echo["critique"])
        assert record["seed"] == initial[(record["update"], echo["group"])]["seed"]  # the same task instance
    for group in {(r["update"], r["echo"]["group"]) for r in refined}:
        members = [r["echo"] for r in refined if (r["update"], r["echo"]["group"]) == group]
        assert len(members) == 3 and [m["sample"] for m in members] == [0, 1, 2]
        assert abs(sum(m["policy_advantage"] for m in members)) < 1e-5
        assert abs(sum(m["critic_advantage"] for m in members)) < 1e-5
        assert len({m["s_o"] for m in members}) == 1

    weights = final_weights(run)
    assert adapter_moved(weights, "policy") and adapter_moved(weights, "critic")
    refined_eval = records(run, "eval-test-final-refined")
    assert len(refined_eval) == 2 and all(r["echo"]["critic"] == "adapter" for r in refined_eval)
    assert json.loads((run / "summary.json").read_text())["refined"]["episodes"] == 2


def test_frozen_critic_with_linear_gain(tiny_model_dir, tmp_path):
    run = train_echo(echo_config(tiny_model_dir, freeze_critic=True, gain="linear", negative_weight=0.5, updates=1,
                                 final_eval_split=""), tmp_path / "frozen")
    weights = final_weights(run)
    assert adapter_moved(weights, "policy") and not adapter_moved(weights, "critic")
    assert any(".critic." in k for k in weights)  # the frozen adapter is still part of the checkpoint
    assert "critic/loss" not in read_metrics(run)[0]
    for record in records(run, "train"):
        echo = record["echo"]
        gain = echo["s_r"] - echo["s_o"]
        assert echo["gain"] == "linear" and echo["critic_reward"] == pytest.approx(gain if gain >= 0 else 0.5 * gain)


def test_no_critic_regenerates_without_advice(tiny_model_dir, tmp_path):
    run = train_echo(echo_config(tiny_model_dir, no_critic=True, updates=1, final_eval_split=""), tmp_path / "regen")
    assert not any(".critic." in k for k in final_weights(run))
    train = records(run, "train")
    assert len(train) == 2 * 3
    assert all("guidance" not in r and r["echo"]["critic"] == "none" and r["echo"]["critique"] == "" for r in train)
    assert read_metrics(run)[0]["critic/critique_tokens_mean"] == 0


def test_scripted_and_template_critics(tiny_model_dir, tmp_path):
    script = tmp_path / "critiques.txt"
    answers = ["<reasoning>r</reasoning><critique>You should unstack first.</critique>", "no tags at all",
               "<critique>none</critique>"] * 2
    script.write_text("\n---\n".join(answers))
    run = train_echo(echo_config(tiny_model_dir, critic=f"scripted:{script}", updates=1, final_eval_split=""),
                     tmp_path / "scripted")
    train = records(run, "train")
    assert [r["echo"]["critique"] for r in train] == ["You should unstack first.", "no tags at all", "none"] * 2
    assert [r.get("guidance", "") for r in train] == ["You should unstack first.", "no tags at all", ""] * 2
    assert [r["echo"]["critique_parse_error"] is None for r in train] == [True, False, True] * 2
    assert not any(".critic." in k for k in final_weights(run))
    assert read_metrics(run)[-1]["critic/template_match_rate"] == 0.0

    run = train_echo(echo_config(tiny_model_dir, critic="template", updates=1, final_eval_split=""),
                     tmp_path / "template")
    train = records(run, "train")
    assert all(r["echo"]["critic"] == "template" and r["echo"]["critique"].startswith("At turn ") for r in train)
    assert all(r["guidance"] == r["echo"]["critique"] for r in train)
    assert read_metrics(run)[-1]["critic/template_match_rate"] == 1.0


def test_gradient_checkpointing_changes_memory_not_the_update(tiny_model_dir, tmp_path):
    plain = echo_config(tiny_model_dir, updates=1, final_eval_split="", micro_batch_size=4)
    runs = [train_echo(plain, tmp_path / "plain"),
            train_echo(replace(plain, gradient_checkpointing=True, micro_batch_size=2), tmp_path / "checkpointed")]
    a, b = (final_weights(run) for run in runs)
    assert adapter_moved(a, "policy") and adapter_moved(a, "critic")
    assert a.keys() == b.keys()
    # lora_B starts at zero, so after one update it is the update itself (and lora_A got no
    # gradient yet). Recomputed activations and other micro-batches reassociate float sums:
    # the two updates may differ by float noise relative to their size, not by a real amount.
    for role in ("policy", "critic"):
        keys = [k for k in a if f".{role}." in k and "lora_B" in k]
        step_a, step_b = torch.cat([a[k].flatten() for k in keys]), torch.cat([b[k].flatten() for k in keys])
        assert (step_a - step_b).norm() <= 1e-3 * step_a.norm()
    assert all(torch.equal(a[k], b[k]) for k in a if "lora_A" in k)


def test_kl_reference_init_anchors_each_role_to_its_start(tiny_model_dir, tmp_path):
    warm = train_echo(echo_config(tiny_model_dir, updates=1, final_eval_split=""), tmp_path / "warm")
    assert adapter_moved(final_weights(warm), "policy") and adapter_moved(final_weights(warm), "critic")
    start = dict(init_from=str(warm), critic_init_from=str(warm), updates=1, final_eval_split="", kl_coef=0.1)
    anchored = train_echo(echo_config(tiny_model_dir, kl_reference="init", **start), tmp_path / "init")
    to_base = train_echo(echo_config(tiny_model_dir, **start), tmp_path / "base")
    # One epoch: the KL is measured at the starting weights, which are the init reference itself.
    (row,) = read_metrics(anchored)
    assert row["policy/kl"] == pytest.approx(0.0, abs=1e-6) and row["critic/kl"] == pytest.approx(0.0, abs=1e-6)
    (row,) = read_metrics(to_base)
    assert row["policy/kl"] > 1e-4 and row["critic/kl"] > 1e-4
    # The frozen references are not part of what a checkpoint saves.
    assert not [name for name in final_weights(anchored) if "reference" in name]


def test_resume_repeats_the_interrupted_update_exactly(tiny_model_dir, tmp_path):
    config = echo_config(tiny_model_dir, updates=2, epochs=2, kl_coef=0.05, final_eval_episodes=1)
    straight = train_echo(config, tmp_path / "straight")
    # As if the process had died during update 2: its checkpoint never reached the disk. (A copy
    # of the finished run: a second run would write the same files.)
    interrupted = tmp_path / "interrupted"
    shutil.copytree(straight, interrupted)
    shutil.rmtree(list_checkpoints(interrupted)[-1].path)
    train_echo(None, interrupted, resume=True)
    assert comparable(read_metrics(interrupted)) == comparable(read_metrics(straight))
    a, b = final_weights(straight), final_weights(interrupted)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(records(interrupted, "train")) == 2 * 2 * 3 and len(records(interrupted, "initial")) == 2 * 2


def test_echo_compare_reports_both_conditions(tiny_model_dir, tmp_path, capsys):
    run = train_echo(echo_config(tiny_model_dir, updates=1, final_eval_split=""), tmp_path / "echo")
    out = tmp_path / "compare"
    assert main(["echo-compare", str(run), "--episodes", "2", "--samples", "2", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tasks"] == 2 and result["samples"] == 2 and result["critic"] == "adapter"
    assert result["relative_gain"] == pytest.approx(result["critic_gain"] - result["regeneration_gain"])
    guided, plain = records(out, "critic-guided"), records(out, "regeneration")
    assert len(guided) == len(plain) == 4 and all("guidance" not in r for r in plain)
    mean = sum(r["echo"]["s_r"] - r["echo"]["s_o"] for r in plain) / len(plain)
    assert result["regeneration_gain"] == pytest.approx(mean)

    # The template critic in place of the run's adapter: the same attempts and regenerations. The
    # run's critic started from a warm start (its weights are in the checkpoint; the path is not read).
    config_file = run / "config.yaml"
    config_file.write_text(config_file.read_text() + "critic_init_from: runs/critic-warm-start\n")
    template_out = tmp_path / "compare-template"
    assert main(["echo-compare", str(run), "--episodes", "2", "--samples", "2", "--critic", "template",
                 "--out", str(template_out), "--json"]) == 0
    templated = json.loads(capsys.readouterr().out)
    assert templated["critic"] == "template" and templated["regeneration_gain"] == result["regeneration_gain"]
    assert all(r["echo"]["critic"] == "template" for r in records(template_out, "critic-guided"))

    # Only the failed first attempts get second attempts.
    unsolved_out = tmp_path / "compare-unsolved"
    assert main(["echo-compare", str(run), "--episodes", "3", "--samples", "2", "--unsolved-only",
                 "--out", str(unsolved_out), "--json"]) == 0
    unsolved = json.loads(capsys.readouterr().out)
    failed = {r["seed"] for r in records(unsolved_out, "initial") if not r["success"]}
    assert unsolved["unsolved_only"] and unsolved["first_attempts"] == 3 and unsolved["tasks"] == len(failed) > 0
    assert {r["seed"] for r in records(unsolved_out, "critic-guided")} == failed

    assert main(["echo-compare", str(tmp_path / "missing")]) == 2
    assert main(["echo-compare", str(run), "--step", "7"]) == 2
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.yaml").write_text("kind: grpo\n")
    assert main(["echo-compare", str(tmp_path / "other")]) == 2
    assert "not an ECHO run" in capsys.readouterr().err


@pytest.mark.parametrize("values, message", [
    ({"gain": "log"}, "gain must be 'sa' or 'linear'"),
    ({"eta": 0}, "eta"),
    ({"negative_weight": -1}, "negative_weight"),
    ({"critic": "oracle"}, "critic cannot be 'oracle'"),
    ({"critic": "random"}, "cannot write critiques"),
    ({"critic": "adapter:runs/x"}, "start it from a source with critic_init_from"),
    ({"critic": "nonsense:x"}, "unknown model spec"),
    ({"critic": "template", "critic_init_from": "runs/x"}, "critic_init_from needs critic: adapter"),
    ({"full_finetune": True}, "needs LoRA"),
    ({"group_size": 1}, "group_size"),
    ({"critic": "template", "critic_hints": True}, "critic_hints are shown to a model critic"),
    ({"no_critic": True, "critic_hints": True}, "critic_hints are shown to a model critic"),
    ({"env": "scienceworld", "critic_hints": True}, "oracle plans from any state"),
])
def test_bad_configs_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        from_mapping(ECHOConfig, values)


def test_the_critic_and_its_warm_start_read_attempts_the_same_way():
    from hindsight.agent.prompts import PromptBuilder
    from hindsight.methods.critic_sft import CriticSFTConfig

    for hints in (False, True):
        echo = from_mapping(ECHOConfig, {"critic_hints": hints}).critic_prompt("c", PromptBuilder())
        warm = from_mapping(CriticSFTConfig, {"critic_hints": hints}).critic_prompt("c", PromptBuilder())
        assert echo == warm and echo.planner_hints is hints
    with pytest.raises(ConfigError, match="oracle plans"):
        from_mapping(CriticSFTConfig, {"env": "scienceworld", "critic_hints": True})


def test_scores_are_logged_as_the_environment_reported_them(monkeypatch):
    from hindsight.methods.basics import PolicyGradientBasics
    from hindsight.methods.echo import EchoScores

    monkeypatch.setattr(ECHOConfig, "trajectory_return", PolicyGradientBasics.trajectory_return)

    def trajectory(score, sample):
        return Trajectory(env="blocksworld", seed=0, instruction="", steps=(), final_observation="",
                          final_state_key="", success=score == 1, score=score, terminated=True, truncated=False,
                          meta={"echo": {"group": "g", "sample": sample}})

    config = echo_config(Path("unused"))
    refinements = [[trajectory(2 / 3, 0), trajectory(1 / 3, 1)]]
    scores = EchoScores.compute(config, [trajectory(1 / 3, 0)], refinements)
    first, second = (t.meta["echo"] for t in scores.annotate(config, refinements, "adapter"))
    assert first["s_o"] == 1 / 3 and first["s_r"] == 2 / 3 and second["critic_reward"] == 0
    assert first["critic_reward"] == pytest.approx(math.log((1 - 1 / 3 + 0.1) / (1 - 2 / 3 + 0.1)))
    assert first["policy_advantage"] > 0 > second["policy_advantage"]


@pytest.fixture
def match(monkeypatch):
    """benchmarks/echo_critic_match.py, imported as tests/test_benchmark_tables.py imports the scripts."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import echo_critic_match

    return echo_critic_match


def test_critic_match_scores_written_critiques_against_the_template(match):
    from hindsight.agent.critic import parse_critique, template_critique
    from tests.agent.test_critic import frozenlake_attempt

    env = {"holes": "blocking", "p_hole": 0.0, "max_steps": 2}
    detour = frozenlake_attempt(lambda turn, oracle: {"up": "down", "down": "up", "left": "right",
                                                      "right": "left"}[oracle] if turn == 1 else oracle, seed=0, **env)
    solved = frozenlake_attempt(lambda turn, oracle: oracle, seed=0, **env)
    assert not detour.success and solved.success
    right = parse_critique(template_critique(detour)).critique
    result = match.score("run", 3, [detour, detour, solved], [right, "You should try again.", "none"],
                         [False, True, False])
    assert (result.attempts, result.unsolved) == (3, 2)
    assert result.match_rate == pytest.approx(2 / 3) and result.unsolved_match_rate == pytest.approx(1 / 2)
    assert result.malformed_rate == pytest.approx(1 / 3) and result.row().startswith("| run | 3 | 3 | 0.667 | 0.500 (2)")
    assert match.score("run", 0, [solved], ["none"], [False]).unsolved_match_rate is None


def test_critic_match_measures_the_start_and_a_checkpoint(match, tiny_model_dir, tmp_path, capsys):
    run = train_echo(echo_config(tiny_model_dir, updates=1, final_eval_split="", critic_max_new_tokens=4),
                     tmp_path / "echo")
    attempts = run / "trajectories" / "initial.jsonl"
    assert match.main([str(attempts), str(run), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    unsolved = sum(not r["success"] for r in records(run, "initial"))
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["attempts"] == 2 and r["unsolved"] == unsolved and 0 <= r["match_rate"] <= 1 for r in rows)

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit):
        match.main([str(empty), str(run)])
    with pytest.raises(SystemExit):
        match.main([str(tmp_path / "missing.jsonl"), str(run)])
    assert match.main([str(attempts), str(run), "--steps", "7"]) == 2
    assert "no checkpoint of update 7" in capsys.readouterr().err
    template = tmp_path / "template"
    template.mkdir()
    (template / "config.yaml").write_text((run / "config.yaml").read_text() + "critic: template\n")
    assert match.main([str(attempts), str(template)]) == 2
    assert "no model critic" in capsys.readouterr().err
