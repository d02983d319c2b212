"""CSO's agent side: alternatives at recorded states, their process rewards, branch verification, pairs.

Also the step-level baselines the paper compares with, built from the same stages:
Step-DPO (`step_dpo_pairs`: the PRM's best alternative against the policy's action at every
step, no verification) and IPR (`monte_carlo_pairs`: each action's value is the success rate
of policy continuations after it).

Everything here works on failed trajectories and rollout engines; nothing trains or writes
files (`hindsight.methods.cso` runs the stages and keeps their outputs).

    alternatives = sample_alternatives(expert_engine, failures, k=5)   # one pooled run
    scored = score_steps(prm, failures, alternatives)
    picks = branch_points(scored)                                        # candidates' best alternatives
    branches = verify(policy_engine, failures, picks)                    # policy continues; success verifies
    pairs = make_pairs(failures, scored, branches, prompts)
    planner_prefers_chosen(failures, pairs)                              # pair accuracy (built-in envs)

Sampling k actions at a replayed state is a one-turn continuation of the pooled engine
(`Task.max_turns=1` after the recorded prefix), so every alternative of every step of every
failure goes out in the same batched calls as any rollout. Verification is a branch: the
prefix replayed, the alternative taken, then the **policy** to the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hindsight.agent.engine import RolloutEngine, Task, branch_task, replay_prefix
from hindsight.agent.prm import OraclePRM, ProcessRewardModel, StepQuery
from hindsight.agent.prompts import PromptBuilder
from hindsight.algos.cso import EXPERT_POLICY, GAMMA_HIGH, GAMMA_LOW, choose_pairs, is_candidate, worth_verifying
from hindsight.types import Trajectory


@dataclass(frozen=True)
class StepAlternatives:
    """The distinct alternatives an expert proposed at step `at` of failure `trajectory`.

    `unreadable` counts samples with no readable action; `repeats` those equal to an earlier
    sample or to the policy's own action (which is not an alternative to itself).
    """

    trajectory: int
    at: int
    policy_action: str
    actions: tuple[str, ...]
    unreadable: int = 0
    repeats: int = 0


@dataclass(frozen=True)
class ScoredStep:
    """A step with the PRM's scores: the policy's action and each alternative (same order).

    `answers` holds what the PRM said of each, the policy's action first (a judge's raw answer,
    the oracle's plan lengths), so an unreadable or odd rating can be read back from the log.
    `clean_scores`, in the same order, are a noisy PRM's scores before the noise (empty when
    the PRM is not noisy).
    """

    alternatives: StepAlternatives
    policy_score: float
    scores: tuple[float, ...]
    candidate: bool
    prm_failures: int = 0
    answers: tuple[str, ...] = ()
    clean_scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class BranchPick:
    """One alternative to verify: failure `trajectory`, step `at`, alternative number `alternative`."""

    trajectory: int
    at: int
    alternative: int
    action: str


@dataclass(frozen=True)
class Branch:
    """A pick and the policy's continuations after it; verified when any continuation succeeded."""

    pick: BranchPick
    continuations: tuple[Trajectory, ...]

    @property
    def verified(self) -> bool:
        return any(t.success for t in self.continuations)


def policy_action(trajectory: Trajectory, at: int) -> str:
    """The policy's logged action at a step ('' when it wrote none)."""
    return trajectory.steps[at].action or ""


def sample_alternatives(expert: RolloutEngine, failures: Sequence[Trajectory], k: int,
                        steps: Sequence[tuple[int, int]] | None = None) -> list[StepAlternatives]:
    """k expert samples at every step (or the given (trajectory, step) pairs), deduplicated.

    One pooled run: each sample is a one-turn continuation of the recorded prefix.
    """
    if k < 1:
        raise ValueError("k (alternatives per step) must be >= 1")
    points = list(steps) if steps is not None else [(i, at) for i, t in enumerate(failures) for at in range(t.num_steps)]
    tasks = [Task(seed=failures[i].seed, sample=j, prefix=replay_prefix(failures[i], at), max_turns=1)
             for i, at in points for j in range(k)]
    samples = expert.run(tasks)
    found = []
    for n, (i, at) in enumerate(points):
        own = policy_action(failures[i], at)
        seen: list[str] = []
        unreadable = repeats = 0
        for sample in samples[n * k:(n + 1) * k]:
            step = sample.steps[-1] if sample.num_steps > at else None
            action = step.action if step is not None and step.parse_error is None else None
            if not action:
                unreadable += 1
            elif action == own or action in seen:
                repeats += 1
            else:
                seen.append(action)
        found.append(StepAlternatives(i, at, own, tuple(seen), unreadable, repeats))
    return found


def score_steps(prm: ProcessRewardModel, failures: Sequence[Trajectory], alternatives: Sequence[StepAlternatives],
                low: float = GAMMA_LOW, high: float = GAMMA_HIGH) -> list[ScoredStep]:
    """The PRM's scores of each step's policy action and alternatives (one `score` call for all)."""
    queries: list[StepQuery] = []
    for alt in alternatives:
        trajectory = failures[alt.trajectory]
        queries.append(StepQuery(trajectory, alt.at, alt.policy_action))
        queries += [StepQuery(trajectory, alt.at, action) for action in alt.actions]
    results = iter(prm.score(queries))
    scored = []
    for alt in alternatives:
        own = next(results)
        others = [next(results) for _ in alt.actions]
        values = tuple(s.value for s in others)
        failed = sum(s.error is not None for s in [own, *others])
        answers = tuple(score.text for score in [own, *others])
        clean = tuple(score.clean for score in [own, *others])
        scored.append(ScoredStep(alt, own.value, values, is_candidate(own.value, values, low, high), failed, answers,
                                 () if None in clean else clean))  # type: ignore[arg-type]  # None excluded
    return scored


def planner_prefers_chosen(failures: Sequence[Trajectory], pairs: Sequence[dict[str, Any]]) -> list[bool]:
    """For each pair, whether its chosen move is really better than its rejected one.

    "Better" is the environment's planner's word (`OraclePRM`): the chosen move must score
    strictly higher, so a pair of two equally good moves counts as wrong. It is the share of
    right pairs that a noisy PRM erodes and verification should protect (`cso/pair_accuracy`).
    Needs an environment with a planner; `failures` must hold every pair's trajectory.
    """
    by_id = {t.id: t for t in failures}
    queries = []
    for pair in pairs:
        trajectory = by_id[pair["trajectory_id"]]
        queries += [StepQuery(trajectory, pair["at"], pair["chosen_action"]),
                    StepQuery(trajectory, pair["at"], pair["rejected_action"])]
    scores = OraclePRM().score(queries)
    return [scores[2 * i].value > scores[2 * i + 1].value for i in range(len(pairs))]


def branch_points(scored: Sequence[ScoredStep], high: float = GAMMA_HIGH, *, use_prm: bool = True) -> list[BranchPick]:
    """What to verify: each candidate step's alternatives rated above γ_high.

    Without the PRM (`use_prm=False`, the "no PRM" ablation) every alternative of every step.
    """
    picks = []
    for step in scored:
        alt = step.alternatives
        if not use_prm:
            chosen = list(range(len(alt.actions)))
        elif step.candidate:
            chosen = worth_verifying(step.scores, high)
        else:
            chosen = []
        picks += [BranchPick(alt.trajectory, alt.at, j, alt.actions[j]) for j in chosen]
    return picks


def verify(policy: RolloutEngine, failures: Sequence[Trajectory], picks: Sequence[BranchPick],
           rollouts: int = 1) -> list[Branch]:
    """Replay each pick's prefix, take its alternative, let the policy finish (`rollouts` times)."""
    if rollouts < 1:
        raise ValueError("rollouts (continuations per alternative) must be >= 1")
    tasks = [branch_task(failures[p.trajectory], p.at, p.action, sample=r) for p in picks for r in range(rollouts)]
    finished = policy.run(tasks)
    return [Branch(p, tuple(finished[n * rollouts:(n + 1) * rollouts])) for n, p in enumerate(picks)]


def as_response(action: str) -> str:
    """An action written the way the policy answers (pairs compare actions, not prose)."""
    return f"<action>{action}</action>"


def pair_record(trajectory: Trajectory, at: int, chosen: str, rejected: str, prompts: PromptBuilder, *,
                scores: dict[str, Any], source: str, branch: Trajectory | None) -> dict[str, Any]:
    """A preference pair as one HF-datasets-compatible JSON object, with its provenance.

    `prompt`, `chosen` and `rejected` are in the conversational form TRL's DPOTrainer reads;
    the rest is enough to replay the pair with only the environment registry. A rejected
    step where the policy wrote no readable action keeps the policy's own text.
    """
    steps = trajectory.steps[:at]
    messages = prompts.build(trajectory.instruction, steps, trajectory.steps[at].observation,
                             guidance=trajectory.guidance)
    rejected_text = as_response(rejected) if rejected else trajectory.steps[at].raw
    return {
        "prompt": [{"role": m.role, "content": m.content} for m in messages],
        "chosen": [{"role": "assistant", "content": as_response(chosen)}],
        "rejected": [{"role": "assistant", "content": rejected_text}],
        "source": source,
        "env": trajectory.env,
        "env_kwargs": dict(trajectory.env_kwargs),
        "seed": trajectory.seed,
        "split": trajectory.split,
        "trajectory_id": trajectory.id,
        "at": at,
        "prefix_actions": [s.action or "" for s in steps],
        "chosen_action": chosen,
        "rejected_action": rejected,
        "prm": scores,
        "branch": None if branch is None else {"actions": [s.action or "" for s in branch.steps[at + 1:]],
                                               "success": branch.success, "score": branch.score},
    }


def make_pairs(failures: Sequence[Trajectory], scored: Sequence[ScoredStep], branches: Sequence[Branch],
               prompts: PromptBuilder, *, source: str = EXPERT_POLICY, verified_only: bool = True,
               high: float = GAMMA_HIGH) -> list[dict[str, Any]]:
    """The pairs of verified critical steps (or, with `verified_only=False`, of PRM-selected ones).

    With verification, each verified alternative is a chosen side, recorded with its first
    successful continuation. Without it (the "no verification" ablation) every candidate
    step's alternatives above γ_high are chosen sides on the PRM's word alone. Who proposed
    the alternatives (an expert, or the policy itself for `policy+policy`) is the caller's
    choice of engine in `sample_alternatives`.
    """
    by_step: dict[tuple[int, int], dict[int, Branch]] = {}
    for branch in branches:
        by_step.setdefault((branch.pick.trajectory, branch.pick.at), {})[branch.pick.alternative] = branch
    pairs = []
    for step in scored:
        alt = step.alternatives
        done = by_step.get((alt.trajectory, alt.at), {})
        if verified_only:
            outcome: list[bool | None] = [done[j].verified if j in done else None for j in range(len(alt.actions))]
        elif step.candidate:
            outcome = [score > high for score in step.scores]
        else:
            continue
        for choice in choose_pairs(alt.actions, outcome, alt.policy_action, source):
            own = choice.rejected is None
            branch = done.get(choice.chosen)
            success = next((t for t in branch.continuations if t.success), None) if branch is not None else None
            scores = {"policy": step.policy_score, "chosen": step.scores[choice.chosen],
                      "rejected": step.policy_score if own else step.scores[choice.rejected],
                      "alternatives": dict(zip(alt.actions, step.scores))}
            rejected = alt.policy_action if own else alt.actions[choice.rejected]
            pairs.append(pair_record(failures[alt.trajectory], alt.at, alt.actions[choice.chosen], rejected, prompts,
                                     scores=scores, source=source, branch=success))
    return pairs


def step_dpo_pairs(failures: Sequence[Trajectory], scored: Sequence[ScoredStep], prompts: PromptBuilder
                   ) -> list[dict[str, Any]]:
    """Step-DPO: at every step, the PRM's best alternative against the policy's action when it scores higher."""
    pairs = []
    for step in scored:
        alt = step.alternatives
        if not alt.actions:
            continue
        best = max(range(len(alt.actions)), key=lambda j: step.scores[j])
        if step.scores[best] > step.policy_score:
            scores = {"policy": step.policy_score, "chosen": step.scores[best], "rejected": step.policy_score,
                      "alternatives": dict(zip(alt.actions, step.scores))}
            pairs.append(pair_record(failures[alt.trajectory], alt.at, alt.actions[best], alt.policy_action, prompts,
                                     scores=scores, source="step-dpo", branch=None))
    return pairs


def monte_carlo_picks(alternatives: Sequence[StepAlternatives]) -> list[BranchPick]:
    """IPR's branches: every alternative and the policy's own action (alternative −1) at every step."""
    picks = []
    for alt in alternatives:
        picks.append(BranchPick(alt.trajectory, alt.at, -1, alt.policy_action))
        picks += [BranchPick(alt.trajectory, alt.at, j, action) for j, action in enumerate(alt.actions)]
    return picks


def monte_carlo_pairs(failures: Sequence[Trajectory], alternatives: Sequence[StepAlternatives],
                      branches: Sequence[Branch], prompts: PromptBuilder) -> list[dict[str, Any]]:
    """IPR: the alternative with the highest Monte-Carlo value against the policy's action when it is higher.

    An action's value is the share of its policy continuations that succeeded (`verify` with
    several rollouts over `monte_carlo_picks`).
    """
    value = {(b.pick.trajectory, b.pick.at, b.pick.alternative): sum(t.success for t in b.continuations)
             / len(b.continuations) for b in branches}
    pairs = []
    for alt in alternatives:
        if not alt.actions:
            continue
        own = value.get((alt.trajectory, alt.at, -1))
        if own is None:
            continue
        values = [value.get((alt.trajectory, alt.at, j), 0.0) for j in range(len(alt.actions))]
        best = max(range(len(alt.actions)), key=lambda j: values[j])
        if values[best] > own:
            scores = {"policy": own, "chosen": values[best], "rejected": own,
                      "alternatives": dict(zip(alt.actions, values)), "kind": "monte-carlo success rate"}
            pairs.append(pair_record(failures[alt.trajectory], alt.at, alt.actions[best], alt.policy_action, prompts,
                                     scores=scores, source="ipr", branch=None))
    return pairs
