"""benchmark/speed/event_writer_cost.py: the writers' import and write costs, measured on files that hold the same values;
its `scripts` writer writes what the JAX scripts' own SummaryWriter writes."""
import argparse
import subprocess
import sys

from benchmark.common import ROOT
from helpers import load_script

sys.path.insert(0, str(ROOT / "benchmark" / "speed"))
import event_writer_cost  # noqa: E402


def test_it_measures_each_installed_writer_on_the_same_values():
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "event_writer_cost.py"), "--iterations", "20",
                             "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "the same values read back from every writer's files" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  ")}
    assert {"scripts", "torch"} <= set(rows) and "imports torch" in rows["torch"] and "torch" not in rows["scripts"]


def test_its_scripts_writer_is_the_jax_scripts(tmp_path):
    opts = argparse.Namespace(tags=5, iterations=3)
    assert event_writer_cost.measure("scripts", opts, str(tmp_path / "bench"))["torch"] is False
    writer = load_script("ppo_ewma_jax").SummaryWriter(str(tmp_path / "script"))
    for step in range(3):
        writer.add_scalars({f"losses/tag_{i}": step + i / 5 for i in range(5)}, step)
    writer.close()
    assert event_writer_cost.read_back(tmp_path / "script") == event_writer_cost.read_back(tmp_path / "bench")


def test_bad_counts_are_refused():
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "event_writer_cost.py"), "--tags", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--tags, --iterations and --repeats must be at least 1" in result.stderr
