#!/usr/bin/env bash
# Stagnation Fig. 6: update epochs against regularisation on Kinetix locomotion, 5 seeds (the paper's, App. A.1; 3 until 2026-11-28), 1000 iterations:
# (a) PPO-EWMA, epochs {2, 4, 8, 16} x COM {4, 16, 64, 256}; (b) standard PPO, epochs x epsilon {0.1, 0.2, 0.4}.
# Values: this project's choice (the figure's exact grid is not in the text). The paper's epsilon = 0 (Fig. 6b, left) cannot
# run here: ppo_ewma_jax.py requires --clip-coef > 0.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); ITER=4; EPOCHS="1 4"
    COMS="1 16"; EPS="0.1 0.4"
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); ITER=1000; EPOCHS="2 4 8 16"; COMS="4 16 64 256"; EPS="0.1 0.2 0.4"
fi
COMMON=(--script ppo_ewma_jax --seeds $SEEDS --iterations $ITER)
launch epochs_com "${COMMON[@]}" -- "${ENV[@]}" --update-epochs $EPOCHS --ewma-com $COMS
launch epochs_eps "${COMMON[@]}" -- "${ENV[@]}" --update-epochs $EPOCHS --clip-coef $EPS
analyze epochs_com --x-flag update-epochs --heatmap ewma-com update-epochs $(smoke && echo --tag charts/episodic_return)
analyze epochs_eps --x-flag update-epochs --heatmap clip-coef update-epochs $(smoke && echo --tag charts/episodic_return)
