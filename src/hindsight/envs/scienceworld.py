"""ScienceWorld (Wang et al., 2022): elementary-science experiments in a simulated house.

This wraps the real benchmark from PyPI (`scienceworld` 1.2.3): a Scala simulator that
runs in its own JVM and is driven over py4j. The wrapper talks to the simulator's own
Python-facing interface (`scienceworld.runtime.pythonapi.PythonInterface`, the object
`scienceworld.ScienceWorldEnv` drives) rather than through `ScienceWorldEnv`, for three
reasons: `ScienceWorldEnv.step` fetches every valid action one py4j round trip at a time
on every step (about four times slower than one step here); it cannot put a timeout on
a call; and its JVM is started without the option that makes the simulator reproducible
(see `JVM_OPTIONS`).

Seeds name (task, variation) pairs of the benchmark's own splits: see `ScienceWorld` and
docs/envs.md. One JVM serves an environment object across resets; closed or collected
environments hand theirs to a small per-process pool so that the next one (a deep copy,
a replacement after a failure) need not wait seconds for a JVM to start.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import hashlib
import json
import re
import shutil
import threading
from collections.abc import Mapping
from typing import Any

from hindsight.envs.base import TextEnv, float_knob, int_knob
from hindsight.envs.contract import SPLITS, EnvError, EnvFailure

#: Variations per task in the benchmark's train, dev and test splits (scienceworld 1.2.3),
#: in the benchmark's task order (1-1 ... 10-2). Each split is a contiguous range of
#: variation indices, train first. Kept here so that seeds and splits are known without a
#: JVM; every load checks the loaded task's splits against this table.
TASK_SPLITS: dict[str, tuple[int, int, int]] = {
    "boil": (14, 7, 9),
    "melt": (14, 7, 9),
    "freeze": (14, 7, 9),
    "change-the-state-of-matter-of": (14, 7, 9),
    "use-thermometer": (270, 135, 135),
    "measure-melting-point-known-substance": (218, 109, 109),
    "measure-melting-point-unknown-substance": (150, 75, 75),
    "power-component": (10, 5, 5),
    "power-component-renewable-vs-nonrenewable-energy": (10, 5, 5),
    "test-conductivity": (450, 225, 225),
    "test-conductivity-of-unknown-substances": (300, 150, 150),
    "find-living-thing": (150, 75, 75),
    "find-non-living-thing": (150, 75, 75),
    "find-plant": (150, 75, 75),
    "find-animal": (150, 75, 75),
    "grow-plant": (62, 31, 33),
    "grow-fruit": (62, 31, 33),
    "chemistry-mix": (16, 8, 8),
    "chemistry-mix-paint-secondary-color": (18, 9, 9),
    "chemistry-mix-paint-tertiary-color": (18, 9, 9),
    "lifespan-longest-lived": (62, 31, 32),
    "lifespan-shortest-lived": (62, 31, 32),
    "lifespan-longest-lived-then-shortest-lived": (62, 31, 32),
    "identify-life-stages-1": (6, 3, 5),
    "identify-life-stages-2": (4, 2, 4),
    "inclined-plane-determine-angle": (84, 42, 42),
    "inclined-plane-friction-named-surfaces": (692, 346, 348),
    "inclined-plane-friction-unnamed-surfaces": (80, 40, 42),
    "mendelian-genetics-known-plant": (60, 30, 30),
    "mendelian-genetics-unknown-plant": (240, 120, 120),
}
#: The benchmark's task ids ("1-1" is boil), in the order of TASK_SPLITS.
TASK_IDS: dict[str, str] = dict(zip(
    ["1-1", "1-2", "1-3", "1-4", "2-1", "2-2", "2-3", "3-1", "3-2", "3-3", "3-4", "4-1", "4-2", "4-3", "4-4",
     "5-1", "5-2", "6-1", "6-2", "6-3", "7-1", "7-2", "7-3", "8-1", "8-2", "9-1", "9-2", "9-3", "10-1", "10-2"],
    TASK_SPLITS, strict=True))
ALL_TASKS = "all"
#: The benchmark's simplifications; "easy" is all of them but noElectricalAction on the
#: electrical tasks (the simulator drops it there itself).
SIMPLIFICATIONS = ("teleportAction", "openDoors", "selfWateringFlowerPots", "openContainers", "noElectricalAction")
EASY = "easy"
#: Tasks that need `connect` actions, which noElectricalAction removes.
ELECTRICAL_TASKS = tuple(task for task in TASK_SPLITS if "power-component" in task or "conductivity" in task)

#: The simulator's identity hash codes decide the order in which hash-based containers
#: list objects, and so the order of a room's contents and of some simulation updates
#: (bees, circuits). By default they differ between JVM runs, so the gold path gave
#: different observations in two JVMs for 25 of 60 sampled variations. A constant identity
#: hash makes those containers iterate in insertion order; the diverging variations
#: re-tested then replayed identically, with no loss of speed we could measure.
JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
JAVA_MISSING = (
    "scienceworld needs Java (a JVM runs the simulator) and no `java` is on PATH; "
    "install it, e.g. `apt-get install default-jre-headless`"
)
_NO_MATCH = "No known action matches that input."
_AMBIGUOUS = "Ambiguous request"
_ROOM = re.compile(r"(?:This room is called|This outside location is called) the (.+?)\.")
_NUMBER = re.compile(r"^\s*\d+\s*$")
#: Idle JVMs kept per process for the next environment; more are shut down.
_POOL_LIMIT = 2

TEMPLATES = (
    ("look around", "describe the room you are in"),
    ("look at OBJ", "describe an object"),
    ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note or a book"),
    ("inventory", "list what you carry"),
    ("task", "repeat the task"),
    ("teleport to LOC", "move to any room in one step"),
    ("go to LOC", "move to a neighbouring room (through an open door)"),
    ("open OBJ / close OBJ", "open or close a door or a container"),
    ("activate OBJ / deactivate OBJ", "switch a device on or off"),
    ("pick up OBJ", "move an object to your inventory"),
    ("put down OBJ", "drop an object from your inventory"),
    ("move OBJ to OBJ", "put an object into or onto a container"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix the contents of a container"),
    ("use OBJ on OBJ", "use a device or tool (on an object)"),
    ("connect OBJ to OBJ / disconnect OBJ", "wire electrical components (electrical tasks)"),
    ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "declare the object the task is about; focusing on a wrong one fails the task"),
    ("wait / wait1", "let 10 / 1 time steps pass"),
)


def _canonical_task(value: Any) -> str:
    """A task name, from its name, its benchmark id ("1-1") or "all"."""
    text = str(value).strip()
    if text.lower() == ALL_TASKS:
        return ALL_TASKS
    if text in TASK_SPLITS:
        return text
    if text in TASK_IDS:
        return TASK_IDS[text]
    raise EnvError(f"unknown ScienceWorld task {value!r}; use 'all', a task id (1-1 ... 10-2) or one of: "
                   f"{', '.join(TASK_SPLITS)}")


def _canonical_simplification(value: Any, task: str) -> str:
    """The simplification string the simulator takes: easy, empty (none) or a comma-separated subset."""
    text = "" if value is None else str(value).strip()
    if text.lower() == EASY:
        return EASY
    if text.lower() in ("", "none"):
        return ""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in SIMPLIFICATIONS]
    if unknown:
        raise EnvError(f"unknown simplification {unknown[0]!r}; use 'easy', 'none' or a comma-separated list of "
                       f"{', '.join(SIMPLIFICATIONS)}")
    if "noElectricalAction" in chosen and (task == ALL_TASKS or task in ELECTRICAL_TASKS):
        tasks = "task='all' includes electrical tasks" if task == ALL_TASKS else f"{task} is an electrical task"
        raise EnvError(f"simplification noElectricalAction removes the connect actions, but {tasks}; "
                       "use 'easy', which keeps them for the electrical tasks")
    return ",".join(part for part in SIMPLIFICATIONS if part in chosen)


def _split_ranges(task: str) -> dict[str, range]:
    """The variation indices of each split of a task."""
    train, dev, test = TASK_SPLITS[task]
    return {"train": range(train), "validation": range(train, train + dev),
            "test": range(train + dev, train + dev + test)}


@functools.cache
def seed_table(task: str) -> tuple[tuple[str, int, str], ...]:
    """(task, variation, split) of every seed, in seed order.

    The train variations come first, then the dev ones (the validation split), then the
    test ones. Within each split the tasks take turns, in the benchmark's task order: the
    first variation of every task, then the second of every task that has one, and so on,
    so any run of consecutive seeds spreads over the tasks. For one task this makes the
    seed the variation index.
    """
    tasks = list(TASK_SPLITS) if task == ALL_TASKS else [task]
    table = []
    for split in SPLITS:
        ranges = [_split_ranges(name)[split] for name in tasks]
        for turn in range(max(len(r) for r in ranges)):
            table += [(name, r[turn], split) for name, r in zip(tasks, ranges, strict=True) if turn < len(r)]
    return tuple(table)


# -- the JVM --------------------------------------------------------------------------------
class Simulator:
    """One ScienceWorld JVM and its py4j gateway; every call has a timeout.

    Any failure of a call (the JVM died, hung past the timeout, or threw) kills the JVM and
    raises EnvFailure: the simulator's state is then unknown, so it is never reused.
    """

    def __init__(self, timeout: float):
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        self.timeout = timeout
        try:
            port, self._process = launch_gateway(
                classpath=JAR_PATH, javaopts=list(JVM_OPTIONS), die_on_exit=True, cwd=BASEPATH, return_proc=True
            )
        except Exception as exc:  # noqa: BLE001 - py4j reports a JVM that would not start in several ways
            raise EnvFailure(f"scienceworld: the JVM did not start: {exc}") from None
        # py4j's memory management frees Java objects from Python finalizers; run at the end of
        # a pytest session, one of them interrupted an ast.parse and tripped CPython 3.11's
        # "AST constructor recursion depth mismatch" (seen here). The few lists a load returns
        # are left to the JVM instead.
        self._gateway = JavaGateway(
            gateway_parameters=GatewayParameters(
                port=port, auto_field=True, read_timeout=timeout, enable_memory_management=False
            ),
            java_process=self._process,
        )
        self.dead = False
        self._server = self.call("start", lambda: self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface())

    @property
    def pid(self) -> int:
        return self._process.pid

    def call(self, what: str, run: Any) -> Any:
        """Run one py4j call; a failure of any kind becomes EnvFailure and ends this JVM."""
        from py4j.protocol import Py4JError

        if self.dead:
            raise EnvFailure(f"scienceworld: the JVM (pid {self.pid}) is gone; reset() starts a new one")
        try:
            return run()
        except (Py4JError, OSError) as exc:
            self.kill()
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EnvFailure(f"scienceworld: the JVM (pid {self.pid}) failed during {what} "
                             f"(timeout {self.timeout:g} s): {reason}") from None

    def server(self, method: str, *args: Any) -> Any:
        return self.call(method, lambda: getattr(self._server, method)(*args))

    def kill(self) -> None:
        self.dead = True
        # The connection may already be broken; the kill below is what matters.
        with contextlib.suppress(Exception):
            self._gateway.close()
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def alive(self) -> bool:
        return not self.dead and self._process.poll() is None


_POOL: list[Simulator] = []
_POOL_LOCK = threading.Lock()


def _acquire(timeout: float) -> Simulator:
    with _POOL_LOCK:
        for index, simulator in enumerate(_POOL):
            if simulator.timeout == timeout and simulator.alive():
                return _POOL.pop(index)
    return Simulator(timeout)


def _release(simulator: Simulator) -> None:
    if not simulator.alive():
        return
    with _POOL_LOCK:
        if len(_POOL) < _POOL_LIMIT:
            _POOL.append(simulator)
            return
    simulator.kill()


@atexit.register
def _drain_pool() -> None:
    while _POOL:
        _POOL.pop().kill()


# Gold action sequences by (task, variation, simplification): generating one costs a
# load of up to ten seconds, and every episode of the same variation shares it.
_GOLD: dict[tuple[str, int, str], tuple[str, ...]] = {}


def _normalise(action: str) -> str:
    return " ".join(action.lower().split())


# -- the environment --------------------------------------------------------------------------
class ScienceWorld(TextEnv):
    """ScienceWorld: run elementary-science experiments in a simulated house (Java simulator).

    Seed s is the s-th entry of `seed_table(task)`: the benchmark's train variations are
    the train split, its dev variations the validation split and its test variations the
    test split. With one task the seed is the variation index.
    """

    id = "scienceworld"
    oracle_replans = False  # the benchmark's gold paths: a random detour can move what they need
    #: ScienceWorld's own step limit (`ScienceWorldEnv(envStepLimit=100)`).
    default_max_steps = 100
    description = "ScienceWorld's 30 science tasks (boil water, grow a plant, build a circuit, ...) in a Java simulator."
    criteria = (
        "ScienceWorld's own score: the share of the task's subgoals reached (in order for the main ones), out of "
        "100, divided by 100. Focusing on a wrong object or otherwise breaking the task ends the episode with a "
        "score of 0. Success means the simulator marks the task completed (score 100)."
    )

    def __init__(
        self,
        *,
        task: str = ALL_TASKS,
        simplification: str = EASY,
        max_admissible: int = 100,
        timeout: float = 60.0,
        max_steps: int | None = None,
        instances: Any = None,
    ):
        self.task = _canonical_task(task)
        self.simplification = _canonical_simplification(simplification, self.task)
        self.max_admissible = int_knob("max_admissible", max_admissible, 1, 10_000)
        self.timeout = float_knob("timeout", timeout, 0.01, 3600.0)
        try:
            import scienceworld  # noqa: F401 - only its presence is checked here; the JVM starts at reset
        except ImportError:
            raise EnvError("scienceworld is not installed: pip install -e '.[envs]' (or pip install scienceworld)") from None
        if shutil.which("java") is None:
            raise EnvError(JAVA_MISSING)
        super().__init__(
            max_steps=max_steps,
            instances=instances,
            task=self.task,
            simplification=self.simplification,
            max_admissible=self.max_admissible,
            timeout=self.timeout,
        )
        self._sim: Simulator | None = None
        # What was sent to the simulator since the last load (ambiguity answers included),
        # so that a deep copy or a gold-path lookup can rebuild the state by replaying it.
        self._sent: list[str] = []
        # (action, room after it) of every valid step, for the oracle.
        self._history: list[tuple[str, str]] = []
        self._start_room = ""
        self._look = self._inventory = self._task_text = ""
        self._raw_score = 0
        self._completed = False
        self._admissible: list[str] | None = None

    # -- JVM ------------------------------------------------------------------------
    @property
    def jvm_pid(self) -> int | None:
        """The process id of this environment's JVM (None before the first reset or after a failure)."""
        return self._sim.pid if self._sim is not None and self._sim.alive() else None

    def _simulator(self) -> Simulator:
        if self._sim is None or not self._sim.alive():
            self._sim = _acquire(self.timeout)
        return self._sim

    def _live(self) -> Simulator:
        """The JVM holding the current episode; a lost one is an EnvFailure until the next reset."""
        if self._sim is None or not self._sim.alive():
            self._sim = None
            raise EnvFailure("scienceworld: the JVM of this episode is gone; reset() starts a new one")
        return self._sim

    def close(self) -> None:
        """Hand the JVM to the per-process pool of idle JVMs (it is shut down when the pool is full)."""
        simulator, self._sim = self._sim, None
        if simulator is not None:
            _release(simulator)

    def __del__(self) -> None:
        # At interpreter exit the pool may already be gone; die_on_exit ends the JVM then.
        with contextlib.suppress(Exception):
            self.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> ScienceWorld:
        """A JVM cannot be copied: the copy loads the same variation in its own JVM and replays the episode."""
        clone = type(self)(**{key: value for key, value in self.config.items() if key != "instances"},
                           instances=self.instance_file)
        if self.instance is not None:
            clone.seed, clone.instance = self.seed, copy.deepcopy(self.instance)
            clone._load(clone.instance)
            simulator = clone._live()
            for command in self._sent:
                simulator.server("step", command)
            clone._sent = list(self._sent)
            clone._history, clone._start_room = list(self._history), self._start_room
            clone._observe()
            clone.steps_taken, clone.done = self.steps_taken, self.done
        return clone

    # -- instances ------------------------------------------------------------------
    def generate_instance(self, seed: int) -> dict[str, Any]:
        table = seed_table(self.task)
        if not 0 <= seed < len(table):
            raise EnvError(f"scienceworld: seed {seed} is out of range; task={self.task!r} has {len(table)} "
                           f"variations, seeds 0..{len(table) - 1}")
        task, variation, _ = table[seed]
        return {"task": task, "variation": variation}

    def check_instance(self, instance: Mapping[str, Any]) -> None:
        task = instance.get("task")
        if task not in TASK_SPLITS:
            raise EnvError(f"'task' must be one of the ScienceWorld tasks, got {task!r}")
        if self.task not in (ALL_TASKS, task):
            raise EnvError(f"the instance is a {task} task but the environment plays only {self.task}")
        variation = instance.get("variation")
        if isinstance(variation, bool) or not isinstance(variation, int) or not 0 <= variation < sum(TASK_SPLITS[task]):
            raise EnvError(f"'variation' must be an integer from 0 to {sum(TASK_SPLITS[task]) - 1} for {task}")

    def seed_split(self, seed: int) -> str:
        """The benchmark's split of the seed's variation (or the instance file's record)."""
        if self.instance_file is not None:
            return super().seed_split(seed)
        self.generate_instance(int(seed))  # range check
        return seed_table(self.task)[int(seed)][2]

    def split_seeds(self, split: str, n: int, start: int = 0) -> list[int]:
        """The first `n` seeds from `start` whose variations are in the benchmark's `split`."""
        if self.instance_file is not None or split not in SPLITS:
            return super().split_seeds(split, n, start)
        n = int(n)
        if n < 0:
            raise EnvError("the number of seeds must be >= 0")
        seeds = [seed for seed, (_, _, where) in enumerate(seed_table(self.task)) if where == split and seed >= start]
        if len(seeds) < n:
            raise EnvError(f"scienceworld: task={self.task!r} has {len(seeds)} {split} variations"
                           f"{f' from seed {start}' if start else ''}; {n} requested")
        return seeds[:n]

    # -- episodes -------------------------------------------------------------------
    def _load(self, instance: Mapping[str, Any], gold: bool = False) -> None:
        task, variation = instance["task"], int(instance["variation"])
        simulator = self._simulator()
        simulator.server("load", task, variation, self.simplification, gold)
        # As ScienceWorldEnv.reset does: the first move looks around, which also makes the
        # simulator report the fresh episode's score (it reports the previous one until a step).
        simulator.server("step", "look around")
        splits = [list(simulator.server(name)) for name in ("getVariationsTrain", "getVariationsDev", "getVariationsTest")]
        if splits != [list(r) for r in _split_ranges(task).values()]:
            raise EnvError(f"scienceworld: the installed simulator splits {task}'s variations differently from "
                           "hindsight's table (made for scienceworld 1.2.3)")
        self._task_text = simulator.server("freeActionTaskDesc").replace("Task Description:", "").strip()
        self._sent = []

    def _reset_instance(self, instance: Mapping[str, Any]) -> None:
        self._load(instance)
        self._history = []
        self._observe()
        self._start_room = self._room()

    def _observe(self) -> None:
        """Read the state the observation, score and state key are made of."""
        simulator = self._live()
        self._look = simulator.server("freeActionLook").strip()
        self._inventory = simulator.server("freeActionInventory").strip()
        self._raw_score = round(100 * float(simulator.server("getScore")))
        self._completed = bool(simulator.server("getCompleted"))
        self._admissible = None

    def _room(self) -> str:
        found = _ROOM.search(self._look)
        return found.group(1) if found else ""

    def _step(self, action: str) -> tuple[bool, bool, str]:
        simulator = self._live()
        if _normalise(action) == "reset task":
            return False, False, ("'reset task' is not available here: it would clear the task's progress "
                                  "without undoing anything. An episode starts over with reset().")
        response = simulator.server("step", action).strip()
        if response.startswith(_NO_MATCH):
            return False, False, f"{response} See the action list in the instructions."
        self._sent.append(action)
        if response.startswith(_AMBIGUOUS):
            # The simulator waits for a number naming one reading; answering 0 takes the first,
            # as the benchmark's gold paths do, so an ambiguous action still acts at once.
            readings = [line.split("\t", 1)[-1] for line in response.splitlines()[1:]]
            response = simulator.server("step", "0").strip()
            self._sent.append("0")
            response = f"(Ambiguous; took the first of {len(readings)} readings: {readings[0]}.) {response}"
        self._observe()
        self._history.append((action, self._room()))
        failed = self._raw_score < 0
        if failed:
            response += " The task has failed; the episode is over."
        return True, failed or self._completed, response

    # -- observation ----------------------------------------------------------------
    def render(self) -> str:
        return (f"Task: {self._task_text}\n{self._look}\n{self._inventory}\n"
                f"Score: {max(self._raw_score, 0)}/100.")

    def state_key(self) -> str:
        digest = hashlib.sha256(f"{self._look}\n{self._inventory}".encode()).hexdigest()[:16]
        return f"room={self._room()}|score={self._raw_score}|world={digest}"

    def score(self) -> float:
        return min(max(self._raw_score, 0), 100) / 100

    def is_success(self) -> bool:
        return self._completed and self._raw_score >= 0

    # -- oracle and actions ---------------------------------------------------------
    def gold_actions(self) -> tuple[str, ...]:
        """The benchmark's gold action sequence for the current variation (numbers answering
        ambiguity dropped: the environment answers those itself)."""
        if self.instance is None:
            raise EnvError("scienceworld: call reset() before gold_actions()")
        key = (self.instance["task"], int(self.instance["variation"]), self.simplification)
        if key not in _GOLD:
            simulator, sent = self._live(), list(self._sent)
            self._load(self.instance, gold=True)
            _GOLD[key] = tuple(a for a in simulator.server("getGoldActionSequence") if not _NUMBER.match(a))
            # Generating the path replaced the episode's state: load again and replay the episode.
            self._load(self.instance)
            for command in sent:
                simulator.server("step", command)
            self._sent = sent
            self._observe()
        return _GOLD[key]

    def _oracle_action(self) -> str:
        """The next gold action, after the gold actions this episode has taken so far.

        Other actions in between are skipped over; if they left the agent in another room
        than the last gold action did, the oracle first teleports back there (when the
        teleportAction simplification is on). From the start it is the plain gold path.
        """
        gold = self.gold_actions()
        done, room = 0, self._start_room
        for action, after in self._history:
            if done < len(gold) and _normalise(action) == _normalise(gold[done]):
                done, room = done + 1, after
        if done == len(gold):
            return "look around"
        teleport = self.simplification == EASY or "teleportAction" in self.simplification
        if teleport and room and self._room() != room:
            return f"teleport to {room}"
        return gold[done]

    def _admissible_actions(self) -> list[str]:
        """The simulator's valid action-object combinations, at most `max_admissible` of them.

        The simulator also lists combinations with objects the agent cannot see (a drawer in a
        closed cupboard), which its parser then refuses; only combinations whose objects are
        all in its table of observable objects are kept. They are grouped by action template
        (sorted within a group) and taken in turn from each template, so the bounded list
        still covers every kind of action.
        """
        if self._admissible is None:
            simulator = self._live()
            combos = json.loads(simulator.server("getValidActionObjectCombinationsJSON"))["validActions"]
            observable = json.loads(simulator.server("getPossibleObjectReferentLUTJSON"))
            groups: dict[int, set[str]] = {}
            for combo in combos:
                seen = all(str(obj) in observable for obj in combo["obj_ids"])
                if seen and _normalise(combo["action"]) != "reset task":
                    groups.setdefault(int(combo["template_id"]), set()).add(combo["action"])
            ordered = [sorted(groups[template]) for template in sorted(groups)]
            chosen: list[str] = []
            for turn in range(max((len(group) for group in ordered), default=0)):
                chosen += [group[turn] for group in ordered if turn < len(group)]
            self._admissible = chosen[: self.max_admissible]
        return list(self._admissible)

    @property
    def instruction(self) -> str:
        teleport = self.simplification == EASY or "teleportAction" in self.simplification
        lines = [f"  {template}: {meaning}" for template, meaning in TEMPLATES
                 if teleport or not template.startswith("teleport")]
        return (
            "You are in ScienceWorld, a simulated house (kitchen, bathroom, workshop, art studio, greenhouse, "
            "foundry, outside, and more) where you carry out an elementary-science task: the observation states "
            "it. You see the room you are in and your inventory. Act with one command per step, naming objects "
            "and rooms as the observation does (OBJ is an object, LOC a room):\n" + "\n".join(lines) + "\n"
            "Many tasks ask you to focus on the object they are about first; focusing on a wrong object fails the "
            "task. The score (out of 100) grows as you reach the task's subgoals; the task is done at 100."
        )
