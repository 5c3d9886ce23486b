"""Test fixtures, the suite's threads and order; the helpers tests share live in tests/helpers.py."""
import os
import resource
import sys
from pathlib import Path

import pytest

# pytest.ini runs 2 workers on this CPU's 2 cores, each starting runs of its own: one OpenMP thread per torch process
# (set before anything imports torch; the runs inherit it). OpenMP's threads spin while they wait, and 2 workers' runs
# of 2 threads each took turns spinning: 3 tiny ppo_atari_envpool runs at once took 154 s with torch's default threads
# and 41 s with one each (22.6 s alone). JAX's own threads do not spin so (3 CartPole runs at once: 69 s either way).
# A run's own --torch-threads still wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A run that dies of a fatal signal prints every thread's Python stack (faulthandler) into the stderr a test shows: a
# ppo_procgen_envpool.py resume exited with SIGSEGV after its last iteration once in CI (2026-11-30) and not in 36
# runs after it, and its stderr held nothing else.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.common import load_script  # noqa: E402
from helpers import FAST_COMPILE  # noqa: E402


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


@pytest.fixture(scope="module")
def fast_compile():
    """The runs a module's tests start (they inherit the environment) compile with XLA's CPU code generation at
    optimisation level 0 (helpers.FAST_COMPILE): for a file whose checks do not depend on how fast the machine code
    runs, and whose compared runs compile alike. This worker's own JAX keeps the default (its backend is started first:
    XLA reads the flags once); the persistent cache keeps the two kinds of program apart."""
    import jax

    jax.devices()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XLA_FLAGS", FAST_COMPILE)
        yield


@pytest.fixture
def default_compile(monkeypatch):
    """XLA's default code again for one test of such a module: a time limit, or a signal timed against the compute."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)


def pytest_collection_modifyitems(config, items):
    """The files with the longest `shared_runs` first (pytest.ini's --no-loadscope-reorder keeps this order); within
    a file, and among the rest, the order stays."""
    minutes = {}
    for item in items:
        for defs in item._fixtureinfo.name2fixturedefs.values():
            cost = getattr(defs[-1].func, "shared_runs_minutes", 0)
            minutes[item.path] = max(minutes.get(item.path, 0), cost)
    items.sort(key=lambda item: -minutes[item.path])


def cpu_seconds():
    """User and system CPU seconds of this process (all its threads) and of the children it has waited for (and
    theirs: a launcher's runs)."""
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Where a test's CPU seconds start: before its fixtures are set up (a module's shared runs count for the first
    test that asks for them)."""
    item.cpu_start = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each test's CPU seconds, its fixtures' set-up and teardown included, on its report: on 2 busy cores a test's
    wall time says as much about what ran beside it as about itself (a child still running at the test's end counts
    for the test that waits for it)."""
    outcome = yield
    if call.when == "teardown" and hasattr(item, "cpu_start"):
        outcome.get_result().user_properties.append(("cpu_seconds", cpu_seconds() - item.cpu_start))


def pytest_terminal_summary(terminalreporter):
    """Where the suite's time goes, file by file (pytest.ini's --durations names the slowest tests in wall time): the
    seconds each file's tests took, setup and teardown included, summed over both workers, and the CPU seconds they
    used; then the tests that used the most CPU."""
    seconds, cpu, tests = {}, {}, {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if hasattr(report, "duration") and hasattr(report, "nodeid"):
                path = report.nodeid.split("::")[0]
                seconds[path] = seconds.get(path, 0.0) + report.duration
                for name, value in getattr(report, "user_properties", ()):
                    if name == "cpu_seconds":
                        cpu[path] = cpu.get(path, 0.0) + value
                        tests[report.nodeid] = value
    if seconds:
        terminalreporter.section("seconds per test file (wall, CPU)")
        for path, total in sorted(seconds.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{total:8.1f}s {cpu.get(path, 0.0):8.1f}s {path}")
        terminalreporter.write_line(f"{sum(seconds.values()):8.1f}s {sum(cpu.values()):8.1f}s in all")
    if tests:
        terminalreporter.section("most CPU seconds")
        for nodeid, value in sorted(tests.items(), key=lambda item: -item[1])[:30]:
            terminalreporter.write_line(f"{value:8.1f}s {nodeid}")
