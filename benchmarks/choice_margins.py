"""Does a FrozenLake policy read the holes, or lean one way? Its log-prob margins at choice states.

    HF_HUB_OFFLINE=1 python benchmarks/choice_margins.py RUN ADAPTER... [--lakes 100] [--split test] [--json]

RUN is a GRPO run on FrozenLake; its config gives the model, the prompt and the lakes (its
evaluation options, `env_kwargs` with `eval_env_kwargs` over them). ADAPTER is anything
`init_from` takes: an exported adapter folder, a run directory (its latest checkpoint) or one
checkpoint, so one call compares a start with the checkpoints of a run.

A choice state is a cell where one move toward the goal is a hole and another is ice
(`frozenlake.choice_cells`). The script takes every such cell of the first `--lakes` lakes of
the split, walks there from the start along ice toward the goal, and builds the prompt the
policy sees at that turn. Its margin is log P(ice move) − log P(hole move): the log-probability
of the whole reply `<action>MOVE</action>` for each. A greedy policy avoids the hole where the
margin is positive.

Greedy success cannot tell a policy that reads the holes from one that prefers a side: where
every hole lies vertically, "sideways first" avoids them all. The margins can, by the hole's
side. With m_side the mean margin where the hole is the sideways move and m_vert where it is the
vertical one:
  hole reading  = (m_side + m_vert) / 2, what flips with the hole, whatever its side;
  sideways lean = (m_vert − m_side) / 2, the preference for left or right over up or down,
                  whatever the hole.
Both are in nats; the difference between two adapters says what training changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.configs import ConfigError, from_mapping
from hindsight.envs import EnvError, make
from hindsight.envs.frozenlake import FrozenLake, _read_map, choice_cells, toward_moves
from hindsight.llm.base import ModelError
from hindsight.logs import RunDir
from hindsight.methods.grpo import GRPOConfig
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.train.sequences import render_prompt
from hindsight.types import SamplingParams, Step

SIDEWAYS = ("left", "right")


@dataclass(frozen=True)
class ChoiceState:
    """One choice cell of one lake, with the prompt the policy sees there."""

    seed: int
    turn: int  # moves made before it
    prompt: str
    hole: str  # the move toward the goal that falls
    ice: str  # a move toward the goal onto ice

    @property
    def hole_sideways(self) -> bool:
        return self.hole in SIDEWAYS


@dataclass(frozen=True)
class Margins:
    """One adapter's margins at the choice states, split by the hole's side (nats)."""

    adapter: str
    states: int
    hole_sideways: int
    hole_vertical: int
    mean_hole_sideways: float  # margin where the hole is left or right
    mean_hole_vertical: float
    hole_reading: float
    sideways_lean: float
    ice_preferred: float  # share of states where the greedy reply avoids the hole


def reply(move: str) -> str:
    """A move as the benchmark's recipes ask the policy to answer it."""
    return f"<action>{move}</action>"


def walk_to(start: tuple[int, int], target: tuple[int, int], goal: tuple[int, int],
            holes: set[tuple[int, int]]) -> list[str]:
    """The moves of a walk from `start` to `target` that steps only on ice and only toward the goal
    (`choice_cells` reaches its cells this way), found breadth first, so it is a shortest one."""
    paths = {start: []}
    todo = deque([start])
    while todo:
        cell = todo.popleft()
        if cell == target:
            return paths[cell]
        for move, near in toward_moves(cell, goal).items():
            if near not in paths and near not in holes:
                paths[near] = paths[cell] + [move]
                todo.append(near)
    raise AssertionError(f"{target} is not on a walk toward the goal from {start}")  # choice_cells found it


def choice_states(config: GRPOConfig, split: str, lakes: int, tokenizer) -> list[ChoiceState]:
    """The choice states of the first `lakes` lakes of `split`, in the run's evaluation env."""
    env = make(config.env, **{**config.env_kwargs, **config.eval_env_kwargs})
    if not isinstance(env, FrozenLake):
        raise ConfigError(f"choice_margins reads FrozenLake runs; {config.env!r} is not FrozenLake")
    builder = config.rollout_config(SamplingParams(temperature=0.0, max_new_tokens=config.max_new_tokens),
                                    split).prompt_builder()
    states = []
    for seed in env.split_seeds(split, lakes):
        start, goal, holes = _read_map(env.generate_instance(seed)["map"])
        for cell in sorted(choice_cells(start, goal, holes)):
            observation, info = env.reset(seed)
            history: list[Step] = []
            for index, move in enumerate(walk_to(start, cell, goal, holes)):
                feedback, reward, _, _, after = env.step(move)
                history.append(Step(index, observation, info["state_key"], reply(move), move, None, True, reward,
                                    after["score"], feedback))
                observation, info = feedback, after
            conversation = builder.build(env.instruction, history, observation)
            toward = toward_moves(cell, goal)
            hole = next(move for move, near in toward.items() if near in holes)
            ice = next(move for move in toward if move != hole)
            states.append(ChoiceState(seed, len(history), render_prompt(tokenizer, conversation), hole, ice))
    return states


def margins_of(model, adapter: str, states: list[ChoiceState], batch: int = 8) -> Margins:
    """log P(ice reply) − log P(hole reply) at every state under `adapter`, summarised by the hole's side."""
    load_latest(model, adapter)
    tokenizer = model.backend.tokenizer
    sequences, spans = [], []
    for state in states:
        prompt = tokenizer.encode(state.prompt, add_special_tokens=False)
        for move in (state.ice, state.hole):
            answer = tokenizer.encode(reply(move), add_special_tokens=False)
            sequences.append(prompt + answer)
            spans.append((len(prompt) - 1, len(prompt) + len(answer) - 1))  # logprobs[t] scores token t + 1
    totals = []
    for first in range(0, len(sequences), batch):
        chunk = model.sequence_logprobs("policy", sequences[first:first + batch])
        totals += [sum(values[a:b]) for values, (a, b) in zip(chunk, spans[first:first + batch])]
    margins = [ice - hole for ice, hole in zip(totals[0::2], totals[1::2])]
    side = [m for m, state in zip(margins, states) if state.hole_sideways]
    vertical = [m for m, state in zip(margins, states) if not state.hole_sideways]
    m_side = sum(side) / len(side) if side else float("nan")
    m_vert = sum(vertical) / len(vertical) if vertical else float("nan")
    return Margins(adapter, len(margins), len(side), len(vertical), m_side, m_vert, (m_side + m_vert) / 2,
                   (m_vert - m_side) / 2, sum(m > 0 for m in margins) / len(margins))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a GRPO run on FrozenLake (its config gives model, prompt and lakes)")
    parser.add_argument("adapters", nargs="+", help="adapters to compare: adapter folders, runs or checkpoints")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--lakes", type=int, default=100, help="how many lakes of the split to take (default 100)")
    parser.add_argument("--json", action="store_true", help="one JSON object per adapter")
    args = parser.parse_args()
    try:
        raw = RunDir(args.run).read_config()
        if raw.get("kind") != "grpo":
            raise ConfigError(f"{args.run} is a {raw.get('kind')!r} run; choice_margins reads GRPO runs")
        config = from_mapping(GRPOConfig, {k: v for k, v in raw.items() if k != "kind"})
        model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, False,
                               dtype=config.dtype)
        states = choice_states(config, args.split, args.lakes, model.backend.tokenizer)
        if not states:
            raise ConfigError(f"no choice state on the first {args.lakes} {args.split} lakes")
        results = [margins_of(model, adapter, states) for adapter in args.adapters]
    except (ConfigError, EnvError, ModelError, OSError) as error:
        sys.exit(f"choice_margins: {error}")
    if args.json:
        for result in results:
            print(json.dumps(asdict(result)))
        return
    first = results[0]
    print(f"{first.states} choice states on the first {args.lakes} {args.split} lakes "
          f"({first.hole_sideways} with the hole sideways, {first.hole_vertical} vertical)")
    print("| adapter | margin, hole sideways | margin, hole vertical | hole reading | sideways lean | ice preferred |")
    print("|---|---|---|---|---|---|")
    for result in results:
        print(f"| {result.adapter} | {result.mean_hole_sideways:+.2f} | {result.mean_hole_vertical:+.2f} | "
              f"{result.hole_reading:+.2f} | {result.sideways_lean:+.2f} | {result.ice_preferred:.2f} |")


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
