"""What the preference-learning methods (CSO and its baselines, ETO) share.

`PreferenceBasics` holds their common config fields; `RoundFiles` keeps each round's stage
outputs in the run directory, so a resumed run repeats no finished stage; `round_engine`
gives each stage its own sampling seed, so a stage recomputed after a resume draws what an
uninterrupted run would have drawn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from hindsight.agent.engine import RolloutEngine
from hindsight.configs import option
from hindsight.methods.basics import Schedule, SupervisedBasics, check_split
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.roles import RoleSpec, adapter_roles, attach
from hindsight.train.dpo import DPOSettings
from hindsight.train.model import TrainableModel
from hindsight.types import SamplingParams


@dataclass(frozen=True)
class PreferenceBasics(SupervisedBasics):
    """Config fields of the round-based DPO methods (CSO, Step-DPO, IPR, ETO)."""

    init_from: str = option("", "the policy to improve: a run directory, checkpoint, PEFT folder, bundled adapter "
                                "name or adapter spec (as GRPO's init_from)")
    expert: str = option("oracle", "the expert role: oracle (the env's planner), policy (the policy itself; CSO's "
                                   "policy+policy pair source), adapter:SOURCE (a frozen adapter on the shared base) or "
                                   "a model spec (docs/models.md, Roles)")
    rounds: int = option(2, "rounds of rollouts → pairs → DPO, each from the previous round's policy")
    tasks_per_round: int = option(64, "fresh train tasks the policy is rolled out on per round")
    temperature: float = option(1.0, "sampling temperature of the policy's rollouts and branch continuations")
    expert_temperature: float = option(1.0, "sampling temperature of the expert")
    beta: float = option(0.5, "DPO's β")
    epochs: int = option(2, "DPO passes over a round's pairs")
    batch_size: int = option(8, "pairs per DPO optimizer step")
    micro_batch_size: int = option(4, "pairs per forward/backward")
    lr: float = option(5e-5, "DPO learning rate")
    warmup_steps: int = option(0, "linear warm-up optimizer steps of each round's DPO")
    checkpoint_every: int = option(1, "save a checkpoint every N rounds (always after the last)")
    eval_every: int = option(0, "evaluate on the validation split every N rounds (0: only at the end)")
    eval_episodes: int = option(50, "tasks per validation evaluation")
    final_eval_split: str = option("test", "split evaluated at the end ('' skips it)")
    final_eval_episodes: int = option(100, "tasks of the final evaluation")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_split("final_eval_split", self.final_eval_split, optional=True)
        if self.self_guide:
            raise ValueError("self_guide is a GRPO switch (hindsight train grpo); the DPO methods compare actions only")
        for name in ("rounds", "tasks_per_round"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        self.dpo_settings()  # refuses a bad β or batch split now, not after the first rollouts

    def rounds_schedule(self) -> Schedule:
        return Schedule(checkpoint_every=self.checkpoint_every, keep_checkpoints=self.keep_checkpoints,
                        eval_every=self.eval_every, eval_episodes=self.eval_episodes,
                        final_split=self.final_eval_split, final_episodes=self.final_eval_episodes)

    def dpo_settings(self) -> DPOSettings:
        return DPOSettings(beta=self.beta, lr=self.lr, epochs=self.epochs, batch_size=self.batch_size,
                           micro_batch_size=self.micro_batch_size, warmup_steps=self.warmup_steps,
                           weight_decay=self.weight_decay, max_grad_norm=self.max_grad_norm, seed=self.seed,
                           shared_tokens=self.shared_tokens)

    def load_policy(self, roles: Sequence[RoleSpec]) -> TrainableModel:
        """The policy adapter (from `init_from`) and an adapter per `adapter:SOURCE` role, on one base.

        A resumed run's checkpoint replaces the policy's starting weights in `TrainingRun.begin`.
        """
        model = load_trainable(self.model, ("policy", *adapter_roles(roles)), self.lora_rank, self.lora_alpha,
                               self.full_finetune, dtype=self.dtype)
        if self.init_from:
            load_latest(model, self.init_from)
        for spec in roles:
            attach(model, spec)
        return model

    def round_tasks(self, round_number: int) -> list[int]:
        """The train-split seeds of one round: each round draws fresh tasks, the same for every arm."""
        from hindsight.envs import make

        seeds = make(self.env, **self.env_kwargs).split_seeds("train", self.rounds * self.tasks_per_round)
        return seeds[(round_number - 1) * self.tasks_per_round:round_number * self.tasks_per_round]

    def round_engine(self, backend: Any, temperature: float, round_number: int, stage: int) -> RolloutEngine:
        """An engine on this run's environment whose sampling seed belongs to one stage of one round."""
        from hindsight.envs import Env, make

        def make_env() -> Env:
            return make(self.env, **self.env_kwargs)

        sampling = SamplingParams(temperature=temperature, max_new_tokens=self.max_new_tokens)
        seed = self.seed + 100_003 * round_number + 10_007 * stage
        return RolloutEngine(make_env, backend, self.rollout_config(sampling, "train", seed=seed))


def frozen_role(spec: RoleSpec) -> RoleSpec:
    """Refuse a trained adapter for a role these methods never train (only the policy is)."""
    if spec.trained_adapter:
        raise ValueError(f"{spec.role}: only the policy is trained here; name the adapter's source (adapter:SOURCE)")
    return spec


class RoundFiles:
    """A round's stage outputs (round-N/NAME.jsonl), each written whole or not at all."""

    def __init__(self, run: Path, round_number: int):
        self.folder = run / f"round-{round_number}"
        self.folder.mkdir(parents=True, exist_ok=True)

    def cached(self, name: str, compute: Callable[[], list], encode: Callable[[Any], dict],
               decode: Callable[[dict], Any]) -> list:
        path = self.folder / f"{name}.jsonl"
        if path.exists():
            return [decode(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
        items = compute()
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(encode(item)) + "\n" for item in items), encoding="utf-8")
        tmp.replace(path)  # a stage that crashed leaves no file, so it runs again
        return items
