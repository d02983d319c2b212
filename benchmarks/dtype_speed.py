"""float32 against bfloat16 weights for the bundled model on this CPU: prefill, decode and a LoRA update.

The shapes are those of a Self-Guide turn on FrozenLake 5x5 (docs/results.md, issue 12): an
assessment prompt of about 650 tokens with 24 generated, an action prompt of about 350 with 8.
After one unmeasured pass each, the dtypes run, alternating, `--repeats` times on the same token
ids; medians are reported.

- **prefill**: a no-grad forward pass over a batch of 8 prompts;
- **decode**: 24 greedy tokens after a 650-token prompt, batch 8, prefill included
  (`min_new_tokens` keeps the length fixed), through the unmerged adapter as in training rollouts;
- **update**: log-probs, backward and nothing else over 4 assessment and 4 action sequences in
  micro-batches of 4, with the LoRA adapter and gradient checkpointing of the Self-Guide recipe.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/dtype_speed.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.methods.model_setup import load_trainable
from hindsight.train.model import collate
from hindsight.train.sequences import TrainingSequence

ASSESSMENT, ACTION = (650, 24), (350, 8)  # (prompt tokens, generated tokens)


def sequences(generator: torch.Generator) -> list[TrainingSequence]:
    out = []
    for prompt, generated in [ASSESSMENT] * 4 + [ACTION] * 4:
        ids = torch.randint(100, 40000, (prompt + generated,), generator=generator).tolist()
        out.append(TrainingSequence(input_ids=tuple(ids), loss_mask=(0,) * prompt + (1,) * generated,
                                    trajectory_id=str(len(out)), turns=(0,)))
    return out


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(model, prompts: torch.Tensor, training: list[TrainingSequence]) -> dict[str, float]:
    module = model.model

    def prefill() -> None:
        with torch.no_grad():
            module(input_ids=prompts)

    def decode() -> None:
        with torch.no_grad():
            module.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=24,
                            min_new_tokens=24, do_sample=False, pad_token_id=0, use_cache=True)

    def update() -> None:
        for start in range(0, len(training), 4):
            model.logprobs(collate(training[start:start + 4], pad_id=0)).sum().backward()
        module.zero_grad(set_to_none=True)

    module.config.use_cache = True  # generation needs the cache that gradient checkpointing turns off
    times = {"prefill_s": timed(prefill), "decode_s": timed(decode)}
    module.config.use_cache = False
    times["update_s"] = timed(update)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(100, 40000, (8, ASSESSMENT[0]), generator=generator)
    training = sequences(generator)
    models = {dtype: load_trainable("smollm2", ("policy",), 16, 32, False, gradient_checkpointing=True, dtype=dtype)
              for dtype in ("float32", "bfloat16")}
    for model in models.values():
        measure(model, prompts, training)  # warm-up: the first pass pays for allocations and kernel choice
    runs: dict[str, list[dict[str, float]]] = {dtype: [] for dtype in models}
    for repeat in range(args.repeats):
        for dtype, model in models.items():
            runs[dtype].append(measure(model, prompts, training))
            print(f"repeat {repeat + 1}, {dtype}: {runs[dtype][-1]}", flush=True)
    medians = {dtype: {key: statistics.median(run[key] for run in rows) for key in rows[0]}
               for dtype, rows in runs.items()}
    speedup = {key: medians["float32"][key] / medians["bfloat16"][key] for key in medians["float32"]}
    print(json.dumps({"threads": torch.get_num_threads(), "medians": medians, "float32/bfloat16": speedup}, indent=2))


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
