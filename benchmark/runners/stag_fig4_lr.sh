#!/usr/bin/env bash
# Stagnation Fig. 4: tuning the learning rate cannot make up for a poor outer step size. PPO-EWMA on Kinetix
# locomotion, COM in {8, 64, 256} x lr in {1e-4, 3e-4, 1e-3} x annealing on/off, 5 seeds (the paper's, App. A.1; 3 until 2026-11-28), 1000 iterations; as the
# paper, the analysis keeps the better of annealing on/off per COM and lr (--best-of). Values: this project's choice.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); ITER=4; COMS="1 16"; LRS="3e-4 1e-3"
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); ITER=1000; COMS="8 64 256"; LRS="1e-4 3e-4 1e-3"
fi
launch lr --script ppo_ewma_jax --seeds $SEEDS --iterations $ITER -- "${ENV[@]}" --ewma-com $COMS --learning-rate $LRS \
    --anneal-lr True False
analyze lr --best-of anneal-lr --x-flag learning-rate $(smoke && echo --tag charts/episodic_return)
