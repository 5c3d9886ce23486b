#!/usr/bin/env bash
# Stagnation Fig. 19 (App. E.3): SFL at 8192 envs (Table 3's preset: N = 262144 candidates, K = 8192)
# against more candidates (N = 1048576) and more candidates with a bigger buffer (K = 32768), size l,
# 3 seeds; budget 2e10 steps. The 4x factors are this project's choice (the paper: "sampling more levels
# to filter through, or doing this and having a larger buffer", as its 1M run did).
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1"; BUDGET=(--iterations 2)
    CONFIG=(--model mlp --env-size s --num-envs 8 --num-steps 16 --num-minibatches 2 --update-epochs 1 --sfl-update-period 2
            --sfl-rollout-length 16 --num-eval-levels 4 --eval-num-attempts 1 --eval-every 2 --level-filter-pool 4)
    BASE=(--sfl-num-candidates 16 --sfl-buffer-size 4); MORE=(--sfl-num-candidates 64); BIGGER=(--sfl-buffer-size 16)
else
    SEEDS="1 2 3"; BUDGET=(--fixed-budget --total-timesteps 20000000000)
    CONFIG=(--env-size l --sfl-preset 8192); BASE=(); MORE=(--sfl-num-candidates 1048576); BIGGER=(--sfl-buffer-size 32768)
fi
launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" "${BASE[@]}"
launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" "${MORE[@]}" --sfl-buffer-size \
    $(smoke && echo 4 16 || echo 8192 32768)
analyze filtering --x-flag sfl-num-candidates
