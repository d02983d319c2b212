"""ECHO's Table 5 at a checkpoint: critic-guided refinement against plain regeneration.

Both conditions give every first attempt the same number of second attempts, sampled
from the same seeds, so the critique is the only difference. `hindsight echo-compare`
runs it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hindsight.agent.critic import NoCritic
from hindsight.agent.engine import Task
from hindsight.agent.evaluate import summarize
from hindsight.algos.echo import improvement_rate, mean_gain
from hindsight.configs import ConfigError, from_mapping
from hindsight.logs import RunDir
from hindsight.methods.echo import ECHOConfig, EchoScores, build_critic, load_echo_model, policy_engine, refine
from hindsight.train.checkpoint import choose_checkpoint, seed_everything
from hindsight.types import SamplingParams


@dataclass(frozen=True)
class RefinementComparison:
    """Second attempts with and without critiques, the same number of each (ECHO's Table 5).

    Gains are averages over the `tasks` refined (all `first_attempts`, or the unsolved ones)
    of (mean second-attempt score − first-attempt score); `relative_gain` is what the critic
    adds beyond re-sampling. The initial rates are over all first attempts.
    """

    run: str
    checkpoint_step: int
    critic: str
    split: str
    unsolved_only: bool
    first_attempts: int
    tasks: int
    samples: int
    initial_score_mean: float
    initial_success_rate: float
    critic_gain: float
    regeneration_gain: float
    relative_gain: float
    critic_improvement_rate: float
    regeneration_improvement_rate: float
    critic_success_rate: float
    regeneration_success_rate: float
    env_steps: int
    wall_s: float


def read_echo_config(run_dir: str | Path) -> ECHOConfig:
    """The config of an ECHO run directory (ConfigError when it is not one)."""
    values = RunDir(run_dir).read_config() if (Path(run_dir) / "config.yaml").is_file() else {}
    if values.get("kind") != "echo":
        raise ConfigError(f"{run_dir} is not an ECHO run directory (its config.yaml has no kind: echo)")
    return from_mapping(ECHOConfig, {k: v for k, v in values.items() if k != "kind"})


def compare_refinement(
    run_dir: str | Path, out: str | Path, *, step: int | None = None, split: str = "validation", episodes: int = 20,
    samples: int = 8, seed: int = 0, critic: str = "", unsolved_only: bool = False,
) -> RefinementComparison:
    """Critic-guided refinement against no-critic regeneration at a checkpoint of an ECHO run.

    For each of `episodes` tasks of `split`: one attempt from the policy, then `samples`
    critique-guided refinements and `samples` plain re-attempts, all sampled at the run's
    training temperatures. Trajectories go to `out/trajectories/` (initial, critic-guided,
    regeneration), the numbers to `out/summary.json`. `critic` replaces the run's own
    critic for the guided condition (`template`: the rule-based oracle comparison, the
    reference a trained critic can be held against). With `unsolved_only`, only the first
    attempts that failed get second attempts: where a critic has something to say, at a
    fraction of the cost when the policy solves most tasks.
    """
    from hindsight.envs import make

    config = read_echo_config(run_dir)
    if config.no_critic:
        raise ConfigError(f"{run_dir} trained without a critic (no_critic: true); there is nothing to compare")
    chosen = choose_checkpoint(run_dir, step)
    if samples < 1 or episodes < 1:
        raise ConfigError("episodes and samples must be >= 1")
    if critic not in ("", "template"):
        raise ConfigError(f"critic must be empty (the run's own) or 'template', not {critic!r}")
    started = time.perf_counter()
    seed_everything(seed)
    # The weights come from the checkpoint; the start runs named in the config are no longer
    # needed, nor is a KL reference (nothing is trained here).
    checkpoint_only = replace(config, init_from="", critic_init_from="", kl_reference="base")
    model = load_echo_model(checkpoint_only)
    model.load(chosen.path / "model")
    env_factory = lambda: make(config.env, **config.env_kwargs)  # noqa: E731
    seeds = env_factory().split_seeds(split, episodes)
    guide = build_critic(replace(checkpoint_only, critic=critic or config.critic), model,
                         env_factory().criteria)

    first_attempts = policy_engine(config, env_factory, model, seed).run(Task(seed=s) for s in seeds)
    attempts = [a for a in first_attempts if not a.success] if unsolved_only else first_attempts
    if not attempts:
        raise ConfigError(f"the policy solved all {len(first_attempts)} first attempts; raise episodes "
                          "or drop unsolved_only")
    groups = [attempt.id for attempt in attempts]
    critic_sampling = config.critic_sampling(config.critic_temperature, seed + 5_000)
    guided_critiques = guide.critique(attempts, samples, critic_sampling)
    plain_critiques = NoCritic().critique(attempts, samples, SamplingParams())
    # Both conditions re-sample from the same seeds: the critique is the only difference.
    guided = refine(policy_engine(config, env_factory, model, seed + 2_500), attempts, guided_critiques, groups)
    plain = refine(policy_engine(config, env_factory, model, seed + 2_500), attempts, plain_critiques, groups)
    guided_scores = EchoScores.compute(config, attempts, guided)
    plain_scores = EchoScores.compute(config, attempts, plain)

    target = RunDir(out)
    target.write_config({"kind": "echo-compare", "run": str(run_dir), "checkpoint_step": chosen.step, "split": split,
                         "episodes": episodes, "samples": samples, "seed": seed, "critic": guide.name,
                         "unsolved_only": unsolved_only})
    logs = {"initial": first_attempts, "critic-guided": guided_scores.annotate(config, guided, guide.name),
            "regeneration": plain_scores.annotate(config, plain, "none")}
    for name, trajectories in logs.items():
        target.replace_trajectories(name, trajectories, env=config.env, split=split)
    guided_gain = mean_gain(guided_scores.initial, guided_scores.refined)
    plain_gain = mean_gain(plain_scores.initial, plain_scores.refined)
    initial_summary = summarize(first_attempts)
    comparison = RefinementComparison(
        run=str(run_dir), checkpoint_step=chosen.step, critic=guide.name, split=split, unsolved_only=unsolved_only,
        first_attempts=len(first_attempts), tasks=len(attempts),
        samples=samples, initial_score_mean=initial_summary.mean_score,
        initial_success_rate=initial_summary.success_rate, critic_gain=guided_gain, regeneration_gain=plain_gain,
        relative_gain=guided_gain - plain_gain,
        critic_improvement_rate=improvement_rate(guided_scores.initial, guided_scores.refined),
        regeneration_improvement_rate=improvement_rate(plain_scores.initial, plain_scores.refined),
        critic_success_rate=summarize(t for row in guided for t in row).success_rate,
        regeneration_success_rate=summarize(t for row in plain for t in row).success_rate,
        env_steps=sum(t.num_steps for trajectories in logs.values() for t in trajectories),
        wall_s=round(time.perf_counter() - started, 3),
    )
    target.write_summary(asdict(comparison))
    return comparison
