"""The DPO objective on summed log-probabilities, for pairs whose sides span several prompts.

TRL's `DPOTrainer` scores one response to one prompt. ETO compares whole trajectories: each
side is a sequence of turns, each turn its own prompt (the observation of that moment) and
its own response, so a side's log-probability is the sum over its turns. Given those sums,
the loss is DPO's (Rafailov et al., 2023):

    r_w = β (log π(y_w) − log π_ref(y_w)),  r_l = β (log π(y_l) − log π_ref(y_l))
    loss = −mean log σ(r_w − r_l)

Pure functions of tensors; `hindsight.train.trajectory_dpo` computes the sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DPOTerms:
    """loss (scalar, with grad); per-pair chosen and rejected rewards [B] (detached)."""

    loss: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    @property
    def reward_accuracy(self) -> float:
        return float((self.chosen_rewards > self.rejected_rewards).float().mean())

    @property
    def reward_margin(self) -> float:
        return float((self.chosen_rewards - self.rejected_rewards).mean())


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, reference_chosen: torch.Tensor,
             reference_rejected: torch.Tensor, beta: float) -> DPOTerms:
    """DPO on summed log-probabilities.

    All inputs [B]: log π or log π_ref of each pair's chosen / rejected side (a sum over its
    response tokens, across every turn of the side). Returns the mean loss over the B pairs.
    """
    if beta <= 0:
        raise ValueError("beta must be > 0")
    shapes = {t.shape for t in (policy_chosen, policy_rejected, reference_chosen, reference_rejected)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise ValueError(f"every input must have the same shape [B], got {sorted(map(tuple, shapes))}")
    chosen = beta * (policy_chosen - reference_chosen)
    rejected = beta * (policy_rejected - reference_rejected)
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    return DPOTerms(loss, chosen.detach(), rejected.detach())
