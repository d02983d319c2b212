#!/usr/bin/env bash
# CSO where verification has work to do (docs/results.md, issue 48), resumable: a finished step is
# skipped, an unfinished run continues from its latest checkpoint.
#
#   . .venv/bin/activate && benchmarks/cso_noise.sh START_ADAPTER [OUT_DIR] [STAGE...]
#
# START_ADAPTER is the learning benchmark's SFT start (benchmarks/learning.sh OUT start writes it
# to OUT/start-adapter). Every arm starts from it, runs recipes/cso-frozenlake.yaml (2 rounds of
# 32 tasks, k = 5 uniform alternatives, 2 DPO epochs) and is tested greedily on the 300 test
# tasks of the learning benchmark. Stages (default: all, in this order):
#   start    the start on the 300 test tasks (the same evaluation as the learning benchmark's)
#   prm      the learned PRM (recipes/prm-sft-frozenlake.yaml on the start's own moves), its
#            agreement with the oracle on held-out moves, and its adapter (OUT/prm-adapter)
#   noisy    Step-DPO and CSO with the oracle PRM, 40% of its scores replaced by uniform draws
#            (step-dpo-noisy, cso-noisy), seeds 0 1 2
#   learned  Step-DPO and CSO with the learned PRM (step-dpo-learned, cso-learned), seeds 0 1 2
#   table    test success per arm and the paired differences (benchmarks/cso_table.py), then how
#            each run's PRM scored the policy's moves in its failures (benchmarks/cso_scored.py)
# PRM_SET adds switches to the prm stage (the attempt chosen in docs/results.md, e.g. PRM_SET="--set
# moves=all --set quote=true"); the learned arms ask the PRM the prompt its run was taught
# (`quoted:adapter:` after `quote: true`).
# Jobs run side by side, one core each (CORES, ONLY: benchmarks/lib.sh). A noisy arm took 10-16
# minutes on one core. `python benchmarks/keep.py OUT_DIR results/cso-noise --commit SHA` keeps each finished
# run's outcome table in the repository (results/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=${1:?usage: benchmarks/cso_noise.sh START_ADAPTER [OUT_DIR] [STAGE...]}
out=${2:-runs/cso-noise}
shift 2 || shift $#
stages=${*:-start prm noisy learned table}
mkdir -p "$out"
recipe=recipes/cso-frozenlake.yaml
prompt=$(python -c "import yaml; print(yaml.safe_load(open('$recipe'))['system_prompt'])")
lake=(--env frozenlake --set size=4 --set max_steps=8 --set view=local --memory none --max-new-tokens 12
      --system-prompt "$prompt")

. benchmarks/lib.sh  # train, evaluate, spawn, arm

for stage in $stages; do
  case $stage in
  start)
    spawn start "evaluate '$out/start' --model 'smollm2+$start' --episodes 300 --temperature 0"
    wait
    ;;
  prm)
    foreground "train prm-sft '$out/prm-sft' --config recipes/prm-sft-frozenlake.yaml --set policy_from='$start' \
      ${PRM_SET:-}"
    export_adapter "$out/prm-sft" "$out/prm-adapter" prm
    ;;
  noisy)
    for seed in 0 1 2; do
      arm step-dpo-noisy "$seed" cso "$recipe" --set method=step-dpo --set prm=noisy:0.4:oracle
      arm cso-noisy "$seed" cso "$recipe" --set prm=noisy:0.4:oracle
    done
    wait
    ;;
  learned)
    if [ ! -f "$out/prm-adapter/adapter_config.json" ]; then echo "run the prm stage first" >&2; exit 2; fi
    quoted=$(python -c "import yaml; print('quoted:' if yaml.safe_load(open('$out/prm-sft/config.yaml')).get('quote') else '')")
    for seed in 0 1 2; do
      arm step-dpo-learned "$seed" cso "$recipe" --set method=step-dpo --set "prm=${quoted}adapter:$out/prm-adapter"
      arm cso-learned "$seed" cso "$recipe" --set "prm=${quoted}adapter:$out/prm-adapter"
    done
    wait
    ;;
  table)
    python benchmarks/cso_table.py "$out"
    runs=()
    for run in "$out"/*-noisy-s? "$out"/*-learned-s?; do [ -d "$run/round-1" ] && runs+=("$run"); done
    if [ ${#runs[@]} -gt 0 ]; then python benchmarks/cso_scored.py "${runs[@]}"; fi
    ;;
  *) echo "unknown stage: $stage" >&2; exit 2 ;;
  esac
done
