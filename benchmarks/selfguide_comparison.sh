#!/usr/bin/env bash
# The Self-Guide comparison of docs/results.md (issue 12), resumable: a finished step is
# skipped, an unfinished training run continues from its latest checkpoint and an unfinished
# evaluation from its last finished task.
#
#   . .venv/bin/activate && benchmarks/selfguide_comparison.sh [OUT_DIR] [STAGE...]
#
# Stages (default: all, in this order):
#   start      the shipped frozenlake3 policy's own sampled attempts on 160 FrozenLake 5x5
#              train tasks, then the shared start: SFT of the oracle's assessments of every
#              step of them, with the successful attempts' own moves rehearsed; its adapter
#              is exported to OUT_DIR/start-adapter, which every arm and baseline starts from
#   prompting  ReAct, ReAct+SG, Reflexion (3 attempts) and ReFlAct with the start, greedy,
#              on the same 300 test tasks
#   arms       GRPO, GRPO+SG, GRPO+SG+GR from the start, seeds 0 1 2 (recipes/grpo-selfguide-frozenlake5.yaml)
#   schedule   GRPO+SG+GR with λ(u) at full strength from the start, with early entry, and
#              without annealing, seeds 0 1 2
#   followup   not part of the comparison: GRPO with token-mean aggregation, seeds 0 1 2, the test
#              of why GRPO lost to its start (docs/results.md: it learned to loop)
#   table      the paired differences (benchmarks/selfguide_table.py)
# DTYPE=float32 trains with float32 base weights instead of the recipes' bfloat16 and names the
# runs {arm}-s{seed}-float32: the runs made on a CPU without bfloat16 instructions, where
# bfloat16 is about 60 times slower (docs/results.md, Self-Guide's fifth amendment).
# Two jobs run side by side, one core each (HINDSIGHT_THREADS=1, taskset); CORES=0 (or 1)
# keeps a driver on one core, and the start stage uses all of CORES.
# `python benchmarks/keep.py OUT_DIR results/selfguide --commit SHA` keeps each finished run's
# outcome table in the repository (results/README.md); OUT_DIR, outside it, holds what continues.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/selfguide}
shift || true
stages=${*:-start prompting arms schedule table}
mkdir -p "$out"
recipe=recipes/grpo-selfguide-frozenlake5.yaml
prompt=$(python -c "import yaml; print(yaml.safe_load(open('$recipe'))['system_prompt'])")
# bfloat16 weights as in the recipes (the start's attempts, sampled before that change, were float32).
lake=(--env frozenlake --set size=5 --set max_steps=10 --memory none --max-new-tokens 12 --system-prompt "$prompt"
      --dtype bfloat16)

. benchmarks/lib.sh  # train, evaluate, spawn, arm

switches=()
if [ -n "${DTYPE:-}" ]; then RUN_TAG="-$DTYPE"; switches=(--set "dtype=$DTYPE"); fi
start="$out/start-adapter"  # the start run's adapter, exported: every arm and baseline starts from it
for stage in $stages; do
  case $stage in
  start)
    foreground "evaluate '$out/attempts' --model smollm2+frozenlake3 --episodes 160 --split train --temperature 1.0 --seed 0"
    foreground "train sft '$out/start' --config recipes/sft-selfguide-frozenlake5.yaml --set demos='$out/attempts' \
      --set assessment_demos='$out/attempts'"
    export_adapter "$out/start" "$start"
    ;;
  prompting)
    model="smollm2+$start"
    spawn react "evaluate '$out/react' --model '$model' --episodes 300 --temperature 0"
    spawn react-sg "evaluate '$out/react-sg' --model '$model' --episodes 300 --temperature 0 --self-guide --note-tokens 24"
    spawn reflexion "evaluate '$out/reflexion' --model '$model' --episodes 300 --temperature 0 --reflexion 3 --note-tokens 32"
    spawn reflact "evaluate '$out/reflact' --model '$model' --episodes 300 --temperature 0 --reflact --note-tokens 32"
    wait
    ;;
  arms)
    for seed in 0 1 2; do
      arm grpo "$seed" grpo "$recipe" "${switches[@]}"
      arm sg "$seed" grpo "$recipe" "${switches[@]}" --set self_guide=true
      arm sg-gr "$seed" grpo "$recipe" "${switches[@]}" --set self_guide=true --set guidance_reward=true
    done
    wait
    ;;
  schedule)
    for seed in 0 1 2; do
      for variant in immediate early no-anneal; do
        case $variant in
          immediate) points="0.0 0.0 1.0 1.0" ;;
          early) points="0.1 0.2 0.7 0.8" ;;
          no-anneal) points="0.4 0.5 1.0 1.0" ;;
        esac
        read -r ts tf th te <<<"$points"
        arm "sg-gr-$variant" "$seed" grpo "$recipe" "${switches[@]}" --set self_guide=true --set guidance_reward=true --set trust_start="$ts" \
          --set trust_full="$tf" --set trust_hold_until="$th" --set trust_end="$te"
      done
    done
    wait
    ;;
  followup)
    # Every move of every trajectory weighs the same, so a 10-move stall is penalised as much
    # per move as a 3-move fall; the comparison's arms keep the trajectory mean.
    for seed in 0 1 2; do
      arm grpo-token-mean "$seed" grpo "$recipe" "${switches[@]}" --set aggregation=token_mean
    done
    wait
    ;;
  table)
    python benchmarks/selfguide_table.py "$out"
    ;;
  *) echo "unknown stage: $stage" >&2; exit 2 ;;
  esac
done
