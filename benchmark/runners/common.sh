# Sourced by every runner: where things go, how runs are launched, and the SMOKE switch.
#   OUT_DIR       where the runner's grids, tables and figures go (default: grids/<runner name>; SCALE=gpu:
#                 grids/gpu/<runner name>, apart from the small grids' runs and analyses)
#   RUN_STORE     where runs live, shared by every runner so a run that several figures need runs once
#                 (default: store/ beside OUT_DIR, i.e. grids/store)
#   SCALE         the size of the grids: paper (default: the papers' sizes), small (what a 2-core CPU carries: a
#                 runner, or a PART of one, within 60 minutes; benchmark/reproduce.md), gpu (one GPU; claims 2-4
#                 and 7-10 sized from measured throughputs, below) or smoke (SMOKE=1)
#   SMOKE=1       the same grids at a tiny size, minutes on a CPU (2 local workers unless LAUNCH_FLAGS says), analysis included
#   PUBLISH       a folder (e.g. benchmark/reproduce) where the runner's claim verdicts are copied with their figures
#   DRY_RUN=1     check the grids and print the commands only
#   ANALYZE_ONLY=1  launch nothing; analyse what the grids hold (after a Slurm array finished)
#   LAUNCH_FLAGS  extra launcher flags, e.g. "--workers 4" or "--slurm --slurm-partition gpu --slurm-gpus 1";
#                 with --slurm the arrays are submitted without waiting and the analysis is left for ANALYZE_ONLY=1
#   DEVICES       GPUs each local run spans (default 1; the launcher's --gpus-per-run): the JAX scripts split their
#                 envs over every GPU they see, e.g. SCALE=gpu DEVICES=8 on one 8-GPU node
#   PYTHON        the interpreter (default: python)
# A failed launch or analysis does not stop the runner: it goes on with the next grid and exits 1 at the end.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LAUNCH_FLAGS_GIVEN="${LAUNCH_FLAGS:-}"  # the caller's, before a scale's defaults
PY="${PYTHON:-python}"
SCALE="${SCALE:-paper}"
[[ "${SMOKE:-0}" == 1 ]] && SCALE=smoke
OUT_DIR="${OUT_DIR:-grids/$([[ "$SCALE" == gpu ]] && echo gpu/)$(basename "$0" .sh)}"
RUN_STORE="${RUN_STORE:-$(dirname "$OUT_DIR")/store}"
ATARI10="Amidar-v5 Bowling-v5 Frostbite-v5 KungFuMaster-v5 Riverraid-v5 BattleZone-v5 DoubleDunk-v5 NameThisGame-v5 Phoenix-v5 Qbert-v5"
FAILED=0
DRY_RUN_GRIDS=""; DRY_RUN_COUNT=0  # DRY_RUN: a folder of the grids' launcher commands, checked at the end in one process
finish() {
    local rc=$?
    if [[ -n "$DRY_RUN_GRIDS" ]]; then
        "$PY" "$ROOT/benchmark/launch.py" --each "$DRY_RUN_GRIDS" || FAILED=1
        rm -rf "$DRY_RUN_GRIDS"
    fi
    exit $(( rc ? rc : FAILED ))  # a crash keeps its status; else 1 if a grid failed
}
trap finish EXIT

# SMOKE's tiny SFL config (Kinetix size s, MLP, one epoch, short rollouts, a small evaluation); SFL_TINY8
# adds 8 envs, 2 minibatches, 16 candidates and a buffer of 4
SFL_TINY=(--model mlp --env-size s --num-steps 16 --update-epochs 1 --sfl-update-period 2 --sfl-rollout-length 16
          --num-eval-levels 4 --eval-num-attempts 1 --eval-every 2 --level-filter-pool 4)
SFL_TINY8=("${SFL_TINY[@]}" --num-envs 8 --num-minibatches 2 --sfl-num-candidates 16 --sfl-buffer-size 4)

case "$SCALE" in
    smoke|small|paper|gpu) ;;
    *) echo "runner: SCALE must be smoke, small, paper or gpu (got $SCALE)" >&2; exit 2 ;;
esac
DEVICES="${DEVICES:-1}"
if ! [[ "$DEVICES" =~ ^[1-9][0-9]*$ ]]; then echo "runner: DEVICES must be a positive integer (got $DEVICES)" >&2; exit 2; fi
DEVICE_FLAGS=""; [[ "$DEVICES" == 1 ]] || DEVICE_FLAGS="--gpus-per-run $DEVICES"
smoke() { [[ "$SCALE" == smoke ]]; }
# supports <scales...>: the SCALEs besides smoke and paper this runner has settings for; any other is refused (exit 2)
# before anything runs, as it is by the first launch of a runner that never called this
SCALES="smoke paper"
supports() {
    SCALES="smoke paper${*:+ $*}"
    [[ " $SCALES " == *" $SCALE "* ]] && return 0
    echo "runner: $(basename "$0") has no SCALE=$SCALE settings (it has: $SCALES)" >&2
    exit 2
}

# SCALE=small's task for the stagnation claims 2-6 (benchmark/reproduce.md; fixed before their runs): ppo_ewma_jax.py
# on gymnax MinAtar SpaceInvaders with Table 2's hyper-parameters and minibatch structure (8 epochs x 32 minibatches,
# 256 minibatch steps per iteration, lr 3e-4, gamma 0.995, lambda 0.9, clip 0.2, 3 x 256 tanh MLPs) on a batch of
# 64 envs x 128 steps (8192; Table 2's is 2048 x 256); 122 iterations = 1M steps unless a runner says otherwise.
STAG_SMALL=(--env-id SpaceInvaders-MinAtar --num-envs 64 --num-steps 128)
STAG_SMALL_ITER=122
# The reduced scales' task for the data-collection claims 7-10 (atari10_nenvs.sh, atari10_epochs.sh): PPO on two MinAtar
# games with CleanRL's Atari PPO settings (lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, 4 minibatches, clip 0.1) and
# an MLP of 2 ReLU layers in place of the Nature CNN, 256 units wide at SCALE=gpu and 128 at SCALE=small (fixed
# 2026-11-28, before its runs: at 256 atari10_nenvs.sh took about 97 minutes on 2 cores (no log kept), over the hour a claim may take;
# benchmark/reproduce.md); the runner gives --update-epochs
# SCALE=small reads SpaceInvaders alone: minatar_pilot.sh's rule (fixed before its runs) asks a game's runs to leave
# the floor within the budget; Breakout's did not (its 4-epoch runs ended at 5.9-7.0 but one seed at 13.1), and neither candidate for its place
# qualified (Asterix gained under 0.3 points, Freeway's seeds +3.6 and -2.7; benchmark/results/cpu_2026-12-02/
# minatar_pilot.log). SCALE=gpu (10M steps a run) keeps both games.
MINATAR_GAMES=$([[ "$SCALE" == small ]] && echo "SpaceInvaders-MinAtar" || echo "Breakout-MinAtar SpaceInvaders-MinAtar")
MINATAR_WIDTH=$([[ "$SCALE" == small ]] && echo 128 || echo 256)
MINATAR_PPO=(--hidden-size "$MINATAR_WIDTH" --num-layers 2 --activation relu --learning-rate 2.5e-4 --anneal-lr --gamma 0.99
             --gae-lambda 0.95 --num-minibatches 4 --clip-coef 0.1)

# SCALE=gpu (claims 2-10; not yet re-sized: the runners outside the claims with gpu settings), sized from
# throughputs measured on an H200 (2026-11-27, benchmark/results/h200_2026-11-27, `PARTS="sizing locomotion" bash
# benchmark/speed/gpu_check.sh`); each runner states its GPU-hours as arithmetic from these, one process at a time,
# evaluation left out:
#   stagnation claims 2-4: ppo_ewma_jax.py on Kinetix locomotion size m at Table 2 (2048 envs x 256 steps, 8 x 32),
#   5 seeds in one process (STAG_GPU_FLAGS): 723k steps/s over the 5 (1 seed alone: 291k; 16,384 envs: 886k, so two
#   packs at once gain at most 1.2x), first iteration after ~52 s; 1,000 iterations of 5 seeds = 3,626 s + 52 s,
#   61 GPU-minutes a config. Measured with plain PPO, one iteration a call; evaluation (every 10) not costed.
#   data-collection claims 7-10: ppo_ewma_jax.py on MinAtar (ReLU 2 x 256, 4 epochs x 4 minibatches), 10 seeds in one
#   process (MINATAR_GPU_FLAGS): an iteration of the 10 takes ~17.5 ms of minibatch steps (4.4 ms per epoch) plus
#   0.052 ms per rollout step (from 8 x 128: 24.2 ms, 32 x 32: 19.2 ms an iteration), ~40 s fixed (start-up and
#   compilation) a process; 10M steps a seed; one pair of runs each, so +-30%. These runs leave the GPU mostly idle:
#   4 share it (--workers 4).
STAG_GPU_SEEDS="1 2 3 4 5"; STAG_GPU_ITER=1000
MINATAR_GPU_SEEDS="1 2 3 4 5 6 7 8 9 10"; MINATAR_GPU_BUDGET=10000000
STAG_GPU_FLAGS="--seeds-per-process 5"  # the launcher packs seeds only within 262,144 transitions an iteration
MINATAR_GPU_FLAGS="--workers 4 --seeds-per-process 10"
# launch_defaults FLAGS: this scale's launcher flags (the packs and workers its times assume) unless LAUNCH_FLAGS says
launch_defaults() { [[ -n "$LAUNCH_FLAGS_GIVEN" ]] || LAUNCH_FLAGS="$*"; }
# reduced: the scales that test the claims (their verdicts and the analyses the verdicts read)
reduced() { [[ "$SCALE" == small || "$SCALE" == gpu ]]; }
# return_tag: the score of the CPU-sized tasks (CartPole, MinAtar: no solve rate); gpu and paper read the script's own
return_tag() { if [[ "$SCALE" == smoke || "$SCALE" == small ]]; then echo --tag charts/episodic_return; fi; }

# The setting of the SFL ablations (stagnation App. E): Table 3's 8192-env preset at size l, 3 seeds, 2e10 steps
# (this project's budget); SMOKE: the tiny config, 1 seed, 2 updates. Sets SEEDS, BUDGET and CONFIG.
sfl_ablation() {
    if smoke; then
        SEEDS="1"; BUDGET=(--iterations 2); CONFIG=("${SFL_TINY8[@]}")
    else
        SEEDS="1 2 3"; BUDGET=(--fixed-budget --total-timesteps 20000000000); CONFIG=(--env-size l --sfl-preset 8192)
    fi
}
dry_run() { [[ "${DRY_RUN:-0}" == 1 ]]; }
# parts <name...>: the runner's PARTs besides all (the default); any other PART is refused (exit 2) before anything runs.
# part <name>: whether that part is to run
parts() {
    PART="${PART:-all}"
    [[ " all $* " == *" $PART "* ]] && return 0
    local names=(all "$@")
    echo "runner: PART must be $(IFS=,; echo "${names[*]:0:${#names[@]}-1}" | sed 's/,/, /g') or ${names[-1]} (got $PART)" >&2
    exit 2
}
part() { [[ "$PART" == all || "$PART" == "$1" ]]; }
on_slurm() { [[ " ${LAUNCH_FLAGS:-} " == *" --slurm "* ]]; }
# SMOKE and SCALE=small run on a 2-core machine: 2 local workers unless LAUNCH_FLAGS says
if [[ "$SCALE" == smoke || "$SCALE" == small ]] && [[ -z "${LAUNCH_FLAGS:-}" ]]; then LAUNCH_FLAGS="--workers 2"; fi

# launch <grid name> <launcher flags...> -- <grid flags...>: one grid under $OUT_DIR/<grid name>, runs in $RUN_STORE.
# On Slurm it returns once submitted; WAIT=1 launch ... waits (a later grid needs this one's checkpoints). Status 1 where
# the launch failed (FAILED is set too, but not in the caller of a launch run in the background, which reads the status).
launch() {
    local name="$1"; shift
    supports ${SCALES#smoke paper}
    [[ "${ANALYZE_ONLY:-0}" == 1 ]] && return 0
    local wait=""
    on_slurm && [[ "${WAIT:-0}" != 1 ]] && wait="--no-wait"
    if dry_run; then  # each script is imported once, at the end: seconds, not seconds per grid
        [[ -n "$DRY_RUN_GRIDS" ]] || DRY_RUN_GRIDS="$(mktemp -d)"
        DRY_RUN_COUNT=$((DRY_RUN_COUNT + 1))
        # shellcheck disable=SC2086
        printf '%s\0' --out-dir "$OUT_DIR/$name" --store "$RUN_STORE" ${LAUNCH_FLAGS:-} $DEVICE_FLAGS $wait --dry-run "$@" \
            > "$DRY_RUN_GRIDS/$(printf '%06d' "$DRY_RUN_COUNT")"
        return 0
    fi
    local status=0
    # shellcheck disable=SC2086
    "$PY" "$ROOT/benchmark/launch.py" --out-dir "$OUT_DIR/$name" --store "$RUN_STORE" ${LAUNCH_FLAGS:-} $DEVICE_FLAGS $wait "$@" \
        || status=$?
    if [[ $status == 75 || $status == 130 ]]; then  # the launch was stopped by a signal: so is the runner
        echo "runner: grid $name: stopped by a signal (launch exited $status); run the runner again to continue" >&2
        exit "$status"
    elif [[ $status != 0 ]]; then
        echo "runner: grid $name: launch exited $status (continuing)" >&2; FAILED=1; return 1
    fi
}

# checkpoint_of <grid name> <launcher flags...> -- <grid flags...>: per run of that grid, its newest checkpoint, a tab and
# the number of seeds it holds ("-", 0 where none: a pack's runs after its first, whose checkpoint holds them all)
checkpoint_of() {
    local name="$1"; shift
    "$PY" "$ROOT/benchmark/launch.py" --out-dir "$OUT_DIR/$name" --store "$RUN_STORE" --print-checkpoints "$@"
}

# analyze <grid name> <analysis flags...>: tables, figures and report.md under $OUT_DIR/<grid name>/analysis
analyze() {
    local name="$1"; shift
    dry_run && return 0
    if on_slurm && [[ "${ANALYZE_ONLY:-0}" != 1 ]]; then
        echo "runner: grid $name submitted; analyse it once the jobs are done: ANALYZE_ONLY=1 LAUNCH_FLAGS='${LAUNCH_FLAGS}' bash $0"
        return 0
    fi
    "$PY" "$ROOT/benchmark/analyze.py" "$OUT_DIR/$name" "$@" || { echo "runner: grid $name: analysis exited $? (continuing)" >&2; FAILED=1; }
}

# analyze_each_env <grid name> <envs> <analysis flags...>: also one analysis per env, under $OUT_DIR/<grid name>/analysis_<env>
# (MinAtar's games have no common scale: their figures are drawn apart)
analyze_each_env() {
    local name="$1" envs="$2"; shift 2
    for env in $envs; do analyze "$name" --envs "$env" --output "$OUT_DIR/$name/analysis_$env" "$@"; done
}

# compare <name> "<grid> <grid> ..." <analysis flags...>: one analysis of several grids (the grid is a config column),
# under $OUT_DIR/<name>/analysis
compare() {
    local name="$1" grids="$2"; shift 2
    dry_run && return 0
    if on_slurm && [[ "${ANALYZE_ONLY:-0}" != 1 ]]; then return 0; fi
    local dirs=()
    for grid in $grids; do dirs+=("$OUT_DIR/$grid"); done
    "$PY" "$ROOT/benchmark/analyze.py" "${dirs[@]}" --output "$OUT_DIR/$name/analysis" "$@" \
        || { echo "runner: comparison $name: analysis exited $? (continuing)" >&2; FAILED=1; }
}

# claim <n>: the verdict of claim n of benchmark/claims.py on this runner's grids ($OUT_DIR/claim_<n>.md; copied with its
# figures to $PUBLISH/claim_<n>/ when PUBLISH is set)
claim() {
    dry_run && return 0
    if on_slurm && [[ "${ANALYZE_ONLY:-0}" != 1 ]]; then return 0; fi
    "$PY" "$ROOT/benchmark/claims.py" "$1" "$OUT_DIR" --scale "$SCALE" ${PUBLISH:+--publish "$PUBLISH"} \
        || { echo "runner: claim $1: verdict exited $? (continuing)" >&2; FAILED=1; }
}
