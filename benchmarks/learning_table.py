"""The tables of the learning benchmark (benchmarks/learning.sh), as Markdown.

    python benchmarks/learning_table.py results/learning

Reads the start's greedy test evaluation (`start`) and the trained arms' final test
evaluations (`grpo-s{seed}`, `gigpo-s{seed}`), from their kept outcome tables
(results/learning) or a driver's live folder (`tables.py`), and their metrics. Each arm is
compared with the start on the same (seed, test task) pairs, pooled and run by run: the
issue's bar is a pooled lift of at least +0.15 with every run's own 95% interval above 0.
The per-arm columns say whether the policy's moves follow the state (oracle agreement on the
test tasks), what training cost in environment steps, the training success of the first and
last updates, the loop ratio of the last update's rollouts and whether the collapse alarm fired.
Two more columns read the greedy test moves themselves, replayed on their maps from the kept
actions: the share of moves that the hole-blind rule ("toward the goal, sideways first")
predicts, the share of moves made beside a hole that stepped into it, and, where one move
toward the goal is a hole and another is not, the share that took the hole. Unfinished runs are
left out, so the script can run at any point.

`--measure score` reads a graded benchmark (BlocksWorld, `VARIANT=graded benchmarks/learning.sh`):
every rate and paired difference is of the final score (the share of goal relations held), and
the paired differences of success follow. The FrozenLake replay columns are left out when the
start was tested on another environment.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from hindsight.diagnostics.health import HealthConfig, first_alarm
from hindsight.diagnostics.runs import read_run_config
from hindsight.envs.frozenlake import MOVES, FrozenLake, _read_map, is_choice, parse_move, toward_moves
from hindsight.logs.outcomes import Outcome
from tables import (EVAL_LOG, FINAL_LOG, MEASURES, Outcomes, arm_outcomes, arm_table, difference_header,
                    difference_line, env_steps, evaluation_outcomes, evaluation_rate, metric, metric_rows,
                    quiet_closed_pipe, run_outcomes)

ARMS = (("grpo", "GRPO"), ("gigpo", "GiGPO"))
ABLATIONS = (("abl-trajectory-mean", "trajectory-mean aggregation"), ("abl-g4", "G = 4, 16 tasks"),
             ("abl-g16", "G = 16, 4 tasks"), ("abl-tasks4", "4 tasks an update"), ("abl-tasks16", "16 tasks an update"),
             ("abl-lr5e-5", "lr 5e-5"), ("abl-lr2e-4", "lr 2e-4"), ("abl-lr5e-4", "lr 5e-4"), ("abl-lr1e-3", "lr 1e-3"),
             ("abl-kl", "KL 0.05 to the start"), ("abl-clip-higher", "clip-higher, 2 steps a batch"),
             ("abl-ragen", "RAGEN's filter, top 25%"), ("abl-gigpo-lr5e-4", "GiGPO, lr 5e-4"),
             ("abl-kl-lr5e-4", "KL 0.05 to the start, lr 5e-4"), ("abl-holes0.35", "trained on maps with p_hole 0.35"),
             ("abl-gigpo-holes0.35", "GiGPO, p_hole 0.35"), ("abl-gigpo-holes0.5", "GiGPO, p_hole 0.5"),
             ("abl-gigpo-holes0.5-lr5e-4", "GiGPO, p_hole 0.5, lr 5e-4"),
             ("abl-gigpo-holes0.5-lr2e-4", "GiGPO, p_hole 0.5, lr 2e-4"),
             ("abl-trajmean-lr5e-4", "trajectory-mean, lr 5e-4"), ("abl-trajmean-lr2e-4", "trajectory-mean, lr 2e-4"),
             ("abl-trajmean-dyn-lr5e-4", "trajectory-mean, lr 5e-4, dynamic sampling"),
             ("abl-ent0.05-lr5e-4", "entropy bonus 0.05, lr 5e-4"), ("abl-ent0.2-lr5e-4", "entropy bonus 0.2, lr 5e-4"),
             ("abl-ent0.5-lr5e-4", "entropy bonus 0.5, lr 5e-4"), ("abl-kl0.01", "KL 0.01 to the start"),
             ("abl-choice", "trained on choice lakes only"), ("abl-twins", "trained on twin lakes"))
#: Ablations that also pair with another ablation: the one they change one thing of.
ABLATION_BASES = {"abl-gigpo-lr5e-4": "abl-lr5e-4", "abl-kl-lr5e-4": "abl-lr5e-4",
                  "abl-gigpo-holes0.35": "abl-holes0.35", "abl-gigpo-holes0.5": "abl-gigpo-holes0.35",
                  "abl-gigpo-holes0.5-lr5e-4": "abl-gigpo-holes0.5", "abl-gigpo-holes0.5-lr2e-4": "abl-gigpo-holes0.5",
                  "abl-trajmean-lr5e-4": "abl-lr5e-4", "abl-trajmean-dyn-lr5e-4": "abl-trajmean-lr5e-4",
                  "abl-ent0.05-lr5e-4": "abl-lr5e-4", "abl-ent0.2-lr5e-4": "abl-lr5e-4",
                  "abl-ent0.5-lr5e-4": "abl-lr5e-4"}
COMPARISONS = (("grpo", "start"), ("gigpo", "start"), ("gigpo", "grpo"))
TITLES = {"start": "start (SFT)", **dict(ARMS), **dict(ABLATIONS)}


def first_and_last(name: str):
    """A column with a metric's first and last logged values, "first → last"."""
    def read(run: Path) -> str:
        values = [float(row[name]) for row in metric_rows(run) if name in row]
        return f"{values[0]:.2f} → {values[-1]:.2f}" if values else "–"
    return read


def alarm(run: Path) -> str:
    """Whether the collapse alarm, as the toolkit has it now, fires at some update of the run's
    metrics, and at which (a run's logged `health/…` flags are those of the alarm it ran with)."""
    rows = metric_rows(run)
    updates = max((int(row["step"]) for row in rows if "rollout/success_rate" in row), default=0)
    fired = first_alarm(rows, HealthConfig().for_updates(updates)) if updates else None
    return f"fired at update {fired.update}" if fired else "silent"


#: The learning benchmarks' test lake at p_hole 0.2, where a run does not say otherwise.
TEST_LAKE = FrozenLake(size=4, max_steps=8, view="local")


def lake_tested_on(run: Path) -> FrozenLake | None:
    """The lake a run was tested on, from its config.yaml: a training run's `env_kwargs` with its
    `eval_env_kwargs` over them, an evaluation's `env_kwargs` (the dense benchmark tests at p_hole
    0.5); TEST_LAKE where the run keeps no config, None where it names another env."""
    config = read_run_config(run)
    if "env" not in config:
        return TEST_LAKE
    if config["env"] != "frozenlake":
        return None
    knobs = {**(config.get("env_kwargs") or {}), **(config.get("eval_env_kwargs") or {})}
    # Only the knobs that shape a map matter to a replay; the view and the prompt do not.
    return FrozenLake(**{key: knobs[key] for key in ("size", "max_steps", "p_hole", "holes", "lakes", "twins")
                         if key in knobs})


def toward(position: tuple[int, int], goal: tuple[int, int], first: str = "sideways") -> list[str]:
    """The moves toward the goal (`frozenlake.toward_moves`), those of kind `first` ("sideways",
    left or right, or "vertical") first."""
    moves = list(toward_moves(position, goal))
    sideways = [move for move in moves if move in ("left", "right")]
    vertical = [move for move in moves if move in ("up", "down")]
    return sideways + vertical if first == "sideways" else vertical + sideways


def rule_move(position: tuple[int, int], goal: tuple[int, int]) -> str | None:
    """The hole-blind rule: toward the goal, sideways while the goal is in another column (None on
    the goal)."""
    return next(iter(toward(position, goal)), None)


#: The rules `rule_solves` plays: which kind of move toward the goal comes first, and whether the
#: rule ever steps into a hole beside it.
RULES = {"sideways first": ("sideways", False), "vertical first": ("vertical", False),
         "sideways first, safe": ("sideways", True)}


def rule_solves(lake: list[str], first: str, safe: bool, max_steps: int = 8) -> bool:
    """Whether a rule that knows the direction solves the map: it steps toward the goal, `first`
    ("sideways" or "vertical") while both kinds of move lead there; `safe` also skips a move into a
    hole for the next in its order (the other move toward the goal, then up, down, left, right)."""
    start, goal, holes = _read_map(lake)
    size, position = len(lake), start
    for _ in range(max_steps):
        order = toward(position, goal, first)
        if safe:
            fallback = order + [move for move in MOVES if move not in order]
            order = [move for move in fallback if (near := _after(position, move)) not in holes
                     and 0 <= near[0] < size and 0 <= near[1] < size] or order
        position = _after(position, order[0])
        if position in holes:
            return False
        if position == goal:
            return True
    return False


def _after(position: tuple[int, int], move: str) -> tuple[int, int]:
    return position[0] + MOVES[move][0], position[1] + MOVES[move][1]


@dataclass(frozen=True)
class MoveShares:
    moves: int = 0
    rule: int = 0  # moves the hole-blind rule predicts
    beside_hole: int = 0  # moves made where a neighbouring cell is a hole
    into_hole: int = 0  # of those, moves into a hole
    choices: int = 0  # moves made where one move toward the goal is a hole and another is not
    chose_hole: int = 0  # of those, moves into the hole

    def __add__(self, other: MoveShares) -> MoveShares:
        return MoveShares(*(a + b for a, b in zip(astuple(self), astuple(other))))


def episode_shares(lake: list[str], actions: Sequence[str | None]) -> tuple[MoveShares, bool]:
    """Replay one episode's moves on its map (FrozenLake rows): their counts, and whether the
    replay ends on the goal. Moves are read as the env reads them (`parse_move`: "Up", "north"), and
    one it cannot read (or None, no action) stays put, as in the env."""
    start, goal, holes = _read_map(lake)
    size = len(lake)
    moves = rule = beside = into = choices = chose = 0
    position, reached = start, False
    for action in actions:
        move = parse_move(action) if action else None
        d_row, d_col = MOVES[move] if move else (0, 0)
        target = (position[0] + d_row, position[1] + d_col)
        neighbours = {(position[0] + r, position[1] + c) for r, c in MOVES.values()}
        moves += 1
        rule += move == rule_move(position, goal)
        if neighbours & holes:
            beside += 1
            into += target in holes
        if is_choice(position, goal, holes):
            choices += 1
            chose += target in holes
        if target in holes:
            break
        if 0 <= target[0] < size and 0 <= target[1] < size:
            position = target
        reached = position == goal
    return MoveShares(moves, rule, beside, into, choices, chose), reached


def move_shares(outcomes: list[Outcome], lake: FrozenLake = TEST_LAKE) -> MoveShares | None:
    """Replay every test episode's moves on its map (the outcome's task seed on `lake`) and count
    them; None where an episode's replay does not end as its outcome says (not that lake)."""
    total = MoveShares()
    for outcome in outcomes:
        shares, reached = episode_shares(lake.generate_instance(outcome.task_seed)["map"], outcome.actions)
        if reached != outcome.success:
            return None
        total += shares
    return total


@functools.cache
def run_shares(run: Path, log: str = FINAL_LOG) -> MoveShares | None:
    outcomes, lake = run_outcomes(run, log), lake_tested_on(run)
    return None if outcomes is None or lake is None else move_shares(outcomes, lake)


def rule_cell(run: Path, log: str = FINAL_LOG) -> str:
    shares = run_shares(run, log)
    return "–" if shares is None else f"{shares.rule / max(1, shares.moves):.2f}"


def hole_cell(run: Path, log: str = FINAL_LOG) -> str:
    shares = run_shares(run, log)
    if shares is None or not shares.beside_hole:
        return "–"
    return f"{shares.into_hole / shares.beside_hole:.3f} (of {shares.beside_hole})"


def choice_cell(run: Path, log: str = FINAL_LOG) -> str:
    shares = run_shares(run, log)
    if shares is None or not shares.choices:
        return "–"
    return f"{shares.chose_hole / shares.choices:.3f} (of {shares.choices})"


AGREEMENT = "test oracle agreement"
COLUMNS = (("env steps (train)", env_steps),
           ("train success, first → last update", first_and_last("rollout/success_rate")),
           (AGREEMENT, metric("final_test/oracle_agreement", spec=".3f")),
           ("loop ratio, last update", metric("tide/loop_ratio", spec=".3f")),
           ("collapse alarm", alarm))
#: The columns that replay test moves on their FrozenLake maps.
REPLAY_COLUMNS = (("hole-blind rule share", rule_cell), ("moves beside a hole that step in", hole_cell),
                  ("hole taken where another move toward the goal is safe", choice_cell))


def per_run_lines(title: str, better: Outcomes, base: Outcomes) -> list[str]:
    """One row per run of `better`: that run alone against `base`, with its own interval."""
    labels = sorted({label for label, _ in better})
    return [difference_line(f"{title}, {label}", {k: v for k, v in better.items() if k[0] == label}, base)
            for label in labels]


def comparison_lines(outcomes: dict[str, Outcomes]) -> list[str]:
    """The paired rows of COMPARISONS, pooled then run by run."""
    lines = []
    for better, base in COMPARISONS:
        # difference_line pairs only the (run, task) keys both arms have.
        title = f"{TITLES[better]} − {TITLES[base]}"
        lines.append(difference_line(title, outcomes[better], outcomes[base]))
        lines += per_run_lines(title, outcomes[better], outcomes[base])
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--measure", choices=MEASURES, default="success",
                        help="what the rates and differences count (score: a graded env's partial credit)")
    args = parser.parse_args()
    out, measure = args.out, args.measure
    replays = lake_tested_on(out / "start") is not None
    columns = COLUMNS + REPLAY_COLUMNS if replays else COLUMNS
    lines, outcomes = arm_table(out, ARMS, columns, measure=measure)
    start = evaluation_outcomes(out / "start", measure=measure)
    if start is None:
        lines.insert(2, "| start (SFT) | not yet evaluated | | | " + " | " * len(columns))
    else:
        rate = evaluation_rate(start)  # one policy: its outcomes stand for every run label
        moves = [read(out / "start", EVAL_LOG) for _, read in REPLAY_COLUMNS] if replays else []
        agreement = json.loads((out / "start" / "summary.json").read_text()).get("oracle_agreement")
        # Of the training columns only the test oracle agreement applies to an evaluation.
        cells = [f"{agreement:.3f}" if title == AGREEMENT and agreement is not None else "–" for title, _ in COLUMNS]
        lines.insert(2, f"| start (SFT) | 1 | {rate:.3f} | {rate:.3f} | " + " | ".join(cells + moves) + " |")
    outcomes["start"] = start or {}
    lines += [""] + difference_header(measure) + comparison_lines(outcomes)
    if measure != "success":
        # A graded benchmark's claim is on the score; success is reported beside it.
        successes = {arm: arm_outcomes(out, arm)[0] for arm, _ in ARMS}
        successes["start"] = evaluation_outcomes(out / "start") or {}
        lines += [""] + difference_header() + comparison_lines(successes)
    ablations, ablated = arm_table(out, ABLATIONS, columns, measure=measure)
    if any(ablated.values()):
        # Each ablation is one run at seed 0: it pairs with the recipe's seed-0 run on the same tasks.
        lines += ["", "Ablations (seed 0), each against the recipe's seed-0 run:", ""] + ablations
        lines += [""] + difference_header(measure)
        titles = dict(ABLATIONS)
        for name, title in ABLATIONS:
            if ablated[name]:
                lines.append(difference_line(f"{title} − start (SFT)", ablated[name], outcomes["start"]))
                lines.append(difference_line(f"{title} − GRPO", ablated[name], outcomes["grpo"]))
                base = ABLATION_BASES.get(name)
                if base and ablated[base]:
                    lines.append(difference_line(f"{title} − {titles[base]}", ablated[name], ablated[base]))
    print("\n".join(lines))


if __name__ == "__main__":
    quiet_closed_pipe()
    main()
