"""Cost of the GRPO update against a bare forward+backward over the same tokens.

Builds real training sequences from the bundled model's own FrozenLake rollouts (sampled,
so the groups have advantages), then times, on exactly the same micro-batches:

- **update**: `policy_gradient_update` — collation, masked log-probs, the clipped loss,
  backward, gradient clipping and the AdamW step;
- **bare**: what any trainer pays at least — `model(input_ids, attention_mask,
  labels=input_ids).loss.backward()` per micro-batch (full-vocabulary cross-entropy,
  no masks, no optimizer step).

Both run the LoRA-wrapped model, alternating, `--repeats` times; medians are reported as
tokens/s and the update's overhead relative to bare. A negative overhead means the update
is cheaper than the bare pass (it projects to the vocabulary only at loss positions). The
update runs twice per repeat: with every sequence pushed whole (`shared_tokens: false`, the
tokens bare pushes) and as GRPO trains with the default `shared_tokens: true` (each
micro-batch's common prefix once, and with full history each episode as one sequence);
the report gives both, their tokens pushed and the batch's distinct tokens (redundancy =
pushed ÷ distinct).

    OMP_NUM_THREADS=2 python benchmarks/update_overhead.py --repeats 3
    # issue 46's measurements (docs/results.md): FrozenLake 6x6 without history, household with it
    OMP_NUM_THREADS=2 python benchmarks/update_overhead.py --set 'env_kwargs={size: 6, max_steps: 8}' \
        --tasks 2 --group-size 4 --repeats 1 --skip-bare
    OMP_NUM_THREADS=2 python benchmarks/update_overhead.py --set env=household --set memory=full \
        --set 'env_kwargs={max_steps: 20}' --set max_new_tokens=24 --tasks 1 --group-size 2 --repeats 1 --skip-bare
    # the learning benchmark's turns, from its start adapter:
    OMP_NUM_THREADS=2 python benchmarks/update_overhead.py --recipe recipes/grpo-frozenlake.yaml \
        --init-from runs/learning/start-adapter --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import torch

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import Memory
from hindsight.algos.grpo import group_advantages
from hindsight.configs import load_config
from hindsight.envs import make
from hindsight.methods.grpo import GRPOConfig
from hindsight.methods.model_setup import load_latest, load_trainable, make_optimizer
from hindsight.train.model import collate, distinct_tokens
from hindsight.train.sequences import policy_sequences, turn_sequences
from hindsight.train.update import UpdateSettings, _micro_batches, policy_gradient_update
from hindsight.types import SamplingParams


def bare_forward_backward(model, batches) -> None:
    for batch in batches:
        labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
        model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss.backward()
    model.model.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, help="tasks sampled (default 4, or the recipe's tasks_per_update)")
    parser.add_argument("--group-size", type=int, help="samples per task (default 6, or the recipe's)")
    parser.add_argument("--micro-batch-size", type=int, help="sequences per forward/backward (default 8, or the "
                                                             "recipe's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recipe", default="", help="a GRPO recipe: its env, history, system prompt, token budget, "
                                                     "tasks, group size and micro-batch replace the defaults")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a GRPO config field over the recipe's (or over the defaults without one), e.g. "
                             "--set env=household --set memory=full")
    parser.add_argument("--skip-bare", action="store_true", help="time only the update, whole and shared (the bare "
                                                                  "pass costs as much as the whole update)")
    parser.add_argument("--init-from", default="", help="the adapter the rollouts sample from (a run or PEFT folder)")
    args = parser.parse_args()

    model = load_trainable("smollm2", ("policy",), lora_rank=16, lora_alpha=32, full_finetune=False)
    if args.init_from:
        load_latest(model, args.init_from)
    env, env_kwargs = "frozenlake", {"size": 3, "max_steps": 6}
    defaults = {"tasks": 4, "group_size": 6, "micro_batch_size": 8}
    config = RolloutConfig(memory=Memory.parse("none"), sampling=SamplingParams(temperature=1.0, max_new_tokens=24),
                           concurrency=16, seed=0)
    if args.recipe or args.set:
        recipe = load_config(GRPOConfig, args.recipe or None, args.set)
        env, env_kwargs = recipe.env, recipe.env_kwargs
        config = recipe.rollout_config(SamplingParams(temperature=1.0, max_new_tokens=recipe.max_new_tokens), "train")
        defaults = {"tasks": recipe.tasks_per_update, "group_size": recipe.group_size,
                    "micro_batch_size": recipe.micro_batch_size}
    for name, value in defaults.items():  # an explicit flag wins over the recipe
        if getattr(args, name) is None:
            setattr(args, name, value)
    seeds = make(env, **env_kwargs).split_seeds("train", args.tasks)
    engine = RolloutEngine(lambda: make(env, **env_kwargs), model.backend, config)
    tasks = [Task(seed=s, sample=j) for s in seeds for j in range(args.group_size)]
    # The rollouts, timed with the sampler's sharing off (every prompt prefilled whole) and on
    # (shared prefixes once; with history, each turn from its episode's stored cache).
    rollout_s = {}
    for share in (False, True):
        model.backend.share_prefill = share
        before = replace(model.backend.prefill)
        started = time.perf_counter()
        trajectories = engine.run(tasks)
        rollout_s[share] = time.perf_counter() - started
    counts = model.backend.prefill
    shared_prefill = (counts.pushed_tokens - before.pushed_tokens) / max(1, counts.distinct_tokens - before.distinct_tokens)
    trajectories.sort(key=lambda t: t.id)
    # Random returns: the timing does not depend on their values, only on every sequence
    # carrying a non-zero advantage (so none is skipped).
    returns = torch.rand(args.tasks, args.group_size, generator=torch.Generator().manual_seed(0))
    advantages = group_advantages(returns).flatten().tolist()
    sequences, sequence_adv, joined, joined_adv = [], [], [], []
    for trajectory, advantage in zip(trajectories, advantages):
        for sequence in turn_sequences(trajectory, model.backend.tokenizer, config.prompt_builder()):
            sequences.append(sequence)
            sequence_adv.append(advantage)
        # What GRPO trains with the switch on: with full history, the whole episode as one sequence.
        for sequence in policy_sequences(trajectory, model.backend.tokenizer, config.prompt_builder(), True):
            joined.append(sequence)
            joined_adv.append(advantage)
    groups = _micro_batches(sequences, args.micro_batch_size)
    batches = [collate([sequences[i] for i in group], model.pad_id) for group in groups]
    tokens = sum(b.num_tokens for b in batches)

    optimizer, scheduler = make_optimizer(model.parameters(), 1e-6, 0.0, 0, 100)
    whole = UpdateSettings(micro_batch_size=args.micro_batch_size, shared_tokens=False)
    shared = replace(whole, shared_tokens=True)
    model.model.train()
    bare_forward_backward(model, batches[:1])  # warm-up
    update_s, shared_s, bare_s, shared_tokens = [], [], [], 0
    for _ in range(args.repeats):
        started = time.perf_counter()
        policy_gradient_update(model, sequences, sequence_adv, optimizer, scheduler, whole)
        update_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        shared_tokens = policy_gradient_update(model, joined, joined_adv, optimizer, scheduler, shared).tokens
        shared_s.append(time.perf_counter() - started)
        if not args.skip_bare:
            model.model.train()
            started = time.perf_counter()
            bare_forward_backward(model, batches)
            bare_s.append(time.perf_counter() - started)
    update, with_sharing = statistics.median(update_s), statistics.median(shared_s)
    bare = statistics.median(bare_s) if bare_s else None
    distinct = distinct_tokens(sequences)
    print(json.dumps({
        "sequences": len(sequences), "shared_sequences": len(joined), "tokens": tokens, "micro_batches": len(batches), "threads": torch.get_num_threads(),
        "update_s": update_s, "bare_s": bare_s,
        "update_tokens_per_s": tokens / update, "bare_tokens_per_s": tokens / bare if bare else None,
        "overhead": update / bare - 1.0 if bare else None,
        "distinct_tokens": distinct, "redundancy_whole": tokens / distinct,
        "shared_tokens": shared_tokens, "redundancy_shared": shared_tokens / distinct,
        "shared_update_s": shared_s, "shared_speedup": update / with_sharing,
        "rollout_s_whole": rollout_s[False], "rollout_s_shared": rollout_s[True],
        "rollout_prefill_redundancy_shared": shared_prefill,
        # Every prompt token ÷ the distinct ones: the prefill redundancy with sharing off.
        "rollout_prompt_redundancy": model.backend.prefill.prompt_tokens / max(1, model.backend.prefill.distinct_tokens),
    }, indent=2))


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
