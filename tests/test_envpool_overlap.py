"""benchmark/speed/envpool_overlap.py: the rollouts of ppo_atari_envpool.py's Agent (sync, two pools, one pool with
batch_size N/2; at fewer threads, sync at the default ones too) run on real envpool and are reported side by side with
the machine; bad sizes are refused."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "benchmark" / "speed" / "envpool_overlap.py"


def overlap(tmp_path, *flags):
    out = tmp_path / "overlap.json"
    result = subprocess.run([sys.executable, TOOL, "--num-envs", "4", "--num-steps", "8", *flags, "--json", out],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result, json.loads(out.read_text())


def test_every_rollout_is_timed_in_every_round(tmp_path):
    result, report = overlap(tmp_path, "--pairs", "2", "--pool-threads", "1", "--torch-threads", "1")
    assert len(report["rounds"]) == 2 and " cores" in report["machine"] and report["options"]["pool_threads"] == 1
    for row in report["rounds"]:  # at the threads asked for, and the script's rollout at its default threads
        for way in ("two-pools", "one-pool"):
            assert row[way] > 0 and row[f"{way}_ratio"] == pytest.approx(row[way] / row["sync"])
            assert row[f"{way}_default_ratio"] == pytest.approx(row[way] / row["sync-default"])
    last = result.stdout.splitlines()[-1]
    assert "torch threads 1, pool threads 1 (sync-default: torch threads" in last
    assert f"one-pool / sync x{report['median']['one-pool_ratio']:.2f}" in last
    assert f"one-pool / sync-default x{report['median']['one-pool_default_ratio']:.2f}" in last


def test_at_the_default_threads_sync_is_the_scripts_rollout(tmp_path):
    result, report = overlap(tmp_path, "--pairs", "1")
    assert set(report["median"]) == {"sync", "two-pools", "one-pool", "two-pools_ratio", "one-pool_ratio"}
    assert "sync-default" not in result.stdout


@pytest.mark.parametrize("args, text", [(["--num-envs", "3"], "--num-envs must be even"),
                                        (["--pool-threads", "-1"], "--pool-threads must be 0"),
                                        (["--num-steps", "0"], "--num-steps must be at least 1")])
def test_bad_sizes_are_refused(args, text):
    result = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and text in result.stderr
