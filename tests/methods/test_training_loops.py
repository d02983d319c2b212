"""The SFT and GRPO loops end to end on a tiny random model, and exact resume after SIGKILL."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hindsight import logs
from hindsight.agent.critic import first_departure, parse_critique, template_critique
from hindsight.configs import ConfigError, load_config
from hindsight.diagnostics.live import live_tide
from hindsight.logs import RunDir
from hindsight.methods.cso import CSOConfig
from hindsight.methods.grpo import GRPOConfig, train_grpo
from hindsight.methods.sft import SFTConfig, train_sft
from hindsight.train.checkpoint import list_checkpoints
from tests.agent.test_critic import DETOUR_LAKE, detour_attempt, frozenlake_attempt


def read_metrics(run: Path) -> list[dict]:
    """Every row, and no broken line: a test's own run never leaves one."""
    def broken(issue):
        raise AssertionError(issue)
    return logs.read_metrics(run, on_issue=broken)


def comparable(rows: list[dict]) -> list[dict]:
    """Metric rows without wall-clock quantities."""
    return [{k: v for k, v in row.items() if not k.startswith(("timing/", "throughput/")) and k != "time"} for row in rows]


def grpo_config(model_dir: Path, **overrides) -> GRPOConfig:
    values = dict(
        model=f"hf:{model_dir}", env_kwargs={"size": 3, "max_steps": 2}, updates=4, tasks_per_update=2, group_size=2,
        max_new_tokens=4, eval_every=2, eval_episodes=1, final_eval_episodes=2, checkpoint_every=2,
        keep_checkpoints=10, lr=1e-2, epochs=2, kl_coef=0.05, micro_batch_size=4,
    )
    values.update(overrides)
    return GRPOConfig(**values)


def test_sft_clones_oracle_turns(tiny_model_dir, tmp_path):
    config = SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, demo_episodes=6, epochs=4, batch_size=4,
                       micro_batch_size=2, lr=2e-2, warmup_steps=0, eval_episodes=2, max_new_tokens=6,
                       full_finetune=True, checkpoint_every=1, keep_checkpoints=0)
    run = train_sft(config, tmp_path / "sft")
    rows = read_metrics(run)
    losses = [row["sft/loss"] for row in rows if "sft/loss" in row]
    assert len(losses) >= 4 and losses[-1] < losses[0] - 3  # it fits its demonstrations (start: ln(vocab) ≈ 10.8)
    # Every turn repeats the system prompt; a micro-batch pushes it once, never fewer than the distinct tokens.
    assert all(row["throughput/redundancy"] >= 1.0 for row in rows if "sft/loss" in row)
    assert [c.step for c in list_checkpoints(run)] == list(range(1, len(losses) + 1))  # keep_checkpoints=0: all
    demos = (run / "trajectories" / "demos.jsonl").read_text().splitlines()[1:]
    assert all(json.loads(line)["success"] for line in demos)
    assert json.loads((run / "summary.json").read_text())["episodes"] == 2
    # What collecting cost is logged with the data: every attempt run, kept or not.
    attempts = [json.loads(line) for line in demos]
    assert rows[0]["rollout/episodes"] == 6 == len(attempts)  # the oracle solves every task
    assert rows[0]["rollout/env_steps"] == sum(a["num_steps"] for a in attempts)


def test_sft_advice_demos_are_the_oracle_taking_the_template_critics_advice(tiny_model_dir, tmp_path):
    attempts = [detour_attempt(seed) for seed in range(3)]
    env_kwargs = attempts[0].env_kwargs
    solved = frozenlake_attempt(lambda t, oracle: oracle, seed=0, **env_kwargs)
    run_dir = RunDir(tmp_path / "attempts")
    with run_dir.trajectory_writer("eval", env="frozenlake", split="train") as writer:
        for trajectory in (*attempts, solved):
            writer.write_trajectory(trajectory)
    assert all(not a.success for a in attempts) and solved.success
    # The config names only some options; the logs record all of them, defaults included.
    assert set(env_kwargs) > {*DETOUR_LAKE, "max_steps"}
    config = SFTConfig(model=f"hf:{tiny_model_dir}", env="frozenlake",
                       env_kwargs={**DETOUR_LAKE, "max_steps": env_kwargs["max_steps"]},
                       demos=str(run_dir.path), advice_demos=str(run_dir.path), epochs=1, batch_size=4,
                       micro_batch_size=4, eval_episodes=0, max_new_tokens=6, full_finetune=True)
    run = train_sft(config, tmp_path / "sft")
    demos = list(logs.read_trajectories(run / "trajectories" / "demos.jsonl"))
    advised = [d for d in demos if d.guidance]
    assert len(advised) == len(attempts) and len(demos) == len(attempts) + 1  # and the solved one, as it is
    for attempt, demo in zip(attempts, advised):
        assert demo.success and demo.seed == attempt.seed
        assert demo.guidance == parse_critique(template_critique(attempt)).advice
        assert demo.steps[0].action == attempt.steps[0].action  # the move that made progress is kept
        assert demo.steps[1].action == first_departure(attempt).move != attempt.steps[1].action
        assert all(step.raw == f"<action>{step.action}</action>" for step in demo.steps)  # action_only
    rows = read_metrics(run)
    assert rows[0]["data/advice_demonstrations"] == len(attempts) == rows[0]["data/demonstrations"] - 1
    # The oracle's advised refinements ran in the environment; the demos read from a log did not.
    assert rows[0]["rollout/episodes"] == len(attempts)
    assert rows[0]["rollout/env_steps"] == sum(d.num_steps for d in advised)


def test_sft_refuses_advice_demos_it_cannot_use(tmp_path, capsys):
    from hindsight.cli.main import main

    with pytest.raises(ValueError, match="assessment_only"):
        SFTConfig(advice_demos=".", assessment_only=True, self_guide=True, assessment_demos=".")
    code = main(["train", "sft", "--set", f"advice_demos={tmp_path / 'missing'}", "--set", "demo_episodes=1",
                 "--out", str(tmp_path / "run")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_a_training_input_with_a_broken_line_is_refused_with_its_place(tmp_path, capsys):
    from hindsight.cli.main import main
    from hindsight.methods.supervised import training_trajectories

    run_dir = RunDir(tmp_path / "attempts")
    with run_dir.trajectory_writer("eval", env="frozenlake", split="train") as writer:
        for seed in range(3):
            writer.write_trajectory(frozenlake_attempt(lambda t, oracle: oracle, seed=seed, size=3))
    log = run_dir.path / "trajectories" / "eval.jsonl"
    assert len(training_trajectories(log, "demos")) == 3
    lines = log.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]  # the second trajectory, cut short as by a crash
    log.write_text("\n".join([*lines, "{not json"]) + "\n")
    with pytest.raises(ConfigError) as info:
        training_trajectories(run_dir.path, "assessment_demos")
    assert str(info.value).startswith(f"assessment_demos: {log}:3: invalid JSON: the line ends inside its JSON value")
    assert "(and 1 more); fix or remove the broken lines" in str(info.value)
    with pytest.raises(ConfigError, match=r"^attempts: '\S*absent' does not exist \(a run directory or \.jsonl file\)$"):
        training_trajectories(tmp_path / "absent", "attempts")
    # From the command line: one line that names the option, the file and the line, before any model loads.
    code = main(["train", "sft", "--set", f"demos={log}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"demos: {log}:3: " in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_sft_resume_from_a_mid_run_checkpoint_matches_an_uninterrupted_run(tiny_model_dir, tmp_path):
    import shutil

    config = SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, demo_episodes=8, epochs=3, batch_size=4,
                       micro_batch_size=2, lr=2e-2, warmup_steps=1, eval_episodes=2, max_new_tokens=6,
                       full_finetune=True, checkpoint_every=4)
    straight = train_sft(config, tmp_path / "straight")
    steps = [c.step for c in list_checkpoints(straight)]
    assert len(steps) == 2 and steps[-1] == read_metrics(straight)[-2]["step"]

    # A copy that "died" after its next-to-last checkpoint: the last checkpoint, the
    # summary and the eval are gone, the metric rows written after the checkpoint stay.
    crashed = tmp_path / "crashed"
    shutil.copytree(straight, crashed)
    shutil.rmtree(list_checkpoints(crashed)[-1].path)
    (crashed / "summary.json").unlink()
    with (crashed / "metrics.jsonl").open("a") as f:
        f.write('{"step": 99, "sft/loss": 1.0')  # a row cut short by the kill

    train_sft(None, crashed, resume=True)
    assert comparable(read_metrics(crashed)) == comparable(read_metrics(straight))
    a = torch.load(list_checkpoints(straight)[-1].path / "model" / "weights.pt")
    b = torch.load(list_checkpoints(crashed)[-1].path / "model" / "weights.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_grpo_loop_logs_checkpoints_and_evaluates(tiny_model_dir, tmp_path):
    run = train_grpo(grpo_config(tiny_model_dir, updates=2, checkpoint_every=1, eval_every=1), tmp_path / "grpo")
    rows = read_metrics(run)
    assert [row["step"] for row in rows] == [0, 1, 2, 2]
    for key in ("rollout/success_rate", "policy/loss", "policy/kl", "policy/clip_frac", "timing/rollout_s",
                "timing/update_s", "eval/success_rate", "rollout/env_steps", "throughput/redundancy",
                "throughput/prefill_redundancy"):
        assert key in rows[1], key
    # Every turn repeats the system prompt: pushed once per micro-batch, it is still pushed more than once.
    assert rows[1]["throughput/redundancy"] > 1.0
    assert rows[1]["throughput/prefill_redundancy"] >= 1.0
    assert "final_test/success_rate" in rows[-1]
    train = [json.loads(line) for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]
    assert len(train) == 2 * 2 * 2
    assert {t["update"] for t in train} == {1, 2}
    for update in (1, 2):
        group = [t["grpo"]["advantage"] for t in train if t["update"] == update][:2]
        assert abs(sum(group)) < 1e-5  # advantages are centred within a group
        # The live TIDE numbers are those of the update's own logged rollouts.
        rollouts = [logs.trajectory_from_record(t) for t in train if t["update"] == update]
        assert rows[update]["tide/auv"] == pytest.approx(live_tide(rollouts).auv)
        assert rows[update]["tide/loop_ratio"] == pytest.approx(live_tide(rollouts).loop_ratio)
        assert rows[update]["tide/invalid_rate"] == pytest.approx(live_tide(rollouts).invalid_rate)
    assert [c.step for c in list_checkpoints(run)] == [1, 2]


def test_train_seed_start_gives_a_run_its_own_training_tasks(tiny_model_dir, tmp_path):
    from hindsight.envs import make

    config = grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="", train_seed_start=5000)
    run = train_grpo(config, tmp_path / "grpo")
    train = [json.loads(line) for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]
    env = make("frozenlake", size=3, max_steps=2)
    assert sorted({t["seed"] for t in train}) == sorted(env.split_seeds("train", 2, start=5000))
    assert min(t["seed"] for t in train) >= 5000
    # The default keeps the tasks every earlier run trained on.
    assert grpo_config(tiny_model_dir).train_seeds(env) == env.split_seeds("train", 4 * 2)
    with pytest.raises(ValueError, match="train_seed_start"):
        grpo_config(tiny_model_dir, train_seed_start=-1)


def test_shared_tokens_false_pushes_every_token_in_training_and_sampling(tiny_model_dir, tmp_path):
    redundancy = {}
    for shared in (True, False):
        run = train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="", epochs=1,
                                     kl_coef=0.0, shared_tokens=shared), tmp_path / f"shared-{shared}")
        row = next(row for row in read_metrics(run) if "throughput/prefill_redundancy" in row)
        redundancy[shared] = (row.get("throughput/redundancy"), row["throughput/prefill_redundancy"])
    # The same rollouts (same seeds, same weights) cost more tokens with the switch off.
    assert redundancy[False][1] > redundancy[True][1] >= 1.0
    if redundancy[True][0] is not None:  # an update with something to train on
        assert redundancy[False][0] > redundancy[True][0] >= 1.0


def test_grpo_resume_after_sigkill_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, monkeypatch, capsys):
    config = grpo_config(tiny_model_dir)
    straight = train_grpo(config, tmp_path / "straight")

    crashed = tmp_path / "crashed"
    script = (
        "import sys; from hindsight.methods.grpo import GRPOConfig, train_grpo; import json;"
        "train_grpo(GRPOConfig(**json.loads(sys.argv[1])), sys.argv[2])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    process = subprocess.Popen([sys.executable, "-c", script, json.dumps(config.__dict__), str(crashed)], env=env)
    deadline = time.time() + 300
    while not (crashed / "checkpoints" / "step-000002").exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert [c.step for c in list_checkpoints(crashed)][-1] < config.updates

    # Each checkpoint names its machine; a resume where the kernels differ says so and goes on.
    saved = torch.load(list_checkpoints(crashed)[-1].path / "state.pt", weights_only=False)["state"]["machine"]
    assert saved["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    from hindsight.logs.machine import Machine
    from hindsight.methods import lifecycle

    monkeypatch.setattr(lifecycle, "machine", lambda: Machine(**{**saved, "torch_cpu_capability": "ELSEWHERE"}))
    train_grpo(None, crashed, resume=True)
    note = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hindsight: note:")]
    assert note == [f"hindsight: note: the checkpoint was written with other kernels (torch_cpu_capability "
                    f"{saved['torch_cpu_capability']} -> ELSEWHERE): the run goes on, but its updates will not "
                    "repeat an uninterrupted run's bit for bit" + ("; to compute as the checkpoint did, set "
                    "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 "
                    "(docs/training.md)" if saved["torch_cpu_capability"] == "AVX2" else "")]
    assert comparable(read_metrics(crashed)) == comparable(read_metrics(straight))
    a = torch.load(list_checkpoints(straight)[-1].path / "model" / "weights.pt")
    b = torch.load(list_checkpoints(crashed)[-1].path / "model" / "weights.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    train_lines = (crashed / "trajectories" / "train.jsonl").read_text().splitlines()[1:]
    assert len(train_lines) == config.updates * config.tasks_per_update * config.group_size


def test_resume_in_the_final_evaluation_keeps_its_finished_tasks(tiny_model_dir, tmp_path):
    run = train_grpo(grpo_config(tiny_model_dir, updates=1, checkpoint_every=1, eval_every=0, final_eval_episodes=3),
                     tmp_path / "grpo")
    final = run / "trajectories" / "eval-test-final.jsonl"
    whole = final.read_text().splitlines()
    rows = (run / "metrics.jsonl").read_text().splitlines()
    # As if killed during the final evaluation: one task written, one cut short, no final row.
    final.write_text(whole[0] + "\n" + whole[1] + "\n" + whole[2][:40])
    (run / "metrics.jsonl").write_text("".join(row + "\n" for row in rows[:-1]))
    (run / "summary.json").unlink()

    train_grpo(None, run, resume=True)
    assert final.read_text().splitlines()[1] == whole[1]  # kept, not played again
    assert sorted(json.loads(line)["seed"] for line in final.read_text().splitlines()[1:]) == sorted(
        json.loads(line)["seed"] for line in whole[1:])
    assert comparable(read_metrics(run)) == comparable([json.loads(row) for row in rows])
    assert json.loads((run / "summary.json").read_text())["episodes"] == 3


def test_a_resume_removes_the_evaluations_of_steps_after_its_checkpoint(tmp_path):
    from hindsight.methods.lifecycle import drop_evaluations_after

    names = ["eval-validation-000002.jsonl", "eval-validation-000004.jsonl", "eval-validation-000004-refined.jsonl",
             "eval-test-final.jsonl", "train.jsonl"]
    for name in names:
        (tmp_path / name).write_text("")
    drop_evaluations_after(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in names if "000004" not in n)


def test_config_files_reject_unknown_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("updates: 3\ngroup_sise: 4\n")
    with pytest.raises(ConfigError, match="did you mean 'group_size'"):
        load_config(GRPOConfig, path)
    path.write_text("updates: three\n")
    with pytest.raises(ConfigError, match="integer"):
        load_config(GRPOConfig, path)
    assert load_config(GRPOConfig, None, ["updates=3", "lr=1e-4"]).lr == 1e-4
    # An empty value of a text key is empty text (no final evaluation here), not a type error.
    assert load_config(GRPOConfig, None, ["final_eval_split="]).final_eval_split == ""
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(GRPOConfig, None, ["updates="])


def test_resume_without_a_checkpoint_starts_over_and_drops_what_was_logged(tmp_path):
    from hindsight.logs import RunDir
    from hindsight.methods.basics import Schedule
    from hindsight.methods.lifecycle import TrainingRun

    directory = RunDir(tmp_path / "run")
    directory.write_config({"kind": "grpo", "updates": 3})
    (directory.path / "metrics.jsonl").write_text('{"step": 0, "eval/success_rate": 0.5}\n{"step": 1, "policy/loss": 0.1}\n')
    directory.trajectories_dir.mkdir(parents=True, exist_ok=True)
    header = '{"kind": "header", "format": "x"}\n'
    (directory.trajectories_dir / "train.jsonl").write_text(header + '{"id": "a", "update": 1}\n')
    run = TrainingRun("grpo", GRPOConfig, None, directory.path, resume=True)
    run.begin(None, {}, {}, Schedule(checkpoint_every=1, keep_checkpoints=0), logs=("train",))
    assert (run.config.updates, run.start, run.env_steps) == (3, 0, 0)
    assert (directory.path / "metrics.jsonl").read_text() == ""
    assert (directory.trajectories_dir / "train.jsonl").read_text() == header
    run.finish(updates=3)
    summary = json.loads((directory.path / "summary.json").read_text())
    assert summary.pop("machine")["cpu"]  # every summary names its machine (tests/logs/test_machine.py)
    assert summary == {"kind": "grpo", "updates": 3}


def test_the_lifecycle_refuses_a_loop_before_begin(tmp_path):
    from hindsight.methods.lifecycle import TrainingRun

    run = TrainingRun("grpo", GRPOConfig, GRPOConfig(), tmp_path / "run")
    with pytest.raises(RuntimeError, match="begin"):
        next(run.steps(3, "grpo"))


def test_drop_zero_variance_leaves_equal_return_groups_out_of_the_batch(tiny_model_dir, tmp_path):
    # The tiny random model never succeeds: every group has equal returns. With a KL term
    # those sequences would still be trained on; DAPO's filter removes them from the batch.
    kept = read_metrics(train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split=""),
                                   tmp_path / "kept"))
    dropped = read_metrics(train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="",
                                                  drop_zero_variance=True), tmp_path / "dropped"))
    assert kept[-1]["rollout/zero_variance_groups"] == dropped[-1]["rollout/zero_variance_groups"] == 1.0
    assert kept[-1]["policy/sequences"] > 0 and "policy/sequences" not in dropped[-1]


def test_keep_top_spread_trains_only_that_share_of_the_groups(tiny_model_dir, tmp_path):
    common = dict(updates=1, eval_every=0, final_eval_split="", tasks_per_update=4)
    every = read_metrics(train_grpo(grpo_config(tiny_model_dir, **common), tmp_path / "every"))
    half = read_metrics(train_grpo(grpo_config(tiny_model_dir, keep_top_spread=0.5, **common), tmp_path / "half"))
    # Equal spreads everywhere (the tiny model never succeeds): the first half of the groups train.
    trained = [t for t in logs.read_trajectories(tmp_path / "half" / "trajectories" / "train.jsonl")]
    first_half = {t.seed for t in trained[: len(trained) // 2]}
    assert 0 < half[-1]["policy/sequences"] < every[-1]["policy/sequences"]
    assert half[-1]["policy/sequences"] == sum(t.num_steps for t in trained if t.seed in first_half)
    with pytest.raises(ValueError, match="keep_top_spread"):
        GRPOConfig(keep_top_spread=0.0)


def test_the_entropy_bonus_trains_groups_whose_returns_tie(tiny_model_dir, tmp_path):
    common = dict(updates=1, eval_every=0, final_eval_split="", tasks_per_update=2, kl_coef=0.0)
    plain = read_metrics(train_grpo(grpo_config(tiny_model_dir, **common), tmp_path / "plain"))
    bonus = read_metrics(train_grpo(grpo_config(tiny_model_dir, entropy_coef=0.01, **common), tmp_path / "bonus"))
    # The tiny model never succeeds, so every group ties: nothing trains without the bonus.
    assert "policy/sequences" not in plain[-1] and "policy/entropy" not in plain[-1]
    assert bonus[-1]["policy/sequences"] > 0 and bonus[-1]["policy/entropy"] > 0
    with pytest.raises(ValueError, match="entropy_coef"):
        GRPOConfig(entropy_coef=-0.1)


def test_kl_reference_init_anchors_grpo_to_its_sft_start(tiny_lora_model_dir, tmp_path):
    sft = train_sft(SFTConfig(model=f"hf:{tiny_lora_model_dir}", env_kwargs={"size": 3}, demo_episodes=4, epochs=1,
                              batch_size=4, micro_batch_size=4, lr=5e-2, warmup_steps=0, eval_episodes=0),
                    tmp_path / "sft")
    common = dict(init_from=str(sft), updates=1, epochs=1, eval_every=0, final_eval_split="")
    anchored = read_metrics(train_grpo(grpo_config(tiny_lora_model_dir, kl_reference="init", **common),
                                       tmp_path / "init"))
    based = read_metrics(train_grpo(grpo_config(tiny_lora_model_dir, **common), tmp_path / "base"))
    # Before its first step the policy is the SFT policy: no divergence from an SFT anchor,
    # a clear one from the base model.
    assert anchored[-1]["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    assert based[-1]["policy/kl"] > 1e-3
    saved = torch.load(list_checkpoints(tmp_path / "init")[-1].path / "model" / "weights.pt")
    assert not any(".reference." in name for name in saved)  # rebuilt from init_from, never saved
    with pytest.raises(ValueError, match="needs init_from"):
        grpo_config(tiny_lora_model_dir, kl_reference="init")


def test_dynamic_sampling_fills_the_batch_with_informative_groups():
    from hindsight.methods.grpo import refill_informative_groups
    from hindsight.types import Trajectory

    def episode(seed, sample, score):
        return Trajectory(env="line", seed=seed, instruction="", steps=(), final_observation="", final_state_key="",
                          success=score == 1, score=score, terminated=True, truncated=False, id=f"line:{seed}:{sample}",
                          meta={"steps": 2})

    scores = {10: (0, 0), 11: (1, 1), 20: (0, 1), 21: (1, 1), 30: (1, 0), 31: (0, 1)}

    class Engine:
        def __init__(self):
            self.calls = []

        def run(self, tasks):
            self.calls.append([(t.seed, t.sample) for t in tasks])
            return [episode(t.seed, t.sample, scores[t.seed][t.sample % 2]) for t in tasks]

    first = [episode(s, j, scores[s][j]) for s in (10, 11) for j in range(2)]
    engine = Engine()
    batch, _, rounds = refill_informative_groups(engine, first, iter([[20, 21], [30, 31], [40, 41]]), 2,
                                                 lambda t: t.score)
    # Round 1 finds one informative group (20), round 2 two more (30, 31): the batch takes
    # the first two; round 3 is never drawn. Each round samples under new sample numbers.
    assert rounds == 2 and engine.calls == [[(20, 2), (20, 3), (21, 2), (21, 3)], [(30, 4), (30, 5), (31, 4), (31, 5)]]
    assert [t.id for t in batch] == ["line:20:2", "line:20:3", "line:30:4", "line:30:5"]
    # When the rounds run out, uninformative groups keep the batch at its size.
    engine = Engine()
    batch, _, rounds = refill_informative_groups(engine, first, iter([[21, 11]]), 2, lambda t: t.score)
    assert rounds == 1 and [t.seed for t in batch] == [10, 10, 11, 11]


def test_dynamic_sampling_counts_every_sampled_episode(tiny_model_dir, tmp_path):
    # The tiny model never succeeds: no group is informative, so every refill round is drawn.
    plain = read_metrics(train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split=""),
                                    tmp_path / "plain"))[-1]
    refilled = read_metrics(train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="",
                                                   dynamic_sampling=True, max_refills=2), tmp_path / "dyn"))[-1]
    assert refilled["rollout/refills"] == 2
    assert refilled["rollout/env_steps"] > plain["rollout/env_steps"]
    assert refilled["policy/sequences"] == plain["policy/sequences"]  # the batch keeps its size


def test_grpo_runs_whole_on_a_bfloat16_base(tiny_model_dir, tmp_path):
    # Rollouts, update, checkpoint and final evaluation all run on the bfloat16 base with float32 adapters.
    run = train_grpo(grpo_config(tiny_model_dir, updates=1, checkpoint_every=1, eval_every=0, dtype="bfloat16"),
                     tmp_path / "grpo")
    rows = read_metrics(run)
    assert math.isfinite(rows[0]["policy/loss"]) and "final_test/success_rate" in rows[-1]
    weights = torch.load(list_checkpoints(run)[-1].path / "model" / "weights.pt")
    assert weights and {t.dtype for t in weights.values()} == {torch.float32}


@pytest.mark.parametrize("config_cls, key", [(SFTConfig, "eval_split"), (GRPOConfig, "final_eval_split"),
                                              (CSOConfig, "final_eval_split")])
def test_an_unknown_split_is_refused_when_the_config_is_read(config_cls, key):
    with pytest.raises(ValueError, match=rf"{key} must be one of train, validation, test.*not 'val'"):
        config_cls(**{key: "val"})
    assert getattr(config_cls(**{key: "validation"}), key) == "validation"


def test_eval_env_kwargs_test_on_other_maps_than_training(tiny_model_dir, tmp_path):
    run = train_grpo(grpo_config(tiny_model_dir, updates=1, eval_every=0, final_eval_split="test",
                                 env_kwargs={"size": 3, "max_steps": 2, "p_hole": 0.4},
                                 eval_env_kwargs={"p_hole": 0.1}), tmp_path / "grpo")

    def env_kwargs(name: str) -> list[dict]:
        lines = (run / "trajectories" / f"{name}.jsonl").read_text().splitlines()[1:]
        return [json.loads(line)["env_kwargs"] for line in lines]

    assert {kw["p_hole"] for kw in env_kwargs("train")} == {0.4}
    tested = env_kwargs("eval-test-final")
    assert len(tested) == 2 and {kw["p_hole"] for kw in tested} == {0.1}
    assert {kw["size"] for kw in tested} == {3}  # the rest of env_kwargs still applies
