#!/usr/bin/env bash
# Stagnation Fig. 10 (§5): Singla et al. (2024) train PPO on Isaac Gym with 24,576 envs and a minibatch of 4 x N_envs
# = 98,304; the paper's recipe (keep the minibatch size and learning rate, add minibatches) puts it back to Isaac Gym's
# default 16,384 and PPO improves. Isaac Gym does not install from PyPI; here Brax's Ant and Humanoid with
# ppo_ewma_brax.py's standard PPO and PureJaxRL's Brax recipe otherwise (lr 3e-4, 4 epochs, normalisation;
# docs/ppo_ewma_brax.md), 16 steps per rollout, 5 seeds (the paper's, App. A.1; 3 until 2026-11-28), 2e9 steps per run (a fixed budget), at 24,576 envs and at
# 6,144 (Fig. 10's "more amenable to additional parallelisation": the gain should grow with N_envs).
#   bigger_minibatch (the recipe off, Singla et al.'s rule): minibatch 4 x N_envs (24,576 and 98,304: 4 minibatches);
#   keep_minibatch (the recipe on): minibatch 16,384 (6 and 24 minibatches).
# The tasks, rollout length, budget and the second N_envs are this project's choice (the paper's tasks are SAPG's
# dexterous-manipulation ones). No SCALE=small (about 400k transitions per iteration); SCALE=gpu is not sized yet.
source "$(dirname "$0")/common.sh"
if smoke; then
    ENVS="inverted_pendulum"; SEEDS="1"; NENVS="8 32"; STEPS=4; KEEP=16; ITER=(--iterations 4)
    FLAGS=(--update-epochs 1 --dynamics-batch 16)
else
    ENVS="ant humanoid"; SEEDS="1 2 3 4 5"; NENVS="6144 24576"; STEPS=16; KEEP=16384
    ITER=(--fixed-budget --total-timesteps 2000000000); FLAGS=()
fi
# a checkpoint every 1000 iterations (a checkpoint holds every env's Brax state: a few per run, not 50)
COMMON=(--save-every 1000 --script ppo_ewma_brax --env-ids $ENVS --seeds $SEEDS "${ITER[@]}")
for n in $NENVS; do
    launch bigger_minibatch "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs "$n" --num-steps $STEPS --minibatch-size $((4 * n))
    launch keep_minibatch "${COMMON[@]}" -- "${FLAGS[@]}" --num-envs "$n" --num-steps $STEPS --minibatch-size $KEEP
done
# Brax runs have no solve rate: the score is the training episodes' return
compare fig10 "bigger_minibatch keep_minibatch" --x-flag num-envs --tag charts/episodic_return
for env in $ENVS; do
    compare "fig10_$env" "bigger_minibatch keep_minibatch" --x-flag num-envs --envs "$env" --tag charts/episodic_return
done
