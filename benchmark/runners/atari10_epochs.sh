#!/usr/bin/env bash
# Data-collection Fig. 1c: update epochs (the default 4, x2, x4) against a batch grown through N_envs (8, 16, 32 envs
# at 128 steps) or through rollout length (8 envs at 256, 512 steps); Atari-10, 5 seeds, 100M steps per run.
# The factors are this project's reading (the text lost them).
# 100M env steps per run is SPEC's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
# Claim 9 of benchmark/reproduce.md.
#
# SCALE=small (fixed before its runs; benchmark/claims.py holds the conditions): ppo_ewma_jax.py (PPO) on MinAtar
# Breakout and SpaceInvaders, 5 seeds, 1M steps per run, the settings of atari10_nenvs.sh's SCALE=small (ReLU units);
# epochs 4 and 8 at 8 and 16 envs x 128 steps and at 8 envs x 256 steps. About 42 minutes on 2 CPU cores (2
# workers): 25 measured at 3 seeds, times 5 / 3. Until 2026-11-27: 3 seeds, tanh units.
# SCALE=gpu: ppo_atari_envpool.py at its defaults on Phoenix and Qbert, 3 seeds, 1M steps per run, the SCALE=small
# configs.
source "$(dirname "$0")/common.sh"
supports small gpu
TAG=()
if smoke; then
    SCRIPT=ppo_atari_envpool; GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; EPOCHS="1 2"; NENVS="2 4"; STEPS=16
    BASE_ENVS=2; ROLLOUTS=32; FLAGS=()
elif [[ "$SCALE" == small ]]; then
    SCRIPT=ppo_ewma_jax; GAMES="Breakout-MinAtar SpaceInvaders-MinAtar"; SEEDS="1 2 3 4 5"; BUDGET=1000000
    EPOCHS="4 8"; NENVS="8 16"; STEPS=128; BASE_ENVS=8; ROLLOUTS=256; TAG=(--tag charts/episodic_return)
    FLAGS=(--hidden-size 256 --num-layers 2 --activation relu --learning-rate 2.5e-4 --anneal-lr --gamma 0.99
           --gae-lambda 0.95 --num-minibatches 4 --clip-coef 0.1)
elif [[ "$SCALE" == gpu ]]; then
    SCRIPT=ppo_atari_envpool; GAMES="Phoenix-v5 Qbert-v5"; SEEDS="1 2 3"; BUDGET=1000000; EPOCHS="4 8"; NENVS="8 16"
    STEPS=128; BASE_ENVS=8; ROLLOUTS=256; FLAGS=()
    [[ -n "${LAUNCH_FLAGS:-}" ]] || LAUNCH_FLAGS="--workers 4"
else
    SCRIPT=ppo_atari_envpool; GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; EPOCHS="4 8 16"; NENVS="8 16 32"
    STEPS=128; BASE_ENVS=8; ROLLOUTS="256 512"; FLAGS=()
fi
COMMON=(--script $SCRIPT --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
launch epochs "${COMMON[@]}" -- "${FLAGS[@]}" --update-epochs $EPOCHS --num-envs $NENVS --num-steps $STEPS
launch epochs "${COMMON[@]}" -- "${FLAGS[@]}" --update-epochs $EPOCHS --num-envs $BASE_ENVS --num-steps $ROLLOUTS
analyze epochs --x-flag num-envs "${TAG[@]}"
if reduced; then analyze_each_env epochs "$GAMES" --x-flag num-envs "${TAG[@]}"; fi
smoke || claim 9
