"""ppo_kinetix_sfl.py: training vs random-action steps/s, weak scaling over devices, time to the first update.

Three measurements, each of a copy of the script run from a temporary directory:
- `throughput` (default): in this process, random-action stepping of the script's own environment,
  sharded over the same devices at the same --num-envs with `shard_map` (timed after compilation);
  then training for --iterations updates (one SFL buffer refresh, before the first update; no
  evaluation), each update timed from the wall times of its TensorBoard events, the first dropped.
- `weak-scaling`: `throughput` at 1, 2 and 4 devices (forced host devices on a CPU) with
  --envs-per-device envs on each, reporting steps/s per device.
- `first-update`: seconds from launch to the first logged update (compilation + the first SFL
  buffer + the first update) and to the first buffer, with the script's defaults unless flags follow;
  with --against REV, also of the script as it was at git revision REV, right after in each repeat
  (the order alternating between repeats), and their ratio.

    python benchmark/speed/sfl_steps_per_second.py throughput --env-size s --num-envs 256 --num-steps 64
    python benchmark/speed/sfl_steps_per_second.py weak-scaling --env-size s --envs-per-device 64 --num-steps 64
    python benchmark/speed/sfl_steps_per_second.py first-update --env-size s --num-envs 256 -- --sfl-num-candidates 256
    python benchmark/speed/sfl_steps_per_second.py first-update --against cc2b0cf --repeats 3 -- --sfl-num-candidates 256

Flags after `--` go to the script.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import (ROOT, jax_machine, load_script, read_tensorboard_run, repeat_and_report, run_dirs, script_at,
                    update_wall_times)

SCRIPT = "ppo_kinetix_sfl"


def forced_devices(n):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"} if n else {}


def filter_pool(num_envs, devices=1):
    """A pool of Kinetix's level filter that divides each device's fresh levels (rho 0.5): the script's 512 if it can."""
    return math.gcd(512, max(num_envs // 2 // devices, 1))


def script_flags(opts, num_envs, devices=1):
    return ["--env-size", opts.env_size, "--model", opts.model, "--num-envs", num_envs, "--num-steps", opts.num_steps,
            "--level-filter-pool", filter_pool(num_envs, devices), *opts.extra]


def random_action_sps(opts, scans):
    """Random actions on the script's environment, split over this process's devices like its training."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    module = load_script(SCRIPT)
    args = module.resolve_args(module.RunArgs(env_size=opts.env_size, model=opts.model, num_envs=opts.num_envs,
                                           num_steps=opts.num_steps, sfl_num_candidates=opts.num_envs,
                                           sfl_buffer_size=1, num_minibatches=1, filter_levels=False))
    env = module.make_env(args)
    local = args.num_envs // args.num_devices
    dims = jnp.asarray(env.action_dims)

    def rollout(rng):  # one device's share: fresh levels, reset, --num-steps random-action steps
        ids = jax.lax.axis_index("d") * local + jnp.arange(local)
        keyed = lambda fn, key, *a: jax.vmap(lambda i, *b: fn(jax.random.fold_in(key, i), *b))(ids, *a)
        k_levels, k_reset, k_run = jax.random.split(rng, 3)
        levels = env.sample_levels(jax.random.fold_in(k_levels, jax.lax.axis_index("d")), local)  # plain random levels
        _, state = keyed(env.reset, k_reset, levels)

        def body(state, key):
            k_action, k_env = jax.random.split(key)
            action = keyed(lambda k: jax.random.randint(k, (len(env.action_dims),), 0, dims), k_action)
            _, state, reward, _, _ = keyed(env.step, k_env, state, action, levels)
            return state, reward.sum()

        _, rewards = jax.lax.scan(body, state, jax.random.split(k_run, args.num_steps))
        return jax.lax.psum(rewards.sum(), "d")

    mesh = Mesh(np.array(jax.devices()), ("d",))
    rollout = jax.jit(jax.shard_map(rollout, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False))
    jax.block_until_ready(rollout(jax.random.PRNGKey(0)))  # compile
    start = time.perf_counter()
    jax.block_until_ready([rollout(jax.random.PRNGKey(1 + i)) for i in range(scans)])
    # level sampling and resets are included, as in training, where every update starts on new levels
    return scans * args.num_steps * args.num_envs / (time.perf_counter() - start), args.num_devices


def train_sps(opts):
    import jax

    flags = script_flags(opts, opts.num_envs, jax.device_count()) + [
        "--total-timesteps", opts.num_envs * opts.num_steps * opts.iterations, "--eval-every", 0,
        "--sfl-update-period", opts.iterations, "--sfl-num-candidates", opts.num_envs,  # one small buffer refresh
        "--sfl-buffer-size", min(1024, opts.num_envs),
    ]
    ends, _ = update_wall_times(SCRIPT, flags)
    return opts.num_envs * opts.num_steps / float(np.median(np.diff(ends)))


def throughput(opts):
    def measure():
        raw, devices = random_action_sps(opts, opts.scans)
        train = train_sps(opts)
        return {"devices": devices, "raw_sps": raw, "train_sps": train, "ratio": train / raw,
                "train_sps_per_device": train / devices}

    def describe(r):
        return (f"{r['devices']:.0f} device(s): random actions {r['raw_sps']:,.0f} steps/s, training {r['train_sps']:,.0f} "
                f"steps/s ({r['train_sps_per_device']:,.0f} per device), ratio {r['ratio']:.3f}")

    return repeat_and_report(opts, measure, describe, f"{opts.model}, size {opts.env_size}, {opts.num_envs} envs x {opts.num_steps} steps",
                             jax_machine())


def weak_scaling(opts):
    """`throughput` in a fresh process per device count (the device count is fixed when jax starts)."""
    rows = []
    for devices in opts.devices:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, __file__, "throughput", "--env-size", opts.env_size, "--model", opts.model,
                       "--num-envs", str(opts.envs_per_device * devices), "--num-steps", str(opts.num_steps),
                       "--iterations", str(opts.iterations), "--scans", str(opts.scans), "--repeats", str(opts.repeats),
                       "--json", out.name, "--", *map(str, opts.extra)]
            subprocess.run(command, check=True, env=dict(os.environ, **forced_devices(devices)))
            rows.append(json.load(open(out.name))["median"])
    print(f"weak scaling ({opts.model}, size {opts.env_size}, {opts.envs_per_device} envs per device x {opts.num_steps} steps, {jax_machine()}):")
    print("| devices | envs | training steps/s | per device | random-action steps/s |")
    for r in rows:
        print(f"| {r['devices']:.0f} | {r['devices'] * opts.envs_per_device:.0f} | {r['train_sps']:,.0f} | "
              f"{r['train_sps_per_device']:,.0f} | {r['raw_sps']:,.0f} |")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "machine": jax_machine(), "rows": rows}, f, indent=2)


def first_update(opts):
    flags = ["--env-size", opts.env_size, "--model", opts.model, "--num-envs", opts.num_envs,
             "--level-filter-pool", filter_pool(opts.num_envs), "--eval-every", 0, *opts.extra]

    earlier = script_at(SCRIPT, opts.against, tempfile.mkdtemp()) if opts.against else None
    repeats = []

    def measure():
        if not earlier:
            return cold_start(ROOT / "cleanrl_scale" / f"{SCRIPT}.py")
        order = ["this", "earlier"] if len(repeats) % 2 == 0 else ["earlier", "this"]  # A B, then B A, ...
        repeats.append(order)
        times = {who: cold_start(ROOT / "cleanrl_scale" / f"{SCRIPT}.py" if who == "this" else earlier) for who in order}
        return {**times["this"], "earlier_first_update_s": times["earlier"]["first_update_s"],
                "speedup": times["earlier"]["first_update_s"] / times["this"]["first_update_s"]}

    def cold_start(script):
        with tempfile.TemporaryDirectory() as tmp, open(os.path.join(tmp, "stderr.txt"), "w+") as log:
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
            env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # cold: the persistent cache off, at any revision
            launched = time.time()
            process = subprocess.Popen([sys.executable, str(script), *map(str, flags)],
                                       cwd=tmp, env=dict(env, WANDB_MODE="offline"), stdout=subprocess.DEVNULL, stderr=log)
            while True:  # the run is long: stop it once its first update is logged
                time.sleep(5)
                runs = run_dirs(tmp)
                scalars = read_tensorboard_run(runs[0])[0] if runs else {}
                if "charts/SPS" in scalars or process.poll() is not None:
                    break
            process.kill()
            process.wait()
            if "charts/SPS" not in scalars:
                log.seek(0)
                raise SystemExit(f"{SCRIPT} ended before its first update:\n{log.read()[-3000:]}")
        return {"first_buffer_s": scalars["sfl/mean_learnability"][0].wall_time - launched,
                "first_update_s": scalars["charts/SPS"][0].wall_time - launched}

    def describe(r):
        return (f"first SFL buffer after {r['first_buffer_s']:.0f} s, first update logged after {r['first_update_s']:.0f} s"
                + (f"; at {opts.against}: {r['earlier_first_update_s']:.0f} s, this one x{r['speedup']:.2f} sooner"
                   if earlier else ""))

    return repeat_and_report(opts, measure, describe, f"{opts.model}, size {opts.env_size}, {opts.num_envs} envs, {' '.join(map(str, opts.extra)) or 'defaults'}",
                             jax_machine())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["throughput", "weak-scaling", "first-update"])
    parser.add_argument("--env-size", default="s")
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--envs-per-device", type=int, default=64, help="weak-scaling: envs on each device")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4], help="weak-scaling: device counts")
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5, help="training updates per measurement")
    parser.add_argument("--scans", type=int, default=3, help="timed random-action rollouts of --num-steps steps")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--against", metavar="REV", help="first-update: also time the script as it was at this git revision")
    parser.add_argument("--json", help="also write the results to this file")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)  # what follows -- goes to the script
    opts = parser.parse_args(argv[:split])
    opts.extra = argv[split + 1:]
    {"throughput": throughput, "weak-scaling": weak_scaling, "first-update": first_update}[opts.mode](opts)


if __name__ == "__main__":
    main()
