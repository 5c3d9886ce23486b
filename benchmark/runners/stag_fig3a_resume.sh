#!/usr/bin/env bash
# Stagnation Fig. 3a: train PPO-EWMA with a low COM until it plateaus (the plateau grid, checkpointed at its last
# iteration), then resume each seed's checkpoint with each of several COMs for as many iterations again (the resume
# grid: one curve per new COM, the old COM included as the control). Kinetix locomotion, 5 seeds; the COMs and
# lengths are this project's choice.
source "$(dirname "$0")/common.sh"
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); PLATEAU=3; TOTAL=6
    LOW=1; COMS="1 16"
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); PLATEAU=500; TOTAL=1000; LOW=4; COMS="4 16 64 256"
fi
WAIT=1 launch plateau --script ppo_ewma_jax --seeds $SEEDS --iterations $PLATEAU --save-every $PLATEAU -- "${ENV[@]}" --ewma-com $LOW
for seed in $SEEDS; do
    ckpt=$(checkpoint_of plateau --script ppo_ewma_jax --seeds "$seed" --iterations $PLATEAU -- "${ENV[@]}" --ewma-com $LOW)
    if [[ "$ckpt" == - || -z "$ckpt" ]]; then
        dry_run && echo "(after the plateau grid) resume seed $seed with --ewma-com $COMS from its checkpoint" && continue
        echo "runner: no checkpoint of the plateau run of seed $seed; its resumes are skipped" >&2; FAILED=1; continue
    fi
    launch resume --script ppo_ewma_jax --seeds "$seed" --iterations $TOTAL -- "${ENV[@]}" --ewma-com $COMS --resume "$(realpath "$ckpt")"
done
analyze plateau $(smoke && echo --tag charts/episodic_return)
analyze resume --x-flag ewma-com $(smoke && echo --tag charts/episodic_return)
