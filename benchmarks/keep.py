"""Keep a comparison's finished runs in the repository, in the slim kept form the tables read.

    python benchmarks/keep.py /work/sg results/selfguide --commit 935d6c6     # every finished run
    python benchmarks/keep.py /work/cso results/cso --commit 6ee4649 sampled-t1 bon5-oracle

Each finished run folder of a driver's output (OUT/RUN with a summary.json not marked
interrupted) is written to KEPT/RUN by `hindsight outcomes export`: config.yaml, summary.json,
metrics.jsonl.gz where the run has metrics, forked_from.json where it was forked, and, where it
has an evaluation log, run.json and outcomes.jsonl.gz (results/README.md, docs/log-format.md).
The arm and seed come from the folder's name: `cso-s1` is arm `cso` seed 1, `sg-s2-float32` arm
`sg` seed 2 (a tagged re-run), and a folder without a seed (`start`, `react`, `sampled-t1`) is
its own arm with no seed; `start-bfloat16` and `start-validation` are evaluations of the start,
arm `start`. A training run whose only evaluation is on validation (the ECHO critic) is kept
from that log. Folders named on the command line are the only ones kept.

Nothing of an unfinished run is kept: trajectory logs, adapters and checkpoints stay on the
machine that wrote them (or wherever a session copies them outside the repository), and a run
that needs another sitting continues from there.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hindsight.cli.main import CLIError
from hindsight.cli.outcomes import evaluation_log, export_run, finished

#: `ARM-sSEED` with an optional tag after the seed (`sg-s2-float32`: the same seed, made another way).
SEEDED = re.compile(r"(?P<arm>.+)-s(?P<seed>\d+)(?:-[a-z0-9]+)?")
#: Evaluations of the untrained start under another name: its dtype or its split.
START = re.compile(r"start(?:-[a-z0-9]+)*")
#: Evaluation logs of training runs that were evaluated on validation only, tried after the defaults.
VALIDATION_LOG = "eval-validation-final"


@dataclass(frozen=True)
class Naming:
    """The arm and training seed a run folder's name says."""

    arm: str
    seed: int | None


def naming(folder: str) -> Naming:
    """Arm and seed from a run folder's name (see the module docstring)."""
    seeded = SEEDED.fullmatch(folder)
    if seeded:
        return Naming(seeded.group("arm"), int(seeded.group("seed")))
    return Naming("start" if START.fullmatch(folder) else folder, None)


def keep(out: Path, kept: Path, commit: str | None, only: list[str]) -> list[str]:
    """Export the finished runs of `out` (those in `only`, when given) into `kept`; one line per run."""
    if not out.is_dir():
        raise CLIError(f"{out}: no such folder")
    runs = sorted(p for p in out.iterdir() if (p / "config.yaml").is_file())
    missing = sorted(set(only) - {run.name for run in runs})
    if missing:
        raise CLIError(f"{out}: no run folder {', '.join(missing)}")
    lines = []
    for run in runs:
        if only and run.name not in only:
            continue
        if not finished(run):
            lines.append(f"{run.name}: not finished, not kept")
            continue
        name = naming(run.name)
        validation_only = evaluation_log(run, None) is None and any(
            (run / "trajectories" / f"{VALIDATION_LOG}{suffix}").is_file() for suffix in (".jsonl", ".jsonl.gz"))
        log = VALIDATION_LOG if validation_only else None
        written = export_run(run, kept / run.name, arm=name.arm, seed=name.seed, commit=commit, log_name=log)
        lines.append(f"{run.name}: arm {name.arm}, seed {name.seed}: " + ", ".join(written))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="OUT", type=Path, help="a driver's output folder")
    parser.add_argument("kept", metavar="KEPT", type=Path, help="the comparison's folder under results/")
    parser.add_argument("runs", metavar="RUN", nargs="*", help="keep only these run folders")
    parser.add_argument("--commit", help="the toolkit commit the runs used, where known")
    args = parser.parse_intermixed_args(argv)  # run names may follow --commit
    try:
        lines = keep(args.out, args.kept, args.commit, args.runs)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else "nothing to keep")
    return 0


if __name__ == "__main__":
    sys.exit(main())
