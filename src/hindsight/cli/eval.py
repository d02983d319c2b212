"""`hindsight eval`: run a model on an environment and write a run directory."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    from hindsight.cli.main import add_threads_option
    from hindsight.llm.hf import WEIGHT_DTYPES

    parser = subparsers.add_parser("eval", help="evaluate a model on an environment", description=__doc__)
    parser.add_argument("--env", help="environment id (see `hindsight envs list`; ray:ID runs it in Ray actors); "
                                      "required unless --resume")
    parser.add_argument("--model", help="model spec: smollm2, hf:PATH, openai:NAME, oracle, random, scripted:FILE, "
                                        "or smollm2/hf:PATH +ADAPTER, any of those two as ray:SPEC (replicas in Ray "
                                        "actors); required unless --resume")
    parser.add_argument("--episodes", type=int, default=10, help="number of task instances (default 10)")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--memory", default="full", help="history shown to the model: full, none, or a number of turns")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--out", help="run directory (default runs/eval-ENV-MODEL-TIME)")
    parser.add_argument("--set", dest="env_kwargs", action="append", metavar="KEY=VALUE", help="environment option, repeatable")
    parser.add_argument("--max-steps", type=int, help="override the environment's step budget")
    parser.add_argument("--concurrency", type=int, default=32, help="episodes run at once (batch size)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--system-prompt", default="",
                        help="system prompt ({instruction} = the env's rules; default: the rules and answer format)")
    parser.add_argument("--pre-action", default="", metavar="NAME",
                        help="what the model writes before each action, shown in its action prompt: self-guide "
                             "(a self-assessment of its latest step), reflection (a reflection on the goal state) "
                             "or none (default)")
    parser.add_argument("--self-guide", action="store_true",
                        help="Self-Guide at inference (ReAct+SG): before each action the model writes a "
                             "self-assessment of its latest step, shown in its action prompt")
    parser.add_argument("--reflact", action="store_true",
                        help="ReFlAct at inference: before each action the model reflects on the goal state, "
                             "shown in its action prompt")
    parser.add_argument("--reflexion", type=int, default=1, metavar="ATTEMPTS",
                        help="Reflexion at inference: up to ATTEMPTS tries per task; after a failed try the "
                             "model writes a lesson that its next try at the same task is shown (default 1: off)")
    parser.add_argument("--best-of", type=int, default=1, metavar="N",
                        help="step-level best-of-N: sample N candidate actions per turn (at --temperature) and "
                             "take the one --prm rates highest (default 1: off)")
    parser.add_argument("--prm", default="oracle",
                        help="process reward model of --best-of: oracle (the env's planner) or a model spec "
                             "that answers a rubric (default oracle)")
    parser.add_argument("--note-tokens", type=int, default=48,
                        help="token budget of a self-assessment, goal reflection or Reflexion lesson (default 48)")
    parser.add_argument("--dtype", choices=WEIGHT_DTYPES,
                        help="dtype of a local model's weights (smollm2, hf:PATH): auto is float32 on a CPU, "
                             "bfloat16 on a GPU that has it; bfloat16 is about 1.5x faster on a CPU with AVX512-BF16")
    parser.add_argument("--resume", metavar="DIR",
                        help="finish an interrupted evaluation with its own settings: the tasks it finished "
                             "are kept, the others run")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_threads_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hindsight.agent.evaluate import EvalConfig, read_eval_config, run_eval
    from hindsight.cli.main import CLIError
    from hindsight.configs import parse_overrides
    from hindsight.envs import EnvError, make
    from hindsight.llm import ModelError, parse_spec
    from hindsight.registry import UnknownName

    if args.resume:
        if args.env or args.model or args.out or args.env_kwargs or args.dtype:
            raise CLIError("--resume takes the run's own settings; drop --env/--model/--out/--set/--dtype")
    elif not (args.env and args.model):
        raise CLIError("--env and --model are required (or --resume DIR)")
    try:
        config = read_eval_config(args.resume) if args.resume else EvalConfig(
            env=args.env,
            model=args.model,
            episodes=args.episodes,
            env_kwargs=parse_overrides(args.env_kwargs),
            split=args.split,
            memory=args.memory,
            seed=args.seed,
            out=args.out,
            concurrency=args.concurrency,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            max_steps=args.max_steps,
            system_prompt=args.system_prompt,
            pre_action=args.pre_action,
            self_guide=args.self_guide,
            reflact=args.reflact,
            reflexion_attempts=args.reflexion,
            best_of=args.best_of,
            prm=args.prm,
            assessment_max_new_tokens=args.note_tokens,
            model_options={"dtype": args.dtype} if args.dtype else {},
        )
        # Check the env id and options and the model spec before anything slow starts.
        make(config.env, **config.env_kwargs)
        parse_spec(config.model)
    except (EnvError, ModelError, ValueError, UnknownName) as exc:  # ValueError includes ConfigError
        raise CLIError(str(exc)) from None

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("success {task.fields[successes]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    bar = None
    successes = 0

    def start(episodes: int) -> None:
        # The bar starts once the model is loaded: a load error stays one line, with no blank
        # line before it from a bar that never drew.
        nonlocal bar
        progress.start()
        bar = progress.add_task(f"eval {config.env} · {config.model}", total=episodes, successes=0)

    def advance(trajectory: Any) -> None:
        nonlocal successes
        successes += bool(trajectory.success)
        progress.update(bar, advance=1, successes=successes)

    try:
        run_dir = run_eval(config, resume=bool(args.resume), on_start=start, on_trajectory=advance)
    except (EnvError, ModelError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    finally:
        if bar is not None:
            progress.stop()

    summary = json.loads((run_dir / "summary.json").read_text())
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary, run_dir)
    return 0


def print_summary(summary: dict[str, Any], run_dir: Any) -> None:
    """The closing table, on stdout (progress goes to stderr)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['env']} · {summary['model']}")
    for column in ("episodes", "success", "mean score", "mean steps", "invalid", "wall time"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_row(
        str(summary["episodes"]),
        f"{summary['success_rate']:.1%}",
        f"{summary['mean_score']:.3f}",
        f"{summary['mean_steps']:.1f}",
        f"{summary['invalid_rate']:.1%}",
        f"{summary['wall_s']:.1f} s",
    )
    out = Console()
    out.print(table)
    if summary.get("env_failures"):
        out.print(f"[bold red]{summary['env_failures']} of {summary['episodes']} episodes lost their environment "
                  f"after its restarts[/] (first: {summary['first_env_failure']}); they count as failures", soft_wrap=True)
    if summary.get("oracle_agreement") is not None:
        mix = ", ".join(f"{action} {count}" for action, count in summary["action_mix"].items())
        valid = summary.get("oracle_agreement_valid")
        among_valid = "" if valid is None else (
            f" ({valid:.1%} of the valid ones; a random admissible move: {summary['oracle_chance']:.1%})")
        out.print(f"oracle agreement {summary['oracle_agreement']:.1%} of moves among the planner's best"
                  f"{among_valid}; moves: {mix}", soft_wrap=True)
    if summary.get("success_by_attempt"):
        solved = ", ".join(f"{k} {rate:.1%}" for k, rate in enumerate(summary["success_by_attempt"], 1))
        out.print(f"Reflexion: solved by attempt {solved} ({summary['attempts']} attempts run)")
    out.print(f"trajectories: {run_dir}/trajectories/eval.jsonl", soft_wrap=True)
