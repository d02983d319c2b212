"""FrozenLake: walk across an n×n frozen lake to the goal without falling into a hole.

Rows and columns are numbered from 1, row 1 at the top and column 1 at the left, in the
observation, the feedback and the state key alike. Walking into the edge of the lake is
a legal move that changes nothing ("you bump into the edge"): the action is well formed
and the rules allow it, it just has no effect, as in Gymnasium's FrozenLake.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from hindsight.envs.base import TextEnv, choice_knob, echo, float_knob, int_knob
from hindsight.envs.contract import EnvError

Cell = tuple[int, int]

MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_SYNONYMS = {
    "up": "up", "u": "up", "north": "up", "upward": "up", "upwards": "up",
    "down": "down", "d": "down", "south": "down", "downward": "down", "downwards": "down",
    "left": "left", "l": "left", "west": "left",
    "right": "right", "r": "right", "east": "right",
}  # fmt: skip
_FILLER = {"move", "go", "step", "walk", "head", "turn", "to", "the", "one", "once", "a"}
HOLE_MODES = ("fatal", "blocking")
SCORE_MODES = ("goal", "progress", "partial")
#: What the observation shows: the whole lake as a grid with coordinates; the player's
#: surroundings in words (where the goal lies from here, and what each move steps onto); or
#: those words with each move marked as bringing the goal closer or taking it farther away.
VIEWS = ("grid", "local", "compass")
#: Which generated maps are kept: every solvable one, or only those with a choice on the way
#: (see `choice_cells`), where a walk that ignores the holes can fall.
LAKES = ("any", "choice")
MIN_SIZE, MAX_SIZE = 3, 12


def manhattan(a: Cell, b: Cell) -> int:
    """Moves between two cells on a lake without holes."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def toward_moves(cell: Cell, goal: Cell) -> dict[str, Cell]:
    """The moves from `cell` that bring the goal one step closer, each with the cell it reaches, in
    `MOVES` order. They never leave the lake: they stay inside the box spanned by the cell and
    the goal, so no size is needed."""
    here = manhattan(cell, goal)
    return {move: near for move, (d_row, d_col) in MOVES.items()
            if manhattan(near := (cell[0] + d_row, cell[1] + d_col), goal) < here}


def is_choice(cell: Cell, goal: Cell, holes: set[Cell]) -> bool:
    """Whether, at `cell`, one move toward the goal steps into a hole and another onto ice."""
    closer = set(toward_moves(cell, goal).values())
    return bool(closer & holes and closer - holes)


def toward_walk_cells(start: Cell, goal: Cell, holes: set[Cell]) -> set[Cell]:
    """The cells, goal excluded, that a walk from `start` reaches when it only ever moves toward
    the goal and has not fallen: what a policy that already knows the direction can meet."""
    seen: set[Cell] = set()
    todo = [start]
    while todo:
        cell = todo.pop()
        if cell in seen or cell == goal:
            continue
        seen.add(cell)
        todo += [near for near in toward_moves(cell, goal).values() if near not in holes]
    return seen


def choice_cells(start: Cell, goal: Cell, holes: set[Cell]) -> set[Cell]:
    """The choice cells (`is_choice`) of a walk toward the goal (`toward_walk_cells`): the places
    where reading the holes decides the episode for a policy that already knows the direction."""
    return {cell for cell in toward_walk_cells(start, goal, holes) if is_choice(cell, goal, holes)}


def tie_cells(start: Cell, goal: Cell, holes: set[Cell]) -> set[Cell]:
    """The cells of a walk toward the goal (`toward_walk_cells`) where two moves bring the goal
    closer and neither is a hole: where only a preference, not the lake, picks the move."""
    return {cell for cell in toward_walk_cells(start, goal, holes)
            if len(moves := toward_moves(cell, goal)) == 2 and not set(moves.values()) & holes}


def parse_move(action: str) -> str | None:
    """The direction an action names, or None. Tolerates case, punctuation and "move up"."""
    words = [w for w in re.sub(r"[^a-z]+", " ", action.lower()).split() if w not in _FILLER]
    if len(words) != 1:
        return None
    return _SYNONYMS.get(words[0])


def shortest_distances(size: int, holes: set[Cell], target: Cell) -> dict[Cell, int]:
    """Moves needed from every safe cell to `target`, by breadth-first search."""
    distances = {target: 0}
    queue = deque([target])
    while queue:
        row, col = queue.popleft()
        for d_row, d_col in MOVES.values():
            cell = (row + d_row, col + d_col)
            if 0 <= cell[0] < size and 0 <= cell[1] < size and cell not in holes and cell not in distances:
                distances[cell] = distances[(row, col)] + 1
                queue.append(cell)
    return distances


class FrozenLake(TextEnv):
    """Reach the goal on a frozen lake; holes either end the episode or block the way."""

    id = "frozenlake"
    default_max_steps = 30
    description = "Walk across an n×n frozen lake to the goal without stepping into a hole."
    _CRITERIA = {
        "goal": (
            "The score is 1 when the player stands on the goal and 0 otherwise. "
            "There is no partial credit for getting closer; stepping into a hole ends the episode with 0."
        ),
        "progress": (
            "The score is the share of the shortest safe path to the goal that the player has covered: "
            "1 on the goal, 0 where the player started or anywhere at least as far from the goal. "
            "Stepping into a hole ends the episode with 0. Success means standing on the goal."
        ),
        "partial": (
            "The score is the share of the shortest safe path to the goal that the player covered before the "
            "episode ended: 1 on the goal, 0 where the player started or anywhere at least as far from the goal. "
            "Stepping into a hole ends the episode, and the score is counted from the cell the player fell from. "
            "Success means standing on the goal."
        ),
    }

    def __init__(
        self,
        *,
        size: int = 4,
        p_hole: float = 0.2,
        holes: str = "fatal",
        score: str = "goal",
        max_steps: int | None = None,
        view: str = "grid",
        lakes: str = "any",
        twins: bool = False,
        instances: Any = None,
    ):
        self.size = int_knob("size", size, MIN_SIZE, MAX_SIZE)
        self.p_hole = float_knob("p_hole", p_hole, 0.0, 0.5)
        self.hole_mode = choice_knob("holes", holes, HOLE_MODES)
        # Only the score changes with `score`: tasks, observations and success stay the
        # same, so a policy trained under one mode starts the other on equal terms.
        self.score_mode = choice_knob("score", score, SCORE_MODES)
        # The view changes the observation only: the same seeds give the same tasks.
        self.view = choice_knob("view", view, VIEWS)
        # `view` joins the env's options only when it is not the default, so logs written
        # before it existed still compare equal to a default env (advice_demos matches on them).
        # `lakes` only filters which maps are generated. A kept map's split is the one it has
        # among all maps (a hash of its content), so `lakes: choice` never draws a test map
        # into training.
        self.lakes = choice_knob("lakes", lakes, LAKES)
        if self.lakes == "choice" and self.p_hole == 0:
            raise EnvError("lakes=choice keeps maps with holes on the way, so it needs p_hole above 0")
        extra: dict[str, str] = {} if self.view == "grid" else {"view": self.view}
        if self.lakes != "any":
            extra["lakes"] = self.lakes
        if not isinstance(twins, bool):
            raise EnvError(f"twins must be true or false, got {twins!r}")
        # Twins cancel what a batch of lakes happens to reward about the tie-break (sideways or
        # vertical first), which is otherwise the largest thing a small batch teaches.
        self.twins = twins
        if twins:
            extra["twins"] = True
        super().__init__(
            max_steps=max_steps, instances=instances, size=self.size, p_hole=self.p_hole, holes=self.hole_mode,
            score=self.score_mode, **extra,
        )
        self._size = self.size
        self._holes: set[Cell] = set()
        self._goal: Cell = (0, 0)
        self._pos: Cell = (0, 0)
        self._fell = False
        self._last_safe: Cell = (0, 0)  # where the player stood before a fall
        self._start_distance = 1

    @property
    def criteria(self) -> str:  # type: ignore[override]  # depends on the score mode
        return self._CRITERIA[self.score_mode]

    def _default_max_steps(self) -> int:
        # Generated maps have a shortest path of at most 3 * size moves.
        return max(self.default_max_steps, 4 * self.size)

    # -- instances ----------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A random map with start S, goal G and holes H; a safe path always exists.

        Start and goal lie at least size - 1 moves apart (Manhattan distance), and the
        shortest safe path is at most 3 * size moves, so every map is solvable well
        within the default step budget. With `lakes="choice"` a map is also redrawn until
        `choice_cells` finds a choice on the way; the default draws exactly the maps it
        always did. With `twins=True`, seeds 2k and 2k + 1 give one map and its transpose
        (rows and columns swapped): where one twin rewards stepping sideways first, the other
        rewards stepping vertically first by exactly as much. Each twin keeps the split its
        own content hashes to.
        """
        if not self.twins:
            return {"size": self.size, "map": self._draw(seed)}
        rows = self._draw(seed // 2)
        if seed % 2:
            rows = ["".join(row[col] for row in rows) for col in range(self.size)]
        return {"size": self.size, "map": rows}

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """With `twins`, whole pairs only: the first seeds of `split` whose twin is also a distinct
        `split` instance, so a batch of consecutive seeds holds each lake with its transpose."""
        if not self.twins or self.instance_file is not None:
            return super().split_seeds(split, n, start)
        pool = 2 * int(n) + 8  # about 4 seeds in 5 have their twin in the same split
        while True:  # the base class says so when the generator runs out of distinct instances
            seeds = super().split_seeds(split, pool, start)
            present = set(seeds)
            paired = [seed for seed in seeds if seed ^ 1 in present]
            if len(paired) >= n:
                return paired[:n]
            pool *= 2

    def _draw(self, seed: int) -> list[str]:
        rng = random.Random(seed)
        n = self.size
        cells = [(row, col) for row in range(n) for col in range(n)]
        for _ in range(10_000):
            start, goal = rng.choice(cells), rng.choice(cells)
            if manhattan(start, goal) < n - 1:
                continue
            holes = {cell for cell in cells if cell not in (start, goal) and rng.random() < self.p_hole}
            distance = shortest_distances(n, holes, goal).get(start)
            if distance is None or distance > 3 * n:
                continue
            if self.lakes == "choice" and not choice_cells(start, goal, holes):
                continue
            rows = []
            for row in range(n):
                line = []
                for col in range(n):
                    cell = (row, col)
                    line.append("S" if cell == start else "G" if cell == goal else "H" if cell in holes else "F")
                rows.append("".join(line))
            return rows
        raise EnvError(f"frozenlake: could not generate a solvable map for seed {seed}")  # pragma: no cover

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        rows = instance.get("map")
        n = instance.get("size")
        if not isinstance(n, int) or not MIN_SIZE <= n <= MAX_SIZE:
            raise EnvError(f"'size' must be an integer between {MIN_SIZE} and {MAX_SIZE}")
        if not isinstance(rows, list) or len(rows) != n or any(not isinstance(r, str) or len(r) != n for r in rows):
            raise EnvError(f"'map' must be {n} strings of {n} characters")
        text = "".join(rows)
        if set(text) - set("SFHG") or text.count("S") != 1 or text.count("G") != 1:
            raise EnvError("'map' must use only S, F, H, G with exactly one S and one G")
        start, goal, holes = _read_map(rows)
        if start not in shortest_distances(n, holes, goal):
            raise EnvError("the map has no safe path from S to G")

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        self._size = int(instance["size"])
        start, self._goal, self._holes = _read_map(instance["map"])
        self._pos = self._last_safe = start
        self._fell = False
        self._start_distance = shortest_distances(self._size, self._holes, self._goal)[start]

    # -- dynamics -----------------------------------------------------------------
    def _step(self, action: str) -> tuple[bool, bool, str]:
        move = parse_move(action)
        if move is None:
            return False, False, f"{echo(action)} is not a move. Answer with up, down, left or right."
        d_row, d_col = MOVES[move]
        target = (self._pos[0] + d_row, self._pos[1] + d_col)
        if not self._on_lake(target):
            return True, False, f"You bump into the edge of the lake and stay at {_where(self._pos)}."
        if target in self._holes:
            if self.hole_mode == "blocking":
                return False, False, f"There is a hole at {_where(target)}; you cannot go {move}. You stay put."
            self._last_safe, self._pos = self._pos, target
            self._fell = True
            return True, True, f"You moved {move} and fell into the hole at {_where(target)}. The episode is over."
        self._pos = target
        if target == self._goal:
            return True, False, f"You moved {move} and reached the goal at {_where(target)}."
        return True, False, f"You moved {move} to {_where(target)}."

    def _on_lake(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self._size and 0 <= cell[1] < self._size

    def render(self) -> str:
        return self._render_grid() if self.view == "grid" else self._render_local(marked=self.view == "compass")

    def _render_local(self, marked: bool) -> str:
        """The player's cell, the goal's direction in rows and columns, and each move's cell;
        with `marked`, also whether the move brings the goal closer (each move on the lake
        changes the distance by one)."""
        if self._fell:
            return f"You are in the hole at {_where(self._pos)}."
        if self._pos == self._goal:
            return f"You are at {_where(self._pos)}, on the goal."
        d_row, d_col = self._goal[0] - self._pos[0], self._goal[1] - self._pos[1]
        offsets = [f"{abs(d_row)} {_plural('row', abs(d_row))} {'down' if d_row > 0 else 'up'}"] if d_row else []
        if d_col:
            offsets.append(f"{abs(d_col)} {_plural('column', abs(d_col))} {'right' if d_col > 0 else 'left'}")
        lines = [f"You are at {_where(self._pos)}. The goal is {' and '.join(offsets)}."]
        for move, (m_row, m_col) in MOVES.items():
            cell = (self._pos[0] + m_row, self._pos[1] + m_col)
            if not self._on_lake(cell):
                what = "the edge (you stay)"
            elif cell == self._goal:
                what = "the goal"
            elif cell in self._holes:
                what = "a hole"
            else:
                what = "safe ice"
            if marked and self._on_lake(cell) and cell != self._goal:
                closer = manhattan(cell, self._goal) < manhattan(self._pos, self._goal)
                what += ", closer to the goal" if closer else ", farther from the goal"
            lines.append(f"{move.capitalize()}: {what}.")
        return "\n".join(lines)

    def _render_grid(self) -> str:
        n = self._size
        lines = [
            "The lake (P = you, G = goal, H = hole, . = safe ice):",
            "    " + " ".join(str(c + 1) for c in range(n)),
        ]
        for row in range(n):
            marks = []
            for col in range(n):
                cell = (row, col)
                if cell == self._pos:
                    marks.append("X" if self._fell else "P")
                elif cell == self._goal:
                    marks.append("G")
                elif cell in self._holes:
                    marks.append("H")
                else:
                    marks.append(".")
            lines.append(f"{row + 1:>3} " + " ".join(marks))
        if self._fell:
            lines.append(f"You are in the hole at {_where(self._pos)} (X).")
        elif self._pos == self._goal:
            lines.append(f"You are at {_where(self._pos)}, on the goal.")
        else:
            lines.append(f"You are at {_where(self._pos)}. The goal is at {_where(self._goal)}.")
        holes = sorted(self._holes)
        if holes:
            listed = "; ".join(f"row {r + 1} column {c + 1}" for r, c in holes)
            lines.append(f"Holes ({len(holes)}): {listed}.")
        else:
            lines.append("There are no holes.")
        return "\n".join(lines)

    def state_key(self) -> str:
        return f"pos={self._pos[0] + 1},{self._pos[1] + 1}"

    def score(self) -> float:
        if self.is_success():
            return 1.0
        if self.score_mode == "goal" or (self._fell and self.score_mode == "progress"):
            return 0.0
        # "partial" counts a fall from the cell the player fell from: a failure keeps its progress.
        remaining = shortest_distances(self._size, self._holes, self._goal)[self._last_safe if self._fell else self._pos]
        return max(0.0, 1.0 - remaining / self._start_distance)

    def is_success(self) -> bool:
        return not self._fell and self._pos == self._goal

    def _oracle_action(self) -> str:
        return self._shortening_moves()[0]

    def oracle_actions(self) -> list[str]:
        """Every move that shortens the safe path to the goal by one (`oracle_action` is the
        first of them); `oracle:SEED` picks among them to spread its demonstrations."""
        self._require_live("oracle_actions")
        return self._shortening_moves()

    def _shortening_moves(self) -> list[str]:
        distances = shortest_distances(self._size, self._holes, self._goal)
        here = distances.get(self._pos)
        if here is None:  # pragma: no cover - a live player always stands on a cell joined to the goal
            raise EnvError("frozenlake: the goal cannot be reached from here")
        moves = [move for move, (d_row, d_col) in MOVES.items()
                 if distances.get((self._pos[0] + d_row, self._pos[1] + d_col)) == here - 1]
        if not moves:  # pragma: no cover - a cell at distance d > 0 has a neighbour at distance d - 1
            raise AssertionError("no move shortens the path")
        return moves

    def _admissible_actions(self) -> list[str]:
        if self.hole_mode == "fatal":
            return list(MOVES)
        return [
            move
            for move, (d_row, d_col) in MOVES.items()
            if (self._pos[0] + d_row, self._pos[1] + d_col) not in self._holes
        ]

    @property
    def instruction(self) -> str:
        n = self.max_steps
        holes = (
            "Stepping into a hole ends the episode as a failure."
            if self.hole_mode == "fatal"
            else "You cannot step into a hole: such a move is refused, you stay where you are, and the turn is spent."
        )
        if self.view != "grid":
            marked = " and whether it brings you closer to the goal" if self.view == "compass" else ""
            return (
                "You are standing on a frozen lake, a square grid of ice with holes in it. Reach the goal without "
                "falling into a hole. Each turn you are told where the goal lies from you, in rows and columns, and "
                f"what each move would step onto{marked}. "
                "Each turn, make exactly one move: up, down, left or right. "
                f"{holes} You have at most {n} moves."
            )
        return (
            "You are standing on a frozen lake drawn as a square grid. Reach the goal (G) from your position (P) "
            "without falling into a hole (H); '.' is safe ice. "
            "Rows are numbered from 1 at the top, columns from 1 at the left. "
            "Each turn, make exactly one move: up, down, left or right. "
            "Up lowers your row number by one, down raises it, left lowers your column number, right raises it. "
            f"Walking into the edge of the lake leaves you where you are. {holes} "
            f"You have at most {n} moves."
        )


def _read_map(rows: list[str]) -> tuple[Cell, Cell, set[Cell]]:
    start = goal = (0, 0)
    holes: set[Cell] = set()
    for row, line in enumerate(rows):
        for col, mark in enumerate(line):
            if mark == "S":
                start = (row, col)
            elif mark == "G":
                goal = (row, col)
            elif mark == "H":
                holes.add((row, col))
    return start, goal, holes


def _plural(word: str, count: int) -> str:
    return word if count == 1 else f"{word}s"


def _where(cell: Cell) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"
