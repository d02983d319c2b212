"""Small hand-written log records for the diagnostics tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence


def tide_step(observation: str, action: str, valid: bool = True, entropy: float | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {
        "observation": observation,
        "true_state": observation,
        "analysis": "thinking about " + action,
        "action": action,
        "env_feedback": {"action_is_valid": valid, "reward": 0, "done": False, "info": {}},
    }
    if entropy is not None:
        step["token_entropy_stats"] = {"analysis_stats": {"mean": 1.0}, "action_stats": {"mean": entropy}}
    return step


def tide_sample(steps: Sequence[dict], success: bool, seed: int, query: str = "solve it",
                second_rollout: Sequence[dict] | None = None) -> dict[str, Any]:
    rollouts = [{"rollout_idx": 0, "rollout_results": {"steps": list(steps), "success": success, "loop": []}}]
    if second_rollout is not None:
        rollouts.append({"rollout_idx": 1, "rollout_results": {"steps": list(second_rollout), "success": not success,
                                                               "loop": []}})
    return {"query": query, "seed": seed, "avg_accuracy": float(success), "traj_rollouts": rollouts}


def generic_record(observations: Sequence[str], actions: Sequence[str | None], success: bool, *, env: str = "",
                   valid: Sequence[bool] | None = None, states: Sequence[str] | None = None,
                   entropies: Sequence[float | None] | None = None, **extra: Any) -> dict[str, Any]:
    steps = []
    for i, (observation, action) in enumerate(zip(observations, actions)):
        step: dict[str, Any] = {"observation": observation, "action": action}
        if valid is not None:
            step["valid"] = valid[i]
        if states is not None:
            step["state"] = states[i]
        if entropies is not None and entropies[i] is not None:
            step["entropy"] = entropies[i]
        steps.append(step)
    record = {"success": success, "steps": steps, **extra}
    if env:
        record["env"] = env
    return record


def write_jsonl(path: Path, records: Sequence[Any], *, raw_lines: Sequence[str] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        for line in raw_lines:
            handle.write(line + "\n")
    return path


def walk_trajectory(states: Sequence[str], actions: Sequence[str], *, success: bool, invalid: Sequence[int] = (),
                    env: str = "toy", max_steps: int | None = None, seed: int = 0, **meta: Any):
    """An in-memory `Trajectory` that walks the given states (the state before each action)."""
    from hindsight.types import Step, Trajectory

    steps = tuple(
        Step(index=i, observation=f"at {state}", state_key=state, raw=f"<action>{action}</action>", action=action,
             analysis=None, valid=i not in invalid, reward=0.0, score=0.0, feedback="")
        for i, (state, action) in enumerate(zip(states, actions))
    )
    env_kwargs = {} if max_steps is None else {"max_steps": max_steps}
    return Trajectory(env=env, seed=seed, instruction="walk", steps=steps, final_observation="end",
                      final_state_key="end", success=success, score=float(success), terminated=True,
                      truncated=False, split="train", id=f"{env}:{seed}:{len(states)}", env_kwargs=env_kwargs,
                      meta=meta)
