"""How much does diagnosing a log cost compared with just parsing it?

Writes a deterministic synthetic log in the official TIDE result format (~150k steps of a
FrozenLake-like walk by default), then times, median of several repeats each:

* ``json.loads`` — read the file line by line and parse every line, nothing else;
* ``diagnose`` — the full `hindsight diagnose` work in-process: format detection, views,
  loop finder, P_t / AUV, taxonomy, entropies;
* ``cli`` — ``hindsight diagnose --json`` as a subprocess (includes interpreter start-up).

The goal is diagnose / json.loads <= 3. Wall-clock and CPU time are both reported: on a
shared machine other processes stretch wall-clock time, while CPU time (this process, or
the child for ``cli``) measures only the work done, so the ratio is judged on CPU time.

    python benchmarks/diagnose_speed.py                 # defaults: 150k steps, 5 repeats
    python benchmarks/diagnose_speed.py --steps 20000 --repeats 3 --check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hindsight.diagnostics import DiagnoseOptions, diagnose_source, discover_runs
from hindsight.diagnostics.synthetic import WalkerSpec, simulate, tide_record

GOAL = 3.0


def write_log(path: Path, target_steps: int, seed: int = 0) -> tuple[int, int]:
    """Episodes are added until the step count reaches `target_steps`; returns (episodes, steps)."""
    spec = WalkerSpec(skill=0.5, loopiness=0.1)
    episodes = steps = 0
    with path.open("w", encoding="utf-8") as handle:
        while steps < target_steps:
            episode = simulate(seed * 1_000_003 + episodes, spec)
            handle.write(json.dumps(tide_record(episode)) + "\n")
            episodes += 1
            steps += len(episode.steps)
    return episodes, steps


def parse_only(path: Path) -> int:
    count = 0
    with path.open("r", encoding="utf-8") as handle:
        for line in handle:
            json.loads(line)
            count += 1
    return count


def diagnose(path: Path) -> float:
    (source,) = discover_runs([path])
    (run,) = diagnose_source(source, DiagnoseOptions(), env="frozenlake").runs
    return run.auv


def cli(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "hindsight", "diagnose", "--json", "--env", "frozenlake", str(path)],
                   check=True, capture_output=True)


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float


def _cpu_now() -> float:
    own = time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + children.ru_utime + children.ru_stime


def median_timing(work, repeats: int) -> Timing:
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), _cpu_now()
        work()
        cpus.append(_cpu_now() - cpu)
        walls.append(time.perf_counter() - wall)
    return Timing(statistics.median(walls), statistics.median(cpus))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150_000, help="steps in the synthetic log (default 150000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (default 5, min 3)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if diagnose costs more than {GOAL}x parsing")
    args = parser.parse_args()
    repeats = max(args.repeats, 3)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frozen_lake_results.jsonl"
        episodes, steps = write_log(path, args.steps)
        size_mb = path.stat().st_size / 1e6
        parse_only(path)  # warm the page cache before timing anything
        t_parse = median_timing(lambda: parse_only(path), repeats)
        t_diagnose = median_timing(lambda: diagnose(path), repeats)
        t_cli = median_timing(lambda: cli(path), repeats)

    ratio = t_diagnose.cpu / t_parse.cpu
    print(f"log: {episodes} episodes, {steps} steps, {size_mb:.1f} MB (TIDE result format)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
          f"{platform.python_version()}")
    print(f"median of {repeats}      {'json.loads':>10} {'diagnose':>10} {'cli':>10}")
    print(f"  wall-clock s   {t_parse.wall:10.3f} {t_diagnose.wall:10.3f} {t_cli.wall:10.3f}")
    print(f"  CPU s          {t_parse.cpu:10.3f} {t_diagnose.cpu:10.3f} {t_cli.cpu:10.3f}")
    print(f"diagnose / json.loads = {ratio:.2f}x CPU, {t_diagnose.wall / t_parse.wall:.2f}x wall-clock "
          f"(goal <= {GOAL:.0f}x)")
    return 1 if args.check and ratio > GOAL else 0


if __name__ == "__main__":
    sys.exit(main())
