#!/usr/bin/env bash
# Stagnation Fig. 5a and 12b: PPO-EWMA's centre of mass (COM) against the clip epsilon on Kinetix locomotion
# (ppo_ewma_jax.py at its Table 2 defaults), 3 seeds, 1000 iterations (the COM and epsilon values: this project's
# choice); the analysis draws the COM x epsilon heatmap and the final solve rate against the COM.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); ITER=4; COMS="1 4"; EPS="0.1 0.2"
else
    SEEDS="1 2 3"; ENV=(--env-id locomotion); ITER=1000; COMS="1 4 16 64 256"; EPS="0.05 0.1 0.2 0.3 0.5"
fi
launch com_eps --script ppo_ewma_jax --seeds $SEEDS --iterations $ITER -- "${ENV[@]}" --ewma-com $COMS --clip-coef $EPS
analyze com_eps --heatmap ewma-com clip-coef --x-flag ewma-com $(smoke && echo --tag charts/episodic_return)
