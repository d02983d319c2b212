"""`hindsight echo-compare RUN_DIR`: does the critic help? ECHO's Table 5 at a checkpoint.

On tasks of a split, the run's policy makes one attempt per task. Then N critique-guided
refinements and N plain re-attempts (no critique) of each are sampled, with the same
number of samples in both conditions. The table shows each condition's mean reward gain
over the first attempt; their difference is the gain due to the critic.

    hindsight echo-compare runs/echo --episodes 20 --samples 8
    hindsight echo-compare runs/echo --step 10 --split test --json
    hindsight echo-compare runs/echo --critic template   # the oracle-comparison critic instead
    hindsight echo-compare runs/echo --episodes 100 --unsolved-only   # refine failed attempts only
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from hindsight.cli.main import CLIError


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option

    parser = subparsers.add_parser(
        "echo-compare", help="critic-guided refinement vs. no-critic regeneration at an ECHO checkpoint",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="an ECHO run directory (hindsight train echo)")
    parser.add_argument("--step", type=int, help="update of the checkpoint to use (default: the latest)")
    parser.add_argument("--split", default="validation", choices=("train", "validation", "test"))
    parser.add_argument("--episodes", type=int, default=20, help="tasks (default 20)")
    parser.add_argument("--samples", type=int, default=8, help="second attempts per task in each condition (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--critic", choices=("run", "template"), default="run",
                        help="who writes the guided condition's critiques: the run's critic (default) or the "
                             "rule-based template critic")
    parser.add_argument("--unsolved-only", action="store_true",
                        help="second attempts only for the first attempts that failed")
    parser.add_argument("--out", help="output directory (default RUN_DIR/echo-compare-step-N-SPLIT)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_threads_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.cli.train import run_guarded
    from hindsight.methods.echo_compare import compare_refinement, read_echo_config
    from hindsight.logs.checkpoints import choose_checkpoint

    if args.episodes < 1 or args.samples < 1:
        raise CLIError("--episodes and --samples must be at least 1")
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise CLIError(f"{run_dir} is not a directory")
    run_guarded(read_echo_config, run_dir)
    step = run_guarded(choose_checkpoint, run_dir, args.step).step
    out = Path(args.out) if args.out else run_dir / f"echo-compare-step-{step:06d}-{args.split}"
    result = run_guarded(compare_refinement, run_dir, out, step=step, split=args.split, episodes=args.episodes,
                         samples=args.samples, seed=args.seed,
                         critic="" if args.critic == "run" else args.critic, unsolved_only=args.unsolved_only)
    if args.json:
        print(json.dumps(asdict(result)))
        return 0

    from rich.console import Console
    from rich.table import Table

    refined = f"{result.tasks} unsolved of {result.first_attempts}" if result.unsolved_only else f"{result.tasks}"
    table = Table(title=f"{run_dir} · update {result.checkpoint_step} · {result.split} · "
                        f"{refined} tasks × {result.samples} second attempts")
    for column in ("second attempt", "reward gain", "improved", "success"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_row("no-critic regeneration", f"{result.regeneration_gain:+.3f}",
                  f"{result.regeneration_improvement_rate:.1%}", f"{result.regeneration_success_rate:.1%}")
    table.add_row(f"critic-guided ({result.critic})", f"{result.critic_gain:+.3f}",
                  f"{result.critic_improvement_rate:.1%}", f"{result.critic_success_rate:.1%}")
    table.add_row("gain due to the critic", f"{result.relative_gain:+.3f}", "", "")
    console = Console()
    console.print(table)
    console.print(f"first attempts: mean score {result.initial_score_mean:.3f}, success "
                  f"{result.initial_success_rate:.1%} · {result.env_steps} env steps · {result.wall_s:.0f} s")
    console.print(f"trajectories: {out}/trajectories/", soft_wrap=True)
    return 0
