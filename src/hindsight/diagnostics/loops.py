"""Loop detection and the Loop Ratio (TIDE, section 3.2 and appendix C.3).

A trajectory is read as a walk over states: s_t is the state before action a_t. A
*cycle* is a stretch [i, j) that leaves a state and comes back to it (s_j = s_i) without
visiting any state twice on the way (no nested sub-cycle). A *loop* is a cycle the agent
immediately repeats. Loop steps are the actions of the repeated copy, and

    LR = (loop steps over all trajectories) / (steps over all trajectories)

pooled over steps; the per-trajectory mean of loop steps / length is reported beside it.

Two loop finders are provided. They agree on self-loops (an action that leaves the state
unchanged, repeated) and differ on longer cycles:

``official`` (default) — the finder of the official TIDE analysis code, which produced
the paper's tables. Walk i = 0, 1, ...: let j be the first later step with s_j = s_i. If
the states in [i, j) are all distinct, [i, j) is a cycle of length L = j - i, and when
the next block [j, j + L) repeats it exactly — the same states *and* the same actions —
those L steps are loop steps. Either way the walk continues at j, so a repeated block
serves as the prototype for the next repeat. Without such a cycle it moves to i + 1.

``paper`` — Algorithm 1 exactly as printed. Scan t = 0 .. T (including the final state
when the log has it); on a revisit of s_t last seen at i, [i, t) is a candidate; if it
has no nested sub-cycle it counts as a loop when it starts where the previous candidate
ended (i = t_end) and equals it, and in any case it becomes the new previous candidate
with t_end = t. Because every revisit of a state re-anchors t_end, only self-loops can
ever satisfy i = t_end; an alternating A B A B never counts.

Worked example — states A B A B, actions x y x y (four steps):

* official: at i = 0 the first return to A is j = 2, [0, 2) = (A x, B y) is a cycle,
  and [2, 4) = (A x, B y) repeats it, so steps 2 and 3 are loop steps: LR = 2/4.
* paper: at t = 2 the candidate [0, 2) is recorded (t_end = 2); at t = 3 the revisit of B
  gives the candidate [1, 3), which does not start at t_end and resets t_end = 3; at
  t = 4 (when the final state A is known) the candidate [2, 4) starts at 2 != 3. Nothing
  counts: LR = 0.

Both finders run in time linear in the trajectory length: the "first later equal state"
and "are the states in [i, j) distinct" questions are answered from arrays built in one
backward pass, and block comparisons never revisit a step twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

from hindsight.diagnostics.equality import ExactState, StateEquality
from hindsight.logs.importers import TrajectoryView

OFFICIAL = "official"
PAPER = "paper"
LOOP_VARIANTS = (OFFICIAL, PAPER)


def official_loop_mask(states: Sequence[Hashable], actions: Sequence[object]) -> list[bool]:
    """Loop steps under the official TIDE finder (see the module docstring).

    `states[k]` is the state before `actions[k]`; both have one entry per step.
    """
    n = len(states)
    if len(actions) != n:
        raise ValueError("official loop finder needs one state per action")
    # next_same[p]: the first q > p with states[q] == states[p], or n.
    # first_close[p] = min over q >= p of next_same[q]: a window starting at p stays free
    # of repeated states up to (not including) first_close[p]. One backward pass fills both.
    next_same = [n] * n
    first_close = [n] * (n + 1)
    seen: dict[Hashable, int] = {}
    close = n
    for p in range(n - 1, -1, -1):
        state = states[p]
        nxt = seen.get(state, n)
        seen[state] = p
        next_same[p] = nxt
        if nxt < close:
            close = nxt
        first_close[p] = close
    mask = [False] * n
    i = 0
    while i < n:
        j = next_same[i]
        if j < n and first_close[i + 1] >= j:
            length = j - i
            end = j + length
            if end <= n and states[i:j] == states[j:end] and actions[i:j] == actions[j:end]:
                mask[j:end] = [True] * length
            i = j
        else:
            i += 1
    return mask


def paper_loop_mask(states: Sequence[Hashable], actions: Sequence[object]) -> list[bool]:
    """Loop steps under Algorithm 1 of the TIDE paper as printed.

    `states` has one entry per action, optionally followed by the final state.
    """
    n_actions = len(actions)
    if len(states) not in (n_actions, n_actions + 1):
        raise ValueError("paper loop finder needs one state per action, plus optionally the final state")
    mask = [False] * n_actions
    last_visit: dict[Hashable, int] = {}
    # The largest p such that states[p] recurs at some q already scanned: a stretch
    # [i, t) holds a nested sub-cycle exactly when that p is >= i.
    latest_repeat_start = -1
    prev_start, prev_end = -1, -1
    for t, state in enumerate(states):
        i = last_visit.get(state)
        if i is not None:
            if latest_repeat_start < i:
                if i == prev_end and t - i == prev_end - prev_start:
                    if states[prev_start:prev_end] == states[i:t] and actions[prev_start:prev_end] == actions[i:t]:
                        mask[i:t] = [True] * (t - i)
                prev_start, prev_end = i, t
            if i > latest_repeat_start:
                latest_repeat_start = i
        last_visit[state] = t
    return mask


@dataclass(frozen=True)
class LoopSummary:
    """Loop steps pooled over trajectories.

    `ratio` = loop_steps / total_steps (the paper's LR); `per_trajectory_mean` is the
    mean of each non-empty trajectory's own ratio.
    """

    loop_steps: int
    total_steps: int
    per_trajectory_mean: float | None
    variant: str

    @property
    def ratio(self) -> float | None:
        return self.loop_steps / self.total_steps if self.total_steps else None


def loop_mask(view: TrajectoryView, variant: str = OFFICIAL, equality: StateEquality = ExactState()) -> list[bool]:
    """Which steps of a trajectory are loop steps, under a finder and a state equality."""
    if variant == OFFICIAL:
        return official_loop_mask(equality.tokens(view), view.actions)
    if variant == PAPER:
        return paper_loop_mask(equality.tokens(view, include_final=True), view.actions)
    raise ValueError(f"unknown loop variant {variant!r}; expected one of {LOOP_VARIANTS}")


def summarise_loops(masks: Iterable[Sequence[bool]], variant: str = OFFICIAL) -> LoopSummary:
    """Pool per-trajectory loop masks into the Loop Ratio."""
    loop_steps = total = 0
    ratios = []
    for mask in masks:
        k = sum(mask)
        loop_steps += k
        total += len(mask)
        if mask:
            ratios.append(k / len(mask))
    mean = sum(ratios) / len(ratios) if ratios else None
    return LoopSummary(loop_steps=loop_steps, total_steps=total, per_trajectory_mean=mean, variant=variant)
