"""How often an ECHO run's critic names the planner's fix, before and after training.

    python benchmarks/echo_critic_match.py ATTEMPTS RUN_DIR [RUN_DIR ...] [--steps 0 20] [--json]

ATTEMPTS are held-out attempts with their template critiques, for example the final validation
of the critic's warm start (CRITIC_RUN/trajectories/eval-validation-final.jsonl), where
benchmarks/critic_check.py read the start's match rate. At each step of each run the critic
critiques every attempt greedily with the run's token budget, as the warm start's validation did,
and a critique matches when it says what the attempt's template critique says (the planner's
first turn without progress and its move there). Step 0 is the run's start (its init_from and
critic_init_from); step N is the checkpoint of update N (default: 0 and the latest). The same
attempts at every step, so only the critic changes.

Prints a Markdown table (or JSON): per run and step, the attempts, the match rate on all of them
and on the unsolved ones (where the critic has a mistake to find), and the malformed share.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tables import report_skipped

from hindsight.agent.critic import critic_name, parse_critique, template_critique
from hindsight.cli.main import quiet_third_party_warnings
from hindsight.configs import ConfigError
from hindsight.logs import read_trajectories
from hindsight.logs.checkpoints import choose_checkpoint, list_checkpoints
from hindsight.methods.echo import build_critic, load_echo_model
from hindsight.methods.echo_compare import read_echo_config
from hindsight.types import SamplingParams, Trajectory


@dataclass(frozen=True)
class Match:
    run: str
    step: int
    attempts: int
    unsolved: int
    match_rate: float
    unsolved_match_rate: float | None
    malformed_rate: float

    def row(self) -> str:
        unsolved = "–" if self.unsolved_match_rate is None else f"{self.unsolved_match_rate:.3f}"
        return (f"| {self.run} | {self.step} | {self.attempts} | {self.match_rate:.3f} | {unsolved} "
                f"({self.unsolved}) | {self.malformed_rate:.3f} |")


def score(run: str, step: int, attempts: list[Trajectory], written: list[str], malformed: list[bool]) -> Match:
    """Each written critique (its <critique> text) held against the attempt's template critique."""
    expected = [parse_critique(template_critique(attempt)).critique for attempt in attempts]
    matches = [critique == target for critique, target in zip(written, expected, strict=True)]
    unsolved = [match for match, attempt in zip(matches, attempts) if not attempt.success]
    return Match(run=run, step=step, attempts=len(attempts), unsolved=len(unsolved),
                 match_rate=sum(matches) / len(matches),
                 unsolved_match_rate=sum(unsolved) / len(unsolved) if unsolved else None,
                 malformed_rate=sum(malformed) / len(malformed))


def critique_at(run_dir: Path, step: int, attempts: list[Trajectory]) -> Match:
    """The run's critic at `step` (0: its start) critiques every attempt greedily."""
    from hindsight.envs import make

    config = read_echo_config(run_dir)
    if critic_name(config.critic, no_critic=config.no_critic) != "model":
        raise ConfigError(f"{run_dir} has no model critic to measure (critic: {config.critic!r})")
    if step == 0:
        # As the run began: the policy and critic starts its config names, and no KL reference.
        model = load_echo_model(replace(config, kl_reference="base"))
    else:
        chosen = choose_checkpoint(run_dir, step)
        model = load_echo_model(replace(config, init_from="", critic_init_from="", kl_reference="base"))
        model.load(chosen.path / "model")
    critic = build_critic(config, model, make(config.env, **config.env_kwargs).criteria)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=config.critic_max_new_tokens)
    written = [group[0] for group in critic.critique(attempts, 1, sampling)]
    return score(str(run_dir), step, attempts, [c.parsed.critique for c in written],
                 [c.parsed.parse_error is not None for c in written])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("attempts", type=Path, help="a .jsonl file of held-out attempts")
    parser.add_argument("runs", nargs="+", type=Path, help="ECHO run directories")
    parser.add_argument("--steps", type=int, nargs="+",
                        help="0 (the start) and checkpoint updates (default: 0 and each run's latest)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run and step")
    args = parser.parse_args(argv)
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    if not args.attempts.is_file():
        parser.exit(2, f"error: {args.attempts} is not a file of attempts\n")
    attempts = list(read_trajectories(args.attempts, report_skipped))
    if not attempts:
        parser.exit(2, f"error: {args.attempts} holds no attempts\n")
    if any(step < 0 for step in args.steps or ()):
        parser.exit(2, "error: --steps are 0 (the start) or checkpoint updates\n")
    if not args.json:
        print("| run | step | attempts | match | unsolved match (attempts) | malformed |")
        print("|---|---|---|---|---|---|")
    for run_dir in args.runs:
        try:
            checkpoints = list_checkpoints(run_dir)
            steps = args.steps or [0] + ([checkpoints[-1].step] if checkpoints else [])
            for step in steps:
                result = critique_at(run_dir, step, attempts)
                print(json.dumps(asdict(result)) if args.json else result.row(), flush=True)
        except (ConfigError, FileNotFoundError) as error:
            print(f"error: {run_dir}: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
