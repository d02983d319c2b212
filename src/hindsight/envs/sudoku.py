"""Sudoku on 4×4 or 9×9 grids, one cell per action.

Every generated puzzle has exactly one solution, so "correct" is well defined: a filled
cell is correct when it holds the solution's digit. A fill that clashes with a digit
already in its row, column or box is refused (an invalid step that changes nothing),
so the grid never contains a visible contradiction. A fill that breaks no visible rule
but differs from the solution is accepted; `clear R C` takes it back.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from hindsight.envs.base import TextEnv, echo, int_knob
from hindsight.envs.contract import EnvError

SIZES = (4, 9)
# Blank counts the generator reaches reliably while keeping the solution unique.
MAX_BLANKS = {4: 10, 9: 54}
DEFAULT_BLANKS = {4: 6, 9: 30}
EMPTY = "."

Grid = list[int]  # row-major, 0 for an empty cell


def box_side(size: int) -> int:
    return 2 if size == 4 else 3


def _peers(size: int) -> list[list[int]]:
    """For each cell index, the other cells of its row, column and box."""
    side = box_side(size)
    peers = []
    for index in range(size * size):
        row, col = divmod(index, size)
        top, left = row - row % side, col - col % side
        group = {row * size + c for c in range(size)} | {r * size + col for r in range(size)}
        group |= {(top + r) * size + left + c for r in range(side) for c in range(side)}
        group.discard(index)
        peers.append(sorted(group))
    return peers


_PEERS = {size: _peers(size) for size in SIZES}


def solve(grid: Grid, size: int, limit: int = 2) -> tuple[int, Grid | None]:
    """Count solutions of `grid` up to `limit`; also return the first one found.

    Depth-first search over digit bitmasks, always branching on the empty cell with the
    fewest candidates.
    """
    side = box_side(size)
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    cells = list(grid)
    empty = []
    for index, value in enumerate(cells):
        row, col = divmod(index, size)
        box = (row // side) * side + col // side
        if value:
            bit = 1 << value
            if rows[row] & bit or cols[col] & bit or boxes[box] & bit:
                return 0, None
            rows[row] |= bit
            cols[col] |= bit
            boxes[box] |= bit
        else:
            empty.append((index, row, col, box))
    digits = range(1, size + 1)
    found: list[Grid] = []
    count = 0

    def search() -> None:
        nonlocal count
        best, best_options = -1, None
        for position, (index, row, col, box) in enumerate(empty):
            if cells[index]:
                continue
            used = rows[row] | cols[col] | boxes[box]
            options = [d for d in digits if not used >> d & 1]
            if best_options is None or len(options) < len(best_options):
                best, best_options = position, options
                if len(options) <= 1:
                    break
        if best_options is None:
            count += 1
            if not found:
                found.append(list(cells))
            return
        index, row, col, box = empty[best]
        for digit in best_options:
            bit = 1 << digit
            cells[index] = digit
            rows[row] |= bit
            cols[col] |= bit
            boxes[box] |= bit
            search()
            rows[row] ^= bit
            cols[col] ^= bit
            boxes[box] ^= bit
            cells[index] = 0
            if count >= limit:
                return

    search()
    return count, (found[0] if found else None)


def random_solution(rng: random.Random, size: int) -> Grid:
    """A full valid grid: a fixed pattern with bands, rows, stacks, columns and digits shuffled."""
    side = box_side(size)

    def shuffled(values: range) -> list[int]:
        items = list(values)
        rng.shuffle(items)
        return items

    rows = [band * side + r for band in shuffled(range(side)) for r in shuffled(range(side))]
    cols = [stack * side + c for stack in shuffled(range(side)) for c in shuffled(range(side))]
    digits = shuffled(range(1, size + 1))
    return [digits[(side * (r % side) + r // side + c) % size] for r in rows for c in cols]


def grid_to_rows(grid: Grid, size: int) -> list[str]:
    return ["".join(str(v) if v else EMPTY for v in grid[r * size : (r + 1) * size]) for r in range(size)]


def rows_to_grid(rows: list[str]) -> Grid:
    return [0 if ch == EMPTY else int(ch) for row in rows for ch in row]


_CELL_TOKEN = re.compile(r"r(\d+)c(\d+)|r(\d+)|c(\d+)")
_FILL_WORDS = {"row", "col", "column", "with", "value", "to", "digit", "number"}


def parse_action(action: str) -> tuple[str, list[int]] | None:
    """("fill", [row, col, value]) or ("clear", [row, col]); None if unreadable.

    Accepts "fill 2 3 4", "fill row 2 column 3 with 4", "R2C3=4", "r2c3 4", "(2,3)=4",
    "clear 2 3" and "clear r2c3". Numbers are 1-based.
    """
    text = re.sub(r"[^a-z0-9]+", " ", action.lower()).split()
    if not text:
        return None
    verb = "fill"
    if text[0] in ("clear", "erase", "empty"):
        verb, text = "clear", text[1:]
    elif text[0] in ("fill", "set", "write", "place"):
        text = text[1:]
    numbers: list[int] = []
    for word in text:
        if word in _FILL_WORDS:
            continue
        if word.isdigit():
            numbers.append(int(word))
            continue
        match = _CELL_TOKEN.fullmatch(word)
        if match is None:
            return None
        numbers.extend(int(g) for g in match.groups() if g is not None)
    expected = 3 if verb == "fill" else 2
    return (verb, numbers) if len(numbers) == expected else None


class Sudoku(TextEnv):
    """Fill the blank cells of a Sudoku grid that has exactly one solution."""

    id = "sudoku"
    default_max_steps = 20
    description = "Fill the blanks of a 4×4 or 9×9 Sudoku with a unique solution, one cell per action."
    criteria = (
        "The score is the fraction of the originally blank cells that currently hold the digit of the puzzle's "
        "unique solution. Cells left empty or filled with a wrong digit earn nothing. "
        "The task succeeds when every blank is filled correctly."
    )

    def __init__(
        self,
        *,
        size: int = 4,
        blanks: int | None = None,
        max_steps: int | None = None,
        instances: Any = None,
    ):
        self.size = int_knob("size", size)
        if self.size not in SIZES:
            raise EnvError(f"size must be 4 or 9, got {self.size}")
        default = DEFAULT_BLANKS[self.size]
        self.blanks = int_knob("blanks", default if blanks is None else blanks, 1, MAX_BLANKS[self.size])
        super().__init__(max_steps=max_steps, instances=instances, size=self.size, blanks=self.blanks)
        self._size = self.size
        self._cells: Grid = []
        self._givens: list[bool] = []
        self._solution: Grid = []

    def _default_max_steps(self) -> int:
        # Room to fill every blank and to take back as many wrong fills.
        return max(self.default_max_steps, 2 * self.blanks)

    # -- instances ----------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A random solved grid with `blanks` cells emptied, keeping the solution unique.

        Cells are emptied one at a time in random order; a cell whose removal would allow
        a second solution stays filled. If a pass ends short of `blanks`, a new grid is drawn.
        """
        rng = random.Random(seed)
        n = self.size
        for _ in range(1000):
            solution = random_solution(rng, n)
            puzzle = list(solution)
            order = list(range(n * n))
            rng.shuffle(order)
            removed = 0
            for index in order:
                if removed == self.blanks:
                    break
                puzzle[index] = 0
                if solve(puzzle, n, limit=2)[0] == 1:
                    removed += 1
                else:
                    puzzle[index] = solution[index]
            if removed == self.blanks:
                return {"size": n, "puzzle": grid_to_rows(puzzle, n), "solution": grid_to_rows(solution, n)}
        raise EnvError(f"sudoku: could not empty {self.blanks} cells with a unique solution")  # pragma: no cover

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        n = instance.get("size")
        if n not in SIZES:
            raise EnvError("'size' must be 4 or 9")
        shape = re.compile(rf"[1-{n}{re.escape(EMPTY)}]{{{n}}}")
        for key in ("puzzle", "solution"):
            rows = instance.get(key)
            if (
                not isinstance(rows, list)
                or len(rows) != n
                or not all(isinstance(r, str) and shape.fullmatch(r) for r in rows)
            ):
                raise EnvError(f"'{key}' must be {n} rows of {n} characters (digits 1-{n}, '{EMPTY}' for blank)")
        puzzle, solution = rows_to_grid(instance["puzzle"]), rows_to_grid(instance["solution"])
        if 0 in solution or solve(solution, n, limit=1)[0] != 1:
            raise EnvError("'solution' must be a complete valid grid")
        if any(p and p != s for p, s in zip(puzzle, solution, strict=True)):
            raise EnvError("'puzzle' disagrees with 'solution' on a given cell")
        if 0 not in puzzle:
            raise EnvError("'puzzle' has no blank cell")

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        self._size = int(instance["size"])
        self._cells = rows_to_grid(instance["puzzle"])
        self._givens = [v != 0 for v in self._cells]
        self._solution = rows_to_grid(instance["solution"])

    # -- dynamics -----------------------------------------------------------------
    def _clash(self, index: int, value: int) -> str | None:
        n = self._size
        side = box_side(n)
        row, col = divmod(index, n)
        for peer in _PEERS[n][index]:
            if self._cells[peer] == value:
                p_row, p_col = divmod(peer, n)
                if p_row == row:
                    unit = f"row {row + 1}"
                elif p_col == col:
                    unit = f"column {col + 1}"
                else:
                    unit = f"the {side}×{side} box"
                return f"{value} is already in {unit} (at r{p_row + 1}c{p_col + 1})"
        return None

    def _step(self, action: str) -> tuple[bool, bool, str]:
        parsed = parse_action(action)
        n = self._size
        if parsed is None:
            return (
                False,
                False,
                (
                    f"{echo(action)} is not an action. Use: fill R C V (put digit V in row R, column C) "
                    "or clear R C, with 1-based numbers, e.g. fill 1 2 3."
                ),
            )
        verb, numbers = parsed
        row, col = numbers[0], numbers[1]
        if not (1 <= row <= n and 1 <= col <= n):
            return False, False, f"There is no cell r{row}c{col}; rows and columns go from 1 to {n}."
        index = (row - 1) * n + col - 1
        cell = f"r{row}c{col}"
        if self._givens[index]:
            return False, False, f"{cell} is a given clue ({self._cells[index]}) and cannot be changed."
        if verb == "clear":
            if not self._cells[index]:
                return False, False, f"{cell} is already empty."
            old, self._cells[index] = self._cells[index], 0
            return True, False, f"You cleared {cell} (it held {old})."
        value = numbers[2]
        if not 1 <= value <= n:
            return False, False, f"{value} is not a digit of this puzzle; use 1 to {n}."
        if self._cells[index]:
            return False, False, f"{cell} already holds {self._cells[index]}; clear it first with: clear {row} {col}."
        clash = self._clash(index, value)
        if clash:
            return False, False, f"You cannot put {value} in {cell}: {clash}."
        self._cells[index] = value
        return True, False, f"You put {value} in {cell}."

    # -- observation --------------------------------------------------------------
    def render(self) -> str:
        n = self._size
        side = box_side(n)
        rows = grid_to_rows(self._cells, n)
        header = "     " + "   ".join(
            " ".join(str(c) for c in range(s * side + 1, (s + 1) * side + 1)) for s in range(side)
        )
        rule = "   " + "+".join("-" * (2 * side + 1) for _ in range(side)).join("++")
        lines = ["The grid (. = empty):", header, rule]
        for r in range(n):
            chunks = [" ".join(rows[r][s * side : (s + 1) * side]) for s in range(side)]
            lines.append(f"{r + 1:>2} | " + " | ".join(chunks) + " |")
            if (r + 1) % side == 0:
                lines.append(rule)
        empty = [self._name(i) for i in range(n * n) if not self._cells[i]]
        filled = [f"{self._name(i)}={self._cells[i]}" for i in range(n * n) if self._cells[i] and not self._givens[i]]
        lines.append(f"Empty cells ({len(empty)}): {', '.join(empty)}." if empty else "No cell is empty.")
        if filled:
            lines.append(f"Cells you filled: {', '.join(filled)}.")
        return "\n".join(lines)

    def _name(self, index: int) -> str:
        row, col = divmod(index, self._size)
        return f"r{row + 1}c{col + 1}"

    def state_key(self) -> str:
        return "/".join(grid_to_rows(self._cells, self._size))

    def score(self) -> float:
        blanks = [i for i, given in enumerate(self._givens) if not given]
        return sum(self._cells[i] == self._solution[i] for i in blanks) / len(blanks)

    def is_success(self) -> bool:
        return self._cells == self._solution

    def _oracle_action(self) -> str:
        # Take back a wrong fill first; then every remaining solution digit fits without a clash.
        n = self._size
        for index, value in enumerate(self._cells):
            if value and value != self._solution[index]:
                row, col = divmod(index, n)
                return f"clear {row + 1} {col + 1}"
        for index, value in enumerate(self._cells):
            if not value:
                row, col = divmod(index, n)
                return f"fill {row + 1} {col + 1} {self._solution[index]}"
        raise AssertionError("a solved grid ends the episode")  # pragma: no cover

    def _admissible_actions(self) -> list[str]:
        n = self._size
        actions = []
        for index, value in enumerate(self._cells):
            row, col = divmod(index, n)
            if not value:
                used = {self._cells[p] for p in _PEERS[n][index]}
                actions.extend(f"fill {row + 1} {col + 1} {d}" for d in range(1, n + 1) if d not in used)
            elif not self._givens[index]:
                actions.append(f"clear {row + 1} {col + 1}")
        return actions

    @property
    def instruction(self) -> str:
        n = self.size
        side = box_side(n)
        return (
            f"Solve a {n}×{n} Sudoku. Fill every empty cell (.) with a digit from 1 to {n} so that each row, each "
            f"column and each {side}×{side} box contains every digit exactly once. The puzzle has exactly one "
            "solution. Rows are numbered from 1 at the top, columns from 1 at the left; r2c3 means row 2, column 3. "
            "Actions:\n"
            "- fill R C V: write digit V in the empty cell at row R, column C (for example: fill 2 3 4).\n"
            "- clear R C: erase a digit you wrote earlier.\n"
            "Given clues cannot be changed, and a digit that already appears in the same row, column or box "
            f"is refused. You have at most {self.max_steps} actions."
        )
