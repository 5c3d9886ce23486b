#!/usr/bin/env bash
# The data-collection paper's rebuttal (its Figs. 2, 3 and 5): the N_envs study of Fig. 1 repeated on three Isaac Gym
# tasks. Isaac Gym does not install from PyPI; here Brax's Ant, Humanoid and HalfCheetah (the rebuttal names none of its
# tasks) with ppo_ewma_brax.py's standard PPO and PureJaxRL's Brax recipe (2048 envs x 10 steps, 32 minibatches x 4
# epochs, observation and return normalisation; docs/ppo_ewma_brax.md), 5 seeds, 50M steps per run (PureJaxRL's
# budget; a fixed budget: a bigger batch means fewer updates).
#   fixed_batch: N_envs x N_RO = 20480 held fixed, from 512 x 40 through the default 2048 x 10 to 4096 x 5;
#   grow: the batch grown from 2048 x 10 through N_envs (4096, 8192 envs at 10 steps) against through rollout length
#   (2048 envs at 20, 40 steps).
# Every episode starts from a new random state (--brax-fresh-starts), as Isaac Gym re-randomises at every reset: with
# Brax's own auto-reset each env restarts from its first state, so the number of distinct start states would be
# N_envs and grow with it by construction. The tasks, sizes and x2/x4 factors are this project's choice. No SCALE=small: Ant runs at a few thousand steps/s on
# 2 CPU cores (docs/ppo_ewma_brax.md), hours per 50M-step run; SCALE=gpu is not sized (no GPU throughput of Brax measured yet).
source "$(dirname "$0")/common.sh"
if smoke; then
    ENVS="inverted_pendulum"; SEEDS="1 2"; BUDGET=1024; FIXED="4 8"; BASE=4; MORE_ENVS="8"; STEPS=16; LONGER="32"
    FLAGS=(--brax-fresh-starts --num-minibatches 2 --update-epochs 1 --dynamics-batch 32)
else
    ENVS="ant humanoid halfcheetah"; SEEDS="1 2 3 4 5"; BUDGET=50000000; FIXED="512 1024 2048 4096"; BASE=2048
    MORE_ENVS="4096 8192"; STEPS=10; LONGER="20 40"; FLAGS=(--brax-fresh-starts)
fi
# a checkpoint every 500 iterations (a checkpoint holds every env's Brax state: a few per run, not 50)
COMMON=(--save-every 500 --script ppo_ewma_brax --env-ids $ENVS --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET)
for n in $FIXED; do
    launch fixed_batch "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs "$n" --num-steps $((BASE * STEPS / n))
done
launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $BASE $MORE_ENVS --num-steps $STEPS
launch grow "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs $BASE --num-steps $LONGER
for grid in fixed_batch grow; do  # Brax runs have no solve rate: the score is the training episodes' return
    analyze $grid --x-flag num-envs --tag charts/episodic_return
    analyze_each_env $grid "$ENVS" --x-flag num-envs --tag charts/episodic_return
done
