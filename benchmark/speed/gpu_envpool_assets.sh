#!/usr/bin/env bash
# The part of envpool 1.2.5's asset packages that the torch scripts need on a GPU machine without a network, built from
# this machine's install into DEST (default .gpu/assets/envpool_assets, 1.2 MB; the packages themselves are ~380 MB):
# the Atari ROMs, the MyoSuite metadata that `import envpool` reads, and an empty vizdoom/maps that it lists.
# Procgen's 25 MB of assets are left out (the GPU machines seen so far also lack the Qt 5 runtime Procgen needs).
#
#   bash benchmark/speed/gpu_envpool_assets.sh [DEST]        then, on the GPU machine: export ENVPOOL_ASSETS_PATH=$PWD/DEST
set -euo pipefail
PY="${PYTHON:-python}"
DEST="${1:-.gpu/assets/envpool_assets}"
read -r assets large < <("$PY" - <<'PYEOF'
import importlib.util as u
print(*[u.find_spec(name).submodule_search_locations[0] for name in ("envpool_assets", "envpool_assets_mujoco_large")])
PYEOF
)
rm -rf "$DEST" && mkdir -p "$DEST/vizdoom/maps" "$DEST/mujoco/myosuite/assets"
cp "$assets/__init__.py" "$DEST/"
cp -r "$assets/atari" "$DEST/atari"
cp -r "$large/mujoco/myosuite/assets/metadata" "$DEST/mujoco/myosuite/assets/metadata"
du -sh "$DEST"
