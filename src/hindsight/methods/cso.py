"""Critical Step Optimization: DPO on verified critical steps found in the policy's own failures.

One round, read top to bottom (repeated `rounds` times, each from the policy the last left):

    failures  roll the policy out on fresh train tasks; keep the failed trajectories
    alternatives  at every step of every failure, k samples of the expert at the replayed
              state (one-turn continuations of the pooled engine), duplicates removed
    PRM       the PRM rates the policy's action and each alternative; candidates:
              r_policy < γ_low and max r_alt > γ_high
    verify    each candidate's alternatives above γ_high: replay, take it, let the policy
              finish; success verifies it
    pairs     (s_t, chosen = verified alternative, rejected = the policy's action at t),
              JSONL with provenance (round-N/pairs.jsonl)
    DPO       TRL's DPOTrainer, β = 0.5, reference = the policy at the start of the round
    log       the funnel (steps, candidates, verified, pairs, share supervised), `tide/…` of the
              round's rollouts, and DPO's numbers

`method: step-dpo` and `method: ipr` are the paper's step-level baselines on the same stages:
Step-DPO pairs the PRM's best alternative with the policy's action at every step (nothing is
branched); IPR branches every alternative and the policy's own action `mc_rollouts` times and
pairs the alternative with the best Monte-Carlo success rate against the policy's action.

Each stage's output lands in the run directory (round-N/) once it is complete, so a resumed
run repeats no finished stage: it continues from the last round's checkpoint and the files of
the round it was in. The run lifecycle (resume, evaluation and checkpoint cadence, final
evaluation, summary) is `TrainingRun`'s.

    hindsight train cso --config recipes/smoke-cso.yaml --out runs/smoke-cso
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from hindsight.agent.cso import (
    Branch, BranchPick, ScoredStep, StepAlternatives, branch_points, make_pairs, monte_carlo_pairs, monte_carlo_picks,
    planner_prefers_chosen, sample_alternatives, score_steps, step_dpo_pairs, verify,
)
from hindsight.agent.agreement import plans_from_any_state
from hindsight.agent.engine import Task
from hindsight.agent.evaluate import summarize
from hindsight.agent.prm import build_prm, parse_prm
from hindsight.algos.cso import EXPERT_POLICY, GAMMA_HIGH, GAMMA_LOW, PAIR_SOURCES, POLICY_POLICY, check_thresholds
from hindsight.configs import option
from hindsight.diagnostics.live import live_tide_metrics
from hindsight.logs import trajectory_from_record, trajectory_to_record
from hindsight.methods.lifecycle import TrainingRun
from hindsight.methods.preference import PreferenceBasics, RoundFiles, frozen_role
from hindsight.methods.registry import training_method
from hindsight.roles import RoleSpec, parse_role, resolve
from hindsight.train.distributed import single_process
from hindsight.train.dpo import dpo_round
from hindsight.types import SamplingParams, Trajectory


METHODS = ("cso", "step-dpo", "ipr")


#: Who may rate actions for CSO: the oracle, the policy itself, an adapter of its own, or a separate model.
PRM_ROLES = ("oracle", "policy", "adapter", "backend")


@dataclass(frozen=True)
class CSOConfig(PreferenceBasics):
    method: str = option("cso", "cso, or a step-level baseline built from the same stages: step-dpo (the PRM's best "
                                "alternative against the policy's action at every step, no verification) or ipr "
                                "(Monte-Carlo step values: the success rate of policy continuations after each action)")
    mc_rollouts: int = option(4, "ipr: policy continuations per action that estimate its value")
    prm: str = option("oracle", "role that rates actions in [0, 1]: oracle (planner progress), or policy, "
                                "adapter:SOURCE or a model spec answering a rubric as an LLM judge; noisy:EPS:PRM "
                                "replaces a share EPS of its scores by uniform draws (seeded by seed)")
    prm_fallback: float = option(0.5, "the score an unreadable judge answer gets (counted in cso/prm_failures)")
    k: int = option(5, "alternatives sampled per step (before duplicates are removed)")
    gamma_low: float = option(GAMMA_LOW, "a candidate's policy action scores below this")
    gamma_high: float = option(GAMMA_HIGH, "a candidate's best alternative scores above this; alternatives above it "
                                           "are verified")
    use_prm: bool = option(True, "false: the 'no PRM' ablation, every alternative of every step is verified")
    verification: bool = option(True, "false: the 'no verification' ablation, PRM-selected pairs without branches")
    verify_rollouts: int = option(1, "policy continuations per alternative; any success verifies it")
    pair_source: str = option(EXPERT_POLICY, "expert+policy (paper), expert+expert (rejected: an alternative whose "
                                             "branch failed) or policy+policy (needs expert: policy)")

    def __post_init__(self) -> None:
        super().__post_init__()
        for spec in self.role_specs():
            frozen_role(spec)
        check_thresholds(self.gamma_low, self.gamma_high)
        if self.pair_source not in PAIR_SOURCES:
            raise ValueError(f"pair_source must be one of {', '.join(PAIR_SOURCES)}")
        if (self.pair_source == POLICY_POLICY) != (self.expert == "policy"):
            raise ValueError("the policy+policy pair source and expert: policy go together (the policy proposes "
                             "its own alternatives)")
        if self.pair_source == "expert+expert" and not self.verification:
            raise ValueError("expert+expert pairs reject an alternative whose branch failed: it needs verification")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}")
        for name in ("k", "verify_rollouts", "mc_rollouts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0.0 <= self.prm_fallback <= 1.0:
            raise ValueError("prm_fallback must be in [0, 1]")

    def role_specs(self) -> tuple[RoleSpec, RoleSpec]:
        """The expert and PRM roles."""
        return (parse_role("expert", self.expert, ("oracle", "policy", "adapter", "backend")),
                parse_prm(self.prm, PRM_ROLES).role)


def scored_step_from(record: dict) -> ScoredStep:
    """A line of a round's `scored.jsonl` as the round wrote it (also read by benchmarks/cso_scored.py)."""
    alternatives = StepAlternatives(**{**record["alternatives"], "actions": tuple(record["alternatives"]["actions"])})
    # Logs written before the PRM's answers were kept have no "answers".
    return ScoredStep(alternatives, record["policy_score"], tuple(record["scores"]), record["candidate"],
                      record["prm_failures"], tuple(record.get("answers", ())), tuple(record.get("clean_scores", ())))


def _branch_to(branch: Branch) -> dict:
    return {"pick": asdict(branch.pick), "continuations": [trajectory_to_record(t) for t in branch.continuations]}


def _branch_from(record: dict) -> Branch:
    return Branch(BranchPick(**record["pick"]), tuple(trajectory_from_record(t) for t in record["continuations"]))


def funnel(rollouts: Sequence[Trajectory], failures: Sequence[Trajectory], scored: Sequence[ScoredStep],
           picks: Sequence[BranchPick], branches: Sequence[Branch], pairs: Sequence[dict]) -> dict[str, float]:
    """The round's numbers: from failed trajectories to candidates, verified steps and pairs."""
    steps = sum(t.num_steps for t in failures)
    supervised = {(p["trajectory_id"], p["at"]) for p in pairs}
    verified = [b for b in branches if b.verified]
    row = {
        "cso/rollout_success_rate": summarize(rollouts).success_rate if rollouts else 0.0,
        "cso/failed_trajectories": float(len(failures)),
        "cso/steps": float(steps),
        "cso/alternatives_per_step": sum(len(s.alternatives.actions) for s in scored) / max(1, len(scored)),
        "cso/unreadable_alternatives": float(sum(s.alternatives.unreadable for s in scored)),
        "cso/candidates": float(sum(s.candidate for s in scored)),
        "cso/candidates_per_failure": sum(s.candidate for s in scored) / max(1, len(failures)),
        "cso/branched": float(len(picks)),
        "cso/verified": float(len(verified)),
        "cso/pairs": float(len(pairs)),
        "cso/share_supervised": len(supervised) / steps if steps else 0.0,
        "cso/prm_failures": float(sum(s.prm_failures for s in scored)),
    }
    # A round that branched nothing (Step-DPO, no verification) has no rate; a 0 would read as "all failed".
    if branches:
        row["cso/verification_rate"] = len(verified) / len(branches)
    # Where the planner judged the pairs (`planner_prefers_chosen`): the share it agrees with.
    judged = [p["planner_prefers_chosen"] for p in pairs if p.get("planner_prefers_chosen") is not None]
    if judged:
        row["cso/pair_accuracy"] = sum(judged) / len(judged)
    noised = [(a, c) for s in scored for a, c in zip((s.policy_score, *s.scores), s.clean_scores)]
    if noised:
        row["cso/prm_noised"] = sum(a != c for a, c in noised) / len(noised)
    return row


@training_method("cso", CSOConfig,
                 help="Critical Step Optimization: DPO on verified critical steps of the policy's failures")
def train_cso(config: CSOConfig, out: str | Path, *, resume: bool = False) -> Path:
    single_process("cso")
    run = TrainingRun("cso", CSOConfig, config, out, resume=resume)
    config = run.config
    expert_role, prm_role = config.role_specs()
    model = config.load_policy([expert_role, prm_role])
    run.begin(model, {}, {}, config.rounds_schedule())
    expert_backend = resolve(expert_role, model)
    prm = build_prm(config.prm, model, fallback=config.prm_fallback, allowed=PRM_ROLES, seed=config.seed)

    prompts = config.rollout_config(SamplingParams(), "train").prompt_builder()
    judged = plans_from_any_state(config.env, config.env_kwargs)  # pair accuracy needs the planner

    for r in run.steps(config.rounds, "cso rounds"):
        started = time.perf_counter()
        files = RoundFiles(run.path, r)
        run.phase("failures")
        seeds = config.round_tasks(r)
        rollouts = files.cached("rollouts", lambda: config.round_engine(model.sampler, config.temperature, r, 1).run(
                                    [Task(seed=s) for s in seeds]),
                                trajectory_to_record, trajectory_from_record)
        failures = [t for t in rollouts if not t.success]
        run.env_steps += sum(t.num_steps for t in rollouts)

        run.phase("alternatives")
        expert = config.round_engine(expert_backend, config.expert_temperature, r, 2)
        scored = files.cached("scored", lambda: score_steps(prm, failures, sample_alternatives(expert, failures, config.k),
                                                           config.gamma_low, config.gamma_high),
                              asdict, scored_step_from)
        if config.method == "ipr":
            picks = monte_carlo_picks([step.alternatives for step in scored])
        elif config.method == "cso" and config.verification:
            picks = branch_points(scored, config.gamma_high, use_prm=config.use_prm)
        else:
            picks = []
        rollouts_per_pick = config.mc_rollouts if config.method == "ipr" else config.verify_rollouts

        run.phase("verify")
        policy = config.round_engine(model.sampler, config.temperature, r, 3)
        branches = files.cached("branches", lambda: verify(policy, failures, picks, rollouts_per_pick),
                                _branch_to, _branch_from)
        run.env_steps += sum(t.num_steps for b in branches for t in b.continuations)

        def pairs_of_round() -> list[dict]:
            if config.method == "step-dpo":
                pairs = step_dpo_pairs(failures, scored, prompts)
            elif config.method == "ipr":
                pairs = monte_carlo_pairs(failures, [step.alternatives for step in scored], branches, prompts)
            else:
                pairs = make_pairs(failures, scored, branches, prompts, source=config.pair_source,
                                   verified_only=config.verification, high=config.gamma_high)
            # Each pair says whether the planner agrees with it (None: no planner to ask).
            right = planner_prefers_chosen(failures, pairs) if judged else [None] * len(pairs)
            return [{**pair, "planner_prefers_chosen": ok} for pair, ok in zip(pairs, right)]

        pairs = files.cached("pairs", pairs_of_round, lambda pair: {**pair, "round": r}, dict)
        row = {**funnel(rollouts, failures, scored, picks, branches, pairs), **live_tide_metrics(rollouts)}
        collect_s = time.perf_counter() - started

        run.phase("dpo")
        started = time.perf_counter()
        if pairs:
            row.update(dpo_round(model, pairs, config.dpo_settings(), run.path).metrics())
        row.update({"rollout/env_steps": run.env_steps, "timing/collect_s": collect_s,
                    "timing/dpo_s": time.perf_counter() - started})
        run.end_step(r, row, f"{len(failures)} failures · {int(row['cso/candidates'])} candidates · "
                             f"{int(row['cso/verified'])} verified · {len(pairs)} pairs")
    return run.finish(rounds=config.rounds, env_steps=run.env_steps)
