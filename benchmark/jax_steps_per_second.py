"""Training steps/s of ppo_ewma_jax.py vs random-action stepping of the same vmapped environment.

Each repeat, in this one process on this one machine: (1) the environment's limit: a jitted
`lax.scan` of --num-steps random-action steps of the script's own vmapped environment (same
morphologies, same auto-reset) at the same --num-envs, timed after compilation; (2) train a copy of
the script from a temporary directory for --iterations iterations (no evaluation) and time every
iteration from the wall times of its TensorBoard events, the first (compilation) dropped. Also
reports the time from launch to the first logged iteration (mostly compilation). With --num-seeds K after --, the
training steps/s are summed over the K seeds one process trains (the ratio is one seed's training against the random
actions of one seed's envs).

    python benchmark/jax_steps_per_second.py --env-size m --num-envs 512 --num-steps 32 --repeats 3
    python benchmark/jax_steps_per_second.py --env-id ant --num-envs 256 --num-steps 10 --repeats 3
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from common import jax_machine, load_script, repeat_and_report, update_wall_times

SCRIPT = "ppo_ewma_jax"


def random_action_sps(module, args, scans):
    env = module.make_env(args)
    levels = jax.jit(env.sample_levels)(jax.random.PRNGKey(args.seed))
    dims = jnp.asarray(env.action_dims)
    ids = jnp.arange(args.num_envs) % args.num_morphologies

    @jax.jit
    def rollout(state, rng, levels, ids):
        def body(state, rng):
            k_action, k_env = jax.random.split(rng)
            if env.continuous:  # uniform in the action bounds
                action = jax.random.uniform(k_action, (args.num_envs, env.action_dims[0]), minval=-1.0, maxval=1.0)
            else:
                action = jax.random.randint(k_action, (args.num_envs, len(env.action_dims)), 0, dims)
            _, state, reward, *_ = env.step(jax.random.split(k_env, args.num_envs), state, action, levels, ids)
            return state, reward.sum()

        return jax.lax.scan(body, state, jax.random.split(rng, args.num_steps))

    _, state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), args.num_envs), levels, ids)
    for warmup in range(2):  # compiles for the reset state, then once more for the stepped state's (non-weak) types
        state, _ = jax.block_until_ready(rollout(state, jax.random.PRNGKey(warmup), levels, ids))
    start = time.perf_counter()
    for i in range(scans):
        state, rewards = rollout(state, jax.random.PRNGKey(2 + i), levels, ids)
    jax.block_until_ready(rewards)
    return scans * args.num_steps * args.num_envs / (time.perf_counter() - start)


def train_sps(flags, iterations, batch):
    # one iteration a call, so that each has its own TensorBoard wall time
    # cold: the first iteration's time is the compilation's (the script's persistent cache is on by default)
    ends, launched = update_wall_times(SCRIPT, [*flags, "--total-timesteps", batch * iterations, "--eval-every", 0,
                                                "--fuse-iterations", 1, "--no-compile-cache"])
    return batch / float(np.median(np.diff(ends))), ends[0] - launched


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="locomotion")
    parser.add_argument("--env-size", default="m")
    parser.add_argument("--num-morphologies", type=int, default=512)
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=6, help="training iterations per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scans", type=int, default=5, help="timed random-action rollouts of --num-steps steps")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    opts = parser.parse_args()
    module = load_script(SCRIPT)
    flags = ["--env-id", opts.env_id, "--env-size", opts.env_size, "--num-morphologies", opts.num_morphologies,
             "--num-envs", opts.num_envs, "--num-steps", opts.num_steps, *opts.extra]
    args = module.resolve_args(module.Args(env_id=opts.env_id, env_size=opts.env_size, num_morphologies=opts.num_morphologies,
                                           num_envs=opts.num_envs, num_steps=opts.num_steps, num_minibatches=1))
    seeds = int(opts.extra[opts.extra.index("--num-seeds") + 1]) if "--num-seeds" in opts.extra else 1
    batch = opts.num_envs * opts.num_steps

    def measure():
        raw = random_action_sps(module, args, opts.scans)
        train, first = train_sps(flags, opts.iterations, batch)
        train *= seeds  # summed over the seeds one process trains (--num-seeds after --)
        # the ratio per seed: the random-action rate is of one seed's envs
        return {"raw_sps": raw, "train_sps": train, "ratio": train / seeds / raw, "first_iteration_s": first}

    def describe(r):
        return (f"random actions {r['raw_sps']:,.0f} steps/s, training {r['train_sps']:,.0f} steps/s, "
                f"ratio {r['ratio']:.3f}, first iteration logged after {r['first_iteration_s']:.0f} s")

    repeat_and_report(opts, measure, describe,
                      f"{opts.env_id}{f' size {opts.env_size}' if opts.env_id == 'locomotion' else ''}, "
                      f"{opts.num_envs} envs x {opts.num_steps} steps", jax_machine())

if __name__ == "__main__":
    main()
