"""How honest are a model's Self-Guide notes on the same held-out steps? (docs/results.md, issue 49)

    python benchmarks/notes_heldout.py HELD_OUT MODEL... [--episodes 60] [--max-new-tokens 48] [--out FILE]
        [--temperature 1 --samples K --seed S]
    python benchmarks/notes_heldout.py --replay FILE...   # the tables again, from earlier --out files
    ... --as NAME...   # one name per MODEL, or per --replay FILE, in the tables and the --out file

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
the gate's rule still holds); then, for every model after the first, its difference from the
first in agreement and in the two recalls, paired over the same steps, with a 95% interval from
resampling the held-out trajectories (2,000 draws: a trajectory's steps are not independent).
`--out` writes one JSON line per model, sample and step (the oracle's label, the note's label
and text); `--replay` reads such files, from one run or several (a model's notes pool across
files), and prints both tables without loading a model. `--as` names each model, or each replayed
file's notes, so that one model judged in several ways (at several temperatures, say) is
compared with itself: `--replay t1.jsonl t0.5.jsonl --as "T = 1" "T = 0.5"`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hindsight.agent.selfguide import judge_logged_steps, judged_label, logged_steps_to_judge
from hindsight.agent.writers import build_pre_action
from hindsight.algos.selfguide import Label, label_agreement_stats
from hindsight.cli.main import quiet_third_party_warnings
from hindsight.diagnostics.runs import read_run_config
from hindsight.logs import read_trajectories
from hindsight.types import Assessment


SAMPLE_SEED_STRIDE = 100_000


@dataclass(frozen=True)
class Judge:
    name: str  # as given on the command line, or by --as
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


@dataclass(frozen=True)
class JudgedNote:
    """One note a model wrote on one held-out step (a line of `--out`)."""

    model: str
    sample: int
    trajectory: str
    at: int
    oracle: Label
    label: Label | None  # None: unreadable
    text: str

    def record(self) -> dict:
        return {"model": self.model, "sample": self.sample, "trajectory": self.trajectory, "at": self.at,
                "oracle": self.oracle.value, "label": self.label and self.label.value, "text": self.text}

    @classmethod
    def from_record(cls, record: dict) -> JudgedNote:
        label = record["label"]
        return cls(str(record["model"]), int(record.get("sample", 0)), str(record["trajectory"]), int(record["at"]),
                   Label(record["oracle"]), None if label is None else Label(label), str(record["text"]))


def by_model(notes: list[JudgedNote]) -> dict[str, list[JudgedNote]]:
    models: dict[str, list[JudgedNote]] = {}
    for note in notes:
        models.setdefault(note.model, []).append(note)
    return models


def row(name: str, notes: list[JudgedNote]) -> str:
    def share(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    predicted, oracle = [n.label for n in notes], [n.oracle for n in notes]
    stats = label_agreement_stats(predicted, oracle)
    return (f"| {name} | {stats.steps} | {stats.agreement:.3f} | {stats.always_positive:.3f} | "
            f"{share(stats.negative_recall)} | {share(positive_recall(predicted, oracle))} | "
            f"{stats.said_negative:.3f} | {stats.unreadable:.3f} | {'yes' if stats.passes_gate else 'no'} |")


HEADER = ["| model | steps | agreement | always \"positive\" | negative recall | positive recall | said negative | "
          "unreadable | gate's rule holds |", "|---|---|---|---|---|---|---|---|---|"]

# Per trajectory: notes that agree, notes; oracle-negative notes called negative, oracle-negative
# notes; the same for positive. The three rates are ratios of these sums.
_COUNTS = 6


def trajectory_counts(notes: list[JudgedNote], ids: list[str]) -> np.ndarray:
    """[T, 6] counts, one row per trajectory of `ids`, in that order."""
    row_of = {trajectory: i for i, trajectory in enumerate(ids)}
    counts = np.zeros((len(ids), _COUNTS), dtype=np.int64)
    for note in notes:
        c = counts[row_of[note.trajectory]]
        c[0] += note.label == note.oracle
        c[1] += 1
        kind = {Label.NEGATIVE: 2, Label.POSITIVE: 4}.get(note.oracle)
        if kind is not None:
            c[kind] += note.label == note.oracle
            c[kind + 1] += 1
    return counts


def rates(totals: np.ndarray) -> np.ndarray:
    """[..., 6] summed counts -> [..., 3] agreement, negative recall, positive recall (NaN: no such step)."""
    hits, of = totals[..., 0::2].astype(float), totals[..., 1::2].astype(float)
    with np.errstate(invalid="ignore"):  # hits are 0 where `of` is: 0 / 0 is the NaN wanted
        return hits / of


def bootstrap_differences(base: np.ndarray, other: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The three rates of `other` minus those of `base`, per draw of trajectories.

    base, other: [T, 6] counts on the same trajectories, row by row; draws: [D, T] row indices.
    Returns [D, 3], NaN where a draw holds no step of a kind.
    """
    return rates(other[draws].sum(axis=1)) - rates(base[draws].sum(axis=1))


def paired_rows(first: str, models: dict[str, list[JudgedNote]], *, draws: int = 2000, seed: int = 0) -> list[str]:
    """Each later model minus the first: agreement, negative recall and positive recall on the
    same steps, with a percentile interval from resampling trajectories (both models' notes on
    a drawn trajectory go together)."""
    steps = {(n.trajectory, n.at) for n in models[first]}
    ids = sorted({trajectory for trajectory, _ in steps})
    base = trajectory_counts(models[first], ids)
    drawn = np.random.default_rng(seed).integers(len(ids), size=(draws, len(ids)))
    rows = [f"| model − {first} | agreement | negative recall | positive recall |", "|---|---|---|---|"]
    for name, notes in models.items():
        if name == first:
            continue
        if {(n.trajectory, n.at) for n in notes} != steps:
            raise ValueError(f"{name} judged other steps than {first}: no pairing")
        other = trajectory_counts(notes, ids)
        point = rates(other.sum(axis=0)) - rates(base.sum(axis=0))
        resampled = bootstrap_differences(base, other, drawn)
        cells = []
        for value, spread in zip(point, resampled.T):
            if np.isnan(value) or np.isnan(spread).all():
                cells.append("–")
                continue
            low, high = np.nanquantile(spread, [0.025, 0.975])
            cells.append(f"{value + 0.0:+.3f} [{low + 0.0:+.3f}, {high + 0.0:+.3f}]")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def print_tables(notes: list[JudgedNote]) -> None:
    models = by_model(notes)
    print("\n".join(HEADER + [row(name, judged) for name, judged in models.items()]))
    if len(models) > 1:
        print("\n" + "\n".join(paired_rows(next(iter(models)), models)))


def replay(files: list[Path], names: list[str] | None = None) -> list[JudgedNote]:
    """The judged notes of `--out` files, in order; with `names`, each file's notes under its name."""
    notes = []
    for i, path in enumerate(files):
        read = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                read.append(JudgedNote.from_record(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: not a judged note ({exc})") from None
        if names is not None:
            models = sorted({note.model for note in read})
            if len(models) > 1:  # one name for several models' notes would pool them unseen
                raise ValueError(f"{path} holds the notes of {len(models)} models ({', '.join(models)}): "
                                 "--as names a file of one model's notes")
            read = [replace(note, model=names[i]) for note in read]
        notes += read
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("held_out", type=Path, nargs="?", help="logged attempts: a trajectory log or a run folder")
    parser.add_argument("models", nargs="*", help="model specs, or training runs (their latest checkpoint)")
    parser.add_argument("--episodes", type=int, default=60, help="held-out trajectories judged (default 60, the gate's)")
    parser.add_argument("--max-new-tokens", type=int, default=48,
                        help="a note's token budget for a model given as a spec (a run's is its own; default 48)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 (default) judges greedily, as the gate did; above 0 samples the notes")
    parser.add_argument("--samples", type=int, default=1, help="notes drawn a step (only when sampling; default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the sampled notes' seed (default 0)")
    parser.add_argument("--out", type=Path, help="write every judged step here (JSON lines)")
    parser.add_argument("--replay", type=Path, nargs="+", metavar="FILE", help="print the tables from --out files")
    parser.add_argument("--as", dest="names", nargs="+", metavar="NAME",
                        help="a name for each MODEL, or for each --replay FILE's notes, in that order")
    args = parser.parse_args(argv)
    given = args.replay or args.models
    if args.names is not None and given:
        if len(args.names) != len(given):
            kind = "--replay file" if args.replay else "model"
            parser.error(f"--as needs one name a {kind}: {len(given)} {kind}{'s' * (len(given) != 1)}, "
                         f"{len(args.names)} name{'s' * (len(args.names) != 1)}")
        if len(set(args.names)) != len(args.names):
            parser.error("--as names must differ: notes under one name are pooled")
    if args.replay:
        if args.held_out or args.models:
            parser.error("--replay reads judged notes; give no held-out log or model with it")
        missing = [str(path) for path in args.replay if not path.is_file()]
        if missing:
            parser.error(f"no such file: {', '.join(missing)}")
        try:
            notes = replay(args.replay, args.names)
            if not notes:
                parser.error("the --replay files hold no judged note")
            print_tables(notes)
        except ValueError as exc:
            parser.exit(2, f"error: {exc}\n")
        return 0
    if args.held_out is None or not args.models:
        parser.error("give the held-out attempts and at least one model (or --replay FILE...)")
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
        if args.names is not None:
            judges = [replace(judge, name=name) for judge, name in zip(judges, args.names)]
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

    notes: list[JudgedNote] = []
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
        notes += [JudgedNote(judge.name, sample, step.trajectory.id, step.at, step.oracle, judged_label(answer),
                             answer.text) for (sample, step), answer in zip(judged_steps, answers)]
    if args.out:
        args.out.write_text("".join(json.dumps(note.record()) + "\n" for note in notes), encoding="utf-8")
    print_tables(notes)
    return 0


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    sys.exit(main())
