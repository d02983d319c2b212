"""Does a policy's move depend on the state? Oracle agreement and action mix of trajectories.

For every step, the task is replayed to the state the move was made in and each admissible
move is tried on a copy: the step *agrees* when its move is one of those after which the
planner needs the fewest further moves to succeed (ties all count). A state-independent
policy shows at once, whatever its success: its action mix is lopsided (issue 45's 4×4
start answered "up" 96% of the time) and its agreement sits near the chance level of that
mix. Two more numbers make the agreement readable where legality and state-dependence part:
the agreement among the valid moves alone, and the *chance level*, the agreement a uniformly
random admissible move would have at the same states. In BlocksWorld a state admits few moves
and many tie for best, so a random legal move agrees about half the time (issue 45), and a
clone whose moves are half refused scores below that while its valid moves are far above it.
Only environments whose planner plans from any state (`oracle_replans`: FrozenLake,
BlocksWorld, Sudoku) have an answer; for the others `oracle_agreement` returns None.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from hindsight.agent.replay import ReplayDivergence, planner_distance, planning_env, take_recorded
from hindsight.envs import make
from hindsight.envs.contract import Env, EnvError
from hindsight.types import Trajectory

#: The action mix keeps this many distinct actions; the rest are counted under OTHER.
MIX_SIZE = 12
OTHER = "(other)"
INVALID = "(invalid)"


@dataclass(frozen=True)
class Agreement:
    """How many moves were among the planner's best, of how many replayed, and the action mix."""

    steps: int
    agreeing: int
    actions: dict[str, int] = field(default_factory=dict)
    #: Trajectories that did not replay to their recorded states (a changed environment).
    diverged: int = 0
    #: The replayed moves that were valid (an invalid one never agrees).
    valid: int = 0
    #: Σ over the replayed states of |best moves| / |admissible moves|.
    chance_sum: float = 0.0

    @property
    def rate(self) -> float:
        return self.agreeing / self.steps if self.steps else 0.0

    @property
    def valid_rate(self) -> float:
        """The agreement among the valid moves alone."""
        return self.agreeing / self.valid if self.valid else 0.0

    @property
    def chance(self) -> float:
        """The agreement of a uniformly random admissible move at the same states."""
        return self.chance_sum / self.steps if self.steps else 0.0


def best_moves(env: Env, moves: Iterable[str]) -> set[str]:
    """The moves after which the planner needs the fewest steps to succeed (none if all fail)."""
    distances = {}
    for move in moves:
        probe = copy.deepcopy(env)
        try:
            probe.step(move)
            distances[move] = planner_distance(probe)
        finally:
            probe.close()
    best = min(distances.values(), default=math.inf)
    return {m for m, d in distances.items() if d == best} if best < math.inf else set()


def plans_from_any_state(env_id: str, env_kwargs: dict) -> bool:
    """Whether the environment's planner can rate a move from any state it is in."""
    try:
        env = make(env_id, **env_kwargs)
    except EnvError:
        return False
    try:
        return bool(env.has_oracle and env.oracle_replans)
    finally:
        env.close()


def oracle_agreement(trajectories: Iterable[Trajectory]) -> Agreement | None:
    """Replay each trajectory and count its moves that were among the planner's best.

    None when there is nothing to rate or the environment's planner cannot rate a move
    (a recorded gold path, or no oracle). An invalid step counts as a move that disagrees.
    """
    trajectories = [t for t in trajectories if t.steps]
    if not trajectories or not plans_from_any_state(trajectories[0].env, trajectories[0].env_kwargs):
        return None
    mix: Counter[str] = Counter()
    agreeing = steps = diverged = valid = 0
    chance_sum = 0.0
    for trajectory in trajectories:
        env = planning_env(trajectory)
        try:
            for step in trajectory.steps:
                action = step.action if step.valid and step.action else INVALID
                mix[action] += 1
                steps += 1
                admissible = env.admissible_actions()
                best = best_moves(env, admissible)
                chance_sum += len(best) / len(admissible) if admissible else 0.0
                valid += action != INVALID
                agreeing += action in best
                take_recorded(env, trajectory, step)
        except ReplayDivergence:
            diverged += 1
        finally:
            env.close()
    kept = dict(mix.most_common(MIX_SIZE))
    if len(mix) > MIX_SIZE:
        kept[OTHER] = steps - sum(kept.values())
    return Agreement(steps, agreeing, kept, diverged, valid, chance_sum)
