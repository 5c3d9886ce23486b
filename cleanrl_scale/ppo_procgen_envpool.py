"""PPO on Procgen (envpool), instrumented for the study of parallel data collection (data-collection paper §6.2, Fig. 7).

CleanRL's ppo_procgen (IMPALA CNN) on envpool's Procgen (`StarpilotEasy-v0`: the distribution mode is part of the id)
with the data-collection paper's Table 1 Procgen column and CleanRL's remaining defaults; everything ppo_atari_envpool.py
has (fixed step budget, scaling recipes of the stagnation paper §5 / App. D, dynamics/ metrics of App. B, exact KL and
DDR of stagnation §4.4, separate encoders, uint8 storage, checkpoints, --resume, signals, the NaN stop, --compile).
Trains on --num-levels levels from --start-level (0: the full distribution) and evaluates every --eval-every iterations
on held-out levels drawn by a seed of their own (Cobbe et al., 2020). Docs: docs/ppo_procgen_envpool.md.

Departures from CleanRL's ppo_procgen: envpool in place of gym3 (each episode adds one reset transition whose action
does nothing, as in CleanRL's envpool Atari scripts); the ReLU before the flatten runs before it (same values; a conv
channel is one neuron of the dormant metric); every finished episode is logged; the evaluation is this script's.
"""
import json
import math
import os
import re
import random
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
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    torch_threads: int = 0
    """CPU threads for torch (0 = torch's default)"""
    compile: bool = False
    """torch.compile the policy step, GAE and the minibatch update, as LeanRL does (the first iteration compiles:
    charts/SPS counts from the second, charts/first_iteration_seconds holds the first)"""
    cudagraphs: bool = False
    """also capture them as CUDA graphs (tensordict's CudaGraphModule, as LeanRL; CUDA only)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanrl-scale"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """whether to save the model into `runs/{run_name}`"""

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

    # Checkpoints
    save_every: int = 0
    """write runs/<run>/checkpoints/iter_<i>.pt every this many iterations and after the last (0: only when signalled)"""
    keep_checkpoints: int = 3
    """keep the run's newest this many checkpoints, deleting older ones as it writes new ones (0: keep every one)"""
    resume: Optional[str] = None
    """a checkpoint to continue from (its env, --num-envs and encoders; fresh episodes, everything else exact)"""
    reset_envs_at: int = 0
    """restart every env on fresh episodes after this iteration, as a resumed run does (0: never; to check a resume)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime: setting it is refused)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime: setting it is refused)"""


RECIPES = ("none", "more-minibatches", "bigger-minibatch", "bigger-minibatch-sqrt-lr", "hybrid")


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


def main(args):
    signalled = []  # SIGTERM / SIGUSR1 (Slurm's pre-timeout signal), a first Ctrl-C: checkpoint at the end of this
    # iteration, exit 75 (Ctrl-C: 130); a second Ctrl-C aborts at once

    def on_signal(signum, frame):
        if signum == signal.SIGINT and signal.SIGINT in signalled:
            raise KeyboardInterrupt
        signalled.append(signum)

    for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(signum, on_signal)
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    checkpoint = load_checkpoint(args.resume) if args.resume else None
    print(
        f"batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} iterations, "
        f"{args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} "
        f"(recipe {args.scaling_recipe}), {args.update_epochs} epochs; "
        + (f"levels {args.start_level} to {args.start_level + args.num_levels - 1}" if args.num_levels else "unlimited levels")
        + (f"; resuming {args.resume} after iteration {checkpoint['iteration']} on fresh episodes "
           "(envpool's game state is not saved)" if checkpoint else "")
        + (f"; flags changed since the checkpoint: {', '.join(changed_flags(args, checkpoint))}"
           if checkpoint and changed_flags(args, checkpoint) else ""))
    if args.track:
        import wandb
        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=vars(args),
                   name=run_name, save_code=True)
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in
                                                                               vars(args).items()])))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

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
    recent_returns = deque(maxlen=20)
    return_rms, discounted_returns = RunningMeanStd(), np.zeros(args.num_envs)  # the reward normaliser
    eval_seed = (args.seed + 10_000) % 2**31  # the evaluation's levels: drawn apart from the training pool's stream

    start_iteration, global_step = 0, 0
    if checkpoint:
        agent.load_state_dict(checkpoint["agent"])
        for group in checkpoint["optimizer"]["param_groups"]:  # step as this run does (fused or capturable): a
            group.update({k: v for k, v in optimizer.param_groups[0].items() if k != "params"})  # checkpoint may differ
        optimizer.load_state_dict(checkpoint["optimizer"])
        for param, state in optimizer.state.items():  # the moments in their parameter's layout (a CUDA run's are
            state.update({k: torch.empty_like(param).copy_(v) for k, v in state.items() if k != "step"})  # not channels_last)
        optimizer.param_groups[0]["lr"] = lr  # this run's flag, not the saved one (annealing sets it anew)
        start_iteration, global_step = checkpoint["iteration"], checkpoint["global_step"]
        recent_returns.extend(checkpoint["recent_returns"])
        return_rms.mean, return_rms.var, return_rms.count = checkpoint["return_rms"]
        restore_rng(checkpoint["rng"])
    checkpoint_dir = f"runs/{run_name}/checkpoints"
    last_checkpoint = args.resume
    chunk = args.grad_accum_size or args.minibatch_size

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

    if args.compile:  # LeanRL's arrangement: each compiled apart (the backward pass breaks the update's graph)
        policy, gae = torch.compile(policy), torch.compile(gae, fullgraph=True)
        minibatch_gradient, optimizer_step = torch.compile(minibatch_gradient), torch.compile(optimizer_step)
    if args.cudagraphs:
        from tensordict.nn import CudaGraphModule

        policy, gae = CudaGraphModule(policy), CudaGraphModule(gae)
        captured_gradient, optimizer_step = CudaGraphModule(minibatch_gradient), CudaGraphModule(optimizer_step)

        # the captured update takes the minibatch alone, as LeanRL's does: given the whole rollout buffer, the graph
        # would copy all of it into its static inputs at every call
        every = torch.arange(args.minibatch_size, device=device)  # the gathered minibatch, whole (made once)
        def minibatch_gradient(mb_inds, *batch):
            return captured_gradient(every, *(b[mb_inds] for b in batch))

    start_time, start_step, eval_seconds = time.time(), global_step, 0.0
    next_obs = torch.as_tensor(envs.reset()[0], device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    progress = tqdm(total=args.num_iterations * args.batch_size, initial=global_step, unit="step", unit_scale=True,
                    dynamic_ncols=True)

    for iteration in range(start_iteration + 1, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            if compiled:
                lr.fill_(frac * args.learning_rate)
            else:
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        if iteration == start_iteration + 2:  # the first iteration compiles (and warms up): steps/s counts from here
            first_iteration_seconds = time.time() - start_time - eval_seconds
            start_time, start_step, eval_seconds = time.time(), global_step, 0.0

        for step in range(0, args.num_steps):
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
                writer.add_scalar("charts/episodic_return", episode_returns[idx], global_step)
                writer.add_scalar("charts/episodic_length", info["elapsed_step"][idx], global_step)
                recent_returns.append(episode_returns[idx])
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
                mb_inds = epoch_inds[start : start + args.minibatch_size]
                mb_stats = minibatch_gradient(mb_inds, b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values)
                if measure and epoch == 0 and start == 0:
                    # B.4 on the raw gradient of the iteration's first minibatch, before clipping rescales it
                    kurtosis = grad_kurtosis([p.grad for p in agent.parameters() if p.grad is not None])
                grad_norm_sum += optimizer_step()
                clipfrac_sum += mb_stats[STATS.index("clipfrac")]
                minibatch_steps += 1

            if args.target_kl is not None and mb_stats[STATS.index("approx_kl")].item() > args.target_kl:
                break  # (one read per epoch, only with --target-kl)

        # KL(behaviour || updated policy) after the last epoch, exact for a categorical, on the whole batch or a
        # --kl-sample of it; DDR = transitions per iteration / that KL (stagnation §4.4)
        with torch.inference_mode():
            b_behaviour_logits = behaviour_logits.reshape(-1, num_actions)
            kl_inds = torch.randperm(args.batch_size, device=device)[: args.kl_sample] if args.kl_sample else None
            kl_sum = torch.zeros((), device=device)
            for start in range(0, args.kl_sample or args.batch_size, chunk):
                inds = kl_inds[start : start + chunk] if kl_inds is not None else slice(start, start + chunk)
                new_logits = agent.get_logits(b_obs[inds])
                old_logp = torch.log_softmax(b_behaviour_logits[inds], dim=-1)
                kl_sum += (old_logp.exp() * (old_logp - torch.log_softmax(new_logits, dim=-1))).sum()
            var_y = b_returns.var(unbiased=False)
            explained_var = torch.where(var_y > 0, 1 - (b_returns - b_values).var(unbiased=False) / var_y, torch.nan)
            # the parameters, the last minibatch's losses and the updated policy's KL on the batch (a forward pass)
            finite = (torch.stack([torch.isfinite(p).all() for p in agent.parameters()]).all()
                      & torch.isfinite(mb_stats).all() & torch.isfinite(kl_sum))
            moved = {name: torch.linalg.vector_norm(p - before[name]) for name, p in agent.named_parameters()}
            moved_policy = [norm for name, norm in moved.items() if name.startswith(("network.", "actor."))]  # encoder, head
            read = torch.cat([mb_stats[:4], torch.stack([kl_sum / (args.kl_sample or args.batch_size), clipfrac_sum / minibatch_steps,
                              grad_norm_sum / minibatch_steps, explained_var, torch.stack(list(moved.values())).norm(),
                              torch.stack(moved_policy).norm(), finite.float()])]).tolist()  # the one sync
        # the last minibatch's losses and KL (as CleanRL logs them), then the iteration's batch KL, clip fraction, norm
        logged = dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl_last_minibatch",
                           "approx_kl", "clipfrac", "grad_norm", "explained_variance", "update_norm", "update_norm_actor",
                           "finite"), read))
        if not logged.pop("finite"):
            progress.close()
            print(f"{os.path.basename(__file__)}: error: iteration {iteration}: the loss or the parameters are not finite "
                  f"(nan or inf); last good checkpoint: {last_checkpoint or 'none'}", file=sys.stderr)
            sys.exit(1)

        writer.add_scalar("charts/learning_rate", float(optimizer.param_groups[0]["lr"]), global_step)
        for chart in ("update_norm", "update_norm_actor"):
            writer.add_scalar(f"charts/{chart}", logged.pop(chart), global_step)
        for name, value in logged.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("charts/ddr", args.batch_size / max(logged["approx_kl"], 1e-12), global_step)
        if measure:
            sample = torch.randperm(args.batch_size, device=device)[: args.dynamics_batch]
            metrics = dynamics_metrics(agent, b_obs[sample], b_actions[sample], b_logprobs[sample], args.dormant_tau)
            metrics["dynamics/grad_kurtosis"] = kurtosis
            for tag, value in metrics.items():
                writer.add_scalar(tag, value, global_step)
            if args.coverage_samples and (iteration == 1 or iteration % args.coverage_every == 0):
                append_coverage(f"runs/{run_name}", coverage_records(agent, b_obs[sample[: args.coverage_samples]],
                                                                     iteration, global_step))
        if args.eval_every and (iteration % args.eval_every == 0 or iteration == args.num_iterations):
            eval_start = time.time()
            scores, levels = evaluate(agent, args.env_id, args.eval_episodes, eval_seed, device)
            writer.add_scalar("eval/episodic_return", scores.mean(), global_step)
            if args.num_levels:  # held out: none of the evaluation's levels is a training level (checked, not assumed)
                writer.add_scalar("eval/training_levels", training_levels(levels, args.start_level, args.num_levels),
                                  global_step)
            eval_seconds += time.time() - eval_start
        sps = int((global_step - start_step) / (time.time() - start_time - eval_seconds))  # training only
        writer.add_scalar("charts/SPS", sps, global_step)
        if iteration == start_iteration + 2:
            writer.add_scalar("charts/first_iteration_seconds", first_iteration_seconds, global_step)
        progress.update(args.batch_size)
        progress.set_postfix(sps=sps, ret=f"{np.mean(recent_returns):.1f}" if recent_returns else "-")

        stopping = bool(signalled)  # read once: a signal may arrive between the two uses
        if stopping or (args.save_every and (iteration % args.save_every == 0 or iteration == args.num_iterations)):
            last_checkpoint = save_checkpoint(f"{checkpoint_dir}/iter_{iteration}.pt", agent, optimizer, return_rms,
                                              iteration, global_step, recent_returns, args)
        if stopping and iteration < args.num_iterations:
            progress.close()
            print(f"stopped by signal {signalled[0]} after iteration {iteration}; resume with --resume {last_checkpoint}")
            writer.close()
            envs.close()
            sys.exit(128 + signal.SIGINT if signalled[0] == signal.SIGINT else REQUEUE)
        if iteration == args.reset_envs_at:  # what a resume from this iteration's checkpoint does
            envs.close()
            envs = make_env(args.env_id, args.num_envs, args.seed, args.num_levels, args.start_level)
            next_obs = torch.as_tensor(envs.reset()[0], device=device)
            next_done = torch.zeros(args.num_envs, device=device)
            episode_returns[:] = 0.0
            discounted_returns[:] = 0.0

    progress.close()
    envs.close()
    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save(agent.state_dict(), model_path)
        print(f"model saved to {model_path}")
    writer.close()


# ==== Plumbing: flag checks, checkpoints and resume, coverage states ====
class BadFlag(ValueError):
    """A flag value that breaks a rule; reported as one line, exit status 2."""


def check_runs_directory():
    """runs/ in the working directory must be a directory this process can write: checked before any compute."""
    if os.path.lexists("runs") and not os.path.isdir("runs"):
        raise BadFlag(f"{os.path.abspath('runs')} is not a directory: the runs are written under it")
    if not os.access("runs" if os.path.isdir("runs") else ".", os.W_OK | os.X_OK):
        raise BadFlag(f"cannot write {os.path.abspath('runs')}: start the run from a directory you can write")


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
    for rule, holds, flags in (
        ("must be positive", lambda v: v > 0, ("num_envs", "num_steps", "update_epochs", "total_timesteps", "dynamics_batch",
                                               "eval_episodes", "learning_rate", "clip_coef", "max_grad_norm")),
        ("must be >= 0", lambda v: v >= 0, ("minibatch_size", "dynamics_every", "torch_threads", "dormant_tau", "grad_accum_size",
                                            "ent_coef", "vf_coef", "kl_sample", "save_every", "keep_checkpoints", "reset_envs_at",
                                            "num_levels", "start_level", "eval_every", "coverage_every")),
        ("must lie in [0, 1]", lambda v: 0 <= v <= 1, ("gamma", "gae_lambda"))):
        for flag in flags:
            if not holds(getattr(args, flag)):
                raise BadFlag(f"--{flag.replace('_', '-')} {rule} (got {getattr(args, flag)})")
    if args.target_kl is not None and not args.target_kl > 0:
        raise BadFlag(f"--target-kl must be positive when given (got {args.target_kl})")
    if args.cudagraphs and not (args.cuda and torch.cuda.is_available()):
        raise BadFlag("--cudagraphs captures CUDA graphs: it needs a CUDA device and --cuda")
    if args.hybrid_minibatch_factor and args.scaling_recipe != "hybrid":
        raise BadFlag(f"--hybrid-minibatch-factor applies to --scaling-recipe hybrid only (got {args.scaling_recipe})")
    if envpool.registration.registry.specs.get(args.env_id, ("",))[0] != "envpool.procgen":
        raise BadFlag(f"--env-id must be an envpool Procgen id such as StarpilotEasy-v0 (got {args.env_id!r})")
    if args.start_level and not args.num_levels:  # with 0, levels are drawn from the full distribution, whatever the start
        raise BadFlag(f"--start-level {args.start_level} needs --num-levels > 0 (with 0 levels are drawn from the full distribution, whatever the start)")
    if args.start_level + args.num_levels >= 2**31:
        raise BadFlag(f"--start-level + --num-levels must be below 2^31 (Procgen's int32 level seeds; got {args.start_level + args.num_levels})")
    args.batch_size = args.num_envs * args.num_steps
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
        args.num_minibatches = 8 if args.num_minibatches is None else args.num_minibatches
        if args.num_minibatches <= 0 or args.batch_size % args.num_minibatches:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} must be positive and divide the batch {args.batch_size} (num-envs x num-steps)")
        args.minibatch_size = args.batch_size // args.num_minibatches
    if args.kl_sample > args.batch_size:
        raise BadFlag(f"--kl-sample {args.kl_sample} is more than the batch ({args.batch_size} = num-envs x num-steps)")
    if args.norm_adv and args.minibatch_size < 2:
        raise BadFlag(f"--minibatch-size must be at least 2 with --norm-adv (the std of one advantage is undefined; got {args.minibatch_size})")
    if args.total_timesteps >= 2**62:  # the step count is an int64 in TensorBoard and the checkpoints
        raise BadFlag(f"--total-timesteps must be below 2^62 (got {args.total_timesteps})")
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        raise BadFlag(f"--total-timesteps {args.total_timesteps} is less than one batch ({args.batch_size} = num-envs x num-steps)")
    storage = args.batch_size * (3 * 64 * 64 + 128)  # a step's a 64 x 64 RGB frame (uint8) and its numbers (under 128 bytes)
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


CHECKPOINT_MUST_MATCH = ("env_id", "num_envs", "separate_encoders")  # the network, the storage and the episode counters


def load_checkpoint(path, args=None):
    """The dict `save_checkpoint` wrote, or BadFlag; with `args`, BadFlag too unless this run may continue from it."""
    if not os.path.isfile(path):
        raise BadFlag(f"--resume {path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)  # our own file: RNG states are Python objects
    except Exception as e:
        raise BadFlag(f"--resume {path}: not a checkpoint of this script ({type(e).__name__})")
    this = os.path.basename(__file__)
    if isinstance(state, dict) and state.get("script", this) != this:
        raise BadFlag(f"--resume {path} is a checkpoint of {state['script']}, not of {this}")
    if not isinstance(state, dict) or not {"agent", "optimizer", "rng", "iteration", "global_step", "args", "return_rms"} <= set(state):
        raise BadFlag(f"--resume {path}: not a checkpoint of this script (keys missing)")
    if args is None:  # main's read, after resolve_args checked it
        return state
    if set(state["args"]) - set(vars(args)):  # a checkpoint from before the "script" key
        raise BadFlag(f"--resume {path} is a checkpoint of another script, not of {this}")
    for flag in CHECKPOINT_MUST_MATCH:
        if state["args"].get(flag) != getattr(args, flag):
            raise BadFlag(f"--resume {path} was saved with --{flag.replace('_', '-')} {state['args'].get(flag)}, not {getattr(args, flag)}")
    if state["iteration"] >= args.num_iterations:
        raise BadFlag(f"--resume {path} is at iteration {state['iteration']}, not before the last ({args.num_iterations})")
    return state


NOT_LEARNING = ("resume", "exp_name", "save_every", "keep_checkpoints", "reset_envs_at", "track", "wandb_project_name",
                "wandb_entity", "save_model", "eval_every", "eval_episodes", "torch_threads", "compile", "cudagraphs")  # flags that do not change what a run learns


def changed_flags(args, state):
    """The flags of this run that differ from the checkpoint's run: it continues under the new ones."""
    return [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k not in NOT_LEARNING and state["args"].get(k, v) != v]


def save_checkpoint(path, agent, optimizer, return_rms, iteration, global_step, recent_returns, args):
    """Everything a run needs to continue exactly, but the games: written to a temporary name, then renamed."""
    state = {"agent": agent.state_dict(), "optimizer": optimizer.state_dict(), "iteration": iteration,
             "return_rms": (return_rms.mean, return_rms.var, return_rms.count), "global_step": global_step,
             "recent_returns": list(recent_returns), "args": vars(args), "script": os.path.basename(__file__),
             "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                     "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)  # never a half-written checkpoint
    prune_checkpoints(os.path.dirname(path), args.keep_checkpoints)
    return path


def prune_checkpoints(directory, keep):
    """Delete all but the newest `keep` checkpoints iter_<i>.pt of a run (keep 0: delete none)."""
    iterations = sorted(int(name[5:-3]) for name in os.listdir(directory) if re.fullmatch(r"iter_\d+\.pt", name))
    for iteration in iterations[:-keep] if keep else []:
        os.remove(os.path.join(directory, f"iter_{iteration}.pt"))


def restore_rng(rng):
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_initialized():
        torch.cuda.set_rng_state_all(rng["cuda"])


# Coverage (data-collection App. B.7): states of the dynamics/ sample, projected by benchmark/analyze.py --coverage
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


def append_coverage(run_dir, records):
    """Append records to run_dir/coverage.bin (fixed-size records; the layout in coverage.json beside it)."""
    header = os.path.join(run_dir, "coverage.json")
    if not os.path.exists(header):
        with open(header, "w") as f:
            json.dump({"format": "cleanrl-scale coverage 1", "paper": "data-collection App. B.7", "dtype": [
                [name, records.dtype[name].base.str, list(records.dtype[name].shape)] for name in records.dtype.names],
                "obs": "the 64x64 RGB frame averaged over 4x4 blocks", "features": "the actor torso's last ReLU"}, f)
    with open(os.path.join(run_dir, "coverage.bin"), "ab") as f:
        f.write(records.tobytes())


REQUEUE = 75  # exit status after a signalled stop that left a checkpoint: "requeue me" (EX_TEMPFAIL)


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        resolve_args(args)
        check_runs_directory()
    except BadFlag as e:
        print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
        sys.exit(2)
    main(args)
