"""A Hindsight environment episode as one verl agent-loop trajectory.

verl builds one `HindsightAgentLoop` per dataset row and awaits `run`. The episode:

    env      `make(env, **env_kwargs).reset(seed)`, all three from the row's `extra_info`
    prompt   Hindsight's own first prompt (system = the env's rules and the answer format,
             user = the first observation), tokenised by verl's Continuous Token builder
    turn     the server manager samples tokens after everything so far; they are decoded,
             `parse_response` reads the action, the env steps; unless the episode ended, the
             assistant message and the next observation (with Hindsight's invalid-answer
             feedback when the answer had no action) are appended as chat messages, whose
             template tokens verl's builder appends to the running sequence
    end      the env terminated or truncated, the policy answered the stop action, or the
             response reached `rollout.response_length` tokens

The row's response is every token after the first prompt: the model's tokens with mask 1,
the chat template's and the observations' with mask 0. Its reward is the env's final score
(`reward: score`, graded where the env allows) or its success (`reward: success`), written on
the last token. This is the same conversation a Hindsight rollout with full memory shows the
policy, so a policy trained here acts in `hindsight eval` as it was trained.

Self-Guide (`task_row(..., self_guide=SelfGuideRow(...))`): before each action the policy
judges its latest step in the same conversation. The observation's message ends with the
judgement request (`IN_CONVERSATION_REQUEST`), the model answers `Reason: … / Label: …`
(its tokens trained like the action's), a short user message asks for the move, and the model
moves. A row is one token sequence scored causally, so the judgement cannot live in a prompt
of its own as in Hindsight's engine (`hindsight eval --self-guide`); a policy trained here is
meant for this loop. With `guidance_reward` the reward is Self-Guide's shaped return
R = R_env + λ(u)·Σ_t r_t, where u comes from the weight version the server reports with every
generation (verl sets it to the last finished update) over `trainer.total_training_steps`,
so it is right after a resume too. The parts go to `extra_fields` (`selfguide_*`), and
`hindsight_grpo` then turns the shaped returns into advantages: verl hands an estimator only
the reward on the last token, so the shaping happens where the labels are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from hindsight.agent.parser import parse_response
from hindsight.agent.prompts import INVALID_FEEDBACK, PromptBuilder
from hindsight.agent.selfguide import FIRST_TURN_QUESTION, LATER_QUESTION, RUBRIC, parse_assessment
from hindsight.algos.selfguide import GuidanceForm, TrustSchedule, shaped_return, step_reward, update_progress
from hindsight.envs import make
from hindsight.verl import AGENT_LOOP_NAME

#: What the policy answers to end an episode early (Hindsight's `RolloutConfig.stop_action`).
STOP_ACTION = "stop"
REWARDS = ("score", "success")
#: Appended to each observation's message when the row asks for Self-Guide.
IN_CONVERSATION_REQUEST = "Before you move, judge your latest step. {question}\n" + RUBRIC
#: The user message between the judgement and the move.
MOVE_REQUEST = "Now give your move."


@dataclass(frozen=True)
class SelfGuideRow:
    """A row's Self-Guide settings: judge before each action; with `guidance_reward`, shape the reward.

    `schedule` holds λ(u)'s breakpoints (`TrustSchedule`), fractions of `trainer.total_training_steps`.
    """

    guidance_reward: bool = True
    schedule: TrustSchedule = TrustSchedule()
    form: GuidanceForm = GuidanceForm.SUM

    def to_json(self) -> str:
        s = self.schedule
        return json.dumps({"guidance_reward": self.guidance_reward,
                           "schedule": [s.start, s.full, s.hold_until, s.end], "form": self.form.value})

    @classmethod
    def from_json(cls, text: str) -> SelfGuideRow:
        data = json.loads(text)
        if not isinstance(data, Mapping):
            raise ValueError(f"extra_info.self_guide must be a JSON object, not {text!r}")
        unknown = set(data) - {"guidance_reward", "schedule", "form"}
        if unknown:
            raise ValueError(f"extra_info.self_guide has unknown keys {sorted(unknown)}")
        points = data.get("schedule", [0.4, 0.5, 0.7, 0.8])
        if not isinstance(points, list) or len(points) != 4:
            raise ValueError(f"extra_info.self_guide.schedule must be four fractions, not {points!r}")
        forms = [form.value for form in GuidanceForm]
        if data.get("form", "sum") not in forms:
            raise ValueError(f"extra_info.self_guide.form must be one of {', '.join(forms)}, not {data['form']!r}")
        return cls(guidance_reward=bool(data.get("guidance_reward", True)),
                   schedule=TrustSchedule(*(float(p) for p in points)), form=GuidanceForm(data.get("form", "sum")))


@dataclass(frozen=True)
class EpisodeSpec:
    """Which episode a dataset row asks for: `extra_info = {env, env_kwargs, seed, reward}`.

    `env_kwargs` is stored as a JSON object string: parquet cannot write an empty struct, and
    rows of different difficulty knobs would otherwise widen into one struct of every key.
    """

    env: str
    seed: int
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    reward: str = "score"
    self_guide: SelfGuideRow | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EpisodeSpec:
        """Read the row's `extra_info`; a missing or wrong field is a one-line error naming it."""
        info = row.get("extra_info") or {}
        if "env" not in info or "seed" not in info:
            raise ValueError("a hindsight agent-loop row needs extra_info.env and extra_info.seed "
                             "(write rows with hindsight.verl.agent_loop.task_row)")
        reward = str(info.get("reward") or "score")
        if reward not in REWARDS:
            raise ValueError(f"extra_info.reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        kwargs = info.get("env_kwargs") or {}
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
        if not isinstance(kwargs, Mapping):
            raise ValueError(f"extra_info.env_kwargs must be a JSON object, not {kwargs!r}")
        guide = info.get("self_guide")
        return cls(env=str(info["env"]), seed=int(info["seed"]), env_kwargs=dict(kwargs), reward=reward,
                   self_guide=SelfGuideRow.from_json(guide) if guide else None)


def task_row(env: str, seed: int, *, env_kwargs: Mapping[str, Any] | None = None, reward: str = "score",
             data_source: str = "hindsight", self_guide: SelfGuideRow | None = None) -> dict[str, Any]:
    """One dataset row (a dict for a parquet file) that runs `env` at `seed` in the agent loop.

    `prompt` holds the episode's real first prompt: verl's dataset filters rows by its length
    and logs it, while the loop rebuilds the same messages from the environment.
    """
    spec = EpisodeSpec(env=env, seed=seed, env_kwargs=dict(env_kwargs or {}), reward=reward, self_guide=self_guide)
    instance = make(spec.env, **spec.env_kwargs)
    observation, _ = instance.reset(spec.seed)
    messages = [{"role": m.role, "content": m.content}
                for m in PromptBuilder().build(instance.instruction, [], first_message(observation, spec))]
    info = {"env": spec.env, "seed": spec.seed, "env_kwargs": json.dumps(dict(spec.env_kwargs)), "reward": spec.reward}
    if self_guide is not None:
        info["self_guide"] = self_guide.to_json()
    return {"data_source": data_source, "agent_name": AGENT_LOOP_NAME, "prompt": messages, "extra_info": info}


def first_message(observation: str, spec: EpisodeSpec) -> str:
    """The first observation, with the judgement request when the row asks for Self-Guide."""
    return with_request(observation, spec, turn=0)


def with_request(observation: str, spec: EpisodeSpec, turn: int) -> str:
    """An observation's message: with Self-Guide, followed by the request to judge step `turn` (0: the start)."""
    if spec.self_guide is None:
        return observation
    question = LATER_QUESTION.format(number=turn) if turn else FIRST_TURN_QUESTION
    return observation + "\n\n" + IN_CONVERSATION_REQUEST.replace("{question}", question)


@dataclass
class _Row:
    """The growing token sequence of one episode: ids, the response's mask and log-probs."""

    tokens: list[int]
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None


@register(AGENT_LOOP_NAME)
class HindsightAgentLoop(AgentLoopBase):
    """Plays one Hindsight environment episode per row against verl's rollout server."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        self.prompts = PromptBuilder()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = EpisodeSpec.from_row(kwargs)
        schedule_steps = self._total_steps() if spec.self_guide and spec.self_guide.guidance_reward else None
        env = await self.loop.run_in_executor(None, lambda: make(spec.env, **spec.env_kwargs))
        observation, info = await self.loop.run_in_executor(None, env.reset, spec.seed)
        messages = [{"role": m.role, "content": m.content}
                    for m in self.prompts.build(env.instruction, [], first_message(observation, spec))]
        row = _Row(await self.ct_build_initial_tokens(messages))
        request_id = uuid4().hex
        turns, observations, invalid, stopped, done = 0, 0, 0, False, False
        turn_scores: list[float] = []
        labels: list[str] = []
        label_failures = 0
        version: int | None = None
        while not done and len(row.mask) < self.response_length:
            if spec.self_guide is not None:
                judgement, version = await self._generate(row, request_id, sampling_params, version)
                parsed_label = parse_assessment(judgement)
                labels.append(parsed_label.label.value)
                label_failures += parsed_label.error is not None
                if len(row.mask) >= self.response_length:
                    break
                messages.append({"role": "assistant", "content": judgement})
                await self._add_user_message(row, messages, MOVE_REQUEST)
            text, version = await self._generate(row, request_id, sampling_params, version)
            turns += 1
            parsed = parse_response(text)
            if parsed.action is not None and parsed.action.lower() == STOP_ACTION:
                stopped = True
                break
            observation, _, terminated, truncated, info = await self.loop.run_in_executor(
                None, env.step, parsed.action or "")
            turn_scores.append(float(info["score"]))
            if parsed.error is not None:
                invalid += 1
                observation = INVALID_FEEDBACK.format(reason=parsed.error) + "\n" + observation
            done = bool(terminated or truncated)
            if done or len(row.mask) >= self.response_length:
                break
            messages.append({"role": "assistant", "content": text})
            await self._add_user_message(row, messages, with_request(observation, spec, turns))
            observations += 1
        success = bool(info["success"])
        env_return = float(info["score"]) if spec.reward == "score" else float(success)
        reward, extra = env_return, {}
        if spec.self_guide is not None:
            weight = 0.0
            if schedule_steps is not None:
                # The server's weight version is the last finished update; before the first, 0.
                weight = spec.self_guide.schedule.weight(update_progress(min((version or 0) + 1, schedule_steps),
                                                                         schedule_steps))
                reward = shaped_return(env_return, labels, weight, spec.self_guide.form)
            extra = {"selfguide_labels": labels, "selfguide_lambda": weight, "selfguide_env_return": env_return,
                     "selfguide_assessment_sum": sum(step_reward(label) for label in labels),
                     "selfguide_label_parse_failures": label_failures}
        # The builder may trim or insert template tokens at a junction: the mask says how long the response is.
        tokens, mask, logprobs = row.tokens, row.mask, row.logprobs
        response = tokens[len(tokens) - len(mask):]
        return AgentLoopOutput(
            prompt_ids=tokens[: len(tokens) - len(mask)],
            response_ids=response[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward,
            # verl counts the first prompt as a turn, then every assistant and user message.
            num_turns=1 + turns + observations + 2 * len(labels),
            metrics={},
            extra_fields={"turn_scores": turn_scores, "tool_rewards": [], "env_success": success,
                          "env_steps": turns - int(stopped), "env_invalid_answers": invalid,
                          "env_stopped_by_agent": stopped, **extra},
        )

    async def _generate(self, row: _Row, request_id: str, sampling_params: dict[str, Any],
                        version: int | None) -> tuple[str, int | None]:
        """Sample after the row's tokens, append them (mask 1); the text and the server's weight version."""
        output = await self.server_manager.generate(request_id=request_id, prompt_ids=row.tokens,
                                                    sampling_params=sampling_params)
        if row.logprobs is None and not row.mask and output.log_probs:
            row.logprobs = []  # the server reports log-probs (rollout.calculate_log_probs): keep them
        merged, row.mask, row.logprobs = await self.ct_merge_assistant_token(
            row.tokens, output.token_ids, row.mask, row.logprobs,
            assistant_logprobs=output.log_probs if row.logprobs is not None else None)
        row.tokens = merged.token_ids
        served = (getattr(output, "extra_fields", None) or {}).get("global_steps")
        return self.tokenizer.decode(output.token_ids, skip_special_tokens=True), (
            int(served) if served is not None else version)

    async def _add_user_message(self, row: _Row, messages: list[dict[str, str]], content: str) -> None:
        """Append a user message (mask 0) through the template, as the chat continues."""
        before = list(messages)
        messages.append({"role": "user", "content": content})
        merged, row.mask, row.logprobs = await self.ct_merge_context_msg(before, messages, row.tokens, row.mask,
                                                                         row.logprobs)
        row.tokens = merged.token_ids

    def _total_steps(self) -> int:
        """`trainer.total_training_steps`, which λ(u) needs; a one-line error when it is not set."""
        trainer = self.config.get("trainer") or {}
        total = trainer.get("total_training_steps") if hasattr(trainer, "get") else None
        if not total or int(total) < 1:
            raise ValueError("Self-Guide's guidance reward needs trainer.total_training_steps (λ(u) is a "
                             "schedule over the run's updates); set it, or guidance_reward=false")
        return int(total)
