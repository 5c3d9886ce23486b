#!/usr/bin/env bash
# Every GPU script of cleanrl_scale/ (all but the numpy-only noisy_sgd.py) for a few iterations on the GPU: the CUDA paths (torch) and the GPU backend (JAX),
# with the dynamics/ metrics, checkpoints and evaluation on, each a whole process from a fresh directory.
#
#   bash benchmark/speed/cuda_smoke.sh [OUT_DIR]            (ONLY="pqn_atari ppo_rnd" bash ... runs those alone)
#
# ONLY="ppo_atari_envpool_compiled pqn_atari_compiled ppo_rnd_compiled ppo_procgen_envpool_compiled" runs the torch
# scripts with --compile --cudagraphs (not in the default order: each compiles for a minute or more).
#
# Stops before any run unless torch sees a CUDA device and JAX's default backend is the GPU. For each script it
# prints its wall time and the number of scalar tags and points it wrote to TensorBoard; a script that exits non-zero
# or writes no scalars fails the whole command (exit 1) after the others have run. OUT_DIR (default: a temporary
# directory) keeps each script's log and runs/.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"

"$PY" - <<'EOF' || { echo "cuda_smoke: no GPU for torch or JAX; nothing run" >&2; exit 2; }
import jax, torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
assert jax.default_backend() == "gpu", f"JAX's default backend is {jax.default_backend()}"
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; jax {jax.__version__} on {jax.devices()[0]}")
EOF
OUT_DIR="${1:-$(mktemp -d -t cuda_smoke.XXXXXX)}"
mkdir -p "$OUT_DIR"

DYN=(--dynamics-every 2 --dynamics-batch 128)
declare -A FLAGS=(
  [ppo_atari_envpool]="--num-envs 8 --num-steps 64 --total-timesteps 2048 --update-epochs 2 ${DYN[*]} --save-model"
  [pqn_atari]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --update-epochs 2 ${DYN[*]} --save-model --eval-episodes 1"
  [ppo_rnd]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --update-epochs 2 ${DYN[*]} --num-iterations-obs-norm-init 1 --save-model --eval-episodes 1"
  [ppo_procgen_envpool]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --num-minibatches 4 --update-epochs 2 ${DYN[*]} --num-levels 10 --eval-every 2 --eval-episodes 2"
  [ppo_ewma_jax]="--env-id SpaceInvaders-MinAtar --num-envs 64 --num-steps 32 --num-minibatches 4 --update-epochs 2 --total-timesteps 8192 --ewma-com 2 --dynamics-every 2"
  [ppo_ewma_jax_locomotion]="--env-size s --num-morphologies 8 --num-envs 64 --num-steps 16 --num-minibatches 2 --update-epochs 2 --total-timesteps 4096 --eval-every 2"
  [ppo_ewma_brax]="--env-id ant --num-envs 256 --num-minibatches 4 --total-timesteps 10240 --ewma-com 2 --dynamics-every 2 --save-every 2"
  [ppo_atari_envpool_compiled]="--num-envs 8 --num-steps 64 --total-timesteps 2048 --update-epochs 2 ${DYN[*]} --compile --cudagraphs"
  [pqn_atari_compiled]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --update-epochs 2 ${DYN[*]} --compile --cudagraphs"
  [ppo_rnd_compiled]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --update-epochs 2 ${DYN[*]} --num-iterations-obs-norm-init 1 --compile --cudagraphs"
  [ppo_procgen_envpool_compiled]="--num-envs 8 --num-steps 32 --total-timesteps 1024 --num-minibatches 4 --update-epochs 2 ${DYN[*]} --num-levels 10 --eval-every 2 --eval-episodes 2 --compile --cudagraphs"
  [ppo_kinetix_sfl]="--model transformer --env-size s --num-envs 64 --num-steps 16 --num-minibatches 4 --update-epochs 1 --sfl-num-candidates 64 --sfl-update-period 2 --sfl-buffer-size 16 --sfl-rollout-length 16 --num-eval-levels 8 --eval-num-attempts 2 --level-filter-pool 16 --total-timesteps 4096 --eval-every 2 --save-every 2"
)
ORDER=(${ONLY:-ppo_atari_envpool pqn_atari ppo_rnd ppo_procgen_envpool ppo_ewma_jax ppo_ewma_jax_locomotion ppo_ewma_brax ppo_kinetix_sfl})
failed=0
printf '%-26s %8s %6s %8s\n' script seconds tags points
for name in "${ORDER[@]}"; do
  script="${name%_locomotion}"; script="${script%_compiled}"  # the same scripts otherwise run
  dir="$OUT_DIR/$name"; mkdir -p "$dir"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  (cd "$dir" && "$PY" "$ROOT/cleanrl_scale/$script.py" ${FLAGS[$name]} --exp-name cuda_smoke > log.txt 2>&1)
  rc=$?
  seconds=$(( ($(date +%s%N) - start) / 1000000 ))
  read -r tags points < <("$PY" - "$dir" <<'EOF'
import sys, glob
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
tags = points = 0
for f in glob.glob(f"{sys.argv[1]}/runs/*/events.out.tfevents.*"):
    acc = EventAccumulator(f, size_guidance={"scalars": 0}); acc.Reload()
    tags += len(acc.Tags()["scalars"]); points += sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
print(tags, points)
EOF
)
  printf '%-26s %8s %6s %8s%s\n' "$name" "$((seconds / 1000)).$(( seconds % 1000 / 100 ))" "$tags" "$points" "$([ $rc -ne 0 ] && echo "  FAILED (exit $rc): $dir/log.txt")"
  if [ $rc -ne 0 ] || [ "${points:-0}" -eq 0 ]; then failed=1; tail -n 20 "$dir/log.txt"; fi
done
exit $failed
