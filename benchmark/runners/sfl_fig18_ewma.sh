#!/usr/bin/env bash
# Stagnation Fig. 18 (App. E.2): SFL at 8192 envs (Table 3's preset, 8 epochs x 32 minibatches: PPO's
# proximal policy lags 127.5 minibatch steps on average) with standard PPO and PPO-EWMA at COM 256,
# 1024 and 4096 (the COMs are this project's choice; the paper shows that a larger COM plateaus
# later), size l, 3 seeds; budget 2e10 steps. The 1M reference run is sfl_scaling.sh's.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1"; COMS="64"; BUDGET=(--iterations 2)
    CONFIG=(--model mlp --env-size s --num-envs 8 --num-steps 16 --num-minibatches 2 --update-epochs 1 --sfl-num-candidates 16
            --sfl-update-period 2 --sfl-buffer-size 4 --sfl-rollout-length 16 --num-eval-levels 4 --eval-num-attempts 1
            --eval-every 2 --level-filter-pool 4)
else
    SEEDS="1 2 3"; COMS="256 1024 4096"; BUDGET=(--fixed-budget --total-timesteps 20000000000)
    CONFIG=(--env-size l --sfl-preset 8192)
fi
launch ppo --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}"
launch ewma --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" --ewma-com $COMS
compare ppo_vs_ewma "ppo ewma" --x-flag ewma-com
