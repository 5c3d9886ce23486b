"""benchmark/speed/cuda_smoke.sh: on a machine without a GPU it stops before any run, and its flags stay those the scripts take."""
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tyro

from helpers import cli_args, load_script

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "benchmark" / "speed" / "cuda_smoke.sh"


def smoke_flags():
    """(name, script, argv) for every run the smoke script makes, its ${DYN[*]} expanded as bash would."""
    text = SMOKE.read_text()
    dyn = re.search(r"^DYN=\((.*)\)$", text, re.M).group(1)
    runs = re.findall(r'^\s+\[(\w+)\]="([^"]*)"$', text, re.M)
    order = re.search(r"^ORDER=\(\$\{ONLY:-(.*)\}\)$", text, re.M).group(1).split()
    # every run defined is run, in the order given; the compiled runs (ONLY=...) apart, as gpu_check.sh's torch part does
    assert [name for name, _ in runs if not name.endswith("_compiled")] == order
    return [(name, name.removesuffix("_locomotion").removesuffix("_compiled"),
             shlex.split(flags.replace("${DYN[*]}", dyn)) + ["--exp-name", "cuda_smoke"]) for name, flags in runs]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be present: the smoke script would run")
def test_without_a_gpu_it_stops_before_any_run(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(SMOKE), str(out)], capture_output=True, text=True, timeout=300,
                            env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "JAX_PLATFORMS": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no GPU for torch or JAX; nothing run" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("name,script,argv", smoke_flags(), ids=[run[0] for run in smoke_flags()])
def test_every_run_s_flags_parse_with_its_script(name, script, argv):
    args = tyro.cli(cli_args(load_script(script)), args=argv)  # a renamed or removed flag exits here (tyro: exit 2)
    assert args.exp_name == "cuda_smoke"
