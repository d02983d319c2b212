"""Keep a comparison's runs in the repository, and put them back on a new machine.

A comparison takes more hours than a session lasts, and a new machine starts with none of the
files an earlier one wrote. `save` copies what the drivers and the tables read of each run
into a folder of the repository (logs gzipped, checkpoints left out); `restore` writes them
back, so a driver skips the finished runs and continues the unfinished evaluations.

    python benchmarks/keep.py save /work/sg results/selfguide      # after each finished run
    python benchmarks/keep.py restore results/selfguide /work/sg   # on a new machine

What is kept of a run folder (one that holds a `config.yaml`):
- a finished run (a `summary.json` not marked interrupted): config, summary, metrics and
  every trajectory log;
- an unfinished evaluation (no checkpoints, an `eval.jsonl`): config and its finished
  trajectories, whole lines only, which `hindsight eval --resume` continues from;
- an exported adapter folder (`adapter_config.json`): as it is. Later runs start from these,
  since checkpoints are too large to keep.
An unfinished training run is not kept: without its checkpoint it cannot continue, and its
driver starts it again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "hindsight.json", "provenance.json")
RECORD_FILES = ("config.yaml", "summary.json")


class KeepError(Exception):
    """A folder that cannot be saved or restored; the message says which and why."""


def run_folders(root: Path) -> list[Path]:
    """Every run and adapter folder under `root` (parents before what they hold), checkpoints aside."""
    return sorted({marker.parent for marker in root.rglob("*")
                   if marker.name in ("config.yaml", "adapter_config.json") and "checkpoints" not in marker.parts})


def finished(run: Path) -> bool:
    summary = run / "summary.json"
    if not summary.is_file():
        return False
    try:
        return not json.loads(summary.read_text()).get("interrupted", False)
    except json.JSONDecodeError:
        return False


def whole_lines(path: Path) -> bytes:
    """The file's complete lines: a run killed mid-write leaves a last line without its newline."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def save_run(run: Path, dest: Path) -> str:
    """Copy one run folder's record to `dest` (replacing an older copy); says what it kept."""
    if (run / "adapter_config.json").is_file():
        kind = "adapter"
        files = [run / name for name in ADAPTER_FILES if (run / name).is_file()]
    elif finished(run):
        kind = "finished"
        files = [run / name for name in RECORD_FILES] + sorted(run.glob("*.jsonl")) + \
            sorted((run / "trajectories").glob("*.jsonl"))
    elif (run / "trajectories" / "eval.jsonl").is_file() and not (run / "checkpoints").exists():
        kind = "partial evaluation"
        files = [run / "config.yaml", run / "trajectories" / "eval.jsonl"]
    else:
        return "skipped (an unfinished training run)"
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for source in files:
        target = staging / source.relative_to(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".jsonl":
            with gzip.GzipFile(target.with_name(target.name + ".gz"), "wb", mtime=0) as out:
                out.write(whole_lines(source))
        else:
            shutil.copyfile(source, target)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return kind


def restore_run(kept: Path, run: Path) -> str:
    """Write one kept folder back to `run`, unless a finished run or an adapter is there already."""
    if finished(run) or (run / "adapter_config.json").is_file():
        return "left alone (already there)"
    log, kept_log = run / "trajectories" / "eval.jsonl", kept / "trajectories" / "eval.jsonl.gz"
    if not finished(kept) and log.is_file() and kept_log.is_file() and \
            whole_lines(log).count(b"\n") >= gzip.decompress(kept_log.read_bytes()).count(b"\n"):
        return "left alone (this copy is as far along)"
    shutil.rmtree(run, ignore_errors=True)  # an unfinished copy, behind the kept one
    for source in sorted(p for p in kept.rglob("*") if p.is_file()):
        target = run / source.relative_to(kept)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".gz":
            with gzip.open(source, "rb") as data:
                target.with_suffix("").write_bytes(data.read())
        else:
            shutil.copyfile(source, target)
    return "restored"


def save(out: Path, dest: Path) -> list[str]:
    if not out.is_dir():
        raise KeepError(f"no such folder: {out}")
    lines = []
    for run in run_folders(out):
        name = run.relative_to(out)
        if name == Path("."):
            raise KeepError(f"{out} is itself a run folder; give the folder that holds the runs")
        lines.append(f"{name}: {save_run(run, dest / name)}")
    return lines


def restore(kept: Path, out: Path) -> list[str]:
    if not kept.is_dir():
        raise KeepError(f"no such folder: {kept}")
    return [f"{folder.relative_to(kept)}: {restore_run(folder, out / folder.relative_to(kept))}"
            for folder in run_folders(kept)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, source, target in (("save", "OUT", "KEPT"), ("restore", "KEPT", "OUT")):
        command = commands.add_parser(name)
        command.add_argument("source", metavar=source, type=Path)
        command.add_argument("target", metavar=target, type=Path)
    args = parser.parse_args(argv)
    try:
        lines = (save if args.command == "save" else restore)(args.source, args.target)
    except KeepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else "nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
