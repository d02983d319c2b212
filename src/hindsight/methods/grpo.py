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
    eval    validation split every `eval_every` updates
    save    checkpoint every `checkpoint_every` updates (exact resume)

Under `accelerate launch` the tasks of each update are dealt out to the processes, each
rolls out and scores whole groups, and the update sums their gradients
(`hindsight.train.distributed`); process 0 logs, evaluates and saves.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.evaluate import summarize
from hindsight.algos.grpo import group_advantages, nonzero_variance_groups
from hindsight.configs import ConfigError, option
from hindsight.methods.common import (
    MetricsLog, PolicyGradientBasics, TrainingProgress, eval_metrics, evaluate_trainable, load_latest,
    load_trainable, make_optimizer, open_run, resume_latest, trajectory_return, update_metrics,
)
from hindsight.train.checkpoint import save_checkpoint, seed_everything
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
    main = workers.is_main
    run, config = open_run("grpo", GRPOConfig, config, out, resume, write=main)
    seed_everything(config.seed)
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
    eval_settings = config.eval_settings()

    start, env_steps = 0, 0
    if resume:
        start, env_steps = resume_latest(run, model, {"policy": optimizer}, {"policy": scheduler}, ("train",),
                                         write=main)
    metrics = MetricsLog(run, config, enabled=main)
    train_log = run.trajectory_writer("train", env=config.env, split="train") if main else None

    if main and start == 0 and config.eval_every:
        summary = evaluate_trainable(model, eval_settings, "validation", config.eval_episodes, run,
                                     "eval-validation-000000", config.seed)
        metrics.log(0, {**eval_metrics("eval", summary), "rollout/env_steps": 0})

    with TrainingProgress(config.updates, "grpo", completed=start, enabled=main) as progress:
        for step in range(start + 1, config.updates + 1):
            # -- rollout: G samples of each task, all in one pool --------------------------
            progress.phase("rollout")
            t0 = time.perf_counter()
            cursor = (step - 1) * config.tasks_per_update
            seeds = workers.shard(train_seeds[cursor : cursor + config.tasks_per_update])
            rollout_config = config.rollout_config(
                SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens), "train",
                seed=config.seed * 1_000_003 + step * 1_000 + 100 * workers.rank,  # own noise per process
            )
            engine = RolloutEngine(env_factory, model.backend, rollout_config)
            trajectories = engine.run([Task(seed=s, sample=j) for s in seeds for j in range(config.group_size)])
            # Rows of `returns` are groups: order by task, then by sample within the task.
            trajectories.sort(key=lambda t: (seeds.index(t.seed), int(t.id.rsplit(":", 1)[1])))
            rollout_s = time.perf_counter() - t0

            # -- reward and group-relative advantage ---------------------------------------
            returns = torch.tensor([trajectory_return(t, config.reward) for t in trajectories]).view(
                len(seeds), config.group_size
            )
            advantages = group_advantages(returns, normalize_std=config.normalize_std).flatten().tolist()
            # DAPO: a group whose returns are all equal has no signal; leaving it out of the
            # batch keeps it from diluting the loss normalisation of the groups that have.
            trained = (nonzero_variance_groups(returns).repeat_interleave(config.group_size).tolist()
                       if config.drop_zero_variance else [True] * len(trajectories))

            # -- loss and step: every turn of a trajectory shares its advantage ------------
            progress.phase("update")
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

            # -- log ----------------------------------------------------------------------
            trajectories = workers.gather([
                trajectory.with_meta(update=step, grpo={"return": value, "advantage": advantage})
                for trajectory, advantage, value in zip(trajectories, advantages, returns.flatten().tolist())
            ])
            returns = torch.tensor(workers.gather(returns.tolist()))
            env_steps += sum(t.num_steps for t in trajectories)
            if main:
                for trajectory in trajectories:
                    train_log.write_trajectory(trajectory)
            rollout = summarize(trajectories)
            row = {
                "rollout/success_rate": rollout.success_rate,
                "rollout/score_mean": rollout.mean_score,
                "rollout/steps_mean": rollout.mean_steps,
                "rollout/invalid_rate": rollout.invalid_rate,
                "rollout/zero_variance_groups": float((~nonzero_variance_groups(returns)).float().mean()),
                "rollout/env_steps": env_steps,
                "timing/rollout_s": rollout_s,
                "timing/update_s": update_s,
            }
            if stats is not None:
                row.update({
                    **update_metrics("policy", stats, scheduler.get_last_lr()[0]),
                    "timing/forward_backward_s": stats.forward_backward_s,
                    "throughput/update_tokens_per_s": stats.tokens * config.epochs / max(stats.seconds, 1e-9),
                })

            # -- evaluate and checkpoint --------------------------------------------------
            if main and config.eval_every and step % config.eval_every == 0:
                progress.phase("eval")
                summary = evaluate_trainable(model, eval_settings, "validation", config.eval_episodes, run,
                                             f"eval-validation-{step:06d}", config.seed)
                row.update(eval_metrics("eval", summary))
            metrics.log(step, row)
            if main and (step % config.checkpoint_every == 0 or step == config.updates):
                save_checkpoint(run.path, step, model, {"policy": optimizer}, {"policy": scheduler},
                                {"env_steps": env_steps}, keep=config.keep_checkpoints)
            progress.advance(f"rollout {rollout_s:.0f}s · update {update_s:.0f}s · "
                             f"train success {rollout.success_rate:.2f}")

    if not main:
        return run.path
    train_log.close()
    if config.final_eval_split:
        summary = evaluate_trainable(model, eval_settings, config.final_eval_split, config.final_eval_episodes, run,
                                     f"eval-{config.final_eval_split}-final", config.seed)
        metrics.log(config.updates, eval_metrics(f"final_{config.final_eval_split}", summary))
        run.write_summary({"kind": "grpo", "updates": config.updates, "env_steps": env_steps, **asdict(summary)})
    metrics.close()
    return run.path
