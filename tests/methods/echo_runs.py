"""A small ECHO run directory written from records, and a stand-in embedder, for the analysis tests.

The run's failures change with training: early ones walk into a hole, late ones run out of
moves at the edge of the lake, so a working drift measure sees them move.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml

from hindsight.logs import RunDir
from hindsight.types import Step, Trajectory

INSTRUCTION = "Walk from P to the goal G without stepping into a hole."


def step(index: int, action: str, feedback: str) -> Step:
    return Step(index=index, observation=f"state {index}", state_key=f"s{index}", raw=f"<action>{action}</action>",
                action=action, analysis=None, valid=True, reward=0.0, score=0.0, feedback=feedback)


def attempt(seed: int, update: int, *, solved: bool, late: bool, guidance: str = "", sample: int = 0) -> Trajectory:
    if solved:
        steps = (step(0, "right", "You moved right to row 1, column 2."), step(1, "down", "You reached the goal."))
        final, score = "You reached the goal.", 1.0
    elif late:
        steps = tuple(step(k, "up", "You walked into the edge of the lake and stayed where you were.")
                      for k in range(4))
        final, score = "You ran out of moves before reaching the goal.", 0.5
    else:
        steps = (step(0, "left", "You moved left and fell into a hole. The episode is over."),)
        final, score = "You fell into a hole.", 0.0
    return Trajectory(env="frozenlake", seed=seed, instruction=INSTRUCTION, steps=steps, final_observation=final,
                      final_state_key="end", success=solved, score=score, terminated=True, truncated=False,
                      split="train", id=f"frozenlake:{seed}:{sample}", guidance=guidance)


def write_echo_run(folder: Path, *, updates: int = 6, tasks: int = 4, group: int = 2, solve_all: bool = False,
                   critiques: Sequence[str] = ("At turn 1 you moved left into the hole; move right there.", "none"),
                   kind: str = "echo", evals: Sequence[int] = ()) -> Path:
    """`updates` updates of `tasks` initial attempts each, `group` refinements per attempt.

    Task k of update u fails unless k == 0 (or `solve_all`); failures in the first half of
    the updates fall into holes, later ones run out of moves. Refinement j carries
    critiques[j % len(critiques)] and improves (s_r = 1) when j is even. Each step of `evals` gets a
    validation evaluation file of 3 tasks, the first solved, failing like training at that time.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"kind": kind, "env": "frozenlake", "updates": updates,
                                                        "group_size": group}), encoding="utf-8")
    run = RunDir(folder)
    with run.trajectory_writer("initial", env="frozenlake", split="train") as initial, \
            run.trajectory_writer("train", env="frozenlake", split="train") as train:
        for update in range(1, updates + 1):
            late = update > updates // 2
            for task in range(tasks):
                seed = update * 100 + task
                solved = solve_all or task == 0
                first = attempt(seed, update, solved=solved, late=late)
                group_id = f"{update}:{seed}"
                initial.write_trajectory(first.with_meta(update=update, echo={"group": group_id, "s_o": first.score}))
                for j in range(group):
                    critique = critiques[j % len(critiques)]
                    improved = j % 2 == 0
                    refined = attempt(seed, update, solved=improved or solved, late=late, guidance=critique,
                                      sample=j + 1)
                    echo = {"group": group_id, "sample": j, "s_o": first.score, "s_r": refined.score,
                            "critique": critique, "critic_output": f"<critique>{critique}</critique>",
                            "critique_parse_error": None, "critic": "adapter"}
                    train.write_trajectory(refined.with_meta(update=update, echo=echo))
    for step_number in evals:
        with run.trajectory_writer(f"eval-validation-{step_number:06d}", env="frozenlake", split="validation") as w:
            for task in range(3):
                w.write_trajectory(attempt(task, step_number, solved=task == 0, late=step_number > updates // 2))
    return folder


class WordHashEmbedder:
    """Each word hashed into one of `dims` buckets: texts sharing words point the same way."""

    name = "word-hash"

    def __init__(self, dims: int = 16):
        self.dims = dims
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = np.zeros((len(texts), self.dims))
        for k, text in enumerate(texts):
            for word in text.lower().split():
                rows[k, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims] += 1.0
        return rows
