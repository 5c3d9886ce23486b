#!/usr/bin/env bash
# Stagnation Fig. 19 (App. E.3): SFL at 8192 envs (Table 3's preset: N = 262144 candidates, K = 8192)
# against more candidates (N = 1048576) and more candidates with a bigger buffer (K = 32768), size l,
# 3 seeds; budget 2e10 steps. The 4x factors are this project's choice (the paper: "sampling more levels
# to filter through, or doing this and having a larger buffer", as its 1M run did).
source "$(dirname "$0")/common.sh"
sfl_ablation
launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}"
if smoke; then  # the tiny config with 4x the candidates (64), then also 4x the buffer (16)
    CONFIG=("${SFL_TINY[@]}" --num-envs 8 --num-minibatches 2); MORE=(--sfl-num-candidates 64 --sfl-buffer-size 4 16)
else
    MORE=(--sfl-num-candidates 1048576 --sfl-buffer-size 8192 32768)
fi
launch filtering --script ppo_kinetix_sfl --seeds $SEEDS "${BUDGET[@]}" -- "${CONFIG[@]}" "${MORE[@]}"
analyze filtering --x-flag sfl-num-candidates
