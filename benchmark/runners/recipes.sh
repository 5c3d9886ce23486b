#!/usr/bin/env bash
# Stagnation Fig. 9: the scaling recipes (§5, App. D) from the base config (2048 envs, 32 minibatches,
# lr 3e-4) to 2x-16x the envs, PPO on Kinetix locomotion (ppo_ewma_jax.py), 5 seeds, solve rate.
# hybrid (b = 2) starts at 2x: a = k / b must be a whole number of times the base minibatches.
# Claim 5 of benchmark/reproduce.md. SCALE=small: SpaceInvaders-MinAtar at Table 2 (STAG_SMALL's task), 3 seeds,
# 100 iterations, base 32 envs x 128 steps with 32 minibatches, scaled to 128 envs (k = 4) by more-minibatches and by
# bigger-minibatch (the hybrid and sqrt-lr recipes are left out at this scale). About 50 minutes (estimated from com_eps.sh's measured 6.4 min a 1M-step run on each of 2 workers, AMD EPYC, 2026-11-25). SCALE=gpu: Kinetix
# locomotion at Table 2, 3 seeds, 80 iterations, base 1024 envs x 256 steps with 32 minibatches, scaled to 4096 envs
# the same two ways.
source "$(dirname "$0")/common.sh"
supports small gpu
RECIPES="more-minibatches bigger-minibatch bigger-minibatch-sqrt-lr"
if smoke; then
    SEEDS="1"; ENV=(--env-id CartPole-v1); BASE=16; NENVS="16 32 64"; HYBRID="32 64"; ITER=4; STEPS=16; MB=4
elif [[ "$SCALE" == small ]]; then
    SEEDS="1 2 3"; ENV=(--env-id SpaceInvaders-MinAtar); BASE=32; NENVS="32 128"; HYBRID=""; ITER=100; STEPS=128; MB=32
    RECIPES="more-minibatches bigger-minibatch"
elif [[ "$SCALE" == gpu ]]; then
    SEEDS="1 2 3"; ENV=(--env-id locomotion); BASE=1024; NENVS="1024 4096"; HYBRID=""; ITER=80; STEPS=256; MB=32
    RECIPES="more-minibatches bigger-minibatch"
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); BASE=2048; NENVS="2048 4096 8192 16384 32768"; HYBRID="4096 8192 16384 32768"; ITER=1000; STEPS=256; MB=32
fi
COMMON=(--script ppo_ewma_jax --seeds $SEEDS --iterations $ITER)
launch recipes "${COMMON[@]}" -- "${ENV[@]}" --num-steps $STEPS --base-num-envs $BASE --base-num-minibatches $MB \
    --num-envs $NENVS --scaling-recipe $RECIPES
if [[ -n "$HYBRID" ]]; then
    launch recipes "${COMMON[@]}" -- "${ENV[@]}" --num-steps $STEPS --base-num-envs $BASE --base-num-minibatches $MB \
        --num-envs $HYBRID --scaling-recipe hybrid --hybrid-minibatch-factor 2
fi
analyze recipes --x-flag num-envs $(return_tag)
if reduced; then claim 5; fi
