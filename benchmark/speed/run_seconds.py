"""What a grid's run costs: whole-process seconds of ppo_ewma_jax.py at two budgets, as a launched run trains.

Each repeat: a copy of the script from a temporary directory trains --total-timesteps B1, then B2 (> B1), the same
flags otherwise (the script's own --fuse-iterations, JAX's persistent cache off, so each compiles cold). A run's
seconds are about fixed + steps / rate: reported are rate = (B2 - B1) x seeds / (T2 - T1), the steady environment
steps a second summed over --num-seeds, and fixed = T1 - B1 x seeds / rate (start-up and compilation). A grid's
GPU-hours are then runs x (fixed + budget x seeds / rate), per process. The median over repeats.

    python benchmark/speed/run_seconds.py --budgets 1000000 3000000 -- --env-id Breakout-MinAtar --num-envs 8 \\
        --num-steps 128 --num-seeds 10
"""
import sys
import argparse
import tempfile
import time

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import jax_machine, repeat_and_report, run_copy  # noqa: E402

SCRIPT = "ppo_ewma_jax"


def seconds(flags, budget):
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_copy(SCRIPT, [*flags, "--total-timesteps", budget, "--no-compile-cache"], tmp)
        elapsed = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{SCRIPT} failed:\n{result.stderr[-3000:]}")
    return elapsed


def rate_and_fixed(low, high, t_low, t_high, seeds=1):
    """(steps/s summed over the seeds, fixed seconds) from the seconds of runs of `low` and `high` steps a seed; both
    NaN where the extra steps took no longer (the processes' spread hides them: no negative or infinite rate)."""
    if t_high <= t_low:
        return float("nan"), float("nan")
    rate = (high - low) * seeds / (t_high - t_low)
    return rate, t_low - low * seeds / rate


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, nargs=2, required=True, metavar=("B1", "B2"),
                        help="--total-timesteps of the two runs (per seed)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("flags", nargs="*", help="the script's flags, after --")
    opts = parser.parse_args()
    low, high = opts.budgets
    if not 0 < low < high or opts.repeats < 1:
        parser.error("--budgets must be 0 < B1 < B2 and --repeats at least 1")
    seeds = int(opts.flags[opts.flags.index("--num-seeds") + 1]) if "--num-seeds" in opts.flags else 1

    def measure():
        t_low, t_high = seconds(opts.flags, low), seconds(opts.flags, high)
        rate, fixed = rate_and_fixed(low, high, t_low, t_high, seeds)
        return {"low_s": t_low, "high_s": t_high, "steps_per_s": rate, "fixed_s": fixed}

    def describe(r):
        timed = f"{low:,} steps {r['low_s']:.1f} s, {high:,} steps {r['high_s']:.1f} s: "
        if r["steps_per_s"] != r["steps_per_s"]:
            return timed + "unresolved (the extra steps took less than the processes' spread; raise B2)"
        return timed + f"{r['steps_per_s']:,.0f} steps/s over {seeds} seed(s), fixed {r['fixed_s']:.1f} s"

    repeat_and_report(opts, measure, describe, " ".join(opts.flags), jax_machine())


if __name__ == "__main__":
    main()
