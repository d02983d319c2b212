"""ECHO: a policy and a critic that learn together by dual-track GRPO.

One update, top to bottom (the paper's Algorithm 1):

    tasks    next `tasks_per_update` train seeds from `train_seed_start` (a cursor, saved in checkpoints)
    stage 0  one initial attempt τ_o per task from the policy; s_o = its return
    stage 1  N critiques of every τ_o, all in one generate call of the critic; a critique
             sees the scoring criteria, the task, each turn with the env's reply and s_o
    stage 2  N refinements per task: the policy starts the same task instance again from
             scratch with critique j in its system prompt; s_r^j = its return
    rewards  critic reward r_c^j = gain(s_o, s_r^j): saturation-aware
             ln((1 − s_o + η) / (1 − s_r + η)) or linear s_r − s_o; negative gains × λ
    adv      A_P = s_r normalised within each group of N; A_C = r_c normalised likewise (the
             config's advantage_estimator; gigpo adds step-level advantages to A_P)
    update   the policy adapter on the refinements' turns (prompts include the critique)
             with A_P, the critic adapter on its critiques with A_C: each its own optimizer
             and schedule, the clipped GRPO objective and the k3 KL to the base model or,
             with kl_reference: init, to the weights each role started from; the
             same batch, the same step
    log      metrics.jsonl row (`tide/…` over the refinements); every refinement with its `echo` object (train.jsonl);
             the initial attempts (initial.jsonl)
    eval     the policy alone on the validation split, optionally followed by one
             critique-and-refine round (`eval_with_critic`)
    save     checkpoint with both adapters and both optimizers (exact resume)

The switches are the paper's ablations and baselines: `critic` (a trained adapter, the
rule-based `template` critic, or any model spec, frozen), `freeze_critic`, `gain: linear`
and `no_critic` (N plain re-attempts instead of refinements). The paper's Table 5 at a
checkpoint (critic-guided refinement against plain regeneration) is in `echo_compare.py`.

Under `accelerate launch` the tasks of each update are dealt out to the processes. Each
runs its tasks' whole cascades (attempt, critiques, refinements), so both groupings (the
N refinements of A_P, the N critiques of A_C) stay on one process; each track's update
sums its gradients over the processes (`hindsight.train.distributed`). The cascades are
then gathered, so every metric is over the whole batch; process 0 logs, evaluates and saves.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from hindsight.agent.critic import CRITICS, Critic, Critique, critic_name, parse_critique, template_critique
from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.evaluate import EvalSummary, summarize
from hindsight.agent.prompts import PromptBuilder
from hindsight.envs.contract import Env
from hindsight.algos.echo import Gain, critic_rewards, improvement_rate, mean_gain, near_ceiling_improvements
from hindsight.algos.advantages import Advantages
from hindsight.algos.grpo import nonzero_variance_groups
from hindsight.configs import option
from hindsight.diagnostics.live import live_tide_metrics
from hindsight.logs import RunDir, read_trajectories
from hindsight.methods.basics import CriticView, EvalSettings, PolicyGradientBasics
from hindsight.methods.lifecycle import Evaluator, TrainingRun, evaluate_trainable
from hindsight.methods.metrics import (
    eval_metrics,
    prefill_counts,
    prefill_metrics,
    redundancy_metrics,
    update_metrics,
)
from hindsight.methods.model_setup import load_latest, load_trainable, make_optimizer
from hindsight.methods.registry import training_method
from hindsight.roles import parse_role, resolve
from hindsight.train.distributed import Workers
from hindsight.train.model import TrainableModel
from hindsight.train.sequences import TrainingSequence, reply_ids, reply_sequence, turn_sequences
from hindsight.train.update import policy_gradient_update
from hindsight.types import SamplingParams, Trajectory

# Model specs that can write critiques (oracle and random only act in environments).
_CRITIC_PROVIDERS = ("smollm2", "hf", "openai", "scripted")


@dataclass(frozen=True)
class ECHOConfig(PolicyGradientBasics, CriticView):
    critic: str = option("adapter", "who writes critiques: adapter (a second LoRA adapter on the policy's base model, "
                                    "trained), template (rule-based oracle comparison) or a model spec such as "
                                    "openai:NAME, hf:PATH or smollm2+ADAPTER (frozen)")
    critic_init_from: str = option("", "what initialises the critic adapter: a run directory whose latest checkpoint "
                                       "holds a critic adapter (e.g. a critic-sft run), a PEFT adapter folder, a "
                                       "bundled adapter name or an adapter spec BASE+ADAPTER")
    freeze_critic: bool = option(False, "never update the critic (the paper's 'w/o evolving' ablation)")
    no_critic: bool = option(False, "baseline: N plain re-attempts instead of critique-guided refinements")
    gain: str = option("sa", "critic reward: sa (saturation-aware, ln((1 − s_o + η)/(1 − s_r + η))) "
                             "or linear (s_r − s_o)")
    eta: float = option(0.1, "η of the saturation-aware gain (> 0)")
    negative_weight: float = option(1.0, "λ: weight of negative gains in the critic reward")
    critic_lr: float = option(2e-5, "peak learning rate of the critic adapter")
    critic_temperature: float = option(1.0, "sampling temperature of critiques in training")
    critic_max_new_tokens: int = option(128, "token budget of one critic answer (reasoning + critique)")
    near_ceiling: float = option(0.6, "initial scores from this value up to 1 (excluded) count as near the ceiling "
                                      "in the echo/near_ceiling_* metrics (0.6 includes 2 of 3 blocks in place)")
    eval_with_critic: bool = option(False, "after each evaluation of the policy alone, also run one "
                                           "critique-and-refine round on the same tasks")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gain not in {g.value for g in Gain}:
            raise ValueError(f"gain must be 'sa' or 'linear', not {self.gain!r}")
        if self.eta <= 0:
            raise ValueError("eta must be > 0")
        if self.negative_weight < 0:
            raise ValueError("negative_weight must be >= 0")
        critic = parse_role("critic", self.critic, ("adapter", "template", "backend"))
        if critic.kind == "adapter" and critic.source:
            raise ValueError("critic: ECHO trains its critic adapter; start it from a source with critic_init_from "
                             "(and freeze_critic: true to keep it fixed)")
        if critic.kind == "backend":
            from hindsight.llm import parse_spec

            if parse_spec(critic.source).provider not in _CRITIC_PROVIDERS:
                raise ValueError(f"critic {self.critic!r} cannot write critiques; use adapter, template or a "
                                 "language-model spec")
        if self.critic_init_from and self.critic != "adapter":
            raise ValueError("critic_init_from needs critic: adapter")
        if self.uses_adapter_critic and self.full_finetune:
            raise ValueError("a critic adapter needs LoRA; set full_finetune: false or choose another critic")
        if self.self_guide:
            raise ValueError("self_guide is a GRPO switch (hindsight train grpo); ECHO does not train self-assessments")
        if self.critic_hints and (self.critic == "template" or self.no_critic):
            raise ValueError("critic_hints are shown to a model critic, not to the template critic or no_critic")
        self.check_critic_hints(self.env)

    @property
    def uses_adapter_critic(self) -> bool:
        return self.critic == "adapter" and not self.no_critic

    @property
    def trains_critic(self) -> bool:
        return self.uses_adapter_critic and not self.freeze_critic

    def critic_sampling(self, temperature: float, seed: int) -> SamplingParams:
        return SamplingParams(temperature=temperature, max_new_tokens=self.critic_max_new_tokens, seed=seed)


def build_critic(config: ECHOConfig, model: TrainableModel, criteria: str) -> Critic:
    """The critic the config asks for (the adapter critic writes with `model`)."""
    name = critic_name(config.critic, no_critic=config.no_critic)
    if name != "model":
        return CRITICS.get(name)(None, None, name)
    prompt = config.critic_prompt(criteria, config.rollout_config(SamplingParams(), "train").prompt_builder())
    role = parse_role("critic", config.critic)
    # The adapter critic is the model's own "critic" adapter, switched on while it writes.
    return CRITICS.get(name)(resolve(role, model), prompt, "adapter" if role.kind == "adapter" else "")


def load_echo_model(config: ECHOConfig) -> TrainableModel:
    """The policy (and the critic adapter, when there is one) with their starting weights."""
    roles = ("policy", "critic") if config.uses_adapter_critic else ("policy",)
    model = load_trainable(config.model, roles, config.lora_rank, config.lora_alpha, config.full_finetune,
                           config.gradient_checkpointing, config.dtype)
    if config.init_from:
        load_latest(model, config.init_from, "policy" if model.lora is not None else None)
        if config.kl_reference == "init":
            model.freeze_reference(config.init_from, "policy")
    if config.critic_init_from:
        load_latest(model, config.critic_init_from, "critic")
        # Without a critic warm start the critic adapter starts at zero, i.e. at the base model,
        # which is then its reference already.
        if config.kl_reference == "init":
            model.freeze_reference(config.critic_init_from, "critic")
    return model


def refine(
    engine: RolloutEngine, attempts: Sequence[Trajectory], critiques: Sequence[Sequence[Critique]],
    groups: Sequence[str],
) -> list[list[Trajectory]]:
    """Stage 2: each attempt's task instance again from the start, once per critique.

    Refinement j of an attempt shows critique j's advice as guidance (no advice: a plain
    re-attempt). Returns [attempt][j], each carrying `echo` = {group, sample, critique…}.
    """
    tasks = []
    for attempt, group, row in zip(attempts, groups, critiques, strict=True):
        for j, critique in enumerate(row):
            echo = {"group": group, "sample": j, "critique": critique.parsed.critique,
                    "critic_output": critique.output, "critique_parse_error": critique.parsed.parse_error}
            tasks.append(Task(seed=attempt.seed, sample=1 + j, guidance=critique.advice, meta={"echo": echo}))
    finished = iter(engine.run(tasks))
    return [[next(finished) for _ in row] for row in critiques]


@dataclass(frozen=True)
class EchoScores:
    """The numbers of one batch of cascades. Q = attempts, N = refinements of each.

    initial: [Q] s_o; refined: [Q, N] s_r; critic_rewards: [Q, N] r_c;
    policy_advantages: [Q, N] A_P (s_r normalised per group); critic_advantages: [Q, N]
    A_C (r_c normalised per group); policy: the estimator's output over the Q·N refinements,
    row by row, with per-step advantages when the config's advantage_estimator gives them.
    """

    initial: torch.Tensor
    refined: torch.Tensor
    critic_rewards: torch.Tensor
    policy_advantages: torch.Tensor
    critic_advantages: torch.Tensor
    policy: Advantages

    @classmethod
    def compute(cls, config: ECHOConfig, attempts: Sequence[Trajectory],
                refinements: Sequence[Sequence[Trajectory]]) -> EchoScores:
        # float64, so that the logged s_o and s_r are the environment's scores to the last digit.
        initial = torch.tensor([config.trajectory_return(t) for t in attempts], dtype=torch.float64)
        refined = torch.tensor([[config.trajectory_return(t) for t in row] for row in refinements],
                               dtype=torch.float64)
        rewards = critic_rewards(initial, refined, gain=Gain(config.gain), eta=config.eta,
                                 negative_weight=config.negative_weight)
        policy = config.advantages([t for row in refinements for t in row], refined.flatten().tolist(),
                                   [q for q, row in enumerate(refinements) for _ in row])
        return cls(initial, refined, rewards, policy.trajectory.view_as(refined), config.matrix_advantages(rewards),
                   policy)

    def annotate(self, config: ECHOConfig, refinements: Sequence[Sequence[Trajectory]], critic: str,
                 **meta: Any) -> list[Trajectory]:
        """The refinements, flattened, each with its complete `echo` object (and `meta`)."""
        out = []
        for q, row in enumerate(refinements):
            for j, trajectory in enumerate(row):
                echo = {
                    **trajectory.meta["echo"], "critic": critic, "s_o": float(self.initial[q]),
                    "s_r": float(self.refined[q, j]), "eta": config.eta, "gain": config.gain,
                    "negative_weight": config.negative_weight, "critic_reward": float(self.critic_rewards[q, j]),
                    "critic_advantage": float(self.critic_advantages[q, j]),
                    "policy_advantage": float(self.policy_advantages[q, j]),
                }
                out.append(trajectory.with_meta(echo=echo, **meta))
        return out


def critique_tokens(critique: Critique, tokenizer: Any) -> int:
    """Length of the critic's answer in tokens (counted with the policy's tokenizer when unknown)."""
    if critique.token_ids is not None:
        return len(critique.token_ids)
    return len(tokenizer.encode(critique.output, add_special_tokens=False)) if critique.output else 0


def critique_metrics(
    attempts: Sequence[Trajectory], critiques: Sequence[Sequence[Critique]], scores: EchoScores, tokenizer: Any,
) -> dict[str, float]:
    flat = [c for row in critiques for c in row]
    # How often the critic says what the oracle-based template critic says about the same
    # attempt: a check of critique quality that needs no policy in the loop.
    templates = [parse_critique(template_critique(attempt)).critique for attempt in attempts]
    matches = [c.parsed.critique == template for row, template in zip(critiques, templates) for c in row]
    return {
        "critic/template_match_rate": sum(matches) / len(matches),
        "critic/reward_mean": float(scores.critic_rewards.mean()),
        "critic/reward_std": float(scores.critic_rewards.std(unbiased=False)),
        "critic/critique_tokens_mean": sum(critique_tokens(c, tokenizer) for c in flat) / len(flat),
        "critic/critique_words_mean": sum(len(c.parsed.critique.split()) for c in flat) / len(flat),
        "critic/malformed_rate": sum(c.parsed.parse_error is not None for c in flat) / len(flat),
        "critic/none_rate": sum(bool(c.parsed.critique) and not c.advice for c in flat) / len(flat),
    }


def policy_sequences(
    refinements: Sequence[Sequence[Trajectory]], advantages: Advantages, tokenizer: Any, prompts: PromptBuilder,
) -> tuple[list[TrainingSequence], list[float]]:
    """Every turn of every refinement with its A_P (`advantages` over the refinements, row by
    row: the trajectory's, or the turn's with a step-level estimator). The prompts are rebuilt
    with the trajectory's guidance, so the policy learns from exactly what it saw: the critique."""
    sequences, values = [], []
    trajectories = [trajectory for group in refinements for trajectory in group]
    for index, trajectory in enumerate(trajectories):
        for sequence in turn_sequences(trajectory, tokenizer, prompts):
            sequences.append(sequence)
            values.append(advantages.at(index, sequence.turns))
    return sequences, values


def critic_sequences(
    critiques: Sequence[Sequence[Critique]], advantages: torch.Tensor, tokenizer: Any,
) -> tuple[list[TrainingSequence], list[float]]:
    """Training sequences of the critic's own answers with A_C; answers a backend failed to produce are left out."""
    sequences, values = [], []
    for q, row in enumerate(critiques):
        for j, critique in enumerate(row):
            if critique.generated:
                response = reply_ids(tokenizer, critique.output, critique.token_ids, critique.finish_reason)
                sequences.append(reply_sequence(tokenizer, critique.prompt, response, f"critique:{q}:{j}"))
                values.append(float(advantages[q, j]))
    return sequences, values


@training_method("echo", ECHOConfig, help="ECHO: a policy and a critic learning together by dual-track GRPO")
def train_echo(config: ECHOConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    workers = Workers.current()
    run = TrainingRun("echo", ECHOConfig, config, out, resume=resume, workers=workers)
    config = run.config
    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    train_seeds = config.train_seeds(env_factory())
    workers.require_groups(config.tasks_per_update)

    model = load_echo_model(config)
    critic = build_critic(config, model, env_factory().criteria)
    prompts = config.rollout_config(SamplingParams(), "train").prompt_builder()
    total_steps = config.updates * config.epochs
    optimizers, schedulers = {}, {}
    optimizers["policy"], schedulers["policy"] = make_optimizer(
        model.parameters("policy"), config.lr, config.weight_decay, config.warmup_steps, total_steps)
    if config.trains_critic:
        optimizers["critic"], schedulers["critic"] = make_optimizer(
            model.parameters("critic"), config.critic_lr, config.weight_decay, config.warmup_steps, total_steps)
    settings = config.update_settings()
    tokenizer = model.backend.tokenizer
    run.begin(model, optimizers, schedulers, config.schedule(), logs=("train", "initial"),
              evaluate=echo_evaluator(config, critic, model, run.dir))

    for step in run.steps(config.updates, "echo", with_first_eval={"rollout/env_steps": 0}):
        prefill_before = prefill_counts(model.sampler)
        cursor = (step - 1) * config.tasks_per_update
        seeds = workers.shard(train_seeds[cursor : cursor + config.tasks_per_update])
        groups = [f"{step}:{seed}" for seed in seeds]
        # Each stage samples from its own seed range, derived from the run seed and the update
        # (and the process: each draws its own noise).
        sampling_seed = config.seed * 1_000_003 + step * 10_000 + 100 * workers.rank

        # -- stage 0: one initial attempt per task --------------------------------------------
        run.phase("policy rollout")
        t0 = time.perf_counter()
        attempts = policy_engine(config, env_factory, model, sampling_seed).run(Task(seed=s) for s in seeds)
        policy_rollout_s = time.perf_counter() - t0

        # -- stage 1: N critiques of each attempt, one generate call --------------------------
        run.phase("critic")
        t1 = time.perf_counter()
        critiques = critic.critique(attempts, config.group_size,
                                    config.critic_sampling(config.critic_temperature, sampling_seed + 5_000))
        critic_rollout_s = time.perf_counter() - t1

        # -- stage 2: N refinements, each restarting its task with one critique ----------------
        run.phase("refine")
        t2 = time.perf_counter()
        refinements = refine(policy_engine(config, env_factory, model, sampling_seed + 2_500),
                             attempts, critiques, groups)
        refine_s = time.perf_counter() - t2

        # -- rewards: s_o, s_r, the critic's gain r_c, advantages A_P and A_C ------------------
        scores = EchoScores.compute(config, attempts, refinements)

        # -- update both tracks on the same batch: policy on refinements, critic on critiques --
        run.phase("update")
        t3 = time.perf_counter()
        policy_seqs, policy_advs = policy_sequences(refinements, scores.policy, tokenizer, prompts)
        policy_stats = policy_gradient_update(model, policy_seqs, policy_advs, optimizers["policy"],
                                              schedulers["policy"], settings, workers)
        policy_update_s = time.perf_counter() - t3
        critic_stats = None
        if config.trains_critic:
            critic_seqs, critic_advs = critic_sequences(critiques, scores.critic_advantages, tokenizer)
            with model.role("critic"):
                critic_stats = policy_gradient_update(model, critic_seqs, critic_advs, optimizers["critic"],
                                                      schedulers["critic"], settings, workers)
        update_s = time.perf_counter() - t3

        # -- log: the cascades of every process, so the metrics are those of the whole batch --
        attempts, critiques, refinements, groups = (
            workers.gather(part) for part in (attempts, critiques, refinements, groups))
        scores = EchoScores.compute(config, attempts, refinements)
        run.env_steps += sum(t.num_steps for t in attempts) + sum(t.num_steps for group in refinements for t in group)
        run.write("initial", (attempt.with_meta(update=step, echo={"group": group, "s_o": s_o})
                              for attempt, group, s_o in zip(attempts, groups, scores.initial.tolist())))
        run.write("train", scores.annotate(config, refinements, critic.name, update=step))
        near_pairs, near_improved = near_ceiling_improvements(scores.initial, scores.refined, config.near_ceiling)
        initial_summary = summarize(attempts)
        refined_summary = summarize(t for group in refinements for t in group)
        row = {
            "rollout/initial_success_rate": initial_summary.success_rate,
            "rollout/initial_score_mean": initial_summary.mean_score,
            "rollout/refined_success_rate": refined_summary.success_rate,
            "rollout/refined_score_mean": refined_summary.mean_score,
            "rollout/refined_steps_mean": refined_summary.mean_steps,
            "rollout/refined_invalid_rate": refined_summary.invalid_rate,
            "rollout/zero_variance_groups": float((~nonzero_variance_groups(scores.refined)).float().mean()),
            "rollout/env_steps": run.env_steps,
            # The trajectories trained on (and written to train.jsonl): the refinements.
            **live_tide_metrics(t for group in refinements for t in group),
            "echo/improvement_rate": improvement_rate(scores.initial, scores.refined),
            # A regression is an improvement of the negated scores.
            "echo/regression_rate": improvement_rate(-scores.initial, -scores.refined),
            "echo/gain_mean": mean_gain(scores.initial, scores.refined),
            "echo/near_ceiling_pairs": near_pairs,
            "echo/near_ceiling_improvements": near_improved,
            **critique_metrics(attempts, critiques, scores, tokenizer),
            "timing/policy_rollout_s": policy_rollout_s,
            "timing/critic_rollout_s": critic_rollout_s,
            "timing/refine_s": refine_s,
            "timing/policy_update_s": policy_update_s,
            "timing/critic_update_s": update_s - policy_update_s,
            "timing/update_s": update_s,
        }
        if policy_stats is not None:
            row.update(update_metrics("policy", policy_stats, schedulers["policy"].get_last_lr()[0]))
        if critic_stats is not None:
            row.update(update_metrics("critic", critic_stats, schedulers["critic"].get_last_lr()[0]))
        row.update(redundancy_metrics(policy_stats, critic_stats))
        row.update(prefill_metrics(model.sampler, prefill_before))  # attempts, critiques and refinements
        run.end_step(step, row, f"policy {policy_rollout_s:.0f}s · critic {critic_rollout_s:.0f}s · "
                                f"refine {refine_s:.0f}s · update {update_s:.0f}s · "
                                f"s_o {float(scores.initial.mean()):.2f} → s_r {float(scores.refined.mean()):.2f}")

    return run.finish(updates=config.updates, env_steps=run.env_steps)


def echo_evaluator(config: ECHOConfig, critic: Critic, model: TrainableModel, run: RunDir) -> Evaluator:
    """The policy alone, then (with eval_with_critic) one critique-and-refine round on the same tasks."""
    settings = config.eval_settings()

    def evaluate(split: str, episodes: int, name: str, prefix: str) -> tuple[dict[str, float], dict[str, Any]]:
        summary = evaluate_trainable(model, settings, split, episodes, run, name, config.seed)
        row, result = eval_metrics(prefix, summary), asdict(summary)
        if config.eval_with_critic:
            refined, gain = evaluate_with_critic(config, critic, model, settings, run, name)
            row.update({**eval_metrics(f"{prefix}_refined", refined), f"{prefix}_refined/gain_mean": gain})
            result.update(refined=asdict(refined), refined_gain_mean=gain)
        return row, result

    return evaluate


def policy_engine(config: ECHOConfig, env_factory: Callable[[], Env], model: TrainableModel,
                  seed: int) -> RolloutEngine:
    """The pooled engine that samples training episodes from the policy."""
    sampling = SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    return RolloutEngine(env_factory, model.sampler, config.rollout_config(sampling, "train", seed=seed))


def evaluate_with_critic(
    config: ECHOConfig, critic: Critic, model: TrainableModel, settings: EvalSettings, run: RunDir, name: str,
) -> tuple[EvalSummary, float]:
    """One critique-and-refine round on the attempts of evaluation `name` (the policy alone, already run).

    Each attempt gets one critique (at the evaluation temperature) and one refinement,
    written to `{name}-refined.jsonl`. Returns their summary and the mean gain s_r − s_o.
    """
    from hindsight.envs import make

    started = time.perf_counter()
    attempts = list(read_trajectories(run.trajectories_dir / f"{name}.jsonl"))
    critiques = critic.critique(attempts, 1, config.critic_sampling(config.eval_temperature, config.seed))
    rollout = replace(settings.rollout, seed=config.seed, split=attempts[0].split if attempts else "validation")
    engine = RolloutEngine(lambda: make(settings.env, **settings.env_kwargs), model.sampler, rollout)
    refinements = refine(engine, attempts, critiques, [attempt.id for attempt in attempts])
    scores = EchoScores.compute(config, attempts, refinements)
    run.replace_trajectories(f"{name}-refined", scores.annotate(config, refinements, critic.name), env=settings.env,
                             split=rollout.split)
    summary = summarize((t for row in refinements for t in row), time.perf_counter() - started)
    return summary, mean_gain(scores.initial, scores.refined)
