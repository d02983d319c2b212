"""Warm start of the ECHO critic by imitating the template critic.

A 135M model cannot write a useful critique zero-shot, and a critic that never says
anything useful gives ECHO's critic track no signal to learn from. This step is an
honest bootstrap, not a learned critic: it clones the rule-based template critic
(`hindsight.agent.critic.template_critique`), which compares each attempt with the
environment's planner and names the first turn that made no progress and the planner's
move there. The privileged information is the planner's; the critic adapter only sees
what ECHO's critic sees (criteria, task, turns, score) and learns to write the same
kind of critique from it. ECHO then continues from this adapter (`critic_init_from`).

    attempts  the policy (e.g. the SFT warm start) samples attempts on train tasks, or
              logged trajectories are read from a run
    targets   the template critique of each attempt (solved ones: "none", capped in share)
    sft       the critic adapter on (critic prompt → target), response tokens only
    eval      greedy critiques of held-out validation attempts against their templates

`hindsight train critic-sft --resume RUN` continues from the latest checkpoint on the
attempts the run saved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hindsight.agent.critic import CriticPrompt, ModelCritic, parse_critique, template_critique
from hindsight.configs import option
from hindsight.methods.basics import CriticView, SupervisedBasics
from hindsight.methods.lifecycle import Evaluator, TrainingRun
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.methods.registry import training_method
from hindsight.methods.supervised import fit_supervised, policy_attempts, warm_start_attempts
from hindsight.train.distributed import single_process
from hindsight.train.model import TrainableModel
from hindsight.train.sequences import reply_ids, reply_sequence
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class CriticSFTConfig(SupervisedBasics, CriticView):
    policy_from: str = option("", "run directory whose latest checkpoint is the policy that makes the attempts "
                                  "(e.g. the SFT warm start); empty: the base model")
    attempts: str = option("", "critique logged trajectories instead (a run directory or .jsonl file)")
    episodes: int = option(64, "train tasks the policy attempts")
    samples_per_task: int = option(2, "attempts per task")
    temperature: float = option(1.0, "sampling temperature of the attempts")
    solved_share: float = option(0.2, "at most this share of the training attempts are solved ones (target: none)")
    eval_episodes: int = option(16, "validation attempts critiqued greedily after training (0 skips it)")
    critic_max_new_tokens: int = option(128, "token budget of a critique in the evaluation")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.solved_share < 1:
            raise ValueError("solved_share must be in [0, 1)")
        self.check_critic_hints(self.env)
        if self.episodes < 1 or self.samples_per_task < 1:
            raise ValueError("episodes and samples_per_task must be >= 1")
        if self.full_finetune:
            raise ValueError("the critic is a LoRA adapter beside the policy; full_finetune must be false")


def balance_solved(attempts: list[Trajectory], solved_share: float) -> list[Trajectory]:
    """All unsolved attempts and, in order, as many solved ones as keep their share ≤ solved_share."""
    budget = int(solved_share * sum(not t.success for t in attempts) / (1 - solved_share))
    kept = []
    for attempt in attempts:
        if attempt.success:
            if budget == 0:
                continue
            budget -= 1
        kept.append(attempt)
    return kept


def critique_evaluator(
    config: CriticSFTConfig, run: TrainingRun, model: TrainableModel, critic_prompt: CriticPrompt,
) -> Evaluator:
    """Greedy critiques of fresh policy attempts on a split, held against their template critiques."""

    def evaluate(split: str, episodes: int, name: str, prefix: str) -> tuple[dict[str, float], dict[str, Any]]:
        model.activate("policy")
        held_out = policy_attempts(config, model, split, episodes, config.samples_per_task, config.temperature,
                                   config.seed + 1)
        critic = ModelCritic(model.sampler, critic_prompt, name="adapter")
        with model.role("critic"):
            sampling = SamplingParams(temperature=0.0, max_new_tokens=config.critic_max_new_tokens)
            written = [group[0] for group in critic.critique(held_out, 1, sampling)]
        expected = [template_critique(attempt) for attempt in held_out]
        run.dir.replace_trajectories(name, (attempt.with_meta(template_critique=target, critic_output=critique.output)
                                            for attempt, critique, target in zip(held_out, written, expected)),
                                     env=config.env, split=split)
        matches = [c.parsed.critique == parse_critique(t).critique for c, t in zip(written, expected)]
        # Solved attempts only need "none"; the unsolved ones show whether the critic finds the mistake.
        unsolved = [match for match, attempt in zip(matches, held_out) if not attempt.success]
        result = {
            "critique_match_rate": sum(matches) / len(matches),
            "unsolved_attempts": len(unsolved),
            "malformed_rate": sum(c.parsed.parse_error is not None for c in written) / len(written),
        }
        if unsolved:
            result["unsolved_match_rate"] = sum(unsolved) / len(unsolved)
        return {f"{prefix}/{key}": value for key, value in result.items()}, result

    return evaluate


@training_method("critic-sft", CriticSFTConfig, help="warm start of ECHO's critic by imitating the template critic")
def train_critic_sft(config: CriticSFTConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    single_process("critic-sft")
    run = TrainingRun("critic-sft", CriticSFTConfig, config, out, resume=resume)
    config = run.config
    model = load_trainable(config.model, ("policy", "critic"), config.lora_rank, config.lora_alpha, False,
                           dtype=config.dtype)
    if config.policy_from:
        load_latest(model, config.policy_from, "policy")
    env = make(config.env, **config.env_kwargs)
    critic_prompt = config.critic_prompt(env.criteria, config.rollout_config(SamplingParams(), "train").prompt_builder())
    tokenizer = model.backend.tokenizer

    started = time.perf_counter()
    attempts, kept = warm_start_attempts(
        run, model, env.id, config.attempts, resume=resume, episodes=config.episodes, samples=config.samples_per_task,
        temperature=config.temperature, keep=lambda attempts: balance_solved(attempts, config.solved_share),
        saved_as=lambda attempt: attempt.with_meta(template_critique=template_critique(attempt)))
    if not kept:
        raise ValueError(f"no {env.id} attempts to critique")
    targets = [template_critique(attempt) for attempt in kept]
    sequences = [
        reply_sequence(tokenizer, critic_prompt.build(attempt), reply_ids(tokenizer, target, None, "stop"), attempt.id)
        for attempt, target in zip(kept, targets)
    ]

    data = {"data/attempts": len(attempts), "data/kept": len(kept),
            "data/solved_share": sum(t.success for t in kept) / len(kept), "data/sequences": len(sequences),
            "timing/collect_s": time.perf_counter() - started}
    steps = fit_supervised(run, model, "critic", sequences, data=data, area="critic_sft",
                           schedule=config.schedule("validation", config.eval_episodes),
                           evaluate=critique_evaluator(config, run, model, critic_prompt))
    return run.finish(optimizer_steps=steps, attempts=len(kept))
