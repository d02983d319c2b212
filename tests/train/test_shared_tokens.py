"""A shared prefix is encoded once: the same log-probs and gradients as pushing every sequence whole.

The reference is the plain form: each sequence through the model on its own, no prefix
cache (`collate` without `share_prefix`).
"""

import itertools

import pytest
import torch

from hindsight.methods.model_setup import load_trainable
from hindsight.train.model import collate, distinct_tokens, shareable_prefix, token_logprobs
from hindsight.train.sequences import TrainingSequence
from hindsight.train.trajectory_dpo import side_logprobs
from hindsight.train.update import sft_loss


def sequence(prompt, response, name="t"):
    return TrainingSequence(tuple(prompt) + tuple(response), (0,) * len(prompt) + (1,) * len(response), name, (0,))


SYSTEM = list(range(900, 916))
# A GRPO-like batch: two tasks' first turns (the same prompt twice, different replies), and a
# later turn; each prompt begins with the same system prompt.
BATCH = [sequence(SYSTEM + [40, 41, 42], [7, 8, 9], "a0"), sequence(SYSTEM + [40, 41, 42], [7, 5], "a1"),
         sequence(SYSTEM + [50, 51], [6, 6, 6, 6], "b0"), sequence(SYSTEM + [40, 43, 44, 45], [9], "a0")]


def test_the_prefix_stops_before_the_first_token_that_carries_loss():
    same_prompt = BATCH[:2]
    # The token after the prefix has its log-prob from the prefix's last position, so the
    # prefix ends one token before the first reply token.
    assert shareable_prefix(same_prompt) == len(SYSTEM) + 3 - 1
    assert shareable_prefix(BATCH) == len(SYSTEM)
    assert shareable_prefix(BATCH[:1]) == 0
    assert shareable_prefix([sequence([1, 2], [3]), sequence([4, 2], [3])]) == 0
    # Without any loss token, every sequence still keeps one token of its own.
    assert shareable_prefix([TrainingSequence((1, 2, 3), (0, 0, 0), "x", ()),
                             TrainingSequence((1, 2, 3), (0, 0, 0), "y", ())]) == 2


def test_distinct_tokens_counts_the_prefix_tree():
    prefixes = {s.input_ids[:n] for s in BATCH for n in range(1, len(s.input_ids) + 1)}
    assert distinct_tokens(BATCH) == len(prefixes)
    assert distinct_tokens(BATCH[:1]) == len(BATCH[0].input_ids)


@pytest.fixture(scope="module")
def model(tiny_lora_model_dir):
    torch.manual_seed(0)
    model = load_trainable(f"hf:{tiny_lora_model_dir}", ("policy",), lora_rank=4, lora_alpha=8, full_finetune=False)
    with torch.no_grad():
        for p in model.parameters():  # peft starts lora_B at zero, where lora_A gets no gradient
            p.add_(torch.randn_like(p) * 0.05)
    return model


def logprobs_and_grads(model, batch):
    logp = token_logprobs(model.model, batch)
    grads = torch.autograd.grad((logp * torch.linspace(0.5, 1.5, logp.shape[1])).sum(), model.parameters())
    return logp.detach(), torch.cat([g.flatten() for g in grads])


@pytest.mark.parametrize("rows", [BATCH, BATCH[:2], list(reversed(BATCH))], ids=["mixed", "same-prompt", "reversed"])
def test_shared_prefix_logprobs_and_gradients_equal_the_plain_form(model, rows):
    shared = collate(rows, model.pad_id, share_prefix=True)
    plain = collate(rows, model.pad_id)
    assert shared.shared_prefix > 0 and plain.shared_prefix == 0
    assert shared.num_tokens == plain.num_tokens - (len(rows) - 1) * shared.shared_prefix
    logp_shared, grad_shared = logprobs_and_grads(model, shared)
    logp_plain, grad_plain = logprobs_and_grads(model, plain)
    assert torch.equal(logp_shared == 0, logp_plain == 0)
    assert torch.allclose(logp_shared, logp_plain, atol=1e-5)
    assert (grad_shared - grad_plain).norm() <= 1e-5 * grad_plain.norm()


def test_sft_loss_is_the_same_with_and_without_sharing(model):
    with torch.no_grad():
        (shared, shared_pushed), (plain, plain_pushed) = sft_loss(model, BATCH), sft_loss(model, BATCH, shared_tokens=False)
    assert shared.item() == pytest.approx(plain.item(), rel=1e-5)
    assert shared_pushed == plain_pushed - (len(BATCH) - 1) * len(SYSTEM)


def test_trajectory_dpo_side_sums_are_the_same_with_and_without_sharing(model):
    # A pair's two sides share the prompt up to the step they differ at.
    sides = [[BATCH[0], BATCH[3]], [BATCH[1]], [BATCH[2], BATCH[0]]]
    with torch.no_grad():
        for micro in (1, 2, 3):
            shared = side_logprobs(model.model, sides, model.pad_id, micro, share_prefix=True)
            plain = side_logprobs(model.model, sides, model.pad_id, micro)
            assert torch.allclose(shared, plain, atol=1e-5)


def test_every_order_of_a_micro_batch_gives_the_same_prefix():
    lengths = {shareable_prefix(list(order)) for order in itertools.permutations(BATCH)}
    assert lengths == {len(SYSTEM)}


def line_trajectory(name: str, raws: list[str]):
    from hindsight.types import Step, Trajectory

    steps = tuple(
        Step(index=i, observation=f"You are at cell {i}.", state_key=str(i), raw=raw, action="x", analysis=None,
             valid=True, reward=0.0, score=0.0, feedback="", finish_reason="stop")
        for i, raw in enumerate(raws)
    )
    return Trajectory(env="line", seed=0, instruction="Reach cell 3.", steps=steps, final_observation="end",
                      final_state_key="3", success=False, score=0.0, terminated=False, truncated=True, id=name)


@pytest.mark.parametrize("aggregation", ["token_mean", "trajectory_mean"])
def test_a_whole_episode_trains_like_its_turns(model, aggregation):
    """With full history, one sequence per trajectory takes the same step as one per turn."""
    from hindsight.agent.prompts import Memory, PromptBuilder
    from hindsight.train.sequences import policy_sequences
    from hindsight.train.update import UpdateSettings, policy_gradient_update

    prompts = PromptBuilder(Memory.parse("full"))
    batch = [(line_trajectory("a", ["<action>right</action>", "<action>down</action>", "<action>down</action>"]), 1.0),
             (line_trajectory("b", ["<action>left</action>", "<action>up</action>"]), -0.5)]
    tokenizer = model.backend.tokenizer
    steps = {}
    for whole in (False, True):
        sequences, advantages = [], []
        for trajectory, advantage in batch:
            made = policy_sequences(trajectory, tokenizer, prompts, whole_episode=whole)
            assert len(made) == (1 if whole else trajectory.num_steps)
            sequences += made
            advantages += [advantage] * len(made)
        params = model.parameters()
        before = [p.detach().clone() for p in params]
        optimizer = torch.optim.SGD(params, lr=1.0)
        policy_gradient_update(model, sequences, advantages, optimizer, None,
                               UpdateSettings(aggregation=aggregation, micro_batch_size=2, max_grad_norm=1e9))
        steps[whole] = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
        with torch.no_grad():
            for p, b in zip(params, before):
                p.copy_(b)
    assert (steps[True] - steps[False]).norm() <= 1e-4 * steps[False].norm()
    # Windowed history does not only grow: one sequence per turn.
    windowed = policy_sequences(batch[0][0], tokenizer, PromptBuilder(Memory.parse(1)), whole_episode=True)
    assert len(windowed) == 3
