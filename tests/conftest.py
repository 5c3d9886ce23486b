"""Test fixtures; the helpers that run a copy of a script and read its logs live in benchmark/common.py."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.common import load_script, read_run, run_copy, run_dirs  # noqa: E402,F401


def read_values(run_dir):
    """({tag: [values]}, {tag: [texts]}) of a run."""
    scalars, texts = read_run(run_dir)
    return {tag: [e.value for e in events] for tag, events in scalars.items()}, texts


@pytest.fixture(scope="session")
def ppo_atari():
    return load_script("ppo_atari_envpool")
