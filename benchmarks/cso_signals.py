"""What the CSO comparison's per-step signals say about why an arm moved the start or did not.

    python benchmarks/cso_signals.py runs/cso

It reads per-turn signals (each move's log-probabilities, each round's logs), which only a live
driver folder has, outside the repository: results/cso keeps outcome tables, not trajectories.

cso_table.py counts test successes; this reads the turns behind them (the environments'
planner judges every move, so it needs environments with a planner: the built-in ones):

1. **Where each run leaves the start.** Every arm is evaluated greedily on the start's test
   tasks, so a task's action sequence is the start's until the first turn where the trained
   policy's top move changed. Per run: how many tasks changed, the planner's verdict on the
   start's and the run's move at that first changed turn (better or worse: `MOVE_RANK`), the
   start's probability of its own move there, and the run's median probability of its own
   moves over all its test turns (how sharp the trained policy is; the start's is in the header).
2. **The start's falls.** The start's probability of the move that ended each failed episode
   unsolved, and how many of the confident (> 0.8) and the unsure falls each run solves.
3. **What the pairs teach** (runs whose `round-N/pairs.jsonl` were kept): the planner's verdict
   on the rejected and the chosen move of every pair.
4. **The PRM against the planner** (runs with `round-N/scored.jsonl`): the PRM's mean score for
   each planner verdict of the moves it rated, the policy's and the alternatives (the oracle
   PRM's rows check that it is exact; an LLM judge's show whether it can tell a fatal move from
   a good one), and how many of its answers were unreadable.
5. **What verification saw** (runs with `round-N/branches.jsonl`): how the policy's
   continuations after each alternative move ended (CSO's verification; IPR's Monte-Carlo
   rollouts from an alternative, not those from the policy's own move), and how many could not
   succeed from the start (the planner's distance after the alternative exceeded the turns left).

A move's probability is the product of its response tokens' probabilities as the log recorded
them (the format tokens around the move are near 1).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from hindsight.agent.replay import PLAN_LIMIT, planner_distance, replay_to
from hindsight.envs import make
from hindsight.logs import read_trajectories
from hindsight.logs.schema import trajectory_from_record
from hindsight.types import Step, Trajectory

#: The planner's verdicts on one move, best first: it shortens the plan to success, leaves it as
#: long, lengthens it, changes nothing (an edge, a refused action), or ends the episode unsolved.
MOVE_RANK = ("toward", "level", "away", "stay", "fatal")
CONFIDENT = 0.8


def move_kind(env: Any, action: str) -> str:
    """The planner's verdict on taking `action` in `env`'s state (`env` is left as it was)."""
    probe = copy.deepcopy(env)
    before, state = planner_distance(probe), probe.state_key()
    probe.step(action)
    if probe.done and not probe.is_success():
        return "fatal"
    if probe.state_key() == state:
        return "stay"
    after = planner_distance(probe)
    return "toward" if after < before else "level" if after == before else "away"


def state_after(env_id: str, env_kwargs: dict, seed: int, actions: Sequence[str]) -> Any:
    """The task's environment (no step budget, as the planner needs) after `actions`."""
    env = make(env_id, **{**env_kwargs, "max_steps": PLAN_LIMIT})
    env.reset(seed)
    for action in actions:
        env.step(action)
    return env


def move_probability(step: Step) -> float | None:
    return math.exp(sum(step.logprobs)) if step.logprobs else None


def first_change(start: Trajectory, run: Trajectory) -> int | None:
    """The first turn where the two greedy episodes of one task took different actions."""
    for at, (a, b) in enumerate(zip(start.steps, run.steps)):
        if a.action != b.action:
            return at
    return None


def median(values: Iterable[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.2f}" if known else "–"


def ending(trajectory: Trajectory) -> str:
    return "solved" if trajectory.success else "ended unsolved" if trajectory.terminated else "out of moves"


def finished_runs(out: Path) -> list[Path]:
    """Every finished training run of the comparison (`ARM-sSEED`), by name."""
    return sorted(run for run in out.iterdir() if run.is_dir() and (run / "summary.json").exists()
                  and (run / "trajectories" / "eval-test-final.jsonl").exists() and re.search(r"-s\d+", run.name))


def by_task(trajectories: Iterable[Trajectory]) -> dict[int, Trajectory]:
    return {t.seed: t for t in trajectories}


#: Each finished run's final test episodes by task, read once for the tables that need them.
RunEpisodes = dict[Path, dict[int, Trajectory]]


def final_episodes(runs: Sequence[Path]) -> RunEpisodes:
    return {run: by_task(read_trajectories(run / "trajectories" / "eval-test-final.jsonl")) for run in runs}


def changes_table(start: dict[int, Trajectory], runs: RunEpisodes) -> list[str]:
    sharpness = median(move_probability(s) for t in start.values() for s in t.steps)
    lines = [f"Where each run's greedy test episodes leave the start's ({len(start)} tasks; the start's median "
             f"probability of its own move over all its turns: {sharpness}).", "",
             "| run | tasks changed | first changed move better / worse / as good | the start's p(its move) "
             "there, median | the run's p(its move), all turns, median | verdicts (start → run), commonest |",
             "|---|---|---|---|---|---|"]
    for run, episodes in runs.items():
        verdicts: Counter = Counter()
        start_p = []
        for task, episode in episodes.items():
            if task not in start or (at := first_change(start[task], episode)) is None:
                continue
            env = replay_to(episode, at)
            verdicts[(move_kind(env, start[task].steps[at].action or ""),
                      move_kind(env, episode.steps[at].action or ""))] += 1
            start_p.append(move_probability(start[task].steps[at]))
        rank = MOVE_RANK.index
        better = sum(n for (a, b), n in verdicts.items() if rank(b) < rank(a))
        worse = sum(n for (a, b), n in verdicts.items() if rank(b) > rank(a))
        common = ", ".join(f"{a} → {b} {n}" for (a, b), n in verdicts.most_common(4))
        sharp = median(move_probability(s) for t in episodes.values() for s in t.steps)
        lines.append(f"| {run.name} | {sum(verdicts.values())} | {better} / {worse} / "
                     f"{sum(verdicts.values()) - better - worse} | {median(start_p)} | {sharp} | {common} |")
    return lines


def falls_table(start: dict[int, Trajectory], runs: RunEpisodes) -> list[str]:
    falls = {task: move_probability(t.steps[-1]) for task, t in start.items()
             if not t.success and t.terminated and t.steps}
    confident = {task for task, p in falls.items() if p is not None and p > CONFIDENT}
    lines = [f"The start's {len(falls)} episodes that a move ended unsolved: the start's probability of that move, "
             f"median {median(falls.values())}; {len(confident)} above {CONFIDENT}.", "",
             f"| run | solved of the {len(confident)} confident falls | solved of the {len(falls) - len(confident)} "
             "unsure falls |", "|---|---|---|"]
    for run, episodes in runs.items():
        solved = {task for task in falls if task in episodes and episodes[task].success}
        lines.append(f"| {run.name} | {len(solved & confident)} | {len(solved - confident)} |")
    return lines


def round_records(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for path in sorted(run.glob(f"round-*/{name}")) for line in path.open() if line.strip()]


def pairs_table(runs: Sequence[Path]) -> list[str]:
    lines = ["What the pairs teach: the planner's verdict on each pair's rejected and chosen move.", "",
             "| run | pairs | rejected: " + " / ".join(MOVE_RANK) + " | chosen: " + " / ".join(MOVE_RANK) + " |",
             "|---|---|---|---|"]
    for run in runs:
        pairs = round_records(run, "pairs.jsonl")
        # ETO's pairs are whole trajectories, with no state to judge a single move at.
        pairs = [p for p in pairs if "prefix_actions" in p]
        if not pairs:
            continue
        rejected: Counter = Counter()
        chosen: Counter = Counter()
        for pair in pairs:
            env = state_after(pair["env"], pair["env_kwargs"], pair["seed"], pair["prefix_actions"])
            rejected[move_kind(env, pair["rejected_action"])] += 1
            chosen[move_kind(env, pair["chosen_action"])] += 1
        lines.append(f"| {run.name} | {len(pairs)} | " + " / ".join(str(rejected[k]) for k in MOVE_RANK) + " | "
                     + " / ".join(str(chosen[k]) for k in MOVE_RANK) + " |")
    return lines


def prm_table(runs: Sequence[Path]) -> list[str]:
    lines = ["The PRM against the planner: its mean score (and the number of moves) for each verdict of the moves "
             "it rated, the policy's and the alternatives.", "",
             "| run | PRM | " + " | ".join(MOVE_RANK) + " | unreadable answers |",
             "|---|---|" + "---|" * len(MOVE_RANK) + "---|"]
    for run in runs:
        scores: dict[str, list[float]] = {kind: [] for kind in MOVE_RANK}
        unreadable = 0
        for folder in sorted(run.glob("round-*")):
            if not (folder / "scored.jsonl").exists():
                continue
            rollouts = [trajectory_from_record(json.loads(line)) for line in (folder / "rollouts.jsonl").open()
                        if line.strip()]
            failures = [t for t in rollouts if not t.success]
            for record in map(json.loads, (folder / "scored.jsonl").open()):
                alternatives = record["alternatives"]
                env = replay_to(failures[alternatives["trajectory"]], alternatives["at"])
                rated = [(alternatives["policy_action"], record["policy_score"]),
                         *zip(alternatives["actions"], record["scores"])]
                for action, score in rated:
                    scores[move_kind(env, action)].append(score)
                unreadable += record.get("prm_failures", 0)
        if not any(scores.values()):
            continue
        cells = [f"{sum(v) / len(v):.2f} ({len(v)})" if v else "–" for v in (scores[k] for k in MOVE_RANK)]
        lines.append(f"| {run.name} | {prm_name(run)} | " + " | ".join(cells) + f" | {unreadable} |")
    return lines


def prm_name(run: Path) -> str:
    try:
        return str(yaml.safe_load((run / "config.yaml").read_text()).get("prm", "–"))
    except (OSError, yaml.YAMLError, AttributeError):
        return "–"


def verification_table(runs: Sequence[Path]) -> list[str]:
    lines = ["What verification saw: the policy's continuations after each alternative move (IPR's rollouts after "
             "the policy's own move left out).", "",
             "| run | continuations | solved | ended unsolved | out of moves | could not succeed (plan longer than "
             "the turns left) |", "|---|---|---|---|---|---|"]
    for run in runs:
        branches = round_records(run, "branches.jsonl")
        if not branches:
            continue
        endings: Counter = Counter()
        hopeless = 0
        for branch in branches:
            if branch["pick"]["alternative"] < 0:  # IPR's rollouts of the policy's own move
                continue
            at = branch["pick"]["at"]
            for record in branch["continuations"]:
                continuation = trajectory_from_record(record)
                endings[ending(continuation)] += 1
                env = replay_to(continuation, at + 1)  # after the alternative
                turns_left = continuation.env_kwargs.get("max_steps", PLAN_LIMIT) - (at + 1)
                hopeless += planner_distance(env) > turns_left
        total = sum(endings.values())
        lines.append(f"| {run.name} | {total} | {endings['solved']} | {endings['ended unsolved']} | "
                     f"{endings['out of moves']} | {hopeless} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the comparison's folder (benchmarks/cso_comparison.sh's OUT_DIR)")
    args = parser.parse_args(argv)
    start_log = args.out / "start" / "trajectories" / "eval.jsonl"
    if not start_log.exists():
        print(f"error: no evaluation of the start at {start_log}; run the comparison's `start` stage first",
              file=sys.stderr)
        return 2
    start = by_task(read_trajectories(start_log))
    runs = finished_runs(args.out)
    episodes = final_episodes(runs)
    sections = [changes_table(start, episodes), falls_table(start, episodes), pairs_table(runs), prm_table(runs),
                verification_table(runs)]
    print("\n\n".join("\n".join(section) for section in sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
