#!/usr/bin/env bash
# Stagnation Fig. 5b: standard PPO's clip epsilon on Kinetix locomotion (Table 2 defaults), 5 seeds, 1000
# iterations; too large an epsilon plateaus early. The epsilon values are this project's choice.
# Claim 2 of benchmark/reproduce.md, with com_eps.sh's grid (run that runner first, with the same OUT_DIR's parent:
# claim 2 reads grids/com_eps and grids/stag_fig5b_eps, their returns and their policies' entropy). SCALE=small: STAG_SMALL (common.sh), seeds 11-15 (6-10 until the plateau premise became claims.py's stays_below, fixed before the reruns on 11-15) (1-5
# until 2026-11-27: a rerun on fresh seeds), epsilon 0.2 and 0.8 (until 2026-11-29 also 0.1, which no condition
# reads; its time with it has no log kept; on the Intel Xeon of 2026-11-29 com_eps.sh's three configs took 68.7, so
# this one's three would be over the hour there too). Without
# it about 44 minutes (com_eps.sh's per-config process times on that Intel Xeon: an estimate, not timed). The runner
# packs 5 seeds as 3 + 2 since 2026-11-29 (the launcher's default, 5 to a process, leaves a worker idle). SCALE=gpu:
# Kinetix locomotion at Table 2, seeds 1-5 in one process, epsilon 0.1, 0.2, 0.8, 1000 iterations (524M steps a run;
# fixed 2026-11-27, before any run); 3 configs x 61 GPU-minutes = 3.1 GPU-hours on an H200 (common.sh's measured rates).
source "$(dirname "$0")/common.sh"
supports small gpu
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); ITER=4; EPS="0.1 0.4"
elif [[ "$SCALE" == small ]]; then
    SEEDS="11 12 13 14 15"; ENV=("${STAG_SMALL[@]}"); ITER=$STAG_SMALL_ITER; EPS="0.2 0.8"
    launch_defaults --workers 2 --seeds-per-process 3  # 5 seeds as 3 + 2
elif [[ "$SCALE" == gpu ]]; then
    SEEDS="$STAG_GPU_SEEDS"; ENV=(--env-id locomotion); ITER=$STAG_GPU_ITER; EPS="0.1 0.2 0.8"
    launch_defaults $STAG_GPU_FLAGS
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); ITER=1000; EPS="0.05 0.1 0.2 0.4 0.8"
fi
launch eps --script ppo_ewma_jax --seeds $SEEDS --iterations $ITER -- "${ENV[@]}" --clip-coef $EPS
analyze eps --x-flag clip-coef $(return_tag)
if reduced; then
    # claim 2's premise: the widest epsilon's policy keeps its entropy (a plateau, not a collapse)
    analyze eps --x-flag clip-coef --tag losses/entropy --no-dynamics --output "$OUT_DIR/eps/analysis_entropy"
    claim 2
fi
