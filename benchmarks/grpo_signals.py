"""What a GRPO run's training log says about where its gradient went (docs/results.md, issue 12).

    python benchmarks/grpo_signals.py runs/selfguide/grpo-s0 runs/selfguide/sg-s0 ...

It reads a training log's per-turn signals, so it needs a live run directory, outside the
repository (results/ keeps outcome tables, not trajectory logs).

For each run, from `trajectories/train.jsonl`:
- the trajectories that carried a gradient (advantage ≠ 0), split by how they ended (solved,
  failed by the environment, e.g. a fall into a hole, or failed at the step budget), with their
  mean length, mean advantage and the push each of their moves got, read with the run's
  aggregation (its config.yaml): under trajectory_mean a trajectory's advantage is spread over
  its own moves (advantage / moves); under turn_mean and token_mean every move (every token)
  weighs the same, so each move gets the whole advantage (token_mean: up to the move's length
  in tokens). Compare the column within a run, not across aggregations;
- per update: the net advantage (`hindsight.algos.grpo.net_advantage`) of the episodes that
  trained, as token_mean and as trajectory_mean would weigh them, beside the rollouts' mean
  action entropy. A positive net advantage is a push toward whatever the policy sampled: under
  token_mean a group whose successes are longer than its failures gets one, and it sharpens
  the policy (docs/results.md, issue 45, "Why GRPO sharpens");
- for Self-Guide runs, per update: the share of scored turns whose self-assessment label equals
  the oracle's, beside the share a judge that always answers "positive" would reach on the
  same turns, and which way the notes lean (the oracle's positive turns called positive, its
  negative turns called negative, all turns called negative), and which way the policy
  gradient pushed the notes' label token on the episodes that trained (toward "negative" or
  "positive", split by the oracle's label);
- for Self-Guide runs whose guidance reward was on (λ > 0) at some update: the mean Σ_t r_t of
  the episodes trained with λ > 0, by how they ended, their mean shaped return under each
  guidance form (the paper's sum, the mean over notes, the sum capped at R_env; recomputed from
  the same episodes' labels), how many failures earn as much as the least-paid success under
  each form, and, in each of those groups where a
  failure at the step budget (a stall) and a failure by the environment (a fall) met, the
  stall's advantage minus the fall's. With λ = 0 two failures get the same advantage; with
  notes that keep saying "positive", Σ_t r_t grows with the episode's length, so the guidance
  reward pays a stall more than a fall;
- for GiGPO runs (step advantages in the log), per block of 5 updates: the share of steps whose
  advantage carries a step-level part (`hindsight.algos.advantages.step_parts`), how many of
  those lie on the first turn, where the step group is the whole group and the part repeats the
  episode's ranking, and how many later ones pull against their episode's advantage, the
  contrast GiGPO adds to GRPO. The same three shares are logged per update as
  `advantage/step_part_*` by runs from 2026-11-29 on.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from tables import report_skipped

from hindsight.agent.selfguide import oracle_labels
from hindsight.algos.advantages import Advantages, StepParts, step_parts
from hindsight.algos.grpo import Aggregation, net_advantage, sequence_weights
from hindsight.algos.selfguide import GuidanceForm, shaped_return
from hindsight.diagnostics.runs import read_run_config
from hindsight.logs import read_trajectories
from hindsight.logs.importers import episode_ending


def outcome(trajectory) -> str:
    if trajectory.success:
        return "solved"
    return {"env": "failed by the env", "budget": "failed at the budget"}.get(
        episode_ending(trajectory.terminated, trajectory.truncated), "failed, other")


def advantage_of(trajectory) -> float:
    """The GRPO advantage the trajectory trained with (0 where it carried none)."""
    return (trajectory.meta.get("grpo") or {}).get("advantage", 0.0)


def push_per_move(advantage: float, moves: int, aggregation: Aggregation) -> float:
    """The weight a move gets in the loss, up to a factor common to the whole batch."""
    return advantage / moves if aggregation is Aggregation.TRAJECTORY_MEAN else advantage


def advantage_rows(trajectories, aggregation: Aggregation = Aggregation.TRAJECTORY_MEAN) -> list[str]:
    by_outcome = defaultdict(list)
    for t in trajectories:
        advantage = advantage_of(t)
        if advantage and t.steps:
            by_outcome[outcome(t)].append((len(t.steps), advantage))
    rows = [f"| episodes with a gradient | n | mean moves | mean advantage | push per move ({aggregation.value}) |",
            "|---|---|---|---|---|"]
    for name, pairs in sorted(by_outcome.items()):
        n = len(pairs)
        rows.append(f"| {name} | {n} | {sum(m for m, _ in pairs) / n:.1f} | {sum(a for _, a in pairs) / n:+.2f} | "
                    f"{sum(push_per_move(a, m, aggregation) for m, a in pairs) / n:+.3f} |")
    return rows


def episode_tokens(trajectory) -> int:
    """Generated tokens of an episode (its moves, where the log kept no token ids)."""
    return sum(len(step.token_ids) if step.token_ids else 1 for step in trajectory.steps)


def update_order(update: int | None) -> tuple[bool, int | None]:
    """Updates in order, with steps logged outside any update (None) last."""
    return update is None, update


def sharpening_rows(trajectories, drop_zero_variance: bool) -> list[str]:
    """Per update: the net advantage under token_mean and trajectory_mean, and the action entropy."""
    per_update = defaultdict(list)
    for t in trajectories:
        if t.steps and (advantage_of(t) or not drop_zero_variance):
            per_update[t.meta.get("update")].append(t)
    entropy = defaultdict(list)
    for t in trajectories:
        for step in t.steps:
            entropy[t.meta.get("update")].extend(step.action_entropies or ())
    rows = ["| update | episodes trained | net advantage, token_mean | net advantage, trajectory_mean | "
            "action entropy |", "|---|---|---|---|---|"]
    for update in sorted(entropy, key=update_order):
        trained = per_update.get(update, [])
        # An episode is its own unit; a log without ids still has distinct episodes.
        tokens, ids = [episode_tokens(t) for t in trained], [t.id or f"#{i}" for i, t in enumerate(trained)]
        advantages = [advantage_of(t) for t in trained]
        pushes = []
        for aggregation in (Aggregation.TOKEN_MEAN, Aggregation.TRAJECTORY_MEAN):
            weights = sequence_weights(tokens, ids, aggregation, aggregation.units(tokens, ids))
            pushes.append(net_advantage(advantages, tokens, weights) if trained else 0.0)
        mean_entropy = sum(entropy[update]) / len(entropy[update]) if entropy[update] else float("nan")
        pushes = [round(p, 3) + 0.0 for p in pushes]  # no "-0.000" for a float-noise zero
        rows.append(f"| {update} | {len(trained)} | {pushes[0]:+.3f} | {pushes[1]:+.3f} | {mean_entropy:.2f} |")
    return rows


@dataclass(frozen=True)
class ScoredTurn:
    """A note the oracle can check: the oracle's label of the step it judged and the note's
    label, with what the note's episode trained with."""

    update: int | None
    oracle: str  # "positive" or "negative"
    label: str  # the note's label as parsed ("neutral" included)
    advantage: float
    moves: int  # the episode's, for trajectory_mean's weight


def scored_turns(trajectories) -> list[ScoredTurn]:
    """The turns `label_agreement` compares, replaying each Self-Guide episode's oracle once."""
    turns = []
    for t in trajectories:
        if all(step.assessment is None for step in t.steps):
            continue  # not a Self-Guide episode: nothing to compare, so no replay
        for step, expected in zip(t.steps, oracle_labels(t)):
            if expected is None or step.assessment is None or step.assessment.label is None:
                continue
            turns.append(ScoredTurn(t.meta.get("update"), expected.value, step.assessment.label,
                                    advantage_of(t), len(t.steps)))
    return turns


def by_update(turns: list[ScoredTurn]) -> list[tuple[int | None, list[ScoredTurn]]]:
    groups = defaultdict(list)
    for turn in turns:
        groups[turn.update].append(turn)
    return sorted(groups.items(), key=lambda kv: update_order(kv[0]))


def agreement_rows(turns: list[ScoredTurn]) -> list[str]:
    """Per update: the label agreement of the scored turns, the always-"positive" judge's on the
    same turns, and which way the notes lean: the share of the oracle's positive turns called
    positive, of its negative turns called negative, and of all scored turns called negative."""
    if not turns:
        return []
    rows = ["| update | scored turns | label agreement | always \"positive\" | oracle-positive turns called "
            "positive | oracle-negative turns called negative | called negative |", "|---|---|---|---|---|---|---|"]
    for update, group in by_update(turns):
        agreed = sum(turn.label == turn.oracle for turn in group)
        said_negative = sum(turn.label == "negative" for turn in group)
        of_kind = Counter(turn.oracle for turn in group)
        right = Counter(turn.oracle for turn in group if turn.label == turn.oracle)
        recalls = [f"{right[kind] / of_kind[kind]:.2f} of {of_kind[kind]}" if of_kind[kind] else "–"
                   for kind in ("positive", "negative")]
        rows.append(f"| {update} | {len(group)} | {agreed / len(group):.3f} | {of_kind['positive'] / len(group):.3f} | "
                    f"{recalls[0]} | {recalls[1]} | {said_negative / len(group):.2f} |")
    return rows


def label_push_rows(turns: list[ScoredTurn], aggregation: Aggregation) -> list[str]:
    """Per update: which way the policy gradient pushed the notes' label token, before any reward
    for the label and after.

    Every note's label is one token, and it trains with its episode's advantage (the weight
    `push_per_move` gives a move under the run's aggregation). Raising a "negative" label and
    lowering a "positive" one both move the label toward "negative", so the net push toward
    "negative" is the sum of the weights of notes that said it minus the sum over notes that
    said "positive", here per trained scored turn. It is split by the oracle's label: a push
    toward "negative" on turns the oracle calls positive is a drift away from the truth.
    """
    trained = [turn for turn in turns if turn.advantage and turn.label in ("positive", "negative")]
    if not trained:
        return []
    rows = [f"| update | trained scored turns | net push toward \"negative\" per turn ({aggregation.value}), "
            "oracle-positive turns | same, oracle-negative turns |", "|---|---|---|---|"]
    for update, group in by_update(trained):
        push, count = Counter(), Counter()  # oracle label -> net push toward "negative", turns
        for turn in group:
            weight = push_per_move(turn.advantage, turn.moves, aggregation)
            push[turn.oracle] += weight if turn.label == "negative" else -weight
            count[turn.oracle] += 1
        cells = [f"{push[kind] / count[kind]:+.3f} of {count[kind]}" if count[kind] else "–"
                 for kind in ("positive", "negative")]
        rows.append(f"| {update} | {len(group)} | {cells[0]} | {cells[1]} |")
    return rows


def guidance_rows(trajectories) -> list[str]:
    """What the notes paid each kind of episode trained with λ > 0, under each guidance form.

    The forms (`GuidanceForm`) are recomputed from the same episodes' labels, λ and R_env, so
    the columns compare the rewards themselves, not runs that drifted apart.
    """
    episodes = defaultdict(list)  # outcome -> (moves, Σ_t r_t, {form: R_env + guidance})
    groups = defaultdict(list)  # (update, task seed) -> that group's episodes
    for t in trajectories:
        selfguide = t.meta.get("selfguide") or {}
        if selfguide.get("lambda", 0.0) > 0:
            labels = [step.assessment.label for step in t.steps if step.assessment is not None]
            shaped = {form: shaped_return(selfguide["env_return"], labels, selfguide["lambda"], form)
                      for form in GuidanceForm}
            episodes[outcome(t)].append((t.num_steps, selfguide["assessment_sum"], shaped))
            groups[(t.meta.get("update"), t.seed)].append(t)
    if not episodes:
        return []
    forms = " | ".join(f"mean R ({form.value})" for form in GuidanceForm)
    rows = [f"| episodes trained with λ > 0 | n | mean moves | mean Σ_t r_t | {forms} |",
            "|---|---|---|---|" + "---|" * len(GuidanceForm)]
    for name, values in sorted(episodes.items()):
        n = len(values)
        means = " | ".join(f"{sum(v[2][form] for v in values) / n:+.2f}" for form in GuidanceForm)
        rows.append(f"| {name} | {n} | {sum(v[0] for v in values) / n:.1f} | {sum(v[1] for v in values) / n:+.2f} "
                    f"| {means} |")
    solved = [v[2] for v in episodes.get("solved", [])]
    failed = [v[2] for name, values in episodes.items() if name != "solved" for v in values]
    if solved and failed:
        for form in GuidanceForm:
            worst = min(s[form] for s in solved)
            beat = sum(f[form] >= worst for f in failed)
            rows.append(f"\n{form.value}: {beat} of {len(failed)} failures earn at least the least-paid success "
                        f"({worst:+.2f})")
    gaps = []
    for group in groups.values():
        advantages = defaultdict(list)
        for t in group:
            advantages[outcome(t)].append(advantage_of(t))
        stalls, falls = advantages["failed at the budget"], advantages["failed by the env"]
        if stalls and falls:
            gaps.append(sum(stalls) / len(stalls) - sum(falls) / len(falls))
    listed = ", ".join(f"{gap:+.2f}" for gap in gaps) or "no group had both"
    rows.append(f"\nstall − fall advantage as trained, per group where both met ({len(gaps)}): {listed}")
    return rows


def step_part_rows(trajectories, block: int = 5) -> list[str]:
    """GiGPO's step-level parts per block of `block` updates; [] for a log without step advantages."""
    blocks: dict[int, StepParts] = defaultdict(StepParts)
    for trajectory in trajectories:
        logged = trajectory.meta.get("grpo") or {}
        if "step_advantages" not in logged:
            continue
        first = (int(trajectory.meta.get("update", 1)) - 1) // block * block + 1
        blocks[first] += step_parts(Advantages(torch.tensor([float(logged["advantage"])], dtype=torch.float64),
                                               (torch.tensor(logged["step_advantages"], dtype=torch.float64),)))
    if not blocks:
        return []
    rows = ["| updates | steps | with a step-level part | of those, on the first turn | of the later ones, "
            "against the episode's advantage |", "|---|---|---|---|---|"]
    for first, parts in sorted(blocks.items()):
        later = parts.with_part - parts.first_turn
        rows.append(f"| {first}–{first + block - 1} | {parts.steps} | {parts.share:.3f} | "
                    f"{parts.first_turn_share:.3f} | {parts.opposing} of {later} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        log = run / "trajectories" / "train.jsonl"
        if not log.is_file():
            parser.exit(2, f"error: {run} has no training log ({log})\n")
        trajectories = list(read_trajectories(log, report_skipped))
        # Runs from before the option existed trained with its default.
        recorded = read_run_config(run).get("aggregation", Aggregation.TRAJECTORY_MEAN.value)
        try:
            aggregation = Aggregation(recorded)
        except ValueError:
            known = ", ".join(choice.value for choice in Aggregation)
            parser.exit(2, f"error: {run}/config.yaml has aggregation {recorded!r}; known: {known}\n")
        print(f"## {run}\n")
        print("\n".join(advantage_rows(trajectories, aggregation)))
        print("\n" + "\n".join(sharpening_rows(trajectories, bool(read_run_config(run).get("drop_zero_variance")))))
        turns = scored_turns(trajectories)
        if turns:
            print("\n" + "\n".join(agreement_rows(turns)))
            print("\n" + "\n".join(label_push_rows(turns, aggregation)))
        guidance = guidance_rows(trajectories)
        if guidance:
            print("\n" + "\n".join(guidance))
        parts = step_part_rows(trajectories)
        if parts:
            print("\n" + "\n".join(parts))
        print()


if __name__ == "__main__":
    main()
