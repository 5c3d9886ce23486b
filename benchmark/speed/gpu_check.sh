#!/usr/bin/env bash
# The JAX scripts on a GPU, each part one benchmark command of this directory, the raw output of each kept in OUT_DIR:
#   device      profile_jax.py at 4,096, 65,536 and 524,288 envs: ppo_ewma_jax.py's training iteration and PureJaxRL's
#               ppo.py's timed on the device in one process (SpaceInvaders-MinAtar, 64x2 tanh, 16 steps, 4 epochs x 8
#               minibatches), and their kernels summed from a profiler trace
#   minatar     vs_reference.py --bench ppo_minatar_jax --steady at 4,096 envs: the two whole processes side by side,
#               steady-state and whole-process ratios, the median of 3 pairs
#   locomotion  jax_steps_per_second.py: Kinetix locomotion size m at Table 2 (2,048 x 256) and at 16,384 envs
#   sfl         sfl_steps_per_second.py first-update: ppo_kinetix_sfl.py --model mlp, size s, Table 3's 2,048 preset
#   scaling     jax_steps_per_second.py over 1, 2, 4, 8 ... of the machine's GPUs (as many as it has), 2,048 locomotion
#               envs (size m, 256 steps, Table 2's 8 x 32) per GPU, --shuffle per-env: steps/s per device as the envs
#               are split over more of them (weak scaling; ppo_ewma_jax.py's multi-device runs), then ppo_ewma_brax.py
#               the same way on Ant (PureJaxRL's 2,048 x 10 per GPU)
#   smoke       cuda_smoke.sh: every GPU script (torch and JAX) a few iterations on CUDA
#   torch       the torch scripts compiled: cuda_smoke.sh's --compile --cudagraphs runs of the four (TORCH_SMOKE=0
#               leaves them out; two of them took 66 and 75 s side by side on an H200), then vs_reference.py --bench
#               ppo_atari at TORCH_ENVS (default 8) envs x 128 steps, TORCH_ITERATIONS (default 24) iterations a run:
#               CleanRL's script, the project's eager and, as --variant, compiled with CUDA graphs (CLEANRL: a CleanRL
#               checkout; on the machine without a network, envpool and tensordict come as the kit's wheels and
#               envpool's Atari ROMs from gpu_envpool_assets.sh, through ENVPOOL_ASSETS_PATH). Its rates are each run's
#               in-run steps/s (the second half of its iterations, from its own TensorBoard points: start-up,
#               compilation and capture left out), beside whole-process ratios. The --steady budgets it took before (16
#               iterations at 1x and 3x, cold runs first) would take about 15 minutes at 8 envs by the scaling of the
#               H200 run of 2026-11-27, more than one 10-minute device call; these runs, every compiled one compiling
#               cold, about 6-7 by the same scaling (an estimate): one call with TORCH_SMOKE=0. A command cut at its
#               limit keeps the pairs it finished (no medians)
#   sizing      what SCALE=gpu's grids are sized from: run_seconds.py, whole processes of ppo_ewma_jax.py on
#               Breakout-MinAtar with 10 seeds packed (the atari10 runners' configs 8 x 128, 32 x 32, 32 x 128), and
#               jax_steps_per_second.py on locomotion at Table 2 with 5 seeds packed (the stagnation runners')
#
#   REFERENCE=path/to/purejaxrl bash benchmark/speed/gpu_check.sh OUT_DIR      (PARTS="minatar locomotion" runs those alone)
#
# Stops before any run unless JAX's default backend is a GPU. REFERENCE is a checkout of PureJaxRL (the device and
# minatar parts need it; nothing of it is in this repository). PAIRS (default 3) pairs for minatar and torch. Each
# command has its own time limit (LIMIT_S; defaults below); one past it is cut and the next runs. On an H200
# (2026-11-26) a warm whole process of either side took 10-15 s, so a minatar size of 3 pairs takes ~4 minutes.
# VARIANTS / XLA_VARIANTS (space-separated) add the device part's --variant FLAG=VALUE / --xla-variant OPTION=VALUE[;...]
# sides. Every command's output goes to OUT_DIR/<part>.txt (and .json where the command writes one) as it runs.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
"$PY" -c "import jax; assert jax.default_backend() == 'gpu', jax.default_backend()" 2>/dev/null \
  || { echo "gpu_check: JAX's default backend is not a GPU; nothing run" >&2; exit 2; }
OUT_DIR="${1:?usage: REFERENCE=PATH bash benchmark/speed/gpu_check.sh OUT_DIR}"
mkdir -p "$OUT_DIR"
PAIRS="${PAIRS:-3}"
failed=0

part() {  # part NAME LIMIT COMMAND...: run one command, its output to OUT_DIR/NAME.txt and the screen
  local name=$1 limit=$2; shift 2
  echo "== $name: $*"
  local start=$SECONDS
  (cd "$HERE" && timeout "$limit" "$@") > "$OUT_DIR/$name.txt" 2>&1
  local rc=$?
  tail -n 8 "$OUT_DIR/$name.txt"
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  [ $rc -eq 0 ] || failed=1
}

for p in ${PARTS:-device minatar locomotion scaling sfl smoke}; do
  case $p in
    device)
      variants=(); for v in ${VARIANTS:-}; do variants+=(--variant "$v"); done
      for v in ${XLA_VARIANTS:-}; do variants+=(--xla-variant "$v"); done
      for envs in ${DEVICE_ENVS:-4096 65536 524288}; do
        part "device_$envs" "${LIMIT_S:-150}" "$PY" profile_jax.py --reference "${REFERENCE:?REFERENCE: a PureJaxRL checkout}" \
          --num-envs "$envs" --calls 10 "${variants[@]}" --json "$OUT_DIR/device_$envs.json"
      done ;;
    minatar)
      # 320 iterations: ~2.5 s of PureJaxRL's training, ~7.5 s at 3 x (1-3 s budgets were within the processes' spread)
      part minatar_4096 "${LIMIT_S:-330}" "$PY" vs_reference.py --reference "${REFERENCE:?REFERENCE: a PureJaxRL checkout}" \
        --bench ppo_minatar_jax --num-envs 4096 --total-timesteps 20971520 --steady --pairs "$PAIRS" --json "$OUT_DIR/minatar_4096.json" ;;
    locomotion)
      for envs in 2048 16384; do
        part "locomotion_$envs" "${LIMIT_S:-300}" "$PY" jax_steps_per_second.py --env-size m --num-envs "$envs" --num-steps 256 \
          --iterations 4 --repeats 1 --json "$OUT_DIR/locomotion_$envs.json" -- --num-minibatches 32 --update-epochs 8
      done ;;
    scaling)
      visible=$("$PY" -c "import jax; print(','.join(str(d.id) for d in jax.devices()))")  # (within CUDA_VISIBLE_DEVICES)
      IFS=, read -ra ids <<< "${CUDA_VISIBLE_DEVICES:-$visible}"
      for d in 1 2 4 8 16 32; do
        (( d <= ${#ids[@]} )) || break
        CUDA_VISIBLE_DEVICES="$(IFS=,; echo "${ids[*]:0:d}")" part "scaling_ewma_$d" "${LIMIT_S:-300}" "$PY" jax_steps_per_second.py \
          --env-size m --num-envs $((2048 * d)) --num-steps 256 --iterations 4 --repeats 1 --json "$OUT_DIR/scaling_ewma_$d.json" \
          -- --num-minibatches 32 --update-epochs 8 --shuffle per-env
        CUDA_VISIBLE_DEVICES="$(IFS=,; echo "${ids[*]:0:d}")" part "scaling_brax_$d" "${LIMIT_S:-300}" "$PY" jax_steps_per_second.py \
          --env-id ant --num-envs $((2048 * d)) --num-steps 10 --iterations 4 --repeats 1 --json "$OUT_DIR/scaling_brax_$d.json" \
          -- --shuffle per-env
      done ;;
    sfl)
      part sfl_first_update "${LIMIT_S:-300}" "$PY" sfl_steps_per_second.py first-update --env-size s --num-envs 2048 \
        --model mlp --repeats 1 --json "$OUT_DIR/sfl_first_update.json" ;;
    sizing)
      minatar=(--env-id Breakout-MinAtar --num-seeds 10 --hidden-size 256 --num-layers 2 --activation relu
               --learning-rate 2.5e-4 --anneal-lr --gamma 0.99 --gae-lambda 0.95 --update-epochs 4 --num-minibatches 4
               --clip-coef 0.1)
      for config in 8x128 32x32 32x128; do
        part "sizing_minatar_$config" "${LIMIT_S:-150}" "$PY" run_seconds.py --budgets 500000 1500000 \
          --json "$OUT_DIR/sizing_minatar_$config.json" -- "${minatar[@]}" --num-envs "${config%x*}" --num-steps "${config#*x}"
      done
      part sizing_locomotion_2048x5 "${LIMIT_S:-200}" "$PY" jax_steps_per_second.py --env-size m --num-envs 2048 \
        --num-steps 256 --iterations 4 --repeats 1 --json "$OUT_DIR/sizing_locomotion_2048x5.json" -- \
        --num-minibatches 32 --update-epochs 8 --num-seeds 5 ;;
    smoke)
      part cuda_smoke "${LIMIT_S:-600}" bash cuda_smoke.sh "$OUT_DIR/cuda_smoke_runs" ;;
    torch)
      if [ "${TORCH_SMOKE:-1}" != 0 ]; then
        ONLY="ppo_atari_envpool_compiled pqn_atari_compiled ppo_rnd_compiled ppo_procgen_envpool_compiled" \
          part cuda_smoke_compiled "${LIMIT_S:-600}" bash cuda_smoke.sh "$OUT_DIR/cuda_smoke_compiled_runs"
      fi
      for envs in ${TORCH_ENVS:-8}; do
        part "torch_ppo_atari_$envs" "${LIMIT_S:-600}" "$PY" vs_reference.py --reference "${CLEANRL:?CLEANRL: a CleanRL checkout}" \
          --bench ppo_atari --num-envs "$envs" --total-timesteps $((envs * 128 * ${TORCH_ITERATIONS:-24})) --pairs "$PAIRS" \
          --variant="--compile --cudagraphs" --json "$OUT_DIR/torch_ppo_atari_$envs.json"
      done ;;
    *) echo "gpu_check: unknown part $p (device, minatar, locomotion, scaling, sizing, sfl, smoke, torch)" >&2; exit 2 ;;
  esac
done
exit $failed
