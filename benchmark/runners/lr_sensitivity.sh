#!/usr/bin/env bash
# Data-collection §5.3, Fig. 11: is the gain from more envs an artefact of the learning rate? N_envs = 8 k
# (k = 1, 2, 4) at 128 steps under three rules for the learning rate: the default 2.5e-4 kept, x sqrt(k) and x k
# (Hilton et al.'s); one grid per rule (k = 1 is one run shared by all three), compared in one analysis (lr_rules).
# Atari-10, 5 seeds, 100M env steps per run (the data-collection paper's protocol; the rebuttal compares across gradient steps too).
# The k values are this project's choice.
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; BASE=2; STEPS=16; KS="1 2"
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; BASE=8; STEPS=128; KS="1 2 4"
fi
for rule in constant sqrt linear; do
    for k in $KS; do
        lr=$("$PY" -c "k = $k; print({'constant': 2.5e-4, 'sqrt': 2.5e-4 * k ** 0.5, 'linear': 2.5e-4 * k}['$rule'])")
        launch "lr_$rule" --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
            -- --num-envs $((BASE * k)) --num-steps $STEPS --learning-rate "$lr"
    done
done
compare lr_rules "lr_constant lr_sqrt lr_linear" --x-flag num-envs
