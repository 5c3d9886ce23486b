"""Test fixtures; the helpers that run a copy of a script and read its logs live in benchmark/common.py."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.common import finish, load_script, read_run, run_copy, run_dirs, start_copy  # noqa: E402,F401


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


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l}, summed forward until the episode ends."""
    T, N = rewards.shape
    values_ext = np.concatenate([values, next_value[None]])
    dones_ext = np.concatenate([dones, next_done[None]])
    adv = np.zeros((T, N))
    for env in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                notdone = 1.0 - dones_ext[k + 1, env]
                delta = rewards[k, env] + gamma * values_ext[k + 1, env] * notdone - values_ext[k, env]
                total += weight * delta
                if notdone == 0.0:
                    break
                weight *= gamma * lam
            adv[t, env] = total
    return adv


def finish_ok(process, workdir, timeout=900):
    """Wait for a started copy that must succeed: (run_dir, result, scalars, texts) of its one run."""
    result = finish(process, timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = run_dirs(workdir)
    return (run_dir, result, *read_values(run_dir))


def run_ok(script, args, workdir, timeout=900, extra_env=None):
    """Run a copy of `script` that must succeed: (run_dir, result, scalars, texts) of its one run."""
    return finish_ok(start_copy(script, args, workdir, extra_env=extra_env), workdir, timeout)
