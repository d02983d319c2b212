"""Evaluation: run a model on a split of an environment and write a run directory.

    config = EvalConfig(env="frozenlake", model="smollm2", episodes=20)
    run_dir = run_eval(config)

The run directory holds `config.yaml`, `trajectories/eval.jsonl` (each trajectory
written and flushed as it finishes) and `summary.json`. An interrupted evaluation
keeps every finished trajectory and marks its summary `interrupted`.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.logs import RunDir
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one evaluation run (written to the run's config.yaml)."""

    env: str
    model: str
    episodes: int = 10
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "test"
    memory: str = "full"
    seed: int = 0
    out: str | None = None
    concurrency: int = 32
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 96
    max_steps: int | None = None
    model_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        Memory.parse(self.memory)


@dataclass(frozen=True)
class EvalSummary:
    """Closing numbers of an evaluation."""

    episodes: int
    success_rate: float
    mean_score: float
    mean_steps: float
    invalid_rate: float
    steps: int
    wall_s: float
    interrupted: bool = False


def summarize(trajectories: Iterable[Trajectory], wall_s: float = 0.0, interrupted: bool = False) -> EvalSummary:
    trajectories = list(trajectories)
    n = len(trajectories)
    steps = sum(t.num_steps for t in trajectories)
    invalid = sum(not s.valid for t in trajectories for s in t.steps)
    return EvalSummary(
        episodes=n,
        success_rate=sum(t.success for t in trajectories) / n if n else 0.0,
        mean_score=sum(t.score for t in trajectories) / n if n else 0.0,
        mean_steps=steps / n if n else 0.0,
        invalid_rate=invalid / steps if steps else 0.0,
        steps=steps,
        wall_s=round(wall_s, 3),
        interrupted=interrupted,
    )


def default_out_dir(config: EvalConfig) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", config.model).strip("-")[:40]
    return Path("runs") / f"eval-{config.env}-{model}-{stamp}"


def run_eval(
    config: EvalConfig,
    *,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> Path:
    """Run the evaluation and return its run directory.

    Raises `EnvError` / `ModelError` for an unknown environment or model before any
    work starts.
    """
    from hindsight.envs import make
    from hindsight.llm import load_model

    env_kwargs = dict(config.env_kwargs)
    if config.max_steps is not None:
        env_kwargs["max_steps"] = config.max_steps
    probe = make(config.env, **env_kwargs)  # validates id and kwargs before the model loads
    seeds = probe.split_seeds(config.split, config.episodes, start=0)
    policy = load_model(config.model, **config.model_options)

    run = RunDir(config.out or default_out_dir(config))
    run.write_config({"kind": "eval", **asdict(config), "out": str(run.path)})
    rollout = RolloutConfig(
        memory=Memory.parse(config.memory),
        sampling=SamplingParams(
            temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens
        ),
        concurrency=config.concurrency,
        seed=config.seed,
        model_name=config.model,
        split=config.split,
    )
    engine = RolloutEngine(lambda: make(config.env, **env_kwargs), policy, rollout)
    finished: list[Trajectory] = []
    started = time.perf_counter()
    interrupted = False
    with run.trajectory_writer("eval", env=config.env, model=config.model, split=config.split) as writer:
        try:
            for trajectory in engine.iter_run(Task(seed=seed) for seed in seeds):
                writer.write_trajectory(trajectory)
                finished.append(trajectory)
                if on_trajectory is not None:
                    on_trajectory(trajectory)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            summary = summarize(finished, time.perf_counter() - started, interrupted)
            run.write_summary({"env": config.env, "model": config.model, **asdict(summary)})
    return run.path
