#!/usr/bin/env bash
# Stagnation Fig. 1b / 2a (step sizes 0.001-0.3) and Fig. 3b (switching the step size mid-run) of the
# stochastic-optimisation analogue: one noisy run a seed, so the figures carry a 95% CI over seeds; each step size is
# its own curve (the script's sub-runs). Claim 1 of benchmark/reproduce.md; its conditions are fixed in
# benchmark/claims.py (claim_1). SCALE=small and gpu are the paper's size with 10 seeds, 11-20 (a run takes seconds on
# a CPU; seeds 1-10 until claim 1's update-norm condition was removed after they had been read, then 11-20, fixed
# before their runs; 5 seeds until 2026-11-28); SCALE=paper the paper's 5 seeds; SMOKE 5 seeds of 200 steps.
source "$(dirname "$0")/common.sh"
supports small gpu
STEPS=2000; SWITCH=1000; SEEDS="1 2 3 4 5"
if smoke; then STEPS=200; SWITCH=100; elif reduced; then SEEDS="$(seq -s ' ' 11 20)"; fi
launch step_sizes --script noisy_sgd --seeds $SEEDS -- --num-steps $STEPS --num-seeds 1
launch switch --script noisy_sgd --seeds $SEEDS -- --num-steps $STEPS --num-seeds 1 --switch-step $SWITCH \
    --switch-step-size 0.001 0.3
analyze step_sizes --points $((STEPS + 1))
analyze step_sizes --points $((STEPS + 1)) --tag charts/update_norm --output "$OUT_DIR/step_sizes/analysis_update_norm"
analyze switch --points $((STEPS + 1))
claim 1
