"""Evaluation: run a model on a split of an environment and write a run directory.

    config = EvalConfig(env="frozenlake", model="smollm2", episodes=20)
    run_dir = run_eval(config)

The run directory holds `config.yaml`, `trajectories/eval.jsonl` (each trajectory
written and flushed as it finishes) and `summary.json`. An interrupted evaluation
keeps every finished trajectory and marks its summary `interrupted`;
`run_eval(config, resume=True)` (`hindsight eval --resume DIR`) then runs only the tasks
it had not finished.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from hindsight.agent.agreement import oracle_agreement
from hindsight.agent.engine import PreActionWriter, RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import BestOfN, build_prm, parse_prm
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, Memory
from hindsight.agent.writers import build_pre_action, pre_action_name
from hindsight.envs.contract import Env
from hindsight.envs.proxy import env_label
from hindsight.llm.base import ModelBackend
from hindsight.logs import RunDir, TrajectoryWriter, read_trajectories
from hindsight.logs.reader import iter_json_lines
from hindsight.logs.schema import SchemaError, trajectory_from_record
from hindsight.logs.writer import rewrite_jsonl
from hindsight.types import SamplingParams, Trajectory

#: What can rate best-of-N's candidates at inference: the oracle, or a separate model as a judge.
PRM_ROLES = ("oracle", "backend")


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
    #: System prompt ({instruction} = the env's rules); empty = the default. A trained
    #: adapter is evaluated with the prompt it was trained on.
    system_prompt: str = ""
    #: What the model writes before each action, shown in its action prompt, by name
    #: (`hindsight.agent.writers.PRE_ACTION_WRITERS`): self-guide, reflection, or none.
    pre_action: str = ""
    #: Self-Guide at inference (ReAct+SG): before each action the model writes a
    #: self-assessment of its latest step (the same as pre_action: self-guide).
    self_guide: bool = False
    #: ReFlAct at inference: before each action the model reflects on the goal state
    #: (the same as pre_action: reflection).
    reflact: bool = False
    #: Reflexion at inference: up to this many attempts per task; after each failed attempt
    #: the model writes a lesson that the next attempt shows (1 = a single attempt, ReAct).
    reflexion_attempts: int = 1
    #: Step-level best-of-N at inference: sample this many candidate actions per turn (at
    #: `temperature`) and take the one the `prm` role rates highest (1 = off).
    best_of: int = 1
    #: The PRM of best-of-N: oracle, or a model spec answering a rubric (docs/models.md, Roles);
    #: `noisy:EPS:` in front replaces a share EPS of its scores by uniform draws.
    prm: str = "oracle"
    #: Token budget of each note the model writes besides its actions: a self-assessment,
    #: a goal reflection or a Reflexion lesson.
    assessment_max_new_tokens: int = 48

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        if self.assessment_max_new_tokens < 1:
            raise ValueError("assessment_max_new_tokens must be >= 1")
        pre_action_name(self.pre_action, self_guide=self.self_guide, reflact=self.reflact)
        if self.reflexion_attempts < 1:
            raise ValueError("reflexion_attempts must be >= 1")
        if self.best_of < 1:
            raise ValueError("best_of must be >= 1")
        if self.best_of > 1 and self.temperature == 0:
            raise ValueError("best_of > 1 needs a temperature above 0 (greedy candidates would all be the same)")
        if self.best_of > 1:
            parse_prm(self.prm, PRM_ROLES)
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
    #: Reflexion only: the share of tasks solved by attempt 1, 2, ... (the last equals
    #: `success_rate`), and the attempts run in all.
    success_by_attempt: tuple[float, ...] = ()
    attempts: int = 0
    #: Episodes given up because their environment kept failing (`meta.env_failure`), and
    #: the first such failure: an unreachable server or a dead simulator, not the policy.
    env_failures: int = 0
    first_env_failure: str = ""
    #: Where the environment's planner rates moves from any state: the share of moves that
    #: were among its best (`hindsight.agent.agreement`), and the action mix. A policy that
    #: ignores the state shows here first.
    oracle_agreement: float | None = None
    action_mix: dict[str, int] = field(default_factory=dict)
    #: The agreement among the valid moves alone, and a random admissible move's at the same states.
    oracle_agreement_valid: float | None = None
    oracle_chance: float | None = None


def summarize(trajectories: Iterable[Trajectory], wall_s: float = 0.0, interrupted: bool = False) -> EvalSummary:
    """The summary of one trajectory per task; Reflexion runs (several attempts per task) are
    summarised by their last attempt at each task, with the success after each attempt."""
    trajectories = list(trajectories)
    if any("reflexion" in t.meta for t in trajectories):
        return _summarize_attempts(trajectories, wall_s, interrupted)
    n = len(trajectories)
    steps = sum(t.num_steps for t in trajectories)
    invalid = sum(not s.valid for t in trajectories for s in t.steps)
    failures = [str(t.meta["env_failure"]) for t in trajectories if t.meta.get("env_failure")]
    return EvalSummary(
        episodes=n,
        success_rate=sum(t.success for t in trajectories) / n if n else 0.0,
        mean_score=sum(t.score for t in trajectories) / n if n else 0.0,
        mean_steps=steps / n if n else 0.0,
        invalid_rate=invalid / steps if steps else 0.0,
        steps=steps,
        wall_s=round(wall_s, 3),
        interrupted=interrupted,
        env_failures=len(failures),
        first_env_failure=failures[0] if failures else "",
    )


def summarize_evaluation(trajectories: Iterable[Trajectory], wall_s: float = 0.0,
                         interrupted: bool = False) -> EvalSummary:
    """`summarize`, plus the oracle agreement and action mix where the planner can rate moves."""
    trajectories = list(trajectories)
    summary = summarize(trajectories, wall_s, interrupted)
    agreement = oracle_agreement(t for t in trajectories if is_final_attempt(t))
    if agreement is None:
        return summary
    return replace(summary, oracle_agreement=round(agreement.rate, 6), action_mix=agreement.actions,
                   oracle_agreement_valid=round(agreement.valid_rate, 6), oracle_chance=round(agreement.chance, 6))


def _summarize_attempts(trajectories: list[Trajectory], wall_s: float, interrupted: bool) -> EvalSummary:
    last: dict[int, Trajectory] = {}
    solved_at: dict[int, int] = {}
    for trajectory in trajectories:
        attempt = trajectory.meta.get("reflexion", {}).get("attempt", 1)
        if trajectory.seed not in last or attempt >= last[trajectory.seed].meta.get("reflexion", {}).get("attempt", 1):
            last[trajectory.seed] = trajectory
        if trajectory.success:
            solved_at[trajectory.seed] = min(attempt, solved_at.get(trajectory.seed, attempt))
    rounds = max((t.meta.get("reflexion", {}).get("attempt", 1) for t in trajectories), default=0)
    tasks = len(last)
    by_attempt = tuple(sum(a <= k for a in solved_at.values()) / tasks for k in range(1, rounds + 1)) if tasks else ()
    # Each task's last attempt, summarised as a single attempt (its other notes kept).
    summary = summarize([replace(t, meta={k: v for k, v in t.meta.items() if k != "reflexion"})
                         for t in last.values()], wall_s, interrupted)
    return replace(summary, success_by_attempt=by_attempt, attempts=len(trajectories))


def is_final_attempt(trajectory: Trajectory) -> bool:
    """False for a Reflexion attempt that failed and was followed by another attempt."""
    return "reflection" not in trajectory.meta.get("reflexion", {})


def default_out_dir(config: EvalConfig) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", config.model).strip("-")[:40]
    return Path("runs") / f"eval-{env_label(config.env)}-{model}-{stamp}"


def evaluate_policy(
    policy: ModelBackend,
    make_env: Callable[[], Env],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    *,
    writer: TrajectoryWriter | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> tuple[list[Trajectory], EvalSummary]:
    """Run one episode per seed with `policy`, write each trajectory as it finishes."""
    engine = RolloutEngine(make_env, policy, rollout)
    finished: list[Trajectory] = []
    started = time.perf_counter()
    for trajectory in engine.iter_run(Task(seed=seed) for seed in seeds):
        if writer is not None:
            writer.write_trajectory(trajectory)
        finished.append(trajectory)
        if on_trajectory is not None:
            on_trajectory(trajectory)
    return finished, summarize(finished, time.perf_counter() - started)


def pre_action_writer(config: EvalConfig) -> PreActionWriter | None:
    """What the model writes before each action: a self-assessment (ReAct+SG), a goal reflection (ReFlAct) or
    nothing."""
    name = pre_action_name(config.pre_action, self_guide=config.self_guide, reflact=config.reflact)
    return build_pre_action(name, config.assessment_max_new_tokens)


def _evaluate_reflexion(
    policy: ModelBackend,
    make_env: Callable[[], Env],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    config: EvalConfig,
    writer: TrajectoryWriter,
    on_trajectory: Callable[[Trajectory], None] | None,
) -> None:
    """Reflexion: every attempt is written; `on_trajectory` sees each task's last attempt."""
    from hindsight.agent.reflexion import run_reflexion

    lessons = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                             max_new_tokens=config.assessment_max_new_tokens)
    for trajectory in run_reflexion(policy, make_env, seeds, rollout, attempts=config.reflexion_attempts,
                                    reflection_params=lessons):
        writer.write_trajectory(trajectory)
        if on_trajectory is not None and is_final_attempt(trajectory):
            on_trajectory(trajectory)


def best_of_n(config: EvalConfig) -> BestOfN | None:
    """Step-level best-of-N with the configured PRM, or None."""
    if config.best_of == 1:
        return None
    return BestOfN(config.best_of, build_prm(config.prm, allowed=PRM_ROLES, seed=config.seed))


def keep_finished_tasks(path: Path) -> list[Trajectory]:
    """The trajectories of the tasks an interrupted evaluation finished, in file order.

    The file is rewritten to hold only those, so the resumed run appends to a clean log:
    a line cut short by the crash goes, and so do the attempts of a Reflexion task whose
    last attempt was never written (the task is run again whole).
    """
    records: list[tuple[dict[str, Any], Trajectory | None]] = []  # (record, trajectory; None for the header)
    for _, record in iter_json_lines(path):
        try:
            is_header = isinstance(record, dict) and record.get("kind") == "header"
            records.append((record, None if is_header else trajectory_from_record(record)))
        except (SchemaError, TypeError):
            continue
    finished = {t.seed for _, t in records if t is not None and is_final_attempt(t)}
    kept = [(record, t) for record, t in records if t is None or t.seed in finished]
    rewrite_jsonl(path, [record for record, _ in kept])
    return [t for _, t in kept if t is not None]


def read_eval_config(run_dir: str | Path) -> EvalConfig:
    """The EvalConfig an evaluation run directory was written with."""
    from dataclasses import fields

    config = RunDir(Path(run_dir)).read_config() if Path(run_dir, "config.yaml").is_file() else {}
    if config.get("kind") != "eval":
        raise ValueError(f"{run_dir} is not an evaluation run directory (no config.yaml of kind eval)")
    known = {f.name for f in fields(EvalConfig)}
    return EvalConfig(**{key: value for key, value in config.items() if key in known})


def run_eval(
    config: EvalConfig,
    *,
    resume: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> Path:
    """Run the evaluation and return its run directory.

    With `resume`, `config.out` is an interrupted evaluation of this config: its finished
    tasks are kept and only the others run. At temperature 0 the result is the one an
    uninterrupted run would give, up to the batch composition's rounding.

    `on_start(episodes)` is called once the model is loaded and episodes begin;
    `on_trajectory` after each finished trajectory (on a resume, first for each kept task).

    Raises `EnvError` / `ModelError` for an unknown environment or model before any
    work starts.
    """
    from hindsight.envs import make
    from hindsight.llm import ModelSpec, load_model, parse_spec

    env_kwargs = dict(config.env_kwargs)
    if config.max_steps is not None:
        env_kwargs["max_steps"] = config.max_steps
    probe = make(config.env, **env_kwargs)  # validates id and kwargs before the model loads
    try:
        seeds = probe.split_seeds(config.split, config.episodes)
    finally:
        probe.close()
    target = Path(config.out) if config.out else default_out_dir(config)
    log = target / "trajectories" / "eval.jsonl"
    done: list[Trajectory] = []
    earlier_wall_s = 0.0
    if resume:
        if not log.exists():
            raise ValueError(f"{target} holds no evaluation to resume (no trajectories/eval.jsonl)")
        done = keep_finished_tasks(log)
        earlier_wall_s = _recorded_wall_s(target)
        finished = {t.seed for t in done}
        seeds = [seed for seed in seeds if seed not in finished]
    elif log.exists():
        raise ValueError(f"{target} already holds an evaluation; resume it (--resume {target}), "
                         "choose another --out or remove it")
    options = dict(config.model_options)
    if parse_spec(config.model) == ModelSpec("random"):
        options.setdefault("seed", config.seed)  # the run's seed decides the random policy too
    policy = load_model(config.model, **options)

    run = RunDir(target)
    run.write_config({"kind": "eval", **asdict(config), "out": str(run.path)})
    rollout = RolloutConfig(
        memory=Memory.parse(config.memory),
        system_template=config.system_prompt or DEFAULT_SYSTEM_TEMPLATE,
        sampling=SamplingParams(
            temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens
        ),
        concurrency=config.concurrency,
        seed=config.seed,
        model_name=config.model,
        split=config.split,
        pre_action=pre_action_writer(config),
        best_of=best_of_n(config),
    )
    if on_start is not None:
        on_start(len(seeds) + sum(is_final_attempt(t) for t in done))
    if on_trajectory is not None:
        for trajectory in filter(is_final_attempt, done):
            on_trajectory(trajectory)
    started = time.perf_counter()
    with run.trajectory_writer("eval", env=config.env, model=config.model, split=config.split) as writer:
        interrupted = True
        try:
            if not seeds:
                pass  # a resume of a run that had finished every task: only the summary is rewritten
            elif config.reflexion_attempts > 1:
                _evaluate_reflexion(policy, lambda: make(config.env, **env_kwargs), seeds, rollout,
                                    config, writer, on_trajectory)
            else:
                evaluate_policy(policy, lambda: make(config.env, **env_kwargs), seeds, rollout,
                                writer=writer, on_trajectory=on_trajectory)
            interrupted = False
        finally:
            # Interrupted or not, the summary covers every trajectory that reached the disk.
            summary = summarize_evaluation(read_trajectories(writer.path),
                                           earlier_wall_s + time.perf_counter() - started, interrupted=interrupted)
            run.write_summary({"env": config.env, "model": config.model, **asdict(summary)})
    return run.path


def _recorded_wall_s(run_dir: Path) -> float:
    """The wall time an interrupted evaluation recorded (0 if it died before writing one)."""
    import json

    try:
        return float(json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("wall_s", 0.0))
    except (OSError, ValueError, AttributeError):
        return 0.0
