"""The critic warm start: template-critique targets, SFT of the critic adapter alone, loading into ECHO."""

import json
import shutil

import torch

from hindsight.agent.critic import parse_critique
from hindsight.methods.critic_sft import CriticSFTConfig, balance_solved, train_critic_sft
from hindsight.methods.echo import ECHOConfig, load_echo_model
from hindsight.train.checkpoint import list_checkpoints
from hindsight.types import Trajectory

from .test_training_loops import comparable, read_metrics


def test_balance_solved_caps_the_share_of_solved_attempts():
    attempts = [Trajectory(env="e", seed=i, instruction="", steps=(), final_observation="", final_state_key="",
                           success=i % 2 == 0, score=float(i % 2 == 0), terminated=True, truncated=False)
                for i in range(10)]
    kept = balance_solved(attempts, 0.2)
    assert [t.seed for t in kept] == [0, 1, 3, 5, 7, 9]  # 5 unsolved allow one solved (1/6 ≤ 0.2)
    assert balance_solved(attempts, 0.0) == [t for t in attempts if not t.success]


def test_critic_sft_trains_only_the_critic_and_echo_starts_from_it(tiny_lora_model_dir, tmp_path):
    config = CriticSFTConfig(
        model=f"hf:{tiny_lora_model_dir}", env_kwargs={"size": 3, "max_steps": 2}, episodes=8, samples_per_task=1,
        epochs=6, batch_size=4, micro_batch_size=4, lr=5e-2, warmup_steps=0, eval_episodes=2, max_new_tokens=4,
        critic_max_new_tokens=8, checkpoint_every=4,
    )
    run = train_critic_sft(config, tmp_path / "critic-sft")
    rows = read_metrics(run)
    losses = [row["critic_sft/loss"] for row in rows if "critic_sft/loss" in row]
    assert len(losses) == 12 and losses[-1] < losses[0] - 3  # it fits the template critiques
    attempts = [json.loads(line) for line in (run / "trajectories" / "attempts.jsonl").read_text().splitlines()[1:]]
    assert attempts and all(parse_critique(a["template_critique"]).parse_error is None for a in attempts)
    assert "final_validation/critique_match_rate" in rows[-1] and json.loads((run / "summary.json").read_text())["attempts"] == 8
    evaluated = (run / "trajectories" / "eval-validation-final.jsonl").read_text().splitlines()[1:]
    evaluated = [json.loads(line) for line in evaluated]
    unsolved = sum(not a["success"] for a in evaluated)
    assert len(evaluated) == 2 and rows[-1]["final_validation/unsolved_attempts"] == unsolved
    assert ("final_validation/unsolved_match_rate" in rows[-1]) == (unsolved > 0)

    saved = torch.load(list_checkpoints(run)[-1].path / "model" / "weights.pt")
    trained = {k for k, v in saved.items() if "lora_B" in k and v.abs().sum() > 0}
    assert trained and all(".critic." in k for k in trained)

    echo = load_echo_model(ECHOConfig(model=f"hf:{tiny_lora_model_dir}", critic_init_from=str(run)))
    current = dict(echo.model.named_parameters())
    assert all(torch.equal(current[k], saved[k]) for k in saved if ".critic." in k)
    assert not any(current[k].abs().sum() > 0 for k in current if ".policy." in k and "lora_B" in k)

    # Logged trajectories can be critiqued instead of fresh attempts (here with the planner's
    # move shown under every turn: replaying the logged attempts must reach their recorded states).
    logged = str(run / "trajectories" / "attempts.jsonl")
    again = train_critic_sft(CriticSFTConfig(**{**config.__dict__, "attempts": logged, "epochs": 1, "eval_episodes": 0,
                                                "critic_hints": True}), tmp_path / "from-log")
    assert read_metrics(again)[0]["data/attempts"] == len(attempts)

    # Killed after its step-8 checkpoint: resuming trains steps 9-12 on the saved attempts
    # and ends where the uninterrupted run did.
    crashed = tmp_path / "crashed"
    shutil.copytree(run, crashed)
    assert [c.step for c in list_checkpoints(crashed)] == [8, 12]
    shutil.rmtree(list_checkpoints(crashed)[-1].path)
    (crashed / "summary.json").unlink()
    train_critic_sft(None, crashed, resume=True)
    assert comparable(read_metrics(crashed)) == comparable(rows)
    resumed = torch.load(list_checkpoints(crashed)[-1].path / "model" / "weights.pt")
    assert all(torch.equal(resumed[k], saved[k]) for k in saved)
