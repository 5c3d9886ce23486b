#!/usr/bin/env bash
# Stagnation Fig. 7: larger batches tolerate weaker regularisation. Kinetix locomotion with 32 minibatches at
# N_envs in {512, 2048, 8192} (minibatch size 4096, 16384, 65536), against (a) PPO-EWMA's COM {8, 64, 256} and
# (b) standard PPO's epsilon {0.2, 0.6}; 5 seeds (the paper's, App. A.1; 3 until 2026-11-28), 1000 iterations; x-axis: policy updates, as the paper's.
# Values: this project's choice.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1"; ENV=(--env-id CartPole-v1 --num-steps 16 --num-minibatches 4); ITER=4; NENVS="8 32"; COMS="1 16"; EPS="0.2 0.6"
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); ITER=1000; NENVS="512 2048 8192"; COMS="8 64 256"; EPS="0.2 0.6"
fi
COMMON=(--script ppo_ewma_jax --seeds $SEEDS --iterations $ITER)
launch minibatch_com "${COMMON[@]}" -- "${ENV[@]}" --num-envs $NENVS --ewma-com $COMS
launch minibatch_eps "${COMMON[@]}" -- "${ENV[@]}" --num-envs $NENVS --clip-coef $EPS
for grid in minibatch_com minibatch_eps; do
    analyze $grid --x-flag num-envs --x-unit iterations $(smoke && echo --tag charts/episodic_return)
done
