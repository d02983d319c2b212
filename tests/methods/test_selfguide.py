"""Self-Guide on the GRPO loop, end to end on a tiny random model.

The tiny model writes no readable label, so its assessments are all neutral parse failures;
a test that needs labels replaces the assessor's parser with one that labels by the
sampled text. Everything downstream of the label (step rewards, λ(u), the shaped return,
the advantages, the sequences trained, the logs) is the real code.
"""

import json
from dataclasses import replace

import pytest

from hindsight.agent.selfguide import SelfAssessor
from hindsight.algos.selfguide import Label
from hindsight.configs import ConfigError, from_mapping
from hindsight.logs import RunDir, read_trajectories
from hindsight.methods.grpo import GRPOConfig, train_grpo
from hindsight.methods.sft import SFTConfig, train_sft
from hindsight.types import Completion

from .test_training_loops import grpo_config, read_metrics

_parse = SelfAssessor.parse


def label_by_length(self, completion):
    """Positive for an even-length answer, negative for an odd one."""
    assessment = _parse(self, completion)
    label = "positive" if len(completion.text) % 2 == 0 else "negative"
    return replace(assessment, label=label, reward=0.1 if label == "positive" else -0.1, parse_error=None)


def test_selfguide_assesses_every_turn_shapes_the_return_and_trains_both(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(SelfAssessor, "parse", label_by_length)
    config = grpo_config(tiny_model_dir, self_guide=True, guidance_reward=True, updates=4, eval_every=0,
                         final_eval_episodes=2, assessment_max_new_tokens=5, kl_coef=0.0,
                         trust_start=0.25, trust_full=0.5, trust_hold_until=0.5, trust_end=1.0)
    run = train_grpo(config, tmp_path / "sg")
    rows = read_metrics(run)
    # λ(u) at u = 0, .25, .5, .75: 0, 0 (entry), 1 (full), 0.5 (annealing); the final row too.
    assert [row["selfguide/lambda"] for row in rows] == pytest.approx([0.0, 0.0, 1.0, 0.5, 0.5])
    updates = [row for row in rows if "rollout/success_rate" in row]
    trained = list(read_trajectories(run / "trajectories" / "train.jsonl"))
    assert len(trained) == 4 * 2 * 2
    for trajectory in trained:
        assert all(step.assessment is not None and step.assessment.kind == "self-guide" for step in trajectory.steps)
        sg = trajectory.meta["selfguide"]
        labels = [step.assessment.label for step in trajectory.steps]
        assert sg["assessment_sum"] == pytest.approx(0.1 * (labels.count("positive") - labels.count("negative")))
        assert sg["return"] == pytest.approx(sg["env_return"] + sg["lambda"] * sg["assessment_sum"])
        assert trajectory.meta["grpo"]["return"] == pytest.approx(sg["return"])
    # A trajectory trains as pairs (each action and its assessment, tests/train/test_sequences.py);
    # groups of equal returns carry no gradient and are skipped without a KL term.
    assert all(row.get("policy/sequences", 0) % 2 == 0 for row in updates)
    assert any(row.get("policy/sequences") for row in updates[2:]), "with λ > 0 the labels separate group members"
    # Groups of 2, in task order: a group trains on the labels alone when its env returns tie
    # and its shaped returns do not.
    for number, row in enumerate(updates, start=1):
        metas = [t.meta["selfguide"] for t in trained if t.meta["update"] == number]
        groups = [metas[i : i + 2] for i in range(0, len(metas), 2)]
        alone = [a["env_return"] == b["env_return"] and a["return"] != pytest.approx(b["return"]) for a, b in groups]
        assert row["selfguide/guidance_only_groups"] == pytest.approx(sum(alone) / len(groups))
    evaluated = list(read_trajectories(run / "trajectories" / "eval-test-final.jsonl"))
    assert evaluated and all(step.assessment is not None for t in evaluated for step in t.steps)


def test_unreadable_labels_are_neutral_and_counted(tiny_model_dir, tmp_path):
    run = train_grpo(grpo_config(tiny_model_dir, self_guide=True, guidance_reward=True, updates=1, eval_every=0,
                                 final_eval_split="", trust_start=0.0, trust_full=0.0, assessment_max_new_tokens=4),
                     tmp_path / "sg")
    row = read_metrics(run)[-1]
    assert row["selfguide/lambda"] == 1.0
    assert row["selfguide/label_parse_failures"] == row["selfguide/assessments"] > 0
    assert row["selfguide/neutral_rate"] == 1.0 and row["selfguide/assessment_sum_mean"] == 0.0
    assert 0.0 <= row["selfguide/label_agreement"] <= 1.0


def test_sft_teaches_the_assessment_format_from_the_oracle(tiny_model_dir, tmp_path):
    attempts = tmp_path / "attempts"
    run = train_sft(SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, demo_episodes=4, epochs=1,
                              batch_size=4, micro_batch_size=4, warmup_steps=0, eval_episodes=0, self_guide=True),
                    attempts)
    demos = list(read_trajectories(run / "trajectories" / "demos.jsonl"))
    assert all(step.assessment.text.startswith("Reason:") for t in demos for step in t.steps)
    data = read_metrics(run)[0]
    # Every demonstrated turn gives two sequences: its assessment and its action.
    assert data["data/sequences"] == 2 * sum(t.num_steps for t in demos)
    # A policy's own attempts (mistakes included) add assessments only; a trajectory given both
    # as a demonstration and as an attempt to judge is taught once.
    from hindsight.agent.evaluate import EvalConfig, run_eval

    tries = run_eval(EvalConfig(env="frozenlake", model="random:0", episodes=3, split="validation",
                                env_kwargs={"size": 3}, max_steps=4, out=str(tmp_path / "tries")))
    judged_steps = sum(t.num_steps for t in read_trajectories(tries))
    for source, extra_trajectories, extra_steps in ((tries, 3, judged_steps),
                                                    (run / "trajectories" / "demos.jsonl", 0, 0)):
        more = train_sft(SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, demo_episodes=4, epochs=1,
                                   batch_size=4, micro_batch_size=4, warmup_steps=0, eval_episodes=0,
                                   self_guide=True, assessment_demos=str(source)), tmp_path / f"more-{extra_steps}")
        extra = read_metrics(more)[0]
        assert extra["data/assessment_trajectories"] == len(demos) + extra_trajectories
        assert extra["data/sequences"] == 2 * sum(t.num_steps for t in demos) + extra_steps
    only = train_sft(SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, epochs=1, batch_size=4,
                               micro_batch_size=4, warmup_steps=0, eval_episodes=0, self_guide=True,
                               assessment_only=True, assessment_demos=str(run / "trajectories" / "demos.jsonl")),
                     tmp_path / "only")
    judged = read_metrics(only)[0]  # one assessment per step of the given trajectories, no action, no demos
    assert (judged["data/demonstrations"], judged["data/sequences"]) == (0, sum(t.num_steps for t in demos))
    with pytest.raises(ValueError, match="assessment_only needs"):
        SFTConfig(self_guide=True, assessment_only=True)


def test_sft_can_rehearse_only_the_valid_moves_of_its_demos(tiny_model_dir, tmp_path):
    settings = dict(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, epochs=1, batch_size=4,
                    micro_batch_size=4, warmup_steps=0, eval_episodes=0, self_guide=True)
    oracle = train_sft(SFTConfig(**settings, demo_episodes=3), tmp_path / "oracle")
    demos = list(read_trajectories(oracle / "trajectories" / "demos.jsonl"))
    # The same successes with each one's first move refused, as a policy's own attempt on
    # `holes: blocking` would have it.
    with RunDir(tmp_path / "own").trajectory_writer("attempts", env="frozenlake", split="train") as writer:
        for t in demos:
            writer.write_trajectory(replace(t, steps=(replace(t.steps[0], valid=False), *t.steps[1:])))
    moves = sum(t.num_steps for t in demos)
    for valid_only, rehearsed in ((False, moves), (True, moves - len(demos))):
        run = train_sft(SFTConfig(**settings, demos=str(tmp_path / "own"), valid_moves_only=valid_only),
                        tmp_path / f"valid-only-{valid_only}")
        data = read_metrics(run)[0]
        # Every turn's assessment is taught; the refused moves are not, with valid_moves_only.
        assert data["data/sequences"] == moves + rehearsed
        assert data["data/moves_not_rehearsed"] == moves - rehearsed


def test_sft_can_continue_a_trained_policy(tiny_model_dir, tmp_path):
    import torch

    from hindsight.train.checkpoint import list_checkpoints

    def adapter(run):
        weights = torch.load(list_checkpoints(run)[-1].path / "model" / "weights.pt")
        return {k: v for k, v in weights.items() if "lora" in k}

    settings = dict(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3}, demo_episodes=2, epochs=1, batch_size=4,
                    micro_batch_size=4, warmup_steps=0, eval_episodes=0)
    first = train_sft(SFTConfig(**settings), tmp_path / "first")
    # With a zero learning rate the continued run saves exactly the adapter it started from,
    # which differs from a fresh adapter (LoRA B starts at zero, the first run moved it).
    still = train_sft(SFTConfig(**settings, lr=0.0, init_from=str(first)), tmp_path / "still")
    fresh = train_sft(SFTConfig(**settings, lr=0.0), tmp_path / "fresh")
    started, kept, untrained = adapter(first), adapter(still), adapter(fresh)
    assert started and all(torch.equal(started[k], kept[k]) for k in started)
    assert not all(torch.equal(started[k], untrained[k]) for k in started)


@pytest.mark.parametrize("form", ["mean", "capped"])
def test_the_guidance_form_shapes_the_trained_return(tiny_model_dir, tmp_path, monkeypatch, form):
    monkeypatch.setattr(SelfAssessor, "parse", label_by_length)
    config = grpo_config(tiny_model_dir, self_guide=True, guidance_reward=True, guidance_form=form, updates=1,
                         eval_every=0, final_eval_split="", assessment_max_new_tokens=5, trust_start=0.0,
                         trust_full=0.0, trust_hold_until=1.0, trust_end=1.0)
    run = train_grpo(config, tmp_path / form)
    for trajectory in read_trajectories(run / "trajectories" / "train.jsonl"):
        sg = trajectory.meta["selfguide"]
        total, notes = sg["assessment_sum"], trajectory.num_steps
        guidance = total / notes if form == "mean" else (min(total, sg["env_return"]) if total > 0 else total)
        assert sg["lambda"] == 1.0
        assert sg["return"] == pytest.approx(sg["env_return"] + guidance, abs=1e-6)  # stored as float32


@pytest.mark.parametrize("values, message", [
    ({"guidance_reward": True}, "needs self_guide"),
    ({"self_guide": True, "guidance_reward": True, "guidance_form": "median"}, "guidance_form must be one of"),
    ({"self_guide": True, "guidance_reward": True, "trust_start": 0.6}, "start <= full"),
    ({"self_guide": True, "assessment_max_new_tokens": 0}, "assessment_max_new_tokens"),
])
def test_bad_selfguide_configs_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        from_mapping(GRPOConfig, values)


def test_echo_refuses_self_guide():
    from hindsight.methods.echo import ECHOConfig

    with pytest.raises(ConfigError, match="GRPO switch"):
        from_mapping(ECHOConfig, {"self_guide": True})


def test_rft_continues_a_policy_on_its_own_sampled_successes(tmp_path, monkeypatch):
    """demo_samples attempts per task at demo_temperature, each kept when it succeeds."""
    from hindsight.methods import sft

    seen = []

    class Stub:
        spec = "stub"

        def generate(self, requests, params):
            seen.append(params.temperature)
            return [Completion(text=f"<action>{r.env.oracle_action()}</action>") for r in requests]

    monkeypatch.setattr("hindsight.llm.load_model", lambda spec, **kw: Stub())
    config = SFTConfig(env_kwargs={"size": 3, "max_steps": 6}, demos="stub", demo_episodes=5, demo_samples=3,
                       demo_temperature=1.0, max_new_tokens=8)
    collection = sft.collect_demonstrations(config)
    demos = collection.demos
    assert set(seen) == {1.0} and all(t.success for t in demos)
    assert len(demos) == 15 and len({t.id for t in demos}) == 15  # 5 tasks × 3 samples, each its own attempt
    assert collection.episodes == 15 and collection.env_steps == sum(t.num_steps for t in demos)
    with pytest.raises(ConfigError, match="demo_temperature"):
        from_mapping(SFTConfig, {"demo_samples": 2})


def test_a_collection_counts_the_attempts_it_did_not_keep():
    from hindsight.methods.sft import Collection
    from tests.test_benchmark_tables import outcome

    sampled = Collection.of_attempts([outcome(0, True, moves=3), outcome(1, False, moves=10),
                                      outcome(2, False, moves=2)])
    assert [t.seed for t in sampled.demos] == [0] and (sampled.episodes, sampled.env_steps) == (3, 15)
    both = sampled + Collection.of_attempts([outcome(3, True, moves=4)])
    assert [t.seed for t in both.demos] == [0, 3] and (both.episodes, both.env_steps) == (4, 19)


def test_sft_balances_the_labels_it_teaches_and_judges_held_out_steps(tiny_model_dir, tmp_path):
    from hindsight.agent.evaluate import EvalConfig, run_eval
    from hindsight.agent.selfguide import oracle_labels

    def attempts(name, split, episodes):
        return run_eval(EvalConfig(env="frozenlake", model="random:0", episodes=episodes, split=split,
                                   env_kwargs={"size": 3}, max_steps=5, out=str(tmp_path / name)))

    tries, held_out = attempts("tries", "train", 8), attempts("held-out", "validation", 4)
    labels = [label for t in read_trajectories(tries) for label in oracle_labels(t)]
    judged = [label for label in labels if label is not None]
    cap = sorted(judged.count(kind) for kind in set(judged))[-2]
    run = train_sft(SFTConfig(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3, "max_steps": 5}, epochs=1,
                              batch_size=4, micro_batch_size=4, warmup_steps=0, self_guide=True, assessment_only=True,
                              assessment_demos=str(tries), balance_labels=True, assessment_eval=str(held_out),
                              eval_episodes=3, assessment_max_new_tokens=8), tmp_path / "assessor")
    data = read_metrics(run)[0]
    taught = {name.removeprefix("data/notes_"): count for name, count in data.items() if name.startswith("data/notes_")}
    assert max(taught.values()) == cap and data["data/sequences"] == sum(taught.values())
    assert taught["first_turn"] == min(cap, labels.count(None))
    # The evaluation judged every turn after the first of the first 3 held-out trajectories.
    final = read_metrics(run)[-1]
    evaluated = list(read_trajectories(run / "trajectories" / "eval-test-final.jsonl"))
    assert len(evaluated) == 3
    assert final["final_test/steps"] == sum(t.num_steps - 1 for t in evaluated)
    assert all(len(t.meta["judged"]) == t.num_steps - 1 for t in evaluated)
    oracle = [Label(j["oracle"]) for t in evaluated for j in t.meta["judged"]]
    assert final["final_test/always_positive"] == pytest.approx(oracle.count(Label.POSITIVE) / len(oracle))
    said = [j["label"] for t in evaluated for j in t.meta["judged"]]
    agreed = sum(s == o.value for s, o in zip(said, oracle))
    assert final["final_test/agreement"] == pytest.approx(agreed / len(oracle))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["passes_gate"] == bool(final["final_test/passes_gate"])
    with pytest.raises(ValueError, match="need self_guide"):
        SFTConfig(balance_labels=True)
