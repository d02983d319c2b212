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
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

#: Evaluation horizons the TIDE paper uses (appendix C.4), by environment id.
DEFAULT_T_MAX: dict[str, int] = {
    "blocksworld": 20,
    "frozenlake": 30,
    "sudoku": 20,
    "alfworld": 60,
    "webshop": 15,
}


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
    curve = [0.0]
    solved = 0
    for t in range(1, t_max + 1):
        solved += solved_at[t]
        curve.append(solved / n)
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
