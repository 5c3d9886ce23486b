#!/usr/bin/env bash
# Stagnation Fig. 15 / 16 (App. D): SFL at 1M envs (Table 3's 1m preset, 128 GPUs) with 32, 1024 or
# 8192 minibatches, size l, 3 seeds. This project's reading of the paper's settings:
#   32 minibatches: the baseline's count, 512x its size, lr 5e-5 unchanged (bigger-minibatch);
#   1024: App. D's hybrid, b = 16 (16x the size, lr x4); 8192: hybrid, b = 2 (2x the size, lr x sqrt 2).
# Budget: 1e11 steps (this project's choice). One grid per minibatch count (named by it), compared:
#   fig15: solve rate against steps and the final solve rate against the minibatch count;
#   fig16a: steps per second (charts/SPS) against the minibatch count; fig16b: solve rate against
#   the training wall-clock time (charts/train_seconds).
# Each run spans 16 nodes x 8 GPUs, one process per GPU joined by jax.distributed (the launcher's
# --slurm-nodes/--slurm-tasks-per-node), so the full grid runs on Slurm only: LAUNCH_FLAGS="--slurm ...".
# SMOKE runs the same three recipes at a tiny scale (64 envs from a base of 8 with 2 minibatches: 2, 4 or
# 8 minibatches), one process each.
source "$(dirname "$0")/common.sh"
if smoke; then
    TINY=(--script ppo_kinetix_sfl --seeds 1 --iterations 2 -- "${SFL_TINY[@]}" --num-envs 64 --sfl-num-candidates 64
          --sfl-buffer-size 4 --base-num-envs 8 --base-num-minibatches 2)
    GRIDS="2 4 8"
    launch 2 "${TINY[@]}" --scaling-recipe bigger-minibatch
    launch 4 "${TINY[@]}" --scaling-recipe hybrid --hybrid-minibatch-factor 4
    launch 8 "${TINY[@]}" --scaling-recipe hybrid --hybrid-minibatch-factor 2
elif on_slurm || dry_run; then
    RUN=(--script ppo_kinetix_sfl --seeds 1 2 3 --fixed-budget --total-timesteps 100000000000)
    on_slurm && RUN+=(--slurm-nodes 16 --slurm-tasks-per-node 8 --slurm-gpus 8)
    GRIDS="32 1024 8192"
    launch 32 "${RUN[@]}" -- --env-size l --sfl-preset 1m --scaling-recipe bigger-minibatch
    launch 1024 "${RUN[@]}" -- --env-size l --sfl-preset 1m --scaling-recipe hybrid --hybrid-minibatch-factor 16
    launch 8192 "${RUN[@]}" -- --env-size l --sfl-preset 1m --scaling-recipe hybrid --hybrid-minibatch-factor 2
else
    echo "sfl_fig15_minibatches.sh: the 1M-env runs span 128 GPUs: run with LAUNCH_FLAGS='--slurm ...' (or SMOKE=1)" >&2
    exit 2
fi
compare fig15 "$GRIDS" --x-flag grid
compare fig16a "$GRIDS" --tag charts/SPS --x-flag grid
compare fig16b "$GRIDS" --x-unit seconds
