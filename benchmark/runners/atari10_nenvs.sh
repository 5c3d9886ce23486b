#!/usr/bin/env bash
# Data-collection Fig. 1a and 1b, PPO on Atari-10, 5 seeds, 100M steps per run (a fixed budget: a bigger batch
# means fewer updates).
#   fixed_batch (Fig. 1a): N_envs x N_RO = 1024 held fixed, from the default 8 x 128 to more envs with shorter rollouts;
#   grow (Fig. 1b): the batch grown from 8 x 128 through N_envs (16, 32, 64 envs at 128 steps) against through rollout
#   length (8 envs at 256, 512, 1024 steps); the N_envs arm also runs 1, 2 and 4 envs (this project's range).
# The x2/x4/x8 factors are this project's reading (the text lost them).
# 100M env steps per run is SPEC's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="2 4"; STEPS=16; BATCH=32; ROLLOUTS="32 64"; BASE_ENVS=2
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128; BATCH=1024
    ROLLOUTS="256 512 1024"; BASE_ENVS=8
fi
COMMON=(--script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
for n in $NENVS; do
    launch fixed_batch "${COMMON[@]}" -- --num-envs "$n" --num-steps $((BATCH / n))
done
launch grow "${COMMON[@]}" -- --num-envs $NENVS --num-steps $STEPS
launch grow "${COMMON[@]}" -- --num-envs $BASE_ENVS --num-steps $ROLLOUTS
analyze fixed_batch --x-flag num-envs
analyze grow --x-flag num-envs
