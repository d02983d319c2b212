"""Rollout throughput of the pooled engine on the bundled model.

Measures, on FrozenLake with SmolLM2-135M (greedy decoding so every variant generates
the same tokens):

1. pooled engine with C concurrent trajectories vs. the same trajectories run one at a
   time (C = 8 and 32 by default), as generated tokens/s and env steps/s;
2. the engine's overhead, two ways: (a) within the pooled run, the wall time spent
   outside the backend's `generate` (prompt building, parsing, environment steps, logs)
   relative to the time inside it; (b) the pooled run's wall time against calling the
   backend's own batched `generate` directly on exactly the prompt batches the engine
   sent, afterwards. (b) includes run-to-run noise of `generate` itself (±10% here).

Each measurement is repeated and the median is reported.

    python benchmarks/rollout_throughput.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.types import Completion, GenerationRequest, SamplingParams


@dataclass
class RecordingBackend:
    """Wraps a backend, keeping every batch it was sent and the time spent inside it."""

    inner: object
    batches: list[tuple[list[GenerationRequest], SamplingParams]] = field(default_factory=list)
    generate_s: float = 0.0
    tokens: int = 0

    @property
    def spec(self) -> str:
        return self.inner.spec

    def generate(self, requests, params) -> list[Completion]:
        started = time.perf_counter()
        completions = self.inner.generate(requests, params)
        self.generate_s += time.perf_counter() - started
        self.batches.append((list(requests), params))
        self.tokens += sum(len(c.token_ids or ()) for c in completions)
        return completions


def run_engine(backend, env_kwargs, seeds, concurrency, sampling):
    recorder = RecordingBackend(backend)
    config = RolloutConfig(memory=Memory.parse("none"), sampling=sampling, concurrency=concurrency, seed=0)
    engine = RolloutEngine(lambda: make("frozenlake", **env_kwargs), recorder, config)
    started = time.perf_counter()
    trajectories = engine.run(Task(seed=s) for s in seeds)
    wall = time.perf_counter() - started
    steps = sum(t.num_steps for t in trajectories)
    return wall, steps, recorder


def replay_batches(backend, recorder) -> float:
    started = time.perf_counter()
    for requests, params in recorder.batches:
        backend.generate(requests, params)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=3, help="turns per trajectory (keeps the run short)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--sequential-episodes", type=int, default=8,
                        help="one-at-a-time runs use this many trajectories (rates are per token, so comparable)")
    args = parser.parse_args()

    backend = load_model("smollm2")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    env_kwargs = {"max_steps": args.max_steps}
    seeds_all = make("frozenlake").split_seeds("test", max(args.concurrency))
    run_engine(backend, env_kwargs, seeds_all[:2], 2, sampling)  # warm-up: first calls pay one-off costs
    results = {}
    for concurrency in args.concurrency:
        seeds = seeds_all[:concurrency]
        pooled, sequential, overhead, own = [], [], [], []
        for _ in range(args.repeats):
            wall, steps, recorder = run_engine(backend, env_kwargs, seeds, concurrency, sampling)
            direct = replay_batches(backend, recorder)
            pooled.append((recorder.tokens / wall, steps / wall))
            overhead.append(wall / direct - 1.0)
            own.append((wall - recorder.generate_s) / recorder.generate_s)
            seq_wall, seq_steps, seq_recorder = run_engine(
                backend, env_kwargs, seeds[: args.sequential_episodes], 1, sampling
            )
            sequential.append((seq_recorder.tokens / seq_wall, seq_steps / seq_wall))
        row = {
            "concurrency": concurrency,
            "pooled_tok_s": statistics.median(p[0] for p in pooled),
            "pooled_steps_s": statistics.median(p[1] for p in pooled),
            "sequential_tok_s": statistics.median(s[0] for s in sequential),
            "sequential_steps_s": statistics.median(s[1] for s in sequential),
            "engine_overhead_in_run": statistics.median(own),
            "engine_overhead_vs_replay": statistics.median(overhead),
            "overhead_in_run_runs": own,
            "overhead_vs_replay_runs": overhead,
        }
        row["speedup_steps"] = row["pooled_steps_s"] / row["sequential_steps_s"]
        results[concurrency] = row
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
