"""An automatic audit of the environment contract.

`check_env("frozenlake")` plays an environment the way the rest of Hindsight relies on
it being played and lists every broken promise. It audits anything that implements the
contract (`hindsight.envs.contract.Env`), a `TextEnv` or not: nondeterministic resets or replays,
state keys that change with the process's hash seed, malformed `info`, scores outside
[0, 1], wrong truncation, crashes on junk input, a step accepted after the episode
ended, an oracle that fails, overlapping splits, a `close` that fails or spoils the next reset. It never raises for a broken
environment; it reports. Only a failure to build the environment at all (an unknown
id or keyword, an unreadable instance file) escapes, as EnvError.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hindsight.envs.actors import RayEnv
from hindsight.envs.base import TextEnv, instance_split
from hindsight.envs.contract import INFO_KEYS, SPLITS, Env, EnvError
from hindsight.envs.remote import RemoteEnv

#: Inputs no environment should accept. Each must be answered with valid=False.
GARBAGE_ACTIONS: tuple[Any, ...] = (
    "",
    "   ",
    "\n\t",
    "xyzzy plugh",
    "!!!???",
    "a" * 5000,
    "🧊 ↑ 向上走 ✓",
    "\x00\x01\x7f",
    "<action></action>",
    None,
)

_MAX_VIOLATIONS_PER_CHECK = 5
_HASH_SEED_TIMEOUT_S = 120


@dataclass
class CheckReport:
    """The outcome of `check_env`: what was checked and every violation found."""

    env_id: str
    kwargs: dict[str, Any]
    seeds: list[int]
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    _per_check: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def fail(self, check: str, message: str) -> None:
        """Record a violation, keeping at most a few per check so one bug does not drown the rest."""
        count = self._per_check.get(check, 0) + 1
        self._per_check[check] = count
        if count <= _MAX_VIOLATIONS_PER_CHECK:
            self.violations.append(f"[{check}] {message}")
        elif count == _MAX_VIOLATIONS_PER_CHECK + 1:
            self.violations.append(f"[{check}] further violations of this check are not listed")

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"{len(self.violations)} violation(s)"
        settings = f" {self.kwargs}" if self.kwargs else ""
        return f"{self.env_id}{settings} seeds {self.seeds}: {len(self.checks)} checks, {verdict}"


@dataclass(frozen=True)
class _Transition:
    """What one step returned, in a form that compares exactly."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: str  # canonical JSON of the info dictionary


def check_env(
    env_id: str | type[Env],
    kwargs: Mapping[str, Any] | None = None,
    seeds: int | Sequence[int] = 5,
    *,
    prefixes: int = 3,
    prefix_length: int | None = None,
    split_n: int = 5,
    rng_seed: int = 0,
    hash_seed_check: bool = True,
) -> CheckReport:
    """Audit an environment (a registered id or address, or a class implementing `Env`) against the contract.

    `seeds` is a count (seeds 0..n-1, or the first n seeds of an instance file) or an
    explicit list. For each seed the checker plays `prefixes` random action sequences of
    `prefix_length` steps (default: the step budget plus two, so truncation is reached)
    drawn from the admissible actions, the oracle and junk, then replays them in a fresh
    environment. `split_n` seeds per split are drawn to check the splits. With
    `hash_seed_check`, the state keys and observations of one episode per seed are
    recomputed in a subprocess with a different PYTHONHASHSEED.
    """
    factory, name, config = _factory(env_id, dict(kwargs or {}))
    probe = factory()
    report = CheckReport(env_id=name, kwargs=dict(kwargs or {}), seeds=_seed_list(probe, seeds))
    rng = random.Random(f"hindsight-check:{rng_seed}")

    _check_static(report, probe)
    if report.seeds:
        _check_close(report, factory, report.seeds[0])
    oracle = getattr(probe, "has_oracle", True)
    if not oracle:
        report.notes.append("oracle, oracle-midway: skipped; the environment declares no oracle (has_oracle)")
    # The first random episode of each seed is replayed again under another hash seed.
    episodes: list[tuple[int, list[Any]]] = []
    for seed in report.seeds:
        _check_reset(report, factory, seed)
        _check_junk(report, factory, seed)
        if oracle:
            _check_oracle(report, factory, seed)
        for attempt in range(prefixes):
            actions = _random_prefix(report, factory, seed, rng, prefix_length, oracle)
            if actions is None:
                break
            _check_replay(report, factory, seed, actions)
            if oracle:
                _check_oracle_midway(report, factory, config, seed, actions)
            if attempt == 0:
                episodes.append((seed, actions))
    _check_splits(report, factory, split_n)
    if hash_seed_check and isinstance(probe, RemoteEnv):
        report.notes.append("hash-seed: skipped for a served environment; run `hindsight envs check "
                            f"{probe.id}` where the server runs to check it there")
    elif hash_seed_check and isinstance(probe, RayEnv):
        report.notes.append("hash-seed: skipped for an environment in Ray actors (each actor is a process of its "
                            f"own); run `hindsight envs check {probe.id}` to check it")
    elif hash_seed_check:
        _check_hash_seed(report, probe, config, episodes)
    return report


# -- setup ----------------------------------------------------------------------------
def _factory(env_id: str | type[Env], kwargs: dict[str, Any]) -> tuple[Callable[..., Env], str, dict[str, Any]]:
    """A function building fresh environments, the name to report, and the env's config."""
    if isinstance(env_id, type):
        cls = env_id

        def build(**extra: Any) -> Env:
            return cls(**{**kwargs, **extra})

        sample = build()
        name = getattr(cls, "id", cls.__name__)
    else:
        from hindsight.envs import make

        sample = make(env_id, **kwargs)  # a bad id or keyword raises EnvError here, by design
        name = sample.id

        def build(**extra: Any) -> Env:
            return make(env_id, **{**kwargs, **extra})

    config = dict(sample.config)
    return build, name, config


def _seed_list(env: Env, seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, int):
        if isinstance(env, TextEnv) and env.instance_file is not None:
            return env.instance_file.seeds()[:seeds]
        return list(range(seeds))
    return [int(s) for s in seeds]


def _guard(report: CheckReport, check: str, what: str, run: Callable[[], Any]) -> Any:
    """Run one probe; an exception becomes a violation instead of ending the audit."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - any crash of the environment is the finding
        report.fail(check, f"{what} raised {type(exc).__name__}: {exc}")
        return None


def _mark(report: CheckReport, check: str) -> None:
    if check not in report.checks:
        report.checks.append(check)


def _canonical_info(info: Any) -> str:
    try:
        return json.dumps(info, sort_keys=True, ensure_ascii=True, default=repr)
    except (TypeError, ValueError):
        return repr(info)


def _transition(result: Any) -> _Transition:
    observation, reward, terminated, truncated, info = result
    return _Transition(observation, reward, terminated, truncated, _canonical_info(info))


def _info_problems(info: Any) -> list[str]:
    """Ways an info dictionary breaks the contract."""
    if not isinstance(info, dict):
        return [f"info is a {type(info).__name__}, not a dict"]
    problems = [f"info lacks {key!r}" for key in INFO_KEYS if key not in info]
    score = info.get("score")
    if "score" in info:
        if not isinstance(score, (int, float)) or isinstance(score, bool):
            problems.append(f"info['score'] is {score!r}, not a number")
        elif not (math.isfinite(score) and 0.0 <= score <= 1.0):
            problems.append(f"info['score'] = {score!r} is outside [0, 1]")
    for key in ("success", "valid"):
        if key in info and not isinstance(info[key], bool):
            problems.append(f"info[{key!r}] is {info[key]!r}, not a bool")
    if "state_key" in info and not isinstance(info["state_key"], str):
        problems.append(f"info['state_key'] is {type(info['state_key']).__name__}, not a str")
    actions = info.get("admissible_actions")
    if "admissible_actions" in info and not (isinstance(actions, list) and all(isinstance(a, str) for a in actions)):
        problems.append("info['admissible_actions'] is not a list of str")
    return problems


def _step_problems(result: Any, steps_taken: int, max_steps: int) -> list[str]:
    """Ways a step's return value breaks the contract, given the steps taken so far (this one included)."""
    if not (isinstance(result, tuple) and len(result) == 5):
        return ["step() did not return a 5-tuple"]
    observation, reward, terminated, truncated, info = result
    problems = _info_problems(info)
    if not isinstance(observation, str) or not observation.strip():
        problems.append("the observation is not a non-empty str")
    if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
        problems.append(f"the reward {reward!r} is not a finite number")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        problems.append("terminated and truncated must be bools")
    if terminated and truncated:
        problems.append("terminated and truncated are both true")
    if truncated and steps_taken != max_steps:
        problems.append(f"truncated after {steps_taken} steps, but max_steps is {max_steps}")
    if not terminated and not truncated and steps_taken >= max_steps:
        problems.append(f"not truncated after {steps_taken} steps with max_steps {max_steps}")
    if isinstance(info, dict) and info.get("success") is True and not terminated:
        problems.append("success is true but the episode did not terminate")
    return problems


# -- checks ---------------------------------------------------------------------------
def _check_static(report: CheckReport, env: Env) -> None:
    check = "static"
    _mark(report, check)
    instruction = _guard(report, check, "instruction", lambda: env.instruction)
    if not isinstance(instruction, str) or not instruction.strip():
        report.fail(check, "instruction must be a non-empty str")
    if not isinstance(env.criteria, str) or not env.criteria.strip():
        report.fail(check, "criteria must be a non-empty str")
    if not isinstance(env.max_steps, int) or env.max_steps < 1:
        report.fail(check, f"max_steps must be a positive int, got {env.max_steps!r}")
    try:
        json.dumps(env.config)
    except (TypeError, ValueError):
        report.fail(check, "config is not JSON-serialisable")


def _check_reset(report: CheckReport, factory: Callable[..., Env], seed: int) -> None:
    check = "reset"
    _mark(report, check)
    env, other = factory(), factory()
    first = _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed))
    if first is None:
        return
    if not (isinstance(first, tuple) and len(first) == 2):
        report.fail(check, f"seed {seed}: reset() must return (observation, info)")
        return
    observation, info = first
    for problem in _info_problems(info):
        report.fail(check, f"seed {seed}: after reset, {problem}")
    if not isinstance(observation, str) or not observation.strip():
        report.fail(check, f"seed {seed}: reset observation is not a non-empty str")
    if isinstance(info, dict) and info.get("valid") is not True:
        report.fail(check, f"seed {seed}: reset info must have valid=True")
    if isinstance(info, dict) and info.get("success") is True:
        report.fail(check, f"seed {seed}: the task is already solved at reset")
    again = _guard(report, check, f"seed {seed}: second reset", lambda: env.reset(seed))
    fresh = _guard(report, check, f"seed {seed}: reset of a fresh env", lambda: other.reset(seed))
    for label, result in (("the same env", again), ("a fresh env", fresh)):
        if result is None:
            continue
        if result[0] != observation:
            report.fail(check, f"seed {seed}: resetting {label} gave a different observation")
        if _canonical_info(result[1]) != _canonical_info(info):
            report.fail(check, f"seed {seed}: resetting {label} gave a different info (state_key or score)")


def _check_junk(report: CheckReport, factory: Callable[..., Env], seed: int) -> None:
    """Junk is refused without a crash, leaves the state alone, and the budget truncates exactly."""
    check = "junk-actions"
    _mark(report, check)
    _mark(report, "truncation")
    env = factory()
    start = _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed))
    if start is None:
        return
    key = start[1].get("state_key") if isinstance(start[1], dict) else None
    for steps in range(1, env.max_steps + 1):
        action = GARBAGE_ACTIONS[(steps - 1) % len(GARBAGE_ACTIONS)]
        shown = repr(action)[:30]
        result = _guard(report, check, f"seed {seed}: step({shown})", lambda a=action: env.step(a))
        if result is None:
            return
        for problem in _step_problems(result, steps, env.max_steps):
            report.fail("truncation" if "truncat" in problem else check, f"seed {seed}: step({shown}): {problem}")
        _, _, terminated, truncated, info = result
        if isinstance(info, dict):
            if info.get("valid") is not False:
                report.fail(check, f"seed {seed}: junk action {shown} was accepted as valid")
            if info.get("state_key") != key:
                report.fail(check, f"seed {seed}: junk action {shown} changed the state")
        if terminated:
            report.fail(check, f"seed {seed}: junk action {shown} ended the episode")
            return
        if truncated:
            _check_closed(report, env, f"seed {seed}: after truncation")
            return


def _check_close(report: CheckReport, factory: Callable[..., Env], seed: int) -> None:
    """`close` releases a live environment without error, again without error, and a reset after it
    plays the same episode as before (the engine closes every environment it made)."""
    check = "close"
    _mark(report, check)
    env = factory()
    first = _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed))
    if first is None:
        return
    for what in ("close", "a second close"):
        if _guard(report, check, f"seed {seed}: {what}", lambda: env.close() or True) is None:
            return
    again = _guard(report, check, f"seed {seed}: reset after close", lambda: env.reset(seed))
    if again is None:
        return
    if again[0] != first[0] or _canonical_info(again[1]) != _canonical_info(first[1]):
        report.fail(check, f"seed {seed}: a reset after close() gave a different observation or info")
    _guard(report, check, f"seed {seed}: close after the reset", lambda: env.close() or True)


def _check_closed(report: CheckReport, env: Env, where: str) -> None:
    check = "step-after-done"
    _mark(report, check)
    try:
        env.step("up")
    except EnvError:
        return
    except Exception as exc:  # noqa: BLE001
        report.fail(check, f"{where}: step() raised {type(exc).__name__}, expected EnvError")
        return
    report.fail(check, f"{where}: step() was accepted after the episode ended")


def _play_oracle(report: CheckReport, check: str, env: Env, where: str, *, refusal_fails: bool = True) -> bool:
    """Follow the oracle until the episode ends; True on success.

    A refused oracle action is a violation unless `refusal_fails` is False (a gold path off
    its path); it then just ends the attempt. A crash or a non-string action always is.
    """
    while not env.done:
        action = _guard(report, check, f"{where}: oracle_action", env.oracle_action)
        if not isinstance(action, str):
            if action is not None:
                report.fail(check, f"{where}: oracle_action returned {action!r}, not a str")
            return False
        result = _guard(report, check, f"{where}: step({action!r})", lambda a=action: env.step(a))
        if result is None:
            return False
        info = result[4]
        if isinstance(info, dict) and info.get("valid") is not True:
            if refusal_fails:
                report.fail(check, f"{where}: the oracle's action {action!r} was invalid")
            return False
        if isinstance(info, dict) and info.get("success"):
            return True
    return False


def _check_oracle(report: CheckReport, factory: Callable[..., Env], seed: int) -> None:
    check = "oracle"
    _mark(report, check)
    env = factory()
    if _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed)) is None:
        return
    if not _play_oracle(report, check, env, f"seed {seed}"):
        report.fail(check, f"seed {seed}: the oracle did not reach success within {env.max_steps} steps")


def _check_oracle_midway(
    report: CheckReport, factory: Callable[..., Env], config: Mapping[str, Any], seed: int, actions: list[Any]
) -> None:
    """From wherever a random prefix left the episode, the oracle still finds the goal (given time)."""
    check = "oracle-midway"
    _mark(report, check)
    budget = int(config.get("max_steps", 0) or 0)
    env = factory(max_steps=len(actions) + 4 * max(budget, 1) + 10)
    if _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed)) is None:
        return
    for action in actions:
        if env.done:
            return
        if _guard(report, check, f"seed {seed}: replay", lambda a=action: env.step(a)) is None:
            return
    if env.done:
        return
    where = f"seed {seed} after {len(actions)} random actions"
    # A gold path cannot be asked to repair a random detour: its failure there is a note.
    replans = getattr(env, "oracle_replans", True)
    failures = report._per_check.get(check, 0)
    if _play_oracle(report, check, env, where, refusal_fails=replans) or env.is_success():
        return
    if replans:
        report.fail(check, f"{where}: the oracle did not reach success")
    elif report._per_check.get(check, 0) == failures:  # no crash on the way
        report.notes.append(f"{check}: {where}: the gold-path oracle did not reach success (it does not replan)")


def _random_prefix(
    report: CheckReport, factory: Callable[..., Env], seed: int, rng: random.Random, length: int | None,
    oracle: bool = True,
) -> list[Any] | None:
    """Play a random episode, checking each step; return the actions taken (None if it crashed).

    Actions are admissible ones, the oracle's (when the env has one) and junk."""
    check = "step"
    _mark(report, check)
    _mark(report, "admissible")
    env = factory()
    if _guard(report, check, f"seed {seed}: reset", lambda: env.reset(seed)) is None:
        return None
    length = env.max_steps + 2 if length is None else length
    actions: list[Any] = []
    while len(actions) < length and not env.done:
        admissible = _guard(report, "admissible", f"seed {seed}: admissible_actions", env.admissible_actions)
        admissible = list(admissible) if isinstance(admissible, (list, tuple)) else []
        _check_admissible(report, env, seed, admissible, rng)
        roll = rng.random()
        if roll < 0.7 and admissible:
            action: Any = rng.choice(admissible)
        elif roll < 0.85 and oracle:
            action = _guard(report, "oracle", f"seed {seed}: oracle_action", env.oracle_action)
            if not isinstance(action, str):
                action = "xyzzy"
        else:
            action = rng.choice(GARBAGE_ACTIONS)
        before = _guard(report, check, f"seed {seed}: state_key", env.state_key)
        result = _guard(report, check, f"seed {seed}: step({repr(action)[:30]})", lambda a=action: env.step(a))
        if result is None:
            return None
        actions.append(action)
        for problem in _step_problems(result, len(actions), env.max_steps):
            where = "truncation" if "truncat" in problem else check
            report.fail(where, f"seed {seed}, step {len(actions)} ({repr(action)[:30]}): {problem}")
        info = result[4]
        if isinstance(info, dict) and info.get("valid") is False and info.get("state_key") != before:
            report.fail(
                check, f"seed {seed}, step {len(actions)}: the invalid action {repr(action)[:30]} changed the state"
            )
    if env.done:
        _check_closed(report, env, f"seed {seed} after {len(actions)} random actions")
    return actions


def _check_admissible(report: CheckReport, env: Env, seed: int, admissible: list[str], rng: random.Random) -> None:
    """A few admissible actions, tried on copies of the live env, must all be valid."""
    for action in rng.sample(admissible, min(2, len(admissible))):
        trial = copy.deepcopy(env)
        what = f"seed {seed}: admissible action {action!r}"
        result = _guard(report, "admissible", what, lambda t=trial, a=action: t.step(a))
        if result is not None and isinstance(result[4], dict) and result[4].get("valid") is not True:
            report.fail("admissible", f"seed {seed}: admissible action {action!r} was refused as invalid")


def _check_replay(report: CheckReport, factory: Callable[..., Env], seed: int, actions: list[Any]) -> None:
    check = "replay"
    _mark(report, check)
    runs = []
    for _ in range(2):
        env = factory()
        if _guard(report, check, f"seed {seed}: reset", lambda e=env: e.reset(seed)) is None:
            return
        transitions = []
        for action in actions:
            result = _guard(report, check, f"seed {seed}: replay step", lambda e=env, a=action: e.step(a))
            if result is None:
                return
            transitions.append(_transition(result))
        runs.append(transitions)
    for index, (a, b) in enumerate(zip(*runs, strict=True), start=1):
        if a != b:
            differs = [
                f
                for f in ("observation", "reward", "terminated", "truncated", "info")
                if getattr(a, f) != getattr(b, f)
            ]
            report.fail(
                check,
                f"seed {seed}: replaying the same {len(actions)} actions diverged at step {index} "
                f"({', '.join(differs)})",
            )
            return


def _check_splits(report: CheckReport, factory: Callable[..., Env], n: int) -> None:
    check = "splits"
    _mark(report, check)
    env = factory()
    instance_file = env.instance_file if isinstance(env, TextEnv) else None
    if instance_file is not None:
        report.notes.append("splits: taken from the instance file as recorded, not re-derived")
    chosen: dict[str, list[int]] = {}
    for split in SPLITS:
        if instance_file is not None:
            available = len(instance_file.seeds(split))
            if available == 0:
                continue
            count = min(n, available)
        else:
            count = n
        try:
            seeds = env.split_seeds(split, count)
        except EnvError as exc:
            # A tiny setting may simply have few distinct tasks; that is worth knowing, not a broken contract.
            report.notes.append(f"splits: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001
            report.fail(check, f"split_seeds({split!r}, {count}) raised {type(exc).__name__}: {exc}")
            continue
        again = _guard(
            report,
            check,
            f"split_seeds({split!r}, {count}) again",
            lambda s=split, c=count: factory().split_seeds(s, c),
        )
        if again is not None and again != seeds:
            report.fail(check, f"split_seeds({split!r}) differs between two environments")
        if len(seeds) != count or len(set(seeds)) != len(seeds):
            report.fail(check, f"split_seeds({split!r}, {count}) returned {len(set(seeds))} distinct seeds")
        chosen[split] = list(seeds)
        if instance_file is None:
            # The split is recomputed from the instance's hash, unless the environment overrides
            # seed_split because its own data records splits (deepsearch's QA files may).
            own_splits = not isinstance(env, RemoteEnv) and type(env).seed_split is not TextEnv.seed_split
            for seed in seeds:
                actual = env.seed_split(seed) if own_splits else instance_split(env.instance_for(seed))
                if actual != split:
                    report.fail(check, f"seed {seed} was listed for {split} but seed_split gives {actual}")
    names = list(chosen)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            shared = sorted(set(chosen[first]) & set(chosen[second]))
            if shared:
                report.fail(check, f"seeds {shared} are in both {first} and {second}")
            if instance_file is None:
                contents = {json.dumps(env.instance_for(s), sort_keys=True) for s in chosen[first]}
                overlap = [
                    s for s in chosen[second] if json.dumps(env.instance_for(s), sort_keys=True) in contents
                ]
                if overlap:
                    report.fail(check, f"{second} seeds {overlap} repeat a {first} instance")


def _keys_and_observations(env: Env, episodes: Sequence[tuple[int, Sequence[Any]]]) -> list[list[list[str]]]:
    """For each episode: [state_key, observation] after reset and after each action."""
    out = []
    for seed, actions in episodes:
        observation, info = env.reset(seed)
        trace = [[info["state_key"], observation]]
        for action in actions:
            if env.done:
                break
            observation, _, _, _, info = env.step(action)
            trace.append([info["state_key"], observation])
        out.append(trace)
    return out


def _check_hash_seed(
    report: CheckReport,
    probe: Env,
    config: Mapping[str, Any],
    episodes: list[tuple[int, list[Any]]],
) -> None:
    """Replay episodes in a subprocess with another PYTHONHASHSEED and compare keys and observations."""
    check = "hash-seed"
    if not episodes:
        return
    _mark(report, check)
    cls = type(probe)
    try:
        config_json = json.loads(json.dumps(dict(config)))
    except (TypeError, ValueError):
        report.notes.append("hash-seed: skipped, the env config is not JSON")
        return
    request = {
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "file": inspect.getsourcefile(cls),
        "config": config_json,
        "episodes": episodes,
    }
    here = _guard(
        report, check, "replaying in this process", lambda: _keys_and_observations(_rebuild(cls, config_json), episodes)
    )
    if here is None:
        return
    current = os.environ.get("PYTHONHASHSEED", "")
    other = "4242" if current != "4242" else "1717"
    environ = {**os.environ, "PYTHONHASHSEED": other}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    code = "from hindsight.envs.checker import _hash_seed_worker; _hash_seed_worker()"
    try:
        completed = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=environ,
            timeout=_HASH_SEED_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.notes.append(f"hash-seed: skipped, the subprocess failed to run ({exc})")
        return
    if completed.returncode == 3:
        report.notes.append(f"hash-seed: skipped, {completed.stderr.strip().splitlines()[-1]}")
        return
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        report.fail(check, f"replaying under PYTHONHASHSEED={other} crashed: {tail}")
        return
    there = json.loads(completed.stdout)
    if len(there) != len(episodes):
        report.fail(
            check, f"the subprocess under PYTHONHASHSEED={other} replayed {len(there)} of {len(episodes)} episodes"
        )
        return
    for (seed, _), mine, theirs in zip(episodes, here, there, strict=True):
        if len(mine) != len(theirs):
            report.fail(
                check,
                f"seed {seed}: the episode lasted {len(theirs)} steps under PYTHONHASHSEED={other}, not {len(mine)}",
            )
            continue
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if a[0] != b[0]:
                report.fail(
                    check, f"seed {seed}, step {index}: state_key {a[0]!r} became {b[0]!r} under PYTHONHASHSEED={other}"
                )
                break
            if a[1] != b[1]:
                report.fail(check, f"seed {seed}, step {index}: the observation changed under PYTHONHASHSEED={other}")
                break


def _rebuild(cls: type[Env], config: Mapping[str, Any]) -> Env:
    return cls(**config)


def _hash_seed_worker() -> None:
    """Subprocess side of the hash-seed check: rebuild the env, replay, print JSON.

    Exit code 3 means the environment class could not be found in this process, which
    the parent reports as a skipped check rather than a violation.
    """
    request = json.loads(sys.stdin.read())
    cls: Any = None
    try:
        module = importlib.import_module(request["module"])
    except Exception:  # noqa: BLE001 - fall back to loading the source file directly
        module = None
        path = request.get("file")
        if path:
            spec = importlib.util.spec_from_file_location(request["module"], path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[request["module"]] = module
                try:
                    spec.loader.exec_module(module)
                except Exception:  # noqa: BLE001
                    module = None
    if module is not None:
        cls = module
        for part in request["qualname"].split("."):
            cls = getattr(cls, part, None)
    if not isinstance(cls, type):
        print(f"cannot import {request['module']}.{request['qualname']} in a subprocess", file=sys.stderr)
        sys.exit(3)
    env = _rebuild(cls, request["config"])
    print(json.dumps(_keys_and_observations(env, request["episodes"])))
