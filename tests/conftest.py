"""Test fixtures; the helpers that run a copy of a script and read its logs live in benchmark/common.py."""
import os
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


def assert_bad_input(result, workdir, text):
    """The bad-input rule: exit status 2, one stderr line naming the flag, nothing written."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0] and ": error: " in lines[0], result.stderr[-3000:]
    assert not (Path(workdir) / "runs").exists() and not (Path(workdir) / "wandb").exists()


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX scripts run as subprocesses share compiled programs through JAX's persistent cache."""
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.mktemp("jax_cache")))
