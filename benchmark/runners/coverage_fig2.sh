#!/usr/bin/env bash
# Data-collection Fig. 2 (and Fig. 9's coverage): the coverage metric of App. B.7 for PPO on Atari at a fixed batch,
# N_envs x N_RO = 1024 from 8 envs x 128 steps to 64 envs x 16 steps, 5 seeds, 100M steps per run (the data-collection paper's protocol).
# Every run saves states of its batches (ppo_atari_envpool.py's defaults: the 1,024 states of the dynamics/ sample,
# about 20 times a run); `analyze.py --coverage` projects the states of all runs of a game with one UMAP, counts the
# cells of a 32 x 32 grid each run has visited so far (and each batch alone), and draws Fig. 2 per game (the
# projection per config coloured by training progress, and coverage over training). The paper's games and grid size
# did not survive in its text: this runner takes Atari-10 (the runs are those of atari10_nenvs.sh's fixed_batch grid,
# shared through the run store: runs finished before the states were saved have none, and the report counts them)
# and G = 32 (analyze.py's default). The paper's expectation: more envs, more coverage.
# SCALE=gpu (fixed before any run): Phoenix and Qbert, 3 seeds, 1M steps per run, 8, 16 and 32 envs (not re-sized;
# until 2026-11-27 they were atari10_nenvs.sh's gpu fixed_batch runs, which are MinAtar runs since). No SCALE=small settings yet.
source "$(dirname "$0")/common.sh"
supports gpu
if smoke; then
    GAMES="Breakout-v5"; SEEDS="1 2"; BUDGET=2048; NENVS="2 4"; BATCH=32; FLAGS=(--dynamics-every 4 --dynamics-batch 32)
elif [[ "$SCALE" == gpu ]]; then
    GAMES="Phoenix-v5 Qbert-v5"; SEEDS="1 2 3"; BUDGET=1000000; NENVS="8 16 32"; BATCH=1024; FLAGS=()
    [[ -n "${LAUNCH_FLAGS:-}" ]] || LAUNCH_FLAGS="--workers 4"
else
    GAMES="$ATARI10"; SEEDS="1 2 3 4 5"; BUDGET=100000000; NENVS="8 16 32 64"; BATCH=1024; FLAGS=()
fi
for n in $NENVS; do
    launch fixed_batch --script ppo_atari_envpool --env-ids $GAMES --seeds $SEEDS --fixed-budget --total-timesteps $BUDGET \
        -- "${FLAGS[@]}" --num-envs "$n" --num-steps $((BATCH / n))
done
analyze fixed_batch --x-flag num-envs --coverage
