"""The policy-gradient update on a real (tiny) causal LM moves probability the right way.

The maths in `algos/` are checked against plain loops and a bandit; this test checks the
glue around them — chat rendering, masks, LoRA parameters, micro-batching, the
optimizer — on the model class training actually uses. A sign or alignment error in
any of them makes the rewarded answer lose ground to the penalised one, and the test fail.
The margin log p(rewarded) − log p(penalised) is what the objective must raise: the
absolute log-prob of either answer can move with tokens they share (end of turn).
"""

import pytest
import torch

from hindsight.algos.grpo import Aggregation
from hindsight.methods.model_setup import load_trainable, make_optimizer
from hindsight.train.model import collate
from hindsight.train.sequences import TrainingSequence, render_prompt
from hindsight.train.update import UpdateSettings, policy_gradient_update
from hindsight.types import ChatMessage


def answer_sequences(model, prompt: str, answers: list[str]) -> list[TrainingSequence]:
    tokenizer = model.backend.tokenizer
    prompt_ids = tokenizer.encode(render_prompt(tokenizer, (ChatMessage("user", prompt),)), add_special_tokens=False)
    sequences = []
    for answer in answers:
        response = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        sequences.append(TrainingSequence(tuple(prompt_ids + response), (0,) * len(prompt_ids) + (1,) * len(response),
                                          answer, (0,)))
    return sequences


def sequence_logprob(model, sequence: TrainingSequence) -> float:
    with torch.no_grad():
        return float(model.logprobs(collate([sequence], model.pad_id)).sum())


@pytest.mark.parametrize("aggregation", list(Aggregation))
@pytest.mark.parametrize("epochs", [1, 2])
def test_rewarded_answer_gains_probability(tiny_model_dir, aggregation, epochs):
    torch.manual_seed(0)
    model = load_trainable(f"hf:{tiny_model_dir}", ("policy",), lora_rank=8, lora_alpha=16, full_finetune=False)
    # Two prompts in one batch, answers of different lengths, so padding and micro-batch
    # boundaries are exercised: the first answer of each prompt is the rewarded one.
    sequences = (answer_sequences(model, "Which way?", ["<action>up</action>", "west, then north"])
                 + answer_sequences(model, "Pick a block.", ["apple", "<stack>stone</stack>"]))
    advantages = [1.0, -1.0, 1.0, -1.0]
    before = [sequence_logprob(model, s) for s in sequences]
    optimizer, scheduler = make_optimizer(model.parameters(), lr=1e-2, weight_decay=0.0, warmup=0, total=20)
    settings = UpdateSettings(aggregation=aggregation, epochs=epochs, micro_batch_size=3)
    for _ in range(5):
        policy_gradient_update(model, sequences, advantages, optimizer, scheduler, settings)
    after = [sequence_logprob(model, s) for s in sequences]
    for rewarded, penalised in ((0, 1), (2, 3)):
        margin_gain = (after[rewarded] - after[penalised]) - (before[rewarded] - before[penalised])
        assert margin_gain > 0.5, (rewarded, before, after)
