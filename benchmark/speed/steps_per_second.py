"""Training steps/s of a torch Atari script vs raw envpool random-action steps/s at the same num-envs.

Each repeat, in this one process on this one machine: (1) step the script's own environment with
random actions; (2) train a copy of the script from a temporary directory for --iterations
iterations and time every iteration from the wall times of its TensorBoard events (the first
iteration, warm-up, is dropped). Also reports the amortised cost of the dynamics/ metrics: the
iterations that compute them against those that do not.

    python benchmark/speed/steps_per_second.py --script ppo_atari_envpool --num-envs 8 --repeats 3
    python benchmark/speed/steps_per_second.py --script ppo_atari_envpool --against a3e64c8   # before/after, side by side

--against REV also trains the script as it was at git revision REV, in the same repeat right after
the current one, and reports the ratio of the two training rates. --variant FLAGS likewise trains the current
script with FLAGS added, e.g. --variant=--compile: the compiled script beside the eager one (its first iteration,
which compiles, is dropped as every run's is; charts/first_iteration_seconds has its time).

    python benchmark/speed/steps_per_second.py --script ppo_atari_envpool --iterations 11 --variant=--compile
"""
import sys
import argparse
import shlex
import tempfile
import time

import numpy as np

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import load_script, read_tensorboard_run, repeat_and_report, run_copy, run_dirs, script_at  # noqa: E402


def raw_env_sps(module, env_id, num_envs, calls):
    envs = module.make_env(env_id, num_envs, 0)
    envs.reset()
    n = envs.action_space.n
    actions = np.random.default_rng(0).integers(0, n, size=(calls, num_envs))
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    elapsed = time.perf_counter() - start
    envs.close()
    return calls * num_envs / elapsed


def train_sps(script, env_id, num_envs, num_steps, iterations, dynamics_every, extra, source=None):
    batch = num_envs * num_steps
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--env-id", env_id, "--num-envs", num_envs, "--num-steps", num_steps,
                "--total-timesteps", batch * iterations, "--dynamics-every", dynamics_every, *extra]
        result = run_copy(script, args, tmp, source=source)
        if result.returncode:
            raise SystemExit(f"{script} failed:\n{result.stderr[-3000:]}")
        scalars, _ = read_tensorboard_run(run_dirs(tmp)[0])
    ends = [e.wall_time for e in scalars["charts/SPS"]]
    durations = np.diff(ends)  # iterations 2..n
    iters = np.arange(2, iterations + 1)
    measured = (iters % dynamics_every == 0) if dynamics_every else np.zeros_like(iters, dtype=bool)
    plain = durations[~measured]
    overhead = float("nan")
    if measured.any():
        overhead = (np.median(durations[measured]) - np.median(plain)) / (dynamics_every * np.median(plain))
    return batch / float(np.median(plain)), overhead


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_atari_envpool")
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=21, help="training iterations per repeat")
    parser.add_argument("--dynamics-every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--raw-calls", type=int, default=0, help="env.step calls for the raw rate (0 = ~20k steps)")
    parser.add_argument("--against", metavar="REV", help="also time the script as it was at this git revision")
    parser.add_argument("--variant", metavar="FLAGS", help="also time the script with these flags added (e.g. --compile)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    opts = parser.parse_args()
    try:
        variant = shlex.split(opts.variant) if opts.variant is not None else None
    except ValueError as e:
        parser.error(f"--variant {opts.variant!r}: {e}")
    if variant is not None and not variant:
        parser.error("--variant must name flags (got an empty string)")
    module = load_script(opts.script)
    calls = opts.raw_calls or max(100, 20000 // opts.num_envs)

    earlier = script_at(opts.script, opts.against, tempfile.mkdtemp()) if opts.against else None
    train = lambda source=None, extra=(): train_sps(opts.script, opts.env_id, opts.num_envs, opts.num_steps,
                                                    opts.iterations, opts.dynamics_every, [*opts.extra, *extra], source)

    def measure():
        raw = raw_env_sps(module, opts.env_id, opts.num_envs, calls)
        sps, overhead = train()
        row = {"raw_sps": raw, "train_sps": sps, "ratio": sps / raw, "dynamics_overhead": overhead}
        if earlier:
            row["earlier_sps"] = train(earlier)[0]
            row["speedup"] = sps / row["earlier_sps"]
        if variant:
            row["variant_sps"] = train(extra=variant)[0]
            row["variant_speedup"] = row["variant_sps"] / sps
        return row

    def describe(r):
        return (f"raw {r['raw_sps']:,.0f} steps/s, training {r['train_sps']:,.0f} steps/s, ratio {r['ratio']:.3f}, "
                f"dynamics overhead {100 * r['dynamics_overhead']:.2f}%"
                + (f"; at {opts.against}: {r['earlier_sps']:,.0f} steps/s, this one x{r['speedup']:.3f}" if earlier else "")
                + (f"; with {opts.variant}: {r['variant_sps']:,.0f} steps/s, x{r['variant_speedup']:.3f}" if variant else ""))

    repeat_and_report(opts, measure, describe, f"{opts.script}, {opts.env_id}, {opts.num_envs} envs x {opts.num_steps} steps")

if __name__ == "__main__":
    main()
