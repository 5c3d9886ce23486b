#!/usr/bin/env bash
# Stagnation Fig. 3a: train PPO-EWMA with a starting COM for 500 iterations (the plateau_<COM> grids, checkpointed
# at their last iteration), then resume each seed's checkpoint with each of several COMs for as many iterations again
# (the resume_<COM> grids: raising and lowering the COM, the starting COM as the control); compared in one analysis
# (resume_all: a curve per starting COM x new COM, as the paper's legend "COM (starting COM)"). Kinetix locomotion,
# 5 seeds; the COMs and lengths are this project's choice.
# Claim 4 of benchmark/reproduce.md. SCALE=small: STAG_SMALL (common.sh), seeds 11-15 (6-10 until the plateau premise became claims.py's stays_below, fixed before the reruns on 11-15), COM 8 for 122 iterations (1M
# steps; the plateau is com_eps.sh's COM-8 runs, shared through the store), then resumed with COM 8 (the control) and
# 256 to 244 iterations (PART=raise); and, since 2026-11-28 (fixed before any of its runs), the lowering arm
# (PART=lower): com_eps.sh's COM-256 runs, shared as the plateau_256 grid, resumed with COM 8 to 244 iterations (no
# COM-256 control: no condition reads it). Each PART is within the hour after com_eps.sh: PART=raise 46.3 minutes,
# PART=lower 25.7 (Intel Xeon, 2026-11-29, alone; benchmark/results/cpu_2026-11-29/); PART=all runs both. Claim 4's
# verdict needs PART=raise's grids (the claim is the raising one); PART=lower adds its condition 3. Until 2026-11-27: seeds 1-3 from COM 4, whose policy collapsed; COM 8 was chosen then, before any run of this claim at it,
# after claim 3's runs had found no COM-8 seed collapsed at the end (three recovered from a collapse mid-run). 34.5
# minutes after com_eps.sh (two packs of 5 seeds x 1M steps, 2.45k steps/s each, AMD EPYC, 2026-11-27), 68 without
# it. SCALE=gpu (fixed 2026-11-27, before any run): Kinetix locomotion at Table 2, 5 seeds, COM 8 and COM 256 for 500
# iterations each (seeds 1-5 in one process), the seeds resumed as one process with COM 8 and 256 to 1000 (both arms of Fig. 3a: raising and lowering);
# 6 packs (2 plateaus, 4 resumes) x 31.1 GPU-minutes (500 x 5 x 524,288 steps at 723k steps/s + 52 s) = 3.1
# GPU-hours on an H200 (common.sh's measured rates).
source "$(dirname "$0")/common.sh"
supports small gpu
LOWERED=""
if smoke; then
    SEEDS="1 2"; ENV=(--env-id CartPole-v1 --num-envs 16 --num-steps 16 --num-minibatches 4); PLATEAU=3; TOTAL=6
    STARTS="1"; COMS="1 16"
elif [[ "$SCALE" == small ]]; then
    SEEDS="11 12 13 14 15"; ENV=("${STAG_SMALL[@]}"); PLATEAU=$STAG_SMALL_ITER; TOTAL=$((2 * STAG_SMALL_ITER)); STARTS="8 256"
    COMS="8 256"; LOWERED="8"
elif [[ "$SCALE" == gpu ]]; then
    SEEDS="$STAG_GPU_SEEDS"; ENV=(--env-id locomotion); PLATEAU=$((STAG_GPU_ITER / 2)); TOTAL=$STAG_GPU_ITER
    STARTS="8 256"; COMS="8 256"; launch_defaults $STAG_GPU_FLAGS
else
    SEEDS="1 2 3 4 5"; ENV=(--env-id locomotion); PLATEAU=500; TOTAL=1000; STARTS="4 256"; COMS="4 16 64 256"
fi
# PART: raise (the lowest start, raised: claim 4's conditions 1-2), lower (the highest start, lowered: condition 3) or
# all (default); LOWERED: the COMs the highest start resumes with where not $COMS (SCALE=small: no unread control)
parts raise lower; LOWERED="${LOWERED:-$COMS}"
FIRST="${STARTS%% *}"; LAST="${STARTS##* }"
if [[ "$PART" == lower && "$LAST" == "$FIRST" ]]; then
    echo "runner: PART=lower needs a second starting COM to lower from (SCALE=$SCALE has one: $STARTS)" >&2; exit 2
fi
for start in $STARTS; do
    { [[ "$start" == "$FIRST" ]] && part raise; } || { [[ "$start" == "$LAST" ]] && part lower; } || continue
    coms="$COMS"; [[ "$start" == "$LAST" && "$LAST" != "$FIRST" ]] && coms="$LOWERED"
    WAIT=1 launch "plateau_$start" --script ppo_ewma_jax --seeds $SEEDS --iterations $PLATEAU --save-every $PLATEAU \
        -- "${ENV[@]}" --ewma-com "$start"
    # per seed, in the order of $SEEDS (the launcher's run order): its newest checkpoint and the seeds it holds; a
    # packed plateau (--num-seeds) left one checkpoint of all its seeds in its first seed's run, and those seeds
    # resume from it as one pack again
    mapfile -t ckpts < <(checkpoint_of "plateau_$start" --script ppo_ewma_jax --seeds $SEEDS --iterations $PLATEAU -- \
        "${ENV[@]}" --ewma-com "$start")
    seeds=($SEEDS); i=0; packs=()  # each checkpoint: the index of its first seed and the seeds it holds
    while (( i < ${#seeds[@]} )); do
        IFS=$'\t' read -r ckpt held <<< "${ckpts[i]:-$'-\t0'}"
        if [[ "$ckpt" == - ]]; then
            dry_run && echo "(after plateau_$start) resume seed ${seeds[i]} with --ewma-com $coms from its checkpoint"
            dry_run || { echo "runner: no checkpoint of the plateau_$start run of seed ${seeds[i]}; its resumes are skipped" >&2
                         FAILED=1; }
            i=$((i + 1)); continue
        fi
        packs+=("$i $held $(realpath "$ckpt")"); i=$((i + held))
    done
    # a launch waits for its runs, so packs resume one after another, each launch's runs (one per COM) filling the
    # workers; with one COM (PART=lower at small) a launch is one process, and the packs resume at once instead, each
    # on its own share of the CPUs (a launcher gives its first run the same CPUs whatever the others run)
    at_once=0; (( ${#packs[@]} > 1 )) && [[ "$coms" != *" "* ]] && ! dry_run && at_once=1
    (( at_once )) && cpus=($("$PY" -c 'import os; print(*sorted(os.sched_getaffinity(0)))'))
    pids=(); k=0
    for pack in "${packs[@]}"; do
        read -r i held ckpt <<< "$pack"
        resume=(--script ppo_ewma_jax --seeds "${seeds[@]:i:held}" --seeds-per-process "$held" --iterations $TOTAL --
                "${ENV[@]}" --ewma-com $coms --resume "$ckpt")
        if (( at_once )); then
            share=(); for ((j = k; j < ${#cpus[@]}; j += ${#packs[@]})); do share+=("${cpus[j]}"); done
            (( ${#share[@]} )) || share=("${cpus[@]}")
            cpulist=$(IFS=,; echo "${share[*]}")  # (IFS in a subshell of its own: launch splits LAUNCH_FLAGS on spaces)
            (taskset -pc "$cpulist" $BASHPID > /dev/null; launch "resume_$start" --workers 1 "${resume[@]}") &
            pids+=($!)
        else
            launch "resume_$start" "${resume[@]}"
        fi
        k=$((k + 1))
    done
    for pid in "${pids[@]}"; do wait "$pid" || FAILED=1; done
done
# the comparison: every start's grids this runner has made, in this PART or an earlier one
grids=""; for start in $STARTS; do
    [[ -d "$OUT_DIR/resume_$start" ]] || dry_run && grids+=" plateau_$start resume_$start"
done
compare resume_all "$grids" --x-flag ewma-com $(return_tag)
if reduced; then claim 4; fi
