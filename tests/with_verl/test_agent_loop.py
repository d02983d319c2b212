"""The agent loop plays a frozenlake episode against a scripted server manager, with the real chat template."""

import asyncio

import pytest

# verl has its own venv (constraints-verl.txt): `bash .ci/verl` builds it and runs these; `.ci/run` ignores them.
pytest.importorskip("verl", reason="verl is not installed here; it has its own venv (bash .ci/verl)")
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from hindsight.algos.selfguide import GuidanceForm, TrustSchedule  # noqa: E402
from hindsight.envs import make  # noqa: E402
from hindsight.verl.agent_loop import MOVE_REQUEST, HindsightAgentLoop, SelfGuideRow, task_row  # noqa: E402

SEED = 3


class ScriptedServer:
    """Stands in for verl's LLMServerClient: answers each generate call with the next scripted token ids."""

    def __init__(self, answers, version=None):
        self.answers = list(answers)
        self.prompts = []
        self.version = version

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        self.prompts.append(list(prompt_ids))
        extra = {} if self.version is None else {"global_steps": self.version}
        return TokenOutput(token_ids=self.answers.pop(0), log_probs=None, extra_fields=extra)


def oracle_moves(seed):
    env = make("frozenlake")
    env.reset(seed)
    moves, done = [], False
    while not done:
        moves.append(env.oracle_action())
        done = env.step(moves[-1])[2]
    return moves


def runs(mask, tokens):
    """The response cut into maximal runs of equal mask: [(mask value, token ids)]."""
    out = []
    for value, token in zip(mask, tokens):
        if out and out[-1][0] == value:
            out[-1][1].append(token)
        else:
            out.append((value, [token]))
    return out


def play(tokenizer, answers, response_length=4096, self_guide=None, version=None, total_steps=None):
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096,
                                                                 "response_length": response_length}},
                               "trainer": {"total_training_steps": total_steps}})
    row = task_row("frozenlake", SEED, self_guide=self_guide)

    async def episode():
        server = ScriptedServer(answers, version)
        loop = HindsightAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                  processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
                                  hf_model_type="llama")
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"]), server

    return row, *asyncio.run(episode())


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_an_episode_masks_model_tokens_in_and_observations_out(bundled_tokenizer):
    moves = oracle_moves(SEED)
    texts = ["I am not sure."] + [f"<analysis>plan</analysis><action>{move}</action>" for move in moves]
    answers = [encode(bundled_tokenizer, text) for text in texts]
    row, output, server = play(bundled_tokenizer, answers)

    assert output.prompt_ids == bundled_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                                      tokenize=True, return_dict=False)
    pieces = runs(output.response_mask, output.response_ids)
    assert [ids for value, ids in pieces if value == 1] == answers
    observations = [bundled_tokenizer.decode(ids) for value, ids in pieces if value == 0]
    # One observation after every answer but the last, which ended the episode.
    assert len(observations) == len(answers) - 1
    assert "no valid <action>" in observations[0]
    env = make("frozenlake")
    env.reset(SEED)
    env.step("")
    for move, shown in zip(moves, observations[1:]):
        assert env.step(move)[0] in shown
    assert output.reward_score == 1.0
    assert output.extra_fields["env_success"] is True
    assert output.extra_fields["env_invalid_answers"] == 1
    assert output.num_turns == 1 + len(answers) + len(observations)
    # Every generate call continued the same token sequence.
    everything = output.prompt_ids + output.response_ids
    assert all(everything[: len(prompt)] == prompt for prompt in server.prompts)


def test_the_response_budget_ends_an_episode_early(bundled_tokenizer):
    wander = encode(bundled_tokenizer, "<action>left</action>")
    row, output, server = play(bundled_tokenizer, [wander] * 50, response_length=64)
    assert len(output.response_ids) == len(output.response_mask) == 64
    assert output.extra_fields["env_success"] is False and output.reward_score < 1.0


def self_guide_episode(tokenizer, version, total_steps=10, schedule=TrustSchedule(), form=GuidanceForm.SUM):
    """The oracle's moves, each after a judgement: positive, a malformed one, then negative ones."""
    moves = oracle_moves(SEED)
    judgements = ["Reason: nothing done yet.\nLabel: positive", "I think it went fine."]
    judgements += ["Reason: wasted.\nLabel: negative"] * (len(moves) - 2)
    texts = [text for pair in zip(judgements, [f"<action>{move}</action>" for move in moves]) for text in pair]
    answers = [encode(tokenizer, text) for text in texts]
    guide = SelfGuideRow(guidance_reward=True, schedule=schedule, form=form)
    row, output, server = play(tokenizer, answers, self_guide=guide, version=version, total_steps=total_steps)
    return moves, answers, row, output


def test_self_guide_judges_before_every_move_and_shapes_the_reward(bundled_tokenizer):
    # Version 5 of 10 updates: the rollout of update 6, u = 0.5, where the default λ is at full weight.
    moves, answers, row, output = self_guide_episode(bundled_tokenizer, version=5)
    pieces = runs(output.response_mask, output.response_ids)
    assert [ids for value, ids in pieces if value == 1] == answers  # judgements and moves both trained
    between = [bundled_tokenizer.decode(ids) for value, ids in pieces if value == 0]
    assert all(MOVE_REQUEST in between[k] for k in range(0, len(between), 2))
    assert all("judge your latest step" in between[k] for k in range(1, len(between), 2))
    assert "judge your latest step" in row["prompt"][-1]["content"]  # the first turn judges the start
    labels = output.extra_fields["selfguide_labels"]
    assert labels == ["positive", "neutral"] + ["negative"] * (len(moves) - 2)
    assert output.extra_fields["selfguide_label_parse_failures"] == 1
    assert output.extra_fields["selfguide_lambda"] == 1.0
    assessment_sum = 0.1 - 0.1 * (len(moves) - 2)
    assert output.extra_fields["selfguide_assessment_sum"] == pytest.approx(assessment_sum, abs=1e-9)
    assert output.reward_score == pytest.approx(1.0 + assessment_sum, abs=1e-9)


def test_the_mean_form_divides_the_guidance_by_the_number_of_notes(bundled_tokenizer):
    moves, _, _, output = self_guide_episode(bundled_tokenizer, version=5, form=GuidanceForm.MEAN)
    assessment_sum = 0.1 - 0.1 * (len(moves) - 2)
    assert output.reward_score == pytest.approx(1.0 + assessment_sum / len(moves), abs=1e-9)


def test_the_self_guide_row_round_trips_and_refuses_an_unknown_form():
    row = SelfGuideRow(guidance_reward=True, schedule=TrustSchedule(0.0, 0.1, 0.9, 1.0), form=GuidanceForm.CAPPED)
    assert SelfGuideRow.from_json(row.to_json()) == row
    assert SelfGuideRow.from_json('{"guidance_reward": true}').form is GuidanceForm.SUM
    with pytest.raises(ValueError, match="form must be one of"):
        SelfGuideRow.from_json('{"form": "median"}')


def test_the_guidance_weight_follows_the_servers_weight_version(bundled_tokenizer):
    early = self_guide_episode(bundled_tokenizer, version=1)[3]  # u = 0.1: before the ramp
    assert early.extra_fields["selfguide_lambda"] == 0.0 and early.reward_score == 1.0
    ramp = self_guide_episode(bundled_tokenizer, version=9, schedule=TrustSchedule(0.0, 1.0, 1.0, 1.0))[3]
    assert ramp.extra_fields["selfguide_lambda"] == pytest.approx(0.9, abs=1e-9)


def test_the_guidance_reward_needs_the_runs_length(bundled_tokenizer):
    with pytest.raises(ValueError, match="total_training_steps"):
        self_guide_episode(bundled_tokenizer, version=0, total_steps=None)
