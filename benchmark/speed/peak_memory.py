"""Peak resident memory of one training iteration of a script (the process and its env threads).

    python benchmark/speed/peak_memory.py --num-envs 1024 --num-steps 128
    python benchmark/speed/peak_memory.py --num-envs 1024 --num-steps 128 --against 65c60a7 -- --dynamics-every 1

Runs a copy of the script for exactly one iteration (--total-timesteps = num-envs x num-steps) and
reads the child's peak RSS from its own rusage (os.wait4); also prints what the observations alone
would take in float32, as CleanRL stores them. --against REV then runs the script as it was at git
revision REV the same way, and prints both peaks.
"""
import sys
import argparse
import os
import platform
import tempfile
import time

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import script_at, start_copy  # noqa: E402


OBSERVATION = {"ppo_procgen_envpool": 64 * 64 * 3}  # values a frame; the Atari scripts' 4 x 84 x 84 otherwise


def peak_gib(script, args, source=None):
    """(peak RSS in GiB, seconds) of one run of a copy of `script` (its output goes to this terminal)."""
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        process = start_copy(script, args, tmp, capture=False, source=source)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak, not the largest of every child's
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{script} failed (exit {process.returncode})")
    return usage.ru_maxrss / 2**20, time.time() - start  # KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_atari_envpool")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--against", metavar="REV", help="also measure the script as it was at this git revision")
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    opts = parser.parse_args()
    batch = opts.num_envs * opts.num_steps
    args = ["--num-envs", opts.num_envs, "--num-steps", opts.num_steps, "--total-timesteps", batch, *opts.extra]
    machine = f"{platform.machine()} ({os.cpu_count()} cores)"
    sides = [("this script", None)]
    if opts.against:
        sides.append((f"at {opts.against}", script_at(opts.script, opts.against, tempfile.mkdtemp())))
    for name, source in sides:
        peak, seconds = peak_gib(opts.script, args, source)
        print(f"{opts.script} {name} {opts.num_envs} envs x {opts.num_steps} steps {' '.join(map(str, opts.extra))}, "
              f"one iteration in {seconds:.0f} s on {machine}: peak RSS {peak:.2f} GiB (float32 observations alone "
              f"would take {batch * OBSERVATION.get(opts.script, 4 * 84 * 84) * 4 / 2**30:.1f} GiB)", flush=True)


if __name__ == "__main__":
    main()
