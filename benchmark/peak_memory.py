"""Peak resident memory of one training iteration of a script (the process and its env threads).

    python benchmark/peak_memory.py --num-envs 1024 --num-steps 128

Runs a copy of the script for exactly one iteration (--total-timesteps = num-envs x num-steps) and
reads the child's peak RSS from getrusage; also prints what the observations alone would take in
float32, as CleanRL stores them.
"""
import argparse
import platform
import resource
import tempfile
import time

from common import run_copy


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_atari_envpool")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    opts = parser.parse_args()
    batch = opts.num_envs * opts.num_steps
    args = ["--num-envs", opts.num_envs, "--num-steps", opts.num_steps, "--total-timesteps", batch, *opts.extra]
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_copy(opts.script, args, tmp)
    if result.returncode:
        raise SystemExit(f"{opts.script} failed:\n{result.stderr[-3000:]}")
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    float32_obs_gib = batch * 4 * 84 * 84 * 4 / 2**30
    print(f"{opts.script} {opts.num_envs} envs x {opts.num_steps} steps, one iteration in {time.time() - start:.0f} s "
          f"on {platform.machine()} ({__import__('os').cpu_count()} cores): peak RSS {peak_gib:.2f} GiB "
          f"(float32 observations alone would take {float32_obs_gib:.1f} GiB)")


if __name__ == "__main__":
    main()
