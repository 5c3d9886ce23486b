"""benchmark/envpool_overlap.py: the three rollouts of ppo_atari_envpool.py's Agent (sync, two pools, one pool with
batch_size N/2) run on real envpool and are reported side by side with the machine; bad sizes are refused."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "benchmark" / "envpool_overlap.py"


def test_every_rollout_is_timed_in_every_round(tmp_path):
    out = tmp_path / "overlap.json"
    result = subprocess.run([sys.executable, TOOL, "--num-envs", "4", "--num-steps", "8", "--pairs", "2", "--pool-threads",
                             "1", "--torch-threads", "1", "--json", out], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2 and " cores" in report["machine"] and report["options"]["pool_threads"] == 1
    for row in report["rounds"]:
        for way in ("two-pools", "one-pool"):
            assert row[way] > 0 and row[f"{way}_ratio"] == pytest.approx(row[way] / row["sync"])
    last = result.stdout.splitlines()[-1]
    assert "torch threads 1, pool threads 1" in last
    assert f"one-pool / sync x{report['median']['one-pool_ratio']:.2f}" in last


@pytest.mark.parametrize("args, text", [(["--num-envs", "3"], "--num-envs must be even"),
                                        (["--pool-threads", "-1"], "--pool-threads must be 0"),
                                        (["--num-steps", "0"], "--num-steps must be at least 1")])
def test_bad_sizes_are_refused(args, text):
    result = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and text in result.stderr
