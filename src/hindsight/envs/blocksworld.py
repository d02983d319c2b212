"""BlocksWorld: rearrange stacks of blocks into a goal configuration with a one-block hand.

Blocks are named b1, b2, …; stacks are always listed bottom to top and ordered by the
number of their bottom block, so the same configuration is always written the same way.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from hindsight.envs.base import TextEnv, choice_knob, echo, int_knob
from hindsight.envs.contract import EnvError

TABLE = "table"
VERBS = ("pickup", "putdown", "stack", "unstack")
_ARITY = {"pickup": 1, "putdown": 1, "stack": 2, "unstack": 2}
_FILLER = {"block", "the", "on", "onto", "from", "off", "top", "of", "to", "a", "please"}
MIN_BLOCKS, MAX_BLOCKS = 3, 20
# "full" states the stacks three ways (a list, a picture, sentences); "compact" keeps the list,
# the clear blocks, the hand and the goal in sentences (about half the tokens); "sentences" states
# the current stacks in sentences in place of the list (about 56%). The bundled 135M model clones
# the planner far better from the full view than from either (docs/results.md, issue 45).
VIEWS = ("full", "compact", "sentences")

Stacks = list[list[str]]


def block_names(n: int) -> list[str]:
    return [f"b{i}" for i in range(1, n + 1)]


def _number(block: str) -> int:
    return int(block[1:])


def canonical_stacks(stacks: Stacks) -> Stacks:
    """Stacks ordered by their bottom block's number (b2 before b10)."""
    return sorted((list(s) for s in stacks if s), key=lambda s: _number(s[0]))


def stacks_to_support(stacks: Stacks) -> dict[str, str]:
    """What each block rests on: another block's name or "table"."""
    support: dict[str, str] = {}
    for stack in stacks:
        for i, block in enumerate(stack):
            support[block] = TABLE if i == 0 else stack[i - 1]
    return support


def support_to_stacks(support: Mapping[str, str]) -> Stacks:
    above = {below: block for block, below in support.items() if below != TABLE}
    stacks = []
    for bottom in (b for b, below in support.items() if below == TABLE):
        stack = [bottom]
        while stack[-1] in above:
            stack.append(above[stack[-1]])
        stacks.append(stack)
    return canonical_stacks(stacks)


def parse_action(action: str) -> tuple[str, list[str]] | None:
    """(verb, block names) from text such as "Unstack b1 from b2" or "(pick-up B3)"; None if unreadable.

    A bare number names a block ("stack 1 2" means "stack b1 b2").
    """
    text = re.sub(r"[^a-z0-9]+", " ", action.lower())
    text = re.sub(r"\bpick up\b", "pickup", text)
    text = re.sub(r"\bput down\b", "putdown", text)
    words = [w for w in text.split() if w not in _FILLER]
    if not words or words[0] not in VERBS:
        return None
    verb, rest = words[0], words[1:]
    if verb == "putdown":
        rest = [w for w in rest if w != TABLE]
    blocks = []
    for word in rest:
        if re.fullmatch(r"b?\d+", word):
            blocks.append(f"b{int(word.lstrip('b'))}")
        else:
            return None
    return verb, blocks


def random_stacks(rng: random.Random, blocks: list[str]) -> Stacks:
    """A random configuration: each block in turn goes on the table or on top of a stack."""
    order = list(blocks)
    rng.shuffle(order)
    stacks: Stacks = []
    for block in order:
        choice = rng.randrange(len(stacks) + 1)
        if choice == len(stacks):
            stacks.append([block])
        else:
            stacks[choice].append(block)
    return canonical_stacks(stacks)


class BlocksWorld(TextEnv):
    """Rearrange blocks from an initial configuration into a goal configuration."""

    id = "blocksworld"
    default_max_steps = 20
    description = "Rearrange n blocks into goal stacks with pickup, putdown, stack and unstack."
    criteria = (
        "Each block has one goal relation: it should rest either on a named block or on the table. "
        "The score is the fraction of these relations that hold right now (a block in the hand rests on nothing). "
        "The task succeeds when all of them hold."
    )

    def __init__(
        self, *, num_blocks: int = 4, max_steps: int | None = None, view: str = "full", instances: Any = None
    ):
        self.num_blocks = int_knob("num_blocks", num_blocks, MIN_BLOCKS, MAX_BLOCKS)
        # The view changes the observation only: the same seeds give the same tasks. It joins
        # the env's options only when it is not the default, so older logs still match.
        self.view = choice_knob("view", view, VIEWS)
        extra = {} if self.view == "full" else {"view": self.view}
        super().__init__(max_steps=max_steps, instances=instances, num_blocks=self.num_blocks, **extra)
        self._blocks: list[str] = block_names(self.num_blocks)
        self._support: dict[str, str] = {}
        self._hand: str | None = None
        self._goal: dict[str, str] = {}

    def _default_max_steps(self) -> int:
        # The oracle needs at most 4 * n - 2 actions (each block moves at most twice,
        # two actions per move, and a block starting on the table moves at most once).
        return max(self.default_max_steps, 5 * self.num_blocks)

    # -- instances ----------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """Random initial and goal configurations that differ."""
        rng = random.Random(seed)
        blocks = block_names(self.num_blocks)
        initial = random_stacks(rng, blocks)
        goal = random_stacks(rng, blocks)
        while goal == initial:
            goal = random_stacks(rng, blocks)
        return {"blocks": self.num_blocks, "initial": initial, "goal": goal}

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        n = instance.get("blocks")
        if not isinstance(n, int) or not MIN_BLOCKS <= n <= MAX_BLOCKS:
            raise EnvError(f"'blocks' must be an integer between {MIN_BLOCKS} and {MAX_BLOCKS}")
        names = block_names(n)
        for key in ("initial", "goal"):
            stacks = instance.get(key)
            if not isinstance(stacks, list) or not all(isinstance(s, list) and s for s in stacks):
                raise EnvError(f"'{key}' must be a list of non-empty stacks")
            placed = sorted((b for s in stacks for b in s), key=lambda b: (not isinstance(b, str), str(b)))
            if placed != sorted(names):
                raise EnvError(f"'{key}' must place each of {', '.join(names)} exactly once")

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        self._blocks = block_names(int(instance["blocks"]))
        self._support = stacks_to_support(instance["initial"])
        self._goal = stacks_to_support(instance["goal"])
        self._hand = None

    # -- dynamics -----------------------------------------------------------------
    def _clear(self, block: str) -> bool:
        return block != self._hand and all(below != block for below in self._support.values())

    def _on_top_of(self, block: str) -> str | None:
        return next((b for b, below in self._support.items() if below == block), None)

    def _step(self, action: str) -> tuple[bool, bool, str]:
        parsed = parse_action(action)
        if parsed is None:
            return (
                False,
                False,
                (
                    f"{echo(action)} is not an action. Use: pickup X, putdown X, stack X Y or unstack X Y "
                    "(X, Y are block names such as b1)."
                ),
            )
        verb, args = parsed
        if len(args) != _ARITY[verb]:
            syntax = {"pickup": "pickup X", "putdown": "putdown X", "stack": "stack X Y", "unstack": "unstack X Y"}
            return False, False, f"{verb} takes {_ARITY[verb]} block name(s): {syntax[verb]}."
        unknown = [b for b in args if b not in self._blocks]
        if unknown:
            return False, False, f"There is no block {unknown[0]}; the blocks are {', '.join(self._blocks)}."
        problem = self._refusal(verb, args)
        if problem:
            return False, False, f"You cannot {verb} {' '.join(args)}: {problem}"
        block = args[0]
        if verb in ("pickup", "unstack"):
            del self._support[block]
            self._hand = block
            done = f"You picked up {block}." if verb == "pickup" else f"You unstacked {block} from {args[1]}."
        elif verb == "putdown":
            self._support[block] = TABLE
            self._hand = None
            done = f"You put {block} down on the table."
        else:
            self._support[block] = args[1]
            self._hand = None
            done = f"You stacked {block} on {args[1]}."
        return True, False, done

    def _refusal(self, verb: str, args: list[str]) -> str | None:
        """Why an action with known blocks breaks the rules, or None if it is allowed."""
        block = args[0]
        if verb in ("pickup", "unstack"):
            if self._hand is not None:
                return f"your hand already holds {self._hand}; put it down or stack it first."
            below = self._support[block]
            if verb == "pickup" and below != TABLE:
                return f"{block} is on {below}, not on the table; use unstack {block} {below}."
            if verb == "unstack" and below != args[1]:
                where = "the table; use pickup " + block if below == TABLE else below
                return f"{block} is not on {args[1]}, it is on {where}."
            above = self._on_top_of(block)
            if above is not None:
                return f"{block} is not clear: {above} is on top of it."
            return None
        if self._hand != block:
            holding = f"you hold {self._hand}" if self._hand else "your hand is empty"
            return f"you are not holding {block} ({holding})."
        if verb == "stack":
            target = args[1]
            if target == block:
                return "a block cannot go on itself."
            above = self._on_top_of(target)
            if above is not None:
                return f"{target} is not clear: {above} is on top of it."
        return None

    # -- observation --------------------------------------------------------------
    def render(self) -> str:
        stacks = support_to_stacks(self._support)
        if self.view == "sentences":
            lines = ["Current state: " + _describe(self._support, self._blocks) + "."]
        else:
            lines = [f"Current stacks (bottom to top): {_listed(stacks)}."]
        if self.view == "full":
            lines.append("Picture (the table is the line at the bottom):")
            lines.extend(_picture(stacks))
            lines.append("In words: " + _describe(self._support, self._blocks) + ".")
        clear = [b for b in self._blocks if b in self._support and self._clear(b)]
        lines.append(f"Clear blocks: {', '.join(clear)}.")
        lines.append(f"Your hand holds {self._hand}." if self._hand else "Your hand is empty.")
        goal = _describe(self._goal, self._blocks)
        if self.view == "full":
            lines.append(f"Goal: {goal}. As stacks (bottom to top): {_listed(support_to_stacks(self._goal))}.")
        else:
            lines.append(f"Goal: {goal}.")
        held = sum(self._support.get(b) == self._goal[b] for b in self._blocks)
        lines.append(f"Goal relations that hold now: {held} of {len(self._blocks)}.")
        return "\n".join(lines)

    def state_key(self) -> str:
        stacks = ";".join(",".join(s) for s in support_to_stacks(self._support))
        return f"hand={self._hand or '-'}|stacks={stacks}"

    def score(self) -> float:
        held = sum(self._support.get(b) == self._goal[b] for b in self._blocks)
        return held / len(self._blocks)

    def is_success(self) -> bool:
        return all(self._support.get(b) == self._goal[b] for b in self._blocks)

    # -- planner ------------------------------------------------------------------
    def _settled(self, block: str) -> bool:
        """The block and everything under it already sit as in the goal."""
        while True:
            below = self._support.get(block)
            if below is None or below != self._goal[block]:
                return False
            if below == TABLE:
                return True
            block = below

    def _ready_for(self, block: str) -> bool:
        """The block's goal place is free and final, so it can go there now."""
        target = self._goal[block]
        return target == TABLE or (target in self._support and self._settled(target) and self._clear(target))

    def _place(self, block: str) -> str:
        target = self._goal[block]
        return f"putdown {block}" if target == TABLE else f"stack {block} {target}"

    def _oracle_action(self) -> str:
        # Never disturb a settled block, move a block straight to its goal place when that
        # place is ready, and otherwise clear the way by moving an unsettled block that sits
        # on another block to the table. A block reaches the table at most once and its goal
        # place at most once, so the plan ends within 4 * n actions.
        if self._hand is not None:
            return self._place(self._hand) if self._ready_for(self._hand) else f"putdown {self._hand}"
        movable = [b for b in self._blocks if b in self._support and self._clear(b) and not self._settled(b)]
        for block in movable:
            if self._ready_for(block):
                below = self._support[block]
                return f"pickup {block}" if below == TABLE else f"unstack {block} {below}"
        for block in movable:
            below = self._support[block]
            if below != TABLE:
                return f"unstack {block} {below}"
        raise AssertionError("an unsolved state always has a block to move")  # pragma: no cover

    def _admissible_actions(self) -> list[str]:
        if self._hand is not None:
            actions = [f"putdown {self._hand}"]
            actions += [f"stack {self._hand} {b}" for b in self._blocks if b in self._support and self._clear(b)]
            return actions
        actions = []
        for block in self._blocks:
            if block in self._support and self._clear(block):
                below = self._support[block]
                actions.append(f"pickup {block}" if below == TABLE else f"unstack {block} {below}")
        return actions

    @property
    def instruction(self) -> str:
        return (
            "You control a robot arm over a table with stacks of blocks. Rearrange the blocks so that every block "
            "rests where the goal says. A block is clear when nothing is on top of it. The arm holds at most one "
            "block at a time. Actions (X and Y are block names such as b1):\n"
            "- pickup X: take X from the table; X must be on the table and clear, and your hand empty.\n"
            "- putdown X: put the block you hold on the table.\n"
            "- stack X Y: put the block X you hold on top of block Y; Y must be clear.\n"
            "- unstack X Y: take X off the top of Y; X must be on Y and clear, and your hand empty.\n"
            "Use unstack, not pickup, for a block that sits on another block. "
            f"You have at most {self.max_steps} actions."
        )


def _describe(support: Mapping[str, str], blocks: list[str]) -> str:
    parts = []
    for block in blocks:
        below = support.get(block)
        if below is None:
            parts.append(f"{block} is in the hand")
        elif below == TABLE:
            parts.append(f"{block} is on the table")
        else:
            parts.append(f"{block} is on {below}")
    return "; ".join(parts)


def _listed(stacks: Stacks) -> str:
    """Stacks as the observation lists them: "b1, b2 | b3" (each bottom to top)."""
    return " | ".join(", ".join(s) for s in stacks)


def _picture(stacks: Stacks) -> list[str]:
    width = max(len(b) for s in stacks for b in s) + 2
    height = max(len(s) for s in stacks)
    lines = []
    for level in range(height - 1, -1, -1):
        cells = [f"[{s[level]}]".ljust(width) if level < len(s) else " " * width for s in stacks]
        lines.append("  " + " ".join(cells).rstrip())
    lines.append("  " + "=" * (len(stacks) * (width + 1) - 1))
    return lines
