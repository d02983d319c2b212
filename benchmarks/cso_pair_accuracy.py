"""Pair accuracy against PRM noise (issue 48): how often each method's pairs are right.

CSO's premise is a PRM that is often wrong, so a PRM's pick must be verified by a policy
rollout before it becomes a pair. This measures the mechanism directly, with no DPO and no
test evaluation. Per seed, one round of the CSO pipeline runs once up to the PRM:

1. the policy's rollouts on the round's training tasks, and its failures;
2. k alternatives at every step of every failure, from the expert (default: uniform random
   moves, so the PRM has good and bad alternatives to choose from).

Then, for every noise level ε (`noisy:ε:PRM`: a share ε of the PRM's scores replaced by
uniform draws, seeded by the run's seed and the query), the same steps are scored again and
three methods form their pairs. The PRM is the oracle unless `--set prm=...` names another,
such as a learned one (`adapter:DIR`, from `hindsight train prm-sft`):

- **step-dpo**: the PRM's best alternative against the policy's action, no verification;
- **cso-noverify**: CSO's candidates, the alternatives above γ_high on the PRM's word alone;
- **cso**: the same alternatives verified by a policy continuation, the verified ones paired.

A pair is right when the environment's planner rates its chosen move strictly above its
rejected one (`planner_prefers_chosen`). Rows go to OUT/pair_accuracy.jsonl (one per PRM, seed,
ε and method) and a Markdown table to stdout; a finished (PRM, seed, ε) is not run again.

    HF_HUB_OFFLINE=1 python benchmarks/cso_pair_accuracy.py runs/cso-noise/pair-accuracy \\
        --init-from runs/learning/start-adapter --seeds 0 1 2 --noise 0 0.2 0.4 0.6
    HF_HUB_OFFLINE=1 python benchmarks/cso_pair_accuracy.py runs/cso-noise/pair-accuracy \\
        --init-from runs/learning/start-adapter --seeds 0 1 2 --noise 0 --set prm=adapter:runs/prm-adapter
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

from hindsight.agent.cso import (branch_points, make_pairs, planner_prefers_chosen, sample_alternatives, score_steps,
                                 step_dpo_pairs, verify)
from hindsight.agent.engine import Task
from hindsight.agent.prm import build_prm
from hindsight.configs import ConfigError, load_config
from hindsight.methods.cso import PRM_ROLES, CSOConfig
from hindsight.roles import resolve
from hindsight.types import SamplingParams

METHODS = ("step-dpo", "cso-noverify", "cso")
#: The learning benchmark's recipe: its task and prompt are the CSO settings' defaults.
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo-frozenlake.yaml"
TASK_KEYS = ("env", "env_kwargs", "memory", "max_new_tokens", "system_prompt")
SETTINGS = ["expert=random", "k=5", "tasks_per_round=64", "rounds=1", "temperature=1.0"]


def defaults() -> list[str]:
    """KEY=VALUE overrides: the recipe's task and prompt, then this measurement's settings."""
    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    # JSON is YAML too, and keeps the prompt's colon from reading as a mapping.
    return [f"{key}={json.dumps(recipe[key])}" for key in TASK_KEYS] + SETTINGS


def pairs_by_method(config: CSOConfig, prm_value: str, failures, alternatives, policy_engine, prompts, model):
    """The three methods' pairs from one scoring of the same alternatives."""
    prm = build_prm(prm_value, model, fallback=config.prm_fallback, allowed=PRM_ROLES, seed=config.seed)
    scored = score_steps(prm, failures, alternatives, config.gamma_low, config.gamma_high)
    picks = branch_points(scored, config.gamma_high)
    branches = verify(policy_engine, failures, picks, config.verify_rollouts)
    return {
        "step-dpo": step_dpo_pairs(failures, scored, prompts),
        "cso-noverify": make_pairs(failures, scored, [], prompts, verified_only=False, high=config.gamma_high),
        "cso": make_pairs(failures, scored, branches, prompts, high=config.gamma_high),
    }, len(picks)


def settings(args: argparse.Namespace, seed: int) -> CSOConfig:
    return load_config(CSOConfig, None, [*defaults(), f"init_from={args.init_from}", f"seed={seed}", *args.set])


def run_seed(seed: int, noise: list[float], args: argparse.Namespace, done: set[tuple[str, int, float]],
             out: Path) -> None:
    config = settings(args, seed)
    expert_role, prm_role = config.role_specs()
    model = config.load_policy([expert_role, prm_role])
    prompts = config.rollout_config(SamplingParams(), "train").prompt_builder()
    rollouts = config.round_engine(model.sampler, config.temperature, 1, 1).run(
        [Task(seed=s) for s in config.round_tasks(1)])
    failures = [t for t in rollouts if not t.success]
    expert = config.round_engine(resolve(expert_role, model), config.expert_temperature, 1, 2)
    alternatives = sample_alternatives(expert, failures, config.k)
    policy = config.round_engine(model.sampler, config.temperature, 1, 3)
    print(f"seed {seed}: {len(rollouts)} rollouts, {len(failures)} failures, "
          f"{sum(len(a.actions) for a in alternatives)} alternatives at {len(alternatives)} steps", file=sys.stderr)
    for eps in noise:
        if (config.prm, seed, eps) in done:
            continue
        prm_value = f"noisy:{eps:g}:{config.prm}" if eps > 0 else config.prm
        pairs, branched = pairs_by_method(config, prm_value, failures, alternatives, policy, prompts, model)
        rows = []
        for method in METHODS:
            right = planner_prefers_chosen(failures, pairs[method])
            rows.append({"prm": config.prm, "seed": seed, "noise": eps, "method": method, "pairs": len(right), "right": sum(right),
                         "accuracy": sum(right) / len(right) if right else None, "failures": len(failures),
                         "branched": branched if method == "cso" else 0})
        with (out / "pair_accuracy.jsonl").open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)  # a (PRM, seed, ε) lands whole or not at all
        print(f"{config.prm}, seed {seed}, ε {eps:g}: " + ", ".join(f"{r['method']} {r['right']}/{r['pairs']}" for r in rows),
              file=sys.stderr)


def prm_of(row: dict) -> str:
    return row.get("prm", "oracle")  # rows written before PRMs other than the oracle's were measured


def table(rows: list[dict]) -> str:
    """Pair accuracy (pooled over seeds: right pairs ÷ pairs) and pairs per seed, by PRM, ε and method."""
    lines = ["| PRM | ε | " + " | ".join(f"{m}: accuracy (pairs/seed)" for m in METHODS) + " |",
             "|---|---|" + "---|" * len(METHODS)]
    for prm, eps in sorted({(prm_of(r), r["noise"]) for r in rows}, key=lambda key: (key[0] != "oracle", key)):
        cells = []
        for method in METHODS:
            chosen = [r for r in rows if prm_of(r) == prm and r["noise"] == eps and r["method"] == method]
            pairs = sum(r["pairs"] for r in chosen)
            per_seed = ", ".join(f"{r['accuracy']:.2f}" if r["accuracy"] is not None else "–"
                                 for r in sorted(chosen, key=lambda r: r["seed"]))
            accuracy = f"{sum(r['right'] for r in chosen) / pairs:.3f}" if pairs else "–"
            cells.append(f"{accuracy} [{per_seed}] ({statistics.mean(r['pairs'] for r in chosen):.0f})")
        lines.append(f"| {prm} | {eps:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--init-from", default="", help="the policy adapter (a run or PEFT folder; default: the base "
                                                        "model alone)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.2, 0.4, 0.6])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a CSO config field over the learning benchmark's defaults")
    args = parser.parse_args()
    if any(not 0.0 <= eps <= 1.0 for eps in args.noise):
        parser.error("--noise levels must be in [0, 1]")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "pair_accuracy.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    done = {(prm_of(r), r["seed"], r["noise"]) for r in rows}
    try:
        prm = settings(args, 0).prm
        for seed in args.seeds:
            if all((prm, seed, eps) in done for eps in args.noise):
                continue
            run_seed(seed, args.noise, args, done, args.out)
    except (ConfigError, ValueError) as exc:
        sys.exit(f"cso_pair_accuracy: {exc}")
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    print(table([r for r in rows if r["seed"] in args.seeds and r["noise"] in args.noise]))


if __name__ == "__main__":
    main()
