"""Training steps/s of ppo_ewma_jax.py (or ppo_ewma_brax.py, for a Brax --env-id) vs random-action stepping of the same
vmapped environment.

Each repeat, in this one process on this one machine: (1) the environment's limit: a jitted
`lax.scan` of --num-steps random-action steps of the script's own vmapped environment (same
morphologies, same auto-reset) at the same --num-envs, timed after compilation; (2) train a copy of
the script from a temporary directory for --iterations iterations (no evaluation) and time every
iteration from the wall times of its TensorBoard events, the first (compilation) dropped. Also
reports the time from launch to the first logged iteration (mostly compilation). With --num-seeds K after --, the
training steps/s are summed over the K seeds one process trains (the ratio is one seed's training against the random
actions of one seed's envs). ppo_ewma_jax.py splits its envs over every device the process sees (CUDA_VISIBLE_DEVICES):
the training steps/s are also given per device (the random actions run on one device).

    python benchmark/speed/jax_steps_per_second.py --env-size m --num-envs 512 --num-steps 32 --repeats 3
    python benchmark/speed/jax_steps_per_second.py --env-id ant --num-envs 256 --num-steps 10 --repeats 3
"""
import sys
import argparse
import time

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import jax_machine, load_script, on_one_device, repeat_and_report, update_wall_times  # noqa: E402

def script_of(env_id):
    """The script that trains env_id: ppo_ewma_jax.py (Kinetix locomotion, gymnax) or ppo_ewma_brax.py (Brax)."""
    return "ppo_ewma_jax" if env_id == "locomotion" or env_id in gymnax.registered_envs else "ppo_ewma_brax"


def env_functions(module, args):
    """(reset(keys), step(keys, state, action) -> (obs, state, reward, ...), random action(key)) of the script's env."""
    env = module.make_env(args)
    if not hasattr(env, "sample_levels"):  # ppo_ewma_brax.py (its statistics pooled over the devices): uniform in the bounds
        return (on_one_device(env.reset), on_one_device(env.step),
                lambda key: jax.random.uniform(key, (args.num_envs, env.action_size), minval=-1.0, maxval=1.0))
    levels = jax.jit(env.sample_levels)(jax.random.PRNGKey(args.seed))
    dims = jnp.asarray(env.action_dims)
    ids = jnp.arange(args.num_envs) % args.num_morphologies
    return (lambda keys: env.reset(keys, levels, ids), lambda keys, state, action: env.step(keys, state, action, levels, ids),
            lambda key: jax.random.randint(key, (args.num_envs, len(env.action_dims)), 0, dims))


def random_action_sps(module, args, scans):
    reset, step, random_action = env_functions(module, args)

    @jax.jit
    def rollout(state, rng):
        def body(state, rng):
            k_action, k_env = jax.random.split(rng)
            _, state, reward, *_ = step(jax.random.split(k_env, args.num_envs), state, random_action(k_action))
            return state, reward.sum()

        return jax.lax.scan(body, state, jax.random.split(rng, args.num_steps))

    _, state = jax.jit(reset)(jax.random.split(jax.random.PRNGKey(0), args.num_envs))
    for warmup in range(2):  # compiles for the reset state, then once more for the stepped state's (non-weak) types
        state, _ = jax.block_until_ready(rollout(state, jax.random.PRNGKey(warmup)))
    start = time.perf_counter()
    for i in range(scans):
        state, rewards = rollout(state, jax.random.PRNGKey(2 + i))
    jax.block_until_ready(rewards)
    return scans * args.num_steps * args.num_envs / (time.perf_counter() - start)


def train_sps(script, flags, iterations, batch):
    # one iteration a call, so that each has its own TensorBoard wall time
    # cold: the first iteration's time is the compilation's (the script's persistent cache is on by default)
    evaluation = ["--eval-every", 0] if "--env-size" in flags else []  # locomotion's: no evaluation
    ends, launched = update_wall_times(script, [*flags, "--total-timesteps", batch * iterations, *evaluation,
                                                "--fuse-iterations", 1, "--no-compile-cache"])
    return batch / float(np.median(np.diff(ends))), ends[0] - launched


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="locomotion")
    parser.add_argument("--env-size", default="m", help="locomotion only")
    parser.add_argument("--num-morphologies", type=int, default=512, help="locomotion only")
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=6, help="training iterations per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scans", type=int, default=5, help="timed random-action rollouts of --num-steps steps")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    opts = parser.parse_args()
    script = script_of(opts.env_id)
    module = load_script(script)
    locomotion = dict(env_size=opts.env_size, num_morphologies=opts.num_morphologies) if opts.env_id == "locomotion" else {}
    flags = ["--env-id", opts.env_id, *[x for k, v in locomotion.items() for x in (f"--{k.replace('_', '-')}", v)],
             "--num-envs", opts.num_envs, "--num-steps", opts.num_steps, *opts.extra]
    args = module.resolve_args(module.RunArgs(env_id=opts.env_id, num_envs=opts.num_envs, num_steps=opts.num_steps,
                                           num_minibatches=1, **locomotion))
    seeds = int(opts.extra[opts.extra.index("--num-seeds") + 1]) if "--num-seeds" in opts.extra else 1
    batch = opts.num_envs * opts.num_steps

    devices = getattr(args, "num_devices", 0) or 1  # the devices the script's copy splits its envs over

    def measure():
        raw = random_action_sps(module, args, opts.scans)
        train, first = train_sps(script, flags, opts.iterations, batch)
        train *= seeds  # summed over the seeds one process trains (--num-seeds after --)
        # the ratio per seed: the random-action rate is of one seed's envs
        return {"raw_sps": raw, "train_sps": train, "ratio": train / seeds / raw, "first_iteration_s": first,
                "devices": devices, "train_sps_per_device": train / devices}

    def describe(r):
        return (f"random actions {r['raw_sps']:,.0f} steps/s, training {r['train_sps']:,.0f} steps/s"
                + (f" on {r['devices']:.0f} devices, {r['train_sps_per_device']:,.0f} per device" if r["devices"] > 1 else "")
                + f", ratio {r['ratio']:.3f}, first iteration logged after {r['first_iteration_s']:.0f} s")

    repeat_and_report(opts, measure, describe,
                      f"{opts.env_id}{f' size {opts.env_size}' if opts.env_id == 'locomotion' else ''}, "
                      f"{opts.num_envs} envs x {opts.num_steps} steps", jax_machine())

if __name__ == "__main__":
    main()
