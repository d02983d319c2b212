"""Does a FrozenLake policy read the holes, or lean one way? Its log-prob margins at choice states.

    HF_HUB_OFFLINE=1 python benchmarks/choice_margins.py RUN ADAPTER... [--lakes 100] [--split test]
        [--states choice|ties] [--json]

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

With `--states ties` the script reads the tie states instead (`frozenlake.tie_cells`): cells of
the same walks where two moves bring the goal closer and both are ice, so no hole decides. There
the margin is log P(sideways move) − log P(vertical move): the lean alone, with nothing to read.
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
from hindsight.envs.frozenlake import Cell, FrozenLake, _read_map, choice_cells, tie_cells, toward_moves
from hindsight.llm.base import ModelError
from hindsight.logs import RunDir
from hindsight.methods.grpo import GRPOConfig
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.train.sequences import render_prompt
from hindsight.types import SamplingParams, Step
from learning_table import toward

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


@dataclass(frozen=True)
class TieState:
    """One tie cell of one lake (two moves toward the goal, both onto ice), with its prompt."""

    seed: int
    turn: int
    prompt: str
    sideways: str
    vertical: str


@dataclass(frozen=True)
class TieLean:
    """One adapter's preference at the tie states (nats)."""

    adapter: str
    states: int
    lean: float  # mean of log P(sideways reply) − log P(vertical reply)
    sideways_preferred: float  # share of states where the greedy reply is the sideways move


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


def _evaluation_env(config: GRPOConfig) -> FrozenLake:
    env = make(config.env, **{**config.env_kwargs, **config.eval_env_kwargs})
    if not isinstance(env, FrozenLake):
        raise ConfigError(f"choice_margins reads FrozenLake runs; {config.env!r} is not FrozenLake")
    return env


def _prompt_at(env: FrozenLake, builder, seed: int, lake: tuple[Cell, Cell, set[Cell]], cell: Cell,
               tokenizer) -> tuple[int, str]:
    """(moves made, the prompt the policy sees) at `cell` of lake `seed` (its start, goal and
    holes), walked to along ice toward the goal."""
    start, goal, holes = lake
    observation, info = env.reset(seed)
    history: list[Step] = []
    for index, move in enumerate(walk_to(start, cell, goal, holes)):
        feedback, reward, _, _, after = env.step(move)
        history.append(Step(index, observation, info["state_key"], reply(move), move, None, True, reward,
                            after["score"], feedback))
        observation, info = feedback, after
    return len(history), render_prompt(tokenizer, builder.build(env.instruction, history, observation))


def _walk_states(config: GRPOConfig, split: str, lakes: int, tokenizer, cells_of):
    """(seed, cell, goal, holes, moves made, prompt) at each cell `cells_of(start, goal, holes)`
    picks on the first `lakes` lakes of `split`, in the run's evaluation env."""
    env = _evaluation_env(config)
    builder = config.rollout_config(SamplingParams(temperature=0.0, max_new_tokens=config.max_new_tokens),
                                    split).prompt_builder()
    for seed in env.split_seeds(split, lakes):
        start, goal, holes = lake = _read_map(env.generate_instance(seed)["map"])
        for cell in sorted(cells_of(start, goal, holes)):
            yield (seed, cell, goal, holes, *_prompt_at(env, builder, seed, lake, cell, tokenizer))


def choice_states(config: GRPOConfig, split: str, lakes: int, tokenizer) -> list[ChoiceState]:
    """The choice states of the first `lakes` lakes of `split`, in the run's evaluation env."""
    states = []
    for seed, cell, goal, holes, turn, prompt in _walk_states(config, split, lakes, tokenizer, choice_cells):
        toward = toward_moves(cell, goal)
        hole = next(move for move, near in toward.items() if near in holes)
        ice = next(move for move in toward if move != hole)
        states.append(ChoiceState(seed, turn, prompt, hole, ice))
    return states


def tie_states(config: GRPOConfig, split: str, lakes: int, tokenizer) -> list[TieState]:
    """The tie states of the first `lakes` lakes of `split`, in the run's evaluation env."""
    states = []
    for seed, cell, goal, _, turn, prompt in _walk_states(config, split, lakes, tokenizer, tie_cells):
        sideways, vertical = toward(cell, goal, "sideways")
        states.append(TieState(seed, turn, prompt, sideways, vertical))
    return states


def reply_margins(model, adapter: str, questions: list[tuple[str, str, str]], batch: int = 8) -> list[float]:
    """log P(reply a) − log P(reply b) for each (prompt, move a, move b), under `adapter`."""
    load_latest(model, adapter)
    tokenizer = model.backend.tokenizer
    sequences, spans = [], []
    for prompt_text, *moves in questions:
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        for move in moves:
            answer = tokenizer.encode(reply(move), add_special_tokens=False)
            sequences.append(prompt + answer)
            spans.append((len(prompt) - 1, len(prompt) + len(answer) - 1))  # logprobs[t] scores token t + 1
    totals = []
    for first in range(0, len(sequences), batch):
        chunk = model.sequence_logprobs("policy", sequences[first:first + batch])
        totals += [sum(values[a:b]) for values, (a, b) in zip(chunk, spans[first:first + batch])]
    return [a - b for a, b in zip(totals[0::2], totals[1::2])]


def margins_of(model, adapter: str, states: list[ChoiceState], batch: int = 8) -> Margins:
    """log P(ice reply) − log P(hole reply) at every state under `adapter`, summarised by the hole's side."""
    margins = reply_margins(model, adapter, [(state.prompt, state.ice, state.hole) for state in states], batch)
    side = [m for m, state in zip(margins, states) if state.hole_sideways]
    vertical = [m for m, state in zip(margins, states) if not state.hole_sideways]
    m_side = sum(side) / len(side) if side else float("nan")
    m_vert = sum(vertical) / len(vertical) if vertical else float("nan")
    return Margins(adapter, len(margins), len(side), len(vertical), m_side, m_vert, (m_side + m_vert) / 2,
                   (m_vert - m_side) / 2, sum(m > 0 for m in margins) / len(margins))


def tie_lean_of(model, adapter: str, states: list[TieState], batch: int = 8) -> TieLean:
    """log P(sideways reply) − log P(vertical reply) at every tie state under `adapter`, averaged."""
    margins = reply_margins(model, adapter, [(state.prompt, state.sideways, state.vertical) for state in states], batch)
    return TieLean(adapter, len(margins), sum(margins) / len(margins), sum(m > 0 for m in margins) / len(margins))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a GRPO run on FrozenLake (its config gives model, prompt and lakes)")
    parser.add_argument("adapters", nargs="+", help="adapters to compare: adapter folders, runs or checkpoints")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--lakes", type=int, default=100, help="how many lakes of the split to take (default 100)")
    parser.add_argument("--states", default="choice", choices=("choice", "ties"),
                        help="choice (a hole and ice toward the goal; the default) or ties (two ice moves toward it)")
    parser.add_argument("--json", action="store_true", help="one JSON object per adapter")
    args = parser.parse_args()
    try:
        raw = RunDir(args.run).read_config()
        if raw.get("kind") != "grpo":
            raise ConfigError(f"{args.run} is a {raw.get('kind')!r} run; choice_margins reads GRPO runs")
        config = from_mapping(GRPOConfig, {k: v for k, v in raw.items() if k != "kind"})
        model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, False,
                               dtype=config.dtype)
        kind, read, measure = (("tie", tie_states, tie_lean_of) if args.states == "ties"
                               else ("choice", choice_states, margins_of))
        states = read(config, args.split, args.lakes, model.backend.tokenizer)
        if not states:
            raise ConfigError(f"no {kind} state on the first {args.lakes} {args.split} lakes")
        results = [measure(model, adapter, states) for adapter in args.adapters]
    except (ConfigError, EnvError, ModelError, OSError) as error:
        sys.exit(f"choice_margins: {error}")
    if args.json:
        for result in results:
            print(json.dumps(asdict(result)))
        return
    if kind == "tie":
        print(f"{results[0].states} tie states on the first {args.lakes} {args.split} lakes")
        print("| adapter | sideways lean, nats | sideways preferred |")
        print("|---|---|---|")
        for result in results:
            print(f"| {result.adapter} | {result.lean:+.2f} | {result.sideways_preferred:.2f} |")
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
