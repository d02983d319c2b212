"""ETO (exploration-based trajectory optimization), a CSO baseline: trajectory-level DPO.

One round, top to bottom:

    failures  roll the policy out on fresh train tasks; keep the failed trajectories
    expert    the expert plays each failed task once (the same seed); its successes are kept
    pairs     (chosen = the expert's successful trajectory, rejected = the policy's failure on
              the same task), round-N/pairs.jsonl with both action sequences
    DPO       each side's log-probability is the sum over its turns (each turn prompted as the
              policy is prompted), `hindsight.train.trajectory_dpo`; reference = the policy at
              the start of the round
    log       failures, expert successes, pairs, DPO's numbers

The expert's turns are trained as the policy answers (`<action>X</action>`), not in the
expert's own words. Stage outputs land in round-N/ whole, so a resumed run repeats no
finished stage (`hindsight.methods.preference`).

    hindsight train eto --config recipes/smoke-cso.yaml --out runs/eto
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from hindsight.agent.engine import Task
from hindsight.agent.evaluate import summarize
from hindsight.logs import trajectory_from_record, trajectory_to_record
from hindsight.methods.lifecycle import TrainingRun
from hindsight.methods.preference import PreferenceBasics, RoundFiles, frozen_role
from hindsight.methods.registry import training_method
from hindsight.roles import parse_role, resolve
from hindsight.train.distributed import single_process
from hindsight.train.sequences import turn_sequences
from hindsight.train.trajectory_dpo import trajectory_dpo
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class ETOConfig(PreferenceBasics):
    def __post_init__(self) -> None:
        super().__post_init__()
        frozen_role(parse_role("expert", self.expert, ("oracle", "adapter", "backend")))


def as_policy_answers(trajectory: Trajectory) -> Trajectory:
    """The trajectory with every turn written as the policy answers: `<action>X</action>`."""
    steps = tuple(replace(s, raw=f"<action>{s.action}</action>", token_ids=None, logprobs=None) if s.action else s
                  for s in trajectory.steps)
    return replace(trajectory, steps=steps)


def trajectory_pair(chosen: Trajectory, rejected: Trajectory, round_number: int) -> dict:
    """A pair's record: enough to replay both sides with the environment registry."""
    return {"source": "eto", "round": round_number, "env": chosen.env, "env_kwargs": dict(chosen.env_kwargs),
            "seed": chosen.seed, "chosen_trajectory": chosen.id, "rejected_trajectory": rejected.id,
            "chosen_actions": [s.action or "" for s in chosen.steps],
            "rejected_actions": [s.action or "" for s in rejected.steps]}


@training_method("eto", ETOConfig, help="ETO, a CSO baseline: trajectory-level DPO")
def train_eto(config: ETOConfig, out: str | Path, *, resume: bool = False) -> Path:
    single_process("eto")
    run = TrainingRun("eto", ETOConfig, config, out, resume=resume)
    config = run.config
    expert_role = parse_role("expert", config.expert)
    model = config.load_policy([expert_role])
    run.begin(model, {}, {}, config.rounds_schedule())
    expert_backend = resolve(expert_role, model)
    prompts = config.rollout_config(SamplingParams(), "train").prompt_builder()
    tokenizer = model.backend.tokenizer

    for r in run.steps(config.rounds, "eto rounds"):
        started = time.perf_counter()
        files = RoundFiles(run.path, r)
        run.phase("failures")
        seeds = config.round_tasks(r)
        policy = config.round_engine(model.sampler, config.temperature, r, 1)
        rollouts = files.cached("rollouts", lambda: policy.run([Task(seed=s) for s in seeds]),
                                trajectory_to_record, trajectory_from_record)
        failures = [t for t in rollouts if not t.success]

        run.phase("expert")
        expert = config.round_engine(expert_backend, config.expert_temperature, r, 2)
        demonstrations = files.cached("expert", lambda: expert.run([Task(seed=t.seed) for t in failures]),
                                      trajectory_to_record, trajectory_from_record)
        run.env_steps += sum(t.num_steps for t in rollouts) + sum(t.num_steps for t in demonstrations)
        matched = [(as_policy_answers(e), f) for e, f in zip(demonstrations, failures) if e.success]
        pairs = files.cached("pairs", lambda: [trajectory_pair(e, f, r) for e, f in matched], dict, dict)
        row = {"eto/rollout_success_rate": summarize(rollouts).success_rate if rollouts else 0.0,
               "eto/failed_trajectories": float(len(failures)),
               "eto/expert_successes": float(len(matched)), "eto/pairs": float(len(pairs)),
               "timing/collect_s": time.perf_counter() - started}

        run.phase("dpo")
        started = time.perf_counter()
        if matched:
            sides = [(turn_sequences(e, tokenizer, prompts), turn_sequences(f, tokenizer, prompts)) for e, f in matched]
            stats = trajectory_dpo(model, sides, config.dpo_settings(),
                                   on_step=lambda done, total, loss: run.phase(f"dpo {done}/{total} · loss {loss:.3f}"))
            row.update(stats.metrics())
        row.update({"rollout/env_steps": run.env_steps, "timing/dpo_s": time.perf_counter() - started})
        run.end_step(r, row, f"{len(failures)} failures · {len(matched)} expert successes · {len(pairs)} pairs")
    return run.finish(rounds=config.rounds, env_steps=run.env_steps)
