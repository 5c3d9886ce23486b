#!/usr/bin/env bash
# Stagnation Fig. 8: the Data-to-Divergence Ratio against the best solve rate, for several compute budgets (one
# colour per budget and config in the plot), over data per update (N_envs) and update sizes (epochs x minibatches);
# PPO on Kinetix locomotion, 5 seeds (the paper's, App. A.1; 3 until 2026-11-28). The grid and budgets are this project's choice.
# Claim 6 of benchmark/reproduce.md (claims.py: the score rises with the DDR at its low end and falls at its high end,
# and the best config moves to a higher DDR with the budget). SCALE=small (fixed 2026-11-27, before any run):
# SpaceInvaders-MinAtar at Table 2 (STAG_SMALL's task: 64 envs x 128 steps, 8 epochs x 32 minibatches held), the DDR
# varied apart from N_envs through PPO's clip epsilon 0.05, 0.2, 0.8 (an outer-loop step size, stagnation Table 1;
# chosen to reach both ends: claim 2's earlier runs found epsilon 0.8 plateau low), budgets 2^17 = 131,072 and
# 2^19 = 524,288 steps (16 and 64 iterations; fixed 2026-11-28, before their runs), 5 seeds, packed 3 + 2. 35.1 minutes
# on 2 workers, alone (Intel Xeon, 2026-11-28).
# Until 2026-11-28: budgets 200k and 800k, 76 minutes on 2 workers (AMD EPYC, 2026-11-27, packs of 5, partly beside
# tests) and 67 (Intel Xeon, 2026-11-28, packs of 3 + 2, partly beside tests), with identical results, not shown
# within the hour a claim may take; the budgets were cut to 0.66 of the steps to fit it. Until 2026-11-27: N_envs 16, 64 x epochs 2, 8 x minibatches 8, 32, budgets 250k and 1M, 2 seeds.
# SCALE=gpu (fixed 2026-11-27 later, before any run; until then 2026-11-25's unsized N_envs 512 and 2048 x epochs 2, 8 x
# minibatches 8, 32, budgets 10M and 40M, 2 seeds): SCALE=small's design on Kinetix locomotion at Table 2 (2048 envs x
# 256 steps, 8 epochs x 32 minibatches held), clip epsilon 0.05, 0.2, 0.8, budgets 2^27 and 2^29 steps (256 and 1,024
# iterations), 5 seeds in one process, the score the evaluation's solve rate (every 10 iterations). GPU time on an
# H200 (common.sh's rates): per epsilon 5 x (2^27 + 2^29) steps at 723k steps/s = 4,641 s + 2 x 52 s; 3 x 4,745 s =
# 3.95 GPU-hours, evaluation not costed.
source "$(dirname "$0")/common.sh"
supports small gpu
CLIPS="0.2"; XFLAG=num-envs  # PPO's clip epsilon (Table 2's 0.2) and the flag the analysis groups by
if smoke; then
    SEEDS="1"; ENV=(--env-id CartPole-v1 --num-steps 16); NENVS="8"; EPOCHS="1 4"; MB="2 4"; BUDGETS="1024 2048"
elif [[ "$SCALE" == small ]]; then
    SEEDS="1 2 3 4 5"; ENV=(--env-id SpaceInvaders-MinAtar --num-steps 128); NENVS="64"; EPOCHS="8"; MB="32"
    CLIPS="0.05 0.2 0.8"; XFLAG=clip-coef; BUDGETS="131072 524288"
    launch_defaults --workers 2 --seeds-per-process 3  # 5 seeds as 3 + 2: each budget's 6 processes balance 2 workers
elif [[ "$SCALE" == gpu ]]; then
    SEEDS="$STAG_GPU_SEEDS"; ENV=(--env-id locomotion --num-steps 256); NENVS="2048"; EPOCHS="8"; MB="32"
    CLIPS="0.05 0.2 0.8"; XFLAG=clip-coef; BUDGETS="134217728 536870912"
    launch_defaults $STAG_GPU_FLAGS
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); NENVS="512 2048 8192"; EPOCHS="2 8 32"; MB="8 32 128"
    BUDGETS="100000000 500000000 2000000000"
fi
for budget in $BUDGETS; do
    launch ddr --script ppo_ewma_jax --seeds $SEEDS --fixed-budget --total-timesteps $budget -- "${ENV[@]}" \
        --num-envs $NENVS --update-epochs $EPOCHS --num-minibatches $MB --clip-coef $CLIPS
done
analyze ddr --ddr --x-flag $XFLAG $(return_tag)
if reduced; then claim 6; fi
