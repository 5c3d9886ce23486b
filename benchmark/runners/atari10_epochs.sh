#!/usr/bin/env bash
# Data-collection Fig. 1c: update epochs (the default 4, x2, x4) against a batch grown through N_envs (8, 16, 32 envs
# at 128 steps) or through rollout length (8 envs at 256, 512 steps); Atari-10, 5 seeds, 100M steps per run.
# The factors are this project's reading (the text lost them).
# 100M env steps per run is the data-collection paper's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
# Claim 9 of benchmark/reproduce.md.
#
# SCALE=small (fixed before its runs; benchmark/claims.py holds the conditions): ppo_ewma_jax.py (PPO) on MinAtar
# SpaceInvaders (Breakout until minatar_pilot.sh's rule; atari10_nenvs.sh), seeds 11-15 (1-5 until then), 1M steps per run, the settings of atari10_nenvs.sh's SCALE=small (2 x 128 ReLU
# units); epochs 4 and 8 at 8 and 16 envs x 128 steps. The rollout arm (8 envs x 256 steps) is not run at small
# (fixed 2026-11-28, before its runs): no condition reads it, and from an empty store it was a quarter of the
# runner's minibatch steps. Until 2026-11-28 it ran: after atari10_nenvs.sh, whose 4-epoch runs it shares, the
# 30M steps of 8-epoch runs took at most 47.6 minutes on 2 CPU cores (2 workers, Intel Xeon, 2026-11-28, beside a
# stray process that took about a third of the machine; from an empty store at most about 76, not shown within the
# hour a claim may take). Timed again without it, from an empty store: 31.6 minutes on 2 workers, alone (Intel Xeon,
# 2026-11-28), every per-seed final return as before.
# Until 2026-11-28: 2 x 256 units, 61 minutes on 2 CPU cores (2 workers, AMD EPYC, 2026-11-27: 27.6 stopped by
# SIGTERM, then 33.4 resumed). Until 2026-11-27: 3 seeds, tanh units.
# SCALE=gpu (fixed 2026-11-27, before any run; until then ppo_atari_envpool.py on Phoenix and Qbert, 3 seeds, 1M
# steps): MinAtar Breakout and SpaceInvaders (SCALE=small reads SpaceInvaders alone), SCALE=small's configs and flags with 2 x 256 units, 10 seeds (in one process) and 10M steps a run. GPU time, one
# process at a time (common.sh's measured H200 rates), per game: 8 epochs (~35 ms of minibatch steps an iteration: twice the measured 4 epochs, assumed, not measured)
# 8 x 128 407 s, 16 x 128 204 s, 8 x 256 236 s; 4 epochs 236 s, 118 s, 150 s (atari10_nenvs.sh's runs, shared
# through the store); + 6 x 40 s fixed = 1,591 s; 2 games 0.88 GPU-hours (0.53 after atari10_nenvs.sh).
source "$(dirname "$0")/common.sh"
supports small gpu
TAG=()
if smoke; then
    SCRIPT=ppo_atari_envpool; GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; EPOCHS="1 2"; NENVS="2 4"; STEPS=16
    BASE_ENVS=2; ROLLOUTS=32; FLAGS=()
elif reduced; then
    SCRIPT=ppo_ewma_jax; GAMES="$MINATAR_GAMES"; EPOCHS="4 8"; NENVS="8 16"; STEPS=128; BASE_ENVS=8; ROLLOUTS=256
    TAG=(--tag charts/episodic_return); FLAGS=("${MINATAR_PPO[@]}")
    if [[ "$SCALE" == small ]]; then SEEDS="11 12 13 14 15"; BUDGET=1000000; ROLLOUTS=""  # no condition reads that arm
    else SEEDS="$MINATAR_GPU_SEEDS"; BUDGET=$MINATAR_GPU_BUDGET; launch_defaults $MINATAR_GPU_FLAGS; fi
else
    SCRIPT=ppo_atari_envpool; GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; EPOCHS="4 8 16"; NENVS="8 16 32"
    STEPS=128; BASE_ENVS=8; ROLLOUTS="256 512"; FLAGS=()
fi
COMMON=(--script $SCRIPT --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
launch epochs "${COMMON[@]}" -- "${FLAGS[@]}" --update-epochs $EPOCHS --num-envs $NENVS --num-steps $STEPS
if [[ -n "$ROLLOUTS" ]]; then
    launch epochs "${COMMON[@]}" -- "${FLAGS[@]}" --update-epochs $EPOCHS --num-envs $BASE_ENVS --num-steps $ROLLOUTS
fi
analyze epochs --x-flag num-envs "${TAG[@]}"
if reduced; then analyze_each_env epochs "$GAMES" --x-flag num-envs "${TAG[@]}"; fi
smoke || claim 9
