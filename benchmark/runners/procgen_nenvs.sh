#!/usr/bin/env bash
# Data-collection §6.2, Fig. 7: the N_envs study of Fig. 1 repeated on two Procgen games with ppo_procgen_envpool.py
# (Table 1's Procgen column, CleanRL's ppo_procgen defaults: 64 envs x 256 steps, 8 minibatches x 3 epochs), the
# easy distribution, unlimited levels (no evaluation: with unlimited training levels there are none held out), 5 seeds
# (App. A), 25M steps per run (a fixed budget: a bigger batch means fewer updates).
#   fixed_batch: N_envs x N_RO = 16384 held fixed, from 32 x 512 through the default 64 x 256 to 256 x 64;
#   grow: the batch grown from 64 x 256 through N_envs (128, 256 envs at 256 steps) against through rollout length
#   (64 envs at 512, 1024 steps).
# The games, Bigfish and Starpilot, and the x2/x4 factors are this project's choice (the text names neither). No
# SCALE=small: the IMPALA CNN on 2 CPU cores is far too slow for 25M-step runs (its CPU rate is not measured with a raw output kept);
# SCALE=gpu is not sized either (no GPU throughput measured yet).
source "$(dirname "$0")/common.sh"
if smoke; then
    GAMES="StarpilotEasy-v0"; SEEDS="1 2"; BUDGET=1024; FIXED="2 4"; BASE=2; MORE_ENVS="4"; STEPS=32; LONGER="64"
    FLAGS=(--num-minibatches 2 --update-epochs 1 --dynamics-batch 32 --eval-every 0)
else
    GAMES="BigfishEasy-v0 StarpilotEasy-v0"; SEEDS="1 2 3 4 5"; BUDGET=25000000; FIXED="32 64 128 256"; BASE=64
    MORE_ENVS="128 256"; STEPS=256; LONGER="512 1024"; FLAGS=(--eval-every 0)
fi
COMMON=(--script ppo_procgen_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
for n in $FIXED; do
    launch fixed_batch "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs "$n" --num-steps $((BASE * STEPS / n))
done
launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $BASE $MORE_ENVS --num-steps $STEPS
launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $BASE --num-steps $LONGER
analyze fixed_batch --x-flag num-envs
analyze grow --x-flag num-envs
analyze_each_env fixed_batch "$GAMES" --x-flag num-envs
analyze_each_env grow "$GAMES" --x-flag num-envs
