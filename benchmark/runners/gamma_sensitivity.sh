#!/usr/bin/env bash
# Data-collection §5.3, Fig. 12: do Fig. 1b's gains hold across discount factors? gamma in {0.95, 0.99, 0.995}
# (this project's choice) x the batch grown through N_envs (8, 16, 32 envs at 128 steps) or rollout length
# (8 envs at 256, 512 steps); Atari-10, 5 seeds, 100M steps.
# 100M env steps per run is the data-collection paper's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; GAMMAS="0.95 0.99"; NENVS="2 4"; STEPS=16; BASE_ENVS=2; ROLLOUTS=32
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; GAMMAS="0.95 0.99 0.995"; NENVS="8 16 32"; STEPS=128
    BASE_ENVS=8; ROLLOUTS="256 512"
fi
COMMON=(--script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
launch gamma "${COMMON[@]}" -- --gamma $GAMMAS --num-envs $NENVS --num-steps $STEPS
launch gamma "${COMMON[@]}" -- --gamma $GAMMAS --num-envs $BASE_ENVS --num-steps $ROLLOUTS
analyze gamma --x-flag num-envs
