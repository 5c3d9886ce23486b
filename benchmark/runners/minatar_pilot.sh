#!/usr/bin/env bash
# Which MinAtar games claims 7-9 read at SCALE=small: a game is read when its runs leave the floor within the budget.
# The rule, fixed before any pilot run: at the data-collection runners' default config (ppo_ewma_jax.py as PPO, 8 envs
# x 128 steps, 4 epochs, MINATAR_PPO's flags with 2 x 128 ReLU units, 1M steps), each of 2 pilot seeds (101 and 102,
# which no claim uses) ends (its final return, the mean over the last 10% of steps) both at least 25% and at least 2
# return points above its own mean return over the second quarter of training: it is still improving over the second
# half, by more than a step of the score, so configs that learn faster or slower can still part by 1M steps. A seed
# whose gain cannot be had (no episode ended in a window: NaN) does not qualify. Candidates, in this order:
# Asterix-MinAtar, Freeway-MinAtar; SpaceInvaders-MinAtar stays (its published 8 x 128 runs gained 59-106%, 12-28
# points), and the first candidate that qualifies replaces Breakout-MinAtar (its published runs gained 1-8%, under 0.5
# points: its 4-epoch runs ended at 5.9-7.0 but one seed at 13.1). If neither qualifies, claims 7-9 read SpaceInvaders alone. The pick is
# printed as the line "pick: <games>" and written to $OUT_DIR/pick.txt; common.sh's MINATAR_GAMES is set to it and
# committed with the pilot's log before claims 7-9 rerun. atari10_nenvs.sh's grids serve claim 10 too, so claim 10
# reruns on the pick as well; the verdicts on Breakout and SpaceInvaders stay beside the new ones.
# The pilot is the same at every SCALE but smoke (a few iterations, to test the runner): about 10 minutes on 2 cores.
source "$(dirname "$0")/common.sh"
supports small gpu
CANDIDATES="Asterix-MinAtar Freeway-MinAtar"
BUDGET=$(smoke && echo 3072 || echo 1000000)
launch_defaults --workers 2 --seeds-per-process 2
launch pilot --script ppo_ewma_jax --env-ids $CANDIDATES --seeds 101 102 --fixed-budget --total-timesteps $BUDGET -- \
    "${MINATAR_PPO[@]}" --update-epochs 4 --num-envs 8 --num-steps 128
analyze pilot --tag charts/episodic_return
dry_run && exit 0
"$PY" - "$OUT_DIR/pilot/analysis" "$CANDIDATES" "$OUT_DIR/pick.txt" <<'PY'
import math
import sys
import pandas as pd
folder, candidates, pick_file = sys.argv[1], sys.argv[2].split(), sys.argv[3]
scores, runs = pd.read_csv(f"{folder}/scores.csv"), pd.read_csv(f"{folder}/runs.csv")
runs = runs[runs.tag == "charts/episodic_return"]
picked = None
for env in candidates:
    gains = []
    for _, row in scores[scores.env == env].sort_values("seed").iterrows():
        curve = runs[runs.run == row.run]
        x, v = curve.x.to_numpy(), curve.value.to_numpy()
        second = v[(x >= x.max() * 0.25) & (x < x.max() * 0.5)].mean()
        gains.append((row.final / second - 1 if second > 0 else math.nan, row.final - second))
        print(f"{env} seed {row.seed}: second quarter {second:.2f}, final {row.final:.2f}, gain {gains[-1][0]:+.0%}, "
              f"{gains[-1][1]:+.2f} points")
    qualifies = len(gains) == 2 and all(math.isfinite(r) and math.isfinite(d) and r >= 0.25 and d >= 2 for r, d in gains)
    print(f"{env}: {'qualifies' if qualifies else 'does not qualify'}")
    if qualifies and picked is None:
        picked = env
pick = " ".join(([picked] if picked else []) + ["SpaceInvaders-MinAtar"])
print("pick:", pick)
open(pick_file, "w").write(pick + "\n")
PY
