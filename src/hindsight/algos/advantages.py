"""Advantage estimators: one registry, one typed input, one typed output.

Every estimator is a function `(GroupBatch, AdvantageOptions) -> Advantages` registered
under the name a config's `advantage_estimator` gives:

    @ADVANTAGE_ESTIMATORS.register("gigpo")
    def gigpo(batch: GroupBatch, options: AdvantageOptions) -> Advantages: ...

The training loops (GRPO, ECHO, Self-Guide's GRPO, verl's `hindsight_grpo`) build a
`GroupBatch` and call the estimator their config names, so a new estimator is one decorated
function here and no loop changes. Pure functions over tensors and plain values, no I/O.
Shapes: N = trajectories in the batch, T_i = steps of trajectory i.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from hindsight.algos.grpo import STD_CONVENTIONS, group_advantages
from hindsight.registry import Registry


@dataclass(frozen=True)
class GroupBatch:
    """A batch of trajectory groups, the input of every advantage estimator.

    returns:      [N] float64, each trajectory's return R_i (what GRPO compares within a group).
    group_ids:    [N] trajectories sampled for the same task instance share an id; groups may
                  differ in size and their members need not be adjacent.
    step_rewards: [N][T_i] the reward of each step (a loop with only an outcome puts R_i on the
                  last step), or () when the batch has no steps (e.g. ECHO's critiques).
    state_keys:   [N][T_i] the canonical state before each step (`Step.state_key`), or ().
    """

    returns: torch.Tensor
    group_ids: tuple[Hashable, ...]
    step_rewards: tuple[tuple[float, ...], ...] = ()
    state_keys: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.returns.dim() != 1 or len(self.group_ids) != self.returns.shape[0]:
            raise ValueError(f"returns must be [N] with one group id each, got shape {tuple(self.returns.shape)} "
                             f"and {len(self.group_ids)} ids")
        if bool(self.step_rewards) != bool(self.state_keys):
            raise ValueError("step_rewards and state_keys come together (or neither)")
        if self.step_rewards:
            if len(self.step_rewards) != len(self.group_ids) or len(self.state_keys) != len(self.group_ids):
                raise ValueError("step_rewards and state_keys need one row per trajectory")
            if any(len(r) != len(k) for r, k in zip(self.step_rewards, self.state_keys)):
                raise ValueError("each trajectory needs one state key per step reward")

    @classmethod
    def from_matrix(cls, returns: torch.Tensor) -> GroupBatch:
        """A batch without steps from a [num_groups, G] matrix of returns: row q is group q."""
        if returns.dim() != 2:
            raise ValueError(f"returns must be [num_groups, G], got shape {tuple(returns.shape)}")
        groups, size = returns.shape
        return cls(returns.reshape(-1).to(torch.float64), tuple(row // size for row in range(groups * size)))

    @property
    def has_steps(self) -> bool:
        return bool(self.step_rewards)


@dataclass(frozen=True)
class AdvantageOptions:
    """Settings an estimator may read; each estimator documents those it uses.

    normalize_std: divide by the group's standard deviation (else only centre, Dr. GRPO style).
    std: the standard deviation's convention, population (divide by G) or sample (G − 1, verl's).
    eps: added to the standard deviation.
    gamma: discount of step-level returns (GiGPO; verl-agent's default 0.95).
    step_weight: ω, the weight of the step-level advantage (GiGPO; default 1 as verl-agent's).
    """

    normalize_std: bool = True
    std: str = "population"
    eps: float = 1e-6
    gamma: float = 0.95
    step_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.std not in STD_CONVENTIONS:
            raise ValueError(f"std must be one of {', '.join(STD_CONVENTIONS)}, not {self.std!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], not {self.gamma}")


@dataclass(frozen=True)
class Advantages:
    """An estimator's output.

    trajectory: [N] float64, one advantage per trajectory (GRPO's A_i, GiGPO's episode-level A_E).
    steps:      [N] tensors of [T_i] float64, the advantage of every step, or None when every step
                of a trajectory takes the trajectory's advantage.
    """

    trajectory: torch.Tensor
    steps: tuple[torch.Tensor, ...] | None = None

    def at(self, index: int, turns: Sequence[int]) -> float:
        """The advantage of a training sequence made of trajectory `index`'s steps `turns`.

        A sequence spanning turns whose step advantages differ would need per-token
        advantages; it raises ValueError rather than averaging them silently.
        """
        if self.steps is None:
            return float(self.trajectory[index])
        values = {float(self.steps[index][turn]) for turn in turns}
        if len(values) != 1:
            raise ValueError(f"turns {tuple(turns)} of trajectory {index} have different step advantages; train "
                             "them as one sequence per turn")
        return values.pop()


@dataclass(frozen=True)
class StepParts:
    """Where a step-level estimator's advantages depart from the episode's (GiGPO's A_t − A_E).

    steps:      steps that have a step advantage;
    with_part:  steps whose advantage differs from their trajectory's (|A_t − A_E| > tolerance);
    first_turn: of `with_part`, the steps at turn 0, where every sample of a task stands on the
                same start state, so the step-level group is the whole group and its return-to-go
                ranks the samples as their episode returns do;
    opposing:   of `with_part`, the steps where the step part pulls against the episode's
                advantage ((A_t − A_E)·A_E < 0): the contrast that GRPO alone cannot make.
    """

    steps: int = 0
    with_part: int = 0
    first_turn: int = 0
    opposing: int = 0

    def __add__(self, other: StepParts) -> StepParts:
        return StepParts(self.steps + other.steps, self.with_part + other.with_part,
                         self.first_turn + other.first_turn, self.opposing + other.opposing)

    @property
    def share(self) -> float:
        """with_part / steps (0 without steps)."""
        return self.with_part / max(1, self.steps)

    @property
    def first_turn_share(self) -> float:
        """first_turn / with_part (0 without step parts)."""
        return self.first_turn / max(1, self.with_part)

    @property
    def opposing_share(self) -> float:
        """opposing / with_part (0 without step parts)."""
        return self.opposing / max(1, self.with_part)


def step_parts(advantages: Advantages, tolerance: float = 1e-6) -> StepParts:
    """Count the steps of `advantages` whose step advantage carries a part of its own (StepParts);
    all zeros for an estimator without step advantages."""
    if advantages.steps is None:
        return StepParts()
    total = StepParts()
    for episode, steps in zip(advantages.trajectory.tolist(), advantages.steps):
        part = steps.double() - episode
        has = part.abs() > tolerance
        total += StepParts(steps=len(part), with_part=int(has.sum()), first_turn=int(has[:1].sum()),
                           opposing=int((has & (part * episode < 0)).sum()))
    return total


#: An advantage estimator: (GroupBatch, AdvantageOptions) -> Advantages.
AdvantageEstimator = Callable[[GroupBatch, AdvantageOptions], Advantages]

#: Advantage estimators by the name a config's `advantage_estimator` gives.
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def group_relative(values: torch.Tensor, group_ids: Sequence[Hashable], options: AdvantageOptions) -> torch.Tensor:
    """`group_advantages` over the entries that share a group id; groups may differ in size.

    values: [M]; group_ids: [M]. Returns [M] float64. Equal values in a group, and so a group
    of one, give exactly 0.
    """
    if len(group_ids) != values.shape[0]:
        raise ValueError(f"one group id per value is needed: {len(group_ids)} ids for {values.shape[0]} values")
    members: dict[Hashable, list[int]] = {}
    for position, group in enumerate(group_ids):
        members.setdefault(group, []).append(position)
    out = torch.zeros(values.shape[0], dtype=torch.float64)
    for positions in members.values():
        picked = torch.tensor(positions, dtype=torch.long)
        out[picked] = group_advantages(values[picked].to(torch.float64).unsqueeze(0),
                                       normalize_std=options.normalize_std, std=options.std, eps=options.eps)[0]
    return out


def discounted_returns(rewards: Sequence[float], gamma: float) -> torch.Tensor:
    """Return-to-go of every step, G_t = r_t + γ·G_{t+1} (G_T = 0).

    rewards: [T] the rewards of one trajectory's steps. Returns [T] float64.
    """
    out = torch.zeros(len(rewards), dtype=torch.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo(batch: GroupBatch, options: AdvantageOptions) -> Advantages:
    """GRPO: A_i = (R_i − mean_group R) / (std_group R + eps), shared by every step of trajectory i.

    Uses normalize_std, std and eps; steps, if any, are not read.
    """
    return Advantages(group_relative(batch.returns, batch.group_ids, options))


@ADVANTAGE_ESTIMATORS.register("gigpo")
def gigpo(batch: GroupBatch, options: AdvantageOptions) -> Advantages:
    """GiGPO (Feng et al. 2025, verl-agent): A_t = A_E + ω·A_S(t), a step-level advantage on top of GRPO's.

    A_E is GRPO's advantage of the trajectory's return. Inside a group, the steps taken from
    the same state (equal `state_keys`, by one trajectory or several) form a step-level group;
    A_S is the discounted return-to-go from each step (`discounted_returns`, γ = gamma)
    normalised within its step-level group like GRPO's (normalize_std, std, eps). A state met
    once is a group of one and gets A_S = 0, so without repeated states GiGPO is GRPO; so is
    it on a batch without steps (ECHO's critiques), which has no step-level groups at all.
    ω = step_weight.
    """
    episode = grpo(batch, options).trajectory
    if not batch.has_steps:
        return Advantages(episode)
    to_go = [discounted_returns(rewards, options.gamma) for rewards in batch.step_rewards]
    anchors = [(group, key) for group, keys in zip(batch.group_ids, batch.state_keys) for key in keys]
    flat = torch.cat(to_go)
    step_level = group_relative(flat, anchors, options).split([len(r) for r in to_go])
    steps = tuple(episode[i] + options.step_weight * step_level[i] for i in range(len(to_go)))
    return Advantages(episode, steps)
