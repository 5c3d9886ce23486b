#!/usr/bin/env bash
# Stagnation Fig. 9: the scaling recipes (§5, App. D) from the base config (2048 envs, 32 minibatches,
# lr 3e-4) to 2x-16x the envs, PPO on Kinetix locomotion (ppo_ewma_jax.py), 5 seeds, solve rate; the base runs once.
# hybrid (b = 2) starts at 2x: a = k / b must be a whole number of times the base minibatches.
# Claim 5 of benchmark/reproduce.md. SCALE=small (fixed 2026-11-27, before any run; its budget 2026-11-28, below):
# SpaceInvaders-MinAtar at Table 2 (STAG_SMALL's hyper-parameters, 8 epochs), 5 seeds, every run 2^19 = 524,288
# environment steps (the base's 512 iterations, the scaled runs' 32; equal steps: a scaled
# run does k times fewer iterations, and bigger-minibatch k times fewer minibatch steps), base 8 envs x 128 steps
# with 8 minibatches of 128 (Table 2: 32 of 16,384; 8 keep the base's and more-minibatches' 32.8k minibatch steps a
# seed near com_eps.sh's 31k), scaled k = 16 to 128 envs by more-minibatches (128 minibatches of 128) and by
# bigger-minibatch (8 of 2,048); the base runs once. 35.7 minutes on 2 workers, alone (Intel Xeon, 2026-11-28).
# Until 2026-11-28: 1M steps a run (the base's 976 iterations),
# about 85 minutes on 2 workers (AMD EPYC, 2026-11-27, about 60 of them beside other work; no log kept), over the hour;
# the budget was halved (fixed 2026-11-28, before its runs) to fit it, and the seeds packed 3 + 2 (in place of 5 in one
# process, which left the base's grid, the longest, on one of the two workers). Until 2026-11-27: 3 seeds, 100 iterations each (the scaled runs saw 4x the samples), base 32
# envs, k = 4, the base run under both recipes. SCALE=gpu (fixed 2026-11-27 later, before any run; until then
# 2026-11-25's unsized 1024 -> 4096 envs, 80 iterations, 3 seeds): Kinetix locomotion at Table 2, 5 seeds, every run 2^29 =
# 536,870,912 steps (the base's 1,024 iterations), base 2048 envs x 256 steps with 32 minibatches, k = 16 to 32,768
# envs (64 iterations) by more-minibatches (512 of 16,384) and bigger-minibatch (32 of 262,144). GPU time on an H200
# (common.sh's rates): the base as one 5-seed process at 723k steps/s, 3,713 s + 52 s; each scaled run alone (8.4M
# transitions an iteration) at 16,384 envs' 886k steps/s, 606 s + 58 s, x 5 seeds x 2 recipes = 6,640 s; 2.9
# GPU-hours. Unmeasured: the rate and the memory at 32,768 envs (the rollout, 8.4M transitions, on the device).
source "$(dirname "$0")/common.sh"
supports small gpu
RECIPES="more-minibatches bigger-minibatch bigger-minibatch-sqrt-lr"; BASE_PACK=()
if smoke; then
    SEEDS="1"; ENV=(--env-id CartPole-v1); BASE=16; NENVS="32 64"; HYBRID="32 64"; BUDGET=(--iterations 4); STEPS=16
    MB=4
elif [[ "$SCALE" == small ]]; then
    SEEDS="1 2 3 4 5"; ENV=(--env-id SpaceInvaders-MinAtar); BASE=8; NENVS="128"; HYBRID=""; STEPS=128; MB=8
    RECIPES="more-minibatches bigger-minibatch"; BUDGET=(--fixed-budget --total-timesteps 524288)
    launch_defaults --workers 2 --seeds-per-process 3  # 5 seeds as 3 + 2: the base's lone grid keeps both workers busy
elif [[ "$SCALE" == gpu ]]; then
    SEEDS="$STAG_GPU_SEEDS"; ENV=(--env-id locomotion); BASE=2048; NENVS="32768"; HYBRID=""; STEPS=256; MB=32
    RECIPES="more-minibatches bigger-minibatch"; BUDGET=(--fixed-budget --total-timesteps 536870912)
    BASE_PACK=($STAG_GPU_FLAGS)  # the base's 5 seeds in one process; a scaled run's batch is a process alone
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); BASE=2048; NENVS="4096 8192 16384 32768"; HYBRID="$NENVS"
    BUDGET=(--iterations 1000); STEPS=256; MB=32
fi
COMMON=(--script ppo_ewma_jax --seeds $SEEDS "${BUDGET[@]}")
SHARED=("${ENV[@]}" --num-steps $STEPS --base-num-envs $BASE --base-num-minibatches $MB)
# the base runs once: at N_envs = base every recipe is the base config (claims.py reads it as bigger-minibatch's)
launch recipes "${COMMON[@]}" "${BASE_PACK[@]}" -- "${SHARED[@]}" --num-envs $BASE --scaling-recipe bigger-minibatch
launch recipes "${COMMON[@]}" -- "${SHARED[@]}" --num-envs $NENVS --scaling-recipe $RECIPES
if [[ -n "$HYBRID" ]]; then
    launch recipes "${COMMON[@]}" -- "${SHARED[@]}" --num-envs $HYBRID --scaling-recipe hybrid --hybrid-minibatch-factor 2
fi
analyze recipes --x-flag num-envs $(return_tag)
if reduced; then claim 5; fi
