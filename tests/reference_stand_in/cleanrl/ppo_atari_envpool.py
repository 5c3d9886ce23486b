"""Stand-in for CleanRL's ppo_atari_envpool.py in tests/test_vs_reference.py: random actions, the old gym API; a
TensorBoard point charts/SPS at the end of every iteration of num_envs x num_steps steps, and charts/episodic_return
at the end of every episode, as the script logs them."""
import os
import time
from dataclasses import dataclass

import envpool
import gym
import numpy as np
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    seed: int = 1
    env_id: str = "Breakout-v5"
    total_timesteps: int = 1024
    num_envs: int = 8
    num_steps: int = 128
    num_minibatches: int = 4
    update_epochs: int = 4


class RecordEpisodeStatistics(gym.Wrapper):
    def __init__(self, env, deque_size=100):
        super().__init__(env)
        self.num_envs = getattr(env, "num_envs", 1)
        self.steps = 0

    def reset(self, **kwargs):
        observations = super().reset(**kwargs)
        return observations

    def step(self, action):
        observations, rewards, dones, infos = super().step(action)
        self.steps += len(dones)
        return observations, rewards, dones, infos


if __name__ == "__main__":
    args = tyro.cli(Args)
    envs = envpool.make(
        args.env_id,
        env_type="gym",
        num_envs=args.num_envs,
        seed=args.seed,
    )
    envs.num_envs = args.num_envs
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    envs = RecordEpisodeStatistics(envs)
    envs.reset()
    rng = np.random.default_rng(args.seed)
    writer, start = SummaryWriter(f"runs/{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"), time.time()
    returns = np.zeros(args.num_envs)
    for _ in range(args.total_timesteps // (args.num_envs * args.num_steps)):
        for _ in range(args.num_steps):
            _, rewards, dones, _ = envs.step(rng.integers(0, envs.single_action_space.n, size=args.num_envs))
            returns += rewards
            for idx in np.flatnonzero(dones):  # an episode's return when it ends, as the script logs it
                writer.add_scalar("charts/episodic_return", returns[idx], envs.steps)
                returns[idx] = 0.0
        writer.add_scalar("charts/SPS", envs.steps / (time.time() - start), envs.steps)
    writer.close()
    print(f"stand-in: {envs.steps} steps")
