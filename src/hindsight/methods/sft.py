"""Supervised warm start: behaviour cloning on successful trajectories.

Zero-shot, the bundled 135M model almost never writes a well-formed action, so RL has
nothing to reinforce. This loop clones successful demonstrations — from the `oracle`
policy or from any run directory — into a LoRA adapter:

    demos → per-turn sequences (prompt as the policy will see it + response)
          → AdamW on the response tokens only → checkpoint every N steps → evaluate

With `init_from` the same loop is RFT (rejection-sampling fine-tuning, a CSO baseline): a
policy continues on its own sampled successes, `demos: smollm2+POLICY`,
`demo_temperature: 1`, `demo_samples: 4`.

With `advice_demos: RUN` it also teaches a policy to take a critic's advice, which a
small model does not do by itself (it tends to repeat the move the advice names as
the mistake): every failed attempt in RUN becomes the oracle's refinement of it, shown
with the template critic's advice as ECHO shows a critique.

`hindsight train sft --resume RUN` continues a killed run from its latest checkpoint,
on the demonstrations that run saved.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hindsight.agent.critic import advice_task
from hindsight.agent.engine import RolloutEngine, Task
from hindsight.agent.parser import parse_response
from hindsight.agent.selfguide import (
    SelfAssessor,
    judge_logged_steps,
    judged_label,
    logged_steps_to_judge,
    with_oracle_assessments,
)
from hindsight.algos.selfguide import Label, balanced_label_indices, label_agreement_stats
from hindsight.configs import ConfigError, option
from hindsight.logs import read_trajectories
from hindsight.methods.basics import SupervisedBasics, check_split
from hindsight.methods.lifecycle import Evaluator, TrainingRun
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.methods.progress import TrainingProgress
from hindsight.methods.registry import training_method
from hindsight.methods.supervised import fit_supervised, training_trajectories
from hindsight.train.checkpoint import list_checkpoints
from hindsight.train.distributed import single_process
from hindsight.train.model import TrainableModel
from hindsight.train.sequences import TrainingSequence, assessment_sequences, turn_sequences
from hindsight.types import Assessment, SamplingParams, Step, Trajectory

#: Held-out steps judged per generate call (and per progress line).
ASSESSMENT_BATCH = 32


@dataclass(frozen=True)
class SFTConfig(SupervisedBasics):
    demos: str = option("oracle", "where demonstrations come from: a policy spec (oracle) or a run directory")
    demo_episodes: int = option(200, "train-split tasks to collect demonstrations on (policy demos)")
    demo_samples: int = option(1, "attempts per task when a policy collects demos (RFT samples several, keeps successes)")
    demo_temperature: float = option(0.0, "sampling temperature of a policy collecting demos (0 is greedy)")
    action_only: bool = option(True, "train on `<action>X</action>` responses, dropping the demo's analysis text")
    valid_moves_only: bool = option(False, "rehearse only the demos' valid moves: a refused or unreadable move inside "
                                           "a successful attempt (a policy's own, e.g. with holes: blocking) is not "
                                           "taught; its turn's self-assessment still is")
    init_from: str = option("", "continue an existing policy instead of a fresh adapter (e.g. teach a trained policy "
                                "to write self-assessments): any source GRPO's init_from takes")
    eval_episodes: int = option(50, "tasks of the evaluation split after training (0 skips it)")
    eval_split: str = option("test", "split evaluated after training")
    assessment_demos: str = option("", "self_guide: also teach self-assessments on these trajectories (a run directory "
                                       "or .jsonl, e.g. a policy's own attempts with their mistakes): every step gets "
                                       "the oracle's assessment, and only the assessment tokens are trained")
    balance_labels: bool = option(False, "self_guide: keep no assessment label (first-turn notes included) more often "
                                         "than the second most common label, so that a rare 'negative' is not "
                                         "drowned by 'positive' (a random draw from the seed)")
    assessment_eval: str = option("", "self_guide: after training, judge the steps of these held-out logged "
                                      "trajectories (a run directory or .jsonl, e.g. the start's own attempts on "
                                      "validation tasks) and compare the labels with the oracle's, beside an "
                                      "always-positive judge; replaces the evaluation episodes")
    assessment_only: bool = option(False, "train only self-assessments, on assessment_demos (no action tokens, no "
                                          "demos): teaches a trained policy (init_from) to judge its steps")
    advice_demos: str = option("", "also teach taking advice, from the failed attempts in this run directory or "
                                   ".jsonl: each becomes the oracle's refinement of it, with the template critic's "
                                   "advice in the system prompt (as an ECHO refinement shows it), the attempt's moves "
                                   "up to the turn the advice names, the advised move there, then the planner's moves")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_split("eval_split", self.eval_split)
        if self.assessment_demos and not self.self_guide:
            raise ValueError("assessment_demos needs self_guide: true")
        if self.demo_samples < 1:
            raise ValueError("demo_samples must be >= 1")
        if self.demo_samples > 1 and self.demo_temperature == 0:
            raise ValueError("demo_samples > 1 needs demo_temperature > 0 (greedy attempts would all be the same)")
        if self.assessment_only and not self.assessment_demos:
            raise ValueError("assessment_only needs self_guide: true and assessment_demos (the trajectories to judge)")
        if (self.balance_labels or self.assessment_eval) and not self.self_guide:
            raise ValueError("balance_labels and assessment_eval need self_guide: true")
        if self.advice_demos and self.assessment_only:
            raise ValueError("advice_demos teach actions; assessment_only trains none")


@dataclass(frozen=True)
class Collection:
    """Successful trajectories to learn from, and what running them cost: every attempt counts,
    kept or not, so an arm that samples its own data (RFT) reports its environment steps."""

    demos: list[Trajectory]
    episodes: int = 0  # attempts run to collect them (0: read from a log, nothing run)
    env_steps: int = 0

    @classmethod
    def of_attempts(cls, attempts: Iterable[Trajectory]) -> Collection:
        attempts = list(attempts)
        return cls([t for t in attempts if t.success], len(attempts), sum(t.num_steps for t in attempts))

    def __add__(self, other: Collection) -> Collection:
        return Collection(self.demos + other.demos, self.episodes + other.episodes, self.env_steps + other.env_steps)


def collect_demonstrations(config: SFTConfig) -> Collection:
    """Successful trajectories from a run directory or from running a policy on train tasks."""
    from hindsight.envs import make
    from hindsight.llm import load_model

    if Path(config.demos).exists():
        return Collection([t for t in training_trajectories(config.demos, "demos") if t.success])
    env = make(config.env, **config.env_kwargs)
    seeds = env.split_seeds("train", config.demo_episodes)
    # The demonstrator only acts; self-assessments, if any, are the oracle's (added after).
    sampling = SamplingParams(temperature=config.demo_temperature, max_new_tokens=config.max_new_tokens)
    rollout = replace(config.rollout_config(sampling, "train"), pre_action=None)
    engine = RolloutEngine(lambda: make(config.env, **config.env_kwargs), load_model(config.demos), rollout)
    tasks = (Task(seed=s, sample=j) for s in seeds for j in range(config.demo_samples))
    return Collection.of_attempts(engine.iter_run(tasks))


def advice_demonstrations(config: SFTConfig) -> Collection:
    """The oracle's advice-taking refinements of the failed attempts in `config.advice_demos`
    (the successful ones; a refinement of an attempt that ran out of turns has no turn left)."""
    from hindsight.envs import make
    from hindsight.llm import load_model

    # A log records every option of its environment, defaults included: compare like with like.
    options = dict(make(config.env, **config.env_kwargs).config)
    failed = [t for t in training_trajectories(config.advice_demos, "advice_demos")
              if t.env == config.env and t.env_kwargs == options and not t.success]
    if not failed:
        raise ConfigError(f"advice_demos: no failed {config.env} attempt with the options {options} in "
                          f"{config.advice_demos!r}")
    tasks = [task for attempt in failed if (task := advice_task(attempt)) is not None]
    rollout = replace(config.rollout_config(SamplingParams(max_new_tokens=config.max_new_tokens), "train"),
                      pre_action=None)
    engine = RolloutEngine(lambda: make(config.env, **config.env_kwargs), load_model("oracle"), rollout)
    return Collection.of_attempts(engine.iter_run(tasks))


def taught_turns(trajectory: Trajectory, valid_only: bool) -> list[int]:
    """The turns of a demonstration whose moves are rehearsed: all, or those the environment accepted."""
    return [step.index for step in trajectory.steps if step.valid or not valid_only]


def _action_only(step: Step) -> Step:
    action = parse_response(step.raw).action
    return replace(step, raw=f"<action>{action}</action>", token_ids=None, finish_reason="stop")


def assessment_evaluator(config: SFTConfig, run: TrainingRun, model: TrainableModel, assessor: SelfAssessor) -> Evaluator:
    """Greedy self-assessments of the steps of `config.assessment_eval`'s trajectories (at most as
    many trajectories as the evaluation's episodes), held against the oracle's labels."""
    if not Path(config.assessment_eval).exists():
        raise ConfigError(f"assessment_eval: {config.assessment_eval!r} does not exist (a run directory or .jsonl file)")

    def evaluate(split: str, episodes: int, name: str, prefix: str) -> tuple[dict[str, float], dict[str, Any]]:
        held_out = [t for t in training_trajectories(config.assessment_eval, "assessment_eval")
                    if t.env == config.env][:episodes]
        steps = logged_steps_to_judge(held_out, assessor)
        if not steps:
            raise ConfigError(f"assessment_eval: no {config.env} step to judge in {config.assessment_eval!r}")
        model.activate("policy")
        answers: list[Assessment] = []
        with TrainingProgress(len(steps), "held-out assessments") as progress:
            for judged in judge_logged_steps(model.sampler, assessor, steps, batch=ASSESSMENT_BATCH):
                answers += judged
                said_negative = sum(answer.label == Label.NEGATIVE.value for answer in answers)
                for _ in judged:
                    progress.advance(f"{said_negative} said negative")
        predicted = [judged_label(answer) for answer in answers]
        result = label_agreement_stats(predicted, [step.oracle for step in steps])
        by_trajectory: dict[str, list[dict[str, Any]]] = {}
        for step, answer, label in zip(steps, answers, predicted):
            by_trajectory.setdefault(step.trajectory.id, []).append(
                {"at": step.at, "oracle": step.oracle.value, "label": label and label.value, "text": answer.text})
        run.dir.replace_trajectories(name, (trajectory.with_meta(judged=by_trajectory.get(trajectory.id, []))
                                            for trajectory in held_out), env=config.env, split=split)
        return result.metrics(prefix), {**vars(result), "passes_gate": result.passes_gate}

    return evaluate


@training_method("sft", SFTConfig, help="supervised warm start: behaviour cloning on successful trajectories")
def train_sft(config: SFTConfig, out: str | Path, *, resume: bool = False) -> Path:
    single_process("sft")
    run = TrainingRun("sft", SFTConfig, config, out, resume=resume)
    config = run.config

    started = time.perf_counter()
    collection = Collection([])
    if resume and list_checkpoints(run.path):
        # The demonstrations the interrupted run trained on, not a fresh collection (its cost is
        # in the step-0 row already logged).
        demos = list(read_trajectories(run.dir.trajectories_dir / "demos.jsonl"))
    else:
        if not config.assessment_only:
            collection = collect_demonstrations(config)
        if config.advice_demos:
            collection += advice_demonstrations(config)
        demos = collection.demos
        if not demos and not config.assessment_only:
            raise ConfigError(f"no successful demonstrations from {config.demos!r}"
                             + (f" or {config.advice_demos!r}" if config.advice_demos else ""))
        if config.action_only:
            demos = [replace(t, steps=tuple(_action_only(s) for s in t.steps)) for t in demos]
        if config.self_guide:
            demos = [with_oracle_assessments(t, config.pre_action()) for t in demos]
        run.dir.replace_trajectories("demos", demos, env=config.env)
    collect_s = time.perf_counter() - started

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, config.full_finetune,
                           dtype=config.dtype)
    if config.init_from:
        load_latest(model, config.init_from)  # a resumed run's checkpoint replaces it afterwards
    tokenizer = model.backend.tokenizer
    rollout = config.rollout_config(SamplingParams(), "train")
    rehearsed = [(t, taught_turns(t, config.valid_moves_only)) for t in demos]
    sequences: list[TrainingSequence] = [s for t, turns in rehearsed
                                         for s in turn_sequences(t, tokenizer, rollout.prompt_builder(), turns)]
    data = {"data/demonstrations": len(demos), "data/advice_demonstrations": sum(bool(t.guidance) for t in demos),
            "data/moves_not_rehearsed": sum(t.num_steps - len(turns) for t, turns in rehearsed)}
    if collection.episodes:
        data.update({"rollout/episodes": collection.episodes, "rollout/env_steps": collection.env_steps})
    evaluate = None
    if config.self_guide:
        assessed = list(demos)
        if config.assessment_demos:
            taught = {t.id for t in demos}  # a demonstration given as both is taught once
            assessed += [with_oracle_assessments(t, rollout.pre_action)
                         for t in training_trajectories(config.assessment_demos, "assessment_demos")
                         if t.env == config.env and t.id not in taught]
        notes = [s for t in assessed for s in assessment_sequences(t, tokenizer, rollout.pre_action)]
        labels = [None if step.index == 0 else Label(step.assessment.label)
                  for t in assessed for step in t.steps if step.assessment is not None]
        if config.balance_labels:
            kept = balanced_label_indices(labels, config.seed)
            notes, labels = [notes[i] for i in kept], [labels[i] for i in kept]
        sequences += notes
        data["data/assessment_trajectories"] = len(assessed)
        data.update({f"data/notes_{'first_turn' if label is None else label.value}": float(count)
                     for label, count in Counter(labels).items()})
        if config.assessment_eval:
            evaluate = assessment_evaluator(config, run, model, rollout.pre_action)
    if not sequences:
        raise ValueError(f"nothing to train on: no {config.env} trajectory with a step in "
                         f"{config.assessment_demos or config.demos!r}")
    data.update({"data/sequences": len(sequences), "timing/collect_s": collect_s})
    steps = fit_supervised(run, model, "policy", sequences, data=data, area="sft",
                           schedule=config.schedule(config.eval_split, config.eval_episodes), evaluate=evaluate)
    return run.finish(optimizer_steps=steps)
