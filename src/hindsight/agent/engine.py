"""The pooled rollout engine.

All active episodes of a run share one pool. Each turn, the engine builds the prompt of
every episode that is waiting for an action and sends them to the backend in a single
`generate` call; finished episodes leave the pool and queued tasks take their slots.
There is no per-episode generate loop, so a batched backend stays busy.

A turn may hold two generations. With a `PreActionWriter` in the config (Self-Guide's
self-assessment, ReFlAct's goal reflection), the engine first sends the writer's prompt
of every episode in the pool in one `generate` call, then every action prompt, which
shows the episode's fresh assessment, in a second call. The step records both.

A task may carry a *prefix* of recorded turns that are replayed into the environment
before the policy takes over. That is how a trajectory is branched: replay its first t
turns, substitute an alternative action at turn t, then let any policy continue
(`branch_task`). Replays are checked against the recorded state keys, so a
nondeterministic environment is caught instead of silently producing wrong branches.

An environment whose process or server fails (`EnvFailure`: a crashed JVM, a lost
connection) does not end the run. The episode moves to a fresh environment that replays
its recorded actions, checked against the state keys like any replay, and the failed call
is made again there; the trajectory records the restarts (`meta.env_restarts`). After
`ENV_RESTARTS` failed restarts the episode ends where it is, marked `meta.env_failure`.

An environment whose calls wait on another process (`parallel_calls`, e.g. one in a Ray
actor) has the resets and steps of one turn made from threads, one per episode, so they
run at once in their processes. Each episode still sees its own calls in order, and the
pool's results are taken in pool order, so the run is the same as with calls in turn.

The engine makes an environment per episode (and one per restart) with its `make_env`,
typed against the contract (`hindsight.envs.contract.Env`), and closes each one when its
episode ends or is moved, and every one still open when a run stops early.
"""

from __future__ import annotations

import contextlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from hindsight.agent.parser import parse_response, tokens_in_span
from hindsight.agent.prm import BestOfN
from hindsight.agent.prompts import DEFAULT_SYSTEM_TEMPLATE, INVALID_FEEDBACK, Memory, PromptBuilder
from hindsight.agent.replay import ReplayDivergence
from hindsight.envs.contract import Env, EnvFailure
from hindsight.llm.base import ModelBackend
from hindsight.types import (
    Assessment,
    Candidate,
    Completion,
    Conversation,
    GenerationRequest,
    SamplingParams,
    Step,
    Trajectory,
)


class PreActionWriter(Protocol):
    """A generation the policy writes before each action, shown to it in the action prompt."""

    kind: str
    max_new_tokens: int
    # How the action prompt shows the assessment under the observation ("{assessment}" = its text).
    shown_as: str

    def prompt(self, instruction: str, history: Sequence[Step], observation: str) -> Conversation:
        """The conversation that asks for the assessment at a turn (history = the steps so far)."""

    def parse(self, completion: Completion) -> Assessment:
        """The assessment a completion holds; an unreadable one is recorded, never raised."""


#: Fresh environments an episode may move to after `EnvFailure`s before it is given up.
ENV_RESTARTS = 3


@dataclass(frozen=True)
class ReplayTurn:
    """A recorded turn to replay: the raw response and what the policy said.

    `expected_state_key` is the state before this turn as recorded; when set, the
    replay checks that the environment reproduces it.
    """

    raw: str
    expected_state_key: str | None = None
    assessment: Assessment | None = None


@dataclass(frozen=True)
class Task:
    """One episode to run: a task instance (seed), an optional replayed prefix.

    `guidance` is advice shown to the policy in its system prompt for this episode
    only (ECHO puts a critique there); the trajectory records it.
    `max_turns` ends the episode after that many policy turns past the prefix (its
    trajectory's meta says `turn_limit`): `max_turns=1` after a prefix samples one action
    at a recorded state, which is how CSO asks an expert for alternatives.
    """

    seed: int
    sample: int = 0
    prefix: tuple[ReplayTurn, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    guidance: str = ""
    max_turns: int | None = None

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError("max_turns must be >= 1 (or None for no limit)")


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run.

    `system_template` is the system prompt; `{instruction}` in it is replaced by the
    environment's rules.
    `concurrency` bounds the pool (and so the batch size sent to the backend).
    `stop_action` lets the policy end an episode early (None disables it). `seed`
    makes backend sampling reproducible: generate call n of the run uses seed + n.
    `pre_action` writes an assessment before every action (see the module docstring).
    `best_of` samples that many candidate actions per turn and takes the one a process reward
    model rates highest (step-level best-of-N at inference; `hindsight.agent.prm.BestOfN`).
    """

    memory: Memory = Memory(None)
    system_template: str = DEFAULT_SYSTEM_TEMPLATE
    sampling: SamplingParams = SamplingParams(temperature=1.0, max_new_tokens=96)
    concurrency: int = 32
    stop_action: str | None = "stop"
    seed: int | None = 0
    model_name: str = ""
    split: str = "test"
    pre_action: PreActionWriter | None = None
    best_of: BestOfN | None = None

    def prompt_builder(self) -> PromptBuilder:
        """The prompts this configuration shows the policy (training rebuilds them with it)."""
        shown_as = self.pre_action.shown_as if self.pre_action is not None else "{assessment}"
        return PromptBuilder(memory=self.memory, system_template=self.system_template, assessment_template=shown_as)


@dataclass
class _Episode:
    task: Task
    env: Env
    observation: str
    info: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    stopped_by_agent: bool = False
    assessment: Assessment | None = None  # written at this turn, before the action
    candidates: tuple[Candidate, ...] | None = None  # this turn's best-of-N candidates, rated
    env_restarts: int = 0
    env_failure: str | None = None  # why the episode was given up after its restarts

    @property
    def at_turn_limit(self) -> bool:
        limit = self.task.max_turns
        return limit is not None and len(self.steps) - len(self.task.prefix) >= limit

    @property
    def done(self) -> bool:
        return (self.terminated or self.truncated or self.stopped_by_agent or self.at_turn_limit
                or self.env_failure is not None)


def action_token_entropies(completion: Completion, span: tuple[int, int] | None) -> tuple[float, ...] | None:
    """The backend's per-token entropies of the tokens that spell the parsed action.

    None when the backend reported no entropies or token offsets, when the response has
    no located action, or when no token overlaps it.
    """
    if span is None or completion.entropies is None or completion.token_ends is None:
        return None
    first, last = tokens_in_span(completion.token_ends, span)
    return tuple(completion.entropies[first:last]) or None


def apply_response(episode: _Episode, completion: Completion, stop_action: str | None) -> None:
    """Parse a response, act on the environment and record the step (with the turn's assessment)."""
    raw = completion.text
    action_entropies = None
    if completion.error is not None:
        parsed_action, analysis, parse_error = None, None, f"backend error: {completion.error}"
    else:
        parsed = parse_response(raw)
        parsed_action, analysis, parse_error = parsed.action, parsed.analysis, parsed.error
        action_entropies = action_token_entropies(completion, parsed.action_span)
    if parsed_action is not None and stop_action is not None and parsed_action.lower() == stop_action.lower():
        episode.stopped_by_agent = True
        return
    before_observation, before_info = episode.observation, episode.info
    # An unparseable answer is still a turn: the environment sees an empty action, reports
    # it as invalid and counts it against the step budget.
    observation, reward, terminated, truncated, info = episode.env.step(parsed_action or "")
    if parse_error is not None:
        observation = INVALID_FEEDBACK.format(reason=parse_error) + "\n" + observation
    admissible = before_info.get("admissible_actions")
    episode.steps.append(
        Step(
            index=len(episode.steps),
            observation=before_observation,
            state_key=str(before_info["state_key"]),
            raw=raw,
            action=parsed_action,
            analysis=analysis,
            valid=bool(info["valid"]) and parse_error is None,
            reward=float(reward),
            score=float(info["score"]),
            feedback=observation,
            parse_error=parse_error,
            finish_reason=completion.finish_reason if completion.error is None else None,
            token_ids=completion.token_ids,
            logprobs=completion.logprobs,
            admissible_actions=tuple(admissible) if admissible else None,
            assessment=episode.assessment,
            action_entropies=action_entropies,
            candidates=episode.candidates,
        )
    )
    episode.assessment, episode.candidates = None, None
    episode.observation, episode.info = observation, info
    episode.terminated, episode.truncated = bool(terminated), bool(truncated)


def _start(env: Env, task: Task, stop_action: str | None) -> _Episode:
    observation, info = env.reset(task.seed)
    episode = _Episode(task=task, env=env, observation=observation, info=info)
    for turn, replay in enumerate(task.prefix):
        if episode.done:
            raise ReplayDivergence(f"seed {task.seed}: episode ended before replay turn {turn}")
        if replay.expected_state_key is not None and replay.expected_state_key != episode.info["state_key"]:
            raise ReplayDivergence(
                f"seed {task.seed}, turn {turn}: expected state {replay.expected_state_key!r}, "
                f"got {episode.info['state_key']!r}"
            )
        episode.assessment = replay.assessment
        apply_response(episode, Completion(text=replay.raw), stop_action)
    return episode


def _finish(episode: _Episode, config: RolloutConfig) -> Trajectory:
    env, task = episode.env, episode.task
    meta: dict[str, Any] = dict(task.meta)
    if episode.stopped_by_agent:
        meta["stopped_by_agent"] = True
    if task.prefix:
        meta["replayed_turns"] = len(task.prefix)
    if episode.env_restarts:
        meta["env_restarts"] = episode.env_restarts
    if episode.env_failure is not None:
        meta["env_failure"] = episode.env_failure
    if episode.at_turn_limit and not (episode.terminated or episode.truncated or episode.stopped_by_agent):
        meta["turn_limit"] = True
    return Trajectory(
        id=f"{env.id}:{task.seed}:{task.sample}",
        env=env.id,
        env_kwargs=dict(env.config),
        seed=task.seed,
        split=config.split,
        model=config.model_name,
        memory=str(config.memory),
        instruction=env.instruction,
        steps=tuple(episode.steps),
        final_observation=episode.observation,
        final_state_key=str(episode.info["state_key"]),
        success=bool(episode.info["success"]),
        score=float(episode.info["score"]),
        terminated=episode.terminated,
        truncated=episode.truncated,
        meta=meta,
        guidance=task.guidance,
    )


class RolloutEngine:
    """Runs many episodes against one policy with a single shared pool."""

    def __init__(self, make_env: Callable[[], Env], policy: ModelBackend,
                 config: RolloutConfig = RolloutConfig()):
        if config.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.make_env = make_env
        self.policy = policy
        self.config = config
        self.prompts = config.prompt_builder()
        self._generate_calls = 0
        self._threads: ThreadPoolExecutor | None = None  # while a run's environments take parallel calls
        self._open: dict[int, Env] = {}  # every environment made and not yet closed, by id()

    def _sampling(self, max_new_tokens: int | None = None) -> SamplingParams:
        """The sampling of the next generate call: its own seed, and its own budget if given."""
        params = self.config.sampling
        params = SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens if max_new_tokens is None else max_new_tokens,
            seed=params.seed if self.config.seed is None else self.config.seed + self._generate_calls,
            stop=params.stop,
        )
        self._generate_calls += 1
        return params

    def request(self, episode: _Episode) -> GenerationRequest:
        messages = self.prompts.build(
            episode.env.instruction, episode.steps, episode.observation, guidance=episode.task.guidance,
            assessment=episode.assessment,
        )
        return GenerationRequest(messages=messages, env=episode.env)

    def _generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        completions = self.policy.generate(requests, params)
        if len(completions) != len(requests):
            raise RuntimeError(
                f"backend {self.policy.spec!r} returned {len(completions)} completions for {len(requests)} prompts"
            )
        return completions

    def _assess(self, pool: Sequence[_Episode]) -> None:
        """Every pooled episode's assessment for this turn, in one generate call."""
        writer = self.config.pre_action
        requests = [GenerationRequest(messages=writer.prompt(episode.env.instruction, episode.steps,
                                                             episode.observation), env=episode.env)
                    for episode in pool]
        for episode, completion in zip(pool, self._generate(requests, self._sampling(writer.max_new_tokens))):
            episode.assessment = writer.parse(completion)

    def _best_of(self, pool: Sequence[_Episode], best_of: BestOfN) -> list[Completion]:
        """n candidates for every pooled episode in one generate call; one PRM call rates them all.

        Each episode keeps its rated candidates for the step the chosen one becomes.
        """
        n = best_of.n
        candidates = self._generate([self.request(episode) for episode in pool for _ in range(n)], self._sampling())
        picks = best_of.choose([_finish(episode, self.config) for episode in pool], candidates)
        chosen = []
        for k, (episode, (best, rated)) in enumerate(zip(pool, picks)):
            episode.candidates = rated
            chosen.append(candidates[k * n + best])
        return chosen

    def _make_env(self) -> Env:
        """A new environment from `make_env`, kept in `_open` until `_close` (or the end of the run) closes it."""
        env = self.make_env()
        self._open[id(env)] = env
        return env

    def _close(self, env: Env) -> None:
        if self._open.pop(id(env), None) is not None:
            env.close()

    def _start(self, task: Task) -> _Episode:
        """A new episode, its prefix replayed; a failing environment is replaced (see the module docstring)."""
        failure = ""
        for _ in range(ENV_RESTARTS + 1):
            env = self._make_env()
            try:
                return _start(env, task, self.config.stop_action)
            except EnvFailure as exc:
                self._close(env)
                failure = str(exc)
        episode = _Episode(task=task, env=self._make_env(), observation="",
                           info={"state_key": "", "success": False, "score": 0.0})
        episode.env_restarts, episode.env_failure = ENV_RESTARTS, failure
        return episode

    def _apply(self, episode: _Episode, completion: Completion) -> None:
        """`apply_response`, moving the episode to a fresh environment when its own one fails."""
        while True:
            try:
                apply_response(episode, completion, self.config.stop_action)
                return
            except EnvFailure as exc:
                if not self._restart(episode, str(exc)):
                    return

    def _restart(self, episode: _Episode, failure: str) -> bool:
        """Replay the episode's recorded actions on a fresh environment; False once it is given up."""
        while episode.env_restarts < ENV_RESTARTS:
            episode.env_restarts += 1
            env = self._make_env()
            try:
                info = env.reset(episode.task.seed)[1]
                for turn, step in enumerate(episode.steps):
                    if info["state_key"] != step.state_key:
                        raise ReplayDivergence(f"seed {episode.task.seed}, turn {turn}: a fresh environment "
                                               f"reached {info['state_key']!r}, the episode had {step.state_key!r}")
                    info = env.step(step.action or "")[4]
                if info["state_key"] != episode.info["state_key"]:
                    raise ReplayDivergence(f"seed {episode.task.seed}: a fresh environment replaying "
                                           f"{len(episode.steps)} turns reached {info['state_key']!r}, "
                                           f"the episode had {episode.info['state_key']!r}")
            except EnvFailure as exc:
                self._close(env)
                failure = str(exc)
                continue
            self._close(episode.env)
            episode.env = env
            return True
        episode.env_failure = failure
        return False

    def _finish(self, episode: _Episode) -> Trajectory:
        """The finished episode's trajectory; its environment is closed."""
        trajectory = _finish(episode, self.config)
        self._close(episode.env)
        return trajectory

    def iter_run(self, tasks: Iterable[Task]) -> Iterator[Trajectory]:
        """Yield trajectories as they finish (not in task order)."""
        for _, trajectory in self._run_indexed(tasks):
            yield trajectory

    def run(self, tasks: Iterable[Task]) -> list[Trajectory]:
        """Every task's trajectory, in task order."""
        finished = sorted(self._run_indexed(tasks), key=lambda item: item[0])
        return [trajectory for _, trajectory in finished]

    def _each(self, call: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """`call` on every item, results in order: from threads while the environments take parallel calls."""
        if self._threads is None or len(items) < 2:
            return [call(item) for item in items]
        return list(self._threads.map(call, items))

    def _start_all(self, tasks: Sequence[Task]) -> list[_Episode]:
        """New episodes for `tasks`; the first one tells whether the environments take parallel calls."""
        episodes = []
        if self._threads is None and tasks:
            episodes.append(self._start(tasks[0]))
            if getattr(episodes[0].env, "parallel_calls", False):
                self._threads = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="rollout-env")
            tasks = tasks[1:]
        return episodes + self._each(self._start, tasks)

    def _run_indexed(self, tasks: Iterable[Task]) -> Iterator[tuple[int, Trajectory]]:
        """(task position, trajectory) as episodes finish; the environments left open by an error
        (or by a caller that stops early) are closed on the way out."""
        # With history, each turn's prompt extends the episode's last one: a backend that can
        # keeps the conversations it sampled and prefills only the new tokens (the weights do
        # not change during a run). A pre-action writer's prompt carries the steps so far even
        # without memory, so its turns share their start too (Self-Guide's note prompts: about
        # 40% of their tokens on the 4x4 lake).
        reuse = getattr(self.policy, "reuse_turns", None)
        keep = callable(reuse) and (self.config.memory.window != 0 or self.config.pre_action is not None)
        try:
            with reuse() if keep else contextlib.nullcontext():
                yield from self._pooled(tasks)
        finally:
            if self._threads is not None:
                self._threads.shutdown()
                self._threads = None
            for env in list(self._open.values()):
                self._close(env)

    def _pooled(self, tasks: Iterable[Task]) -> Iterator[tuple[int, Trajectory]]:
        queue = deque(enumerate(tasks))
        pool: list[tuple[int, _Episode]] = []
        while queue or pool:
            while queue and len(pool) < self.config.concurrency:
                starting = [queue.popleft() for _ in range(min(len(queue), self.config.concurrency - len(pool)))]
                for (position, _), episode in zip(starting, self._start_all([task for _, task in starting])):
                    if episode.done:
                        yield position, self._finish(episode)
                    else:
                        pool.append((position, episode))
            if not pool:
                continue
            if self.config.pre_action is not None:
                self._assess([episode for _, episode in pool])
            episodes = [episode for _, episode in pool]
            if self.config.best_of is not None:
                completions = self._best_of(episodes, self.config.best_of)
            else:
                completions = self._generate([self.request(episode) for episode in episodes], self._sampling())
            still_running = []
            self._each(lambda pair: self._apply(*pair), list(zip(episodes, completions)))
            for position, episode in pool:
                if episode.done:
                    yield position, self._finish(episode)
                else:
                    still_running.append((position, episode))
            pool = still_running


def replay_prefix(trajectory: Trajectory, turns: int) -> tuple[ReplayTurn, ...]:
    """The first `turns` turns of a trajectory as a replayable prefix."""
    if not 0 <= turns <= trajectory.num_steps:
        raise ValueError(f"cannot replay {turns} turns of a {trajectory.num_steps}-step trajectory")
    return tuple(ReplayTurn(raw=step.raw, expected_state_key=step.state_key, assessment=step.assessment)
                 for step in trajectory.steps[:turns])


def branch_task(trajectory: Trajectory, at: int, action: str, *, sample: int = 0, analysis: str = "") -> Task:
    """A task that replays turns [0, at), takes `action` at turn `at`, then continues.

    The substituted turn is written as a well-formed response so the continuing policy
    sees it in its history like any other turn.
    """
    if not 0 <= at < trajectory.num_steps + 1:
        raise ValueError(f"branch point {at} is outside the trajectory (0..{trajectory.num_steps})")
    expected = trajectory.steps[at].state_key if at < trajectory.num_steps else trajectory.final_state_key
    substitute = ReplayTurn(
        raw=f"<analysis>{analysis}</analysis><action>{action}</action>", expected_state_key=expected
    )
    return Task(
        seed=trajectory.seed,
        sample=sample,
        prefix=replay_prefix(trajectory, at) + (substitute,),
        meta={"branch_of": trajectory.id, "branch_at": at, "branch_action": action},
    )
