#!/usr/bin/env bash
# Data-collection §5.3, Fig. 11: is the gain from more envs an artefact of the learning rate? N_envs = 8 k
# (k = 1, 2, 4) at 128 steps, with the default lr 2.5e-4, lr x sqrt(k) and lr x k (Hilton et al.'s two rules);
# Atari-10, 5 seeds, 100M steps. The k values are this project's choice.
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; BASE=2; STEPS=16; KS="1 2"
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; BASE=8; STEPS=128; KS="1 2 4"
fi
for k in $KS; do
    lrs=$("$PY" -c "k = $k; print(*sorted({2.5e-4, 2.5e-4 * k ** 0.5, 2.5e-4 * k}))")
    launch lr --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
        -- --num-envs $((BASE * k)) --num-steps $STEPS --learning-rate $lrs
done
analyze lr --x-flag num-envs
