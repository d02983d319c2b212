"""Deterministic synthetic grid-walk trajectories, for demos, tests and benchmarks.

A simulated agent walks an n×n lake from the top-left corner to the bottom-right goal,
avoiding holes. Each turn it either steps greedily toward the goal (probability
`skill`), steps at random, or — with probability `loopiness` — falls into a rut and
repeats its last move and its reversal a few times (the A B A B pattern TIDE calls a
loop). Entropies are drawn lower inside ruts than elsewhere, mimicking the
over-confidence the TIDE paper reports at loop steps (Hindsight-format logs carry them as
action-token entropies, beside sampled log-probs). Everything derives from one seed,
so the same arguments always produce byte-identical logs.

The logs are written in Hindsight's own format (`write_run`); `tide_record` gives an
episode as a record of the official TIDE result format, which the diagnosis benchmark
(benchmarks/diagnose_speed.py) writes and reads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from hindsight.types import Step, Trajectory

_MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
_REVERSE = {"Up": "Down", "Down": "Up", "Left": "Right", "Right": "Left"}


@dataclass(frozen=True)
class WalkerSpec:
    """How the simulated agent behaves."""

    skill: float = 0.6
    loopiness: float = 0.08
    size: int = 6
    holes: int = 3
    max_steps: int = 30


@dataclass(frozen=True)
class SimStep:
    row: int
    col: int
    action: str
    valid: bool
    entropy: float
    in_rut: bool


@dataclass(frozen=True)
class SimEpisode:
    seed: int
    size: int
    holes: frozenset[tuple[int, int]]
    steps: tuple[SimStep, ...]
    final: tuple[int, int]
    success: bool


def _layout(rng: random.Random, size: int, n_holes: int) -> frozenset[tuple[int, int]]:
    cells = [(r, c) for r in range(size) for c in range(size) if (r, c) not in ((0, 0), (size - 1, size - 1))]
    # Keep the outer border of the first row and last column free so a path always exists.
    cells = [(r, c) for r, c in cells if r != 0 and c != size - 1]
    return frozenset(rng.sample(cells, min(n_holes, len(cells))))


def simulate(seed: int, spec: WalkerSpec = WalkerSpec()) -> SimEpisode:
    """One episode of the simulated agent."""
    rng = random.Random(seed)
    size = spec.size
    holes = _layout(rng, size, spec.holes)
    goal = (size - 1, size - 1)
    row = col = 0
    steps: list[SimStep] = []
    rut: list[str] = []
    last = "Right"
    success = False
    for _ in range(spec.max_steps):
        if rut:
            action, in_rut = rut.pop(0), True
        elif rng.random() < spec.loopiness:
            span = rng.randint(2, 4)
            rut = [last if k % 2 else _REVERSE[last] for k in range(2 * span)]
            action, in_rut = rut.pop(0), True
        elif rng.random() < spec.skill:
            options = [m for m, (dr, dc) in _MOVES.items() if (dr, dc) in ((1, 0), (0, 1))
                       and 0 <= row + dr < size and 0 <= col + dc < size and (row + dr, col + dc) not in holes]
            action, in_rut = (rng.choice(options) if options else rng.choice(list(_MOVES))), False
        else:
            action, in_rut = rng.choice(list(_MOVES)), False
        dr, dc = _MOVES[action]
        nr, nc = row + dr, col + dc
        valid = 0 <= nr < size and 0 <= nc < size
        entropy = round(rng.uniform(0.02, 0.25) if in_rut else rng.uniform(0.3, 1.2), 4)
        steps.append(SimStep(row, col, action, valid, entropy, in_rut))
        last = action
        if valid:
            row, col = nr, nc
        if (row, col) in holes:
            break
        if (row, col) == goal:
            success = True
            break
    return SimEpisode(seed, size, holes, tuple(steps), (row, col), success)


def render(episode: SimEpisode, row: int, col: int) -> str:
    """The observation text of a position: the grid and the facts in words."""
    size = episode.size
    lines = []
    for r in range(size):
        cells = []
        for c in range(size):
            if (r, c) == (row, col):
                cells.append("P")
            elif (r, c) == (size - 1, size - 1):
                cells.append("G")
            elif (r, c) in episode.holes:
                cells.append("O")
            else:
                cells.append("_")
        lines.append(" ".join(cells))
    holes = ", ".join(f"({r}, {c})" for r, c in sorted(episode.holes))
    lines.append(f"Player at ({row}, {col}); goal at ({size - 1}, {size - 1}); holes at {holes}.")
    return "\n".join(lines)


def to_trajectory(episode: SimEpisode, *, model: str = "sim", memory: str = "full") -> Trajectory:
    """The episode as a Hindsight `Trajectory` (FrozenLake-like)."""
    rng = random.Random(episode.seed * 7919 + 1)
    steps = []
    n = len(episode.steps)
    for i, s in enumerate(episode.steps):
        observation = render(episode, s.row, s.col)
        nxt = episode.steps[i + 1] if i + 1 < n else None
        after = (nxt.row, nxt.col) if nxt else episode.final
        won = i == n - 1 and episode.success
        tokens = rng.randint(3, 6)
        logprobs = tuple(round(-rng.expovariate(1 / s.entropy), 4) for _ in range(tokens))
        steps.append(Step(
            index=i,
            observation=observation,
            state_key=f"{s.row},{s.col}",
            raw=f"<analysis>Heading for the goal.</analysis><action>{s.action}</action>",
            action=s.action,
            analysis="Heading for the goal.",
            valid=s.valid,
            reward=1.0 if won else 0.0,
            score=1.0 if won else 0.0,
            feedback=render(episode, *after),
            logprobs=logprobs,
            # Two action tokens whose entropies average to the step's entropy.
            action_entropies=(round(0.8 * s.entropy, 4), round(1.2 * s.entropy, 4)),
        ))
    return Trajectory(
        env="frozenlake",
        seed=episode.seed,
        instruction="Reach the goal G without falling into a hole O.",
        steps=tuple(steps),
        final_observation=render(episode, *episode.final),
        final_state_key=f"{episode.final[0]},{episode.final[1]}",
        success=episode.success,
        score=1.0 if episode.success else 0.0,
        terminated=episode.success or episode.final in episode.holes,
        truncated=not episode.success and episode.final not in episode.holes,
        model=model,
        memory=memory,
        id=f"frozenlake-{episode.seed}",
    )


def tide_record(episode: SimEpisode, query: str = "Reach the goal G without falling into a hole O.") -> dict:
    """One line of an official TIDE result file for the episode (a single rollout)."""
    rng = random.Random(episode.seed * 104729 + 3)
    steps = []
    for i, s in enumerate(episode.steps):
        observation = render(episode, s.row, s.col)
        steps.append({
            "step_idx": i,
            "last_step_feedback": {"is_valid": True if i == 0 else episode.steps[i - 1].valid, "message": ""},
            "observation": observation,
            "true_state": observation,
            "input_state": observation,
            "analysis": f"I am at ({s.row}, {s.col}). The goal is down and to the right, so I move {s.action}.",
            "action": s.action,
            "env_feedback": {"action_is_valid": s.valid, "reward": 0, "done": False, "info": {}},
            "token_entropy_stats": {
                "analysis_stats": {"mean": round(rng.uniform(0.2, 1.5), 4)},
                "action_stats": {"mean": s.entropy},
            },
        })
    return {
        "query": query,
        "seed": episode.seed,
        "all_accuracies": [int(episode.success)],
        "avg_accuracy": float(episode.success),
        "pass_at_n": episode.success,
        "traj_rollouts": [{"rollout_idx": 0, "rollout_results": {
            "steps": steps, "success": episode.success, "loop": [], "meta": {"total_steps": len(steps)}}}],
        "meta": {"traj_rollout_n": 1, "step_rollout_n": 1},
    }


def write_run(run_dir: str | Path, n_episodes: int, spec: WalkerSpec = WalkerSpec(), *, model: str = "sim",
              memory: str = "full", seed: int = 0) -> Path:
    """Write a Hindsight run directory (config.yaml + trajectories/) of simulated episodes."""
    from hindsight.logs.writer import RunDir

    run = RunDir(run_dir)
    run.write_config({
        "env": "frozenlake", "env_kwargs": {"size": spec.size, "max_steps": spec.max_steps},
        "model": model, "memory": memory, "episodes": n_episodes, "split": "test", "seed": seed,
    })
    with run.trajectory_writer("test", env="frozenlake", model=model) as writer:
        for k in range(n_episodes):
            writer.write_trajectory(to_trajectory(simulate(seed * 1_000_003 + k, spec), model=model, memory=memory))
    return run.path
