#!/usr/bin/env bash
# The ECHO comparison of docs/results.md (issue 5): GRPO, ECHO, ECHO with a frozen critic, ECHO
# with the linear gain and ECHO with the rule-based template critic (the critic's reference) on
# FrozenLake 3x3 with the graded score, from one SFT start, one seed per CPU core (two lanes
# side by side). Runs are resumable: re-running the script continues an
# unfinished run from its latest checkpoint and skips finished ones (summary.json present).
#
#   . .venv/bin/activate && benchmarks/echo_comparison.sh SFT_RUN CRITIC_SFT_RUN [OUT_DIR] [--set KEY=VALUE ...]
#   python benchmarks/learning_curves.py OUT_DIR/*
#
# The extra --set arguments apply to every new arm (e.g. --set updates=4). SEEDS="2 3" runs other
# seeds (one lane each, on core seed mod cores).
set -euo pipefail
cd "$(dirname "$0")/.."
sft=${1:?usage: $0 SFT_RUN CRITIC_SFT_RUN [OUT_DIR] [--set KEY=VALUE ...]}
critic=${2:?usage: $0 SFT_RUN CRITIC_SFT_RUN [OUT_DIR] [--set KEY=VALUE ...]}
out=${3:-runs/echo-comparison}
shift $(( $# < 3 ? $# : 3 ))
extra=("$@")
mkdir -p "$out"

run_arm() {  # run_arm NAME SEED METHOD ARGS...: one training run on core SEED mod cores, resumed if interrupted
  local dir="$out/$1-s$2" seed=$2 core=$(( $2 % $(getconf _NPROCESSORS_ONLN) ))  # not nproc: it honours OMP_NUM_THREADS
  shift 2
  if [ -f "$dir/summary.json" ]; then echo "done: $dir"; return; fi
  if [ -f "$dir/config.yaml" ]; then
    taskset -c "$core" hindsight train "$1" --resume "$dir"
  else
    taskset -c "$core" hindsight train "$@" --set seed="$seed" ${extra[@]+"${extra[@]}"} --out "$dir"
  fi
}

lane() {  # lane SEED: the five arms of one seed, in turn, on one core
  local seed=$1
  run_arm grpo "$seed" grpo --config recipes/grpo-frozenlake3-graded.yaml --set init_from="$sft"
  for arm in echo echo-frozen echo-linear echo-template; do
    local switch=(--set critic_init_from="$critic")
    [ "$arm" = echo-frozen ] && switch+=(--set freeze_critic=true)
    [ "$arm" = echo-linear ] && switch+=(--set gain=linear)
    [ "$arm" = echo-template ] && switch=(--set critic=template)
    run_arm "$arm" "$seed" echo --config recipes/echo-frozenlake3.yaml --set init_from="$sft" "${switch[@]}"
  done
}

export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for seed in ${SEEDS:-0 1}; do
  lane "$seed" > "$out/lane-$seed.log" 2>&1 &
done
wait
echo "finished; logs in $out/lane-*.log"
