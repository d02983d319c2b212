"""The config fields the training methods share, and when a run evaluates and saves.

Each method's config dataclass extends one of these: `SupervisedBasics` (behaviour
cloning) or `PolicyGradientBasics` (GRPO, ECHO, Self-Guide); the configs with a critic
also take `CriticView`. A field is documented once, here, where it is declared.
"""

from __future__ import annotations

import shlex
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from hindsight.agent.critic import CriticPrompt
from hindsight.agent.engine import PreActionWriter, RolloutConfig
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, Memory, PromptBuilder
from hindsight.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageOptions, Advantages, GroupBatch
from hindsight.algos.grpo import LOSS_AGGREGATIONS, STD_CONVENTIONS
from hindsight.configs import option
from hindsight.envs.contract import SPLITS, Env
from hindsight.llm.hf import WEIGHT_DTYPES
from hindsight.train.update import UpdateSettings
from hindsight.types import SamplingParams, Trajectory


def check_split(key: str, split: str, *, optional: bool = False) -> None:
    """Refuse an unknown split name when the config is read, not after training reaches its evaluation."""
    if (optional and split == "") or split in SPLITS:
        return
    skip = " or '' to skip it" if optional else ""
    raise ValueError(f"{key} must be one of {', '.join(SPLITS)}{skip}, not {split!r}")


@dataclass(frozen=True)
class Schedule:
    """When a run evaluates and saves, in units of its loop (updates or optimizer steps).

    `eval_every` 0 means no evaluation during the run, nor before the first unit; an empty
    `final_split` skips the evaluation after the last unit. `stop_on_collapse` ends the run
    after a unit at which the collapse alarm (diagnostics/health.py) fired.
    """

    checkpoint_every: int
    keep_checkpoints: int
    eval_every: int = 0
    eval_episodes: int = 0
    final_split: str = ""
    final_episodes: int = 0
    stop_on_collapse: bool = False


@dataclass(frozen=True)
class TrainingBasics:
    """Config fields every training method shares (each method's config extends it)."""

    env: str = option("frozenlake", "environment id")
    env_kwargs: dict = option({}, "environment options, e.g. {size: 4, max_steps: 8}")
    eval_env_kwargs: dict = option({}, "environment options that evaluations set over env_kwargs, e.g. {p_hole: 0.2} "
                                       "to train on harder maps and test on the usual ones (the splits stay disjoint: "
                                       "a map's split follows from its content)")
    model: str = option("smollm2", "base model spec (smollm2 or hf:PATH)")
    dtype: str = option("auto", "dtype of the frozen base weights: auto (float32 on a CPU, bfloat16 on a GPU that "
                                "has it), float32 or bfloat16 (about 1.5x faster on a CPU with AVX512-BF16 or "
                                "AMX, see docs/results.md); LoRA weights train in float32 either way")
    memory: str = option("none", "history the policy sees: full, none or a number of turns")
    system_prompt: str = option("", "system prompt ({instruction} = the env's rules); empty = the default")
    max_new_tokens: int = option(48, "token budget per turn")
    concurrency: int = option(64, "episodes run at once (rollout and evaluation batch size)")
    eval_temperature: float = option(0.0, "sampling temperature of evaluations (0 is greedy)")
    weight_decay: float = option(0.0, "AdamW weight decay")
    max_grad_norm: float = option(1.0, "gradient clipping norm")
    shared_tokens: bool = option(True, "encode the prefix a micro-batch's sequences share (system prompt, instruction, "
                                       "a group's identical prompts) once, with the same log-probs and gradients; "
                                       "false pushes every sequence whole (docs/training.md); TRL's DPO computes its "
                                       "own forward and ignores it")
    lora_rank: int = option(16, "LoRA rank (must match a checkpoint the run starts from)")
    lora_alpha: int = option(32, "LoRA alpha (must match a checkpoint the run starts from)")
    full_finetune: bool = option(False, "train all weights instead of a LoRA adapter")
    seed: int = option(0, "seed of sampling and data order")
    keep_checkpoints: int = option(2, "newest checkpoints kept on disk (0 keeps every one)")
    tensorboard: bool = option(False, "mirror metrics to TensorBoard (in the run's tensorboard/ folder)")
    wandb_project: str = option("", "mirror metrics and the config to this Weights & Biases project "
                                    "(needs `pip install wandb`; WANDB_MODE=offline works without a network)")
    self_guide: bool = option(False, "Self-Guide: before each action the policy writes a self-assessment of its "
                                     "latest step (a reason and a label), shown in its action prompt; training "
                                     "methods train it with the action")
    assessment_max_new_tokens: int = option(48, "token budget of one self-assessment (self_guide)")
    rollout_server: str = option("", "an OpenAI-compatible server with runtime LoRA loading (vLLM) that samples "
                                     "every rollout and evaluation from the trained adapters: its base URL "
                                     "(http://HOST:8000/v1), or vllm to start one on the base model; empty = the "
                                     "in-process model")
    rollout_server_tolerance: float = option(0.02, "largest mean gap between the server's (or a model replica's) "
                                                   "and the trainer's log-probs of the probe tokens, |server − "
                                                   "trainer| / (1 + |log p|), before a sync counts as failed and the "
                                                   "run stops")
    rollout_server_args: str = option("--gpu-memory-utilization 0.5", "more `vllm serve` arguments for rollout_server: "
                                                                      "vllm (the default leaves the trainer half of "
                                                                      "the GPU it shares with the server)")
    model_workers: int = option(0, "model replicas in Ray actors (`pip install -e .[ray]`) that sample every rollout "
                                   "and evaluation, each batch split over them, from the trained adapters pushed to "
                                   "them after every update; 0 = the in-process model")
    model_worker_gpus: float = option(0.0, "GPUs each model replica reserves (a fraction shares one; 0 runs the "
                                           "replicas on CPU)")

    def __post_init__(self) -> None:
        Memory.parse(self.memory)
        if self.dtype not in WEIGHT_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(WEIGHT_DTYPES)}, not {self.dtype!r}")
        if self.dtype == "bfloat16" and self.full_finetune:
            raise ValueError("dtype: bfloat16 keeps the trained LoRA weights in float32; with full_finetune: true "
                             "the bfloat16 weights themselves would take the optimizer's steps (use float32)")
        if self.keep_checkpoints < 0:
            raise ValueError("keep_checkpoints must be >= 0 (0 keeps every checkpoint)")
        if self.assessment_max_new_tokens < 1:
            raise ValueError("assessment_max_new_tokens must be >= 1")
        server = self.rollout_server
        if server and server != "vllm" and not server.startswith(("http://", "https://")):
            raise ValueError(f"rollout_server must be a base URL such as http://HOST:8000/v1, or vllm; got {server!r}")
        if server and self.full_finetune:
            raise ValueError("rollout_server loads the trained LoRA adapters into the server; full_finetune: true "
                             "trains no adapter")
        if not self.rollout_server_tolerance > 0:
            raise ValueError("rollout_server_tolerance must be > 0")
        shlex.split(self.rollout_server_args)  # refuses unbalanced quotes now, not when the server starts
        if self.model_workers < 0 or self.model_worker_gpus < 0:
            raise ValueError("model_workers and model_worker_gpus must be >= 0")
        if self.model_workers and server:
            raise ValueError("rollout_server and model_workers both say where rollouts are sampled; set one")
        if self.model_workers and self.full_finetune:
            raise ValueError("model_workers pushes the trained LoRA adapters to the replicas; full_finetune: true "
                             "trains no adapter")

    def pre_action(self) -> PreActionWriter | None:
        """What the policy writes before each action: Self-Guide's self-assessment, or nothing."""
        from hindsight.agent.writers import build_pre_action, pre_action_name

        return build_pre_action(pre_action_name(self_guide=self.self_guide), self.assessment_max_new_tokens)

    def rollout_config(self, sampling: SamplingParams, split: str, seed: int | None = None) -> RolloutConfig:
        """How this run's policy is prompted and sampled."""
        return RolloutConfig(
            memory=Memory.parse(self.memory), system_template=self.system_prompt or DEFAULT_SYSTEM_TEMPLATE,
            sampling=sampling, concurrency=self.concurrency, seed=self.seed if seed is None else seed,
            model_name=self.model, split=split, pre_action=self.pre_action(),
        )

    def eval_settings(self) -> EvalSettings:
        return EvalSettings(self.env, {**self.env_kwargs, **self.eval_env_kwargs}, self.rollout_config(
            SamplingParams(temperature=self.eval_temperature, max_new_tokens=self.max_new_tokens), "test"
        ))


@dataclass(frozen=True)
class SupervisedBasics(TrainingBasics):
    """Config fields of the supervised (behaviour-cloning) methods."""

    epochs: int = option(2, "passes over the training sequences")
    batch_size: int = option(16, "sequences per optimizer step")
    micro_batch_size: int = option(8, "sequences per forward/backward (gradient accumulation)")
    lr: float = option(3e-4, "peak learning rate")
    warmup_steps: int = option(5, "linear warm-up steps")
    checkpoint_every: int = option(25, "save a checkpoint every N optimizer steps (always after the last one)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")

    def schedule(self, final_split: str = "", final_episodes: int = 0) -> Schedule:
        """Checkpoints at the config's cadence; one evaluation, after the last step."""
        return Schedule(checkpoint_every=self.checkpoint_every, keep_checkpoints=self.keep_checkpoints,
                        final_split=final_split if final_episodes else "", final_episodes=final_episodes)


@dataclass(frozen=True)
class CriticView:
    """How a critic reads an attempt: ECHO and the critic's warm start (critic-sft) must agree."""

    critic_hints: bool = option(False, "show the critic the planner's move at every turn of an attempt: privileged "
                                       "information for a critic too small to plan, which still has to find where "
                                       "the attempt went wrong (needs an environment whose oracle plans)")

    def check_critic_hints(self, env: str) -> None:
        """Refuse planner hints on a registered environment whose oracle cannot plan from a live state."""
        from hindsight.envs import EnvError, env_class

        if not self.critic_hints:
            return
        try:
            cls = env_class(env)
        except EnvError:
            return  # served or Ray environments are checked when they are made
        if not (cls.has_oracle and cls.oracle_replans):
            raise ValueError(f"critic_hints needs an environment whose oracle plans from any state; {env!r} has none")

    def critic_prompt(self, criteria: str, prompts: PromptBuilder) -> CriticPrompt:
        return CriticPrompt(criteria, prompts, planner_hints=self.critic_hints)


@dataclass(frozen=True)
class PolicyGradientBasics(TrainingBasics):
    """Config fields of the group-relative policy-gradient methods (GRPO, ECHO)."""

    init_from: str = option("", "what initialises the policy adapter: a run directory (e.g. an SFT run; its latest "
                                "checkpoint) or checkpoint, a PEFT adapter folder, a bundled adapter name or an "
                                "adapter spec BASE+ADAPTER")
    updates: int = option(20, "number of updates")
    tasks_per_update: int = option(4, "task instances per update")
    train_seed_start: int = option(0, "training tasks are the train split's first updates × tasks_per_update "
                                      "seeds from this seed on; 0 (the default) gives every run the same tasks, "
                                      "whatever its seed: give each seed of a comparison its own start (for "
                                      "example seed × 100000) for runs that sample different tasks")
    group_size: int = option(8, "samples per task instance: GRPO's G trajectories, ECHO's N critiques and refinements")
    reward: str = option("score", "trajectory return: score (graded, final) or success (0/1)")
    temperature: float = option(1.0, "sampling temperature of training rollouts")
    lr: float = option(2e-5, "peak learning rate")
    warmup_steps: int = option(0, "linear warm-up optimizer steps")
    epochs: int = option(1, "optimizer steps on each batch of rollouts (>1 makes the clipping active)")
    micro_batch_size: int = option(8, "sequences per forward/backward")
    micro_batch_tokens: int = option(8192, "at most this many tokens per forward/backward (rows × the longest row; "
                                           "a longer sequence goes alone): it bounds the activations' memory when "
                                           "whole episodes train as one sequence each; 0 = no limit")
    clip_low: float = option(0.2, "lower clip ε (ratio ≥ 1 − ε)")
    clip_high: float = option(0.2, "upper clip ε (ratio ≤ 1 + ε); DAPO's clip-higher uses 0.28")
    kl_coef: float = option(0.0, "β of the k3 KL to the reference (kl_reference); 0 disables it")
    entropy_coef: float = option(0.0, "weight of an entropy bonus on every generated token (verl's entropy_coeff), "
                                      "which holds exploration up when most groups have tied returns; 0 disables it")
    kl_reference: str = option("base", "what kl_coef pulls each role toward: base (the base model, adapters off) or "
                                       "init (a frozen copy of the weights the role starts from: init_from for the "
                                       "policy, e.g. the SFT warm start; critic_init_from for ECHO's critic)")
    aggregation: str = option("trajectory_mean", "trajectory_mean (token mean over all turns of a trajectory, then "
                                                 "mean over trajectories: the papers' 1/|o_i|), turn_mean (each turn "
                                                 "its own unit, so longer trajectories weigh more) or token_mean (DAPO)")
    normalize_std: bool = option(True, "divide advantages by the group's standard deviation")
    advantage_estimator: str = option("grpo", "how returns become advantages: grpo (the group-normalised return, one "
                                              "per trajectory) or gigpo (GiGPO: plus a step-level advantage from the "
                                              "steps taken from the same state within a group); any name in "
                                              "hindsight.algos.advantages.ADVANTAGE_ESTIMATORS")
    advantage_std: str = option("population", "standard deviation of normalize_std: population (divide by G; "
                                              "Hindsight's default) or sample (G − 1, as verl; advantages "
                                              "√((G − 1)/G) times smaller), see docs/training.md")
    gamma: float = option(0.95, "discount of the step-level returns of advantage_estimator: gigpo (verl-agent's 0.95)")
    step_advantage_weight: float = option(1.0, "ω, the weight of GiGPO's step-level advantage (advantage_estimator: "
                                               "gigpo)")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the update")
    eval_every: int = option(5, "evaluate on the validation split every N updates (0 disables)")
    eval_episodes: int = option(50, "tasks per evaluation")
    final_eval_split: str = option("test", "split evaluated at the end ('' skips it)")
    final_eval_episodes: int = option(100, "tasks of the final evaluation")
    checkpoint_every: int = option(5, "save a checkpoint every N updates")
    stop_on_collapse: bool = option(False, "end the run, checkpoint saved, after an update at which the collapse "
                                           "alarm fired (health/collapsing: a loop ratio, invalid rate or zero-"
                                           "variance share that rose, or a return spread or action entropy that "
                                           "fell, and stayed so; docs/training.md); summary.json then says "
                                           "stopped: collapse")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.train_seed_start < 0:
            raise ValueError(f"train_seed_start must be >= 0, not {self.train_seed_start}")
        if self.reward not in ("score", "success"):
            raise ValueError("reward must be 'score' or 'success'")
        if self.micro_batch_tokens < 0:
            raise ValueError("micro_batch_tokens must be >= 0 (0: no limit)")
        check_split("final_eval_split", self.final_eval_split, optional=True)
        LOSS_AGGREGATIONS.get(self.aggregation)
        ADVANTAGE_ESTIMATORS.get(self.advantage_estimator)
        if self.advantage_std not in STD_CONVENTIONS:
            raise ValueError(f"advantage_std must be one of {', '.join(STD_CONVENTIONS)}, not {self.advantage_std!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], not {self.gamma}")
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2 (advantages are relative to the group)")
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every must be >= 1")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("kl_coef and entropy_coef must be >= 0")
        if self.kl_reference not in ("base", "init"):
            raise ValueError(f"kl_reference must be 'base' or 'init', not {self.kl_reference!r}")
        if self.kl_reference == "init" and not self.init_from:
            raise ValueError("kl_reference: init needs init_from")
        if self.kl_reference == "init" and self.full_finetune:
            raise ValueError("kl_reference: init needs LoRA; with full fine-tuning the reference is already "
                             "the weights the run starts from")

    def update_settings(self) -> UpdateSettings:
        return UpdateSettings(
            clip_low=self.clip_low, clip_high=self.clip_high, kl_coef=self.kl_coef, entropy_coef=self.entropy_coef,
            aggregation=self.aggregation, epochs=self.epochs,
            micro_batch_size=self.micro_batch_size, micro_batch_tokens=self.micro_batch_tokens,
            max_grad_norm=self.max_grad_norm, shared_tokens=self.shared_tokens,
        )

    def schedule(self) -> Schedule:
        return Schedule(
            checkpoint_every=self.checkpoint_every, keep_checkpoints=self.keep_checkpoints,
            eval_every=self.eval_every, eval_episodes=self.eval_episodes,
            final_split=self.final_eval_split, final_episodes=self.final_eval_episodes,
            stop_on_collapse=self.stop_on_collapse,
        )

    def train_seeds(self, env: Env) -> list[int]:
        """The run's training tasks, one update's after another: the train split's first
        updates × tasks_per_update seeds of `env` from `train_seed_start` on."""
        return env.split_seeds("train", self.updates * self.tasks_per_update, start=self.train_seed_start)

    def trajectory_return(self, trajectory: Trajectory) -> float:
        """The environment's return of a trajectory: its success (0/1) or its final task score."""
        return float(trajectory.success) if self.reward == "success" else trajectory.score

    def advantage_options(self) -> AdvantageOptions:
        return AdvantageOptions(normalize_std=self.normalize_std, std=self.advantage_std, gamma=self.gamma,
                                step_weight=self.step_advantage_weight)

    def advantages(self, trajectories: Sequence[Trajectory], returns: Sequence[float],
                   group_ids: Sequence[Hashable]) -> Advantages:
        """The configured estimator's advantages of trajectories with these returns and groups.

        The return is the trajectory's outcome, so each trajectory's step rewards are 0 but
        for its last step, which carries the return (what GiGPO discounts).
        """
        batch = GroupBatch(
            torch.tensor(list(returns), dtype=torch.float64), tuple(group_ids),
            step_rewards=tuple(tuple(0.0 for _ in t.steps[1:]) + ((r,) if t.steps else ())
                               for t, r in zip(trajectories, returns, strict=True)),
            state_keys=tuple(tuple(step.state_key for step in t.steps) for t in trajectories),
        )
        return ADVANTAGE_ESTIMATORS.get(self.advantage_estimator)(batch, self.advantage_options())

    def matrix_advantages(self, returns: torch.Tensor) -> torch.Tensor:
        """The configured estimator on a [num_groups, G] matrix of returns of single generations
        (no steps, e.g. ECHO's critiques): returns [num_groups, G], dtype of `returns`."""
        advantages = ADVANTAGE_ESTIMATORS.get(self.advantage_estimator)(GroupBatch.from_matrix(returns),
                                                                       self.advantage_options())
        return advantages.trajectory.to(returns.dtype).view_as(returns)


@dataclass(frozen=True)
class EvalSettings:
    env: str
    env_kwargs: Mapping[str, Any]
    rollout: RolloutConfig


