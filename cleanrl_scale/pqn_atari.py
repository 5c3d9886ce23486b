"""PQN (Parallel Q-Network, Gallici et al., 2024) on Atari (envpool), instrumented like the PPO Atari script.

The value-based arm of "The Impact of On-Policy Parallelized Data Collection on Deep RL Networks"
(§6.1): no replay buffer and no target network; a Nature CNN with LayerNorm after every hidden
layer; epsilon-greedy rollouts from parallel envs; Q(lambda) targets computed backwards over each
rollout; several epochs of minibatch regression on them. With the same fixed-budget semantics,
scaling-recipe flags and learning-dynamics metrics (feature rank, dormant neurons, weight norm,
gradient kurtosis; App. B) as the PPO script, and uint8 rollout storage. The L2 norm of each
iteration's parameter change (`charts/update_norm`) is the size of its outer step, the stagnation
paper's measure where a policy has no KL to log.

Departure from CleanRL's pqn_atari_envpool: Adam, as the data-collection paper's Table 1 says, where
CleanRL uses RAdam (`--optimizer radam`). Runs survive preemption (the appendix at the end of the file):
checkpoints, --resume (epsilon follows the global step), SIGTERM / SIGUSR1. Envpool's emulator state cannot be
saved: a resumed run starts fresh episodes.
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
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""
    eval_episodes: int = 10
    """number of full games the saved model (--save-model) is evaluated on (epsilon-greedy, epsilon 0.05)"""

    # Algorithm specific arguments
    env_id: str = "Breakout-v5"
    """the id of the envpool Atari environment"""
    total_timesteps: int = 10000000
    """total environment steps of the experiment (a fixed data budget)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (lr0 of a scaling recipe)"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    q_lambda: float = 0.65
    """the lambda of the Q(lambda) targets"""
    num_minibatches: Optional[int] = None
    """the number of mini-batches (default 4, or derived from --minibatch-size or the recipe)"""
    minibatch_size: int = 0
    """the mini-batch size (0 = derive it from --num-minibatches)"""
    update_epochs: int = 4
    """the K epochs of regression on each rollout's targets"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e (0: end-e from the start)"""
    optimizer: str = "adam"
    """adam (the paper's Table 1) or radam (CleanRL's pqn_atari_envpool)"""

    # Scaling recipes (stagnation paper §5, App. D)
    scaling_recipe: str = "none"
    """how minibatches and lr follow --num-envs: none, more-minibatches, bigger-minibatch, bigger-minibatch-sqrt-lr, hybrid"""
    base_num_envs: int = 8
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
    """states of the dynamics/ sample (the first of them) appended to runs/<run>/coverage.bin at the iterations
    --coverage-every names, for the coverage metric (data-collection App. B.7):
    the newest 84x84 frame averaged over 4x4 blocks (21x21 uint8) and the Q-network's penultimate features
    (float16); unset: the whole sample (--dynamics-batch, at most the batch); 0 disables"""
    coverage_every: int = 0
    """save those states at iteration 1 and every this many iterations, a multiple of --dynamics-every (0: the
    multiple that gives about 20 saves in the run)"""


# The flag rules of this script (the run's plumbing below adds those every script shares); check_args the rest
RULES = {
    "must be positive": ("num_envs", "num_steps", "update_epochs", "total_timesteps", "dynamics_batch", "eval_episodes",
                         "learning_rate", "max_grad_norm"),
    "must be >= 0": ("minibatch_size", "dynamics_every", "dormant_tau"),
    "must lie in [0, 1]": ("gamma", "q_lambda", "start_e", "end_e", "exploration_fraction"),
}
STEP_BYTES = 4 * 84 * 84 + 128  # a step's 4 stacked 84 x 84 frames (uint8) and its numbers (under 128 bytes)
CHECKPOINT_KEYS = ("q_network", "optimizer", "recent_returns")  # what its checkpoints hold
CHECKPOINT_MUST_MATCH = ("env_id", "num_envs", "optimizer")  # the network, the storage, the optimiser's state
NOT_LEARNING = ("eval_episodes",)  # flags that do not change what a run learns (besides the appendix's)
OPTIMIZERS = {"adam": optim.Adam, "radam": optim.RAdam}


def check_args(args):
    if args.end_e > args.start_e:
        raise BadFlag(f"--end-e {args.end_e} must not exceed --start-e {args.start_e} (epsilon decays)")
    if args.optimizer not in OPTIMIZERS:
        raise BadFlag(f"--optimizer must be one of {', '.join(OPTIMIZERS)} (got {args.optimizer!r})")
    if envpool.registration.registry.specs.get(args.env_id, ("",))[0] != "envpool.atari":
        raise BadFlag(f"--env-id must be an envpool Atari id such as Breakout-v5 (got {args.env_id!r})")
    resolve_minibatches(args, default=4)


# Environment: envpool Atari, CleanRL's settings
def make_env(env_id, num_envs, seed):
    # CleanRL's envpool Atari setup: episodic life and clipped rewards for training; info["reward"]
    # keeps the raw score and info["lives"] the lives left, from which a game over is read.
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=True, reward_clip=True, seed=seed)


# Network: the Q-network
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """Nature CNN with LayerNorm after every hidden layer (CleanRL's pqn_atari_envpool)."""

    def __init__(self, num_actions):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
        )
        self.q = layer_init(nn.Linear(512, num_actions))

    def preprocess(self, x):
        """uint8 frames -> floats in [0, 1], in the memory layout of the conv weights."""
        channels_last = self.network[0].weight.is_contiguous(memory_format=torch.channels_last)
        x = x.to(torch.float32, copy=True).div_(255.0)  # divided in place: one allocation of the floats, not two
        return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def forward(self, x):
        return self.q(self.network(self.preprocess(x)))


# Loss: Q(lambda) targets, epsilon-greedy exploration
def linear_schedule(start_e: float, end_e: float, duration: float, t: int):
    """Epsilon at step t: from start_e to end_e linearly over `duration` steps, then end_e; a zero duration is
    end_e from the start (CleanRL's formula divides by it)."""
    if t >= duration:
        return end_e
    return start_e + (end_e - start_e) * t / duration


def q_lambda_returns(rewards, dones, next_max_q, gamma, q_lambda):
    """Q(lambda) targets, backwards over a rollout of shape (num_steps, num_envs) (PQN, Gallici et al., 2024):

    G_t = r_t + gamma (1 - done_t) [(1 - lambda) max_a Q(s_{t+1}, a) + lambda G_{t+1}], with G_T = max_a Q(s_T, a).
    dones[t] = the episode ended with transition t; next_max_q[t] = max_a Q(s_{t+1}, a).
    """
    returns = torch.zeros_like(rewards)
    next_return = next_max_q[-1]
    for t in reversed(range(rewards.shape[0])):
        returns[t] = rewards[t] + gamma * (1.0 - dones[t]) * ((1 - q_lambda) * next_max_q[t] + q_lambda * next_return)
        next_return = returns[t]
    return returns


def epsilon_greedy(q_values, epsilon, generator=None):
    """Greedy actions, each replaced by a uniformly random one with probability epsilon."""
    greedy = q_values.argmax(dim=1)
    n, num_actions = q_values.shape
    explore = torch.rand(n, device=q_values.device, generator=generator) < epsilon
    random_actions = torch.randint(0, num_actions, (n,), device=q_values.device, generator=generator)
    return torch.where(explore, random_actions, greedy)


# Learning-dynamics metrics, data-collection paper App. B (B.1-B.6)
def feature_rank(features, threshold=0.99):
    """B.1: smallest k whose top-k singular values of the centred features keep `threshold` of the variance."""
    sv = torch.linalg.svdvals(features - features.mean(dim=0, keepdim=True))
    energy = torch.cumsum(sv**2, dim=0)
    if energy[-1] <= 0:
        return 0
    return int(torch.searchsorted(energy, threshold * energy[-1]).item()) + 1


def dormant_percentage(activations, tau):
    """B.2 (Sokar et al., 2023): share of neurons whose E|h_i| / mean_k E|h_k| <= tau, over all layers.

    Each activation is (batch, units) or (batch, channels, height, width); a conv channel is one neuron.
    """
    dormant, total = 0, 0
    for h in activations:
        score = h.abs().flatten(2).mean(dim=2) if h.dim() > 2 else h.abs()
        score = score.mean(dim=0)
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


@torch.no_grad()
def dynamics_metrics(q_network, obs, tau):
    """feature rank, dormant % and weight norm on a sample of the batch (App. B)."""
    acts, x = [], q_network.preprocess(obs)
    for layer in q_network.network:
        x = layer(x)
        if isinstance(layer, nn.ReLU):
            acts.append(x)
    return {
        "dynamics/weight_norm": weight_norm(q_network),
        "dynamics/feature_rank": feature_rank(acts[-1]),
        "dynamics/dormant_pct": dormant_percentage(acts, tau),
    }


def evaluate(q_network, env_id, eval_episodes, seed, device, epsilon=0.05):
    """Raw score of one full game (all lives) in each of `eval_episodes` envs, epsilon-greedy."""
    envs = make_env(env_id, eval_episodes, seed)
    obs, _ = envs.reset()
    scores, finished = np.zeros(eval_episodes), np.zeros(eval_episodes, dtype=bool)
    while not finished.all():
        with torch.inference_mode():
            action = epsilon_greedy(q_network(torch.as_tensor(obs, device=device)), epsilon)
        obs, _, term, trunc, info = envs.step(action.cpu().numpy())
        scores += info["reward"] * ~finished
        finished |= (term & (info["lives"] == 0)) | trunc
    envs.close()
    return scores


# Coverage (data-collection App. B.7): states of the dynamics/ sample every --coverage-every iterations
def coverage_dtype(feature_dim):
    """One saved state: when, the newest 84x84 frame averaged over 4x4 blocks, and the penultimate features."""
    return np.dtype([("iteration", "<i8"), ("global_step", "<i8"), ("obs", "u1", (21, 21)),
                     ("features", "<f2", (feature_dim,))])


@torch.no_grad()
def coverage_records(q_network, obs, iteration, global_step):
    """The records of states `obs` (uint8, N x 4 x 84 x 84) for runs/<run>/coverage.bin."""
    thumbnails = obs[:, -1].float().reshape(len(obs), 21, 4, 21, 4).mean((2, 4)).round().to(torch.uint8)
    features = q_network.network(q_network.preprocess(obs))
    records = np.zeros(len(obs), coverage_dtype(features.shape[1]))
    records["iteration"], records["global_step"] = iteration, global_step
    records["obs"], records["features"] = thumbnails.cpu().numpy(), features.cpu().numpy()
    return records



@torch.no_grad()
def iteration_statistics(q_network, before, means):
    """What an iteration logs, in one read from the device: the mean TD loss, Q of the actions taken and gradient norm
    over the minibatch steps, how far the update moved the parameters (the outer step, stagnation §3), and whether
    every number is finite."""
    finite = torch.stack([torch.isfinite(p).all() for p in q_network.parameters()]).all() & torch.isfinite(means).all()
    update_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p - b) for p, b in
                                                        zip(q_network.parameters(), before)]))
    read = torch.cat([means, update_norm[None], finite.float()[None]]).tolist()  # the one sync
    return dict(zip(("losses/td_loss", "losses/q_values", "losses/grad_norm", "charts/update_norm", "finite"), read))


def main(args):
    run = Run(args, f"batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} "
                    f"iterations, {args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} "
                    f"(recipe {args.scaling_recipe}), {args.update_epochs} epochs, Q(lambda {args.q_lambda:g}), {args.optimizer}")
    device = run.device
    envs = make_env(args.env_id, args.num_envs, args.seed)
    q_network = QNetwork(envs.action_space.n).to(device)
    if device.type == "cpu":
        q_network.to(memory_format=torch.channels_last)  # faster convolutions on CPU
    # compiled or captured, the learning rate is a tensor that annealing fills in place (LeanRL): a new float each
    # iteration would recompile the optimizer step
    compiled = args.compile or args.cudagraphs
    lr = torch.tensor(args.learning_rate, device=device) if compiled else args.learning_rate
    speed = {"capturable": True} if args.cudagraphs and not args.compile else {}
    if args.optimizer == "adam" and not compiled:  # eager: one kernel for all parameters (RAdam has none)
        speed = {"fused": True}
    optimizer = OPTIMIZERS[args.optimizer](q_network.parameters(), lr=lr, **speed)

    # rollout storage; observations stay uint8. With channels_last networks they are stored channels innermost, so a
    # minibatch gathered from them is in the network's layout already (no copy); allocated in that layout (a copy
    # into it would hold the buffer twice: the peak of a 1024 x 128 batch)
    shape = (args.num_steps, args.num_envs) + envs.observation_space.shape
    if device.type == "cpu":
        obs = torch.zeros(shape[:2] + shape[3:] + shape[2:3], dtype=torch.uint8).permute(0, 1, 4, 2, 3)
    else:
        obs = torch.zeros(shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)  # the episode ended with transition t
    max_q = torch.zeros((args.num_steps, args.num_envs), device=device)  # max_a Q(s_t, a) from the rollout
    episode_returns = np.zeros(args.num_envs)
    run.restore(q_network=q_network, optimizer=optimizer)
    global_step = run.global_step

    def targets(next_obs, rewards, dones, max_q):
        next_max_q = torch.cat([max_q[1:], q_network(next_obs).max(dim=1).values[None]])
        return q_lambda_returns(rewards, dones, next_max_q, args.gamma, args.q_lambda)

    def minibatch_gradient(mb_inds, b_obs, b_actions, b_returns):
        """The gradient of one minibatch's TD loss, left in .grad: (the loss, the mean Q of the actions taken)."""
        q_taken = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds, None]).squeeze(1)
        loss = F.mse_loss(q_taken, b_returns[mb_inds])
        optimizer.zero_grad(set_to_none=not args.cudagraphs)  # a captured graph keeps the same .grad tensors
        loss.backward()
        return loss.detach(), q_taken.detach().mean()

    def optimizer_step():
        grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
        optimizer.step()
        return grad_norm

    # --compile, --cudagraphs; the rollout's forward pass is the Q-network's (epsilon-greedy stays outside: its epsilon
    # changes every step)
    policy, targets, minibatch_gradient, optimizer_step = accelerate(args, device, q_network, targets,
                                                                      minibatch_gradient, optimizer_step)

    run.begin()
    next_obs = torch.as_tensor(envs.reset()[0], device=device)
    for iteration in range(run.start_iteration + 1, args.num_iterations + 1):
        run.mark(iteration, global_step, q_network=q_network, optimizer=optimizer)  # what a stop during it saves
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            if compiled:
                lr.fill_(frac * args.learning_rate)
            else:
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(0, args.num_steps):
            run.check(envs)  # a signal that cannot wait for the iteration's end
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            global_step += args.num_envs
            obs[step] = next_obs
            with torch.inference_mode():
                q_values = policy(next_obs)
            max_q[step] = q_values.max(dim=1).values
            action = epsilon_greedy(q_values, epsilon)
            actions[step] = action

            next_obs, reward, terminations, truncations, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, device=device)
            next_obs = torch.as_tensor(next_obs, device=device)
            dones[step] = torch.as_tensor(np.logical_or(terminations, truncations), device=device, dtype=torch.float32)

            episode_returns += info["reward"]
            game_over = (terminations & (info["lives"] == 0)) | truncations
            for idx in np.flatnonzero(game_over):
                run.episode(global_step, episode_returns[idx], info["elapsed_step"][idx])
            episode_returns[game_over] = 0.0

        with torch.no_grad():
            returns = targets(next_obs, rewards, dones, max_q)
        b_obs = obs.reshape((-1,) + envs.observation_space.shape)
        b_actions = actions.reshape(-1)
        b_returns = returns.reshape(-1)

        measure = args.dynamics_every > 0 and (iteration % args.dynamics_every == 0 or iteration == 1)
        b_inds = np.arange(args.batch_size)
        # the minibatches' statistics stay on the device; they are read once per iteration (no per-minibatch sync)
        sums = torch.zeros(3, device=device)  # TD loss, mean Q taken, grad norm
        before = [p.detach().clone() for p in q_network.parameters()]  # the iteration's step: how far the update moves them
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            epoch_inds = torch.as_tensor(b_inds, device=device)  # one copy to the device per epoch, not per minibatch
            for start in range(0, args.batch_size, args.minibatch_size):
                run.check(envs)
                mb_inds = epoch_inds[start : start + args.minibatch_size]
                loss, q_mean = minibatch_gradient(mb_inds, b_obs, b_actions, b_returns)
                if measure and epoch == 0 and start == 0:  # B.4 on the raw gradient, before clipping rescales it
                    kurtosis = grad_kurtosis([p.grad for p in q_network.parameters() if p.grad is not None])
                sums += torch.stack([loss, q_mean, optimizer_step()])

        logged = iteration_statistics(q_network, before, sums / (args.update_epochs * args.num_minibatches))
        if not logged.pop("finite"):
            run.fail(iteration, "the loss or the parameters are not finite (nan or inf)")
        logged.update({"charts/learning_rate": float(optimizer.param_groups[0]["lr"]), "charts/epsilon": epsilon})
        if measure:
            sample = torch.randperm(args.batch_size, device=device)[: args.dynamics_batch]
            logged.update(dynamics_metrics(q_network, b_obs[sample], args.dormant_tau))
            logged["dynamics/grad_kurtosis"] = kurtosis
            if args.coverage_samples and (iteration == 1 or iteration % args.coverage_every == 0):
                run.save_states(coverage_records(q_network, b_obs[sample[: args.coverage_samples]], iteration, global_step),
                                obs="the newest frame of the stack, 84x84 averaged over 4x4 blocks",
                                features="the Q-network torso's last ReLU (after its LayerNorm)")
        run.log(global_step, logged, eps=f"{epsilon:.3f}")

        if run.checkpoint_due(iteration):
            run.checkpoint(iteration, global_step, q_network=q_network, optimizer=optimizer)
        run.stop_if_signalled(iteration, envs)
        if iteration == args.reset_envs_at:  # what a resume from this iteration's checkpoint does
            envs.close()
            envs = make_env(args.env_id, args.num_envs, args.seed)
            next_obs = torch.as_tensor(envs.reset()[0], device=device)
            episode_returns[:] = 0.0

    envs.close()
    if args.save_model:
        run.save_model(q_network)
        scores = evaluate(q_network, args.env_id, args.eval_episodes, (args.seed + 1) % 2**31, device)
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
