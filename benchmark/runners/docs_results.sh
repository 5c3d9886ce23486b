#!/usr/bin/env bash
# The learning results of the script pages: each script beside the one a researcher would otherwise copy (CleanRL's or
# PureJaxRL's own, from the user's checkout) at the same env, budget, seeds and hyper-parameters
# (benchmark/docs_results.py; each comparison's settings are fixed there, with their reasons), and ppo_kinetix_sfl.py's
# SFL beside domain randomisation (--sfl-sample-ratio 0: every level fresh from the generator) on the same levels.
#   CLEANRL, PUREJAXRL  the checkouts of github.com/vwxyzjn/cleanrl and github.com/luchris429/purejaxrl (not needed
#                       with DRY_RUN or ANALYZE_ONLY)
#   ANCHOR_PATH         ppo_procgen and its fallback only: a folder holding gym 0.23.1 and procgen for CleanRL's
#                       ppo_procgen.py (pip install --no-deps --target "$ANCHOR_PATH" gym==0.23.1 gym-notices gym3
#                       cffi pycparser procgen-mirror==0.10.7)
#   PART                purejaxrl (ppo_cartpole, ppo_minatar, ppo_brax), cleanrl (ppo_atari, pqn_atari, ppo_rnd,
#                       ppo_rnd_qbert at small, ppo_procgen, ppo_procgen_bigfish at small), sfl, or one comparison
#                       by its name; default all
#   WORKERS             runs at once (default 2 on a CPU, 1 at SCALE=gpu and paper: JAX takes most of a GPU's memory)
#   PUBLISH             a folder where each comparison's report and curves are copied (benchmark/results/learning holds
#                       this repository's: a result there is replaced only by the same runs read again)
# SCALE=small: the comparisons' own settings, what a 2-core CPU carries in about two hours a script. SFL beside
# domain randomisation is not run at this scale (Kinetix compiles and steps slowly on a CPU): SCALE=gpu.
# SCALE=gpu and paper, on one GPU: the PureJaxRL comparisons as at small (they take minutes on a CPU); the CleanRL
# ones at the budgets of CleanRL's own benchmarks, 3 seeds: Atari 10M steps (9,999,360 trained: CleanRL floors to whole
# iterations), Procgen 25M at CleanRL's 64 envs, RND on Phoenix at CleanRL's 128 envs, 10M (this
# project's budget: CleanRL's RND benchmark is MontezumaRevenge at 2e9); SFL beside domain
# randomisation on Kinetix size s at Table 3's 2048-env preset, 3 seeds, 1e9 steps a run (this project's choice,
# not sized from a measured rate). SMOKE: 2 seeds of 2 iterations each.
source "$(dirname "$0")/common.sh"
supports small gpu
parts purejaxrl cleanrl sfl ppo_cartpole ppo_minatar ppo_brax ppo_atari pqn_atari ppo_rnd ppo_rnd_qbert ppo_procgen \
    ppo_procgen_bigfish
if [[ "$SCALE" == gpu || "$SCALE" == paper ]]; then WORKERS="${WORKERS:-1}"; else WORKERS="${WORKERS:-2}"; fi

# compare <comparison> <group> <checkout variable> [docs_results.py flags...]: one comparison, unless PART leaves it out
compare() {
    local name="$1" group="$2" checkout="$3"; shift 3
    part "$name" || part "$group" || return 0
    local flags=(--out "$OUT_DIR" --workers "$WORKERS")
    if smoke; then
        flags+=(--seeds 1 2 --total-timesteps "$(( $("$PY" -c "import sys; sys.path.insert(0, '$ROOT'); \
from benchmark.docs_results import COMPARISONS as C; c = C['$name']; print(c.num_envs * c.num_steps)") * 2 ))")
    fi
    if dry_run; then
        flags+=(--dry-run)
    elif [[ "${ANALYZE_ONLY:-0}" == 1 ]]; then
        flags+=(--report-only)
    else
        [[ -n "${!checkout:-}" ]] || { echo "runner: $name needs $checkout, the anchor's checkout" >&2; FAILED=1; return 0; }
        flags+=(--reference "${!checkout}")
        [[ "$name" == ppo_procgen* && -n "${ANCHOR_PATH:-}" ]] && flags+=(--anchor-path "$ANCHOR_PATH")
    fi
    [[ -n "${PUBLISH:-}" ]] && ! dry_run && flags+=(--publish "$PUBLISH")
    local status=0
    "$PY" "$ROOT/benchmark/docs_results.py" "$name" "${flags[@]}" "$@" || status=$?
    if [[ $status == 75 || $status == 130 ]]; then
        echo "runner: $name: stopped by a signal; run the runner again to continue" >&2
        exit "$status"
    fi
    [[ $status == 0 ]] || FAILED=1
}

compare ppo_cartpole purejaxrl PUREJAXRL
compare ppo_minatar purejaxrl PUREJAXRL
compare ppo_brax purejaxrl PUREJAXRL
if [[ "$SCALE" == gpu || "$SCALE" == paper ]]; then
    compare ppo_atari cleanrl CLEANRL --total-timesteps 9999360
    compare pqn_atari cleanrl CLEANRL --total-timesteps 9999360
    compare ppo_rnd cleanrl CLEANRL --num-envs 128 --total-timesteps 9994240
    compare ppo_procgen cleanrl CLEANRL --num-envs 64 --total-timesteps 24985600
else
    compare ppo_atari cleanrl CLEANRL
    compare pqn_atari cleanrl CLEANRL
    compare ppo_rnd cleanrl CLEANRL
    compare ppo_rnd_qbert cleanrl CLEANRL  # ppo_rnd's fallback: on Phoenix neither side left the floor at this budget
    compare ppo_procgen cleanrl CLEANRL
    compare ppo_procgen_bigfish cleanrl CLEANRL  # ppo_procgen's fallback: on starpilot neither side left the floor
fi

if part sfl; then
    if smoke; then
        launch sfl_vs_dr --script ppo_kinetix_sfl --seeds 1 --iterations 2 -- "${SFL_TINY8[@]}" --sfl-sample-ratio 0 0.5
        analyze sfl_vs_dr --x-flag sfl-sample-ratio
    elif [[ "$SCALE" == small ]]; then
        echo "runner: SFL beside domain randomisation has no SCALE=small settings (Kinetix on a CPU): SCALE=gpu" >&2
    else
        launch sfl_vs_dr --script ppo_kinetix_sfl --seeds 1 2 3 --fixed-budget --total-timesteps 1000000000 -- \
            --env-size s --sfl-preset 2048 --sfl-sample-ratio 0 0.5
        analyze sfl_vs_dr --x-flag sfl-sample-ratio
    fi
fi
