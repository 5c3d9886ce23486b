#!/usr/bin/env bash
# Stagnation Fig. 11: PPO + SFL on Kinetix size l at Table 3's 2048, 8192 and 65536 envs, 3 seeds, on
# one GPU node each (LAUNCH_FLAGS="--slurm --slurm-gpus 8 ..."); the 1M-env column needs several nodes:
# benchmark/slurm/ppo_kinetix_sfl_multinode.sbatch, printed at the end.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1"; PRESETS=(--model mlp --env-size s --num-envs 8 16 --num-steps 16 --num-minibatches 2 --update-epochs 1
        --sfl-num-candidates 16 --sfl-update-period 2 --sfl-buffer-size 4 --sfl-rollout-length 16 --num-eval-levels 8
        --eval-every 1); BUDGET=(--iterations 3)
else
    SEEDS="1 2 3"; PRESETS=(--env-size l --sfl-preset 2048 8192 65536); BUDGET=(--fixed-budget --total-timesteps 5000000000)
fi
launch sfl --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${PRESETS[@]}"
analyze sfl --x-flag $(smoke && echo num-envs || echo sfl-preset)
smoke || echo "1M envs: sbatch --nodes 4 $ROOT/benchmark/slurm/ppo_kinetix_sfl_multinode.sbatch"
