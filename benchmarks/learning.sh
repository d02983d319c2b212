#!/usr/bin/env bash
# The learning benchmark of docs/results.md (issue 45), resumable: a finished step is skipped,
# an unfinished training run continues from its latest checkpoint and an unfinished evaluation
# from its last finished task.
#
#   . .venv/bin/activate && benchmarks/learning.sh [OUT_DIR] [STAGE...]
#
# Stages (default: all, in this order):
#   start   the SFT warm start (recipes/sft-frozenlake.yaml: FrozenLake 4x4, local view), its
#           adapter exported to OUT_DIR/start-adapter, and its greedy evaluation on the 300
#           test tasks every arm is tested on (OUT_DIR/start)
#   grpo    GRPO from the start (recipes/grpo-frozenlake.yaml), seeds 0 1 2
#   gigpo   the same with advantage_estimator: gigpo, seeds 0 1 2
#   ablations  one change each against the recipe, seed 0 (compared with grpo-s0 on the same
#           tasks): trajectory-mean aggregation; G = 4 (16 tasks) and G = 16 (4 tasks), the
#           episodes per update unchanged; 4 and 16 tasks per update (G = 8); lr 5e-5, 2e-4,
#           5e-4 and 1e-3; KL 0.05 to the start; clip-higher (clip_high 0.28, two optimizer steps
#           per batch, so the clip is active); RAGEN's variance filter (keep_top_spread 0.25);
#           GiGPO at lr 5e-4 and KL 0.05 at lr 5e-4 (both against abl-lr5e-4); training maps with
#           p_hole 0.35 (the test maps keep 0.2: eval_env_kwargs); GiGPO on training maps with
#           p_hole 0.35 and 0.5 (against abl-holes0.35), and at p_hole 0.5 with lr 5e-4 and 2e-4;
#           trajectory-mean aggregation at lr 5e-4 and 2e-4, and at 5e-4 with DAPO's dynamic sampling;
#           an entropy bonus of 0.05, 0.2 and 0.5 at lr 5e-4. The hole-free variant has its own
#           five: lr 5e-4; 16 tasks per update; KL 0.01 to the start; training on choice lakes
#           only (`lakes: choice`, maps where a walk toward the goal can fall; the test lakes stay
#           every map); training on twin lakes (`twins: true`, each lake beside its transpose in
#           the same update)
#   table   test success per run and the paired differences (benchmarks/learning_table.py)
# VARIANT=holefree runs the hole-free benchmark instead (its own ablations, see above): the
# start is cloned from lakes without holes (recipes/sft-frozenlake-holefree.yaml) and GRPO
# (recipes/grpo-frozenlake-holefree.yaml) must teach it to step around them; both use the
# compass view. Give it its own OUT_DIR.
# VARIANT=dense runs the dense benchmark (the one issue 45's lift is measured on): the hole-free
# start, then 127 steps of cloning on twin choice lakes (recipes/sft-frozenlake-reader.yaml) so
# that it reads the holes in part; its adapter is OUT_DIR/start-adapter. GRPO
# (recipes/grpo-frozenlake-dense.yaml, 20 updates) trains on twin lakes at p_hole 0.5 and every
# arm, the start included, is tested on the 300 test lakes at p_hole 0.5. Seed S trains on its
# own lakes (train_seed_start S x 100000). Its ablations are issue 45's list against seed 0, in
# the order a session with few cores should run them: lr 2e-4, 5e-4 and 5e-5; trajectory-mean
# aggregation; G = 4 (16 tasks) and G = 16 (4 tasks); 4 and 16 tasks per update; KL 0.05 to the
# start; clip-higher (clip_high 0.28, two optimizer steps per batch); RAGEN's filter (top 25%).
# VARIANT=graded runs the graded benchmark on BlocksWorld with 4 blocks (14 moves):
# the start is cloned from the planner (recipes/sft-blocksworld.yaml), GRPO
# (recipes/grpo-blocksworld.yaml) is paid the final score (the share of goal relations held),
# each seed trains on its own tasks, and the table measures every arm by its mean test score,
# with success beside it. It has no ablations.
# A switch with spaces carries its own quotes: a job is one command line (benchmarks/lib.sh).
# Jobs run side by side, one core each (HINDSIGHT_THREADS=1, taskset); CORES=0 (or 1) keeps a
# driver on one core, CORES="0,1" runs one job at a time on two threads (faster in all for the
# graded runs on a 2-core machine: docs/results.md), ONLY="grpo-s0 gigpo-s0" runs the named
# jobs alone. UPDATES=N overrides the recipe's number of updates (the runs of 2026-11-28 used
# what one session could finish).
# MODEL sets the base model of every run (default smollm2, or hf:PATH for a tiny check) and
# SET="--set k=v ..." adds switches to every training run of the grpo, gigpo and ablations stages; on a GPU the runs'
# dtype `auto` is bfloat16 (benchmarks/learning_gpu.sh runs the seeds there).
# `python benchmarks/keep.py OUT_DIR results/learning --commit SHA` keeps each finished run's
# outcome table in the repository (results/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/learning}
shift || true
stages=${*:-start grpo gigpo ablations table}
mkdir -p "$out"
variant=${VARIANT:-local}
measure=success  # what the table counts: success, or the graded benchmark's score
case $variant in
  local) sft_recipe=recipes/sft-frozenlake.yaml recipe=recipes/grpo-frozenlake.yaml view=local ;;
  holefree) sft_recipe=recipes/sft-frozenlake-holefree.yaml recipe=recipes/grpo-frozenlake-holefree.yaml view=compass ;;
  dense) sft_recipe=recipes/sft-frozenlake-holefree.yaml recipe=recipes/grpo-frozenlake-dense.yaml view=compass ;;
  graded) sft_recipe=recipes/sft-blocksworld.yaml recipe=recipes/grpo-blocksworld.yaml measure=score ;;
  *) echo "unknown VARIANT: $variant (local, holefree, dense or graded)" >&2; exit 2 ;;
esac
prompt=$(python -c "import yaml; print(yaml.safe_load(open('$recipe'))['system_prompt'])")
# `lake`: the test env of every evaluation (benchmarks/lib.sh), a lake but for the graded variant.
if [ "$variant" = graded ]; then
  lake=(--env blocksworld --set num_blocks=4 --set max_steps=14 --memory none
        --max-new-tokens 20 --system-prompt "$prompt")
else
  lake=(--env frozenlake --set size=4 --set max_steps=8 --set "view=$view" --memory none --max-new-tokens 12
        --system-prompt "$prompt")
fi
if [ "$variant" = dense ]; then lake+=(--set p_hole=0.5); fi

. benchmarks/lib.sh  # train, evaluate, spawn, arm

model=${MODEL:-smollm2}
base=""  # the base model's switch for every training run, the start's included
if [ "$model" != smollm2 ]; then base="--set model=$model"; fi
read -r -a switches <<<"${SET:-} $base"
if [ -n "${UPDATES:-}" ]; then switches+=(--set "updates=$UPDATES"); fi
start="$out/start-adapter"
own_lakes() {  # the dense and graded benchmarks give each seed its own training tasks; the others share seed 0's
  if [ "$variant" = dense ] || [ "$variant" = graded ]; then echo "--set train_seed_start=$(( $1 * 100000 ))"; fi
}
for stage in $stages; do
  case $stage in
  start)
    if [ "$variant" = dense ]; then
      foreground "train sft '$out/holefree-sft' --config $sft_recipe $base"
      export_adapter "$out/holefree-sft" "$out/holefree-adapter"
      foreground "train sft '$out/start-sft' --config recipes/sft-frozenlake-reader.yaml --set init_from='$out/holefree-adapter' $base"
    else
      foreground "train sft '$out/start-sft' --config $sft_recipe $base"
    fi
    export_adapter "$out/start-sft" "$start"
    foreground "evaluate '$out/start' --model '$model+$start' --episodes 300 --temperature 0"
    ;;
  grpo)
    for seed in 0 1 2; do arm grpo "$seed" grpo "$recipe" "${switches[@]}" $(own_lakes "$seed"); done
    wait
    ;;
  gigpo)
    for seed in 0 1 2; do
      arm gigpo "$seed" grpo "$recipe" "${switches[@]}" $(own_lakes "$seed") --set advantage_estimator=gigpo
    done
    wait
    ;;
  ablations)
    if [ "$variant" = graded ]; then echo "the graded benchmark has no ablations" >&2; continue; fi
    if [ "$variant" = dense ]; then
      arm abl-lr2e-4 0 grpo "$recipe" "${switches[@]}" --set lr=2e-4
      arm abl-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set lr=5e-4
      arm abl-lr5e-5 0 grpo "$recipe" "${switches[@]}" --set lr=5e-5
      arm abl-trajectory-mean 0 grpo "$recipe" "${switches[@]}" --set aggregation=trajectory_mean
      arm abl-g4 0 grpo "$recipe" "${switches[@]}" --set group_size=4 --set tasks_per_update=16
      arm abl-g16 0 grpo "$recipe" "${switches[@]}" --set group_size=16 --set tasks_per_update=4
      arm abl-tasks4 0 grpo "$recipe" "${switches[@]}" --set tasks_per_update=4
      arm abl-tasks16 0 grpo "$recipe" "${switches[@]}" --set tasks_per_update=16
      arm abl-kl 0 grpo "$recipe" "${switches[@]}" --set kl_coef=0.05 --set kl_reference=init
      arm abl-clip-higher 0 grpo "$recipe" "${switches[@]}" --set clip_high=0.28 --set epochs=2
      arm abl-ragen 0 grpo "$recipe" "${switches[@]}" --set keep_top_spread=0.25
      wait
      continue
    fi
    if [ "$variant" = holefree ]; then
      arm abl-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set lr=5e-4
      arm abl-tasks16 0 grpo "$recipe" "${switches[@]}" --set tasks_per_update=16
      arm abl-kl0.01 0 grpo "$recipe" "${switches[@]}" --set kl_coef=0.01 --set kl_reference=init
      arm abl-choice 0 grpo "$recipe" "${switches[@]}" \
          --set "'env_kwargs={max_steps: 8, view: compass, lakes: choice}'" --set "'eval_env_kwargs={lakes: any}'"
      arm abl-twins 0 grpo "$recipe" "${switches[@]}" \
          --set "'env_kwargs={max_steps: 8, view: compass, twins: true}'" --set "'eval_env_kwargs={twins: false}'"
      wait
      continue
    fi
    arm abl-trajectory-mean 0 grpo "$recipe" "${switches[@]}" --set aggregation=trajectory_mean
    arm abl-g4 0 grpo "$recipe" "${switches[@]}" --set group_size=4 --set tasks_per_update=16
    arm abl-g16 0 grpo "$recipe" "${switches[@]}" --set group_size=16 --set tasks_per_update=4
    arm abl-tasks4 0 grpo "$recipe" "${switches[@]}" --set tasks_per_update=4
    arm abl-tasks16 0 grpo "$recipe" "${switches[@]}" --set tasks_per_update=16
    arm abl-lr5e-5 0 grpo "$recipe" "${switches[@]}" --set lr=5e-5
    arm abl-lr2e-4 0 grpo "$recipe" "${switches[@]}" --set lr=2e-4
    arm abl-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set lr=5e-4
    arm abl-lr1e-3 0 grpo "$recipe" "${switches[@]}" --set lr=1e-3
    arm abl-gigpo-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set advantage_estimator=gigpo --set lr=5e-4
    arm abl-kl 0 grpo "$recipe" "${switches[@]}" --set kl_coef=0.05 --set kl_reference=init
    arm abl-clip-higher 0 grpo "$recipe" "${switches[@]}" --set clip_high=0.28 --set epochs=2
    arm abl-ragen 0 grpo "$recipe" "${switches[@]}" --set keep_top_spread=0.25
    arm abl-kl-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set kl_coef=0.05 --set kl_reference=init --set lr=5e-4
    arm abl-holes0.35 0 grpo "$recipe" "${switches[@]}" \
        --set "'env_kwargs={max_steps: 8, view: local, p_hole: 0.35}'" --set "'eval_env_kwargs={p_hole: 0.2}'"
    arm abl-gigpo-holes0.35 0 grpo "$recipe" "${switches[@]}" --set advantage_estimator=gigpo \
        --set "'env_kwargs={max_steps: 8, view: local, p_hole: 0.35}'" --set "'eval_env_kwargs={p_hole: 0.2}'"
    arm abl-gigpo-holes0.5 0 grpo "$recipe" "${switches[@]}" --set advantage_estimator=gigpo \
        --set "'env_kwargs={max_steps: 8, view: local, p_hole: 0.5}'" --set "'eval_env_kwargs={p_hole: 0.2}'"
    for lr in 5e-4 2e-4; do
      arm "abl-gigpo-holes0.5-lr$lr" 0 grpo "$recipe" "${switches[@]}" --set advantage_estimator=gigpo --set "lr=$lr" \
          --set "'env_kwargs={max_steps: 8, view: local, p_hole: 0.5}'" --set "'eval_env_kwargs={p_hole: 0.2}'"
    done
    for lr in 5e-4 2e-4; do
      arm "abl-trajmean-lr$lr" 0 grpo "$recipe" "${switches[@]}" --set aggregation=trajectory_mean --set "lr=$lr"
    done
    arm abl-trajmean-dyn-lr5e-4 0 grpo "$recipe" "${switches[@]}" --set aggregation=trajectory_mean --set lr=5e-4 \
        --set dynamic_sampling=true
    for coef in 0.05 0.2 0.5; do
      arm "abl-ent$coef-lr5e-4" 0 grpo "$recipe" "${switches[@]}" --set lr=5e-4 --set "entropy_coef=$coef"
    done
    wait
    ;;
  table)
    python benchmarks/learning_table.py "$out" --measure "$measure"
    ;;
  *) echo "unknown stage: $stage" >&2; exit 2 ;;
  esac
done
