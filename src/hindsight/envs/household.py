"""Household: ALFWorld-style tasks in one room of numbered receptacles, played by TextWorld.

The world runs on TextWorld (`textworld`): `LOGIC` below is a TextWorld logic file (.twl)
that defines the receptacles, the objects, the hand and the rules behind every command
(`go to`, `open`, `take … from`, `put … in/on`, `clean`, `heat`, `cool`, `use`, `examine`,
`look`, `inventory`), including the state changes of cleaning, heating and cooling. Each
generated task is built with TextWorld's `GameMaker` from a seeded instance, its goal is a
TextWorld quest (success is TextWorld's `won`), the game is saved as TextWorld's JSON game
file, cached on disk, and played with `textworld.start` (TextWorld's Python engine: no Inform7
compilation). The admissible actions are TextWorld's admissible commands.

Two things sit on top of TextWorld, because its own versions do not fit here:

* the text. TextWorld's JSON engine has no narrative (it points to Inform7-compiled .z8
  games, whose text is not ALFWorld's), so the feedback and the observation are written from
  TextWorld's facts in ALFWorld's words ("You arrive at cabinet 1. The cabinet 1 is closed.");
* the walkthrough. TextWorld derives a quest's walkthrough from a dependency tree of the
  recorded solving actions; in this world (where "go to" reaches any receptacle) its policy
  tracking did not terminate in TextWorld 1.7.0, so the oracle is a small planner over
  TextWorld's facts that replans from any state.

`source="alfworld"` plays ALFWorld's own game files instead (`$ALFWORLD_DATA`), through
TextWorld's PDDL engine, with ALFWorld's text and TextWorld's planned walkthrough.
"""

from __future__ import annotations

import copy
import functools
import glob
import hashlib
import itertools
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hindsight.envs.base import TextEnv, canonical_json, choice_knob
from hindsight.envs.contract import EnvError

#: TextWorld's logic for the generated games. In one room, the player stands in the middle
#: or at one receptacle ("go to" reaches any receptacle from anywhere, as in ALFWorld).
#: Surfaces (s) are always reachable, openable receptacles (c) only when open; the hand holds
#: one object. The sink, microwave and fridge also clean, heat and cool the object held; a
#: desk lamp stands on a receptacle and `use` switches it on. Rules whose effects restate
#: their preconditions (look, inventory, examine) change nothing: they exist so that TextWorld
#: lists them among the admissible commands.
LOGIC = """
type P {
    predicates {
        at(P, r);
        middle(P);
        atrec(P, rec);
    }

    rules {
        look :: at(P, r) -> at(P, r);
        inventory :: at(P, r) -> at(P, r);
        go/start :: $at(rec, r) & middle(P) -> atrec(P, rec);
        go/to :: $at(rec', r) & atrec(P, rec) -> atrec(P, rec');
    }

    inform7 {
        commands {
            look :: "look" :: "looking";
            inventory :: "inventory" :: "taking inventory";
            go/start :: "go to {rec}" :: "going to the {rec}";
            go/to :: "go to {rec'}" :: "going to the {rec'}";
        }
    }
}

type I {
    predicates {
        in(o, I);
        empty(I);
    }

    inform7 {
        predicates {
            in(o, I) :: "The player carries the {o}";
            empty(I) :: "";
        }
    }
}

type r {
    predicates {
        at(t, r);
    }

    inform7 {
        type {
            kind :: "room";
        }
    }
}

type t {
    inform7 {
        type {
            kind :: "thing";
        }
    }
}

type rec : t {
    rules {
        examine/rec :: atrec(P, rec) -> atrec(P, rec);
    }

    inform7 {
        type {
            kind :: "receptacle-like";
        }

        commands {
            examine/rec :: "examine {rec}" :: "examining the {rec}";
        }
    }
}

type s : rec {
    predicates {
        on(o, s);
    }

    rules {
        take/s :: $atrec(P, s) & on(o, s) & empty(I) -> in(o, I);
        put/s :: $atrec(P, s) & in(o, I) -> on(o, s) & empty(I);
    }

    inform7 {
        type {
            kind :: "surface-like";
        }

        commands {
            take/s :: "take {o} from {s}" :: "taking the {o} from the {s}";
            put/s :: "put {o} in/on {s}" :: "putting the {o} on the {s}";
        }
    }
}

type c : rec {
    predicates {
        in(o, c);
        open(c);
        closed(c);
    }

    rules {
        open/c :: $atrec(P, c) & closed(c) -> open(c);
        close/c :: $atrec(P, c) & open(c) -> closed(c);
        take/c :: $atrec(P, c) & $open(c) & in(o, c) & empty(I) -> in(o, I);
        put/c :: $atrec(P, c) & $open(c) & in(o, I) -> in(o, c) & empty(I);
    }

    constraints {
        c1 :: open(c) & closed(c) -> fail();
    }

    inform7 {
        type {
            kind :: "openable-receptacle-like";
        }

        commands {
            open/c :: "open {c}" :: "opening the {c}";
            close/c :: "close {c}" :: "closing the {c}";
            take/c :: "take {o} from {c}" :: "taking the {o} from the {c}";
            put/c :: "put {o} in/on {c}" :: "putting the {o} in the {c}";
        }
    }
}

type sink : s {
    rules {
        clean :: $atrec(P, sink) & $in(o, I) & dirty(o) -> clean(o);
    }

    inform7 {
        type {
            kind :: "sink-like";
        }

        commands {
            clean :: "clean {o} with {sink}" :: "cleaning the {o} with the {sink}";
        }
    }
}

type micro : c {
    rules {
        heat/room :: $atrec(P, micro) & $in(o, I) & roomtemp(o) -> hot(o);
        heat/cold :: $atrec(P, micro) & $in(o, I) & cold(o) -> hot(o);
    }

    inform7 {
        type {
            kind :: "microwave-like";
        }

        commands {
            heat/room :: "heat {o} with {micro}" :: "heating the {o} with the {micro}";
            heat/cold :: "heat {o} with {micro}" :: "heating the {o} with the {micro}";
        }
    }
}

type fridge : c {
    rules {
        cool/room :: $atrec(P, fridge) & $in(o, I) & roomtemp(o) -> cold(o);
        cool/hot :: $atrec(P, fridge) & $in(o, I) & hot(o) -> cold(o);
    }

    inform7 {
        type {
            kind :: "fridge-like";
        }

        commands {
            cool/room :: "cool {o} with {fridge}" :: "cooling the {o} with the {fridge}";
            cool/hot :: "cool {o} with {fridge}" :: "cooling the {o} with the {fridge}";
        }
    }
}

type o : t {
    predicates {
        dirty(o);
        clean(o);
        roomtemp(o);
        hot(o);
        cold(o);
    }

    rules {
        examine/o :: in(o, I) -> in(o, I);
    }

    inform7 {
        type {
            kind :: "object-like";
        }

        commands {
            examine/o :: "examine {o}" :: "examining the {o}";
        }
    }
}

type lamp : t {
    predicates {
        stands(lamp, rec);
        off(lamp);
        lit(lamp);
    }

    rules {
        use :: $atrec(P, rec) & $stands(lamp, rec) & off(lamp) -> lit(lamp);
    }

    inform7 {
        type {
            kind :: "lamp-like";
        }

        commands {
            use :: "use {lamp}" :: "using the {lamp}";
        }
    }
}
"""

#: ALFWorld's six task types.
TASK_TYPES = (
    "pick_and_place_simple", "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep", "look_at_obj_in_light", "pick_two_obj_and_place",
)  # fmt: skip
SOURCES = ("generated", "alfworld")

# (class, TextWorld type, fewest, most) per scene; numbered "countertop 1", "countertop 2", …
_RECEPTACLES: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "kitchen": (
        ("cabinet", "c", 2, 5), ("coffeemachine", "s", 0, 1), ("countertop", "s", 1, 3), ("diningtable", "s", 0, 1),
        ("drawer", "c", 1, 3), ("fridge", "fridge", 1, 1), ("garbagecan", "s", 1, 1),
        ("microwave", "micro", 1, 1), ("shelf", "s", 0, 2), ("sinkbasin", "sink", 1, 1), ("stoveburner", "s", 0, 2),
    ),
    "bedroom": (
        ("armchair", "s", 0, 1), ("bed", "s", 1, 1), ("desk", "s", 1, 1), ("dresser", "s", 0, 1),
        ("drawer", "c", 2, 4), ("garbagecan", "s", 1, 1), ("safe", "c", 0, 1), ("shelf", "s", 0, 3),
        ("sidetable", "s", 1, 2),
    ),
}  # fmt: skip
_OBJECTS = {
    "kitchen": ("apple bread butterknife bowl cup dishsponge egg fork kettle knife ladle lettuce mug pan plate pot "
                "potato saltshaker spatula spoon tomato winebottle").split(),
    "bedroom": "alarmclock book cd cellphone creditcard keychain pen pencil pillow remotecontrol statue vase watch".split(),
}
# Which objects each transformation applies to in ALFWorld's tasks.
_CLEANABLE = "apple bowl butterknife cup dishsponge egg fork kettle knife ladle lettuce mug pan plate pot potato spatula spoon tomato".split()  # noqa: E501
_HEATABLE = "apple bread cup egg mug plate potato tomato".split()
_COOLABLE = "apple bowl bread cup egg lettuce mug pan plate pot potato tomato winebottle".split()
# Where a goal object may have to go.
_TARGETS = {
    "kitchen": ("cabinet", "countertop", "diningtable", "drawer", "fridge", "microwave", "shelf", "garbagecan"),
    "bedroom": ("armchair", "bed", "desk", "drawer", "dresser", "safe", "shelf", "sidetable"),
}
# task type -> (the objects it may ask for, the state it needs, the appliance giving it, the word in the sentence)
_TRANSFORMS = {
    "pick_clean_then_place_in_recep": (_CLEANABLE, "clean", "sinkbasin", "clean"),
    "pick_heat_then_place_in_recep": (_HEATABLE, "hot", "microwave", "hot"),
    "pick_cool_then_place_in_recep": (_COOLABLE, "cold", "fridge", "cool"),
}
_LAMP = "desklamp 1"
_OPENABLE = ("c", "fridge", "micro")
_KINDS = ("s", "c", "sink", "micro", "fridge")
# Facts that never change and say nothing about the state (everything is in the one room).
_STATIC = ("at",)
_TEMPERATURE_WORDS = {"hot": "hot", "cold": "cool"}


def cache_dir() -> Path:
    """Folder of the built TextWorld game files: `$HINDSIGHT_CACHE/household`, else `~/.cache/hindsight/household`.

    `XDG_CACHE_HOME` replaces `~/.cache` when set.
    """
    root = os.environ.get("HINDSIGHT_CACHE")
    if root:
        return Path(root).expanduser() / "household"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "hindsight" / "household"


def _listing(names: list[str]) -> str:
    """ALFWorld's enumeration: "a apple 1, a mug 2, and a fork 1" (always "a", as ALFWorld writes)."""
    items = [f"a {name}" for name in names]
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def task_sentence(task: str, obj: str, target: str) -> str:
    """The ALFWorld task sentence of a generated instance."""
    if task == "look_at_obj_in_light":
        return f"look at {obj} under the desklamp."
    if task == "pick_two_obj_and_place":
        return f"put two {obj} in {target}."
    if task in _TRANSFORMS:
        return f"put a {_TRANSFORMS[task][3]} {obj} in {target}."
    return f"put a {obj} in {target}."


def normalize_command(action: str) -> str:
    """Lower case, single spaces, no final full stop; "put A in X" and "put A on X" become "put A in/on X"."""
    text = " ".join(action.lower().replace("\x00", " ").split()).rstrip(".!").strip()
    found = re.fullmatch(r"put (.+?) (?:in|on|into|onto|in/on) (.+)", text)
    return f"put {found.group(1)} in/on {found.group(2)}" if found else text


@dataclass
class _View:
    """The state as read from TextWorld's facts, by entity name."""

    position: str | None = None  # the receptacle the player stands at, None in the middle of the room
    held: str | None = None
    location: dict[str, str] = field(default_factory=dict)  # object -> receptacle
    opened: set[str] = field(default_factory=set)
    states: dict[str, set[str]] = field(default_factory=dict)  # object -> {"clean", "hot", "cold"}
    lamp_on: bool = False

    def contents(self, receptacle: str) -> list[str]:
        return sorted(name for name, where in self.location.items() if where == receptacle)


def _read_view(facts: list[Any], names: Mapping[str, str]) -> _View:
    view = _View()
    for fact in facts:
        args = [names.get(v.name, v.name) for v in fact.arguments]
        if fact.name == "atrec":
            view.position = args[1]
        elif fact.name == "in" and fact.arguments[1].type == "I":
            view.held = args[0]
        elif fact.name in ("in", "on"):
            view.location[args[0]] = args[1]
        elif fact.name == "open":
            view.opened.add(args[0])
        elif fact.name in ("clean", "hot", "cold"):
            view.states.setdefault(args[0], set()).add(fact.name)
        elif fact.name == "lit":
            view.lamp_on = True
    return view


@functools.cache
def _textworld() -> tuple[Any, Any]:
    """TextWorld and the knowledge base parsed from LOGIC, imported and built on first use (about 2 s)."""
    try:
        import textworld
    except ImportError:
        raise EnvError("household needs TextWorld: pip install -e '.[envs]' (or pip install textworld)") from None
    from textworld.generator.data import TEXT_GRAMMARS_PATH, KnowledgeBase
    from textworld.logic import GameLogic

    return textworld, KnowledgeBase(GameLogic.parse(LOGIC), TEXT_GRAMMARS_PATH)


def build_game(instance: Mapping[str, Any]) -> Any:
    """The TextWorld `Game` of a generated instance: the world from GameMaker, the goal as a quest."""
    textworld, kb = _textworld()
    from textworld.generator.game import Event, Quest
    from textworld.logic import Proposition

    options = textworld.GameOptions()
    options.kb = kb
    maker = textworld.GameMaker(options)
    room = maker.new_room(instance["scene"], desc="")
    maker.set_player(room)
    maker.add_fact("middle", maker.player)
    maker.add_fact("empty", maker.inventory)
    entities = {}
    for name, kind in instance["receptacles"]:
        entities[name] = maker.new(kind, name=name, desc="")
        room.add(entities[name])
        if kind in _OPENABLE:
            maker.add_fact("closed", entities[name])
    for name, where in instance["objects"]:
        entities[name] = maker.new("o", name=name, desc="")
        entities[where].add(entities[name])
        maker.add_fact("dirty", entities[name])
        maker.add_fact("roomtemp", entities[name])
    if instance.get("lamp"):
        name, where = instance["lamp"]
        entities[name] = maker.new("lamp", name=name, desc="")
        room.add(entities[name])
        maker.add_fact("stands", entities[name], entities[where])
        maker.add_fact("off", entities[name])

    def fact(name: str, *args: Any) -> Any:
        return Proposition(name, [arg.var for arg in args])

    def placed(obj: str, target: str) -> Any:
        kind = dict(map(tuple, instance["receptacles"]))[target]
        return fact("in" if kind in _OPENABLE else "on", entities[obj], entities[target])

    task, goal_objects, targets = instance["task"], _goal_objects(instance), _targets(instance)
    if task == "look_at_obj_in_light":
        lamp, lamp_place = instance["lamp"]
        events = [[fact("in", entities[x], maker.inventory), fact("lit", entities[lamp]),
                   fact("atrec", maker.player, entities[lamp_place])] for x in goal_objects]  # fmt: skip
    elif task == "pick_two_obj_and_place":
        events = [[placed(x, r), placed(y, r)] for x, y in itertools.combinations(goal_objects, 2) for r in targets]
    elif task in _TRANSFORMS:
        state = _TRANSFORMS[task][1]
        events = [[fact(state, entities[x]), placed(x, r)] for x in goal_objects for r in targets]
    else:
        events = [[placed(x, r)] for x in goal_objects for r in targets]
    sentence = instance["goal"]
    maker.quests = [Quest(win_events=[Event(conditions=conditions) for conditions in events], desc=sentence)]
    game = maker.build()
    game.objective = f"Your task is to: {sentence}"
    return game


def _goal_objects(instance: Mapping[str, Any]) -> list[str]:
    return [name for name, _ in instance["objects"] if name.split()[0] == instance["object"]]


def _targets(instance: Mapping[str, Any]) -> list[str]:
    return [name for name, _ in instance["receptacles"] if name.split()[0] == instance["target"]]


def game_file(instance: Mapping[str, Any]) -> Path:
    """The cached TextWorld game file of an instance, built and saved on first use.

    The file name hashes the instance and LOGIC together, so a change to either builds anew.
    """
    key = hashlib.sha256((canonical_json(instance) + LOGIC).encode()).hexdigest()[:24]
    path = cache_dir() / f"{key}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        build_game(instance).save(str(partial))
        # Another process may write the same file at the same time; both write the same game.
        os.replace(partial, path)
    return path


def alfworld_games(root: str | os.PathLike[str]) -> list[str]:
    """ALFWorld's game files under `root` (relative paths, sorted): json_2.1.1/<split>/<task>/<trial>/game.tw-pddl."""
    found = glob.glob(os.path.join(glob.escape(str(root)), "json_2.1.1", "**", "game.tw-pddl"), recursive=True)
    return sorted(os.path.relpath(path, root) for path in found)


def _alfworld_names(entity_ids: list[str]) -> dict[str, str]:
    """ALFWorld's entity ids ("Apple_bar__minus_01_dot_23…") as "apple 1", numbered per class in id order."""
    counts: dict[str, int] = {}
    names = {}
    for entity_id in sorted(entity_ids):
        kind = entity_id.split("_bar_")[0].lower()
        counts[kind] = counts.get(kind, 0) + 1
        names[entity_id] = f"{kind} {counts[kind]}"
    return names


class Household(TextEnv):
    """ALFWorld-style household tasks (pick and place, clean, heat, cool, examine in light, pick two)."""

    id = "household"
    default_max_steps = 60
    description = "ALFWorld-style household tasks in a room of numbered receptacles, played by TextWorld."
    criteria = (
        "The score is the share of the task's goal conditions that hold: placing tasks need the object in "
        "(or on) a receptacle of the named kind, after cleaning, heating or cooling it where the task says so, "
        "or two of them in the same receptacle; the light task needs the object in hand, the desk lamp on and "
        "the player at the lamp. Success when all hold."
    )

    def __init__(
        self,
        *,
        task: str = "any",
        source: str = "generated",
        max_steps: int | None = None,
        instances: Any = None,
    ):
        self.task = choice_knob("task", task, ("any", *TASK_TYPES))
        self.source = choice_knob("source", source, SOURCES)
        self._alfworld_root: str | None = None
        self._alfworld_games: list[str] = []
        if self.source == "alfworld":
            self._alfworld_root, self._alfworld_games = _alfworld_setup()
        super().__init__(max_steps=max_steps, instances=instances, task=self.task, source=self.source)
        self._tw: Any = None
        self._names: dict[str, str] = {}
        self._view = _View()
        self._intro = ""
        # The valid commands of the episode, for copying an ALFWorld game by replaying them.
        self._commands: list[str] = []

    # -- instances ------------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        """A task drawn from `random.Random(seed)`; with source="alfworld", the seed-th game file."""
        if self.source == "alfworld":
            if not 0 <= seed < len(self._alfworld_games):
                raise EnvError(f"household: seed {seed} is outside the {len(self._alfworld_games)} ALFWorld games")
            return {"game": self._alfworld_games[seed]}
        rng = random.Random(seed)
        task = self.task if self.task != "any" else rng.choice(TASK_TYPES)
        if task in _TRANSFORMS:
            scene = "kitchen"
        elif task == "look_at_obj_in_light":
            scene = "bedroom"
        else:
            scene = rng.choice(sorted(_RECEPTACLES))
        receptacles = []
        for cls, kind, low, high in _RECEPTACLES[scene]:
            receptacles += [[f"{cls} {i}", kind] for i in range(1, rng.randint(low, high) + 1)]
        classes = {name.split()[0] for name, _ in receptacles}
        appliance = _TRANSFORMS[task][2] if task in _TRANSFORMS else None
        targets = [cls for cls in _TARGETS[scene] if cls in classes and cls != appliance]
        target = rng.choice(targets)
        pool = _TRANSFORMS[task][0] if task in _TRANSFORMS else _OBJECTS[scene]
        obj = rng.choice(pool)
        wanted = rng.randint(2, 3) if task == "pick_two_obj_and_place" else rng.randint(1, 2)
        others = rng.sample([cls for cls in _OBJECTS[scene] if cls != obj], rng.randint(4, 7))
        # Goal objects never start in a receptacle of the target kind, so no task is solved at the start.
        away = [name for name, _ in receptacles if name.split()[0] != target]
        objects = [[f"{obj} {i}", rng.choice(away)] for i in range(1, wanted + 1)]
        for cls in others:
            objects += [[f"{cls} {i}", rng.choice(receptacles)[0]] for i in range(1, rng.randint(1, 2) + 1)]
        lamp = None
        if scene == "bedroom":
            lamp = [_LAMP, rng.choice([name for name, _ in receptacles if name.split()[0] in ("desk", "sidetable")])]
        return {
            "task": task, "scene": scene, "object": obj, "target": target, "goal": task_sentence(task, obj, target),
            "receptacles": receptacles, "objects": objects, "lamp": lamp,
        }  # fmt: skip

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        if self.source == "alfworld":
            if not isinstance(instance.get("game"), str):
                raise EnvError("an ALFWorld instance needs 'game', a game file path under ALFWORLD_DATA")
            return
        try:
            if instance["task"] not in TASK_TYPES:
                raise EnvError(f"unknown task type {instance['task']!r}")
            kinds = dict(map(tuple, instance["receptacles"]))
            if any(kind not in _KINDS for kind in kinds.values()):
                raise EnvError(f"receptacle kinds must be among {', '.join(_KINDS)}")
            held_in = [where for _, where in instance["objects"]] + ([instance["lamp"][1]] if instance["lamp"] else [])
            missing = sorted({where for where in held_in if where not in kinds})
            if missing:
                raise EnvError(f"objects sit in unknown receptacles: {', '.join(missing)}")
            if not _goal_objects(instance) or not _targets(instance):
                raise EnvError("the task's object or target receptacle does not exist")
            if instance["task"] in _TRANSFORMS and _TRANSFORMS[instance["task"]][2] + " 1" not in kinds:
                raise EnvError(f"the task needs {_TRANSFORMS[instance['task']][2]} 1")
            if instance["task"] == "look_at_obj_in_light" and not instance["lamp"]:
                raise EnvError("the light task needs a lamp")
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvError(f"malformed household instance ({type(exc).__name__}: {exc})") from None

    # -- playing ------------------------------------------------------------------------
    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        textworld, _ = _textworld()
        if self.source == "alfworld":
            assert self._alfworld_root is not None
            infos = textworld.EnvInfos(admissible_commands=True, won=True, policy_commands=True)
            self._tw = textworld.start(os.path.join(self._alfworld_root, instance["game"]), infos)
            # TextWorld's PDDL engine names entities by their ids; ALFWorld shows "apple 1".
            self._names = _alfworld_names(list(self._tw._entity_infos))
            for entity_id, info in self._tw._entity_infos.items():
                info.name = self._names[entity_id]
        else:
            self._tw = textworld.start(str(game_file(instance)), textworld.EnvInfos(admissible_commands=True, won=True))
            self._names = {key: info.name for key, info in self._tw._game.infos.items() if info.name}
        state = self._tw.reset()
        self._commands = []
        self._intro = state.feedback.strip()
        self._view = _read_view(state["_facts"], self._names)

    def _step(self, action: str) -> tuple[bool, bool, str]:
        command = normalize_command(action)
        if command not in self._tw.state["admissible_commands"]:
            return False, False, "Nothing happens."
        before = self._view
        state, _, _ = self._tw.step(command)
        self._commands.append(command)
        self._view = _read_view(state["_facts"], self._names)
        if self.source == "alfworld":
            return True, False, state.feedback.strip()
        return True, False, self._feedback(command, before)

    def _feedback(self, command: str, before: _View) -> str:
        """ALFWorld's answer to a command that TextWorld has just applied."""
        view = self._view
        verb, _, rest = command.partition(" ")
        if verb == "go":
            return f"You arrive at {view.position}. {self._describe(view.position)}"
        if verb == "open":
            return f"You open the {rest}. {self._describe(rest)}"
        if verb == "close":
            return f"You close the {rest}."
        if verb == "take":
            obj, _, place = rest.partition(" from ")
            return f"You pick up the {obj} from the {place}."
        if verb == "put":
            obj, _, place = rest.partition(" in/on ")
            return f"You put the {obj} in/on the {place}."
        if verb in ("clean", "heat", "cool"):
            obj, _, tool = rest.partition(" with ")
            return f"You {verb} the {obj} using the {tool}."
        if verb == "use":
            return f"You turn on the {rest}."
        if verb == "examine":
            if rest == view.held:
                states = sorted(_TEMPERATURE_WORDS.get(s, s) for s in view.states.get(rest, ()))
                return f"The {rest} is {' and '.join(states)}." if states else f"There's nothing special about {rest}."
            return self._describe(rest)
        if verb == "inventory":
            return f"You are carrying: a {view.held}." if view.held else "You are not carrying anything."
        return self._surroundings()  # look

    def _describe(self, receptacle: str | None) -> str:
        """What the player sees of a receptacle: closed, or what lies in (on) it."""
        assert receptacle is not None
        kind = self._kind(receptacle)
        things = self._view.contents(receptacle)
        if self.instance and self.instance.get("lamp") and self.instance["lamp"][1] == receptacle:
            things = sorted([*things, self.instance["lamp"][0]])
        seen = _listing(things) if things else "nothing"
        if kind in _OPENABLE:
            if receptacle not in self._view.opened:
                return f"The {receptacle} is closed."
            return f"The {receptacle} is open. In it, you see {seen}."
        return f"On the {receptacle}, you see {seen}."

    def _kind(self, receptacle: str) -> str:
        assert self.instance is not None
        return dict(map(tuple, self.instance["receptacles"]))[receptacle]

    def _surroundings(self) -> str:
        if self._view.position is None:
            assert self.instance is not None
            names = [name for name, _ in self.instance["receptacles"]]
            return f"You are in the middle of a room. Looking quickly around you, you see {_listing(names)}."
        return f"You are facing the {self._view.position}."

    def render(self) -> str:
        if self.source == "alfworld":
            # ALFWorld's text comes from its own grammar; the first observation is its introduction,
            # which holds the task, and later ones repeat the task line.
            task = re.search(r"Your task is to:.*", self._intro)
            return self._intro if not self.steps_taken else (task.group(0) if task else "")
        assert self.instance is not None
        held = f"You are carrying: a {self._view.held}." if self._view.held else "You are not carrying anything."
        return f"{self._surroundings()}\n{held}\nYour task is to: {self.instance['goal']}"

    def state_key(self) -> str:
        facts = []
        for fact in self._tw.state["_facts"]:
            if fact.name not in _STATIC:
                facts.append(f"{fact.name}({','.join(self._names.get(v.name, v.name) for v in fact.arguments)})")
        return ";".join(sorted(facts))

    def score(self) -> float:
        if self.source == "alfworld":
            return 1.0 if self.is_success() else 0.0
        met, total = self.goal_conditions()
        return met / total

    def goal_conditions(self) -> tuple[int, int]:
        """(conditions met, conditions) of the generated task, for the instance closest to done.

        Placing: 1 condition (an object of the class in a target receptacle). Clean, heat, cool:
        2 (the object has the state; that object is in a target). Pick two: 2 (one, then two
        objects of the class in the same target). Light: 3 (the object in hand, the lamp on, the
        player at the lamp).
        """
        assert self.instance is not None
        view, task = self._view, self.instance["task"]
        objects, targets = _goal_objects(self.instance), set(_targets(self.instance))
        if task == "look_at_obj_in_light":
            at_lamp = view.position == self.instance["lamp"][1]
            return int(view.held in objects) + int(view.lamp_on) + int(at_lamp), 3
        if task == "pick_two_obj_and_place":
            best = max(sum(view.location.get(x) == r for x in objects) for r in targets)
            return min(best, 2), 2
        if task in _TRANSFORMS:
            state = _TRANSFORMS[task][1]
            best = max(
                int(state in view.states.get(x, ())) * (1 + int(view.location.get(x) in targets)) for x in objects
            )
            return best, 2
        return int(any(view.location.get(x) in targets for x in objects)), 1

    def is_success(self) -> bool:
        return bool(self._tw.state["won"])

    def _admissible_actions(self) -> list[str]:
        return list(self._tw.state["admissible_commands"])

    def _oracle_action(self) -> str:
        if self.source == "alfworld":
            # TextWorld's PDDL engine replans with Fast Downward after every step.
            plan = self._tw.state["policy_commands"]
            if not plan:
                raise EnvError("household: TextWorld's planner found no walkthrough from this state")
            return plan[0]
        return self._plan()

    def _plan(self) -> str:
        """The next command of a plan from the current state (a planner over TextWorld's facts)."""
        assert self.instance is not None
        view, task = self._view, self.instance["task"]
        objects = _goal_objects(self.instance)
        targets = _targets(self.instance)
        if task == "look_at_obj_in_light":
            if view.held not in objects:
                return self._fetch(sorted(objects, key=self._distance))
            lamp, lamp_place = self.instance["lamp"]
            return self._go(lamp_place) or f"use {lamp}"
        if task == "pick_two_obj_and_place":
            # The target already holding the most goal objects (ties: the first by name).
            target = max(targets, key=lambda r: (sum(view.location.get(x) == r for x in objects), -targets.index(r)))
            loose = [x for x in objects if view.location.get(x) != target]
            if view.held in loose:
                return self._deliver(view.held, target)
            return self._fetch(sorted(loose, key=self._distance))
        state = _TRANSFORMS[task][1] if task in _TRANSFORMS else None
        if view.held in objects:
            if state and state not in view.states.get(view.held, ()):
                appliance = _TRANSFORMS[task][2] + " 1"
                verb = {"clean": "clean", "hot": "heat", "cold": "cool"}[state]
                # The appliances work closed, as in ALFWorld: no need to open them.
                return f"go to {appliance}" if view.position != appliance else f"{verb} {view.held} with {appliance}"
            return self._deliver(view.held, targets[0])
        # Prefer an object that already has the state the task asks for, then the nearest.
        ready = sorted(objects, key=lambda x: (state is not None and state not in view.states.get(x, ()),
                                               self._distance(x)))  # fmt: skip
        return self._fetch(ready)

    def _distance(self, obj: str) -> tuple[int, str]:
        """Objects in hand or where the player stands come first; then by name."""
        if obj == self._view.held:
            return (0, obj)
        return (1 if self._view.location.get(obj) == self._view.position else 2, obj)

    def _go(self, receptacle: str) -> str | None:
        """The command that reaches and opens `receptacle`, None when the player is there and it is open."""
        if self._view.position != receptacle:
            return f"go to {receptacle}"
        if self._kind(receptacle) in _OPENABLE and receptacle not in self._view.opened:
            return f"open {receptacle}"
        return None

    def _deliver(self, obj: str, target: str) -> str:
        return self._go(target) or f"put {obj} in/on {target}"

    def _fetch(self, candidates: list[str]) -> str:
        """Free the hand, then go to the first candidate and take it."""
        view = self._view
        if view.held is not None:
            # Put whatever is in hand down where the player stands (opening it first if needed).
            place = view.position
            assert place is not None  # the hand is empty until the player has gone somewhere
            return self._go(place) or f"put {view.held} in/on {place}"
        obj = candidates[0]
        place = view.location[obj]
        return self._go(place) or f"take {obj} from {place}"

    @property
    def instruction(self) -> str:
        return (
            "You are in a household room with numbered receptacles (countertop 1, cabinet 2, fridge 1, ...) "
            "and objects (apple 1, mug 2, ...). Complete the task that the first observation states.\n"
            "Actions (use the exact names you were shown):\n"
            "  go to X: walk to receptacle X and see what is in or on it\n"
            "  open X / close X: open or close a cabinet, drawer, fridge, microwave or safe\n"
            "  take A from X: pick up object A from receptacle X (you hold one object at a time)\n"
            "  put A in/on X: put the object you hold in or on receptacle X\n"
            "  clean A with X: clean the object you hold at sinkbasin X\n"
            "  heat A with X: heat the object you hold with microwave X\n"
            "  cool A with X: cool the object you hold with fridge X\n"
            "  use X: switch on desk lamp X where you stand\n"
            "  examine X: look at a receptacle here or the object you hold\n"
            "  look: what is around you; inventory: what you hold\n"
            "A closed receptacle must be opened before taking from it or putting into it. "
            "A command that is not possible changes nothing and answers \"Nothing happens.\""
        )

    def close(self) -> None:
        """Stop the TextWorld game in play (for ALFWorld games, its PDDL engine); `reset` starts a new one."""
        game, self._tw = self._tw, None
        if game is not None:
            game.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> Household:
        if self.source == "alfworld" and self._tw is not None:
            # TextWorld's PDDL engine keeps its state inside Fast Downward: replay into a new one.
            replica = Household(**self.config)
            replica.reset(self.seed)
            for command in self._commands:
                replica._step(command)
            replica.steps_taken, replica.done = self.steps_taken, self.done
            return replica
        clone = copy.copy(self)
        for key, value in self.__dict__.items():
            if key not in ("_tw", "instance_file"):
                setattr(clone, key, copy.deepcopy(value, memo))
        clone._tw = None if self._tw is None else _fork(self._tw)
        return clone


def _fork(tw: Any) -> Any:
    """An independent copy of a TextWorld environment in play, sharing its (unchanging) game.

    TextWorld's own `copy` deep-copies every value of the current game state, the whole game
    included (about 80 ms here, and the contract checker copies twice per step). Only the game
    progression changes in place during play; each step builds a new state dictionary and
    never alters the old one, so a shallow copy of the state is enough.
    """
    from textworld.core import GameState

    clone = copy.copy(tw)
    clone.state = GameState(tw.state)
    if tw._game_progression is not None:
        clone._game_progression = tw._game_progression.copy()
    return clone


def _alfworld_setup() -> tuple[str, list[str]]:
    """ALFWorld's data folder and its game files; EnvError when they or TextWorld's PDDL engine are missing."""
    root = os.environ.get("ALFWORLD_DATA")
    if not root:
        raise EnvError(
            "household: source='alfworld' plays ALFWorld's game files, and ALFWORLD_DATA is not set; download "
            "them with ALFWorld's `alfworld-download` and set ALFWORLD_DATA to that folder"
        )
    games = alfworld_games(root)
    if not games:
        raise EnvError(f"household: no ALFWorld game files (json_2.1.1/**/game.tw-pddl) under ALFWORLD_DATA={root}")
    try:
        import fast_downward  # noqa: F401  - TextWorld's PDDL engine plans with it
    except ImportError:
        raise EnvError(
            "household: ALFWorld's games need TextWorld's PDDL engine: pip install fast-downward-textworld"
        ) from None
    return root, games
