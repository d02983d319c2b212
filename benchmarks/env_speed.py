"""Each environment's oracle success, its own speed, and the cost of serving it over HTTP.

For every environment id given, on the first N test tasks:

* oracle: the share of tasks the built-in oracle solves within the step budget, and its mean
  steps;
* local: environment steps per second in this process, following the oracle (resets,
  oracle calls and `info` included; no model);
* served: the same episodes through `hindsight serve-env` started as a subprocess on this
  machine (`--env http://127.0.0.1:PORT/ID`), and the added time per step.

    python benchmarks/env_speed.py                                # every env with an oracle, 100 tasks
    python benchmarks/env_speed.py frozenlake webshop --tasks 50

Time is wall-clock on an otherwise idle machine; both processes may use any core, so pin
them (`taskset`) to compare machines.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx

from hindsight.envs import env_class, list_envs, make
from hindsight.net import free_port


@dataclass(frozen=True)
class Speed:
    env: str
    tasks: int
    solved: int
    steps: int
    local_s: float
    served_s: float

    def row(self) -> str:
        local, served = self.steps / self.local_s, self.steps / self.served_s
        overhead_ms = (self.served_s - self.local_s) / self.steps * 1000
        return (f"| `{self.env}` | {self.solved}/{self.tasks} ({self.solved / self.tasks:.1%}) | "
                f"{self.steps / self.tasks:.1f} | {local:,.0f} | {served:,.0f} | {overhead_ms:.2f} |")


def oracle_episodes(env, seeds: list[int]) -> tuple[int, int]:
    """(solved, steps) of the oracle on `seeds`."""
    solved = steps = 0
    for seed in seeds:
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action())
            steps += 1
        solved += env.is_success()
    return solved, steps


def measure(env_id: str, tasks: int) -> Speed:
    local = make(env_id)
    seeds = local.split_seeds("test", tasks)
    oracle_episodes(local, seeds[:3])  # builds caches (catalogues, indexes) outside the timing
    start = time.perf_counter()
    solved, steps = oracle_episodes(local, seeds)
    local_s = time.perf_counter() - start

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "hindsight", "serve-env", env_id, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        server.stdout.readline()  # "serving ..." once it listens
        url = f"http://127.0.0.1:{port}/{env_id}"
        served = make(url)
        oracle_episodes(served, seeds[:3])
        start = time.perf_counter()
        served_solved, served_steps = oracle_episodes(served, seeds)
        served_s = time.perf_counter() - start
        if (served_solved, served_steps) != (solved, steps):
            raise SystemExit(f"{env_id}: the served episodes differ from the local ones")
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["env"] == env_id
    finally:
        server.terminate()
        server.wait(10)
    return Speed(env_id, len(seeds), solved, steps, local_s, served_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("envs", nargs="*", help="environment ids (default: every registered one that runs here "
                                                "with its defaults and has an oracle)")
    parser.add_argument("--tasks", type=int, default=100, help="test tasks per environment (default 100)")
    args = parser.parse_args()
    envs = args.envs or [spec.id for spec in list_envs()
                         if "[unavailable here" not in spec.description and env_class(spec.id).has_oracle]
    print("| env | oracle solves | oracle steps per task | local steps/s | served steps/s | "
          "server overhead (ms per step) |")
    print("|---|---|---|---|---|---|")
    for env_id in envs:
        print(measure(env_id, args.tasks).row(), flush=True)


if __name__ == "__main__":
    main()
