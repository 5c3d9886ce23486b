"""Does envpool's asynchronous API pay in ppo_atari_envpool.py's rollout on this machine? Rollout only, side by side.

    python benchmark/speed/envpool_overlap.py --num-envs 8 --num-steps 128 --pairs 5
    python benchmark/speed/envpool_overlap.py --num-envs 8 --num-steps 128 --pairs 5 --pool-threads 1 --torch-threads 1

The acting half of a PPO iteration (no update) with the script's own Agent, three or four ways, taking turns going
first:
- `sync`: the script's rollout: one envpool of N envs, `step(actions)` waits for all N;
- `two-pools`: two envpools of N/2 envs (seeds s and s + N/2: the same N environments), pipelined with
  `send` / `recv`: while one half's envs step in envpool's threads, the policy acts on the other half;
- `one-pool`: envpool's own asynchronous mode, one pool of N envs with `batch_size` N/2: `recv` returns the first
  N/2 envs to finish (any of the N, named by `info["env_id"]`), the policy acts on them and `send`s their actions;
- `sync-default` (only with --torch-threads or --pool-threads): `sync` at torch's and envpool's default threads, as
  the script runs, so that a way at fewer threads is compared, in the same rounds, with the rollout it would replace.
Each timed rollout is --num-steps steps of all N envs after one untimed rollout; reported: the median steps/s of each
way, and the medians of the per-round ratios to `sync` (and to `sync-default`) with their range. Every way draws the
same frames' worth of policy forward passes (the asynchronous ways in batches of N/2); on few cores, envpool's threads
(--pool-threads a pool; 0: envpool's default) and torch's (--torch-threads) share them, which is what decides whether
an overlap pays.
"""
import sys
import argparse
import json
import statistics
import time

import envpool
import torch

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import describe_machine, load_script  # noqa: E402

WAYS = ("sync", "two-pools", "one-pool")
BASELINES = {"sync": "_ratio", "sync-default": "_default_ratio"}  # the key suffix of a way's ratio to each


def act(agent, obs):
    with torch.inference_mode():
        return agent.get_action_and_value(torch.as_tensor(obs))[0].numpy()


def sync_rollout(agent, envs, obs, num_steps):
    for _ in range(num_steps):
        obs = envs.step(act(agent, obs))[0]
    return obs


def two_pools_rollout(agent, halves, num_steps):
    """Each half: recv its frames, act, send its actions; the other half's envs step meanwhile."""
    for _ in range(num_steps):
        for envs in halves:
            envs.send(act(agent, envs.recv()[0]))


def one_pool_rollout(agent, envs, num_steps):
    """2 x num_steps batches of the N/2 envs that finished first: as many env steps as the other ways."""
    for _ in range(2 * num_steps):
        obs, *_, info = envs.recv()
        envs.send(act(agent, obs), info["env_id"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=5, help="rounds of the ways")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--pool-threads", type=int, default=0, help="envpool's num_threads of every pool (0: its default)")
    parser.add_argument("--json", help="also write the results to this file")
    opts = parser.parse_args()
    if opts.num_envs < 2 or opts.num_envs % 2:
        parser.error("--num-envs must be even and at least 2")
    for flag in ("num_steps", "pairs"):
        if getattr(opts, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    for flag in ("torch_threads", "pool_threads"):
        if getattr(opts, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 (the default) or more")
    script = load_script("ppo_atari_envpool")
    default_threads = torch.get_num_threads()
    ways = WAYS + (("sync-default",) if opts.torch_threads or opts.pool_threads else ())
    if opts.torch_threads:
        torch.set_num_threads(opts.torch_threads)
    torch.manual_seed(0)
    half = opts.num_envs // 2

    def pool(num_envs, seed, threads=opts.pool_threads, **kw):  # the script's make_env, with threads and batch size
        return envpool.make(opts.env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=True, reward_clip=True,
                            seed=seed, num_threads=threads, **kw)

    envs = pool(opts.num_envs, 1)
    agent = script.Agent(envs.action_space.n).to(memory_format=torch.channels_last)  # as the script on a CPU
    halves = [pool(half, 1), pool(half, 1 + half)]
    one = pool(opts.num_envs, 1, batch_size=half)
    last = {"obs": envs.reset()[0]}  # the sync pools' frames, carried from one rollout to the next
    if "sync-default" in ways:
        default_envs = pool(opts.num_envs, 1, threads=0)
        last["default"] = default_envs.reset()[0]
    for e in (*halves, one):
        e.async_reset()

    def sync():
        last["obs"] = sync_rollout(agent, envs, last["obs"], opts.num_steps)

    def sync_default():
        torch.set_num_threads(default_threads)
        last["default"] = sync_rollout(agent, default_envs, last["default"], opts.num_steps)
        torch.set_num_threads(opts.torch_threads or default_threads)

    rollouts = {"sync": sync, "two-pools": lambda: two_pools_rollout(agent, halves, opts.num_steps),
                "one-pool": lambda: one_pool_rollout(agent, one, opts.num_steps), "sync-default": sync_default}
    for way in ways:  # untimed: first calls
        rollouts[way]()

    # the asynchronous ways' ratios to each baseline timed: {key in a row: (way, baseline)}
    ratios = {way + suffix: (way, base) for base, suffix in BASELINES.items() if base in ways for way in WAYS[1:]}
    rows = []
    for pair in range(opts.pairs):
        row = {}
        for way in ways[pair % len(ways):] + ways[: pair % len(ways)]:  # each way goes first in turn
            start = time.perf_counter()
            rollouts[way]()
            row[way] = opts.num_steps * opts.num_envs / (time.perf_counter() - start)
        row.update({key: row[way] / row[base] for key, (way, base) in ratios.items()})
        rows.append(row)
        print(f"round {pair}: " + ", ".join(f"{way} {row[way]:,.0f} steps/s" for way in ways) + "; "
              + ", ".join(f"{way} / {base} {row[key]:.3f}" for key, (way, base) in ratios.items()), flush=True)
    machine = describe_machine()
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    threads = f"torch threads {opts.torch_threads or default_threads}, pool threads {opts.pool_threads or 'default'}"
    if "sync-default" in ways:
        threads += f" (sync-default: torch threads {default_threads}, pool threads default)"
    print(f"median of {opts.pairs} rounds ({opts.env_id}, {opts.num_envs} envs x {opts.num_steps} steps, rollout only; "
          f"{machine}; {threads}): " + ", ".join(f"{way} {median[way]:,.0f} steps/s" for way in ways) + "; "
          + ", ".join(f"{way} / {base} x{median[key]:.2f} [{min(r[key] for r in rows):.2f}, "
                      f"{max(r[key] for r in rows):.2f}]" for key, (way, base) in ratios.items()))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "machine": machine, "rounds": rows, "median": median}, f, indent=2)


if __name__ == "__main__":
    main()
