#!/usr/bin/env bash
# Data-collection §6.1 (Fig. 6, 13, 14): PQN with the batch grown through N_envs ({1, ..., 64} at 128 steps) or
# through rollout length (8 envs at 256, 512, 1024 steps), PPO's budget; Atari-10, 5 seeds, 100M steps.
# 100M env steps per run is the data-collection paper's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="2 4"; STEPS=16; BASE_ENVS=2; ROLLOUTS=32
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128; BASE_ENVS=8
    ROLLOUTS="256 512 1024"
fi
COMMON=(--script pqn_atari --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
launch pqn "${COMMON[@]}" -- --num-envs $NENVS --num-steps $STEPS
launch pqn "${COMMON[@]}" -- --num-envs $BASE_ENVS --num-steps $ROLLOUTS
analyze pqn --x-flag num-envs
