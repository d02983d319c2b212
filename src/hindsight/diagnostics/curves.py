"""Success-over-turns curves and the Area Under Variation (TIDE, section 3.1).

For N trajectories with success turns s_i (the episode length when it succeeded, none
otherwise) and an evaluation horizon t_max:

    P_0 = 0
    P_t = #{i : s_i <= t} / N                        for t = 1 .. t_max
    AUV = (1 / t_max) * sum_{t=0}^{t_max - 1} (P_t + P_{t+1}) / 2
    SR  = #{i : s_i exists} / N                      (no horizon)

AUV is the trapezoid area under P_t over [0, t_max] divided by t_max, so it lies in
[0, 1): solving every task on the first turn gives 1 - 1/(2 t_max). A success after
t_max adds to SR but not to P_t or AUV. P_0 is 0 by definition: a task counts from the
turn it was solved on, and a success with no step at all is counted from turn 1.

For one trajectory solved on turn s <= t_max the same formula gives
AUV = (t_max - s + 0.5) / t_max, and 0 when it failed or was solved later; the mean of
these per-trajectory values equals the AUV of the set (the sum is linear in P_t).

Two variations on the same area:

* AUV of a subset (`subset_auv`), e.g. the trajectories that contain a loop and those
  that do not, each with its own N. The two subset curves average back to the whole
  curve, weighted by subset size.
* AUV over progress (`progress_curve`) for environments that grade partial progress:
  with g_{i,k} the score in [0, 1] after action k of trajectory i,

      R_0 = 0
      R_t = (1 / N) * sum_i max(0, max { g_{i,k} : k <= t, k <= T_i })   for t = 1 .. t_max

  i.e. the mean over trajectories of the best progress reached within the first t
  turns (a trajectory that has ended keeps its best). Its area is `auv(R)`. With binary
  scores (1 exactly on the turn a task is solved) R_t equals P_t, so progress AUV
  equals AUV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

#: Evaluation horizons the TIDE paper uses (appendix C.4), by environment id; the three
#: GUI benchmarks of its post-hoc study share one horizon of 50.
DEFAULT_T_MAX: dict[str, int] = {
    "blocksworld": 20,
    "frozenlake": 30,
    "sudoku": 20,
    "alfworld": 60,
    "webshop": 15,
    "osworld": 50,
    "androidworld": 50,
    "windowsagentarena": 50,
}

#: The GUI benchmarks whose trajectories TIDE analysed from other agents' logs.
GUI_ENVS = ("osworld", "androidworld", "windowsagentarena")


def success_curve(success_turns: Iterable[int | None], t_max: int) -> tuple[float, ...]:
    """P_0 .. P_{t_max} for the given success turns (None for a failed trajectory)."""
    if t_max < 1:
        raise ValueError("t_max must be >= 1")
    solved_at = [0] * (t_max + 1)
    n = 0
    for turn in success_turns:
        n += 1
        if turn is None:
            continue
        turn = max(int(turn), 1)
        if turn <= t_max:
            solved_at[turn] += 1
    if n == 0:
        raise ValueError("success_curve needs at least one trajectory")
    return _cumulative_mean(solved_at, n)


def _cumulative_mean(gains: Sequence[float], n: int) -> tuple[float, ...]:
    """(0, g_1 / n, (g_1 + g_2) / n, ...): a curve from what all trajectories gained per turn."""
    curve = [0.0]
    total = 0.0
    for t in range(1, len(gains)):
        total += gains[t]
        curve.append(total / n)
    return tuple(curve)


def auv(curve: Sequence[float]) -> float:
    """Area Under Variation of a curve P_0 .. P_{t_max} (the horizon is len(curve) - 1)."""
    t_max = len(curve) - 1
    if t_max < 1:
        raise ValueError("a curve needs P_0 and at least P_1")
    return math.fsum((curve[t] + curve[t + 1]) / 2 for t in range(t_max)) / t_max


def trajectory_auv(success_turn: int | None, t_max: int) -> float:
    """The AUV of a single trajectory: (t_max - s + 0.5) / t_max when solved on turn s <= t_max."""
    if success_turn is None:
        return 0.0
    turn = max(int(success_turn), 1)
    if turn > t_max:
        return 0.0
    return (t_max - turn + 0.5) / t_max


@dataclass(frozen=True)
class SubsetAUV:
    """SR, P_t and AUV of a subset of trajectories; the numbers are None when it is empty.

    `p_curve` holds P_0 .. P_{t_max} of the subset alone, or is empty.
    """

    n: int
    success_rate: float | None
    p_curve: tuple[float, ...]
    auv: float | None


def subset_auv(success_turns: Sequence[int | None], t_max: int) -> SubsetAUV:
    """`success_curve` and `auv` of one subset (success turn per trajectory, None = failed)."""
    if not success_turns:
        return SubsetAUV(0, None, (), None)
    curve = success_curve(success_turns, t_max)
    solved = sum(1 for turn in success_turns if turn is not None)
    return SubsetAUV(len(success_turns), solved / len(success_turns), curve, auv(curve))


def progress_milestones(progress: Sequence[float | None]) -> tuple[tuple[int, float], ...]:
    """The turns on which a trajectory's best progress so far rises, and the new best.

    `progress[k]` is the graded score after action k + 1 (turn k + 1), None where the log
    has none. Returns ((turn, best), ...) with turns 1-based and strictly increasing and
    bests strictly increasing and above 0: a compact form of the running maximum that
    `progress_curve` reads at any horizon.
    """
    milestones = []
    best = 0.0
    for k, value in enumerate(progress):
        if value is not None and value > best:
            best = float(value)
            milestones.append((k + 1, best))
    return tuple(milestones)


def progress_curve(milestones: Iterable[Sequence[tuple[int, float]]], t_max: int) -> tuple[float, ...]:
    """R_0 .. R_{t_max}: mean best progress reached within t turns (see the module docstring).

    Takes one `progress_milestones` result per trajectory; a trajectory with no
    milestone never made progress and counts as 0 throughout.
    """
    if t_max < 1:
        raise ValueError("t_max must be >= 1")
    # gain[t]: the sum over trajectories of how much their best rose on turn t.
    gain = [0.0] * (t_max + 1)
    n = 0
    for trajectory in milestones:
        n += 1
        previous = 0.0
        for turn, best in trajectory:
            if turn > t_max:
                break
            gain[max(int(turn), 1)] += best - previous
            previous = best
    if n == 0:
        raise ValueError("progress_curve needs at least one trajectory")
    return _cumulative_mean(gain, n)
