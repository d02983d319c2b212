# Shared helpers of the resumable comparison scripts (sourced, not run).
# The caller sets: out (the output folder), lake (an array of `hindsight eval` environment
# flags) and, for `arm`, start (the adapter every arm starts from). Jobs run side by side, one
# per core of CORES (default "0 1"), so two drivers can share the machine: CORES=0 for one,
# CORES=1 for the other. Later runs start from exported adapters in OUT rather than from a run's
# checkpoint: an adapter is a fifth of a checkpoint's size to carry to the next machine.

train() {  # train METHOD DIR ARGS...: a new run, or the unfinished one continued
  local method=$1 dir=$2
  shift 2
  if [ -f "$dir/summary.json" ]; then echo "done: $dir"; return; fi
  if [ -f "$dir/config.yaml" ]; then hindsight train "$method" --resume "$dir"; else hindsight train "$method" "$@" --out "$dir"; fi
}

finished() {  # finished DIR: the run or evaluation in DIR ended, not interrupted
  [ -f "$1/summary.json" ] && ! grep -q '"interrupted": true' "$1/summary.json"
}

evaluate() {  # evaluate DIR ARGS...: skipped when finished; an interrupted one continues
  local dir=$1
  shift
  if finished "$dir"; then echo "done: $dir"; return; fi
  if [ -f "$dir/trajectories/eval.jsonl" ]; then hindsight eval --resume "$dir" --json; return; fi
  rm -rf "$dir"
  hindsight eval "${lake[@]}" "$@" --out "$dir" --json
}

export_adapter() {  # export_adapter RUN DIR [ROLE]: the run's last adapter as a PEFT folder (float16)
  local run=$1 dir=$2 role=${3:-policy}
  if [ -f "$dir/adapter_config.json" ]; then echo "done: $dir"; return; fi
  hindsight export-adapter "$run" "$dir" --role "$role"
}

# CORES: one entry per job slot, a core or a comma-separated set of cores ("0 1": two jobs of one
# thread; "0,1": one job of two threads). ONLY: the names of the jobs to run (their log names,
# "grpo-s0 sg-s0"), the others skipped; a session that cannot finish a whole stage picks the
# runs that fit, since a training run cut off at the end of a machine is lost.
read -r -a cores <<<"${CORES:-0 1}"
slot_pids=()

on_cores() {  # on_cores CPUS COMMAND: run COMMAND pinned to CPUS ("0" or "0,1"), one thread per core
  local threads=$(( $(tr -cd , <<<"$1" | wc -c) + 1 ))
  taskset -c "$1" env HINDSIGHT_THREADS="$threads" OMP_NUM_THREADS="$threads" \
    bash -c "$(declare -f finished train evaluate); lake=(${lake[*]@Q}); $2"
}

spawn() {  # spawn LOG COMMAND...: run in the background in the first free slot, one job per slot at once
  local log=$1 slot pid
  shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $log "* ]]; then return; fi
  while true; do
    for slot in "${!cores[@]}"; do
      pid=${slot_pids[$slot]:-}
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break 2; fi
    done
    wait -n || true  # a failed job is in its own log; the others go on
  done
  local cpus=${cores[$slot]}
  echo "$(date +%T) cores $cpus: $log"
  on_cores "$cpus" "$*" > "$out/$log.log" 2>&1 &
  slot_pids[$slot]=$!
}

foreground() {  # foreground COMMAND...: run it now on all of CORES, one thread per core
  on_cores "$(IFS=,; echo "${cores[*]}")" "$*"
}

arm() {  # arm NAME SEED METHOD RECIPE SWITCHES...: one training run from $start, in the background
  # Its folder and log are NAME-sSEED, followed by RUN_TAG where the caller sets one ("-float32").
  local name=$1 seed=$2 method=$3 config=$4
  shift 4
  local run="$name-s$seed${RUN_TAG:-}"
  spawn "$run" "train $method '$out/$run' --config $config --set init_from='$start' --set seed=$seed $*"
}
