#!/usr/bin/env bash
# Data-collection Fig. 1a and 1b, PPO on Atari-10, 5 seeds, 100M steps per run (a fixed budget: a bigger batch
# means fewer updates).
#   fixed_batch (Fig. 1a): N_envs x N_RO = 1024 held fixed, from the default 8 x 128 to more envs with shorter rollouts;
#   grow (Fig. 1b): the batch grown from 8 x 128 through N_envs (16, 32, 64 envs at 128 steps) against through rollout
#   length (8 envs at 256, 512, 1024 steps); the N_envs arm also runs 1, 2 and 4 envs (this project's range).
# The x2/x4/x8 factors are this project's reading (the text lost them).
# 100M env steps per run is the data-collection paper's protocol; the rebuttal also compares across gradient steps (analyze --x-unit iterations).
# Claims 7 (Fig. 1a), 8 (Fig. 1b) and 10 (Fig. 3, the dynamics/ metrics of the grow grid) of benchmark/reproduce.md.
#
# SCALE=small (fixed before its runs; benchmark/claims.py holds the conditions): ppo_ewma_jax.py (PPO) on MinAtar
# SpaceInvaders (gymnax; common.sh's MINATAR_GAMES: Breakout, read until minatar_pilot.sh's rule, sat at a floor),
# seeds 11-15 (1-5 until the game changed, fixed before the runs on 11-15), 1M steps per run; CleanRL's Atari PPO settings (lr 2.5e-4 annealed,
# gamma 0.99, lambda 0.95, 4 epochs x 4 minibatches, clip 0.1, entropy 0.01) with an MLP of 2 x 128 ReLU units in
# place of the Nature CNN (ReLU as the paper's networks: a tanh unit is seldom dormant); fixed_batch 8 x 128, 16 x 64,
# 32 x 32; grow 8, 16, 32 envs x 128 and 8 envs x 256, 512. Its time on 2 CPU cores is not measured alone: 44.2 minutes
# from an empty store on seeds 11-15, beside other work (benchmark/results/cpu_2026-12-02/atari10_nenvs_small_seeds_11-15.log;
# fixed_batch launches one config at a time, one process, so it uses one core); an upper bound.
# Until 2026-11-28: 2 x 256 units, about 97 minutes on 2 CPU cores (AMD EPYC, 2026-11-27, partly beside other work; no
# log kept), over the hour a claim may take.
# Until 2026-11-27: 3 seeds, tanh units.
# SCALE=gpu (fixed 2026-11-27, before any run; until then ppo_atari_envpool.py on Phoenix and Qbert, 3 seeds, 1M
# steps): MinAtar Breakout and SpaceInvaders (SCALE=small reads SpaceInvaders alone), SCALE=small's configs and flags with 2 x 256 units, 10 seeds (in one process) and 10M steps a run. GPU time, one
# process at a time (common.sh's measured H200 rates), per game: fixed_batch 8 x 128 236 s, 16 x 64 203 s,
# 32 x 32 188 s; grow 16 x 128 118 s, 32 x 128 59 s, 8 x 256 150 s, 8 x 512 108 s; + 7 x 40 s fixed = 1,342 s;
# 2 games 0.75 GPU-hours (4 processes share the GPU: less, by an unmeasured factor).
source "$(dirname "$0")/common.sh"
supports small gpu
TAG=()
if smoke; then
    SCRIPT=ppo_atari_envpool; GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="2 4"; STEPS=16; BATCH=32
    ROLLOUTS="32 64"; BASE_ENVS=2; FLAGS=()
elif reduced; then
    SCRIPT=ppo_ewma_jax; GAMES="$MINATAR_GAMES"; NENVS="8 16 32"; STEPS=128; BATCH=1024; ROLLOUTS="256 512"
    BASE_ENVS=8; TAG=(--tag charts/episodic_return); FLAGS=("${MINATAR_PPO[@]}" --update-epochs 4)
    if [[ "$SCALE" == small ]]; then SEEDS="11 12 13 14 15"; BUDGET=1000000
    else SEEDS="$MINATAR_GPU_SEEDS"; BUDGET=$MINATAR_GPU_BUDGET; launch_defaults $MINATAR_GPU_FLAGS; fi
else
    SCRIPT=ppo_atari_envpool; GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="1 2 4 8 16 32 64"; STEPS=128
    BATCH=1024; ROLLOUTS="256 512 1024"; BASE_ENVS=8; FLAGS=()
fi
COMMON=(--script $SCRIPT --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
# PART: the grids to run, fixed_batch (claim 7), grow (claims 8 and 10) or all (default); they share the 8 x 128 runs
parts fixed_batch grow
if part fixed_batch; then
    for n in $NENVS; do
        launch fixed_batch "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs "$n" --num-steps $((BATCH / n))
    done
    analyze fixed_batch --x-flag num-envs "${TAG[@]}"
    if reduced; then analyze_each_env fixed_batch "$GAMES" --x-flag num-envs "${TAG[@]}"; fi
    smoke || claim 7
fi
if part grow; then
    launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $NENVS --num-steps $STEPS
    launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $BASE_ENVS --num-steps $ROLLOUTS
    analyze grow --x-flag num-envs "${TAG[@]}"
    if reduced; then analyze_each_env grow "$GAMES" --x-flag num-envs "${TAG[@]}"; fi
    smoke || { claim 8; claim 10; }
fi
