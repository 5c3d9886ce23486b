"""benchmark/speed/gpu_check.sh, benchmark/speed/profile_jax.py and benchmark/speed/run_seconds.py: without a GPU the check stops before
any run; the trace reader sums a real profiler trace's events by name; two budgets' seconds give a run's rate."""
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmark" / "speed"))
import profile_jax  # noqa: E402


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be present: the check would run")
def test_without_a_gpu_it_stops_before_any_run(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "benchmark" / "speed" / "gpu_check.sh"), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300,
                            env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "PYTHON": sys.executable})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "JAX's default backend is not a GPU; nothing run" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_trace_is_summed_by_event_name(tmp_path):
    f = jax.jit(lambda x: jnp.sin(x @ x.T).sum())
    x = jnp.ones((256, 256))
    jax.block_until_ready(f(x))
    with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
        jax.block_until_ready(f(x))
    totals = profile_jax.kernel_totals(tmp_path)
    assert totals and all(us >= 0 for us in totals.values()) and sum(totals.values()) > 0
    assert any("block_until_ready" in name or "Execute" in name for name in totals)  # the host's events on a CPU


def test_a_variant_is_a_flag_and_a_python_value():
    assert profile_jax.variant("unroll=4") == ("unroll", 4)
    assert profile_jax.variant("fuse-iterations=2") == ("fuse_iterations", 2)
    assert profile_jax.variant("ewma_com=None") == ("ewma_com", None)
    for bad in ("unroll", "=4", "unroll="):
        with pytest.raises(Exception, match="expected flag=value"):
            profile_jax.variant(bad)


def test_a_variant_that_is_no_flag_stops_before_any_run():
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "profile_jax.py"), "--variant", "unrol=4"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "--variant unrol: not a flag of ppo_ewma_jax.py" in result.stderr


def test_an_xla_variant_is_xla_options_and_their_values():
    text = "xla_gpu_enable_command_buffer=FUSION,WHILE;xla_gpu_command_buffer_unroll_loops=True"
    assert profile_jax.xla_variant(text) == (text, {"xla_gpu_enable_command_buffer": "FUSION,WHILE",
                                                    "xla_gpu_command_buffer_unroll_loops": "True"})
    for bad in ("unroll=4", "xla_gpu_enable_command_buffer", "xla_a=1;", "xla_a="):
        with pytest.raises(Exception, match="expected xla_option=value"):
            profile_jax.xla_variant(bad)


def test_a_runs_seconds_at_two_budgets_give_its_rate_and_fixed_cost():
    import run_seconds

    # 10 seeds, 40 s fixed, 400k steps/s over the seeds: 0.5M and 1.5M steps a seed take 52.5 s and 77.5 s
    rate, fixed = run_seconds.rate_and_fixed(500_000, 1_500_000, 52.5, 77.5, seeds=10)
    assert rate == pytest.approx(400_000) and fixed == pytest.approx(40.0)
    for t_high in (52.5, 43.0):  # the extra steps hidden by the processes' spread: unresolved, not negative
        assert all(np.isnan(v) for v in run_seconds.rate_and_fixed(500_000, 1_500_000, 52.5, t_high, seeds=10))
