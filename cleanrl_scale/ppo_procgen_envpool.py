"""PPO on Procgen (envpool), instrumented for the study of parallel data collection (data-collection paper §6.2, Fig. 7).

CleanRL's ppo_procgen (IMPALA CNN) on envpool's Procgen (`StarpilotEasy-v0`: the distribution mode is part of the id)
with the data-collection paper's Table 1 Procgen column and CleanRL's remaining defaults, and what this project's PPO
on Atari has: a fixed step budget, the scaling recipes of the stagnation paper (§5, App. D), the dynamics/ metrics of
App. B, the exact KL and DDR of stagnation §4.4, separate encoders, uint8 storage, --compile, and runs that survive
preemption (the appendix at the end of the file). Trains on --num-levels levels from --start-level (0: the full
distribution) and evaluates every --eval-every iterations on held-out levels drawn by a seed of their own (Cobbe et al.,
2020).

Departures from CleanRL's ppo_procgen: envpool in place of gym3 (each episode adds one reset transition whose action
does nothing, as in CleanRL's envpool Atari scripts); the ReLU before the flatten runs before it (same values; a conv
channel is one neuron of the dormant metric); every finished episode is logged; the evaluation is this script's.
"""
import contextlib
import json
import math
import os
import random
import re
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from gymnasium.wrappers.utils import RunningMeanStd  # NormalizeReward's, as in CleanRL's ppo_procgen (gym 0.23)
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""

    # Algorithm specific arguments
    env_id: str = "StarpilotEasy-v0"
    """the id of the envpool Procgen environment, {Game}{Easy|Hard|...}-v0"""
    num_levels: int = 0
    """the number of training levels (0: unlimited, the full distribution, as CleanRL and the paper)"""
    start_level: int = 0
    """the first training level (with --num-levels > 0: levels start-level ... start-level + num-levels - 1)"""
    eval_every: int = 50
    """evaluate on held-out levels every this many iterations and after the last (0: never)"""
    eval_episodes: int = 64
    """held-out levels per evaluation: one episode on each, the same levels at every evaluation"""
    total_timesteps: int = 25000000
    """total environment steps of the experiment (a fixed data budget)"""
    learning_rate: float = 5e-4
    """the learning rate of the optimizer (lr0 of a scaling recipe)"""
    num_envs: int = 64
    """the number of parallel game environments"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.999
    """the discount factor gamma (also of the returns whose running std normalises the rewards)"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: Optional[int] = None
    """the number of mini-batches (default 8, or derived from --minibatch-size or the recipe)"""
    minibatch_size: int = 0
    """the mini-batch size (0 = derive it from --num-minibatches)"""
    update_epochs: int = 3
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""
    grad_accum_size: int = 4096
    """most states through the network at once: bigger minibatches accumulate gradients over chunks (0 = never split)"""
    separate_encoders: bool = False
    """if toggled, actor and critic each get their own CNN torso (data-collection §5.2)"""

    # Scaling recipes (stagnation paper §5, App. D)
    scaling_recipe: str = "none"
    """how minibatches and lr follow --num-envs: none, more-minibatches, bigger-minibatch, bigger-minibatch-sqrt-lr, hybrid"""
    base_num_envs: int = 64
    """N0: the number of envs of the base config a recipe scales from"""
    base_num_minibatches: int = 8
    """M0: the number of minibatches of the base config a recipe scales from"""
    hybrid_minibatch_factor: int = 0
    """b of the hybrid recipe: minibatch size x b, lr x sqrt(b), minibatches x k/b (required with hybrid)"""

    # Learning-dynamics metrics (data-collection App. B)
    dynamics_every: int = 10
    """compute the dynamics/ metrics every this many iterations (0 disables them)"""
    dynamics_batch: int = 1024
    """number of states of the current batch the dynamics/ metrics are computed on"""
    dormant_tau: float = 0.025
    """a neuron is dormant when its normalised mean activation is <= tau (Sokar et al., 2023)"""
    coverage_samples: Optional[int] = None
    """first states of the dynamics/ sample saved to runs/<run>/coverage.bin for the coverage metric (App. B.7): a 3x16x16
    uint8 thumbnail and the actor's float16 features; unset: the whole sample (--dynamics-batch, at most the batch); 0 off"""
    coverage_every: int = 0
    """save them at iteration 1 and every this many iterations, a multiple of --dynamics-every (0: about 20 saves)"""
    kl_sample: int = 0
    """states of the batch the exact KL (losses/approx_kl, charts/ddr) is averaged over (0: the whole batch)"""


# The flag rules of this script (the run's plumbing below adds those every script shares); check_args the rest
RULES = {
    "must be positive": ("num_envs", "num_steps", "update_epochs", "total_timesteps", "dynamics_batch", "eval_episodes",
                         "learning_rate", "clip_coef", "max_grad_norm"),
    "must be >= 0": ("minibatch_size", "dynamics_every", "dormant_tau", "grad_accum_size", "ent_coef", "vf_coef",
                     "kl_sample", "num_levels", "start_level", "eval_every"),
    "must lie in [0, 1]": ("gamma", "gae_lambda"),
}
STEP_BYTES = 3 * 64 * 64 + 128  # a step's 64 x 64 RGB frame (uint8) and its numbers (under 128 bytes)
CHECKPOINT_KEYS = ("agent", "optimizer", "return_rms", "recent_returns")  # what its checkpoints hold
CHECKPOINT_MUST_MATCH = ("env_id", "num_envs", "separate_encoders")  # the network, the storage and the episode counters
NOT_LEARNING = ("eval_every", "eval_episodes")  # flags that do not change what a run learns (besides the appendix's)


def check_args(args):
    if args.target_kl is not None and not args.target_kl > 0:
        raise BadFlag(f"--target-kl must be positive when given (got {args.target_kl})")
    if envpool.registration.registry.specs.get(args.env_id, ("",))[0] != "envpool.procgen":
        raise BadFlag(f"--env-id must be an envpool Procgen id such as StarpilotEasy-v0 (got {args.env_id!r})")
    if args.start_level and not args.num_levels:  # with 0, levels are drawn from the full distribution, whatever the start
        raise BadFlag(f"--start-level {args.start_level} needs --num-levels > 0 (with 0 levels are drawn from the full distribution, whatever the start)")
    if args.start_level + args.num_levels >= 2**31:
        raise BadFlag(f"--start-level + --num-levels must be below 2^31 (Procgen's int32 level seeds; got {args.start_level + args.num_levels})")
    resolve_minibatches(args, default=8)
    if args.kl_sample > args.batch_size:
        raise BadFlag(f"--kl-sample {args.kl_sample} is more than the batch ({args.batch_size} = num-envs x num-steps)")
    if args.norm_adv and args.minibatch_size < 2:
        raise BadFlag(f"--minibatch-size must be at least 2 with --norm-adv (the std of one advantage is undefined; got {args.minibatch_size})")


# Environment: envpool Procgen, training and held-out levels
def make_env(env_id, num_envs, seed, num_levels=0, start_level=0):
    """envpool's Procgen: 3x64x64 uint8 frames, 15 actions, raw rewards; levels start_level .. + num_levels - 1 (0: all)."""
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, num_levels=num_levels,
                        start_level=start_level)


def training_levels(levels, start_level, num_levels):
    """How many of `levels` are training levels, start_level ... start_level + num_levels - 1."""
    levels = np.asarray(levels, dtype=np.int64)
    return int(((levels >= start_level) & (levels < start_level + num_levels)).sum())


def normalize_rewards(return_rms, returns, rewards, dones, gamma, epsilon=1e-8, clip=10.0):
    """CleanRL's gym.wrappers.NormalizeReward(gamma) then TransformReward(clip to [-10, 10]), one vector step: the
    running variance of `returns` (each env's discounted return, updated in place; 0 after an episode) scales them."""
    returns[:] = returns * gamma + rewards
    return_rms.update(returns)
    normalized = rewards / np.sqrt(return_rms.var + epsilon)
    returns[dones] = 0.0
    return np.clip(normalized, -clip, clip)


# Network: the IMPALA CNN actor-critic
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    """x + conv1(relu(conv0(relu(x)))), 3x3 convs of padding 1 (IMPALA; CleanRL's ppo_procgen)."""

    def __init__(self, channels):
        super().__init__()
        self.relu0, self.conv0 = nn.ReLU(), nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.relu1, self.conv1 = nn.ReLU(), nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x):
        return x + self.conv1(self.relu1(self.conv0(self.relu0(x))))


def conv_sequence(in_channels, out_channels):
    """An IMPALA stage: conv 3x3, max-pool 3 stride 2 (padding 1: 64 -> 32), two residual blocks."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
                         nn.MaxPool2d(kernel_size=3, stride=2, padding=1), ResidualBlock(out_channels), ResidualBlock(out_channels))


def impala_cnn(channels=(16, 32, 32), size=64):
    """Stages of widths 16, 32, 32 (3x64x64 -> 32x8x8), ReLU, dense 256, ReLU (Table 1); PyTorch's default init, as CleanRL."""
    stages, in_channels = [], 3
    for out_channels in channels:
        stages.append(conv_sequence(in_channels, out_channels))
        in_channels, size = out_channels, (size + 1) // 2
    return nn.Sequential(*stages, nn.ReLU(), nn.Flatten(), nn.Linear(in_channels * size * size, 256), nn.ReLU())


class Agent(nn.Module):
    def __init__(self, num_actions, separate_encoders=False):
        super().__init__()
        self.network = impala_cnn()
        self.critic_network = impala_cnn() if separate_encoders else None
        self.actor = layer_init(nn.Linear(256, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(256, 1), std=1)

    def preprocess(self, x):
        """uint8 frames -> floats in [0, 1], in the memory layout of the conv weights."""
        channels_last = self.network[0][0].weight.is_contiguous(memory_format=torch.channels_last)
        x = x.to(torch.float32, copy=True).div_(255.0)  # divided in place: one allocation of the floats, not two
        return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def torsos(self, x):
        """Features of the actor's and the critic's torso (the same tensor when shared); x is uint8."""
        x = self.preprocess(x)
        hidden = self.network(x)
        return hidden, hidden if self.critic_network is None else self.critic_network(x)

    def get_value(self, x):
        return self.critic(self.torsos(x)[1])

    def get_logits(self, x):
        return self.actor(self.network(self.preprocess(x)))

    def get_action_and_value(self, x, action=None):
        actor_hidden, critic_hidden = self.torsos(x)
        logits = self.actor(actor_hidden)
        probs = Categorical(logits=logits, validate_args=False)  # a nan reaches the end-of-iteration check, not a raise
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(critic_hidden), logits


def hidden_activations(torso, x):
    """Outputs of every ReLU of a torso as they run (the residual blocks' included); the last is the features."""
    acts = []
    hooks = [m.register_forward_hook(lambda module, inputs, output: acts.append(output))
             for m in torso.modules() if isinstance(m, nn.ReLU)]
    torso(x)
    for hook in hooks:
        hook.remove()
    return acts


# Loss: GAE and PPO's clipped objective
def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """GAE(lambda) over a rollout of shape (num_steps, num_envs); dones[t] marks obs[t] as a new episode."""
    advantages, lastgaelam, num_steps = torch.zeros_like(rewards), 0, rewards.shape[0]
    for t in reversed(range(num_steps)):
        nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
        nextvalues = next_value if t == num_steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def ppo_loss(agent, args, obs, actions, logprobs, advantages, returns, values):
    """CleanRL's clipped PPO loss on (a chunk of) a minibatch, and its statistics; advantages come normalised."""
    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - logprobs
    ratio = logratio.exp()

    # Policy loss
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    # Value loss
    newvalue = newvalue.view(-1)
    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = values + torch.clamp(newvalue - values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    with torch.no_grad():
        # approx_kl: http://joschu.net/blog/kl-approx.html
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()
        stats = torch.stack([pg_loss, v_loss, entropy_loss, approx_kl, clipfrac])  # STATS, in one tensor
    return loss, stats


STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")  # what ppo_loss's stats hold, in order


# Learning-dynamics metrics, data-collection paper App. B (B.1-B.6)
def feature_rank(features, threshold=0.99):
    """B.1: smallest k whose top-k singular values of the centred features keep `threshold` of the variance."""
    sv = torch.linalg.svdvals(features - features.mean(dim=0, keepdim=True))
    energy = torch.cumsum(sv**2, dim=0)
    if energy[-1] <= 0:
        return 0
    return int(torch.searchsorted(energy, threshold * energy[-1]).item()) + 1


def dormant_percentage(activations, tau):
    """B.2 (Sokar et al., 2023): share of neurons whose E|h_i| / mean_k E|h_k| <= tau, over all layers; an activation
    is (batch, units) or (batch, channels, height, width), a conv channel one neuron."""
    dormant, total = 0, 0
    for h in activations:
        score = (h.abs().flatten(2).mean(dim=2) if h.dim() > 2 else h.abs()).mean(dim=0)
        score = score / (score.mean() + 1e-9)
        dormant += int((score <= tau).sum().item())
        total += score.numel()
    return 100.0 * dormant / total


def weight_norm(model):
    """B.3: sqrt of the sum of squared Frobenius norms of the weight tensors (biases excluded)."""
    return torch.sqrt(sum((p.detach() ** 2).sum() for n, p in model.named_parameters() if n.endswith("weight"))).item()


def grad_kurtosis(grads):
    """B.4 (Garg et al., 2021): kurtosis of log(|g| + 1e-8) over all gradient entries."""
    g = torch.log(torch.cat([x.flatten() for x in grads]).abs() + 1e-8).double()
    centred = g - g.mean()
    return ((centred**4).mean() / (centred**2).mean() ** 2).item()


def ess_percentage(ratios):
    """B.5 (Martino et al., 2017): 100 * ESS / N with ESS = 1 / sum_i w_i^2, w = r / sum r."""
    w = ratios.double() / ratios.double().sum()
    return (100.0 / (w**2).sum() / ratios.numel()).item()


def policy_variance(probs):
    """B.6: mean over actions of the variance across states of pi(a|s); probs is (states, actions)."""
    return probs.var(dim=0, unbiased=False).mean().item()


@torch.no_grad()
def dynamics_metrics(agent, obs, actions, old_logprobs, tau):
    """feature rank, dormant %, weight norm, policy variance and ESS on a sample of the batch (App. B)."""
    x = agent.preprocess(obs)
    metrics = {"dynamics/weight_norm": weight_norm(agent)}
    torsos = [("", agent.network)] + ([("_critic", agent.critic_network)] if agent.critic_network is not None else [])
    for suffix, torso in torsos:
        acts = hidden_activations(torso, x)
        metrics[f"dynamics/feature_rank{suffix}"] = feature_rank(acts[-1])
        metrics[f"dynamics/dormant_pct{suffix}"] = dormant_percentage(acts, tau)
        if suffix == "":
            logits = agent.actor(acts[-1])
    dist = Categorical(logits=logits)
    metrics["dynamics/policy_variance"] = policy_variance(dist.probs)
    metrics["dynamics/ess_pct"] = ess_percentage((dist.log_prob(actions) - old_logprobs).exp())
    return metrics


def evaluate(agent, env_id, eval_episodes, seed, device):
    """(return, level seed) of one episode on each of `eval_episodes` levels of the full distribution drawn by `seed`, actions
    sampled from a generator of `seed`: the same levels and draws every call, training's random streams untouched."""
    envs = make_env(env_id, eval_episodes, seed)
    obs, info = envs.reset()
    levels = info["level_seed"].copy()
    generator = torch.Generator(device=device).manual_seed(seed)
    returns, finished = np.zeros(eval_episodes), np.zeros(eval_episodes, dtype=bool)
    while not finished.all():
        with torch.inference_mode():
            probs = torch.softmax(agent.get_logits(torch.as_tensor(obs, device=device)), dim=-1)
            action = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())
        returns += reward * ~finished
        finished |= term | trunc
    envs.close()
    return returns, levels


# Coverage (data-collection App. B.7): states of the dynamics/ sample, saved for a projection after the run
@torch.no_grad()
def coverage_records(agent, obs, iteration, global_step):
    """The records of states `obs` (uint8, N x 3 x 64 x 64) for runs/<run>/coverage.bin: when, the frame averaged over
    4x4 blocks and the penultimate features."""
    thumbnails = obs.float().reshape(len(obs), 3, 16, 4, 16, 4).mean((3, 5)).round().to(torch.uint8)
    features = hidden_activations(agent.network, agent.preprocess(obs))[-1]
    records = np.zeros(len(obs), np.dtype([("iteration", "<i8"), ("global_step", "<i8"), ("obs", "u1", (3, 16, 16)),
                                           ("features", "<f2", (features.shape[1],))]))
    records["iteration"], records["global_step"] = iteration, global_step
    records["obs"], records["features"] = thumbnails.cpu().numpy(), features.cpu().numpy()
    return records


@torch.inference_mode()
def batch_kl(agent, b_obs, b_behaviour_logits, kl_sample, chunk):
    """KL(behaviour || updated policy) after the update, exact for a categorical, averaged over the whole batch or a
    random --kl-sample of it: the KL of the Data-to-Divergence Ratio (stagnation §4.4), a tensor read later."""
    batch_size, device = len(b_behaviour_logits), b_behaviour_logits.device
    kl_inds = torch.randperm(batch_size, device=device)[:kl_sample] if kl_sample else None
    kl_sum = torch.zeros((), device=device)
    for start in range(0, kl_sample or batch_size, chunk):
        inds = kl_inds[start : start + chunk] if kl_inds is not None else slice(start, start + chunk)
        old_logp = torch.log_softmax(b_behaviour_logits[inds], dim=-1)
        kl_sum += (old_logp.exp() * (old_logp - torch.log_softmax(agent.get_logits(b_obs[inds]), dim=-1))).sum()
    return kl_sum / (kl_sample or batch_size)


@torch.inference_mode()
def iteration_statistics(agent, before, mb_stats, kl, clipfrac, grad_norm, b_returns, b_values):
    """What an iteration logs, in one read from the device: the last minibatch's losses and KL (as CleanRL logs them),
    the batch KL, clip fraction and gradient norm over the minibatch steps, the explained variance, how far the
    update moved the parameters (all; the policy's: encoder and actor head; stagnation §3), and whether all is finite."""
    var_y = b_returns.var(unbiased=False)
    explained_var = torch.where(var_y > 0, 1 - (b_returns - b_values).var(unbiased=False) / var_y, torch.nan)
    finite = (torch.stack([torch.isfinite(p).all() for p in agent.parameters()]).all()
              & torch.isfinite(mb_stats).all() & torch.isfinite(kl))
    moved = {name: torch.linalg.vector_norm(p - before[name]) for name, p in agent.named_parameters()}
    moved_policy = [norm for name, norm in moved.items() if name.startswith(("network.", "actor."))]
    read = torch.cat([mb_stats[:4], torch.stack([kl, clipfrac, grad_norm, explained_var, torch.stack(list(moved.values())).norm(),
                      torch.stack(moved_policy).norm(), finite.float()])]).tolist()  # the one sync
    return dict(zip(("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl_last_minibatch",
                     "losses/approx_kl", "losses/clipfrac", "losses/grad_norm", "losses/explained_variance",
                     "charts/update_norm", "charts/update_norm_actor", "finite"), read))


def main(args):
    levels = f"levels {args.start_level} to {args.start_level + args.num_levels - 1}" if args.num_levels else "unlimited levels"
    run = Run(args, f"batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} "
                    f"iterations, {args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} "
                    f"(recipe {args.scaling_recipe}), {args.update_epochs} epochs; {levels}")
    device = run.device
    envs = make_env(args.env_id, args.num_envs, args.seed, args.num_levels, args.start_level)
    num_actions = envs.action_space.n
    agent = Agent(num_actions, args.separate_encoders).to(device)
    if device.type == "cpu":
        agent.to(memory_format=torch.channels_last)  # halves the conv update's time on CPU (measured)
    # compiled or captured, the learning rate is a tensor that annealing fills in place (LeanRL): a new float each
    # iteration would recompile the optimizer step
    compiled = args.compile or args.cudagraphs
    lr = torch.tensor(args.learning_rate, device=device) if compiled else args.learning_rate
    fused = {} if compiled else {"fused": True}  # eager: one kernel for all parameters (a CPU's default loops)
    optimizer = optim.Adam(agent.parameters(), lr=lr, eps=1e-5, capturable=args.cudagraphs and not args.compile, **fused)

    # rollout storage; observations stay uint8, converted per minibatch. For channels_last networks they are allocated
    # channels innermost: a minibatch gathered from them is in the network's layout (no copy, no second buffer)
    shape = (args.num_steps, args.num_envs) + envs.observation_space.shape
    if device.type == "cpu":
        obs = torch.zeros(shape[:2] + shape[3:] + shape[2:3], dtype=torch.uint8).permute(0, 1, 4, 2, 3)
    else:
        obs = torch.zeros(shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs, rewards, dones, values = (torch.zeros((args.num_steps, args.num_envs), device=device) for _ in range(4))
    behaviour_logits = torch.zeros((args.num_steps, args.num_envs, num_actions), device=device)
    episode_returns = np.zeros(args.num_envs)
    return_rms, discounted_returns = RunningMeanStd(), np.zeros(args.num_envs)  # the reward normaliser
    eval_seed = (args.seed + 10_000) % 2**31  # the evaluation's levels: drawn apart from the training pool's stream
    saved = run.restore(agent=agent, optimizer=optimizer)
    if saved:
        return_rms.mean, return_rms.var, return_rms.count = saved["return_rms"]
    global_step, chunk = run.global_step, args.grad_accum_size or args.minibatch_size

    def policy(x):  # the rollout's forward pass
        action, logprob, _, value, logits = agent.get_action_and_value(x)
        return action, logprob, value.flatten(), logits

    def gae(next_obs, next_done, rewards, values, dones):
        next_value = agent.get_value(next_obs).reshape(1, -1)
        return compute_gae(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)

    def minibatch_gradient(mb_inds, b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values):
        """The gradient of one minibatch's loss, left in .grad, and its statistics. A minibatch larger than
        --grad-accum-size goes through the network in chunks: the same gradient, less memory."""
        optimizer.zero_grad(set_to_none=not args.cudagraphs)  # a captured graph keeps the same .grad tensors
        mb_advantages = b_advantages[mb_inds]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        mb_stats = 0.0
        for c in range(0, args.minibatch_size, chunk):
            inds = mb_inds[c : c + chunk]
            loss, stats = ppo_loss(agent, args, b_obs[inds], b_actions[inds], b_logprobs[inds],
                                   mb_advantages[c : c + chunk], b_returns[inds], b_values[inds])
            share = len(inds) / args.minibatch_size
            (loss * share).backward()
            mb_stats = mb_stats + stats * share
        return mb_stats

    def optimizer_step():
        grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return grad_norm

    policy, gae, minibatch_gradient, optimizer_step = accelerate(args, device, policy, gae, minibatch_gradient,
                                                                  optimizer_step)  # --compile, --cudagraphs

    run.begin()
    next_obs = torch.as_tensor(envs.reset()[0], device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    for iteration in range(run.start_iteration + 1, args.num_iterations + 1):
        run.mark(iteration, global_step, agent=agent, optimizer=optimizer,
                 return_rms=(return_rms.mean, return_rms.var, return_rms.count))  # what a stop during it saves
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            if compiled:
                lr.fill_(frac * args.learning_rate)
            else:
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(0, args.num_steps):
            run.check(envs)  # a signal that cannot wait for the iteration's end
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.inference_mode():
                action, logprob, value, logits = policy(next_obs)
            values[step], actions[step], logprobs[step], behaviour_logits[step] = value, action, logprob, logits

            next_obs, reward, terminations, truncations, info = envs.step(action.cpu().numpy())
            episode_end = np.logical_or(terminations, truncations)
            normalized = normalize_rewards(return_rms, discounted_returns, reward, episode_end, args.gamma)
            rewards[step] = torch.as_tensor(normalized, device=device, dtype=torch.float32)
            next_obs = torch.as_tensor(next_obs, device=device)
            next_done = torch.as_tensor(episode_end, device=device, dtype=torch.float32)

            episode_returns += reward  # the game's own rewards
            for idx in np.flatnonzero(episode_end):
                run.episode(global_step, episode_returns[idx], info["elapsed_step"][idx])
            episode_returns[episode_end] = 0.0

        with torch.no_grad():
            advantages, returns = gae(next_obs, next_done, rewards, values, dones)
        b_obs = obs.reshape((-1,) + envs.observation_space.shape)
        b_logprobs, b_actions, b_advantages, b_returns, b_values = (
            x.reshape(-1) for x in (logprobs, actions, advantages, returns, values))

        measure = args.dynamics_every > 0 and (iteration % args.dynamics_every == 0 or iteration == 1)
        b_inds = np.arange(args.batch_size)
        # the minibatches' statistics stay on the device; they are read once per iteration (no per-minibatch sync)
        clipfrac_sum, grad_norm_sum, minibatch_steps = torch.zeros((), device=device), torch.zeros((), device=device), 0
        before = {name: p.detach().clone() for name, p in agent.named_parameters()}  # how far the update moves them
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            epoch_inds = torch.as_tensor(b_inds, device=device)  # one copy to the device per epoch, not per minibatch
            for start in range(0, args.batch_size, args.minibatch_size):
                run.check(envs)
                mb_inds = epoch_inds[start : start + args.minibatch_size]
                mb_stats = minibatch_gradient(mb_inds, b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values)
                if measure and epoch == 0 and start == 0:  # B.4 on the raw gradient, before clipping rescales it
                    kurtosis = grad_kurtosis([p.grad for p in agent.parameters() if p.grad is not None])
                grad_norm_sum += optimizer_step()
                clipfrac_sum += mb_stats[STATS.index("clipfrac")]
                minibatch_steps += 1
            if args.target_kl is not None and mb_stats[STATS.index("approx_kl")].item() > args.target_kl:
                break  # (one read per epoch, only with --target-kl)

        kl = batch_kl(agent, b_obs, behaviour_logits.reshape(-1, num_actions), args.kl_sample, chunk)
        logged = iteration_statistics(agent, before, mb_stats, kl, clipfrac_sum / minibatch_steps,
                                      grad_norm_sum / minibatch_steps, b_returns, b_values)
        if not logged.pop("finite"):
            run.fail(iteration, "the loss or the parameters are not finite (nan or inf)")
        logged["charts/learning_rate"] = float(optimizer.param_groups[0]["lr"])
        logged["charts/ddr"] = args.batch_size / max(logged["losses/approx_kl"], 1e-12)  # stagnation §4.4
        if measure:
            sample = torch.randperm(args.batch_size, device=device)[: args.dynamics_batch]
            logged.update(dynamics_metrics(agent, b_obs[sample], b_actions[sample], b_logprobs[sample], args.dormant_tau))
            logged["dynamics/grad_kurtosis"] = kurtosis
            if args.coverage_samples and (iteration == 1 or iteration % args.coverage_every == 0):
                run.save_states(coverage_records(agent, b_obs[sample[: args.coverage_samples]], iteration, global_step),
                                obs="the 64x64 RGB frame averaged over 4x4 blocks", features="the actor torso's last ReLU")
        if args.eval_every and (iteration % args.eval_every == 0 or iteration == args.num_iterations):
            with run.paused():  # charts/SPS counts training alone
                scores, levels = evaluate(agent, args.env_id, args.eval_episodes, eval_seed, device)
            logged["eval/episodic_return"] = scores.mean()
            if args.num_levels:  # held out: none of the evaluation's levels is a training level (checked, not assumed)
                logged["eval/training_levels"] = training_levels(levels, args.start_level, args.num_levels)
        run.log(global_step, logged)

        if run.checkpoint_due(iteration):
            run.checkpoint(iteration, global_step, agent=agent, optimizer=optimizer,
                           return_rms=(return_rms.mean, return_rms.var, return_rms.count))
        run.stop_if_signalled(iteration, envs)
        if iteration == args.reset_envs_at:  # what a resume from this iteration's checkpoint does
            envs.close()
            envs = make_env(args.env_id, args.num_envs, args.seed, args.num_levels, args.start_level)
            next_obs = torch.as_tensor(envs.reset()[0], device=device)
            next_done = torch.zeros(args.num_envs, device=device)
            episode_returns[:] = 0.0
            discounted_returns[:] = 0.0

    envs.close()
    if args.save_model:
        run.save_model(agent)
    run.finish()


# ==== appendix: the run's plumbing, one text in every torch script of cleanrl-scale (change it in all of them) ====
# The flags of the run rather than of the algorithm, the flag rules every script shares, the scaling recipes' and the
# coverage states' arithmetic, checkpoints and resume, signals, TensorBoard / wandb and the progress bar, exit
# statuses. What differs between scripts is on the page above: RULES, check_args, STEP_BYTES, CHECKPOINT_KEYS,
# CHECKPOINT_MUST_MATCH, NOT_LEARNING, main, and Args, whose fields this text reads: seed, env_id, num_envs, num_steps,
# total_timesteps, learning_rate, num_minibatches, minibatch_size, the scaling recipe's, dynamics_every, dynamics_batch,
# coverage_samples and coverage_every.
import copy
import glob
import io

REQUEUE = 75  # exit status after a signalled stop that left a checkpoint: "requeue me" (EX_TEMPFAIL)
RECIPES = ("none", "more-minibatches", "bigger-minibatch", "bigger-minibatch-sqrt-lr", "hybrid")
# a signal stops the run at the end of the iteration if that comes within this many seconds (judged by the iteration
# before), else at once with the checkpoint of the iteration's start: Slurm sends SIGKILL 30 s after SIGTERM by default
STOP_SECONDS = 10.0


@dataclass
class RunArgs(Args):
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanrl-scale"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """whether to save the trained model into `runs/{run_name}` (the Atari scripts then evaluate it: --eval-episodes)"""

    # Speed
    torch_threads: int = 0
    """CPU threads for torch (0 = torch's default)"""
    compile: bool = False
    """torch.compile the rollout's forward passes, the targets (GAE, Q(lambda)) and the minibatch update, as LeanRL does
    (the first iteration compiles: charts/SPS counts from the second, charts/first_iteration_seconds holds the first)"""
    cudagraphs: bool = False
    """also capture them as CUDA graphs (tensordict's CudaGraphModule, as LeanRL; CUDA only)"""

    # Checkpoints
    save_every: int = 0
    """write runs/<run>/checkpoints/iter_<i>.pt every this many iterations and after the last (0: only when signalled)"""
    keep_checkpoints: int = 3
    """keep the run's newest this many checkpoints, deleting older ones as it writes new ones (0: keep every one)"""
    resume: Optional[str] = None
    """a checkpoint to continue from, under its seed (fresh episodes, everything else exact; --seed left out takes the
    checkpoint's; the flags it must agree on are named if not)"""
    reset_envs_at: int = 0
    """restart every env on fresh episodes after this iteration, as a resumed run does (0: never; to check a resume)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime: setting it is refused)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime: setting it is refused)"""


RUN_FLAGS = ("exp_name", "track", "wandb_project_name", "wandb_entity", "save_model", "torch_threads", "compile",
             "cudagraphs", "save_every", "keep_checkpoints", "resume", "reset_envs_at")  # what a run learns, unchanged
RULE_TESTS = {"must be positive": lambda v: v > 0, "must be >= 0": lambda v: v >= 0,
              "must lie in [0, 1]": lambda v: 0 <= v <= 1}


class BadFlag(ValueError):
    """A flag value that breaks a rule; reported as one line, exit status 2."""


def resolve_args(args):
    """Check every flag and fill the values computed at run time; raises BadFlag before any compute."""
    if args.exp_name in ("", ".", "..") or "/" in args.exp_name or os.sep in args.exp_name or "\0" in args.exp_name:
        raise BadFlag(f"--exp-name must be a plain name, without '/' (it names a directory under runs/; got {args.exp_name!r})")
    if len(os.fsencode(args.exp_name)) > 128:  # a file name holds 255 bytes: the run's adds the env id, seed and time
        raise BadFlag(f"--exp-name must be at most 128 bytes (it names a directory under runs/; got {len(os.fsencode(args.exp_name))})")
    for flag in ("batch_size", "num_iterations"):  # filled in below from the other flags
        if getattr(args, flag):
            raise BadFlag(f"--{flag.replace('_', '-')} is computed from the other flags: do not set it (got {getattr(args, flag)})")
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise BadFlag(f"--{name.replace('_', '-')} must be a finite number (got {value})")
    if not 0 <= args.seed < 2**31:
        raise BadFlag(f"--seed must lie in [0, 2^31) (envpool's int32 seed; got {args.seed})")
    rules = {**RULES, "must be >= 0": RULES["must be >= 0"] + ("torch_threads", "save_every", "keep_checkpoints",
                                                                "reset_envs_at", "coverage_every")}
    for rule, flags in rules.items():
        for flag in flags:
            if not RULE_TESTS[rule](getattr(args, flag)):
                raise BadFlag(f"--{flag.replace('_', '-')} {rule} (got {getattr(args, flag)})")
    if args.cudagraphs and not (args.cuda and torch.cuda.is_available()):
        raise BadFlag("--cudagraphs captures CUDA graphs: it needs a CUDA device and --cuda")
    if args.hybrid_minibatch_factor and args.scaling_recipe != "hybrid":
        raise BadFlag(f"--hybrid-minibatch-factor applies to --scaling-recipe hybrid only (got {args.scaling_recipe})")
    args.batch_size = args.num_envs * args.num_steps
    check_args(args)  # the script's own rules, and its minibatches
    if args.total_timesteps >= 2**62:  # the step count is an int64 in TensorBoard and the checkpoints
        raise BadFlag(f"--total-timesteps must be below 2^62 (got {args.total_timesteps})")
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        raise BadFlag(f"--total-timesteps {args.total_timesteps} is less than one batch ({args.batch_size} = num-envs x num-steps)")
    storage = args.batch_size * STEP_BYTES
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if storage > memory:
        raise BadFlag(f"--num-envs {args.num_envs} x --num-steps {args.num_steps}: the rollout's storage alone takes "
                      f"{storage / 2**30:,.1f} GiB, more than this machine's {memory / 2**30:,.1f} GiB of memory")
    if args.coverage_samples is not None and not 0 <= args.coverage_samples <= args.dynamics_batch:
        raise BadFlag(f"--coverage-samples must lie in [0, --dynamics-batch {args.dynamics_batch}] (the states are the "
                      f"first of the dynamics/ sample; got {args.coverage_samples})")
    if args.coverage_samples is None:
        args.coverage_samples = min(args.dynamics_batch, args.batch_size)
    if args.dynamics_every and args.coverage_every % args.dynamics_every:
        raise BadFlag(f"--coverage-every {args.coverage_every} must be a multiple of --dynamics-every {args.dynamics_every} "
                      "(the states are saved at measured iterations)")
    if args.dynamics_every and not args.coverage_every:  # about 20 saves, at measured iterations
        args.coverage_every = max(1, round(args.num_iterations / 20 / args.dynamics_every)) * args.dynamics_every
    if args.resume is not None:
        load_checkpoint(args.resume, args)
    return args


def resolve_minibatches(args, default):
    """--num-minibatches and --minibatch-size from each other, or from --scaling-recipe (`default` minibatches when
    neither is given)."""
    if args.scaling_recipe != "none":
        if args.num_minibatches is not None or args.minibatch_size:
            raise BadFlag(f"--num-minibatches/--minibatch-size are set by --scaling-recipe {args.scaling_recipe}; drop them")
        args.num_minibatches, args.minibatch_size, args.learning_rate = resolve_recipe(
            args.scaling_recipe, args.num_envs, args.num_steps, args.learning_rate, args.base_num_envs,
            args.base_num_minibatches, args.hybrid_minibatch_factor)
    elif args.minibatch_size:
        if args.batch_size % args.minibatch_size:
            raise BadFlag(f"--minibatch-size {args.minibatch_size} must divide the batch {args.batch_size} (num-envs x num-steps)")
        derived = args.batch_size // args.minibatch_size
        if args.num_minibatches is not None and args.num_minibatches != derived:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} contradicts --minibatch-size {args.minibatch_size} (batch {args.batch_size} gives {derived})")
        args.num_minibatches = derived
    else:
        args.num_minibatches = default if args.num_minibatches is None else args.num_minibatches
        if args.num_minibatches <= 0 or args.batch_size % args.num_minibatches:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} must be positive and divide the batch {args.batch_size} (num-envs x num-steps)")
        args.minibatch_size = args.batch_size // args.num_minibatches


def resolve_recipe(recipe, num_envs, num_steps, lr0, base_num_envs, base_num_minibatches, b=0):
    """Minibatch count, minibatch size and learning rate of a scaling recipe (stagnation §5, App. D), from the base
    config (N0 envs, M0 minibatches, lr0) to N = k * N0 envs."""
    if base_num_envs <= 0 or base_num_minibatches <= 0:
        raise BadFlag(f"--scaling-recipe {recipe} needs positive --base-num-envs and --base-num-minibatches")
    if (base_num_envs * num_steps) % base_num_minibatches:
        raise BadFlag("--base-num-minibatches must divide the base batch (--base-num-envs x --num-steps)")
    k = Fraction(num_envs, base_num_envs)
    base_mb_size = base_num_envs * num_steps // base_num_minibatches
    if recipe == "more-minibatches":
        minibatches, size_factor, lr_factor = k * base_num_minibatches, 1, 1.0
    elif recipe == "bigger-minibatch":
        minibatches, size_factor, lr_factor = Fraction(base_num_minibatches), k, 1.0
    elif recipe == "bigger-minibatch-sqrt-lr":
        minibatches, size_factor, lr_factor = Fraction(base_num_minibatches), k, float(k) ** 0.5
    elif recipe == "hybrid":
        if b <= 0:
            raise BadFlag("--scaling-recipe hybrid needs --hybrid-minibatch-factor b > 0")
        minibatches, size_factor, lr_factor = k / b * base_num_minibatches, Fraction(b), float(b) ** 0.5
    else:
        raise BadFlag(f"--scaling-recipe must be one of {', '.join(RECIPES)} (got {recipe!r})")
    mb_size = size_factor * base_mb_size
    if minibatches.denominator != 1 or minibatches < 1 or mb_size.denominator != 1:
        raise BadFlag(f"--num-envs {num_envs} gives a fractional minibatch count or size under --scaling-recipe {recipe} "
                      f"(k = {k} from --base-num-envs {base_num_envs}, --base-num-minibatches {base_num_minibatches}, b = {b})")
    return int(minibatches), int(mb_size), lr0 * lr_factor


def check_runs_directory():
    """runs/ in the working directory must be a directory this process can write: checked before any compute."""
    if os.path.lexists("runs") and not os.path.isdir("runs"):
        raise BadFlag(f"{os.path.abspath('runs')} is not a directory: the runs are written under it")
    if not os.access("runs" if os.path.isdir("runs") else ".", os.W_OK | os.X_OK):
        raise BadFlag(f"cannot write {os.path.abspath('runs')}: start the run from a directory you can write")


def parse_command_line():
    """The flags (RunArgs), read by tyro. What tyro refuses (an unknown flag, a value not of the flag's type, a missing
    value) is a BadFlag too: tyro draws a box of 5-10 lines on stderr, taken apart here into one line."""
    said, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100000"  # tyro wraps its box at the terminal's width, mid-word
    try:
        with contextlib.redirect_stderr(said):
            args = tyro.cli(RunArgs)
    except SystemExit as e:
        if e.code != 2:  # --help
            raise
        raise BadFlag(one_line(said.getvalue())) from None
    finally:
        os.environ.pop("COLUMNS") if columns is None else os.environ.update(COLUMNS=columns)
    sys.stderr.write(said.getvalue())  # tyro's warnings, if any
    return args


def one_line(box):
    """tyro's error box as one line: its message, naming the flag, and the flags it suggests."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", box).splitlines()]  # no colours
    if any(line.startswith("╭") for line in lines):  # drawn in UTF-8 (stdout's encoding): the title in the top border
        rows = [line.strip("│").strip() for line in lines if line.startswith("│")]
    else:  # in ASCII: the title, a rule, the rows
        rows = [line for line in lines if line][1:]
    sections = [[]]
    for row in rows:
        if row and set(row) <= {"─", "-"}:
            sections.append([])
        else:
            sections[-1].append(row)
    sections = [section for section in sections if section]
    message = " ".join(sections[0]).strip() if sections else box.strip()
    typed = re.match(r"Error parsing (--\S+): (invalid literal for int\(\)|could not convert string to float).*: (\S+)$", message)
    if typed:
        return f"{typed[1]} must be {'an integer' if 'int' in typed[2] else 'a number'} (got {typed[3]})"
    missing = re.match(r"Missing value for argument '(--\S+)'", message)
    if missing:
        return f"{missing[1]} needs a value; see --help"
    meant = [row.split()[0] for section in sections[1:] if section[0].startswith(("Perhaps you meant", "Arguments similar"))
             for row in section[1:] if row.startswith("--")]
    return message + (f" (perhaps {' or '.join(dict.fromkeys(meant))})" if meant else "") + "; see --help"


def no_checkpoint_at(path):
    """Why --resume names no checkpoint: no such file, or a directory (and the newest checkpoint under it)."""
    if not os.path.isdir(path):
        return f"--resume {path}: no such file"
    found = sorted((name for pattern in ("", "checkpoints", "*/checkpoints", "runs/*/checkpoints")
                    for name in glob.glob(os.path.join(glob.escape(path), pattern, "iter_*.pt"))),
                   key=lambda name: os.stat(name).st_mtime if os.path.exists(name) else 0)
    return f"--resume {path} is a directory: name a checkpoint file" + (f", such as {found[-1]}" if found else " (none is in it)")


def load_checkpoint(path, args=None):
    """The dict Run.checkpoint wrote, or BadFlag; with `args`, BadFlag too unless this run may continue from it."""
    if not os.path.isfile(path):
        raise BadFlag(no_checkpoint_at(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)  # our own file: RNG states are Python objects
    except Exception as e:
        raise BadFlag(f"--resume {path}: not a checkpoint of this script ({type(e).__name__})")
    this = os.path.basename(__file__)
    if isinstance(state, dict) and state.get("script", this) != this:
        raise BadFlag(f"--resume {path} is a checkpoint of {state['script']}, not of {this}")
    if not isinstance(state, dict) or not {*CHECKPOINT_KEYS, "rng", "iteration", "global_step", "args"} <= set(state):
        raise BadFlag(f"--resume {path}: not a checkpoint of this script (keys missing)")
    if args is None:  # the run's read, after resolve_args checked it
        return state
    if set(state["args"]) - set(vars(args)):  # a checkpoint from before the "script" key
        raise BadFlag(f"--resume {path} is a checkpoint of another script, not of {this}")
    for flag in CHECKPOINT_MUST_MATCH:
        if state["args"].get(flag) != getattr(args, flag):
            raise BadFlag(f"--resume {path} was saved with --{flag.replace('_', '-')} {state['args'].get(flag)}, not {getattr(args, flag)}")
    seed = state["args"].get("seed", args.seed)  # the run's random states are in the checkpoint: it goes on under its seed
    given = any(word == "--seed" or word.startswith("--seed=") for word in sys.argv[1:])  # even at the default's value
    if args.seed != seed and (given or args.seed != RunArgs.seed):
        raise BadFlag(f"--seed {args.seed} does not match the checkpoint's seed {seed}: a resume continues its run's "
                      f"seed; drop --seed or pass {seed}")
    args.seed = seed  # --seed left at its default: the checkpoint's
    if state["iteration"] >= args.num_iterations:
        raise BadFlag(f"--resume {path} is at iteration {state['iteration']}, not before the last ({args.num_iterations})")
    return state


def changed_flags(args, state):
    """The flags of this run that differ from the checkpoint's run: it continues under the new ones."""
    return [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k not in RUN_FLAGS + NOT_LEARNING and state["args"].get(k, v) != v]


def accelerate(args, device, forward, targets, minibatch_gradient, optimizer_step):
    """--compile and --cudagraphs, LeanRL's arrangement: the rollout's forward pass, the targets (GAE), the minibatch
    gradient and the optimiser step each compiled apart (the backward pass breaks the update's graph), then captured
    as CUDA graphs; the captured update takes the minibatch alone (given the whole rollout buffer, the graph would
    copy all of it into its static inputs at every call)."""
    if args.compile:
        forward, targets = torch.compile(forward), torch.compile(targets, fullgraph=True)
        minibatch_gradient, optimizer_step = torch.compile(minibatch_gradient), torch.compile(optimizer_step)
    if args.cudagraphs:
        from tensordict.nn import CudaGraphModule

        forward, targets = CudaGraphModule(forward), CudaGraphModule(targets)
        captured_gradient, optimizer_step = CudaGraphModule(minibatch_gradient), CudaGraphModule(optimizer_step)
        every = torch.arange(args.minibatch_size, device=device)  # the gathered minibatch, whole (made once)

        def minibatch_gradient(mb_inds, *batch):
            return captured_gradient(every, *(b[mb_inds] for b in batch))
    return forward, targets, minibatch_gradient, optimizer_step


class Run:
    """One run's plumbing: its name and directory, seeds and device, TensorBoard (and wandb), the progress bar,
    signals, checkpoints and resume.

    SIGTERM, SIGUSR1 (Slurm's pre-timeout signal) and a first Ctrl-C stop the run with a checkpoint and a line naming
    --resume, exit 75 (Ctrl-C: 130): at the end of the iteration if that comes within STOP_SECONDS, else at once (the
    page calls run.check() in its loops) with the checkpoint of the iteration's start, kept in memory (mark); the
    running iteration is then trained again on resume. A line is printed as a signal arrives; a second signal with a
    Ctrl-C among the two aborts at once (the logs flushed, the last checkpoint named)."""

    def __init__(self, args, describe):
        self.args, self.signals, self.stopping, self.now, self.signalled = args, [], False, False, None
        self.iteration, self.iteration_started, self.iteration_seconds, self.boundary, self.progress = 0, None, None, None, None
        self.start_iteration, self.global_step, self.last_checkpoint, self.saved, self.writer = 0, 0, args.resume, None, None
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            signal.signal(signum, self.on_signal)
        Run.current = self  # for the entry point's abort
        self.name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        self.dir = f"runs/{self.name}"
        self.resumed = load_checkpoint(args.resume) if args.resume else None
        changed = changed_flags(args, self.resumed) if self.resumed else []
        print(describe + (f"; resuming {args.resume} after iteration {self.resumed['iteration']} on fresh episodes "
                          "(an envpool env's state is not saved)" if self.resumed else "")
              + (f"; flags changed since the checkpoint: {', '.join(changed)}" if changed else ""))
        if args.track:
            import wandb

            wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                       config=vars(args), name=self.name, save_code=True)
        self.writer = SummaryWriter(self.dir)
        self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n%s" % (
            "\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])))
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = args.torch_deterministic
        if args.torch_threads:
            torch.set_num_threads(args.torch_threads)
        self.device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        self.recent_returns = deque(maxlen=20)

    def on_signal(self, signum, frame):
        again = bool(self.signals) and (signum == signal.SIGINT or signal.SIGINT in self.signals)
        self.signals.append(signum)
        if again:
            raise KeyboardInterrupt  # unwinds to the entry point, which flushes the logs and exits
        self.signalled = self.signalled or time.time()  # check() stops at once STOP_SECONDS after it, whatever the estimate
        left = None if self.iteration_seconds is None else self.iteration_started + self.iteration_seconds - time.time()
        self.now = left is None or left > STOP_SECONDS
        if not self.now:
            when = f"at the end of iteration {self.iteration} (in about {max(left, 0):.0f} s), with a checkpoint"
        elif self.boundary is None and not self.last_checkpoint:
            when = "now; nothing is saved before the first iteration ends"
        else:
            when = f"now, with the checkpoint of iteration {self.iteration - 1} (iteration {self.iteration} is trained again on resume)"
        try:  # written straight to the descriptor: a print here could land inside another one
            os.write(2, f"\n{signal.Signals(signum).name} received: stopping {when}; a Ctrl-C aborts at once\n".encode())
        except OSError:  # stderr closed (a pipe's reader gone): the stop goes on
            pass

    def mark(self, iteration, global_step, **state):
        """Iteration `iteration` starts: what its checkpoint would hold is kept (copied, unless a checkpoint of the
        iteration before is on disk), for a stop that cannot wait for the iteration's end; its time is measured."""
        now = time.time()
        if self.iteration_started is not None:
            self.iteration_seconds = now - self.iteration_started
        self.iteration, self.iteration_started = iteration, now
        nothing = iteration - 1 == self.start_iteration and not self.args.resume  # a fresh run's first iteration
        self.boundary = None if self.saved == iteration - 1 or nothing else \
            copy.deepcopy(self.state(iteration - 1, global_step, **state))
        self.now = self.now or bool(self.signals)  # a signal after the last iteration's end read them: stop here

    def check(self, envs):
        """In the page's loops: after a signal that cannot wait for the iteration's end (or has waited STOP_SECONDS for
        it), stop now, with mark's checkpoint."""
        if self.now or self.signalled and time.time() - self.signalled > STOP_SECONDS:
            if self.boundary is not None:
                self.write_checkpoint(self.boundary)
            if self.progress is not None:
                self.progress.close()
            last = self.last_checkpoint
            print(f"stopped by signal {self.signals[0]} during iteration {self.iteration}; "
                  + (f"resume with --resume {last}" if last else "nothing saved: rerun the command"))
            self.writer.close()
            envs.close()
            sys.exit(128 + signal.SIGINT if signal.SIGINT in self.signals else REQUEUE)

    def restore(self, **objects):
        """Load a --resume checkpoint into the named modules and optimisers, with the counters and every RNG: the
        checkpoint (its other entries for the caller), or None when the run starts afresh."""
        state = self.resumed
        for name, obj in objects.items() if state else ():
            if isinstance(obj, torch.optim.Optimizer):
                lr = obj.param_groups[0]["lr"]  # this run's flag, not the saved one (annealing sets it anew)
                for group in state[name]["param_groups"]:  # step as this run does (fused or capturable): a
                    group.update({k: v for k, v in obj.param_groups[0].items() if k != "params"})  # checkpoint may differ
                obj.load_state_dict(state[name])
                for param, moments in obj.state.items():  # the moments in their parameter's layout (a CUDA run's are
                    moments.update({k: torch.empty_like(param).copy_(v) for k, v in moments.items() if k != "step"})  # not channels_last)
                obj.param_groups[0]["lr"] = lr
            else:
                obj.load_state_dict(state[name])
        if state:
            self.start_iteration, self.global_step = state["iteration"], state["global_step"]
            self.saved = self.start_iteration  # on disk: the --resume file
            self.recent_returns.extend(state["recent_returns"])
            rng = state["rng"]
            random.setstate(rng["python"])
            np.random.set_state(rng["numpy"])
            torch.set_rng_state(rng["torch"])
            if rng["cuda"] is not None and torch.cuda.is_initialized():
                torch.cuda.set_rng_state_all(rng["cuda"])
        return state

    def begin(self):
        """Start the clock and the progress bar, before the first iteration."""
        self.start_time, self.start_step, self.logged = time.time(), self.global_step, 0
        self.progress = tqdm(total=self.args.num_iterations * self.args.batch_size, initial=self.global_step,
                             unit="step", unit_scale=True, dynamic_ncols=True)

    @contextlib.contextmanager
    def paused(self):
        """A block whose time steps/s leaves out (an evaluation between iterations)."""
        started = time.time()
        try:
            yield
        finally:
            self.start_time += time.time() - started

    def episode(self, global_step, episodic_return, length):
        """A finished episode (a game over, for Atari): logged, and counted in the progress bar's recent return."""
        self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        self.writer.add_scalar("charts/episodic_length", length, global_step)
        self.recent_returns.append(episodic_return)

    def log(self, global_step, scalars, **postfix):
        """An iteration's scalars, steps/s (from the second iteration on: the first compiles and warms up) and the
        progress bar."""
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step)
        now = time.time()
        sps = int((global_step - self.start_step) / (now - self.start_time))
        self.writer.add_scalar("charts/SPS", sps, global_step)
        self.logged += 1
        if self.logged == 1:
            self.first_iteration_seconds, self.start_time, self.start_step = now - self.start_time, now, global_step
        elif self.logged == 2:
            self.writer.add_scalar("charts/first_iteration_seconds", self.first_iteration_seconds, global_step)
        self.progress.update(self.args.batch_size)
        recent = f"{np.mean(self.recent_returns):.1f}" if self.recent_returns else "-"
        self.progress.set_postfix(sps=sps, ret=recent, **postfix)

    def fail(self, iteration, what):
        """Stop a run whose numbers went bad, naming the last good checkpoint: exit 1."""
        self.progress.close()
        print(f"{os.path.basename(__file__)}: error: iteration {iteration}: {what}; last good checkpoint: "
              f"{self.last_checkpoint or 'none'}", file=sys.stderr)
        sys.exit(1)

    def checkpoint_due(self, iteration):
        """Whether this iteration ends with a checkpoint: every --save-every, the last, or after a signal."""
        self.stopping = bool(self.signals)  # read once: a signal may arrive between its uses
        every = self.args.save_every
        return self.stopping or bool(every and (iteration % every == 0 or iteration == self.args.num_iterations))

    def state(self, iteration, global_step, **state):
        """What a checkpoint holds: the named modules' and optimisers' state dicts, the other entries as given, the
        counters, the flags and every RNG."""
        state = {name: value.state_dict() if hasattr(value, "state_dict") else value for name, value in state.items()}
        state.update({"iteration": iteration, "global_step": global_step, "recent_returns": list(self.recent_returns),
                      "args": vars(self.args), "script": os.path.basename(__file__),
                      "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                              "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}})
        return state

    def checkpoint(self, iteration, global_step, **state):
        """runs/<run>/checkpoints/iter_<iteration>.pt: state(...), written to a temporary name, then renamed."""
        self.write_checkpoint(self.state(iteration, global_step, **state))

    def write_checkpoint(self, state):
        directory, iteration = f"{self.dir}/checkpoints", state["iteration"]
        path = f"{directory}/iter_{iteration}.pt"
        os.makedirs(directory, exist_ok=True)
        torch.save(state, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # never a half-written checkpoint
        self.last_checkpoint, self.saved = path, iteration  # named before the older ones go: an abort names this one
        saved = sorted(int(name[5:-3]) for name in os.listdir(directory) if re.fullmatch(r"iter_\d+\.pt", name))
        for old in saved[: -self.args.keep_checkpoints] if self.args.keep_checkpoints else []:
            os.remove(os.path.join(directory, f"iter_{old}.pt"))

    def stop_if_signalled(self, iteration, envs):
        """After a signal (read by checkpoint_due), close the run and exit with the --resume line: 75, 130 for Ctrl-C."""
        if self.stopping and iteration < self.args.num_iterations:
            self.progress.close()
            print(f"stopped by signal {self.signals[0]} after iteration {iteration}; resume with --resume {self.last_checkpoint}")
            self.writer.close()
            envs.close()
            sys.exit(128 + signal.SIGINT if signal.SIGINT in self.signals else REQUEUE)

    def save_states(self, records, **describe):
        """Coverage records of this iteration, appended to runs/<run>/coverage.bin."""
        append_coverage(self.dir, records, **describe)

    def save_model(self, model):
        """--save-model: the trained `model`'s state dict beside the run's logs."""
        self.progress.close()
        path = f"{self.dir}/{self.args.exp_name}.pt"
        torch.save(model.state_dict(), path)
        print(f"model saved to {path}")

    def finish(self):
        """The end of a run that trained to its last iteration."""
        self.progress.close()
        self.writer.close()

def append_coverage(run_dir, records, **describe):
    """Append records to run_dir/coverage.bin (fixed-size records; their layout and `describe` in coverage.json)."""
    header = os.path.join(run_dir, "coverage.json")
    if not os.path.exists(header):
        with open(header, "w") as f:
            json.dump({"format": "cleanrl-scale coverage 1", "paper": "data-collection App. B.7", "dtype": [
                [name, records.dtype[name].base.str, list(records.dtype[name].shape)] for name in records.dtype.names],
                **describe}, f)
    with open(os.path.join(run_dir, "coverage.bin"), "ab") as f:
        f.write(records.tobytes())


if __name__ == "__main__":
    try:
        args = parse_command_line()
        resolve_args(args)
        check_runs_directory()
    except BadFlag as e:
        print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        main(args)
    except KeyboardInterrupt:  # a second signal with a Ctrl-C among them (or a Ctrl-C before the run had set up)
        run = getattr(Run, "current", None)
        last = run and run.last_checkpoint
        if run and run.writer is not None:
            run.writer.close()  # what was logged up to the abort
        print(f"stopped by signal {signal.SIGINT} (aborted); " + (f"resume with --resume {last}" if last else "nothing saved: rerun the command"))
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(128 + signal.SIGINT)
