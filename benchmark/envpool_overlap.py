"""Does envpool's asynchronous API pay in ppo_atari_envpool.py's rollout on this machine? Rollout only, side by side.

    python benchmark/envpool_overlap.py --num-envs 8 --num-steps 128 --pairs 5
    python benchmark/envpool_overlap.py --num-envs 8 --num-steps 128 --pairs 5 --pool-threads 1 --torch-threads 1

The acting half of a PPO iteration (no update) with the script's own Agent, three ways, taking turns going first:
- `sync`: the script's rollout: one envpool of N envs, `step(actions)` waits for all N;
- `two-pools`: two envpools of N/2 envs (seeds s and s + N/2: the same N environments), pipelined with
  `send` / `recv`: while one half's envs step in envpool's threads, the policy acts on the other half;
- `one-pool`: envpool's own asynchronous mode, one pool of N envs with `batch_size` N/2: `recv` returns the first
  N/2 envs to finish (any of the N, named by `info["env_id"]`), the policy acts on them and `send`s their actions.
Each timed rollout is --num-steps steps of all N envs after one untimed rollout; reported: the median steps/s of each
way, and the medians of the per-round ratios to `sync` with their range. Every way draws the same frames' worth of
policy forward passes (the asynchronous ways in batches of N/2); on few cores, envpool's threads (--pool-threads a
pool; 0: envpool's default) and torch's (--torch-threads) share them, which is what decides whether an overlap pays.
"""
import argparse
import json
import statistics
import time

import envpool
import torch

from common import describe_machine, load_script

WAYS = ("sync", "two-pools", "one-pool")


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
    parser.add_argument("--pairs", type=int, default=5, help="rounds of the three ways")
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
    if opts.torch_threads:
        torch.set_num_threads(opts.torch_threads)
    torch.manual_seed(0)
    half = opts.num_envs // 2

    def pool(num_envs, seed, **kw):  # the script's make_env, with envpool's threads and batch size
        return envpool.make(opts.env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=True, reward_clip=True,
                            seed=seed, num_threads=opts.pool_threads, **kw)

    envs = pool(opts.num_envs, 1)
    agent = script.Agent(envs.action_space.n).to(memory_format=torch.channels_last)  # as the script on a CPU
    halves = [pool(half, 1), pool(half, 1 + half)]
    one = pool(opts.num_envs, 1, batch_size=half)
    last = {"obs": envs.reset()[0]}  # the sync pool's frames, carried from one rollout to the next
    for e in (*halves, one):
        e.async_reset()

    def sync():
        last["obs"] = sync_rollout(agent, envs, last["obs"], opts.num_steps)

    rollouts = {"sync": sync, "two-pools": lambda: two_pools_rollout(agent, halves, opts.num_steps),
                "one-pool": lambda: one_pool_rollout(agent, one, opts.num_steps)}
    for way in WAYS:  # untimed: first calls
        rollouts[way]()

    rows = []
    for pair in range(opts.pairs):
        row = {}
        for way in WAYS[pair % 3:] + WAYS[: pair % 3]:  # each way goes first in turn
            start = time.perf_counter()
            rollouts[way]()
            row[way] = opts.num_steps * opts.num_envs / (time.perf_counter() - start)
        row.update({f"{way}_ratio": row[way] / row["sync"] for way in WAYS[1:]})
        rows.append(row)
        print(f"round {pair}: " + ", ".join(f"{way} {row[way]:,.0f} steps/s" for way in WAYS) + "; "
              + ", ".join(f"{way} / sync {row[f'{way}_ratio']:.3f}" for way in WAYS[1:]), flush=True)
    machine = describe_machine()
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ranges = {way: (min(r[f"{way}_ratio"] for r in rows), max(r[f"{way}_ratio"] for r in rows)) for way in WAYS[1:]}
    print(f"median of {opts.pairs} rounds ({opts.env_id}, {opts.num_envs} envs x {opts.num_steps} steps, rollout only, "
          f"torch threads {torch.get_num_threads()}, pool threads {opts.pool_threads or 'default'}, {machine}): "
          + ", ".join(f"{way} {median[way]:,.0f} steps/s" for way in WAYS) + "; "
          + ", ".join(f"{way} / sync x{median[f'{way}_ratio']:.2f} [{ranges[way][0]:.2f}, {ranges[way][1]:.2f}]"
                      for way in WAYS[1:]))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "machine": machine, "rounds": rows, "median": median}, f, indent=2)


if __name__ == "__main__":
    main()
