#!/usr/bin/env bash
# Data-collection §6.1: PQN with N_envs in {1, ..., 64} at 128 steps, PPO's budget; Atari-10, 5 seeds, 100M steps.
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=4096; NENVS="2 4"; STEPS=16
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128
fi
launch pqn --script pqn_atari --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
    -- --num-envs $NENVS --num-steps $STEPS
analyze pqn --x-flag num-envs
