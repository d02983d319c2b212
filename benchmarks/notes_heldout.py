"""How honest are a model's Self-Guide notes on the same held-out steps? (docs/results.md, issue 49)

    python benchmarks/notes_heldout.py HELD_OUT MODEL... [--episodes 60] [--max-new-tokens 48] [--out FILE]
        [--temperature 1 --samples K --seed S]

HELD_OUT is a trajectory log, or a run folder, of logged attempts: issue 49 uses the start's
held-out attempts (`runs/selfguide-informed/attempts-heldout`), on which its gate was judged.
Each MODEL judges every turn after the first of the first `--episodes` of them, greedily, with
Self-Guide's assessment prompt, exactly as the gate did (`hindsight train sft` with
`assessment_eval`, through the same `judge_logged_steps`), and its labels are held against the
oracle's.

A MODEL is a model spec (`smollm2+runs/selfguide-informed/start-adapter`) or a training run's
folder, or one of its checkpoints; a run stands for `BASE+RUN` (its latest checkpoint), with
the base model and the notes' token budget read from its config.yaml.

Why fixed steps: the agreement a Self-Guide run logs each update is measured on the states its
own rollouts visited, so it moves with the task mix and with the policy. Judging one set of
steps with the start and with each arm's final policy tells whether training left the notes
honest, on the same states. Greedy notes are the gate's measure; a rollout samples its notes
(temperature 1), so `--temperature 1 --samples K` draws K notes a step, seeded, to hold a
model's sampled lean on fixed states against the lean its training log showed on its own
states (the rates below are then over all K × steps notes).

Printed: one row per model (agreement, the always-positive judge on the same steps, recall of
the oracle's negative and positive steps, the share said negative, unreadable answers, whether
the gate's rule still holds). `--out` writes one JSON line per model, sample and step (the
oracle's label, the note's label and text), to replay the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from hindsight.agent.selfguide import judge_logged_steps, judged_label, logged_steps_to_judge
from hindsight.agent.writers import build_pre_action
from hindsight.algos.selfguide import Label, LabelAgreement, label_agreement_stats
from hindsight.cli.main import quiet_third_party_warnings
from hindsight.diagnostics.runs import read_run_config
from hindsight.logs import read_trajectories
from hindsight.types import Assessment


SAMPLE_SEED_STRIDE = 100_000


@dataclass(frozen=True)
class Judge:
    name: str  # as given on the command line
    spec: str  # what load_model receives
    max_new_tokens: int


def judge_of(model: str, default_tokens: int) -> Judge:
    """A model spec as it is; a run folder (or a checkpoint inside one) as BASE+FOLDER."""
    folder = Path(model)
    if not folder.is_dir():
        return Judge(model, model, default_tokens)
    run = folder.parent.parent if folder.parent.name == "checkpoints" else folder
    config = read_run_config(run)
    if not config.get("model"):
        raise ValueError(f"{model}: a folder, but {run / 'config.yaml'} names no model; give a spec "
                         f"such as smollm2+{model}")
    return Judge(model, f"{config['model']}+{model}", int(config.get("assessment_max_new_tokens", default_tokens)))


def positive_recall(predicted: list[Label | None], oracle: list[Label]) -> float | None:
    said = [p for p, truth in zip(predicted, oracle) if truth == Label.POSITIVE]
    return sum(p == Label.POSITIVE for p in said) / len(said) if said else None


def row(name: str, stats: LabelAgreement, recall_positive: float | None) -> str:
    def share(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    return (f"| {name} | {stats.steps} | {stats.agreement:.3f} | {stats.always_positive:.3f} | "
            f"{share(stats.negative_recall)} | {share(recall_positive)} | {stats.said_negative:.3f} | "
            f"{stats.unreadable:.3f} | {'yes' if stats.passes_gate else 'no'} |")


HEADER = ["| model | steps | agreement | always \"positive\" | negative recall | positive recall | said negative | "
          "unreadable | gate's rule holds |", "|---|---|---|---|---|---|---|---|---|"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("held_out", type=Path, help="logged attempts: a trajectory log or a run folder")
    parser.add_argument("models", nargs="+", help="model specs, or training runs (their latest checkpoint)")
    parser.add_argument("--episodes", type=int, default=60, help="held-out trajectories judged (default 60, the gate's)")
    parser.add_argument("--max-new-tokens", type=int, default=48,
                        help="a note's token budget for a model given as a spec (a run's is its own; default 48)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 (default) judges greedily, as the gate did; above 0 samples the notes")
    parser.add_argument("--samples", type=int, default=1, help="notes drawn a step (only when sampling; default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the sampled notes' seed (default 0)")
    parser.add_argument("--out", type=Path, help="write every judged step here (JSON lines)")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.max_new_tokens < 1 or args.samples < 1:
        parser.error("--episodes, --max-new-tokens and --samples must be at least 1")
    if args.temperature < 0:
        parser.error("--temperature must be at least 0")
    if args.samples > 1 and args.temperature == 0:
        parser.error("--samples above 1 needs --temperature above 0: greedy notes are the same every time")
    if not args.held_out.exists():
        parser.error(f"no such log or run folder: {args.held_out}")
    try:
        judges = [judge_of(model, args.max_new_tokens) for model in args.models]
    except ValueError as exc:
        parser.error(str(exc))
    skipped = []
    held_out = list(read_trajectories(args.held_out, skipped.append))[: args.episodes]
    for issue in skipped:
        print(f"{issue}, skipped", file=sys.stderr)

    # The prompts and the oracle's labels (a replay of every attempt) do not depend on the
    # judge's token budget: built once, for every model.
    steps = logged_steps_to_judge(held_out, build_pre_action("self-guide", args.max_new_tokens))
    if not steps:
        parser.exit(2, f"error: {args.held_out} has no step to judge (only first turns, or no trajectory)\n")

    from hindsight.llm import ModelError, load_model

    rows, records = [], []
    for judge in judges:
        assessor = build_pre_action("self-guide", judge.max_new_tokens)
        try:
            backend = load_model(judge.spec)
        except ModelError as exc:
            parser.exit(2, f"error: {judge.name}: {exc}\n")
        answers: list[Assessment] = []
        for sample in range(args.samples):
            # Seeds far apart, so no two samples' batches share one.
            for judged in judge_logged_steps(backend, assessor, steps, temperature=args.temperature,
                                             seed=args.seed + SAMPLE_SEED_STRIDE * sample):
                answers += judged
                print(f"{judge.name}: {len(answers)}/{len(steps) * args.samples} notes", file=sys.stderr, flush=True)
        judged_steps = [(sample, step) for sample in range(args.samples) for step in steps]
        predicted = [judged_label(answer) for answer in answers]
        oracle = [step.oracle for _, step in judged_steps]
        rows.append(row(judge.name, label_agreement_stats(predicted, oracle), positive_recall(predicted, oracle)))
        records += [{"model": judge.name, "sample": sample, "trajectory": step.trajectory.id, "at": step.at,
                     "oracle": step.oracle.value, "label": label and label.value, "text": answer.text}
                    for (sample, step), answer, label in zip(judged_steps, answers, predicted)]
    print("\n".join(HEADER + rows))
    if args.out:
        args.out.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return 0


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    sys.exit(main())
