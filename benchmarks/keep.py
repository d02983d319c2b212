"""Keep a comparison's runs in the repository, and put them back on a new machine.

A comparison takes more hours than a session lasts, and a new machine starts with none of the
files an earlier one wrote. `save` copies what the drivers and the tables read of each run
into a folder of the repository (logs gzipped, checkpoints left out); `restore` writes them
back, so a driver skips the finished runs and continues the unfinished evaluations.

    python benchmarks/keep.py save /work/sg results/selfguide      # after each finished run
    python benchmarks/keep.py restore results/selfguide /work/sg   # on a new machine

What is kept of a run folder (one that holds a `config.yaml`):
- a finished run (a `summary.json` not marked interrupted): config, summary, metrics, every
  trajectory log, and the logs of its rounds where it has them (CSO and its baselines write
  each round's rollouts, scored steps, branches and pairs into `round-N/`: gzipped, a few
  hundred kB a run, and what an analysis of the method's signals reads);
- an unfinished evaluation (no checkpoints, an `eval.jsonl`): config and its finished
  trajectories, whole lines only, which `hindsight eval --resume` continues from;
- an exported adapter folder (`adapter_config.json`): as it is. Later runs start from these,
  since checkpoints are too large to keep.
- a run that trained all its updates but whose final evaluation is unfinished: config, logs
  (the final evaluation's finished tasks among them) and its last checkpoint *slimmed*: the
  weights (about 19 MB for the 135M model's LoRA in float32) and the RNGs, without the
  optimizer's moments (two thirds of a checkpoint), which no step is left to use. Restored, the
  driver's `hindsight train --resume` loads it, has no update to run, and continues the final
  evaluation from its last finished task, with the same weights to the bit.
An unfinished training run is not kept by `save`: without its checkpoint it cannot continue.
A run that will not finish before the machine goes is *parked* instead: its config, logs and
latest checkpoint (about 60 MB) go into one commit of the branch `parked`, which has no
history (each park replaces the previous commit, so old checkpoints do not stay in the
repository once `git gc` runs), and `unpark` writes them back for the driver to continue:

    python benchmarks/keep.py park /work/sg selfguide       # before the machine goes
    python benchmarks/keep.py unpark selfguide /work/sg     # on a new machine, after restore

Only main is sure to reach a new machine: on 2026-11-27 a new checkout came without the branch
`parked`, and a run parked mid-evaluation started over. So a run is best stopped where `save`
keeps it (trained, or an evaluation); parking is for a training run cut off mid-way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

PARK_BRANCH = "parked"
STATE_FILE = "state.pt"  # hindsight.logs.checkpoints.STATE_FILE, without importing the toolkit
SLIM_KEY = "slim"
# The logs whose finished tasks an evaluation resumes from: a `hindsight eval` run's, and a
# training run's final evaluation on its test split.
EVALUATION_LOGS = ("eval.jsonl", "eval-test-final.jsonl")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "hindsight.json", "provenance.json")
RECORD_FILES = ("config.yaml", "summary.json")
# Kept where a run has them: a forked run's record of where it came from (benchmarks/fork_run.py).
OPTIONAL_RECORD_FILES = ("forked_from.json",)


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


def run_logs(run: Path) -> list[Path]:
    """The run's metrics, trajectory logs and round logs (`round-N/*.jsonl`)."""
    return sorted(run.glob("*.jsonl")) + sorted((run / "trajectories").glob("*.jsonl")) + sorted(
        run.glob("round-*/*.jsonl"))


def optional_records(run: Path) -> list[Path]:
    return [run / name for name in OPTIONAL_RECORD_FILES if (run / name).is_file()]


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
        files = [run / name for name in RECORD_FILES] + optional_records(run) + run_logs(run)
    elif (run / "trajectories" / "eval.jsonl").is_file() and not (run / "checkpoints").exists():
        kind = "partial evaluation"
        files = [run / "config.yaml", run / "trajectories" / "eval.jsonl"]
    elif trained(run):
        kind = "trained, final evaluation unfinished"
        checkpoint = latest_checkpoint(run)
        files = ([run / "config.yaml"] + optional_records(run) + run_logs(run)
                 + sorted(p for p in checkpoint.rglob("*") if p.is_file()))
    else:
        return "skipped (an unfinished training run)"
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for source in files:
        target = staging / source.relative_to(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.name == STATE_FILE and "checkpoints" in source.relative_to(run).parts:
            slim_state(source, target)
        elif source.suffix == ".jsonl":
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
    if not finished(kept) and any(evaluation_lines(run / "trajectories" / name) >=
                                  evaluation_lines(kept / "trajectories" / f"{name}.gz") > 0
                                  for name in EVALUATION_LOGS):
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


def latest_checkpoint(run: Path) -> Path | None:
    """The run's last complete checkpoint (a `.tmp` folder is one still being written)."""
    steps = sorted(c for c in (run / "checkpoints").glob("step-*") if c.is_dir() and not c.name.endswith(".tmp"))
    return steps[-1] if steps else None


def evaluation_lines(path: Path) -> int:
    """How many tasks an evaluation log (plain or gzipped) holds; 0 when there is none."""
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).count(b"\n") if path.is_file() else 0
    return whole_lines(path).count(b"\n") if path.is_file() else 0


def trained(run: Path) -> bool:
    """Unfinished, with a checkpoint after the config's last update: only the final evaluation is left."""
    checkpoint = latest_checkpoint(run)
    if finished(run) or checkpoint is None or not (checkpoint / STATE_FILE).is_file():
        return False
    try:
        updates = yaml.safe_load((run / "config.yaml").read_text()).get("updates")
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    return isinstance(updates, int) and checkpoint.name == f"step-{updates:06d}"


def slim_state(source: Path, target: Path) -> None:
    """Copy a last checkpoint's state without the optimizers' per-parameter moments.

    `load_state_dict` accepts an optimizer with no per-parameter state (a fresh one has none),
    so the checkpoint still loads, and no update is left to miss the moments. `SLIM_KEY` marks
    it for a reader; benchmarks/fork_run.py forks only before a run's last update, so no run
    trains on from it."""
    import torch

    state = torch.load(source, map_location="cpu", weights_only=False)
    for optimizer in state.get("optimizers", {}).values():
        optimizer["state"] = {}
    state[SLIM_KEY] = "optimizer moments dropped by benchmarks/keep.py: for the final evaluation only"
    torch.save(state, target)


def parkable(run: Path) -> bool:
    return not finished(run) and latest_checkpoint(run) is not None


def git(repo: Path, *args: str, data: bytes | None = None, env: dict | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        raise KeepError(f"git {' '.join(args[:2])} failed: {done.stderr.decode().strip()}")
    return done.stdout


def park(out: Path, name: str, repo: Path) -> list[str]:
    """Commit every unfinished training run of `out` (logs and latest checkpoint) as `name/RUN`
    on the branch `parked`, replacing what was parked under `name` before."""
    if not out.is_dir():
        raise KeepError(f"no such folder: {out}")
    runs = [run for run in run_folders(out) if parkable(run)]
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}  # the checkout's own index is left alone
        if git(repo, "branch", "--list", PARK_BRANCH).strip():
            git(repo, "read-tree", PARK_BRANCH, env=env)
            git(repo, "rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--", name, env=env)
        lines = []
        for run in runs:
            checkpoint = latest_checkpoint(run)
            files = ([run / "config.yaml"] + optional_records(run) + run_logs(run)
                     + sorted(p for p in checkpoint.rglob("*") if p.is_file()))
            for source in files:
                data = whole_lines(source) if source.suffix == ".jsonl" else source.read_bytes()
                blob = git(repo, "hash-object", "-w", "--stdin", data=data).decode().strip()
                path = f"{name}/{run.relative_to(out).as_posix()}/{source.relative_to(run).as_posix()}"
                git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            lines.append(f"{run.relative_to(out)}: parked at {checkpoint.name}")
        tree = git(repo, "write-tree", env=env).decode().strip()
    # A machine's commit, with no parent: the branch holds only what is parked now.
    who = {f"GIT_{role}_{field}": value for role in ("AUTHOR", "COMMITTER")
           for field, value in (("NAME", "benchmarks/keep.py"), ("EMAIL", "keep@hindsight.invalid"))}
    commit = git(repo, "commit-tree", tree, "-m", f"parked runs: {name}", env=who).decode().strip()
    git(repo, "update-ref", f"refs/heads/{PARK_BRANCH}", commit)
    # The reflog would keep the replaced checkpoints reachable; without it `git gc` drops them.
    git(repo, "reflog", "expire", "--expire=now", f"refs/heads/{PARK_BRANCH}")
    return lines or [f"nothing to park in {out} (no unfinished training run with a checkpoint)"]


def unpark(name: str, out: Path, repo: Path) -> list[str]:
    """Write the runs parked under `name` back into `out`, where they are not already further along."""
    if not git(repo, "branch", "--list", PARK_BRANCH).strip():
        raise KeepError(f"no branch {PARK_BRANCH!r} in {repo}: nothing was parked, or the branch did not reach "
                        "this checkout (only main is sure to land); its runs start over")
    paths = git(repo, "ls-tree", "-r", "--name-only", PARK_BRANCH, "--", f"{name}/").decode().splitlines()
    # Every parked run has a checkpoint, so its name is what comes before "/checkpoints/".
    runs = sorted({path[len(name) + 1:].split("/checkpoints/")[0] for path in paths if "/checkpoints/" in path})
    lines = []
    for run_name in runs:
        run, prefix = out / run_name, f"{name}/{run_name}/"
        files = [path for path in paths if path.startswith(prefix)]
        parked_step = next(p.split("/checkpoints/")[1].split("/")[0] for p in files if "/checkpoints/" in p)
        here = latest_checkpoint(run)
        if finished(run) or (here is not None and here.name >= parked_step):
            lines.append(f"{run_name}: left alone (already as far along)")
            continue
        shutil.rmtree(run, ignore_errors=True)
        for path in files:
            target = run / path.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(git(repo, "cat-file", "blob", f"{PARK_BRANCH}:{path}"))
        lines.append(f"{run_name}: unparked at {parked_step}")
    return lines or [f"nothing parked under {name!r}"]


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
    repo = Path(__file__).resolve().parents[1]
    command = commands.add_parser("park", help="commit the unfinished training runs to the branch 'parked'")
    command.add_argument("source", metavar="OUT", type=Path)
    command.add_argument("target", metavar="NAME", help="their folder on the branch, e.g. selfguide")
    command = commands.add_parser("unpark", help="write parked runs back for the driver to continue")
    command.add_argument("source", metavar="NAME")
    command.add_argument("target", metavar="OUT", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "park":
            lines = park(args.source, args.target, repo)
        elif args.command == "unpark":
            lines = unpark(args.source, args.target, repo)
        else:
            lines = (save if args.command == "save" else restore)(args.source, args.target)
    except KeepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else "nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
