"""benchmark/speed/peak_memory.py: one iteration of a copy of a script, its own peak RSS read from its rusage, and the
float32 size of the observations of the script's own frames."""
import subprocess
import sys

import envpool
import numpy as np

from benchmark.common import ROOT

sys.path.insert(0, str(ROOT / "benchmark" / "speed"))
import peak_memory  # noqa: E402


def test_the_frames_it_sizes_are_the_scripts():
    procgen = envpool.make("StarpilotEasy-v0", env_type="gymnasium", num_envs=1)  # ppo_procgen_envpool.py's default
    assert peak_memory.OBSERVATION["ppo_procgen_envpool"] == int(np.prod(procgen.observation_space.shape))
    atari = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1)
    assert int(np.prod(atari.observation_space.shape)) == 4 * 84 * 84  # the default of the others


def test_one_iteration_reports_the_child_s_peak():
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "peak_memory.py"), "--num-envs", "4", "--num-steps",
                             "16", "--", "--dynamics-every", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    line = [x for x in result.stdout.splitlines() if "peak RSS" in x][-1]
    peak = float(line.split("peak RSS ")[1].split(" GiB")[0])
    assert 0.2 < peak < 4 and "ppo_atari_envpool this script 4 envs x 16 steps --dynamics-every 0" in line
    assert f"would take {64 * 4 * 84 * 84 * 4 / 2**30:.1f} GiB" in line
