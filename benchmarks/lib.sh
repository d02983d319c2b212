# Shared helpers of the resumable comparison scripts (sourced, not run).
# The caller sets: out (the output folder), lake (an array of `hindsight eval` environment
# flags) and, for `arm`, start (the adapter every arm starts from). Jobs run side by side, one
# per core of CORES (default "0 1"), so two drivers can share the machine: CORES=0 for one,
# CORES=1 for the other. Later runs start from exported adapters rather than from a run's
# checkpoint, since benchmarks/keep.py keeps those in the repository and checkpoints are too big.

train() {  # train METHOD DIR ARGS...: a new run, or the unfinished one continued
  local method=$1 dir=$2
  shift 2
  if [ -f "$dir/summary.json" ]; then echo "done: $dir"; return; fi
  if [ -f "$dir/config.yaml" ]; then hindsight train "$method" --resume "$dir"; else hindsight train "$method" "$@" --out "$dir"; fi
}

evaluate() {  # evaluate DIR ARGS...: skipped when finished; an interrupted one continues
  local dir=$1
  shift
  if [ -f "$dir/summary.json" ] && ! grep -q '"interrupted": true' "$dir/summary.json"; then echo "done: $dir"; return; fi
  if [ -f "$dir/trajectories/eval.jsonl" ]; then hindsight eval --resume "$dir" --json; return; fi
  rm -rf "$dir"
  hindsight eval "${lake[@]}" "$@" --out "$dir" --json
}

export_adapter() {  # export_adapter RUN DIR [ROLE]: the run's last adapter as a PEFT folder (float16)
  local run=$1 dir=$2 role=${3:-policy}
  if [ -f "$dir/adapter_config.json" ]; then echo "done: $dir"; return; fi
  hindsight export-adapter "$run" "$dir" --role "$role"
}

read -r -a cores <<<"${CORES:-0 1}"
slots=${#cores[@]}
job=0
spawn() {  # spawn LOG COMMAND...: run on the next free core, at most one job per core at once
  local log=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$slots" ]; do wait -n; done
  local core=${cores[$((job % slots))]}
  job=$((job + 1))
  echo "$(date +%T) core $core: $log"
  taskset -c "$core" env HINDSIGHT_THREADS=1 OMP_NUM_THREADS=1 bash -c "$(declare -f train evaluate); lake=(${lake[*]@Q}); $*" \
    > "$out/$log.log" 2>&1 &
}

foreground() {  # foreground COMMAND...: run it now on all of CORES, one thread per core
  taskset -c "$(IFS=,; echo "${cores[*]}")" env HINDSIGHT_THREADS="$slots" OMP_NUM_THREADS="$slots" \
    bash -c "$(declare -f train evaluate); lake=(${lake[*]@Q}); $*"
}

arm() {  # arm NAME SEED METHOD RECIPE SWITCHES...: one training run from $start, in the background
  local name=$1 seed=$2 method=$3 config=$4
  shift 4
  spawn "$name-s$seed" "train $method '$out/$name-s$seed' --config $config --set init_from='$start' --set seed=$seed $*"
}
