"""Supervised warm start: behaviour cloning on successful trajectories.

Zero-shot, the bundled 135M model almost never writes a well-formed action, so RL has
nothing to reinforce. This loop clones successful demonstrations — from the `oracle`
policy or from any run directory — into a LoRA adapter:

    demos → per-turn sequences (prompt as the policy will see it + response)
          → AdamW on the response tokens only → checkpoint → evaluate
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.parser import parse_response
from hindsight.configs import option
from hindsight.logs import RunDir, read_trajectories
from hindsight.methods.common import (
    MetricsLog, TrainingBasics, eval_metrics, evaluate_trainable, load_trainable, make_optimizer,
)
from hindsight.train.checkpoint import save_checkpoint, seed_everything
from hindsight.train.sequences import TrainingSequence, turn_sequences
from hindsight.train.update import sft_loss
from hindsight.types import SamplingParams, Step, Trajectory


@dataclass(frozen=True)
class SFTConfig(TrainingBasics):
    demos: str = option("oracle", "where demonstrations come from: a policy spec (oracle) or a run directory")
    demo_episodes: int = option(200, "train-split tasks to collect demonstrations on (policy demos)")
    action_only: bool = option(True, "train on `<action>X</action>` responses, dropping the demo's analysis text")
    epochs: int = option(2, "passes over the demonstration turns")
    batch_size: int = option(16, "sequences per optimizer step")
    micro_batch_size: int = option(8, "sequences per forward/backward (gradient accumulation)")
    lr: float = option(3e-4, "peak learning rate")
    warmup_steps: int = option(5, "linear warm-up steps")
    eval_episodes: int = option(50, "tasks of the evaluation split after training (0 skips it)")
    eval_split: str = option("test", "split evaluated after training")


def collect_demonstrations(config: SFTConfig) -> list[Trajectory]:
    """Successful trajectories from a run directory or from running a policy on train tasks."""
    from hindsight.envs import make
    from hindsight.llm import load_model

    if Path(config.demos).exists():
        return [t for t in read_trajectories(config.demos) if t.success]
    env = make(config.env, **config.env_kwargs)
    seeds = env.split_seeds("train", config.demo_episodes)
    engine = RolloutEngine(
        lambda: make(config.env, **config.env_kwargs),
        load_model(config.demos),
        config.rollout_config(SamplingParams(temperature=0.0), "train"),
    )
    return [t for t in engine.iter_run(Task(seed=s) for s in seeds) if t.success]


def _action_only(step: Step) -> Step:
    action = parse_response(step.raw).action
    return replace(step, raw=f"<action>{action}</action>", token_ids=None, finish_reason="stop")


def train_sft(config: SFTConfig, out: str | Path) -> Path:
    seed_everything(config.seed)
    run = RunDir(out)
    run.write_config({"kind": "sft", **asdict(config)})
    metrics = MetricsLog(run, config.tensorboard)

    started = time.perf_counter()
    demos = collect_demonstrations(config)
    if not demos:
        raise ValueError(f"no successful demonstrations from {config.demos!r}")
    if config.action_only:
        demos = [replace(t, steps=tuple(_action_only(s) for s in t.steps)) for t in demos]
    with run.trajectory_writer("demos", env=config.env) as writer:
        for trajectory in demos:
            writer.write_trajectory(trajectory)
    collect_s = time.perf_counter() - started

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, config.full_finetune)
    prompts = config.rollout_config(SamplingParams(), "train").prompt_builder()
    sequences: list[TrainingSequence] = [
        s for t in demos for s in turn_sequences(t, model.backend.tokenizer, prompts)
    ]
    steps_per_epoch = max(1, len(sequences) // config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    optimizer, scheduler = make_optimizer(
        model.parameters(), config.lr, config.weight_decay, config.warmup_steps, total_steps
    )
    order_rng = random.Random(config.seed)
    metrics.log(0, {"data/demonstrations": len(demos), "data/sequences": len(sequences), "timing/collect_s": collect_s})

    step = 0
    model.model.train()
    for epoch in range(config.epochs):
        order = list(range(len(sequences)))
        order_rng.shuffle(order)
        for first in range(0, steps_per_epoch * config.batch_size, config.batch_size):
            step_started = time.perf_counter()
            batch = [sequences[i] for i in order[first : first + config.batch_size]]
            tokens = sum(s.num_loss_tokens for s in batch)
            optimizer.zero_grad(set_to_none=True)
            loss_total = 0.0
            for m in range(0, len(batch), config.micro_batch_size):
                micro = batch[m : m + config.micro_batch_size]
                # Weight each micro-batch by its share of target tokens: the step then
                # minimises the token-mean loss of the whole batch.
                loss = sft_loss(model, micro) * sum(s.num_loss_tokens for s in micro) / tokens
                loss.backward()
                loss_total += loss.item()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
            optimizer.step()
            scheduler.step()
            step += 1
            metrics.log(step, {
                "sft/loss": loss_total, "sft/grad_norm": grad_norm, "sft/lr": scheduler.get_last_lr()[0],
                "sft/epoch": epoch, "timing/step_s": time.perf_counter() - step_started,
            })
    model.model.eval()
    save_checkpoint(run.path, step, model, {"policy": optimizer}, {"policy": scheduler}, {"kind": "sft"})

    if config.eval_episodes:
        summary = evaluate_trainable(model, config.eval_settings(), config.eval_split, config.eval_episodes, run,
                                     f"eval-{config.eval_split}-final", config.seed)
        metrics.log(step, eval_metrics(f"eval_{config.eval_split}", summary))
        run.write_summary({"kind": "sft", "optimizer_steps": step, **asdict(summary)})
    metrics.close()
    return run.path
