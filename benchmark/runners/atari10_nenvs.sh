#!/usr/bin/env bash
# Data-collection Fig. 1a: PPO with N_envs in {1, ..., 64} at the default rollout length (128), and
# Fig. 1b: N_envs against rollout length at a fixed batch N_envs x num-steps = 1024; Atari-10, 5 seeds,
# 100M steps per run (a fixed budget: more envs means fewer, bigger updates).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=8192; NENVS="1 2 4"; STEPS=16; BATCH=64
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128; BATCH=1024
fi
launch fixed_steps --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
    -- --num-envs $NENVS --num-steps $STEPS
analyze fixed_steps --x-flag num-envs
for n in $NENVS; do
    launch fixed_batch --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
        -- --num-envs "$n" --num-steps $((BATCH / n))
done
analyze fixed_batch --x-flag num-envs
