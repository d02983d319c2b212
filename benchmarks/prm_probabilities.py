"""Does a learned PRM's answer depend on the move? Its first answer token's probabilities, by the oracle's score.

    HF_HUB_OFFLINE=1 python benchmarks/prm_probabilities.py runs/prm-sft [--json]

A PRM that answers the same greedy score to every move may still rank moves by its
probabilities. For every held-out move that `hindsight train prm-sft` scored
(`trajectories/eval-validation-final.jsonl`), this runs one forward pass of the run's `prm`
adapter over the judge's prompt and reads the probability of "1" (the oracle's score of a move
that solves or shortens the plan) as the first answer token. It prints the mean probability
for each oracle score and the AUC of that probability as a ranking of the oracle's 1-moves
above the rest (0.5: no ranking at all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from hindsight.cli.main import quiet_third_party_warnings
from hindsight.agent.prm import JudgePRM, StepQuery
from hindsight.configs import from_mapping
from hindsight.logs import RunDir, read_trajectories
from hindsight.methods.model_setup import load_latest, load_trainable
from hindsight.methods.prm_sft import PRMSFTConfig
from hindsight.train.sequences import render_prompt


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """The probability that a random positive ranks above a random negative (ties count half)."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished prm-sft run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    log = args.run / "trajectories" / "eval-validation-final.jsonl"
    if not log.exists():
        sys.exit(f"prm_probabilities: {log} does not exist (a prm-sft run with eval_episodes > 0 writes it)")
    config = from_mapping(PRMSFTConfig, {k: v for k, v in RunDir(args.run).read_config().items() if k != "kind"})
    model = load_trainable(config.model, ("policy", "prm"), config.lora_rank, config.lora_alpha, False,
                           dtype=config.dtype)
    load_latest(model, args.run, "prm")
    model.activate("prm")
    model.model.eval()
    tokenizer = model.backend.tokenizer
    one = tokenizer.encode("1", add_special_tokens=False)[0]
    judge = JudgePRM(None, quote=config.quote)  # the prompt the run taught
    by_score: dict[float, list[float]] = {}
    device = next(model.model.parameters()).device
    for trajectory in read_trajectories(log):
        for move in trajectory.meta.get("prm_scores", []):
            prompt = render_prompt(tokenizer, judge.prompt(StepQuery(trajectory, move["at"], move["action"])))
            ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)], device=device)
            with torch.no_grad():
                logits = model.model(input_ids=ids).logits[0, -1].float()
            by_score.setdefault(float(move["oracle"]), []).append(float(torch.softmax(logits, -1)[one]))
    good = by_score.get(1.0, [])
    rest = [p for score, probabilities in by_score.items() if score != 1.0 for p in probabilities]
    result = {"moves": len(good) + len(rest),
              "mean_p1_by_oracle_score": {f"{s:g}": sum(p) / len(p) for s, p in sorted(by_score.items())},
              "auc_p1_good_vs_rest": auc(good, rest)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['moves']} held-out moves")
    for score, mean in result["mean_p1_by_oracle_score"].items():
        print(f"  oracle score {score}: mean P('1') {mean:.3f} over {len(by_score[float(score)])} moves")
    value = result["auc_p1_good_vs_rest"]
    print(f"  AUC of P('1'), the oracle's 1-moves against the rest: {'–' if value is None else f'{value:.3f}'}")


if __name__ == "__main__":
    quiet_third_party_warnings()  # the libraries' deprecation notices, as the CLI does
    main()
