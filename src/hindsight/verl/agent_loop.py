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
from hindsight.envs import make
from hindsight.verl import AGENT_LOOP_NAME

#: What the policy answers to end an episode early (Hindsight's `RolloutConfig.stop_action`).
STOP_ACTION = "stop"
REWARDS = ("score", "success")


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
        return cls(env=str(info["env"]), seed=int(info["seed"]), env_kwargs=dict(kwargs), reward=reward)


def task_row(env: str, seed: int, *, env_kwargs: Mapping[str, Any] | None = None, reward: str = "score",
             data_source: str = "hindsight") -> dict[str, Any]:
    """One dataset row (a dict for a parquet file) that runs `env` at `seed` in the agent loop.

    `prompt` holds the episode's real first prompt: verl's dataset filters rows by its length
    and logs it, while the loop rebuilds the same messages from the environment.
    """
    spec = EpisodeSpec(env=env, seed=seed, env_kwargs=dict(env_kwargs or {}), reward=reward)
    instance = make(spec.env, **spec.env_kwargs)
    observation, _ = instance.reset(spec.seed)
    messages = [{"role": m.role, "content": m.content}
                for m in PromptBuilder().build(instance.instruction, [], observation)]
    return {
        "data_source": data_source,
        "agent_name": AGENT_LOOP_NAME,
        "prompt": messages,
        "extra_info": {"env": spec.env, "seed": spec.seed, "env_kwargs": json.dumps(dict(spec.env_kwargs)),
                       "reward": spec.reward},
    }


@register(AGENT_LOOP_NAME)
class HindsightAgentLoop(AgentLoopBase):
    """Plays one Hindsight environment episode per row against verl's rollout server."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        self.prompts = PromptBuilder()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = EpisodeSpec.from_row(kwargs)
        env = await self.loop.run_in_executor(None, lambda: make(spec.env, **spec.env_kwargs))
        observation, info = await self.loop.run_in_executor(None, env.reset, spec.seed)
        messages = [{"role": m.role, "content": m.content}
                    for m in self.prompts.build(env.instruction, [], observation)]
        tokens = await self.ct_build_initial_tokens(messages)
        mask: list[int] = []
        logprobs: list[float] | None = None
        request_id = uuid4().hex
        turns, observations, invalid, stopped, done = 0, 0, 0, False, False
        turn_scores: list[float] = []
        metrics: dict[str, Any] = {}
        while not done and len(mask) < self.response_length:
            output = await self.server_manager.generate(request_id=request_id, prompt_ids=tokens,
                                                        sampling_params=sampling_params)
            if logprobs is None and not mask and output.log_probs:
                logprobs = []  # the server reports log-probs (rollout.calculate_log_probs): keep them
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                tokens, output.token_ids, mask, logprobs,
                assistant_logprobs=output.log_probs if logprobs is not None else None)
            tokens = merged.token_ids
            turns += 1
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
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
            if done or len(mask) >= self.response_length:
                break
            messages.append({"role": "assistant", "content": text})
            before = list(messages)
            messages.append({"role": "user", "content": observation})
            merged, mask, logprobs = await self.ct_merge_context_msg(before, messages, tokens, mask, logprobs)
            tokens = merged.token_ids
            observations += 1
        success = bool(info["success"])
        reward = float(info["score"]) if spec.reward == "score" else float(success)
        # The builder may trim or insert template tokens at a junction: the mask says how long the response is.
        response = tokens[len(tokens) - len(mask):]
        return AgentLoopOutput(
            prompt_ids=tokens[: len(tokens) - len(mask)],
            response_ids=response[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward,
            # verl counts the first prompt as a turn, then every assistant and user message.
            num_turns=1 + turns + observations,
            metrics=metrics,
            extra_fields={"turn_scores": turn_scores, "tool_rewards": [], "env_success": success,
                          "env_steps": turns - int(stopped), "env_invalid_answers": invalid,
                          "env_stopped_by_agent": stopped},
        )
