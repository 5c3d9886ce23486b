"""What --num-seeds saves: ppo_ewma_jax.py training K seeds in one program against one seed, whole processes.

Each repeat, in turn (the order alternating): a copy of the script from a temporary directory with --num-seeds 1,
then with --num-seeds K, the same flags otherwise (every seed trains the same --total-timesteps; JAX's persistent
cache off, so both compile cold). Reported: both wall times and their ratio (K seeds' seconds / one seed's; K
separate runs would take about K times one), the median over repeats.

    python benchmark/speed/seeds_per_second.py --num-seeds 8 --repeats 3 -- --env-id CartPole-v1 --num-envs 16 \\
        --num-steps 128 --num-minibatches 4 --update-epochs 4 --total-timesteps 262144
"""
import sys
import argparse
import tempfile
import time

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import jax_machine, repeat_and_report, run_copy  # noqa: E402

SCRIPT = "ppo_ewma_jax"


def timed(flags):
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_copy(SCRIPT, [*flags, "--no-compile-cache"], tmp)
        seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{SCRIPT} failed:\n{result.stderr[-3000:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-seeds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("flags", nargs="*", help="the script's flags, after --")
    opts = parser.parse_args()
    if opts.num_seeds < 2 or opts.repeats < 1:
        parser.error("--num-seeds must be at least 2 and --repeats at least 1")
    counter = {"repeat": 0}

    def measure():
        order = [1, opts.num_seeds][:: 1 if counter["repeat"] % 2 == 0 else -1]
        counter["repeat"] += 1
        seconds = {k: timed([*opts.flags, "--num-seeds", k]) for k in order}
        return {"one_seed_s": seconds[1], "seeds_s": seconds[opts.num_seeds],
                "ratio": seconds[opts.num_seeds] / seconds[1]}

    def describe(r):
        return (f"1 seed {r['one_seed_s']:.1f} s, {opts.num_seeds} seeds {r['seeds_s']:.1f} s, "
                f"ratio x{r['ratio']:.2f} (separate runs: x{opts.num_seeds})")

    repeat_and_report(opts, measure, describe, " ".join(opts.flags), jax_machine())


if __name__ == "__main__":
    main()
