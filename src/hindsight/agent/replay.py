"""Replaying recorded trajectories and asking the environment's planner about them.

A trajectory records its seed, its environment's keywords, every action and the state key
before each step, so a fresh environment can be brought to any recorded state and the
planner (`oracle_action`) asked how far success is from there. The template critic, the
oracle PRM and Self-Guide's oracle labels all stand on these helpers; the rollout engine
raises `ReplayDivergence` when a replayed prefix leaves the recorded path.

    env = replay_to(trajectory, at)          # the state before step `at`, no step budget
    planner_distance(env)                    # moves the planner needs from there to success
    env.close()

Whoever asks for an environment here closes it; the copies the planner plays on are closed here.
"""

from __future__ import annotations

import copy
import math

from hindsight.envs import make
from hindsight.envs.contract import Env
from hindsight.types import Step, Trajectory

# The planner's plans are at most a few times the size of the task; far beyond that it is lost.
PLAN_LIMIT = 10_000


class ReplayDivergence(RuntimeError):
    """Replaying a recorded prefix reached a different state than was recorded."""


def planner_distance(env: Env) -> float:
    """Actions the environment's planner needs from the current state to success.

    Runs the planner on a copy, so `env` is untouched. Infinite once the episode has
    ended unsolved (e.g. a fall into a hole); 0 when it is solved.
    """
    if env.done:
        return 0.0 if env.is_success() else math.inf
    probe = copy.deepcopy(env)
    try:
        moves = 0
        while not probe.done and moves < PLAN_LIMIT:
            probe.step(probe.oracle_action())
            moves += 1
        return float(moves) if probe.is_success() else math.inf
    finally:
        probe.close()


def planning_env(trajectory: Trajectory) -> Env:
    """A fresh environment of `trajectory`'s task, reset, with no step budget (for the planner)."""
    env = make(trajectory.env, **{**trajectory.env_kwargs, "max_steps": PLAN_LIMIT})
    env.reset(trajectory.seed)
    return env


def take_recorded(env: Env, trajectory: Trajectory, step: Step) -> None:
    """Take a recorded step again, after checking the environment is where the log says it was."""
    if env.state_key() != step.state_key:
        raise ReplayDivergence(f"{trajectory.id}: turn {step.index} does not replay to its recorded state")
    env.step(step.action or "")


def replay_to(trajectory: Trajectory, at: int) -> Env:
    """A fresh environment in the state before step `at` of `trajectory`, with no step budget."""
    if not 0 <= at <= trajectory.num_steps:
        raise ValueError(f"step {at} is outside the trajectory (0..{trajectory.num_steps})")
    env = planning_env(trajectory)
    try:
        for step in trajectory.steps[:at]:
            take_recorded(env, trajectory, step)
    except BaseException:
        env.close()
        raise
    return env
