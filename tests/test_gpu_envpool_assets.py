"""benchmark/speed/gpu_envpool_assets.sh: the assets it keeps are enough for `import envpool` and the Atari games of the torch
scripts, in a Python that sees envpool but none of its asset packages (as on a GPU machine the wheels are carried to)."""
import os
import subprocess
import sys
from pathlib import Path

import envpool

from benchmark.common import ROOT


def test_atari_runs_on_the_kept_assets_alone(tmp_path):
    dest = tmp_path / "assets"
    subprocess.run(["bash", ROOT / "benchmark" / "speed" / "gpu_envpool_assets.sh", dest], check=True, capture_output=True,
                   env=dict(os.environ, PYTHON=sys.executable))
    site = tmp_path / "site"  # this site-packages less envpool's asset packages
    site.mkdir()
    for entry in Path(envpool.__file__).parents[1].iterdir():
        if not entry.name.startswith("envpool_assets"):
            (site / entry.name).symlink_to(entry)
    check = ("import envpool\n"
             "for game in ('Breakout-v5', 'MontezumaRevenge-v5'):\n"
             "    print(game, envpool.make(game, env_type='gymnasium', num_envs=2).reset()[0].shape)\n")
    result = subprocess.run([sys.executable, "-S", "-c", check], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(site), ENVPOOL_ASSETS_PATH=str(dest)))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["Breakout-v5 (2, 4, 84, 84)", "MontezumaRevenge-v5 (2, 4, 84, 84)"]
    without = subprocess.run([sys.executable, "-S", "-c", check], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONPATH=str(site), ENVPOOL_ASSETS_PATH=str(tmp_path / "none")))
    assert without.returncode != 0  # what the GPU machine met without them
