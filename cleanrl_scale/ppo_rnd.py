"""PPO with Random Network Distillation (Burda et al., 2019) on hard-exploration Atari (envpool).

The hard-exploration arm of "The Impact of On-Policy Parallelized Data Collection on Deep RL Networks" (the authors'
rebuttal to its ICML 2025 reviewers, Fig. 4): CleanRL's ppo_rnd_envpool on envpool's gymnasium API, with what this
project's PPO on Atari has (the scaling recipes, the exact KL / DDR, the dynamics/ metrics, uint8 storage, --compile,
and runs that survive preemption: the appendix at the end of the file), and the number of Montezuma rooms visited.

Departures from CleanRL's ppo_rnd_envpool, each OpenAI's RND instead: vf_coef 1.0 (CleanRL 0.5), no episodic life, and
the intrinsic-reward filter runs over time within each env (CleanRL's `.T` runs it over the envs of one step). The
observation normaliser is updated in torch on the device from float64 sums (CleanRL: a float64 numpy copy of the batch).
A resumed run starts fresh episodes (envpool's emulator state cannot be saved).
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
import torch.nn.functional as F
import torch.optim as optim
import tyro
from gymnasium.wrappers.utils import RunningMeanStd  # the intrinsic returns' (CleanRL: gym's, the same)
from torch.distributions.categorical import Categorical
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""
    eval_episodes: int = 10
    """number of full games the saved model (--save-model) is evaluated on"""

    # Algorithm specific arguments
    env_id: str = "MontezumaRevenge-v5"
    """the id of the envpool Atari environment"""
    total_timesteps: int = 2000000000
    """total environment steps of the experiment (a fixed data budget)"""
    learning_rate: float = 1e-4
    """the learning rate of the optimizer (lr0 of a scaling recipe)"""
    num_envs: int = 128
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.999
    """the discount factor gamma of the extrinsic reward"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: Optional[int] = None
    """the number of mini-batches (default 4, or derived from --minibatch-size or the recipe)"""
    minibatch_size: int = 0
    """the mini-batch size (0 = derive it from --num-minibatches)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the (extrinsic) value function"""
    ent_coef: float = 0.001
    """coefficient of the entropy"""
    vf_coef: float = 1.0
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""
    sticky_action: bool = True
    """if toggled, sticky actions (repeat_action_probability 0.25) as in the RND paper"""

    # RND arguments
    update_proportion: float = 0.25
    """proportion of each minibatch the RND predictor is trained on"""
    int_coef: float = 1.0
    """coefficient of the intrinsic advantages"""
    ext_coef: float = 2.0
    """coefficient of the extrinsic advantages"""
    int_gamma: float = 0.99
    """the discount factor gamma of the intrinsic reward"""
    num_iterations_obs_norm_init: int = 50
    """iterations (of num-steps random-action steps) that initialise the observation normaliser"""

    # Scaling recipes (stagnation paper §5, App. D)
    scaling_recipe: str = "none"
    """how minibatches and lr follow --num-envs: none, more-minibatches, bigger-minibatch, bigger-minibatch-sqrt-lr, hybrid"""
    base_num_envs: int = 128
    """N0: the number of envs of the base config a recipe scales from"""
    base_num_minibatches: int = 4
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
    """first states of the dynamics/ sample saved to runs/<run>/coverage.bin for the coverage metric (App. B.7): a 21x21
    uint8 thumbnail and the actor's hidden layer (float16); unset: the whole sample (--dynamics-batch, at most the batch);
    0 disables"""
    coverage_every: int = 0
    """save them at iteration 1 and every this many iterations, a multiple of --dynamics-every (0: about 20 saves)"""
    kl_sample: int = 0
    """states of the batch the exact KL (losses/approx_kl, charts/ddr) is averaged over (0: the whole batch)"""


# The flag rules of this script (the run's plumbing below adds those every script shares); check_args the rest
RULES = {
    "must be positive": ("num_envs", "num_steps", "update_epochs", "total_timesteps", "dynamics_batch", "eval_episodes",
                         "num_iterations_obs_norm_init", "learning_rate", "clip_coef", "max_grad_norm"),
    "must be >= 0": ("minibatch_size", "dynamics_every", "dormant_tau", "int_coef", "ext_coef", "ent_coef", "vf_coef",
                     "kl_sample"),
    "must lie in [0, 1]": ("gamma", "int_gamma", "gae_lambda"),
}
STEP_BYTES = 4 * 84 * 84 + 128  # a step's 4 stacked 84 x 84 frames (uint8) and its numbers (under 128 bytes)
CHECKPOINT_KEYS = ("agent", "rnd_model", "optimizer", "normalisers", "recent_returns")  # what its checkpoints hold
CHECKPOINT_MUST_MATCH = ("env_id", "num_envs")  # the storage, the reward filter, the episode counters
NOT_LEARNING = ("eval_episodes",)  # flags that do not change what a run learns (besides the appendix's)


def check_args(args):
    if args.target_kl is not None and not args.target_kl > 0:
        raise BadFlag(f"--target-kl must be positive when given (got {args.target_kl})")
    if not 0.0 < args.update_proportion <= 1.0:
        raise BadFlag(f"--update-proportion must lie in (0, 1] (got {args.update_proportion})")
    if envpool.registration.registry.specs.get(args.env_id, ("",))[0] != "envpool.atari":
        raise BadFlag(f"--env-id must be an envpool Atari id such as MontezumaRevenge-v5 (got {args.env_id!r})")
    resolve_minibatches(args, default=4)
    if args.kl_sample > args.batch_size:
        raise BadFlag(f"--kl-sample {args.kl_sample} is more than the batch ({args.batch_size} = num-envs x num-steps)")
    if args.norm_adv and args.minibatch_size < 2:
        raise BadFlag(f"--minibatch-size must be at least 2 with --norm-adv (the std of one advantage is undefined; got {args.minibatch_size})")


# Environment: envpool Atari, the rooms a game's RAM names
# RAM byte holding the current room, for games whose rooms are a standard exploration measure
ROOM_RAM_BYTE = {"MontezumaRevenge-v5": 3}


def make_env(env_id, num_envs, seed, sticky_action=True):
    """RND's setup: no episodic life (a life lost does not end the episode), clipped rewards, sticky actions;
    info["reward"] keeps the raw score and info["ram"] the console RAM."""
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=False, reward_clip=True, seed=seed,
                        repeat_action_probability=0.25 if sticky_action else 0.0)


# Normalisers: running statistics of observations and intrinsic returns
class FrameRunningMeanStd:
    """RunningMeanStd of uint8 frames on the device, in float64 like gymnasium's numpy one (the same update)."""

    def __init__(self, shape, device):
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = 1e-4

    def update(self, frames, chunk=1024):
        """One batch's moments (`frames`: a tensor of frames, or a list of tensors that together are the batch) from
        float64 sums over chunks, exact for uint8 values (a float copy of the whole batch would double the rollout's
        memory: 3.4 GiB more at 1,024 envs x 128 steps)."""
        batches = frames if isinstance(frames, list) else [frames]
        total, squares, count = torch.zeros_like(self.mean), torch.zeros_like(self.var), 0
        for part in (piece for batch in batches for piece in batch.split(chunk)):
            x = part.double()
            total += x.sum(0)
            squares += x.square().sum(0)
            count += len(part)
        mean = total / count
        var, delta, tot_count = (squares / count - mean.square()).clamp_(min=0), mean - self.mean, self.count + count
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / tot_count
        self.mean, self.var, self.count = self.mean + delta * count / tot_count, m2 / tot_count, tot_count

    def stats(self):
        """(mean, std) in float32, for `normalise_frame`; taken once per rollout / update, not per step."""
        return self.mean.float(), self.var.sqrt().float()


class RewardForwardFilter:
    """Discounted sum of the intrinsic rewards seen so far, per env (never reset: non-episodic), fed one step of
    every env at a time, so that it runs over time within each env as OpenAI's RND does."""

    def __init__(self, gamma):
        self.rewems, self.gamma = None, gamma

    def update(self, rews):
        self.rewems = rews if self.rewems is None else self.rewems * self.gamma + rews
        return self.rewems


def normalise_frame(frames, stats):
    """The last frame of uint8 observations, normalised by the running (mean, std) and clipped to [-5, 5]."""
    mean, std = stats
    return ((frames[:, 3:4].float() - mean) / std).clip(-5, 5)


# Networks: the actor-critic with two value heads, RND's target and predictor
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """CleanRL's RND agent: Nature CNN + 256 + 448 torso, a policy head and two value heads."""

    def __init__(self, num_actions):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 256)), nn.ReLU(),
            layer_init(nn.Linear(256, 448)), nn.ReLU())
        self.extra_layer = nn.Sequential(layer_init(nn.Linear(448, 448), std=0.1), nn.ReLU())
        self.actor = nn.Sequential(layer_init(nn.Linear(448, 448), std=0.01), nn.ReLU(),
                                   layer_init(nn.Linear(448, num_actions), std=0.01))
        self.critic_ext = layer_init(nn.Linear(448, 1), std=0.01)
        self.critic_int = layer_init(nn.Linear(448, 1), std=0.01)

    def preprocess(self, x):
        """uint8 frames -> floats in [0, 1], in the memory layout of the conv weights."""
        channels_last = self.network[0].weight.is_contiguous(memory_format=torch.channels_last)
        x = x.to(torch.float32, copy=True).div_(255.0)  # divided in place: one allocation of the floats, not two
        return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def values(self, hidden):
        features = self.extra_layer(hidden)
        return self.critic_ext(features + hidden), self.critic_int(features + hidden)

    def get_value(self, x):
        return self.values(self.network(self.preprocess(x)))

    def get_logits(self, x):
        return self.actor(self.network(self.preprocess(x)))

    def get_action_and_value(self, x, action=None):
        hidden = self.network(self.preprocess(x))
        logits = self.actor(hidden)
        probs = Categorical(logits=logits, validate_args=False)  # a nan reaches the end-of-iteration check, not a raise
        if action is None:
            action = probs.sample()
        value_ext, value_int = self.values(hidden)
        return action, probs.log_prob(action), probs.entropy(), value_ext, value_int, logits


class RNDModel(nn.Module):
    """A trained predictor and a frozen random target, both CNNs on one normalised 84x84 frame."""

    def __init__(self):
        super().__init__()

        def convs():
            return [layer_init(nn.Conv2d(1, 32, 8, stride=4)), nn.LeakyReLU(),
                    layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.LeakyReLU(),
                    layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.LeakyReLU(), nn.Flatten()]

        self.predictor = nn.Sequential(*convs(), layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
                                       layer_init(nn.Linear(512, 512)), nn.ReLU(), layer_init(nn.Linear(512, 512)))
        self.target = nn.Sequential(*convs(), layer_init(nn.Linear(64 * 7 * 7, 512)))
        for param in self.target.parameters():
            param.requires_grad = False

    def forward(self, next_obs):
        return self.predictor(next_obs), self.target(next_obs)


def hidden_activations(agent, obs):
    """Every hidden layer's output (after its ReLU) of the agent, torso, extra layer and the actor's hidden layer:
    32 + 64 + 64 conv channels, 256, 448, 448, 448 units; and the actor's logits."""
    acts, x = [], agent.preprocess(obs)
    for layer in agent.network:
        x = layer(x)
        if isinstance(layer, nn.ReLU):
            acts.append(x)
    hidden = acts[-1]
    acts.append(agent.extra_layer(hidden))
    actor_hidden = agent.actor[1](agent.actor[0](hidden))
    acts.append(actor_hidden)
    return acts, agent.actor[2](actor_hidden)


# Loss: intrinsic returns, two-head GAE, RND's and PPO's losses
def discounted_intrinsic_returns(reward_filter, curiosity_rewards):
    """(num_steps, num_envs) discounted intrinsic returns: the filter is fed one time step of every env at a time,
    so it runs over time within each env, as OpenAI's RND does (CleanRL's `.T` feeds it one env's rollout at a time)."""
    return np.array([reward_filter.update(r) for r in curiosity_rewards])


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """GAE(lambda) over a rollout of shape (num_steps, num_envs); dones[t] marks obs[t] as a new episode."""
    advantages, lastgaelam, num_steps = torch.zeros_like(rewards), 0, rewards.shape[0]
    for t in reversed(range(num_steps)):
        nextnonterminal = 1.0 - (next_done if t == num_steps - 1 else dones[t + 1])
        nextvalues = next_value if t == num_steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def two_head_gae(args, rewards, curiosity_rewards, ext_values, int_values, dones, next_ext, next_int, next_done):
    """Extrinsic GAE cut at episode ends; intrinsic GAE over the whole stream (non-episodic, RND §2.3)."""
    ext_advantages, ext_returns = compute_gae(rewards, ext_values, dones, next_ext, next_done, args.gamma, args.gae_lambda)
    never = torch.zeros_like(dones)
    int_advantages, int_returns = compute_gae(curiosity_rewards, int_values, never, next_int, never[0], args.int_gamma, args.gae_lambda)
    return ext_advantages, ext_returns, int_advantages, int_returns


def rnd_loss(rnd_model, next_obs, mask, stats):
    """The RND predictor's error on the normalised newest frames of `next_obs`, over the states `mask` keeps."""
    predict_next_state_feature, target_next_state_feature = rnd_model(normalise_frame(next_obs, stats))
    forward_loss = F.mse_loss(predict_next_state_feature, target_next_state_feature.detach(), reduction="none").mean(-1)
    return (forward_loss * mask).sum() / torch.clamp(mask.sum(), min=1.0)


def ppo_loss(agent, args, obs, actions, logprobs, advantages, ext_returns, int_returns, ext_values):
    """CleanRL's PPO loss with two value heads (the intrinsic one's unclipped) on a minibatch, and its statistics."""
    _, newlogprob, entropy, new_ext_values, new_int_values, _ = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - logprobs
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    new_ext_values, new_int_values = new_ext_values.view(-1), new_int_values.view(-1)
    if args.clip_vloss:
        ext_v_loss_unclipped = (new_ext_values - ext_returns) ** 2
        ext_v_clipped = ext_values + torch.clamp(new_ext_values - ext_values, -args.clip_coef, args.clip_coef)
        ext_v_loss_clipped = (ext_v_clipped - ext_returns) ** 2
        ext_v_loss = 0.5 * torch.max(ext_v_loss_unclipped, ext_v_loss_clipped).mean()
    else:
        ext_v_loss = 0.5 * ((new_ext_values - ext_returns) ** 2).mean()
    int_v_loss = 0.5 * ((new_int_values - int_returns) ** 2).mean()
    v_loss = ext_v_loss + int_v_loss
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, torch.stack([v_loss, ext_v_loss, int_v_loss, pg_loss, entropy_loss, approx_kl, clipfrac])  # STATS but rnd_loss


# what a minibatch's gradient step reports (main's minibatch_gradient), in order: the value losses (both heads, then
# each), PPO's policy loss, the entropy, the approximate KL, the clip fraction and the RND predictor's loss
STATS = ("value_loss", "value_loss_ext", "value_loss_int", "policy_loss", "entropy", "approx_kl", "clipfrac", "rnd_loss")


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
    """feature rank, dormant %, weight norm, policy variance and ESS on a sample of the batch (App. B). The
    penultimate features are the actor's hidden layer (feature_rank) and the value heads' input, extra layer +
    torso (feature_rank_critic); dormant neurons are counted over every hidden layer."""
    acts, logits = hidden_activations(agent, obs)
    dist = Categorical(logits=logits)
    return {
        "dynamics/weight_norm": weight_norm(agent),
        "dynamics/feature_rank": feature_rank(acts[-1]),
        "dynamics/feature_rank_critic": feature_rank(acts[-2] + acts[-3]),
        "dynamics/dormant_pct": dormant_percentage(acts, tau),
        "dynamics/policy_variance": policy_variance(dist.probs),
        "dynamics/ess_pct": ess_percentage((dist.log_prob(actions) - old_logprobs).exp()),
    }


def evaluate(agent, args, device):
    """Raw score of one full game in each of `eval_episodes` envs, actions sampled."""
    envs = make_env(args.env_id, args.eval_episodes, (args.seed + 1) % 2**31, args.sticky_action)
    obs, _ = envs.reset()
    scores, finished = np.zeros(args.eval_episodes), np.zeros(args.eval_episodes, dtype=bool)
    while not finished.all():
        with torch.inference_mode():
            action = agent.get_action_and_value(torch.as_tensor(obs, device=device))[0]
        obs, _, term, trunc, info = envs.step(action.cpu().numpy())
        scores += info["reward"] * ~finished
        finished |= term | trunc
    envs.close()
    return scores


# Coverage (data-collection App. B.7): states of the dynamics/ sample, saved for a projection after the run
@torch.no_grad()
def coverage_records(agent, obs, iteration, global_step):
    """The records of states `obs` (uint8, N x 4 x 84 x 84) for runs/<run>/coverage.bin: when, the newest frame averaged
    over 4x4 blocks and the penultimate features."""
    thumbnails = obs[:, -1].float().reshape(len(obs), 21, 4, 21, 4).mean((2, 4)).round().to(torch.uint8)
    features = hidden_activations(agent, obs)[0][-1]
    records = np.zeros(len(obs), np.dtype([("iteration", "<i8"), ("global_step", "<i8"), ("obs", "u1", (21, 21)),
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
def iteration_statistics(agent, parameters, before, mb_stats, means, kl, b_ext_returns, b_ext_values, intrinsic_rewards):
    """What an iteration logs, in one read from the device: the last minibatch's losses and KL (as CleanRL logs them),
    the clip fraction, gradient norm and RND loss over the minibatch steps (`means`), the batch KL, the extrinsic head's
    explained variance, the mean intrinsic reward, how far the update moved the agent's parameters (all; the policy's:
    encoder and actor head; stagnation §3), and whether all of `parameters` and the numbers are finite."""
    var_y = b_ext_returns.var(unbiased=False)
    explained_var = torch.where(var_y > 0, 1 - (b_ext_returns - b_ext_values).var(unbiased=False) / var_y, torch.nan)
    losses = mb_stats[:6]  # the last minibatch's
    finite = (torch.stack([torch.isfinite(p).all() for p in parameters]).all()
              & torch.isfinite(losses).all() & torch.isfinite(means).all() & torch.isfinite(kl))
    moved = {name: torch.linalg.vector_norm(p - before[name]) for name, p in agent.named_parameters()}
    moved_policy = [norm for name, norm in moved.items() if name.startswith(("network.", "actor."))]
    read = torch.cat([losses, means, torch.stack([kl, explained_var, intrinsic_rewards.mean(),
                      torch.stack(list(moved.values())).norm(), torch.stack(moved_policy).norm(), finite.float()])]).tolist()
    return dict(zip(("losses/value_loss", "losses/value_loss_ext", "losses/value_loss_int", "losses/policy_loss",
                     "losses/entropy", "losses/approx_kl_last_minibatch", "losses/clipfrac", "losses/grad_norm",
                     "losses/rnd_loss", "losses/approx_kl", "losses/explained_variance", "charts/intrinsic_reward_mean",
                     "charts/update_norm", "charts/update_norm_actor", "finite"), read))  # the one sync


def main(args):
    run = Run(args, f"batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} "
                    f"iterations, {args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} "
                    f"(recipe {args.scaling_recipe}), {args.update_epochs} epochs")
    device = run.device
    envs = make_env(args.env_id, args.num_envs, args.seed, args.sticky_action)
    num_actions = envs.action_space.n
    agent = Agent(num_actions).to(device)
    rnd_model = RNDModel().to(device)
    if device.type == "cpu":  # faster convolutions on CPU (measured)
        agent.to(memory_format=torch.channels_last)
        rnd_model.to(memory_format=torch.channels_last)
    combined_parameters = list(agent.parameters()) + list(rnd_model.predictor.parameters())
    # compiled or captured, the learning rate is a tensor that annealing fills in place (LeanRL): a new float each
    # iteration would recompile the optimizer step
    compiled = args.compile or args.cudagraphs
    lr = torch.tensor(args.learning_rate, device=device) if compiled else args.learning_rate
    fused = {} if compiled else {"fused": True}  # eager: one kernel for all parameters (a CPU's default loops)
    optimizer = optim.Adam(combined_parameters, lr=lr, eps=1e-5, capturable=args.cudagraphs and not args.compile, **fused)
    obs_rms = FrameRunningMeanStd((1, 84, 84), device)
    reward_rms = RunningMeanStd()
    discounted_reward = RewardForwardFilter(args.int_gamma)
    room_byte = ROOM_RAM_BYTE.get(args.env_id)
    rooms = set()

    # rollout storage; observations stay uint8, converted per minibatch. For channels_last networks they are allocated
    # channels innermost: a minibatch gathered from them is in the network's layout (no copy, no second buffer)
    shape = (args.num_steps, args.num_envs) + envs.observation_space.shape
    if device.type == "cpu":
        obs = torch.zeros(shape[:2] + shape[3:] + shape[2:3], dtype=torch.uint8).permute(0, 1, 4, 2, 3)
    else:
        obs = torch.zeros(shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs, rewards, curiosity_rewards, dones, ext_values, int_values = (
        torch.zeros((args.num_steps, args.num_envs), device=device) for _ in range(6))
    behaviour_logits = torch.zeros((args.num_steps, args.num_envs, num_actions), device=device)
    episode_returns = np.zeros(args.num_envs)

    next_obs, info = envs.reset()
    saved = run.restore(agent=agent, rnd_model=rnd_model, optimizer=optimizer)
    if saved:
        norms = saved["normalisers"]
        obs_rms.mean, obs_rms.var, obs_rms.count = norms["obs"][0].to(device), norms["obs"][1].to(device), norms["obs"][2]
        reward_rms.mean, reward_rms.var, reward_rms.count = norms["reward"]
        discounted_reward.rewems, rooms = norms["reward_filter"], set(norms["rooms"])
    else:
        print(f"initialising the observation normaliser with {args.num_iterations_obs_norm_init * args.num_steps} random-action steps per env")
        for _ in range(args.num_iterations_obs_norm_init):
            frames = []  # each step's newest frame, copied: a view would keep envpool's whole 4-frame array alive
            for _ in range(args.num_steps):
                run.check(envs)
                next_obs, _, _, _, info = envs.step(np.random.randint(0, num_actions, size=(args.num_envs,)))
                frames.append(torch.as_tensor(next_obs[:, 3:4].copy(), device=device))
            obs_rms.update(frames)
            del frames
    global_step = run.global_step

    def normalisers():  # the running statistics a checkpoint holds
        return {"obs": (obs_rms.mean, obs_rms.var, obs_rms.count),
                "reward": (reward_rms.mean, reward_rms.var, reward_rms.count),
                "reward_filter": discounted_reward.rewems, "rooms": sorted(rooms)}

    def policy(x):  # the rollout's forward pass
        action, logprob, _, value_ext, value_int, logits = agent.get_action_and_value(x)
        return action, logprob, value_ext.flatten(), value_int.flatten(), logits

    def curiosity(next_obs, stats):
        """The intrinsic reward: the predictor's error on the normalised next frame."""
        predict_next_feature, target_next_feature = rnd_model(normalise_frame(next_obs, stats))
        return (target_next_feature - predict_next_feature).pow(2).sum(1) / 2

    def gae(next_obs, next_done, rewards, curiosity_rewards, ext_values, int_values, dones):
        next_value_ext, next_value_int = agent.get_value(next_obs)
        return two_head_gae(args, rewards, curiosity_rewards, ext_values, int_values, dones,
                            next_value_ext.reshape(1, -1), next_value_int.reshape(1, -1), next_done)

    def minibatch_gradient(mb_inds, mask, stats, batch):
        """The gradient of one minibatch's loss (PPO's, and the RND predictor's on the states `mask` keeps), left in
        .grad, and its statistics (STATS)."""
        forward_loss = rnd_loss(rnd_model, batch[0][mb_inds], mask, stats)
        loss, mb_stats = ppo_loss(agent, args, *[b[mb_inds] for b in batch])
        optimizer.zero_grad(set_to_none=not args.cudagraphs)  # a captured graph keeps the same .grad tensors
        (loss + forward_loss).backward()
        return torch.cat([mb_stats, forward_loss[None]]).detach()  # STATS

    def optimizer_step():
        grad_norm = nn.utils.clip_grad_norm_(combined_parameters, args.max_grad_norm)
        optimizer.step()
        return grad_norm

    if args.compile:  # LeanRL's arrangement: each compiled apart (the backward pass breaks the update's graph)
        policy, curiosity, gae = torch.compile(policy), torch.compile(curiosity), torch.compile(gae, fullgraph=True)
        minibatch_gradient, optimizer_step = torch.compile(minibatch_gradient), torch.compile(optimizer_step)
    if args.cudagraphs:
        from tensordict.nn import CudaGraphModule

        policy, curiosity, gae = CudaGraphModule(policy), CudaGraphModule(curiosity), CudaGraphModule(gae)
        captured_gradient, optimizer_step = CudaGraphModule(minibatch_gradient), CudaGraphModule(optimizer_step)

        # the captured update takes the minibatch alone, as LeanRL's does: given the whole rollout buffer, the graph
        # would copy all of it into its static inputs at every call
        every = torch.arange(args.minibatch_size, device=device)  # the gathered minibatch, whole (made once)
        def minibatch_gradient(mb_inds, mask, stats, batch):
            return captured_gradient(every, mask, stats, tuple(b[mb_inds] for b in batch))

    run.begin()
    next_obs = torch.as_tensor(next_obs, device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    for iteration in range(run.start_iteration + 1, args.num_iterations + 1):
        run.mark(iteration, global_step, agent=agent, rnd_model=rnd_model, optimizer=optimizer, normalisers=normalisers())
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            if compiled:
                lr.fill_(frac * args.learning_rate)
            else:
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        rollout_stats = obs_rms.stats()
        for step in range(0, args.num_steps):
            run.check(envs)  # a signal that cannot wait for the iteration's end
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.inference_mode():
                action, logprob, value_ext, value_int, logits = policy(next_obs)
            ext_values[step], int_values[step] = value_ext, value_int
            actions[step], logprobs[step], behaviour_logits[step] = action, logprob, logits

            next_obs, reward, terminations, truncations, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, device=device)
            next_obs = torch.as_tensor(next_obs, device=device)
            next_done = torch.as_tensor(np.logical_or(terminations, truncations), device=device, dtype=torch.float32)
            with torch.inference_mode():
                curiosity_rewards[step] = curiosity(next_obs, rollout_stats)
            if room_byte is not None:
                rooms.update(np.unique(info["ram"][:, room_byte]).tolist())

            episode_returns += info["reward"]
            game_over = terminations | truncations
            for idx in np.flatnonzero(game_over):
                run.episode(global_step, episode_returns[idx], info["elapsed_step"][idx])
            episode_returns[game_over] = 0.0

        # intrinsic rewards divided by a running std of the discounted intrinsic returns (the filter runs over time)
        curiosity_reward_per_env = discounted_intrinsic_returns(discounted_reward, curiosity_rewards.cpu().numpy())
        reward_rms.update_from_moments(np.mean(curiosity_reward_per_env), np.var(curiosity_reward_per_env),
                                       curiosity_reward_per_env.size)
        curiosity_rewards /= np.sqrt(reward_rms.var)

        with torch.no_grad():
            ext_advantages, ext_returns, int_advantages, int_returns = gae(
                next_obs, next_done, rewards, curiosity_rewards, ext_values, int_values, dones)
        b_obs = obs.reshape((-1,) + envs.observation_space.shape)
        b_logprobs, b_actions, b_ext_returns, b_int_returns, b_ext_values = (
            x.reshape(-1) for x in (logprobs, actions, ext_returns, int_returns, ext_values))
        b_advantages = int_advantages.reshape(-1) * args.int_coef + ext_advantages.reshape(-1) * args.ext_coef
        batch = (b_obs, b_actions, b_logprobs, b_advantages, b_ext_returns, b_int_returns, b_ext_values)
        obs_rms.update(b_obs[:, 3:4])

        update_stats = obs_rms.stats()
        measure = args.dynamics_every > 0 and (iteration % args.dynamics_every == 0 or iteration == 1)
        b_inds = np.arange(args.batch_size)
        # the minibatches' statistics stay on the device; they are read once per iteration (no per-minibatch sync)
        sums, minibatch_steps = torch.zeros(3, device=device), 0  # clipfrac, grad norm, RND loss
        before = {name: p.detach().clone() for name, p in agent.named_parameters()}  # how far the update moves them
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            epoch_inds = torch.as_tensor(b_inds, device=device)  # one copy to the device per epoch, not per minibatch
            for start in range(0, args.batch_size, args.minibatch_size):
                run.check(envs)
                mb_inds = epoch_inds[start : start + args.minibatch_size]
                mask = (torch.rand(args.minibatch_size, device=device) < args.update_proportion).float()  # eager's RNG
                mb_stats = minibatch_gradient(mb_inds, mask, update_stats, batch)
                if measure and epoch == 0 and start == 0:  # B.4 on the agent's raw gradient, before clipping rescales it
                    kurtosis = grad_kurtosis([p.grad for p in agent.parameters() if p.grad is not None])
                sums += torch.stack([mb_stats[STATS.index("clipfrac")], optimizer_step(), mb_stats[STATS.index("rnd_loss")]])
                minibatch_steps += 1
            if args.target_kl is not None and mb_stats[STATS.index("approx_kl")].item() > args.target_kl:
                break  # (one read per epoch, only with --target-kl)

        kl = batch_kl(agent, b_obs, behaviour_logits.reshape(-1, num_actions), args.kl_sample, args.minibatch_size)
        logged = iteration_statistics(agent, combined_parameters, before, mb_stats, sums / minibatch_steps, kl,
                                      b_ext_returns, b_ext_values, curiosity_rewards)
        if not logged.pop("finite"):
            run.fail(iteration, "the loss or the parameters are not finite (nan or inf)")
        logged["charts/learning_rate"] = float(optimizer.param_groups[0]["lr"])
        logged["charts/ddr"] = args.batch_size / max(logged["losses/approx_kl"], 1e-12)  # stagnation §4.4
        if room_byte is not None:
            logged["charts/rooms_visited"] = len(rooms)
        if measure:
            sample = torch.randperm(args.batch_size, device=device)[: args.dynamics_batch]
            logged.update(dynamics_metrics(agent, b_obs[sample], b_actions[sample], b_logprobs[sample], args.dormant_tau))
            logged["dynamics/grad_kurtosis"] = kurtosis
            if args.coverage_samples and (iteration == 1 or iteration % args.coverage_every == 0):
                run.save_states(coverage_records(agent, b_obs[sample[: args.coverage_samples]], iteration, global_step),
                                obs="the newest frame of the stack, 84x84 averaged over 4x4 blocks",
                                features="the actor's hidden layer (448 units)")
        run.log(global_step, logged, rooms=len(rooms) if room_byte is not None else "-")

        if run.checkpoint_due(iteration):
            run.checkpoint(iteration, global_step, agent=agent, rnd_model=rnd_model, optimizer=optimizer, normalisers=normalisers())
        run.stop_if_signalled(iteration, envs)
        if iteration == args.reset_envs_at:  # what a resume from this iteration's checkpoint does
            envs.close()
            envs = make_env(args.env_id, args.num_envs, args.seed, args.sticky_action)
            next_obs = torch.as_tensor(envs.reset()[0], device=device)
            next_done = torch.zeros(args.num_envs, device=device)
            episode_returns[:] = 0.0

    envs.close()
    if args.save_model:  # both networks and the observation normaliser, in one file
        path = f"{run.dir}/{args.exp_name}.pt"
        torch.save({"agent": agent.state_dict(), "rnd_model": rnd_model.state_dict(),
                    "obs_rms": (obs_rms.mean.cpu().numpy(), obs_rms.var.cpu().numpy(), obs_rms.count)}, path)
        print(f"model saved to {path}")
        scores = evaluate(agent, args, device)
        for idx, score in enumerate(scores):
            run.writer.add_scalar("eval/episodic_return", score, idx)
        print(f"eval: mean score {scores.mean():.1f} over {args.eval_episodes} games")
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
