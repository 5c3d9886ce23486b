#!/usr/bin/env bash
# Stagnation Fig. 19 (App. E.3): SFL at 8192 envs (Table 3's preset: N = 262144 candidates, K = 8192)
# against more candidates (N = 1048576) and more candidates with a bigger buffer (K = 32768), size l,
# 3 seeds; budget 2e10 steps. The 4x factors are this project's choice (the paper: "sampling more levels
# to filter through, or doing this and having a larger buffer", as its 1M run did).
source "$(dirname "$0")/common.sh"
sfl_ablation
if smoke; then  # one launch, minutes: 16 or 64 candidates (the bigger buffer is left to the full grid)
    launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${SFL_TINY[@]}" --num-envs 8 --num-minibatches 2 \
        --sfl-num-candidates 16 64 --sfl-buffer-size 4
else
    launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}"
    launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" --sfl-num-candidates 1048576 \
        --sfl-buffer-size 8192 32768
fi
analyze filtering --x-flag sfl-num-candidates
