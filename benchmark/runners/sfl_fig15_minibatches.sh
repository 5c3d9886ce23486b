#!/usr/bin/env bash
# Stagnation Fig. 15 / 16 (App. D): SFL at 1M envs (Table 3's 1m preset, 128 GPUs) with 32, 1024 or
# 8192 minibatches, size l, 3 seeds. This project's reading of the paper's settings:
#   32 minibatches: the baseline's count, 16384x its size, lr 5e-5 unchanged (bigger-minibatch);
#   1024: App. D's hybrid, b = 16 (16x the size, lr x4); 8192: hybrid, b = 2 (2x the size, lr x sqrt 2).
# Budget: 1e11 steps (this project's choice). Fig. 16 reads `charts/SPS` and the runs' wall-clock time.
# The 1M runs span nodes: this runner prints their sbatch commands (benchmark/slurm/); SMOKE runs the
# same three recipes at a tiny scale through the launcher, 64 envs from a base of 8 with 2 minibatches.
source "$(dirname "$0")/common.sh"
if smoke; then
    launch minibatches --script ppo_kinetix_sfl --seeds 1 --iterations 2 -- "${SFL_TINY[@]}" --num-envs 64 \
        --sfl-num-candidates 64 --sfl-buffer-size 4 --base-num-envs 8 --base-num-minibatches 2 --scaling-recipe hybrid \
        --hybrid-minibatch-factor 2 8
    analyze minibatches --x-flag hybrid-minibatch-factor
else
    for recipe in "--scaling-recipe bigger-minibatch" "--scaling-recipe hybrid --hybrid-minibatch-factor 16" \
                  "--scaling-recipe hybrid --hybrid-minibatch-factor 2"; do
        for seed in 1 2 3; do
            echo "sbatch --nodes 16 $ROOT/benchmark/slurm/ppo_kinetix_sfl_multinode.sbatch --env-size l --seed $seed" \
                 "$recipe --total-timesteps 100000000000"
        done
    done
fi
