"""Hindsight's advantage maths in the form verl calls an advantage estimator.

verl (0.9.1, `compute_advantage` in `verl.trainer.ppo.ray_trainer`) calls a registered
estimator with keywords: `token_level_rewards` [B, T] (the reward of each response token; an
agent loop's `reward_score` sits on the last token), `response_mask` [B, T] (1 for tokens the
model generated), `config` (the `algorithm` section), `index` [B] (the `uid` of each row: rows
sampled from the same prompt share it) and sometimes more (`reward_baselines`). It expects
`(advantages, returns)`, both [B, T]. B counts trajectories: the Hindsight agent loop returns
a whole episode as one row, so a row is a trajectory and its return is the sum of its rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hindsight.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageOptions, GroupBatch


def episode_returns(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """R of every row: the sum of all its rewards, masked tokens included. Returns [B].

    The mask must not select the rewards: verl writes a row's score on its last token,
    and an episode cut by the response budget ends on observation tokens (mask 0), so a
    masked sum would give a truncated episode R = 0 whatever its score. verl's own GRPO
    sums the same way; padding carries no reward.
    """
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(f"token_level_rewards and response_mask must both be [B, T], got "
                         f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}")
    return token_level_rewards.sum(dim=1)


def grouped_advantages(returns: torch.Tensor, index: Sequence[Any], *, normalize_std: bool,
                       eps: float = 1e-6) -> torch.Tensor:
    """Hindsight's registered `grpo` estimator over the rows that share an index; groups may differ in size.

    returns: [B]; index: [B] group ids (verl's `uid`). Returns [B] in the dtype of `returns`.
    Equal returns in a group, and so a group of one row, get exactly 0: with no sibling there
    is nothing to compare a row with.
    """
    if len(index) != returns.shape[0]:
        raise ValueError(f"one index per row is needed: {len(index)} ids for {returns.shape[0]} rows")
    batch = GroupBatch(returns.to(torch.float64), tuple(index))
    options = AdvantageOptions(normalize_std=normalize_std, eps=eps)
    return ADVANTAGE_ESTIMATORS.get("grpo")(batch, options).trajectory.to(returns.dtype)


def trajectory_grpo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any],
                    config: Any = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory GRPO: A = (R − mean_group) / (std_group + ε), shared by every model token.

    Registered as `hindsight_grpo`. R is the whole episode's return (every turn of a multi-turn
    row counts once, and a row cut on an observation token keeps its reward), the standard
    deviation is the population one as in Hindsight's own trainer (a group whose returns are
    all equal gets 0, not NaN), and `algorithm.norm_adv_by_std_in_grpo=false` keeps only the
    centring. Observation and padding
    tokens get 0. verl's other keywords (such as `reward_baselines`) do not enter GRPO.
    Returns (advantages, returns), both [B, T]; the returns are the advantages, as verl's own
    critic-free estimators report them.
    """
    normalize_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    mask = response_mask.to(token_level_rewards.dtype)
    with torch.no_grad():
        returns = episode_returns(token_level_rewards, mask)
        advantages = grouped_advantages(returns, list(index), normalize_std=normalize_std)
        per_token = advantages.unsqueeze(1) * mask
    return per_token, per_token
