#!/usr/bin/env bash
# Stagnation Fig. 18 (App. E.2): SFL at 8192 envs (Table 3's preset, 8 epochs x 32 minibatches: PPO's
# proximal policy lags 127.5 minibatch steps on average) with standard PPO and PPO-EWMA at COM 256,
# 1024 and 4096 (the COMs are this project's choice; the paper shows that a larger COM plateaus
# later), size l, 3 seeds; budget 2e10 steps. The 1M reference run is sfl_scaling.sh's.
source "$(dirname "$0")/common.sh"
sfl_ablation
# SMOKE: two COMs in one launch, minutes (the PPO arm is every other SFL runner's)
smoke || launch ppo --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}"
launch ewma --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" --ewma-com $(smoke && echo 4 64 || echo 256 1024 4096)
compare ppo_vs_ewma "$(smoke && echo ewma || echo ppo ewma)" --x-flag ewma-com
