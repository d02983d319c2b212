"""Multi-turn GRPO: the baseline every other method builds on.

One update, top to bottom:

    tasks   next `tasks_per_update` seeds of the train split (a cursor, saved in checkpoints)
    rollout G trajectories per task with the pooled engine, sampling from the policy
    reward  R = the trajectory's final task score (or success)
    adv     A = (R − mean_group) / (std_group + ε), shared by every generated token
            (drop_zero_variance: groups with equal returns leave the batch, as in DAPO)
    loss    clipped importance ratio × A on the response tokens of every turn, averaged over
            each trajectory's tokens, then over trajectories (`aggregation`); k3 KL to the
            base model (adapters off) or the init policy (kl_reference) when kl_coef > 0
    step    AdamW, gradient clipping
    log     metrics.jsonl row, trajectories with their advantages
    eval    validation split every `eval_every` updates  } the run lifecycle
    save    checkpoint every `checkpoint_every` updates   } (methods/lifecycle.py)

Under `accelerate launch` the tasks of each update are dealt out to the processes, each
rolls out and scores whole groups, and the update sums their gradients
(`hindsight.train.distributed`); process 0 logs, evaluates and saves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.evaluate import summarize
from hindsight.algos.grpo import group_advantages, nonzero_variance_groups
from hindsight.configs import ConfigError, option
from hindsight.methods.basics import PolicyGradientBasics
from hindsight.methods.lifecycle import TrainingRun
from hindsight.methods.metrics import update_metrics
from hindsight.methods.model_setup import load_latest, load_trainable, make_optimizer
from hindsight.train.distributed import Workers
from hindsight.train.sequences import turn_sequences
from hindsight.train.update import policy_gradient_update
from hindsight.types import SamplingParams


@dataclass(frozen=True)
class GRPOConfig(PolicyGradientBasics):
    drop_zero_variance: bool = option(False, "DAPO: leave groups whose returns are all equal out of the batch "
                                             "(they then do not dilute the loss normalisation)")


def train_grpo(config: GRPOConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    workers = Workers.current()
    run = TrainingRun("grpo", GRPOConfig, config, out, resume=resume, workers=workers)
    config = run.config
    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    train_seeds = env_factory().split_seeds("train", config.updates * config.tasks_per_update)
    if config.tasks_per_update < workers.world:
        raise ConfigError(f"tasks_per_update ({config.tasks_per_update}) must be at least the number of processes "
                          f"({workers.world}): each process rolls out whole task groups")

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, config.full_finetune,
                           config.gradient_checkpointing)
    if config.init_from:
        load_latest(model, config.init_from)
        if config.kl_reference == "init":
            model.freeze_reference(config.init_from)
    optimizer, scheduler = make_optimizer(model.parameters(), config.lr, config.weight_decay, config.warmup_steps,
                                          config.updates * config.epochs)
    settings = config.update_settings()
    run.begin(model, {"policy": optimizer}, {"policy": scheduler}, config.schedule(), logs=("train",))

    for step in run.steps(config.updates, "grpo", first_row={"rollout/env_steps": 0}):
        # -- rollout: G samples of each task, all in one pool, returned task by task ---------
        run.phase("rollout")
        t0 = time.perf_counter()
        cursor = (step - 1) * config.tasks_per_update
        seeds = workers.shard(train_seeds[cursor : cursor + config.tasks_per_update])
        rollout_config = config.rollout_config(
            SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens), "train",
            seed=config.seed * 1_000_003 + step * 1_000 + 100 * workers.rank,  # own noise per process
        )
        engine = RolloutEngine(env_factory, model.backend, rollout_config)
        trajectories = engine.run([Task(seed=s, sample=j) for s in seeds for j in range(config.group_size)])
        rollout_s = time.perf_counter() - t0

        # -- reward and group-relative advantage (rows of `returns` are groups) --------------
        returns = torch.tensor([config.trajectory_return(t) for t in trajectories]).view(len(seeds), config.group_size)
        advantages = group_advantages(returns, normalize_std=config.normalize_std).flatten().tolist()
        # DAPO: a group whose returns are all equal has no signal; leaving it out of the
        # batch keeps it from diluting the loss normalisation of the groups that have.
        trained = (nonzero_variance_groups(returns).repeat_interleave(config.group_size).tolist()
                   if config.drop_zero_variance else [True] * len(trajectories))

        # -- loss and step: every turn of a trajectory shares its advantage ------------------
        run.phase("update")
        t1 = time.perf_counter()
        sequences, sequence_adv = [], []
        for trajectory, advantage, train in zip(trajectories, advantages, trained):
            if not train:
                continue
            for sequence in turn_sequences(trajectory, model.backend.tokenizer, rollout_config.prompt_builder()):
                sequences.append(sequence)
                sequence_adv.append(advantage)
        stats = policy_gradient_update(model, sequences, sequence_adv, optimizer, scheduler, settings, workers)
        update_s = time.perf_counter() - t1

        # -- log ------------------------------------------------------------------------------
        trajectories = workers.gather([
            trajectory.with_meta(update=step, grpo={"return": value, "advantage": advantage})
            for trajectory, advantage, value in zip(trajectories, advantages, returns.flatten().tolist())
        ])
        returns = torch.tensor(workers.gather(returns.tolist()))
        run.env_steps += sum(t.num_steps for t in trajectories)
        run.write("train", trajectories)
        rollout = summarize(trajectories)
        row = {
            "rollout/success_rate": rollout.success_rate,
            "rollout/score_mean": rollout.mean_score,
            "rollout/steps_mean": rollout.mean_steps,
            "rollout/invalid_rate": rollout.invalid_rate,
            "rollout/zero_variance_groups": float((~nonzero_variance_groups(returns)).float().mean()),
            "rollout/env_steps": run.env_steps,
            "timing/rollout_s": rollout_s,
            "timing/update_s": update_s,
        }
        if stats is not None:
            row.update({
                **update_metrics("policy", stats, scheduler.get_last_lr()[0]),
                "timing/forward_backward_s": stats.forward_backward_s,
                "throughput/update_tokens_per_s": stats.tokens * config.epochs / max(stats.seconds, 1e-9),
            })
        run.end_step(step, row, f"rollout {rollout_s:.0f}s · update {update_s:.0f}s · "
                                f"train success {rollout.success_rate:.2f}")

    return run.finish(updates=config.updates, env_steps=run.env_steps)
