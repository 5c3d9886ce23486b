#!/usr/bin/env bash
# The data-collection paper's rebuttal to its ICML 2025 reviewers (its Fig. 4; Fig. 15, 16): PPO + RND and, beside
# it, plain PPO on Montezuma's Revenge and Phoenix with N_envs in {32, 64, 128, 256} at 128 steps, 5 seeds, 100M steps
# per run (N_envs and budget: this project's choice). One grid: the configs are script x N_envs.
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="MontezumaRevenge-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="4 8"; STEPS=16
else
    GAMES="MontezumaRevenge-v5 Phoenix-v5"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="32 64 128 256"; STEPS=128
fi
for script in ppo_rnd ppo_atari_envpool; do
    launch rnd --script $script --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
        -- --num-envs $NENVS --num-steps $STEPS
done
analyze rnd --x-flag num-envs
