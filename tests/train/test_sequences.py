"""Loss masks, token by token, with the bundled model's real chat template."""

import pytest

from hindsight.agent.prompts import Memory, PromptBuilder
from hindsight.train.sequences import episode_sequence, render_prompt, turn_sequences
from hindsight.types import Step, Trajectory


@pytest.fixture(scope="module")
def tokenizer(bundled_tokenizer):
    return bundled_tokenizer


def trajectory(finish_last="stop") -> Trajectory:
    raws = ["<analysis>go</analysis><action>right</action>", "<action>down</action>", "<action>down"]
    steps = tuple(
        Step(index=i, observation=f"You are at cell {i}.", state_key=str(i), raw=raw, action="x", analysis=None,
             valid=True, reward=0.0, score=0.0, feedback=f"You are at cell {i + 1}.",
             finish_reason=finish_last if i == 2 else "stop")
        for i, raw in enumerate(raws)
    )
    return Trajectory(env="line", seed=0, instruction="Reach cell 3.", steps=steps, final_observation="end",
                      final_state_key="3", success=False, score=0.0, terminated=False, truncated=True, id="line:0:0")


def masked_text(tokenizer, sequence):
    return tokenizer.decode([t for t, m in zip(sequence.input_ids, sequence.loss_mask) if m])


def test_turn_sequence_masks_exactly_the_response(tokenizer):
    prompts = PromptBuilder(Memory.parse("full"))
    sequences = turn_sequences(trajectory(), tokenizer, prompts)
    assert len(sequences) == 3
    eos = tokenizer.eos_token_id
    for index, sequence in enumerate(sequences):
        step = trajectory().steps[index]
        prompt = render_prompt(tokenizer, prompts.build("Reach cell 3.", trajectory().steps[:index], step.observation))
        n_prompt = len(tokenizer.encode(prompt, add_special_tokens=False))
        assert sequence.loss_mask[:n_prompt] == (0,) * n_prompt
        assert all(sequence.loss_mask[n_prompt:])
        assert tokenizer.decode(sequence.input_ids[:n_prompt]) == prompt
        response = list(sequence.input_ids[n_prompt:])
        # Ended responses close with the end-of-turn token; the cut-off last one does not.
        assert (response[-1] == eos) == (step.finish_reason == "stop")
        assert tokenizer.decode([t for t in response if t != eos]) == step.raw


def test_logged_token_ids_are_used_verbatim(tokenizer):
    base = trajectory()
    ids = tuple(tokenizer.encode("<action>left</action>", add_special_tokens=False))
    step = base.steps[0].__class__(**{**base.steps[0].__dict__, "token_ids": ids})
    traj = Trajectory(**{**base.__dict__, "steps": (step,) + base.steps[1:]})
    (first,) = turn_sequences(traj, tokenizer, PromptBuilder(), turns=[0])
    n_response = sum(first.loss_mask)
    assert first.input_ids[-n_response:] == ids + (tokenizer.eos_token_id,)


def test_windowed_prompts_match_what_the_model_saw(tokenizer):
    prompts = PromptBuilder(Memory.parse("none"))
    sequences = turn_sequences(trajectory(), tokenizer, prompts)
    text = tokenizer.decode(sequences[2].input_ids)
    assert "You are at cell 2." in text and "You are at cell 0." not in text


@pytest.mark.parametrize("finish_last", ["stop", "length"])
def test_episode_sequence_masks_every_assistant_turn_and_nothing_else(tokenizer, finish_last):
    traj = trajectory(finish_last)
    prompts = PromptBuilder(Memory.parse("full"))
    sequence = episode_sequence(traj, tokenizer, prompts)
    eos = tokenizer.eos_token_id
    # The unmasked text is the full conversation as the template renders it.
    full = prompts.build(traj.instruction, traj.steps[:2], traj.steps[2].observation)
    expected = render_prompt(tokenizer, full) + traj.steps[2].raw + ("<|im_end|>" if finish_last == "stop" else "")
    assert tokenizer.decode(sequence.input_ids) == expected
    # Masked-in tokens are exactly the three responses and their end-of-turn tokens.
    spans, current = [], []
    for token, m in zip(sequence.input_ids, sequence.loss_mask):
        if m:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    assert [tokenizer.decode([t for t in span if t != eos]) for span in spans] == [s.raw for s in traj.steps]
    assert [span[-1] == eos for span in spans] == [True, True, finish_last == "stop"]


def test_episode_sequence_needs_full_history(tokenizer):
    with pytest.raises(ValueError, match="full history"):
        episode_sequence(trajectory(), tokenizer, PromptBuilder(Memory.parse(2)))


@pytest.mark.parametrize("memory", ["none", "full"])
def test_prompts_are_rebuilt_with_the_guidance_the_policy_saw(tokenizer, memory):
    from dataclasses import replace

    advised = replace(trajectory(), guidance="You should go down twice.")
    prompts = PromptBuilder(Memory.parse(memory))
    for index, sequence in enumerate(turn_sequences(advised, tokenizer, prompts)):
        seen = prompts.build(advised.instruction, advised.steps[:index], advised.steps[index].observation,
                             guidance=advised.guidance)
        n_prompt = sequence.loss_mask.index(1)
        assert tokenizer.decode(sequence.input_ids[:n_prompt]) == render_prompt(tokenizer, seen)
        assert "You should go down twice." in render_prompt(tokenizer, seen)
    if memory == "full":
        assert "You should go down twice." in tokenizer.decode(episode_sequence(advised, tokenizer, prompts).input_ids)


def test_assessments_are_sequences_of_their_own_and_shown_in_the_action_prompts(tokenizer):
    from dataclasses import replace

    from hindsight.agent.selfguide import SelfAssessor
    from hindsight.train.sequences import assessment_sequences
    from hindsight.types import Assessment

    writer = SelfAssessor()
    texts = ["Reason: the start.\nLabel: neutral", "Reason: closer.\nLabel: positive", "Reason: a wall.\nLabel: negative"]
    base = trajectory()
    assessed = replace(base, steps=tuple(
        replace(step, assessment=Assessment(kind="self-guide", text=text, finish_reason="stop"))
        for step, text in zip(base.steps, texts)))
    sequences = assessment_sequences(assessed, tokenizer, writer)
    assert [s.turns for s in sequences] == [(i,) for i in range(len(texts))]
    for index, (sequence, text) in enumerate(zip(sequences, texts)):
        assert masked_text(tokenizer, sequence) == text + tokenizer.decode([tokenizer.eos_token_id])
        prompt = render_prompt(tokenizer, writer.prompt(assessed.instruction, assessed.steps[:index],
                                                        assessed.steps[index].observation))
        assert tokenizer.decode(sequence.input_ids[: len(sequence.input_ids) - sequence.num_loss_tokens]) == prompt
    # The action prompts show each turn's assessment (the current one and, with full history, the earlier ones).
    prompts = PromptBuilder(assessment_template="Check: {assessment}")
    last = turn_sequences(assessed, tokenizer, prompts)[-1]
    shown = tokenizer.decode(last.input_ids)
    assert all(f"Check: {text}" in shown for text in texts)
    assert assessment_sequences(base, tokenizer, writer) == []
