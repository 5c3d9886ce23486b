#!/usr/bin/env bash
# Stagnation Fig. 17 (App. E.1): SFL at 8192 envs (Table 3's preset, the baseline's 32 minibatches)
# with lr 5e-5 (the baseline), 2.5e-5 and 1e-5, size l, 3 seeds; budget 2e10 steps (this project's
# choice). The 1M reference run is sfl_scaling.sh's.
source "$(dirname "$0")/common.sh"
sfl_ablation
LRS=$(smoke && echo "5e-5 1e-5" || echo "5e-5 2.5e-5 1e-5")
launch lr --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" --learning-rate $LRS
analyze lr --x-flag learning-rate
