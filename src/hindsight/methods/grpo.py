"""Multi-turn GRPO, with DAPO's and Self-Guide's switches: the baseline every other method builds on.

One update, top to bottom:

    tasks   next `tasks_per_update` seeds of the train split from `train_seed_start` (a cursor, saved in checkpoints)
    rollout G trajectories per task with the pooled engine, sampling from the policy
            (self_guide: before each action the policy writes z_t, a self-assessment of its
            latest step, and then acts with z_t in view)
    reward  R = the trajectory's final task score (or success); with Self-Guide's
            guidance_reward, R = R_env + λ(u)·Σ_t r_t, λ(u) the trust schedule (guidance_form:
            the mean over the notes, or the sum capped at R_env, instead)
    adv     the config's advantage_estimator (algos/advantages.py): grpo, A = (R − mean_group) /
            (std_group + ε) shared by every generated token; gigpo adds a step-level advantage
            per turn from the turns taken from the same state in the group
            (drop_zero_variance: groups with equal returns leave the batch, as in DAPO;
            keep_top_spread: only the groups of largest return spread train, as in RAGEN;
            dynamic_sampling: more tasks are rolled out until informative groups fill it)
    loss    clipped importance ratio × A on the response tokens of every turn (and of every
            self-assessment: one objective trains z_t and a_t), averaged over
            each trajectory's tokens, then over trajectories (`aggregation`); k3 KL to the
            base model (adapters off) or the init policy (kl_reference) when kl_coef > 0
    step    AdamW, gradient clipping
    log     metrics.jsonl row (with `tide/…`: TIDE's AUV, loop and invalid rates of these rollouts),
            trajectories with their advantages
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
from typing import Callable, Iterable, Sequence

import torch

from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.evaluate import summarize
from hindsight.algos.advantages import step_parts
from hindsight.algos.grpo import Aggregation, nonzero_variance_groups, top_spread_groups
from hindsight.algos.selfguide import (
    GuidanceForm, TrustSchedule, guidance_only_groups, shaped_return, update_progress,
)
from hindsight.configs import option
from hindsight.diagnostics.live import live_tide_metrics
from hindsight.methods.basics import PolicyGradientBasics
from hindsight.methods.lifecycle import TrainingRun
from hindsight.methods.metrics import prefill_counts, prefill_metrics, redundancy_metrics, update_metrics
from hindsight.methods.model_setup import load_latest, load_trainable, make_optimizer
from hindsight.methods.registry import training_method
from hindsight.train.distributed import Workers
from hindsight.train.sequences import assessment_sequences, policy_sequences
from hindsight.train.update import policy_gradient_update
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class GRPOConfig(PolicyGradientBasics):
    # The dense learning benchmark's best of four rates at 20 updates (docs/training.md, "GRPO's defaults,
    # chosen by evidence").
    lr: float = option(1e-4, "peak learning rate")
    drop_zero_variance: bool = option(False, "DAPO: leave groups whose returns are all equal out of the batch "
                                             "(they then do not dilute the loss normalisation)")
    dynamic_sampling: bool = option(False, "DAPO's dynamic sampling: when fewer than tasks_per_update groups of an "
                                           "update have unequal returns, roll out more tasks (up to max_refills "
                                           "rounds) and fill the batch with informative groups")
    max_refills: int = option(2, "dynamic_sampling: extra rounds of tasks_per_update tasks one update may draw")
    keep_top_spread: float = option(1.0, "RAGEN's variance filter: train on this fraction of each update's groups, "
                                         "those whose returns differ the most (largest std); RAGEN uses 0.25, 1 keeps "
                                         "every group")
    guidance_reward: bool = option(False, "Self-Guide's guidance reward (needs self_guide): R = R_env + λ(u)·Σ_t r_t, "
                                          "r_t = +0.1/0/−0.1 for a positive/neutral/negative self-assessment")
    guidance_form: str = option("sum", "how the notes' step rewards are added: sum (the paper, λ·Σ_t r_t: always-"
                                       "positive notes pay for length), mean (λ·mean_t r_t) or capped (λ·Σ_t r_t, "
                                       "its positive part at most R_env: notes never pay a failure)")
    trust_start: float = option(0.4, "λ(u) is 0 until this fraction of the updates (guidance only)")
    trust_full: float = option(0.5, "λ(u) ramps linearly to 1 by this fraction")
    trust_hold_until: float = option(0.7, "λ(u) stays 1 until this fraction")
    trust_end: float = option(0.8, "λ(u) anneals linearly to 0 by this fraction (trust_hold_until = trust_end = 1: "
                                   "no annealing)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.trust_schedule()  # refuses breakpoints out of order
        if self.max_refills < 0:
            raise ValueError("max_refills must be >= 0")
        if not 0.0 < self.keep_top_spread <= 1.0:
            raise ValueError(f"keep_top_spread must be in (0, 1], not {self.keep_top_spread}")
        if self.guidance_reward and not self.self_guide:
            raise ValueError("guidance_reward needs self_guide: true (the reward comes from the self-assessments)")
        forms = [form.value for form in GuidanceForm]
        if self.guidance_form not in forms:
            raise ValueError(f"guidance_form must be one of {', '.join(forms)}, not {self.guidance_form!r}")

    def trust_schedule(self) -> TrustSchedule:
        return TrustSchedule(self.trust_start, self.trust_full, self.trust_hold_until, self.trust_end)

    def guidance_weight(self, update: int) -> float:
        """λ(u) of an update (0 without the guidance reward)."""
        if not self.guidance_reward:
            return 0.0
        return self.trust_schedule().weight(update_progress(update, self.updates))


@training_method("grpo", GRPOConfig,
                 help="multi-turn GRPO with DAPO's and Self-Guide's switches (advantage_estimator: grpo or gigpo)")
def train_grpo(config: GRPOConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    workers = Workers.current()
    run = TrainingRun("grpo", GRPOConfig, config, out, resume=resume, workers=workers)
    config = run.config
    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    train_seeds = config.train_seeds(env_factory())
    workers.require_groups(config.tasks_per_update)

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, config.full_finetune,
                           config.gradient_checkpointing, config.dtype)
    if config.init_from:
        load_latest(model, config.init_from)
        if config.kl_reference == "init":
            model.freeze_reference(config.init_from)
    optimizer, scheduler = make_optimizer(model.parameters(), config.lr, config.weight_decay, config.warmup_steps,
                                          config.updates * config.epochs)
    settings = config.update_settings()
    run.begin(model, {"policy": optimizer}, {"policy": scheduler}, config.schedule(), logs=("train",))

    first_eval = {"rollout/env_steps": 0, **({"selfguide/lambda": config.guidance_weight(1)} if config.self_guide else {})}
    for step in run.steps(config.updates, "grpo", with_first_eval=first_eval):
        # -- rollout: G samples of each task, all in one pool, returned task by task ---------
        run.phase("rollout")
        t0 = time.perf_counter()
        prefill_before = prefill_counts(model.sampler)
        cursor = (step - 1) * config.tasks_per_update
        seeds = workers.shard(train_seeds[cursor : cursor + config.tasks_per_update])
        rollout_config = config.rollout_config(
            SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens), "train",
            seed=config.seed * 1_000_003 + step * 1_000 + 100 * workers.rank,  # own noise per process
        )
        engine = RolloutEngine(env_factory, model.sampler, rollout_config)
        trajectories = engine.run(group_tasks(seeds, config.group_size))
        weight = config.guidance_weight(step)
        shaped = lambda t: shaped_return(config.trajectory_return(t), assessment_labels(t), weight,  # noqa: E731
                                         config.guidance_form)
        sampled_steps, refills = sum(t.num_steps for t in trajectories), 0
        if config.dynamic_sampling:
            # DAPO: refill the batch with informative groups of fresh tasks (ids stay unique:
            # each round samples under its own range of sample numbers).
            stride = max(1, len(train_seeds) // (config.max_refills + 1))
            more = (workers.shard([train_seeds[(cursor + r * stride + i) % len(train_seeds)]
                                   for i in range(config.tasks_per_update)]) for r in range(1, config.max_refills + 1))
            trajectories, sampled_steps, refills = refill_informative_groups(
                engine, trajectories, more, config.group_size, shaped)
        rollout_s = time.perf_counter() - t0

        # -- reward (Self-Guide: + λ(u)·Σ_t r_t) and group-relative advantage ----------------
        env_returns = [config.trajectory_return(t) for t in trajectories]
        values = [shaped(t) for t in trajectories]
        returns = torch.tensor(values).view(len(seeds), config.group_size)
        # The configured estimator (advantage_estimator): one advantage per trajectory, or per step.
        advantages = config.advantages(trajectories, values, [i // config.group_size for i in range(len(values))])
        # DAPO: a group whose returns are all equal has no signal; leaving it out of the
        # batch keeps it from diluting the loss normalisation of the groups that have.
        kept_groups = torch.ones(len(seeds), dtype=torch.bool)
        if config.drop_zero_variance:
            kept_groups &= nonzero_variance_groups(returns)
        if config.keep_top_spread < 1.0:
            # RAGEN: only the groups of largest spread train (each process filters its own groups).
            kept_groups &= top_spread_groups(returns, config.keep_top_spread)
        trained = kept_groups.repeat_interleave(config.group_size).tolist()

        # -- loss and step: every generation of a turn (its action, and its self-assessment
        #    with Self-Guide) takes that turn's advantage: the trajectory's, or its step's -------
        run.phase("update")
        t1 = time.perf_counter()
        sequences, sequence_adv = [], []
        # With full history a trajectory trains as one sequence (its context encoded once)
        # where that is exact: one advantage and one loss unit for all its turns.
        whole_episode = (config.shared_tokens and advantages.steps is None and rollout_config.pre_action is None
                         and config.aggregation in (Aggregation.TOKEN_MEAN, Aggregation.TRAJECTORY_MEAN))
        for index, (trajectory, train) in enumerate(zip(trajectories, trained)):
            if not train:
                continue
            generated = policy_sequences(trajectory, model.backend.tokenizer, rollout_config.prompt_builder(),
                                         whole_episode)
            if rollout_config.pre_action is not None:
                generated += assessment_sequences(trajectory, model.backend.tokenizer, rollout_config.pre_action)
            sequences += generated
            sequence_adv += [advantages.at(index, sequence.turns) for sequence in generated]
        stats = policy_gradient_update(model, sequences, sequence_adv, optimizer, scheduler, settings, workers)
        update_s = time.perf_counter() - t1

        # -- log ------------------------------------------------------------------------------
        annotated = []
        for index, (trajectory, value, env_return) in enumerate(zip(trajectories, returns.flatten().tolist(),
                                                                    env_returns)):
            meta = {"update": step, "grpo": {"return": value, "advantage": float(advantages.trajectory[index])}}
            if advantages.steps is not None:
                meta["grpo"]["step_advantages"] = advantages.steps[index].tolist()
            if config.self_guide:
                meta["selfguide"] = {"lambda": weight, "env_return": env_return,
                                     "assessment_sum": assessment_sum(trajectory), "return": value}
            annotated.append(trajectory.with_meta(**meta))
        trajectories = workers.gather(annotated)
        # Groups whose env returns tie but whose shaped returns do not: they train on the
        # self-assessments alone, at the advantage scale of a success gap.
        guided_only = workers.gather(guidance_only_groups(
            torch.tensor(env_returns).view_as(returns), returns).tolist())
        returns = torch.tensor(workers.gather(returns.tolist()))
        # Every episode sampled counts, also those dynamic sampling left out of the batch.
        run.env_steps += int(workers.sum([sampled_steps])[0])
        run.write("train", trajectories)
        rollout = summarize(trajectories)
        row = {
            "rollout/success_rate": rollout.success_rate,
            "rollout/score_mean": rollout.mean_score,
            "rollout/steps_mean": rollout.mean_steps,
            "rollout/invalid_rate": rollout.invalid_rate,
            "rollout/zero_variance_groups": float((~nonzero_variance_groups(returns)).float().mean()),
            # The collapse alarm watches it fall (diagnostics/health.py): mean within-group spread.
            "rollout/return_spread": float(returns.std(dim=1, unbiased=False).mean()),
            "rollout/env_steps": run.env_steps,
            **({"rollout/refills": refills} if config.dynamic_sampling else {}),
            **live_tide_metrics(trajectories),
            **prefill_metrics(model.sampler, prefill_before),
            "timing/rollout_s": rollout_s,
            "timing/update_s": update_s,
        }
        if advantages.steps is not None:
            # GiGPO: how much of the batch its step groups reach, and how often they contrast a
            # step with its episode instead of echoing it (docs/training.md, GiGPO).
            parts = step_parts(advantages)
            row["advantage/step_part_share"] = parts.share
            row["advantage/step_part_first_turn"] = parts.first_turn_share
            row["advantage/step_part_opposing"] = parts.opposing_share
        if config.self_guide:
            row.update(selfguide_metrics(trajectories, weight))
            row["selfguide/guidance_only_groups"] = sum(guided_only) / max(1, len(guided_only))
        if stats is not None:
            row.update({
                **update_metrics("policy", stats, scheduler.get_last_lr()[0]),
                "timing/forward_backward_s": stats.forward_backward_s,
                "throughput/update_tokens_per_s": stats.tokens * config.epochs / max(stats.seconds, 1e-9),
                **redundancy_metrics(stats),
            })
        run.end_step(step, row, f"rollout {rollout_s:.0f}s · update {update_s:.0f}s · "
                                f"train success {rollout.success_rate:.2f}")

    final = {"selfguide/lambda": config.guidance_weight(config.updates)} if config.self_guide else {}
    return run.finish(final_row=final, updates=config.updates, env_steps=run.env_steps)


def group_tasks(seeds: Sequence[int], group_size: int, first_sample: int = 0) -> list[Task]:
    """G tasks per seed, task by task (rows of a group-returns matrix)."""
    return [Task(seed=s, sample=first_sample + j) for s in seeds for j in range(group_size)]


def refill_informative_groups(
    engine: RolloutEngine, trajectories: Sequence[Trajectory], refills: Iterable[Sequence[int]], group_size: int,
    value: Callable[[Trajectory], float],
) -> tuple[list[Trajectory], int, int]:
    """DAPO's dynamic sampling: keep drawing groups until the batch holds as many informative ones as it has groups.

    `trajectories` are the update's groups, task by task; `refills` yields the seeds of
    each further round. A group is informative when its returns (`value`) are not all
    equal. The batch is the first informative groups in sampling order, then, if the
    rounds ran out, uninformative ones, so its size never changes. Returns (the batch,
    group by group; the env steps of every episode sampled; the rounds drawn).
    """
    wanted = len(trajectories) // group_size
    groups = [list(trajectories[i : i + group_size]) for i in range(0, len(trajectories), group_size)]
    informative = lambda group: len({value(t) for t in group}) > 1  # noqa: E731
    env_steps, rounds = sum(t.num_steps for t in trajectories), 0
    for seeds in refills:
        if sum(map(informative, groups)) >= wanted:
            break
        rounds += 1
        more = engine.run(group_tasks(seeds, group_size, first_sample=rounds * group_size))
        env_steps += sum(t.num_steps for t in more)
        groups += [more[i : i + group_size] for i in range(0, len(more), group_size)]
    batch = ([g for g in groups if informative(g)] + [g for g in groups if not informative(g)])[:wanted]
    return [t for group in batch for t in group], env_steps, rounds


def assessment_labels(trajectory: Trajectory) -> list[str]:
    """The labels of a trajectory's self-assessments (none without Self-Guide)."""
    return [step.assessment.label for step in trajectory.steps
            if step.assessment is not None and step.assessment.label is not None]


def assessment_sum(trajectory: Trajectory) -> float:
    """Σ_t r_t of a trajectory's self-assessments."""
    return sum(step.assessment.reward for step in trajectory.steps if step.assessment is not None)


def selfguide_metrics(trajectories: Sequence[Trajectory], weight: float) -> dict[str, float]:
    """The label mix, parse failures and, where the environment has a planner, agreement with the oracle."""
    from hindsight.agent.selfguide import label_agreement

    assessments = [step.assessment for t in trajectories for step in t.steps if step.assessment is not None]
    count = max(1, len(assessments))
    row = {
        "selfguide/lambda": weight,
        "selfguide/assessments": len(assessments),
        "selfguide/label_parse_failures": sum(a.parse_error is not None for a in assessments),
        "selfguide/assessment_sum_mean": sum(map(assessment_sum, trajectories)) / max(1, len(trajectories)),
        **{f"selfguide/{label}_rate": sum(a.label == label for a in assessments) / count
           for label in ("positive", "neutral", "negative")},
    }
    try:
        pairs = [label_agreement(t) for t in trajectories]
    except NotImplementedError:  # an environment without a planner
        return row
    compared = sum(c for _, c in pairs)
    if compared:
        row["selfguide/label_agreement"] = sum(a for a, _ in pairs) / compared
    return row
