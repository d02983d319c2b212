"""Rollout throughput of one workload in three configurations: in-process, server, Ray.

The same `hindsight eval` (FrozenLake 5×5, greedy, the bundled SmolLM2-135M, memory none,
12 new tokens, 32 episodes at once) runs three ways on the same cores:

    in-process  `--model smollm2 --threads T`: one process, T torch threads
    server      `--model openai:DIR` against `transformers serve DIR` (the bundled model's
                converted folder) started with T torch threads; the eval process only
                builds prompts, steps the envs and sends HTTP requests
    server-cb   the same with `--continuous-batching` (paged attention, requests batched)
    ray         `--model ray:smollm2 --threads 1`: one replica per CPU of a local Ray
                cluster (T of them), each with one thread; every batch is split over them

Each configuration is measured `--repeats` times, and the median wall time of the
evaluation itself is reported (`summary.json`'s `wall_s`: the episodes, not the model load
or the server start, which are reported apart). Run it on an otherwise idle machine:

    python benchmarks/rollout_configs.py --out runs/rollout-configs --threads 2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hindsight.llm.hf import bundled_gguf_path, convert_gguf
from hindsight.llm.vllm import LocalServer

CONFIGS = ("in-process", "server", "server-cb", "ray")
PROMPT = ("Walk on the frozen lake from P to the goal G without stepping into a hole H. Reply with one move: "
          "<action>up</action>, <action>down</action>, <action>left</action> or <action>right</action>.")


@dataclass(frozen=True)
class Measurement:
    config: str
    repeat: int
    episodes: int
    steps: int
    success_rate: float
    wall_s: float
    setup_s: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s


def evaluate(config: str, out: Path, args: argparse.Namespace, extra_env: dict[str, str], model: str,
             threads: int) -> dict:
    if out.exists():
        shutil.rmtree(out)
    command = ["hindsight", "eval", "--env", "frozenlake", "--set", "size=5", "--set", "max_steps=10",
               "--model", model, "--episodes", str(args.episodes), "--concurrency", str(args.episodes),
               "--temperature", "0", "--memory", "none", "--max-new-tokens", "12", "--system-prompt", PROMPT,
               "--threads", str(threads), "--out", str(out), "--json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **extra_env}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{config}: hindsight eval failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads((out / "summary.json").read_text())


def measure(config: str, repeat: int, args: argparse.Namespace, model_dir: Path) -> Measurement:
    out = args.out / f"{config}-{repeat}"
    started = time.perf_counter()
    if config == "in-process":
        summary = evaluate(config, out, args, {}, "smollm2", args.threads)
    elif config == "ray":
        summary = evaluate(config, out, args, {}, "ray:smollm2", 1)
    else:
        batching = ["--continuous-batching"] if config == "server-cb" else []
        server = LocalServer(
            "transformers serve",
            lambda port: ["transformers", "serve", str(model_dir), "--port", str(port), "--host", "127.0.0.1",
                          "--device", "cpu", *batching],
            env={**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"},
            startup_timeout=args.server_timeout, log_path=args.out / f"server-{repeat}.log")
        try:
            summary = evaluate(config, out, args, {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "none"},
                               f"openai:{model_dir}", 1)
        finally:
            server.close()
    total = time.perf_counter() - started
    return Measurement(config, repeat, summary["episodes"], summary["steps"], summary["success_rate"],
                       summary["wall_s"], total - summary["wall_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/rollout-configs"))
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (in-process, server); Ray replicas")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--server-timeout", type=float, default=600.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = convert_gguf(bundled_gguf_path())
    measurements = []
    for repeat in range(args.repeats):
        for config in args.configs:
            found = measure(config, repeat, args, model_dir)
            measurements.append(found)
            print(f"{config:10s} repeat {repeat}: {found.steps} steps in {found.wall_s:.1f} s "
                  f"({found.steps_per_s:.2f} steps/s, success {found.success_rate:.2f}; setup {found.setup_s:.1f} s)",
                  file=sys.stderr)
    (args.out / "measurements.json").write_text(json.dumps([asdict(m) for m in measurements], indent=1))
    print("| configuration | episodes | steps | success | wall s (median) | steps/s | setup s |")
    print("|---|---|---|---|---|---|---|")
    for config in args.configs:
        mine = [m for m in measurements if m.config == config]
        wall = statistics.median(m.wall_s for m in mine)
        print(f"| {config} | {mine[0].episodes} | {mine[0].steps} | {mine[0].success_rate:.2f} | {wall:.1f} | "
              f"{mine[0].steps / wall:.2f} | {statistics.median(m.setup_s for m in mine):.1f} |")


if __name__ == "__main__":
    main()
