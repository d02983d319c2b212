#!/usr/bin/env bash
# Reproduces the bundled adapter `frozenlake3` (src/hindsight/adapters/frozenlake3/) and its
# measured test success: SFT on oracle moves, then GRPO from it in two seeds side by side (one
# core each); seed 0 is the one shipped (chosen before any result was seen); export to a PEFT
# folder in float16; greedy eval of the exported adapter on 100 test tasks. Resumable: a finished
# step is skipped, an unfinished training run continues from its latest checkpoint.
# About 2.5 hours on 2 CPU cores.
#
#   . .venv/bin/activate && benchmarks/frozenlake3_adapter.sh [OUT_DIR]
#
# OUT_DIR (default runs) receives sft-frozenlake3/, grpo-frozenlake3-wide-s{0,1}/,
# adapter-frozenlake3/ and eval-adapter-frozenlake3/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs}
mkdir -p "$out"
prompt=$(python -c "import yaml; print(yaml.safe_load(open('recipes/grpo-frozenlake3-wide.yaml'))['system_prompt'])")

train() {  # train METHOD DIR ARGS...: a new run, or the unfinished one continued
  local method=$1 dir=$2
  shift 2
  if [ -f "$dir/summary.json" ]; then echo "done: $dir"; return; fi
  if [ -f "$dir/config.yaml" ]; then hindsight train "$method" --resume "$dir"; else hindsight train "$method" "$@" --out "$dir"; fi
}

train sft "$out/sft-frozenlake3" --config recipes/sft-frozenlake3.yaml --threads 2
for seed in 0 1; do
  taskset -c "$seed" env HINDSIGHT_THREADS=1 bash -c "$(declare -f train); train grpo '$out/grpo-frozenlake3-wide-s$seed' \
    --config recipes/grpo-frozenlake3-wide.yaml --set init_from='$out/sft-frozenlake3' --set seed=$seed" &
done
wait
[ -d "$out/adapter-frozenlake3" ] || hindsight export-adapter "$out/grpo-frozenlake3-wide-s0" "$out/adapter-frozenlake3" --dtype float16
[ -f "$out/eval-adapter-frozenlake3/summary.json" ] || hindsight eval --env frozenlake --set size=3 --set max_steps=6 \
  --model "smollm2+$out/adapter-frozenlake3" --episodes 100 --split test --memory none --temperature 0 \
  --max-new-tokens 12 --system-prompt "$prompt" --out "$out/eval-adapter-frozenlake3"
