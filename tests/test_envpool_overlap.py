"""benchmark/envpool_overlap.py: both rollouts of ppo_atari_envpool.py's Agent run on real envpool and are reported
side by side with the machine; an odd --num-envs is refused."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "benchmark" / "envpool_overlap.py"


def test_both_rollouts_are_timed_in_alternating_pairs(tmp_path):
    out = tmp_path / "overlap.json"
    result = subprocess.run([sys.executable, TOOL, "--num-envs", "4", "--num-steps", "8", "--pairs", "2", "--json", out],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["pairs"]) == 2 and " cores" in report["machine"]
    for row in report["pairs"]:
        assert row["sync"] > 0 and row["overlap"] > 0 and row["ratio"] == pytest.approx(row["overlap"] / row["sync"])
    assert f"x{report['median']['ratio']:.2f}" in result.stdout.splitlines()[-1]


def test_an_odd_number_of_envs_is_refused():
    result = subprocess.run([sys.executable, TOOL, "--num-envs", "3"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--num-envs must be even" in result.stderr
