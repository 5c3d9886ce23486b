#!/usr/bin/env bash
# Data-collection Fig. 1c: update epochs (the default 4, x2, x4) against a batch grown through N_envs (8, 16, 32 envs
# at 128 steps) or through rollout length (8 envs at 256, 512 steps); Atari-10, 5 seeds, 100M steps per run.
# The factors are this project's reading (the text lost them).
# 100M env steps per run is SPEC's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; EPOCHS="1 2"; NENVS="2 4"; STEPS=16; BASE_ENVS=2; ROLLOUTS=32
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; EPOCHS="4 8 16"; NENVS="8 16 32"; STEPS=128; BASE_ENVS=8
    ROLLOUTS="256 512"
fi
COMMON=(--script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
launch epochs "${COMMON[@]}" -- --update-epochs $EPOCHS --num-envs $NENVS --num-steps $STEPS
launch epochs "${COMMON[@]}" -- --update-epochs $EPOCHS --num-envs $BASE_ENVS --num-steps $ROLLOUTS
analyze epochs --x-flag num-envs
