"""Multi-turn GRPO: the baseline every other method builds on.

One update, top to bottom:

    tasks   next `tasks_per_update` seeds of the train split (a cursor, saved in checkpoints)
    rollout G trajectories per task with the pooled engine, sampling from the policy
    reward  R = the trajectory's final task score (or success)
    adv     A = (R − mean_group) / (std_group + ε), shared by every generated token
    loss    clipped importance ratio × A on response tokens of every turn, k3 KL to the
            base model (adapters off) when kl_coef > 0
    step    AdamW, gradient clipping
    log     metrics.jsonl row, trajectories with their advantages
    eval    validation split every `eval_every` updates
    save    checkpoint every `checkpoint_every` updates (exact resume)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.evaluate import summarize
from hindsight.algos.grpo import Aggregation, group_advantages, nonzero_variance_groups
from hindsight.configs import from_mapping, option
from hindsight.logs import RunDir
from hindsight.methods.common import (
    MetricsLog, TrainingBasics, TrainingProgress, drop_records_after, eval_metrics, evaluate_trainable,
    load_trainable, make_optimizer,
)
from hindsight.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint, seed_everything
from hindsight.train.sequences import turn_sequences
from hindsight.train.update import UpdateSettings, policy_gradient_update
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class GRPOConfig(TrainingBasics):
    init_from: str = option("", "run directory (e.g. an SFT run) whose latest checkpoint initialises the policy")
    updates: int = option(20, "number of GRPO updates")
    tasks_per_update: int = option(4, "task instances per update")
    group_size: int = option(8, "trajectories per task instance (G)")
    reward: str = option("score", "trajectory return: score (graded, final) or success (0/1)")
    temperature: float = option(1.0, "sampling temperature of training rollouts")
    lr: float = option(2e-5, "peak learning rate")
    warmup_steps: int = option(0, "linear warm-up optimizer steps")
    epochs: int = option(1, "optimizer steps on each batch of rollouts (>1 makes the clipping active)")
    micro_batch_size: int = option(8, "sequences per forward/backward")
    clip_low: float = option(0.2, "lower clip ε (ratio ≥ 1 − ε)")
    clip_high: float = option(0.2, "upper clip ε (ratio ≤ 1 + ε); DAPO's clip-higher uses 0.28")
    kl_coef: float = option(0.0, "β of the k3 KL to the base model (0 disables it)")
    aggregation: str = option("sequence_mean", "sequence_mean (GRPO's 1/|o_i|) or token_mean (DAPO)")
    normalize_std: bool = option(True, "divide advantages by the group's standard deviation")
    drop_zero_variance: bool = option(False, "DAPO: skip groups whose returns are all equal")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the update")
    eval_every: int = option(5, "evaluate on the validation split every N updates (0 disables)")
    eval_episodes: int = option(50, "tasks per evaluation")
    final_eval_split: str = option("test", "split evaluated at the end ('' skips it)")
    final_eval_episodes: int = option(100, "tasks of the final evaluation")
    checkpoint_every: int = option(5, "save a checkpoint every N updates")
    keep_checkpoints: int = option(2, "checkpoints kept on disk (newest)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reward not in ("score", "success"):
            raise ValueError("reward must be 'score' or 'success'")
        Aggregation(self.aggregation)
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2 (advantages are relative to the group)")


def trajectory_return(trajectory: Trajectory, reward: str) -> float:
    return float(trajectory.success) if reward == "success" else trajectory.score


def train_grpo(config: GRPOConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    run = RunDir(out)
    if resume:
        config = from_mapping(GRPOConfig, {k: v for k, v in run.read_config().items() if k != "kind"})
    else:
        run.write_config({"kind": "grpo", **asdict(config)})
    seed_everything(config.seed)
    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    train_seeds = env_factory().split_seeds("train", config.updates * config.tasks_per_update)

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, config.full_finetune,
                           config.gradient_checkpointing)
    if config.init_from:
        checkpoints = list_checkpoints(config.init_from)
        if not checkpoints:
            raise ValueError(f"no checkpoint in {config.init_from}")
        model.load(checkpoints[-1].path / "model")
    optimizer, scheduler = make_optimizer(model.parameters(), config.lr, config.weight_decay, config.warmup_steps,
                                          config.updates * config.epochs)
    settings = UpdateSettings(
        clip_low=config.clip_low, clip_high=config.clip_high, kl_coef=config.kl_coef,
        aggregation=Aggregation(config.aggregation), epochs=config.epochs,
        micro_batch_size=config.micro_batch_size, max_grad_norm=config.max_grad_norm,
    )
    eval_settings = config.eval_settings()

    start, env_steps = 0, 0
    if resume and (checkpoints := list_checkpoints(run.path)):
        state = load_checkpoint(checkpoints[-1], model, {"policy": optimizer}, {"policy": scheduler})
        start, env_steps = state["step"], state["env_steps"]
        drop_records_after(run.path / "metrics.jsonl", start, "step")
        drop_records_after(run.trajectories_dir / "train.jsonl", start, "update")
    metrics = MetricsLog(run, config.tensorboard)
    train_log = run.trajectory_writer("train", env=config.env, split="train")

    if start == 0 and config.eval_every:
        summary = evaluate_trainable(model, eval_settings, "validation", config.eval_episodes, run,
                                     "eval-validation-000000", config.seed)
        metrics.log(0, {**eval_metrics("eval", summary), "rollout/env_steps": 0})

    with TrainingProgress(config.updates, "grpo", completed=start) as progress:
        for step in range(start + 1, config.updates + 1):
            # -- rollout: G samples of each task, all in one pool --------------------------
            progress.phase("rollout")
            t0 = time.perf_counter()
            cursor = (step - 1) * config.tasks_per_update
            seeds = train_seeds[cursor : cursor + config.tasks_per_update]
            rollout_config = config.rollout_config(
                SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens), "train",
                seed=config.seed * 1_000_003 + step * 1_000,
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
            advantages = group_advantages(returns, normalize_std=config.normalize_std)
            if config.drop_zero_variance:
                advantages = advantages * nonzero_variance_groups(returns).unsqueeze(1)
            advantages = advantages.flatten().tolist()

            # -- loss and step: every turn of a trajectory shares its advantage ------------
            progress.phase("update")
            t1 = time.perf_counter()
            sequences, sequence_adv = [], []
            for trajectory, advantage in zip(trajectories, advantages):
                for sequence in turn_sequences(trajectory, model.backend.tokenizer, rollout_config.prompt_builder()):
                    sequences.append(sequence)
                    sequence_adv.append(advantage)
            stats = policy_gradient_update(model, sequences, sequence_adv, optimizer, scheduler, settings)
            update_s = time.perf_counter() - t1

            # -- log ----------------------------------------------------------------------
            env_steps += sum(t.num_steps for t in trajectories)
            for trajectory, advantage, value in zip(trajectories, advantages, returns.flatten().tolist()):
                grpo = {"return": value, "advantage": advantage}
                train_log.write_trajectory(trajectory.with_meta(update=step, grpo=grpo))
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
                    "policy/loss": stats.loss, "policy/pg_loss": stats.pg_loss, "policy/kl": stats.kl,
                    "policy/clip_frac": stats.clip_frac, "policy/grad_norm": stats.grad_norm,
                    "policy/lr": scheduler.get_last_lr()[0], "policy/sequences": stats.sequences,
                    "policy/tokens": stats.tokens, "timing/forward_backward_s": stats.forward_backward_s,
                    "throughput/update_tokens_per_s": stats.tokens * config.epochs / max(stats.seconds, 1e-9),
                })

            # -- evaluate and checkpoint --------------------------------------------------
            if config.eval_every and step % config.eval_every == 0:
                progress.phase("eval")
                summary = evaluate_trainable(model, eval_settings, "validation", config.eval_episodes, run,
                                             f"eval-validation-{step:06d}", config.seed)
                row.update(eval_metrics("eval", summary))
            metrics.log(step, row)
            if step % config.checkpoint_every == 0 or step == config.updates:
                save_checkpoint(run.path, step, model, {"policy": optimizer}, {"policy": scheduler},
                                {"env_steps": env_steps}, keep=config.keep_checkpoints)
            progress.advance(f"rollout {rollout_s:.0f}s · update {update_s:.0f}s · "
                             f"train success {rollout.success_rate:.2f}")

    train_log.close()
    if config.final_eval_split:
        summary = evaluate_trainable(model, eval_settings, config.final_eval_split, config.final_eval_episodes, run,
                                     f"eval-{config.final_eval_split}-final", config.seed)
        metrics.log(config.updates, eval_metrics(f"final_{config.final_eval_split}", summary))
        run.write_summary({"kind": "grpo", "updates": config.updates, "env_steps": env_steps, **asdict(summary)})
    metrics.close()
    return run.path
