#!/usr/bin/env bash
# The bundled model, untrained, on the papers' environments (docs/results.md, issue 14):
# greedy, the last two turns of history, 48-token answers, at most 10 steps per task, on the
# first 32 test tasks of each env (one batch). Resumable; one job per core of CORES.
#
#   . .venv/bin/activate && benchmarks/env_zero_shot.sh [OUT_DIR] [ENV...]
#
# The small scale is the CPU's: a turn of 32 episodes is a prefill of ~50k prompt tokens.
# The table at the end reads each run's summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/zero-shot}
shift || true
envs=${*:-webshop deepsearch household scienceworld}
mkdir -p "$out"
lake=(--model smollm2 --episodes 32 --concurrency 32 --temperature 0 --memory 2 --max-new-tokens 48 --max-steps 10)

. benchmarks/lib.sh  # evaluate, spawn

for env in $envs; do
  spawn "$env" "evaluate '$out/$env' --env $env"
done
wait
python - "$out" $envs <<'PY'
import json, sys
from pathlib import Path

from hindsight.stats import wilson_interval

out = Path(sys.argv[1])
print("| env | tasks | success (95% CI) | mean score | invalid answers | steps per task | wall time |")
print("|---|---|---|---|---|---|---|")
for env in sys.argv[2:]:
    s = json.loads((out / env / "summary.json").read_text())
    n, k = s["episodes"], round(s["success_rate"] * s["episodes"])
    low, high = wilson_interval(k, n)
    print(f"| `{env}` | {n} | {k}/{n} ({low:.0%}–{high:.0%}) | {s['mean_score']:.3f} | {s['invalid_rate']:.0%} "
          f"| {s['mean_steps']:.1f} | {s['wall_s'] / 60:.0f} min |")
PY
