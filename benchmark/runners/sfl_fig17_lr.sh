#!/usr/bin/env bash
# Stagnation Fig. 17 (App. E.1): SFL at 8192 envs (Table 3's preset, the baseline's 32 minibatches)
# with lr 5e-5 (the baseline), 2.5e-5 and 1e-5, size l, 3 seeds; budget 2e10 steps (this project's
# choice). The 1M reference run is sfl_scaling.sh's.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1"; LRS="5e-5 1e-5"; BUDGET=(--iterations 2)
    CONFIG=(--model mlp --env-size s --num-envs 8 --num-steps 16 --num-minibatches 2 --update-epochs 1 --sfl-num-candidates 16
            --sfl-update-period 2 --sfl-buffer-size 4 --sfl-rollout-length 16 --num-eval-levels 4 --eval-num-attempts 1
            --eval-every 2 --level-filter-pool 4)
else
    SEEDS="1 2 3"; LRS="5e-5 2.5e-5 1e-5"; BUDGET=(--fixed-budget --total-timesteps 20000000000)
    CONFIG=(--env-size l --sfl-preset 8192)
fi
launch lr --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" --learning-rate $LRS
analyze lr --x-flag learning-rate
