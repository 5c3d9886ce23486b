#!/usr/bin/env bash
# Data-collection Fig. 5 (§5.2): one CNN torso shared by actor and critic against separate torsos, for N_envs in
# {1, ..., 64} at 128 steps (this project's N_envs range, as Fig. 1b); Atari-10, 5 seeds, 100M steps; dynamics/
# metrics every 10 updates. The shared half is the same runs as atari10_nenvs.sh's N_envs arm (one run store).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="2 4"; STEPS=16
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128
fi
for encoders in "" "--separate-encoders"; do
    launch encoders --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
        -- --num-envs $NENVS --num-steps $STEPS $encoders
done
analyze encoders --x-flag num-envs
