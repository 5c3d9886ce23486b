"""Does envpool's asynchronous API pay in ppo_atari_envpool.py's rollout on this machine? Rollout only, side by side.

    python benchmark/envpool_overlap.py --num-envs 8 --num-steps 128 --pairs 5

The acting half of a PPO iteration (no update) with the script's own Agent, two ways, alternating (A B A B ...):
- `sync`: the script's rollout: one envpool of N envs, `step(actions)` waits for all N;
- `overlap`: two envpools of N/2 envs (seeds s and s + N/2: the same N environments), pipelined with
  `send` / `recv`: while one half's envs step in envpool's threads, the policy acts on the other half.
Each timed rollout is --num-steps steps of all N envs after one untimed rollout; reported: the median
steps/s of each way, and the median of the per-pair ratios overlap / sync with their range. Both ways
draw the same number of policy forward passes' worth of frames; on few cores, envpool's threads and
torch's share them, which is what decides whether the overlap pays.
"""
import argparse
import json
import statistics
import time

import torch

from common import describe_machine, load_script


def sync_rollout(agent, envs, obs, num_steps):
    for _ in range(num_steps):
        with torch.inference_mode():
            action = agent.get_action_and_value(torch.as_tensor(obs))[0]
        obs = envs.step(action.numpy())[0]
    return obs


def overlap_rollout(agent, halves, num_steps):
    """Each half: recv its frames, act, send its actions; the other half's envs step meanwhile."""
    for _ in range(num_steps):
        for envs in halves:
            obs = envs.recv()[0]
            with torch.inference_mode():
                action = agent.get_action_and_value(torch.as_tensor(obs))[0]
            envs.send(action.numpy())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--json", help="also write the results to this file")
    opts = parser.parse_args()
    if opts.num_envs < 2 or opts.num_envs % 2:
        parser.error("--num-envs must be even and at least 2")
    script = load_script("ppo_atari_envpool")
    if opts.torch_threads:
        torch.set_num_threads(opts.torch_threads)
    torch.manual_seed(0)
    envs = script.make_env(opts.env_id, opts.num_envs, 1)
    agent = script.Agent(envs.action_space.n).to(memory_format=torch.channels_last)  # as the script on a CPU
    half = opts.num_envs // 2
    halves = [script.make_env(opts.env_id, half, 1), script.make_env(opts.env_id, half, 1 + half)]
    obs = envs.reset()[0]
    for h in halves:
        h.async_reset()
    sync_rollout(agent, envs, obs, opts.num_steps)  # untimed: first calls
    overlap_rollout(agent, halves, opts.num_steps)

    rows = []
    for pair in range(opts.pairs):
        row = {}
        for way in ("sync", "overlap") if pair % 2 == 0 else ("overlap", "sync"):
            start = time.perf_counter()
            if way == "sync":
                obs = sync_rollout(agent, envs, obs, opts.num_steps)
            else:
                overlap_rollout(agent, halves, opts.num_steps)
            row[way] = opts.num_steps * opts.num_envs / (time.perf_counter() - start)
        row["ratio"] = row["overlap"] / row["sync"]
        rows.append(row)
        print(f"pair {pair}: sync {row['sync']:,.0f} steps/s, overlap {row['overlap']:,.0f} steps/s, ratio {row['ratio']:.3f}",
              flush=True)
    machine = describe_machine()
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ratios = [r["ratio"] for r in rows]
    print(f"median of {opts.pairs} pairs ({opts.env_id}, {opts.num_envs} envs x {opts.num_steps} steps, rollout only, "
          f"torch threads {torch.get_num_threads()}, {machine}): sync {median['sync']:,.0f} steps/s, overlap "
          f"{median['overlap']:,.0f} steps/s, overlap / sync x{median['ratio']:.2f} [{min(ratios):.2f}, {max(ratios):.2f}]")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "machine": machine, "pairs": rows, "median": median}, f, indent=2)


if __name__ == "__main__":
    main()
