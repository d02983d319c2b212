"""Supervised fitting of one role: the loop shared by the behaviour-cloning methods (sft, critic-sft, prm-sft),
and the policy attempts the warm starts of a critic or a PRM learn from."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.configs import ConfigError
from hindsight.logs import LogIssue, describe_issues, read_trajectories
from hindsight.methods.basics import Schedule, SupervisedBasics
from hindsight.methods.lifecycle import Evaluator, TrainingRun
from hindsight.methods.model_setup import make_optimizer
from hindsight.methods.progress import TrainingProgress
from hindsight.train.checkpoint import list_checkpoints
from hindsight.train.model import TrainableModel, distinct_tokens
from hindsight.train.sequences import TrainingSequence
from hindsight.train.update import sft_loss
from hindsight.types import SamplingParams, Trajectory


def training_trajectories(path: str | Path, option: str) -> list[Trajectory]:
    """The trajectories of a run directory or .jsonl file that a method learns from or is judged on,
    named by the config option `option` in errors.

    The reader's other callers skip a broken line and say so; here a skipped line would quietly
    shrink a training set, so a missing path or any broken line is a `ConfigError` that names the
    file, the first bad line and how many there are.
    """
    if not Path(path).exists():
        raise ConfigError(f"{option}: {str(path)!r} does not exist (a run directory or .jsonl file)")
    issues: list[LogIssue] = []
    trajectories = list(read_trajectories(path, issues.append))
    if issues:
        raise ConfigError(f"{option}: {describe_issues(issues)}; fix or remove the broken line"
                          + ("s" if len(issues) > 1 else "") + " and run again")
    return trajectories


def batch_order(count: int, batch_size: int, epochs: int, seed: int) -> list[list[int]]:
    """The sequence indices of every optimizer step: shuffled once per epoch from `seed`.

    A remainder smaller than a batch is dropped each epoch (fewer sequences than a batch
    make one smaller batch). Drawn whole from the seed, so
    a resumed run takes the batches an uninterrupted run would have taken.
    """
    rng = random.Random(seed)
    batches = []
    for _ in range(epochs):
        order = list(range(count))
        rng.shuffle(order)
        batches += [order[i : i + batch_size] for i in range(0, max(1, count // batch_size) * batch_size, batch_size)]
    return batches


def fit_supervised(
    run: TrainingRun[SupervisedBasics], model: TrainableModel, role: str, sequences: Sequence[TrainingSequence],
    *, data: Mapping[str, float], area: str, schedule: Schedule, evaluate: Evaluator | None = None,
) -> int:
    """Minimise the token-mean NLL of the masked-in tokens for `role`; returns the steps taken.

    Shuffled batches of `batch_size` sequences, AdamW with warm-up and cosine decay,
    gradient accumulation over micro-batches, one `area/…` metric row per step (after a
    step-0 row of `data`). Checkpoints and the final evaluation follow `schedule`.
    """
    config = run.config
    batches = batch_order(len(sequences), config.batch_size, config.epochs, config.seed)
    steps_per_epoch = max(1, len(batches) // config.epochs)
    model.activate(role)
    optimizer, scheduler = make_optimizer(model.parameters(), config.lr, config.weight_decay, config.warmup_steps,
                                          len(batches))
    run.begin(model, {role: optimizer}, {role: scheduler}, schedule, evaluate=evaluate)
    model.model.train()
    for step in run.steps(len(batches), area, first_row=data):
        started = time.perf_counter()
        batch = [sequences[i] for i in batches[step - 1]]
        tokens = sum(s.num_loss_tokens for s in batch)
        optimizer.zero_grad(set_to_none=True)
        loss_total, pushed = 0.0, 0
        if model.shares_prefixes(config.shared_tokens):
            batch.sort(key=lambda sequence: sequence.input_ids)  # the turns that share the most, together
        for m in range(0, len(batch), config.micro_batch_size):
            micro = batch[m : m + config.micro_batch_size]
            mean_nll, micro_tokens = sft_loss(model, micro, shared_tokens=config.shared_tokens)
            pushed += micro_tokens
            # Weight each micro-batch by its share of target tokens: the step then minimises
            # the token-mean loss of the whole batch.
            loss = mean_nll * sum(s.num_loss_tokens for s in micro) / tokens
            loss.backward()
            loss_total += loss.item()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
        optimizer.step()
        scheduler.step()
        step_s = time.perf_counter() - started
        epoch = (step - 1) // steps_per_epoch
        run.end_step(step, {
            f"{area}/loss": loss_total, f"{area}/grad_norm": grad_norm, f"{area}/lr": scheduler.get_last_lr()[0],
            f"{area}/epoch": epoch, "timing/step_s": step_s,
            "throughput/redundancy": pushed / max(1, distinct_tokens(batch)),
        }, f"epoch {epoch + 1}/{config.epochs} · loss {loss_total:.3f} · {step_s:.0f}s/step")
    model.model.eval()
    return len(batches)


def policy_attempts(
    config: SupervisedBasics, model: TrainableModel, split: str, episodes: int, samples: int, temperature: float,
    seed: int,
) -> list[Trajectory]:
    """`samples` sampled attempts of the policy role on each of the first `episodes` tasks of a split."""
    from hindsight.envs import make

    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    seeds = env_factory().split_seeds(split, episodes)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=config.max_new_tokens)
    engine = RolloutEngine(env_factory, model.sampler, config.rollout_config(sampling, split, seed=seed))
    tasks = [Task(seed=s, sample=j) for s in seeds for j in range(samples)]
    attempts = []
    with TrainingProgress(len(tasks), f"{split} attempts") as progress:
        for attempt in engine.iter_run(tasks):
            attempts.append(attempt)
            progress.advance(f"{sum(not a.success for a in attempts)} unsolved")
    return attempts


def warm_start_attempts(
    run: TrainingRun, model: TrainableModel, env_id: str, logged: str, *, resume: bool, episodes: int, samples: int,
    temperature: float, keep: Callable[[list[Trajectory]], list[Trajectory]] = list,
    saved_as: Callable[[Trajectory], Trajectory] = lambda attempt: attempt,
) -> tuple[list[Trajectory], list[Trajectory]]:
    """The attempts a critic's or a PRM's warm start learns from, and those it keeps: `logged`
    trajectories of `env_id` (the config's `attempts`: a run directory or .jsonl file) or the policy's fresh ones on train
    tasks, filtered by `keep` and saved (as `saved_as` writes them) in the run's attempts.jsonl. A
    resumed run reads back the attempts it saved, not a fresh sample."""
    if resume and list_checkpoints(run.path):
        kept = list(read_trajectories(run.dir.trajectories_dir / "attempts.jsonl"))
        return kept, kept
    if logged:
        attempts = [t for t in training_trajectories(logged, "attempts") if t.env == env_id]
    else:
        attempts = policy_attempts(run.config, model, "train", episodes, samples, temperature, run.config.seed)
    kept = keep(attempts)
    run.dir.replace_trajectories("attempts", map(saved_as, kept), env=run.config.env, split="train")
    return attempts, kept
