"""A learned PRM: a `prm` adapter on the shared base, taught the oracle's scores of the policy's own moves.

CSO verifies a PRM's pick with a policy rollout because a learned PRM is wrong in ways its
user cannot see. The oracle PRM is exact, and a noisy oracle is wrong at random; this method
makes the third kind, the one the paper has in mind: a small model that learned to score
moves and errs where it generalises badly. It is the critic's warm start (critic-sft) for a
PRM, and its prompt is the LLM judge's (`JudgePRM`), so CSO reads it with `prm: adapter:RUN`.

    attempts  the policy (e.g. the SFT warm start) samples attempts on train tasks, or logged
              trajectories are read from a run
    targets   the oracle PRM's score of every move the policy made (1 solves or shortens the
              plan, 0.5 keeps it, 0.25 wastes a move, 0 makes the task unsolvable), or of every
              admissible move at the states it met (`moves: all`), the most common score capped
              at the count of the next most common
    sft       the `prm` adapter on (judge prompt → the score), answer tokens only
    eval      greedy scores of the moves of held-out validation attempts against the oracle's,
              beside the scorer that always answers the training data's most common score

`hindsight train prm-sft --resume RUN` continues from the latest checkpoint on the moves the
run saved.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hindsight.agent.prm import JudgePRM, OraclePRM, StepQuery
from hindsight.agent.replay import replay_to
from hindsight.configs import option
from hindsight.methods.basics import SupervisedBasics
from hindsight.methods.lifecycle import Evaluator, TrainingRun
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.methods.registry import training_method
from hindsight.methods.supervised import fit_supervised, policy_attempts, training_trajectories, warm_start_attempts
from hindsight.roles import RoleBackend
from hindsight.train.distributed import single_process
from hindsight.train.model import TrainableModel
from hindsight.train.sequences import reply_ids, reply_sequence
from hindsight.types import Trajectory

#: A learned score counts as the oracle's when it is this close (the oracle's scores are 0.25 apart).
SCORE_TOLERANCE = 0.125
MOVE_SETS = ("own", "all")


@dataclass(frozen=True)
class PRMSFTConfig(SupervisedBasics):
    policy_from: str = option("", "run directory or adapter whose policy makes the attempts (e.g. the SFT warm "
                                  "start); empty: the base model")
    attempts: str = option("", "score the moves of logged trajectories instead (a run directory or .jsonl file)")
    episodes: int = option(64, "train tasks the policy attempts")
    samples_per_task: int = option(2, "attempts per task")
    temperature: float = option(1.0, "sampling temperature of the attempts")
    moves: str = option("own", "which moves are scored: own (the moves the policy made) or all (every admissible move "
                               "at every state the policy met, its own included: the PRM then sees moves contrasted "
                               "at one state, as CSO asks it to rate alternatives)")
    balance: bool = option(True, "cap the most common oracle score at the count of the next most common one")
    quote: bool = option(False, "the judge's prompt quotes, under the proposed move, the observation's lines that "
                                "name it (read it in CSO as prm: quoted:adapter:RUN)")
    eval_episodes: int = option(32, "validation tasks whose attempts' moves are scored after training (0 skips it)")
    eval_attempts: str = option("", "score the moves of these logged held-out trajectories in the evaluation instead "
                                    "of fresh validation attempts (a run directory or .jsonl file)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.episodes < 1 or self.samples_per_task < 1:
            raise ValueError("episodes and samples_per_task must be >= 1")
        if self.full_finetune:
            raise ValueError("the PRM is a LoRA adapter beside the policy; full_finetune must be false")
        if self.moves not in MOVE_SETS:
            raise ValueError(f"moves must be one of {', '.join(MOVE_SETS)}, not {self.moves!r}")


@dataclass(frozen=True)
class ScoredMove:
    """One move of an attempt and the oracle's score of it."""

    query: StepQuery
    score: float


def oracle_moves(attempts: Sequence[Trajectory], moves: str = "own") -> list[ScoredMove]:
    """Every readable move of every attempt (`own`), or every admissible move at each of their
    states (`all`, the attempt's own move first), with the oracle PRM's score."""
    queries = []
    for attempt in attempts:
        for at, step in enumerate(attempt.steps):
            own = [step.action] if step.action else []
            if moves == "all":
                env = replay_to(attempt, at)
                try:
                    own += [action for action in env.admissible_actions() if action not in own]
                finally:
                    env.close()
            queries += [StepQuery(attempt, at, action) for action in own]
    return [ScoredMove(query, score.value) for query, score in zip(queries, OraclePRM().score(queries), strict=True)]


def balance_scores(moves: Sequence[ScoredMove]) -> list[ScoredMove]:
    """All moves, except that the most common score keeps only as many (the first ones) as the next most
    common score has: a PRM that sees one answer most of the time learns to give it."""
    counts = Counter(move.score for move in moves)
    if len(counts) < 2:
        return list(moves)
    (top, _), (_, second) = counts.most_common(2)
    kept, budget = [], second
    for move in moves:
        if move.score == top:
            if budget == 0:
                continue
            budget -= 1
        kept.append(move)
    return kept


def score_text(score: float) -> str:
    """The answer the PRM is taught: the score alone, as `parse_score` reads it (`1`, `0.25`)."""
    return f"{score:g}"


@dataclass(frozen=True)
class Agreement:
    """How a learned PRM's scores of held-out moves compare with the oracle's."""

    moves: int
    agreement: float  # share within SCORE_TOLERANCE of the oracle's score
    side_agreement: float  # share on the same side of 0.5 (a good move against a bad one)
    fatal_recall: float | None  # share of the oracle's fatal moves (score 0) scored at most 0.25
    unreadable: float  # share of answers without a score
    majority_agreement: float  # the same, for a scorer that always answers the training data's commonest score
    majority_side_agreement: float

    def metrics(self, prefix: str) -> dict[str, float]:
        values = {name: value for name, value in vars(self).items() if value is not None}
        return {f"{prefix}/{name}": float(value) for name, value in values.items()}


def agreement(learned: Sequence[float | None], oracle: Sequence[float], majority: float) -> Agreement:
    """Compare learned scores (None: unreadable, which counts as a disagreement) with the oracle's."""
    if not oracle or len(learned) != len(oracle):
        raise ValueError("agreement needs one learned score per oracle score, and at least one")
    n = len(oracle)

    def close(a: float | None, b: float) -> bool:
        return a is not None and abs(a - b) <= SCORE_TOLERANCE

    def same_side(a: float | None, b: float) -> bool:
        return a is not None and (a >= 0.5) == (b >= 0.5)

    fatal = [score for score, truth in zip(learned, oracle) if truth == 0.0]
    return Agreement(
        moves=n,
        agreement=sum(map(close, learned, oracle)) / n,
        side_agreement=sum(map(same_side, learned, oracle)) / n,
        fatal_recall=sum(s is not None and s <= 0.25 for s in fatal) / len(fatal) if fatal else None,
        unreadable=sum(s is None for s in learned) / n,
        majority_agreement=sum(close(majority, truth) for truth in oracle) / n,
        majority_side_agreement=sum(same_side(majority, truth) for truth in oracle) / n,
    )


def prm_evaluator(config: PRMSFTConfig, run: TrainingRun, model: TrainableModel, majority: float) -> Evaluator:
    """Greedy scores of the moves of fresh policy attempts on a split, held against the oracle's."""

    def evaluate(split: str, episodes: int, name: str, prefix: str) -> tuple[dict[str, float], dict[str, Any]]:
        if config.eval_attempts:
            held_out = [t for t in training_trajectories(config.eval_attempts, "eval_attempts") if t.env == config.env]
        else:
            model.activate("policy")
            held_out = policy_attempts(config, model, split, episodes, config.samples_per_task, config.temperature,
                                       config.seed + 1)
        moves = oracle_moves(held_out, config.moves)
        if not moves:
            return {}, {"moves": 0}
        judge = JudgePRM(RoleBackend(model, "prm"), fallback=0.5, quote=config.quote)
        answers = judge.score([move.query for move in moves])
        learned = [None if answer.error else answer.value for answer in answers]
        result = agreement(learned, [move.score for move in moves], majority)
        by_attempt: dict[str, list[dict[str, Any]]] = {}
        for move, answer, value in zip(moves, answers, learned):
            by_attempt.setdefault(move.query.trajectory.id, []).append(
                {"at": move.query.at, "action": move.query.action, "oracle": move.score, "learned": value,
                 "answer": answer.text})
        run.dir.replace_trajectories(name, (attempt.with_meta(prm_scores=by_attempt.get(attempt.id, []))
                                            for attempt in held_out), env=config.env, split=split)
        return result.metrics(prefix), vars(result)

    return evaluate


@training_method("prm-sft", PRMSFTConfig, help="a learned PRM: an adapter taught the oracle's scores of the policy's moves")
def train_prm_sft(config: PRMSFTConfig, out: str | Path, *, resume: bool = False) -> Path:
    from hindsight.envs import make

    single_process("prm-sft")
    run = TrainingRun("prm-sft", PRMSFTConfig, config, out, resume=resume)
    config = run.config
    model = load_trainable(config.model, ("policy", "prm"), config.lora_rank, config.lora_alpha, False,
                           dtype=config.dtype)
    if config.policy_from:
        load_latest(model, config.policy_from, "policy")
    env = make(config.env, **config.env_kwargs)
    tokenizer = model.backend.tokenizer

    started = time.perf_counter()
    # A resumed run reads back the moves' attempts it trained on.
    attempts, _ = warm_start_attempts(run, model, env.id, config.attempts, resume=resume, episodes=config.episodes,
                                      samples=config.samples_per_task, temperature=config.temperature)
    moves = oracle_moves(attempts, config.moves)
    if not moves:
        raise ValueError(f"no readable {env.id} moves to score in {len(attempts)} attempts")
    kept = balance_scores(moves) if config.balance else moves
    counts = Counter(move.score for move in kept)
    majority = Counter(move.score for move in moves).most_common(1)[0][0]
    # The judge's own prompt, so CSO's `prm: adapter:RUN` (`quoted:adapter:RUN` with `quote`)
    # asks exactly what was taught.
    prompts = JudgePRM(RoleBackend(model, "prm"), quote=config.quote)
    sequences = [
        reply_sequence(tokenizer, prompts.prompt(move.query), reply_ids(tokenizer, score_text(move.score), None, "stop"),
                       f"{move.query.trajectory.id}#{move.query.at}")
        for move in kept
    ]

    data = {"data/attempts": len(attempts), "data/moves": len(moves), "data/kept": len(kept),
            **{f"data/score_{score:g}": float(count) for score, count in sorted(counts.items())},
            "data/majority_score": majority, "timing/collect_s": time.perf_counter() - started}
    steps = fit_supervised(run, model, "prm", sequences, data=data, area="prm_sft",
                           schedule=config.schedule("validation", config.eval_episodes),
                           evaluate=prm_evaluator(config, run, model, majority))
    return run.finish(optimizer_steps=steps, moves=len(kept))
