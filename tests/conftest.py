"""Test fixtures and the suite's order; the helpers tests share live in tests/helpers.py."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.common import load_script  # noqa: E402


@pytest.fixture(scope="session")
def ppo_atari():
    return load_script("ppo_atari_envpool")


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX scripts run as subprocesses share compiled programs through JAX's persistent cache, one for both
    pytest-xdist workers (a size limit turns on the cache's file lock: two workers may write one program)."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root  # the workers' common temporary directory
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # a cache of one's own is left as it is
        (root / "jax_cache").mkdir(exist_ok=True)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(root / "jax_cache")
        os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(16 * 2**30)


def pytest_collection_modifyitems(config, items):
    """The files with the longest `shared_runs` first (pytest.ini's --no-loadscope-reorder keeps this order); within
    a file, and among the rest, the order stays."""
    minutes = {}
    for item in items:
        for defs in item._fixtureinfo.name2fixturedefs.values():
            cost = getattr(defs[-1].func, "shared_runs_minutes", 0)
            minutes[item.path] = max(minutes.get(item.path, 0), cost)
    items.sort(key=lambda item: -minutes[item.path])
