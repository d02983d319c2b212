"""How many tokens a training batch pushes through the model, by layout (issue 46).

    python benchmarks/shared_tokens.py --env household --memory full --episodes 8
    python benchmarks/shared_tokens.py --env frozenlake --env-kwargs '{size: 4, max_steps: 8, view: local}' \
        --memory none --system-prompt "$(python -c "import yaml; \
        print(yaml.safe_load(open('recipes/grpo-frozenlake.yaml'))['system_prompt'])")" --episodes 8 --group-size 8

Plays `--episodes` tasks, `--group-size` times each, with the environment's oracle or random
admissible actions (no model is loaded, so it runs in seconds), and counts with the bundled tokenizer what an update on those
trajectories pushes through the model in each layout the toolkit has:

- per turn, every sequence whole (`shared_tokens: false`);
- per turn, each micro-batch's common prefix once (`shared_tokens: true` without full history);
- whole episodes where `policy_sequences` allows them (`shared_tokens: true` with full history),
  each micro-batch's prefix still once;
- the sampler's prompts: every turn's prompt in full (no cache), against the distinct prompt
  tokens of each turn's batch.

`distinct` is the prefix tree of all the batch's per-turn sequences, the floor of any layout;
redundancy is pushed ÷ distinct. The oracle's replies carry a sentence of analysis, longer
than a trained policy's one-line answers, so the counts are an upper bound on the replies' share.
"""

from __future__ import annotations

import argparse
import json

import yaml
from transformers import AutoTokenizer

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.llm.hf import bundled_gguf_path, convert_gguf
from hindsight.llm.prefixes import prefix_tree_size
from hindsight.train.model import collate, distinct_tokens
from hindsight.train.sequences import TrainingSequence, policy_sequences, render_prompt, turn_sequences
from hindsight.train.update import _micro_batches
from hindsight.types import SamplingParams


def pushed(sequences: list[TrainingSequence], micro_batch_size: int, share: bool) -> int:
    """Tokens the update pushes through the model for these sequences (one epoch)."""
    groups = _micro_batches(sequences, micro_batch_size, by_prefix=share)
    return sum(collate([sequences[i] for i in group], 0, share_prefix=share).num_tokens for group in groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="household")
    parser.add_argument("--env-kwargs", default="{}", help="YAML mapping of environment options")
    parser.add_argument("--memory", default="full")
    parser.add_argument("--system-prompt", default="", help="empty: the default template (with the env's rules)")
    parser.add_argument("--episodes", type=int, default=8, help="tasks played")
    parser.add_argument("--group-size", type=int, default=1, help="times each task is played (a GRPO group)")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--policy", default="oracle", choices=("oracle", "random"),
                        help="who plays: the oracle (short, solved episodes) or random admissible actions (long "
                             "episodes that run to the step limit, as a failing policy's do)")
    args = parser.parse_args()

    env_kwargs = yaml.safe_load(args.env_kwargs) or {}
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(bundled_gguf_path()), local_files_only=True)
    config = RolloutConfig(memory=Memory.parse(args.memory), system_template=args.system_prompt or DEFAULT_SYSTEM_TEMPLATE,
                           sampling=SamplingParams(temperature=0.0, max_new_tokens=64), seed=0)
    seeds = make(args.env, **env_kwargs).split_seeds("train", args.episodes)
    engine = RolloutEngine(lambda: make(args.env, **env_kwargs), load_model(args.policy, **({"seed": 0} if args.policy == "random" else {})), config)
    trajectories = engine.run([Task(seed=s, sample=j) for s in seeds for j in range(args.group_size)])
    prompts = config.prompt_builder()

    turns = [s for t in trajectories for s in turn_sequences(t, tokenizer, prompts)]
    episodes = [s for t in trajectories for s in policy_sequences(t, tokenizer, prompts, whole_episode=True)]
    distinct = distinct_tokens(turns)
    layouts = {
        "per turn, whole": pushed(turns, args.micro_batch_size, share=False),
        "per turn, shared prefix": pushed(turns, args.micro_batch_size, share=True),
        "whole episodes, shared prefix": pushed(episodes, args.micro_batch_size, share=True),
    }
    # The sampler's view: at turn k every live episode sends its whole prompt.
    prompt_ids = [[tokenizer.encode(render_prompt(tokenizer, prompts.build(
        t.instruction, t.steps[:k], t.steps[k].observation, guidance=t.guidance)), add_special_tokens=False)
        for t in trajectories if k < t.num_steps] for k in range(max(t.num_steps for t in trajectories))]
    prompt_tokens = sum(len(ids) for batch in prompt_ids for ids in batch)
    report = {
        "env": args.env, "env_kwargs": env_kwargs, "memory": args.memory, "episodes": len(trajectories),
        "turns": len(turns), "mean_steps": len(turns) / len(trajectories), "success": sum(t.success for t in trajectories),
        "distinct_tokens": distinct,
        "pushed": layouts, "redundancy": {name: tokens / distinct for name, tokens in layouts.items()},
        "sampler_prompt_tokens": prompt_tokens,
        "sampler_distinct_prompt_tokens_per_turn_batch": sum(prefix_tree_size(batch) for batch in prompt_ids),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
