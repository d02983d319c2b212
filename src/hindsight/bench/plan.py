"""The bench's plan: every cell of every paper, for a scale and a target, and the tables they fill.

The cells run the commands of the full-size comparisons (benchmarks/*_comparison.sh, docs/results.md)
with the recipes in recipes/: the scale sets only their sizes (updates, tasks, seeds) and whether
the ECHO comparison trains its own SFT and critic warm starts (full) or starts from the adapter
shipped with Hindsight and an untrained critic (quick, as recipes/smoke-echo.yaml does).

The target is the model spec (`--model`) and, optionally, one environment for every paper
(`--env`). By default each paper plays its own FrozenLake setting from its recipe, from the
shipped `frozenlake3` adapter where the comparison does; another environment or model starts
from the model itself. A cell that cannot run for the target (training an API model, CSO's
oracle on an environment without one) carries the reason as its `blocker`.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from hindsight.bench.cells import (
    SUMMARY, BenchTable, Cell, CompareCritic, Diagnose, Evaluate, JsonFields, Measured, Metrics, OurRow, OurTable,
    PercentChange, Readout, Report, Total, Train,
)
from hindsight.bench.published import (
    CSO, CSO_BRANCHES, CSO_MAIN, CSO_SELECTION, ECHO, ECHO_MAIN, ECHO_REFINEMENT, ECHO_TIME, SELF_GUIDE,
    SELF_GUIDE_MAIN, SELF_GUIDE_SCHEDULE, TIDE, TIDE_AUV, TIDE_LOOPS,
)

DEFAULT_MODEL = "smollm2"
#: The adapter shipped with Hindsight, trained on FrozenLake 3x3: the comparisons' start policy.
SHIPPED_ADAPTER = "frozenlake3"
#: TIDE's environments in the order of its tables; `household` plays ALFWorld-style tasks.
TIDE_ENVS = ("blocksworld", "frozenlake", "sudoku", "household", "webshop")
#: Environments with long observations (pages, rooms, papers), whose turns cost more.
SLOW_ENVS = ("household", "webshop", "webshop-site", "scienceworld", "deepsearch")
#: The answer budget when --env replaces a paper's FrozenLake, whose recipes allow 12 tokens
#: (one move); other environments' actions are longer (`search[red shoes]`).
OVERRIDE_MAX_NEW_TOKENS = 48
#: TIDE cells: the history and answer budget of docs/results.md's zero-shot table.
TIDE_MEMORY, TIDE_MAX_NEW_TOKENS = "2", 48
#: The model providers a training run can start from.
TRAINABLE = ("smollm2", "hf")


# -- scales ---------------------------------------------------------------------------------------
# Every `*_s` field is a time budget in seconds of one CPU core (one thread) for one cell: the
# progress line's ETA and `--list` add them up. Quick budgets come from the smoke recipes'
# measured times in docs/results.md, scaled to the quick sizes, and from cells measured on a
# core shared with two training jobs (so slower than idle): echo-start 26 s, the Self-Guide
# attempts 43 s, tide-frozenlake 95 s at 4 steps. Full budgets come from the comparisons' times.


@dataclass(frozen=True)
class EchoSizes:
    updates: int
    tasks_per_update: int
    group_size: int
    critic_max_new_tokens: int
    #: Table 5's training phases: (name, the checkpoint's update).
    phases: tuple[tuple[str, int], ...]
    compare_tasks: int
    compare_samples: int
    start_s: int
    sft_s: int
    critic_sft_s: int
    grpo_s: int
    echo_s: int
    compare_s: int  # per phase


@dataclass(frozen=True)
class SelfGuideSizes:
    attempts: int  # train tasks the start policy attempts before the assessment SFT
    max_steps: int  # every cell's step budget per episode; 0: the recipe's (or the environment's) own
    start_batch_size: int
    updates: int
    tasks_per_update: int
    group_size: int
    attempts_s: int
    start_s: int
    react_s: int
    react_sg_s: int
    reflexion_s: int
    reflact_s: int
    grpo_s: int
    sg_s: int  # each arm that writes self-assessments (GRPO w/ SG, w/ SG & GR, the schedules)


@dataclass(frozen=True)
class CSOSizes:
    rounds: int
    tasks_per_round: int
    k: int
    epochs: int
    mc_rollouts: int
    rft_tasks: int
    start_s: int
    method_s: int  # CSO, Step-DPO, ETO, no verification, the random proposers
    ipr_s: int
    no_prm_s: int
    rft_s: int


@dataclass(frozen=True)
class TideSizes:
    tasks: int
    max_steps: int  # 0: the environment's own budget
    fast_s: int
    slow_s: int  # SLOW_ENVS


@dataclass(frozen=True)
class Scale:
    """How big the bench is. `smoke` scales say so in the report: their numbers are not comparable."""

    name: str
    smoke: bool
    seeds: tuple[int, ...]
    test_tasks: int  # final evaluations of trained arms, and evaluation cells
    train_starts: bool  # ECHO: train the SFT and critic warm starts (else the shipped adapter, an untrained critic)
    echo: EchoSizes
    selfguide: SelfGuideSizes
    cso: CSOSizes
    tide: TideSizes


# Budgets are the times measured on 2026-11-24 (idle machine, 2 jobs; the whole quick bench took
# 27m43s): where one budget covers several cells, their mean, so the budgets add up to the bench.
QUICK = Scale(
    name="quick", smoke=True, seeds=(0,), test_tasks=4, train_starts=False,
    echo=EchoSizes(updates=2, tasks_per_update=2, group_size=2, critic_max_new_tokens=48,
                   phases=(("early", 1), ("late", 2)), compare_tasks=3, compare_samples=2,
                   start_s=15, sft_s=0, critic_sft_s=0, grpo_s=30, echo_s=105, compare_s=60),
    # Four updates of one task each: enough for the trust schedules to differ (λ at u = 0, ¼, ½, ¾).
    # Six sampled attempts: the start SFT needs a success among them to rehearse; one batch of 16
    # sequences keeps it to one optimizer step. Six steps per episode instead of the recipe's ten: every
    # turn trains an assessment and an action prompt (about 900 tokens together, at ~75 tokens/s on one
    # core), so an arm's time follows its episodes' length (92% of FrozenLake 5x5 tasks are solvable in
    # six moves). With ten steps the arms took 7m07s-7m40s each and the bench 37m36s.
    selfguide=SelfGuideSizes(attempts=6, max_steps=6, start_batch_size=16, updates=4, tasks_per_update=1,
                             group_size=2, attempts_s=30, start_s=115, react_s=20, react_sg_s=60, reflexion_s=50,
                             reflact_s=60, grpo_s=60, sg_s=255),
    cso=CSOSizes(rounds=1, tasks_per_round=3, k=3, epochs=1, mc_rollouts=2, rft_tasks=4,
                 start_s=15, method_s=80, ipr_s=210, no_prm_s=110, rft_s=95),
    # The bundled model writes no valid action zero-shot, so every episode runs all its steps.
    tide=TideSizes(tasks=3, max_steps=3, fast_s=45, slow_s=45),
)

FULL = Scale(
    name="full", smoke=False, seeds=(0, 1, 2), test_tasks=300, train_starts=True,
    echo=EchoSizes(updates=4, tasks_per_update=4, group_size=4, critic_max_new_tokens=96,
                   phases=(("early", 1), ("mid", 2), ("late", 4)), compare_tasks=100, compare_samples=4,
                   start_s=500, sft_s=6000, critic_sft_s=2700, grpo_s=1200, echo_s=1800, compare_s=1800),
    selfguide=SelfGuideSizes(attempts=160, max_steps=0, start_batch_size=16, updates=8, tasks_per_update=4, group_size=4,
                             attempts_s=700, start_s=5400, react_s=1500, react_sg_s=4000, reflexion_s=4000,
                             reflact_s=4000, grpo_s=3000, sg_s=12000),
    cso=CSOSizes(rounds=2, tasks_per_round=32, k=5, epochs=2, mc_rollouts=2, rft_tasks=64,
                 start_s=1500, method_s=2700, ipr_s=4000, no_prm_s=4000, rft_s=2400),
    # TIDE's tables are over 100 tasks per environment.
    tide=TideSizes(tasks=100, max_steps=0, fast_s=1500, slow_s=6000),
)


# -- recipes and settings -------------------------------------------------------------------------


class PlanError(ValueError):
    """The plan cannot be built (no recipes folder, an unknown environment)."""


def recipes_dir() -> Path:
    """The recipes/ folder of the source checkout this package runs from."""
    folder = Path(__file__).resolve().parents[3] / "recipes"
    if not folder.is_dir():
        raise PlanError(f"hindsight bench runs the recipes of a source checkout and found none at {folder}; "
                        "install Hindsight from its repository (pip install -e .)")
    return folder


def yaml_text(value: Any) -> str:
    """A `--set KEY=VALUE` value that YAML reads back as `value`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {yaml_text(item)}" for key, item in value.items()) + "}"
    if isinstance(value, str):
        plain = yaml.safe_load(value) if value else None
        return value if plain == value else json.dumps(value)  # JSON strings are YAML strings
    text = repr(value)
    if isinstance(value, float) and "e" in text and "." not in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"  # YAML 1.1 reads 5e-05 as a string, 5.0e-05 as a float
    return text


@dataclass(frozen=True)
class Recipe:
    path: Path
    values: dict[str, Any]

    @classmethod
    def load(cls, name: str) -> Recipe:
        path = recipes_dir() / name
        return cls(path, yaml.safe_load(path.read_text(encoding="utf-8")))

    def args(self, overrides: Mapping[str, Any]) -> tuple[str, ...]:
        """`--config RECIPE` and a `--set` for each override the recipe does not already say (an empty
        text or mapping is what a key the recipe leaves out defaults to)."""
        sets = [f"{key}={yaml_text(value)}" for key, value in overrides.items()
                if self.values.get(key) != value and (key in self.values or value not in ("", {}))]
        return ("--config", str(self.path), *(part for s in sets for part in ("--set", s)))


@dataclass(frozen=True)
class Setting:
    """Where a paper's cells play and how the policy is prompted: the same for its training runs and
    its evaluations."""

    env: str
    env_kwargs: dict[str, Any]
    system_prompt: str
    memory: str
    max_new_tokens: int

    @classmethod
    def of(cls, recipe: Recipe) -> Setting:
        values = recipe.values
        return cls(values["env"], dict(values.get("env_kwargs") or {}), values.get("system_prompt", ""),
                   str(values.get("memory", "none")), int(values.get("max_new_tokens", OVERRIDE_MAX_NEW_TOKENS)))

    def config(self) -> dict[str, Any]:
        """The training config keys of the setting."""
        return {"env": self.env, "env_kwargs": self.env_kwargs, "system_prompt": self.system_prompt,
                "memory": self.memory, "max_new_tokens": self.max_new_tokens}

    def with_max_steps(self, max_steps: int) -> Setting:
        """The setting with every episode cut at `max_steps` (0: unchanged); every environment takes the option."""
        if not max_steps:
            return self
        return replace(self, env_kwargs={**self.env_kwargs, "max_steps": max_steps})

    def eval_args(self) -> tuple[str, ...]:
        """The same setting as `hindsight eval` flags."""
        args = ["--env", self.env]
        for key, value in self.env_kwargs.items():
            args += ["--set", f"{key}={yaml_text(value)}"]
        args += ["--memory", self.memory, "--max-new-tokens", str(self.max_new_tokens)]
        if self.system_prompt:
            args += ["--system-prompt", self.system_prompt]
        return tuple(args)

    def label(self) -> str:
        return f"{self.env} {yaml_text(self.env_kwargs)}" if self.env_kwargs else self.env


@functools.lru_cache(maxsize=None)
def has_oracle(env: str) -> bool:
    """Whether an environment (a registered id, `ray:ID` or a served `http://…/ID`) declares an oracle."""
    from hindsight.envs import EnvError, env_class, make
    from hindsight.envs.proxy import parse_env_url, parse_ray_env

    try:
        inner = parse_ray_env(env) or env
        if parse_env_url(inner) is not None:
            return bool(getattr(make(inner), "has_oracle", True))
        return bool(env_class(inner).has_oracle)
    except EnvError as exc:
        raise PlanError(str(exc)) from None


@dataclass(frozen=True)
class Target:
    """What the cells run: a model spec, and one environment for every paper ('' : each paper's own)."""

    model: str = DEFAULT_MODEL
    env: str = ""

    def _spec(self):
        from hindsight.llm import parse_spec

        return parse_spec(self.model)

    @property
    def base(self) -> str:
        return str(self._spec().base)

    @property
    def adapter(self) -> str:
        """The adapters of the spec, joined by '+' ('' : none)."""
        return self._spec().adapter

    @property
    def trainable(self) -> bool:
        return self._spec().provider in TRAINABLE

    @property
    def start_adapter(self) -> str:
        """The adapter a comparison starts from: the one in the spec, else the shipped one when it fits
        (the bundled model on the recipes' FrozenLake), else none (the model itself)."""
        if self.adapter:
            return self.adapter
        return SHIPPED_ADAPTER if self._spec().provider == "smollm2" and not self.env else ""

    def setting(self, recipe: Recipe) -> Setting:
        if not self.env:
            return Setting.of(recipe)
        return Setting(self.env, {}, "", "none", OVERRIDE_MAX_NEW_TOKENS)

    def policy(self, adapter: str | Path) -> str:
        """The model spec of the base with an adapter (a name, a folder or a run directory)."""
        return f"{self.base}+{adapter}" if str(adapter) else self.base

    def training(self, init_from: str | Path) -> dict[str, Any]:
        """The config keys of the model a training run trains, starting from `init_from` ('' : the base)."""
        return {"model": self.base, "init_from": str(init_from)}

    def train_blocker(self) -> str:
        if self.trainable:
            return ""
        return f"{self.model} cannot be trained: training starts from smollm2 or hf:PATH (with +ADAPTER)"


def oracle_blocker(env: str, why: str) -> str:
    return "" if has_oracle(env) else f"needs the oracle of {env} ({why}), and {env} declares none (has_oracle)"


# -- building cells -------------------------------------------------------------------------------

#: What a run's summary.json says of its (final) test evaluation.
OUTCOME = ("success_rate", "mean_score", "episodes")


@dataclass(frozen=True)
class Context:
    scale: Scale
    target: Target
    out: Path

    def dir(self, name: str) -> Path:
        return self.out / "cells" / name

    def run(self, name: str) -> Path:
        return self.dir(name) / "run"

    def train_cell(self, name: str, paper: str, title: str, method: str, recipe: Recipe, overrides: Mapping[str, Any],
                   budget_s: int, *, needs: tuple[str, ...] = (), blocker: str = "",
                   readouts: tuple[Readout, ...] | None = None) -> Cell:
        """A training run and its own report; by default its final test evaluation is read."""
        run = self.run(name)
        steps = (Train(method, run, recipe.args(overrides)), Report(run, self.dir(name) / "report", f"{paper}: {title}"))
        if readouts is None:
            readouts = (JsonFields(run / SUMMARY, OUTCOME),)
        return Cell(name, paper, title, self.dir(name), steps, readouts, budget_s, needs, blocker)

    def eval_cell(self, name: str, paper: str, title: str, args: tuple[str, ...], budget_s: int, *,
                  needs: tuple[str, ...] = (), blocker: str = "") -> Cell:
        run = self.run(name)
        return Cell(name, paper, title, self.dir(name), (Evaluate(run, args),), (JsonFields(run / SUMMARY, OUTCOME),),
                    budget_s, needs, blocker)


def _outcome_row(label: str, cells: tuple[str, ...]) -> OurRow:
    return OurRow(label, (Measured(cells, "success_rate"), Measured(cells, "mean_score")))


def _seeds(prefix: str, seeds: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(f"{prefix}-s{seed}" for seed in seeds)


@dataclass(frozen=True)
class Section:
    cells: tuple[Cell, ...]
    tables: tuple[BenchTable, ...]


def echo_section(ctx: Context) -> Section:
    sizes, seeds, target = ctx.scale.echo, ctx.scale.seeds, ctx.target
    grpo, echo = Recipe.load("grpo-frozenlake3-graded.yaml"), Recipe.load("echo-frozenlake3.yaml")
    setting = target.setting(grpo)
    trains = target.train_blocker()
    cells: list[Cell] = []
    if ctx.scale.train_starts:
        # As the docs' comparison: an SFT start cloned from the oracle, and a critic taught to write
        # the template critic's critiques of that start's attempts.
        starts = ("echo-sft", "echo-critic-sft")
        cells.append(ctx.train_cell(
            "echo-sft", ECHO, "the SFT start: the oracle's moves cloned", "sft", Recipe.load("sft-frozenlake3.yaml"),
            {**setting.config(), **target.training(target.adapter), "eval_episodes": 0}, sizes.sft_s,
            blocker=trains or oracle_blocker(setting.env, "the SFT start clones its moves"), readouts=()))
        cells.append(ctx.train_cell(
            "echo-critic-sft", ECHO, "the critic's warm start: the template critic imitated", "critic-sft",
            Recipe.load("critic-sft-frozenlake3.yaml"),
            {**setting.config(), "model": target.base, "policy_from": str(ctx.run("echo-sft"))}, sizes.critic_sft_s,
            needs=("echo-sft",), blocker=trains or oracle_blocker(setting.env, "the template critic compares with it"),
            readouts=()))
        start: str | Path = ctx.run("echo-sft")
        critic_init = {"critic_init_from": str(ctx.run("echo-critic-sft"))}
    else:
        starts, start, critic_init = (), target.start_adapter, {}
    cells.append(ctx.eval_cell(
        "echo-start", ECHO, "the start policy, greedy, on the test tasks",
        (*setting.eval_args(), "--model", target.policy(start), "--episodes", str(ctx.scale.test_tasks),
         "--temperature", "0"), sizes.start_s, needs=starts[:1]))
    common = {**setting.config(), **target.training(start), "updates": sizes.updates,
              "tasks_per_update": sizes.tasks_per_update, "group_size": sizes.group_size,
              "final_eval_episodes": ctx.scale.test_tasks, "checkpoint_every": 1}
    arms = (("echo", "ECHO", {}), ("frozen", "ECHO w/o evolving (frozen critic)", {"freeze_critic": True}),
            ("linear", "ECHO w/o SA-aware (linear gain)", {"gain": "linear"}))
    timing = ("timing/policy_rollout_s", "timing/critic_rollout_s", "timing/refine_s", "timing/update_s")
    for seed in seeds:
        name = f"echo-grpo-s{seed}"
        cells.append(ctx.train_cell(
            name, ECHO, f"GRPO, seed {seed}", "grpo", grpo, {**common, "seed": seed}, sizes.grpo_s, needs=starts[:1],
            blocker=trains, readouts=(JsonFields(ctx.run(name) / SUMMARY, OUTCOME),
                                      Metrics(ctx.run(name), ("timing/rollout_s", "timing/update_s")))))
        for arm, title, switch in arms:
            name = f"echo-{arm}-s{seed}"
            # Every checkpoint is kept: Table 5 compares the critic at several of them.
            overrides = {**common, "seed": seed, "critic_max_new_tokens": sizes.critic_max_new_tokens,
                         "keep_checkpoints": 0, **critic_init, **switch}
            cells.append(ctx.train_cell(
                name, ECHO, f"{title}, seed {seed}", "echo", echo, overrides, sizes.echo_s, needs=starts,
                blocker=trains, readouts=(JsonFields(ctx.run(name) / SUMMARY, OUTCOME), Metrics(ctx.run(name), timing))))
    compared = f"echo-echo-s{seeds[0]}"
    phases = sizes.phases
    gains = ("regeneration_gain", "critic_gain", "relative_gain")
    cells.append(Cell(
        "echo-compare", ECHO, f"critique-guided refinement against regeneration at checkpoints of {compared}",
        ctx.dir("echo-compare"),
        tuple(CompareCritic(ctx.run(compared), step, ctx.dir("echo-compare") / phase,
                            ("--split", "test", "--episodes", str(sizes.compare_tasks),
                             "--samples", str(sizes.compare_samples))) for phase, step in phases),
        tuple(JsonFields(ctx.dir("echo-compare") / phase / SUMMARY, gains, f"{phase}/") for phase, _ in phases),
        sizes.compare_s * len(phases), needs=(compared,)))

    env = setting.label()
    main = OurTable(
        ("test success", "test score"),
        (_outcome_row("start (before RL)", ("echo-start",)), _outcome_row("GRPO", _seeds("echo-grpo", seeds)),
         *(_outcome_row(title, _seeds(f"echo-{arm}", seeds)) for arm, title, _ in arms)),
        "%")
    refinement = OurTable(
        ("no-critic regeneration", "critic-guided refinement", "relative gain"),
        tuple(OurRow(f"{phase} (update {step})", tuple(Measured(("echo-compare",), f"{phase}/{gain}") for gain in gains))
              for phase, step in phases),
        "score points (score × 100)", digits=2)

    def seconds(cells: tuple[str, ...], key: str) -> Measured:
        return Measured(cells, key, factor=1.0)

    echoes, grpos = _seeds("echo-echo", seeds), _seeds("echo-grpo", seeds)
    echo_total = Total(tuple(seconds(echoes, key) for key in timing))
    grpo_total = Total((seconds(grpos, "timing/rollout_s"), seconds(grpos, "timing/update_s")))
    time = OurTable(
        ("per update",),
        (OurRow("policy rollout (ECHO)", (seconds(echoes, timing[0]),)),
         OurRow("critic rollout", (seconds(echoes, timing[1]),)),
         OurRow("refinement", (seconds(echoes, timing[2]),)),
         OurRow("total ECHO (with both updates)", (echo_total,)),
         OurRow("GRPO rollout", (seconds(grpos, "timing/rollout_s"),)),
         OurRow("total GRPO (with its update)", (grpo_total,)),
         OurRow("overhead (%)", (PercentChange(echo_total, grpo_total),))),
        "seconds per update; overhead in %")
    start_words = ("an SFT start of the oracle's moves and a critic warm-started on the template critic"
                   if ctx.scale.train_starts else
                   f"the start policy ({target.policy(start)}) and an untrained critic adapter")
    return Section(tuple(cells), (
        BenchTable(ECHO_MAIN, main,
                   f"Our one benchmark is {env} with the graded score as the reward; every arm starts from "
                   f"{start_words} and is evaluated greedily on the same test tasks (mean over seeds). The paper's "
                   "'w/o evolving' is our frozen critic, its 'w/o SA-aware' our linear gain."),
        BenchTable(ECHO_REFINEMENT, refinement,
                   f"`hindsight echo-compare` at checkpoints of {compared}: one sampled attempt per test task, "
                   "then as many critique-guided refinements as plain re-attempts from the same seeds; the gain "
                   "is the mean score of the second attempts minus the first's, times 100."),
        BenchTable(ECHO_TIME, time,
                   "Means over the updates (and seeds) of the stage timings the runs log (metrics.jsonl, "
                   "timing/…). The paper's totals are per training step; ours are per update, with each method's "
                   "update included."),
    ))


def weight_dtype() -> str:
    """The frozen base's dtype for training cells whose recipe asks for bfloat16: bfloat16 where this
    CPU multiplies it natively, else `auto` (bfloat16 on a GPU that has it, float32 on a CPU), since
    without bf16 instructions bfloat16 runs about 60 times slower than float32 (docs/results.md)."""
    from hindsight.llm import hf

    return "bfloat16" if hf.cpu_has_bf16() else "auto"


def selfguide_section(ctx: Context) -> Section:
    sizes, seeds, target, tasks = ctx.scale.selfguide, ctx.scale.seeds, ctx.target, str(ctx.scale.test_tasks)
    recipe = Recipe.load("grpo-selfguide-frozenlake5.yaml")
    setting = target.setting(recipe).with_max_steps(sizes.max_steps)
    dtype = {"dtype": weight_dtype()}
    shipped = target.start_adapter
    start_blocker = target.train_blocker() or oracle_blocker(setting.env, "the start learns its self-assessments")
    cells = [
        ctx.eval_cell("sg-attempts", SELF_GUIDE, "the start policy's own sampled attempts at train tasks",
                      (*setting.eval_args(), "--model", target.policy(shipped), "--episodes", str(sizes.attempts),
                       "--split", "train", "--temperature", "1.0", "--seed", "0"), sizes.attempts_s,
                      blocker=start_blocker),
        ctx.train_cell("sg-start", SELF_GUIDE, "the shared start: the oracle's assessments of those attempts, and "
                       "their successful moves, taught", "sft", Recipe.load("sft-selfguide-frozenlake5.yaml"),
                       {**setting.config(), **target.training(shipped), **dtype, "demos": str(ctx.run("sg-attempts")),
                        "assessment_demos": str(ctx.run("sg-attempts")), "batch_size": sizes.start_batch_size},
                       sizes.start_s, needs=("sg-attempts",), blocker=start_blocker, readouts=()),
    ]
    # Without a start (no oracle, or a model that cannot be trained) the prompting baselines still
    # run, on the model itself.
    prompted, prompt_needs = ((target.policy(shipped), ()) if start_blocker else
                              (target.policy(ctx.run("sg-start")), ("sg-start",)))
    prompting = (("react", "ReAct", (), sizes.react_s),
                 ("reflexion", "Reflexion (3 attempts)", ("--reflexion", "3", "--note-tokens", "32"), sizes.reflexion_s),
                 ("reflact", "ReFlAct", ("--reflact", "--note-tokens", "32"), sizes.reflact_s),
                 ("react-sg", "ReAct w/ SG", ("--self-guide", "--note-tokens", "24"), sizes.react_sg_s))
    for arm, title, flags, budget in prompting:
        cells.append(ctx.eval_cell(f"sg-{arm}", SELF_GUIDE, f"{title}, greedy, on the test tasks",
                                   (*setting.eval_args(), "--model", prompted, "--episodes", tasks,
                                    "--temperature", "0", *flags), budget, needs=prompt_needs))
    guided = {"self_guide": True, "guidance_reward": True}
    arms = (("grpo", "GRPO", {}, sizes.grpo_s), ("sg", "GRPO w/ SG", {"self_guide": True}, sizes.sg_s),
            ("sg-gr", "GRPO w/ SG & GR", guided, sizes.sg_s))
    schedules = (("immediate", "immediate full reward", (0.0, 0.0, 1.0, 1.0)),
                 ("early", "early entry (0.1/0.2/0.7/0.8)", (0.1, 0.2, 0.7, 0.8)),
                 ("no-anneal", "no annealing (0.4/0.5/1/1)", (0.4, 0.5, 1.0, 1.0)))
    arms += tuple((name, f"GRPO w/ SG & GR, {title}",
                   {**guided, **dict(zip(("trust_start", "trust_full", "trust_hold_until", "trust_end"), points))},
                   sizes.sg_s) for name, title, points in schedules)
    common = {**setting.config(), **target.training(ctx.run("sg-start")), **dtype, "updates": sizes.updates,
              "tasks_per_update": sizes.tasks_per_update, "group_size": sizes.group_size,
              "final_eval_episodes": ctx.scale.test_tasks}
    for seed in seeds:
        for arm, title, switch, budget in arms:
            cells.append(ctx.train_cell(f"sg-{arm}-s{seed}", SELF_GUIDE, f"{title}, seed {seed}", "grpo", recipe,
                                        {**common, "seed": seed, **switch}, budget, needs=("sg-start",),
                                        blocker=start_blocker))

    start_words = ("the shared start (the start policy taught the oracle's self-assessments of its own attempts)"
                   if not start_blocker else f"{prompted} (no start could be trained: {start_blocker})")
    main = OurTable(
        ("test success", "test score"),
        (*(_outcome_row(title, (f"sg-{arm}",)) for arm, title, _, _ in prompting),
         *(_outcome_row(title, _seeds(f"sg-{arm}", seeds)) for arm, title, _, _ in arms[:3])),
        "%")
    schedule = OurTable(
        ("test success",),
        (OurRow("self-guidance only (no guidance reward)", (Measured(_seeds("sg-sg", seeds), "success_rate"),)),
         *(OurRow(title, (Measured(_seeds(f"sg-{name}", seeds), "success_rate"),)) for name, title, _ in schedules),
         OurRow("full trapezoid schedule (0.4/0.5/0.7/0.8)", (Measured(_seeds("sg-sg-gr", seeds), "success_rate"),))),
        "%")
    return Section(tuple(cells), (
        BenchTable(SELF_GUIDE_MAIN, main,
                   f"One benchmark, {setting.label()}. The prompting rows run {start_words} greedily; the RL rows "
                   "train from it with GRPO, with self-assessments written and trained (w/ SG), and with the "
                   "guidance reward on the paper's trust schedule (w/ SG & GR); mean over seeds."),
        BenchTable(SELF_GUIDE_SCHEDULE, schedule,
                   "GRPO w/ SG & GR under other trust schedules λ(u) (start/full/hold/end as fractions of the "
                   "updates), against self-guidance alone and the paper's schedule; test success where the paper "
                   "reports validation success."),
    ))


def cso_section(ctx: Context) -> Section:
    sizes, seeds, target = ctx.scale.cso, ctx.scale.seeds, ctx.target
    recipe, eto = Recipe.load("smoke-cso.yaml"), Recipe.load("eto-frozenlake5.yaml")
    setting = target.setting(recipe)
    shipped = target.start_adapter
    trains = target.train_blocker()
    needs_oracle = trains or oracle_blocker(setting.env, "CSO's expert and PRM are the oracle")
    cells = [ctx.eval_cell("cso-start", CSO, "the start policy, greedy, on the test tasks",
                           (*setting.eval_args(), "--model", target.policy(shipped), "--episodes",
                            str(ctx.scale.test_tasks), "--temperature", "0"), sizes.start_s)]
    rounds = {**setting.config(), **target.training(shipped), "rounds": sizes.rounds,
              "tasks_per_round": sizes.tasks_per_round, "epochs": sizes.epochs,
              "final_eval_episodes": ctx.scale.test_tasks}
    arms = (("cso", "CSO", {}, sizes.method_s), ("step-dpo", "Step-DPO", {"method": "step-dpo"}, sizes.method_s),
            ("ipr", "IPR", {"method": "ipr", "mc_rollouts": sizes.mc_rollouts}, sizes.ipr_s),
            ("no-prm", "CSO w/o PRM (every alternative verified)", {"use_prm": False}, sizes.no_prm_s),
            ("no-verify", "CSO w/o verification", {"verification": False}, sizes.method_s),
            # The oracle expert proposes one move whatever k is; a uniformly random proposer, filtered
            # by the oracle PRM, has something to choose from.
            *((f"random-k{k}", f"CSO, random proposer, k = {k}", {"expert": "random", "k": k}, sizes.method_s)
              for k in (3, 5, 7)))
    for seed in seeds:
        for arm, title, switch, budget in arms:
            name = f"cso-{arm}-s{seed}"
            cells.append(ctx.train_cell(
                name, CSO, f"{title}, seed {seed}", "cso", recipe, {**rounds, "k": sizes.k, "seed": seed, **switch},
                budget, blocker=needs_oracle,
                readouts=(JsonFields(ctx.run(name) / SUMMARY, OUTCOME), Metrics(ctx.run(name), ("cso/pairs",), "sum"))))
        cells.append(ctx.train_cell(f"cso-eto-s{seed}", CSO, f"ETO, seed {seed}", "eto", eto, {**rounds, "seed": seed},
                                    sizes.method_s, blocker=needs_oracle))
        # RFT: the start's own sampled successes on the train tasks, cloned for one epoch.
        cells.append(ctx.train_cell(
            f"cso-rft-s{seed}", CSO, f"RFT, seed {seed}", "sft", Recipe.load("sft-frozenlake3.yaml"),
            {**setting.config(), **target.training(shipped), "demos": target.policy(shipped),
             "demo_episodes": sizes.rft_tasks, "demo_samples": 2, "demo_temperature": 1.0, "epochs": 1, "lr": 5e-5,
             "eval_episodes": ctx.scale.test_tasks, "seed": seed}, sizes.rft_s, blocker=trains))

    def row(label: str, arm: str) -> OurRow:
        cells_of = ("cso-start",) if arm == "start" else _seeds(f"cso-{arm}", seeds)
        return OurRow(label, (Measured(cells_of, "success_rate"),))

    def pairs_row(label: str, arm: str) -> OurRow:
        cells_of = _seeds(f"cso-{arm}", seeds)
        return OurRow(label, (Measured(cells_of, "success_rate"), Measured(cells_of, "cso/pairs", factor=1.0)))

    main = OurTable(("test success",), (row("start (before post-training)", "start"), row("+ ETO", "eto"),
                                        row("+ RFT", "rft"), row("+ Step-DPO", "step-dpo"), row("+ IPR", "ipr"),
                                        row("+ CSO", "cso")), "%")
    selection = OurTable(("test success", "preference pairs"),
                         (pairs_row("PRM + verification", "cso"), pairs_row("w/o PRM", "no-prm"),
                          pairs_row("w/o verification", "no-verify")), "% and pairs (summed over rounds)")
    branches = OurTable(("test success", "preference pairs"),
                        tuple(pairs_row(f"k = {k}", f"random-k{k}") for k in (3, 5, 7)),
                        "% and pairs (summed over rounds)")
    start_words = f"the start policy {target.policy(shipped)}"
    return Section(tuple(cells), (
        BenchTable(CSO_MAIN, main,
                   f"Every method post-trains {start_words} on {setting.label()} for {sizes.rounds} round(s) of "
                   f"{sizes.tasks_per_round} train tasks (RFT: its own sampled successes on {sizes.rft_tasks} "
                   "tasks) and is evaluated greedily on the same test tasks; the expert and the PRM are the "
                   "environment's oracle."),
        BenchTable(CSO_SELECTION, selection,
                   "The same CSO runs without the PRM's selection and without outcome verification; pairs are the "
                   "preference pairs built, summed over rounds (mean over seeds)."),
        BenchTable(CSO_BRANCHES, branches,
                   f"k alternatives per step from a uniformly random proposer filtered by the oracle PRM (the "
                   f"oracle expert always proposes one move, so k would change nothing with it); the main CSO arm "
                   f"uses k = {sizes.k}."),
    ))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def tide_section(ctx: Context) -> Section:
    sizes, target = ctx.scale.tide, ctx.target
    envs = (target.env,) if target.env else TIDE_ENVS
    cells = []
    for env in envs:
        name = f"tide-{_slug(env)}"
        run, diagnosis = ctx.run(name), ctx.dir(name) / "diagnosis.json"
        args = ("--env", env, "--model", target.model, "--episodes", str(sizes.tasks), "--temperature", "0",
                "--memory", TIDE_MEMORY, "--max-new-tokens", str(TIDE_MAX_NEW_TOKENS),
                *(("--max-steps", str(sizes.max_steps)) if sizes.max_steps else ()))
        budget = sizes.slow_s if env in SLOW_ENVS else sizes.fast_s
        cells.append(Cell(name, TIDE, f"{target.model} on {env}, greedy, diagnosed by TIDE", ctx.dir(name),
                          (Evaluate(run, args), Diagnose(run, diagnosis)),
                          (JsonFields(diagnosis, ("success_rate", "auv", "loop_ratio")),), budget))
    names = [f"tide-{_slug(env)}" for env in envs]
    auv = OurTable(tuple(f"{env} {metric}" for env in envs for metric in ("SR", "AUV")),
                   (OurRow(target.model, tuple(Measured((name,), key) for name in names
                                               for key in ("success_rate", "auv"))),), "%")
    loops = OurTable(envs, (OurRow(target.model, tuple(Measured((name,), "loop_ratio") for name in names)),), "%")
    steps = f"at most {sizes.max_steps} steps" if sizes.max_steps else "each environment's step budget"
    how = (f"{target.model} on {sizes.tasks} test tasks of each environment with its default options, greedy, the "
           f"last {TIDE_MEMORY} turns of history, {steps}; `hindsight diagnose` computes the numbers. Our "
           "`household` stands for ALFWorld (ALFWorld-style tasks generated with TextWorld).")
    return Section(tuple(cells), (BenchTable(TIDE_AUV, auv, how), BenchTable(TIDE_LOOPS, loops, how)))


@dataclass(frozen=True)
class Plan:
    scale: Scale
    target: Target
    out: Path
    cells: tuple[Cell, ...]
    tables: tuple[BenchTable, ...]

    def cell(self, name: str) -> Cell:
        return next(c for c in self.cells if c.name == name)

    def closure(self, names: set[str], finished: set[str]) -> set[str]:
        """`names` and every unfinished cell they need, directly or not."""
        chosen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name in chosen:
                continue
            chosen.add(name)
            todo += [need for need in self.cell(name).needs if need not in finished]
        return chosen


def build_plan(scale: Scale, target: Target, out: Path) -> Plan:
    """Every cell of every paper for this scale and target, in the order they are listed."""
    ctx = Context(scale, target, out.resolve())
    sections = (echo_section(ctx), selfguide_section(ctx), cso_section(ctx), tide_section(ctx))
    cells: dict[str, Cell] = {}
    for cell in (c for section in sections for c in section.cells):
        # A cell needing one that cannot run cannot run either (needs are listed before their users).
        blocked = next((need for need in cell.needs if cells[need].blocker), None)
        if blocked and not cell.blocker:
            cell = replace(cell, blocker=f"needs {blocked}, which cannot run: {cells[blocked].blocker}")
        cells[cell.name] = cell
    return Plan(scale, target, ctx.out, tuple(cells.values()), tuple(t for s in sections for t in s.tables))
