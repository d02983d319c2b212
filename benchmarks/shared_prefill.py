"""What prefilling identical prompts once saves: step-level best-of-N on the bundled model.

    python benchmarks/shared_prefill.py --tasks 16 --best-of 5 --repeats 3

Evaluates the shipped FrozenLake policy (`smollm2+frozenlake3`) on FrozenLake 5x5 with
best-of-N and the oracle PRM (the setting of issue 13's `bon5-oracle`: temperature 1, seed 0,
12 new tokens, no history), once with the HF backend's shared prefill and once without
(`HFBackend.share_prefill`), alternating, and prints each arm's median wall time, the speed-up
and how many of the actions taken agree (sampling is seeded, so both arms draw the same
candidates unless float noise flips a token).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import BestOfN, OraclePRM
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.types import SamplingParams

# The system prompt of issue 13's runs (benchmarks/cso_comparison.sh reads it the same way).
SYSTEM = yaml.safe_load((Path(__file__).resolve().parents[1] / "recipes/smoke-cso.yaml").read_text())["system_prompt"]


def run(backend, tasks: int, best_of: int):
    lake = lambda: make("frozenlake", size=5, max_steps=10)  # noqa: E731
    config = RolloutConfig(memory=Memory.parse("none"), system_template=SYSTEM, concurrency=tasks,
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=12, seed=0),
                           best_of=BestOfN(best_of, OraclePRM()))
    started = time.perf_counter()
    trajectories = RolloutEngine(lake, backend, config).run([Task(seed=s) for s in range(tasks)])
    return time.perf_counter() - started, trajectories


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--best-of", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    backend = load_model("smollm2+frozenlake3", device="cpu", dtype="float32")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    actions: dict[bool, list[list[str]]] = {}
    for _ in range(args.repeats):
        for shared in (True, False):
            backend.share_prefill = shared
            wall, trajectories = run(backend, args.tasks, args.best_of)
            seconds[shared].append(wall)
            actions[shared] = [[step.action for step in t.steps] for t in trajectories]
    same = sum(a == b for a, b in zip(actions[True], actions[False]))
    result = {
        "tasks": args.tasks, "best_of": args.best_of, "repeats": args.repeats,
        "shared_s": statistics.median(seconds[True]), "unshared_s": statistics.median(seconds[False]),
        "speed_up": statistics.median(seconds[False]) / statistics.median(seconds[True]),
        "episodes_with_the_same_actions": same,
        "all_s": {"shared": seconds[True], "unshared": seconds[False]},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
