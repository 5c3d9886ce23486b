# Sourced by every runner: where things go, how runs are launched, and the SMOKE switch.
#   OUT_DIR       where the grid's runs, tables and figures go (default: grids/<runner name>)
#   SMOKE=1       the same grid at a tiny size, minutes on a CPU, analysis and figures included
#   DRY_RUN=1     print the commands only
#   LAUNCH_FLAGS  extra launcher flags, e.g. "--workers 4" or "--slurm --slurm-partition gpu --slurm-gpus 1"
#   PYTHON        the interpreter (default: python)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python}"
OUT_DIR="${OUT_DIR:-grids/$(basename "$0" .sh)}"
ATARI10="Amidar-v5 Bowling-v5 Frostbite-v5 KungFuMaster-v5 Riverraid-v5 BattleZone-v5 DoubleDunk-v5 NameThisGame-v5 Phoenix-v5 Qbert-v5"

smoke() { [[ "${SMOKE:-0}" == 1 ]]; }

# launch <grid name> <launcher flags...> -- <grid flags...>: one grid under $OUT_DIR/<grid name>
launch() {
    local name="$1"; shift
    # shellcheck disable=SC2086
    "$PY" "$ROOT/benchmark/launch.py" --out-dir "$OUT_DIR/$name" ${LAUNCH_FLAGS:-} \
        $( [[ "${DRY_RUN:-0}" == 1 ]] && echo --dry-run ) "$@"
}

# analyze <grid name> <analysis flags...>: tables, figures and report.md under $OUT_DIR/<grid name>/analysis
analyze() {
    local name="$1"; shift
    [[ "${DRY_RUN:-0}" == 1 ]] && return 0
    "$PY" "$ROOT/benchmark/analyze.py" "$OUT_DIR/$name" "$@"
}
