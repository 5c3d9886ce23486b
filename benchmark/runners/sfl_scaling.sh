#!/usr/bin/env bash
# Stagnation Fig. 11: PPO + SFL on Kinetix sizes s and l at Table 3's presets with the paper's scaling
# recipe (App. D), 3 seeds, solve rate on the sampled evaluation set:
#   2048 envs: the Kinetix baseline (32 minibatches, lr 5e-5);
#   8192, 65536 envs: more minibatches (128, 1024) of the baseline's size at its learning rate;
#   1M envs (128 GPUs): the hybrid of App. D, 1024 minibatches 16x the size, lr x4.
# Budget, this project's choice: 2e10 steps, past the baseline's plateau (before 1e10 in the paper); 1e12 at 1M.
# Each preset up to 65536 runs on one GPU node (LAUNCH_FLAGS="--slurm --slurm-gpus 8 ..."); a 1M run spans
# 16 nodes x 8 GPUs, one process per GPU joined by jax.distributed (the launcher's --slurm-nodes and
# --slurm-tasks-per-node), so it is launched on Slurm only.
source "$(dirname "$0")/common.sh"
if smoke; then  # the base (8 envs, 2 minibatches) and 4x the envs with 4x the minibatches, in one launch
    launch sfl --script ppo_kinetix_sfl --seeds 1 --iterations 2 -- "${SFL_TINY[@]}" --num-envs 8 32 --sfl-num-candidates 32 \
        --sfl-buffer-size 4 --scaling-recipe more-minibatches --base-num-envs 8 --base-num-minibatches 2
else
    SEEDS="1 2 3"; SIZES="s l"; BUDGET=(--fixed-budget --total-timesteps 20000000000)
    launch sfl --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- --env-size $SIZES --sfl-preset 2048
    launch sfl --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- --env-size $SIZES --sfl-preset 8192 65536 \
        --scaling-recipe more-minibatches
    if on_slurm || dry_run; then
        MULTINODE=()
        on_slurm && MULTINODE=(--slurm-nodes 16 --slurm-tasks-per-node 8 --slurm-gpus 8)
        launch sfl --script ppo_kinetix_sfl --seeds $SEEDS --fixed-budget --total-timesteps 1000000000000 "${MULTINODE[@]}" \
            -- --env-size $SIZES --sfl-preset 1m --scaling-recipe hybrid --hybrid-minibatch-factor 16
    else
        echo "runner: the 1M-env runs span 128 GPUs: launched with LAUNCH_FLAGS='--slurm ...' only; skipped here" >&2
    fi
fi
analyze sfl --x-flag num-envs
