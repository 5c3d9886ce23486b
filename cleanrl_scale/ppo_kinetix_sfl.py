"""PPO + SFL (Sampling For Learnability) on Kinetix random levels, data-parallel over JAX devices.

The headline experiment of "Preventing Learning Stagnation in PPO by Scaling to 1 Million Parallel
Environments" (§6, App. A Tables 2-3, App. D-E): PPO with Table 2's SFL column on Kinetix's random
levels, where SFL (Rutherford et al., 2024) keeps a buffer of the levels the current policy solves
about half of the time, and every batch draws a share rho of its levels from that buffer.
- one jitted update (level choice + reset + rollout + GAE + epochs x minibatches), written once
  per device with `jax.shard_map`: the env batch is split over every visible device, gradients
  are averaged, parameters stay identical; learnability filtering is split over devices too;
- every random draw is keyed by the global env / level index and the minibatches are built per
  env, so the same flags and seed train the same way on 1 device or on many;
- the scaling recipes of §5 / App. D and `--sfl-preset` for Table 3's four scales.
"""
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.linen.initializers import constant, orthogonal
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

RECIPES = ("none", "more-minibatches", "bigger-minibatch", "bigger-minibatch-sqrt-lr", "hybrid")
ENV_SIZES = ("s", "m", "l")
# Table 3: N_envs, filtering batch N, update period T, buffer size K (L = 512 and rho = 0.5 throughout)
SFL_PRESETS = {
    "2048": dict(num_envs=2048, sfl_num_candidates=12288, sfl_update_period=128, sfl_buffer_size=1024),
    "8192": dict(num_envs=8192, sfl_num_candidates=262144, sfl_update_period=256, sfl_buffer_size=8192),
    "65536": dict(num_envs=65536, sfl_num_candidates=262144, sfl_update_period=32, sfl_buffer_size=8192),
    "1m": dict(num_envs=1048576, sfl_num_candidates=4194304, sfl_update_period=2, sfl_buffer_size=8192),
}


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanrl-scale"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""

    # Environment
    env_size: str = "l"
    """Kinetix static size of the random levels: s, m or l"""
    dense_reward_scale: float = 0.2
    """scale of Kinetix's dense distance-to-goal reward"""
    eval_every: int = 10
    """evaluate the solve rates every this many updates (and after the last; 0 = never)"""
    num_eval_levels: int = 512
    """number of levels sampled once from the training distribution for `eval/solve_rate_sampled`"""

    # Algorithm specific arguments (stagnation paper, Table 2, SFL column)
    total_timesteps: int = 5_000_000_000  # not in Table 2; this project's choice
    """total environment steps of the experiment"""
    learning_rate: float = 5e-5
    """the learning rate of the optimizer (lr0 of a scaling recipe)"""
    anneal_lr: bool = False  # Table 2 lists a plain Adam learning rate
    """Toggle linear learning rate annealing to 0"""
    num_envs: Optional[int] = None
    """the number of parallel environments over all devices (default: the preset's)"""
    num_steps: int = 256
    """the number of steps to run in each environment per policy rollout"""
    gamma: float = 0.995
    """the discount factor gamma"""
    gae_lambda: float = 0.9
    """the lambda for the general advantage estimation"""
    num_minibatches: Optional[int] = None
    """the number of mini-batches (default 32, or derived from --minibatch-size or the recipe)"""
    minibatch_size: int = 0
    """the mini-batch size (0 = derive it from --num-minibatches)"""
    update_epochs: int = 8
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch, over all devices)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    hidden_size: int = 128  # the Kinetix baseline's 5 tanh layers of 128 (issue 5), not a Table 2 entry
    """width of the actor's and the critic's MLP"""
    num_layers: int = 5
    """tanh layers of the actor's and the critic's MLP"""

    # SFL (Rutherford et al., 2024; stagnation Table 3)
    sfl_preset: str = "2048"
    """Table 3 column setting --num-envs and the three SFL sizes below: 2048, 8192, 65536 or 1m"""
    sfl_num_candidates: Optional[int] = None
    """N: random levels whose learnability is measured at each buffer update (default: the preset's)"""
    sfl_update_period: Optional[int] = None
    """T: PPO updates between buffer updates (default: the preset's)"""
    sfl_buffer_size: Optional[int] = None
    """K: levels of highest learnability kept (default: the preset's)"""
    sfl_rollout_length: int = 512
    """L: steps each candidate level is rolled out for to measure its success rate"""
    sfl_sample_ratio: float = 0.5
    """rho: share of each batch's levels drawn from the buffer (the rest are fresh random levels)"""

    # Scaling recipes (stagnation paper §5, App. D)
    scaling_recipe: str = "none"
    """how minibatches and lr follow --num-envs: none, more-minibatches, bigger-minibatch, bigger-minibatch-sqrt-lr, hybrid"""
    base_num_envs: int = 2048
    """N0: the number of envs of the base config a recipe scales from"""
    base_num_minibatches: int = 32
    """M0: the number of minibatches of the base config a recipe scales from"""
    hybrid_minibatch_factor: int = 0
    """b of the hybrid recipe: minibatch size x b, lr x sqrt(b), minibatches x k/b (required with hybrid)"""

    # to be filled in runtime
    num_devices: int = 0
    """the number of JAX devices the envs are split over (computed in runtime)"""
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of PPO updates (computed in runtime)"""


class BadFlag(ValueError):
    """A flag value that breaks a rule; reported as one line, exit status 2."""


def resolve_recipe(recipe, num_envs, num_steps, lr0, base_num_envs, base_num_minibatches, b=0):
    """Minibatch count, minibatch size and learning rate of a scaling recipe (stagnation §5, App. D).

    From the base config (N0 envs, M0 minibatches, lr0) to N = k * N0 envs.
    """
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
        raise BadFlag(
            f"--num-envs {num_envs} gives a fractional minibatch count or size under --scaling-recipe {recipe} "
            f"(k = {k} from --base-num-envs {base_num_envs}, --base-num-minibatches {base_num_minibatches}, b = {b})"
        )
    return int(minibatches), int(mb_size), lr0 * lr_factor


def resolve_preset(args):
    """Fill --num-envs and the SFL sizes from --sfl-preset (Table 3) where they were not given."""
    if args.sfl_preset not in SFL_PRESETS:
        raise BadFlag(f"--sfl-preset must be one of {', '.join(SFL_PRESETS)} (got {args.sfl_preset!r})")
    for flag, value in SFL_PRESETS[args.sfl_preset].items():
        if getattr(args, flag) is None:
            setattr(args, flag, value)
    return args


def resolve_args(args, num_devices=None):
    """Check every flag and fill the values computed at run time; raises BadFlag before any compute."""
    resolve_preset(args)
    args.num_devices = jax.device_count() if num_devices is None else num_devices
    for flag in ("num_envs", "num_steps", "update_epochs", "total_timesteps", "hidden_size", "num_layers",
                 "num_eval_levels", "sfl_num_candidates", "sfl_update_period", "sfl_buffer_size", "sfl_rollout_length"):
        if getattr(args, flag) <= 0:
            raise BadFlag(f"--{flag.replace('_', '-')} must be positive (got {getattr(args, flag)})")
    for flag in ("minibatch_size", "eval_every", "dense_reward_scale"):
        if getattr(args, flag) < 0:
            raise BadFlag(f"--{flag.replace('_', '-')} must be >= 0 (got {getattr(args, flag)})")
    for flag in ("learning_rate", "clip_coef"):
        if not getattr(args, flag) > 0:
            raise BadFlag(f"--{flag.replace('_', '-')} must be positive (got {getattr(args, flag)})")
    for flag in ("gamma", "gae_lambda", "sfl_sample_ratio"):
        if not 0.0 <= getattr(args, flag) <= 1.0:
            raise BadFlag(f"--{flag.replace('_', '-')} must lie in [0, 1] (got {getattr(args, flag)})")
    if args.env_size not in ENV_SIZES:
        raise BadFlag(f"--env-size must be one of {', '.join(ENV_SIZES)} (got {args.env_size!r})")
    if args.sfl_buffer_size > args.sfl_num_candidates:
        raise BadFlag(f"--sfl-buffer-size {args.sfl_buffer_size} must not exceed --sfl-num-candidates {args.sfl_num_candidates}")
    for flag in ("num_envs", "sfl_num_candidates", "num_eval_levels"):
        if getattr(args, flag) % args.num_devices:
            raise BadFlag(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be divisible by the {args.num_devices} devices")
    if args.sfl_num_candidates % args.num_envs:
        raise BadFlag(f"--sfl-num-candidates {args.sfl_num_candidates} must be a multiple of --num-envs {args.num_envs} (rolled out num-envs at a time)")
    args.batch_size = args.num_envs * args.num_steps
    if args.scaling_recipe != "none":
        if args.num_minibatches is not None or args.minibatch_size:
            raise BadFlag(f"--num-minibatches/--minibatch-size are set by --scaling-recipe {args.scaling_recipe}; drop them")
        args.num_minibatches, args.minibatch_size, args.learning_rate = resolve_recipe(
            args.scaling_recipe, args.num_envs, args.num_steps, args.learning_rate,
            args.base_num_envs, args.base_num_minibatches, args.hybrid_minibatch_factor,
        )
    elif args.minibatch_size:
        if args.batch_size % args.minibatch_size:
            raise BadFlag(f"--minibatch-size {args.minibatch_size} must divide the batch {args.batch_size} (num-envs x num-steps)")
        derived = args.batch_size // args.minibatch_size
        if args.num_minibatches is not None and args.num_minibatches != derived:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} contradicts --minibatch-size {args.minibatch_size} (batch {args.batch_size} gives {derived})")
        args.num_minibatches = derived
    else:
        args.num_minibatches = 32 if args.num_minibatches is None else args.num_minibatches
        if args.num_minibatches <= 0 or args.batch_size % args.num_minibatches:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} must be positive and divide the batch {args.batch_size} (num-envs x num-steps)")
        args.minibatch_size = args.batch_size // args.num_minibatches
    # minibatches are built per env (see minibatch_ids): M | T, or T | M with M / T dividing each device's envs
    m, t, local_envs = args.num_minibatches, args.num_steps, args.num_envs // args.num_devices
    if not (t % m == 0 or (m % t == 0 and local_envs % (m // t) == 0)):
        raise BadFlag(
            f"--num-minibatches {m} must divide --num-steps {t}, or be a multiple of it by a factor that divides "
            f"the {local_envs} envs per device"
        )
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        raise BadFlag(f"--total-timesteps {args.total_timesteps} is less than one batch ({args.batch_size} = num-envs x num-steps)")
    return args


# ---------------------------------------------------------------------------------------------
# SFL (Rutherford et al., 2024): learnability, top-K buffer, the rho mix of a batch
# ---------------------------------------------------------------------------------------------
def learnability(successes, episodes):
    """p (1 - p) with p the success rate of a level's finished episodes (p = 0 when none finished)."""
    p = jnp.where(episodes > 0, successes / jnp.maximum(episodes, 1), 0.0)
    return p * (1.0 - p), p


def top_k_levels(scores, success_rates, level_ids, levels, k):
    """The k highest-learnability levels, best first, ties broken by the lower global level index.

    The explicit tie-break makes the buffer the same however the candidates are split over devices.
    """
    idx = jnp.lexsort((level_ids, -scores))[:k]
    return scores[idx], success_rates[idx], level_ids[idx], jax.tree.map(lambda x: x[idx], levels)


def from_buffer_mask(global_ids, rho):
    """Which envs draw their level from the buffer: exactly floor((i + 1) rho) of the first i + 1, spread evenly."""
    return jnp.floor((global_ids + 1) * rho) > jnp.floor(global_ids * rho)


def minibatch_ids(rng, global_ids, num_steps, num_minibatches):
    """(num_steps, envs) minibatch index of every transition, decided per env so that it does not depend on the devices.

    Each env's steps are shuffled; with M | T every minibatch gets T / M steps of every env, with T | M
    the envs with index = r mod (M / T) fill minibatches r T ... (r + 1) T - 1, one step each.
    """
    def per_env(env_id):
        perm = jax.random.permutation(jax.random.fold_in(rng, env_id), num_steps)
        if num_steps % num_minibatches == 0:
            return perm // (num_steps // num_minibatches)
        return (env_id % (num_minibatches // num_steps)) * num_steps + perm

    return jax.vmap(per_env, out_axes=1)(global_ids)


# ---------------------------------------------------------------------------------------------
# Network and the multi-categorical policy (one categorical per motor / thruster)
# ---------------------------------------------------------------------------------------------
class MLP(nn.Module):
    hidden_size: int
    num_layers: int
    out: int
    out_scale: float

    @nn.compact
    def __call__(self, x):
        for _ in range(self.num_layers):
            x = nn.tanh(nn.Dense(self.hidden_size, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_scale), bias_init=constant(0.0))(x)


def action_mask(action_dims):
    """(D, K) mask of the categories that exist in each of the D action dimensions."""
    return jnp.arange(max(action_dims))[None, :] < jnp.asarray(action_dims)[:, None]


def log_policy(logits, mask):
    """Per-dimension log-probabilities (..., D, K); missing categories get probability 0."""
    logits = logits.reshape(logits.shape[:-1] + mask.shape)
    return jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)


def log_prob(logp, action):
    return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0].sum(-1)


def entropy(logp):
    return -(jnp.exp(logp) * logp).sum((-2, -1))


def kl_divergence(logp_p, logp_q):
    """Exact KL(p || q) of two multi-categorical policies."""
    return (jnp.exp(logp_p) * (logp_p - logp_q)).sum((-2, -1))


def compute_gae(rewards, values, dones, last_value, gamma, gae_lambda):
    """GAE(lambda) over (num_steps, num_envs); dones[t] = the episode ended with transition t."""

    def body(carry, x):
        gae, next_value = carry
        reward, value, done = x
        delta = reward + gamma * next_value * (1.0 - done) - value
        gae = delta + gamma * gae_lambda * (1.0 - done) * gae
        return (gae, value), gae

    _, advantages = jax.lax.scan(body, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True)
    return advantages, advantages + values


# ---------------------------------------------------------------------------------------------
# Kinetix
# ---------------------------------------------------------------------------------------------
class Env(NamedTuple):
    sample_level: callable  # rng -> one random level
    reset: callable  # (key, level) -> obs, state
    step: callable  # (key, state, action, level) -> obs, state, reward, done, solved; resets onto `level`
    obs_dim: int
    action_dims: tuple
    max_episode_steps: int
    handmade: tuple  # (names, levels) of the hand-designed levels Kinetix ships for this size


def make_env(args):
    from kinetix.environment.env import make_kinetix_env
    from kinetix.environment.env_state import EnvParams
    from kinetix.environment.spaces import ActionType, ObservationType
    from kinetix.environment.ued.ued import make_reset_fn_sample_kinetix_level
    from kinetix.environment.utils import static_env_params_from_size
    from kinetix.util.saving import load_evaluation_levels

    static_params = static_env_params_from_size(args.env_size)
    env_params = EnvParams(dense_reward_scale=args.dense_reward_scale)
    env = make_kinetix_env(ActionType.MULTI_DISCRETE, ObservationType.SYMBOLIC_FLAT, None, env_params, static_params)
    sample_level = make_reset_fn_sample_kinetix_level(env_params, static_params, physics_engine=env.physics_engine)

    def reset(key, level):
        return env.reset(key, env_params, level)

    def step(key, state, action, level):
        obs, state, reward, done, info = env.step(key, state, action, env_params, level)
        return obs, state, reward, done, info["GoalR"] & done

    import kinetix

    folder = os.path.join(os.path.dirname(kinetix.__file__), "levels", args.env_size)
    names = sorted(f[: -len(".json")] for f in os.listdir(folder) if f.endswith(".json"))
    handmade, _ = load_evaluation_levels([f"{args.env_size}/{n}.json" for n in names], static_env_params_override=static_params)
    dims = tuple(int(n) for n in np.asarray(env.action_space(env_params).number_of_dims_per_distribution))
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    return Env(sample_level, reset, step, obs_dim, dims, int(env_params.max_timesteps), (tuple(names), handmade))


class Transition(NamedTuple):
    obs: jnp.ndarray
    action: jnp.ndarray
    logprob: jnp.ndarray
    behav_logp: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray


class Shared(NamedTuple):
    """Identical on every device."""

    params: dict
    opt_state: tuple
    rng: jnp.ndarray


class Local(NamedTuple):
    """Split over devices along the env axis."""

    env_state: tuple
    obs: jnp.ndarray
    levels: tuple  # the level each env plays in this rollout
    episode_return: jnp.ndarray


class Buffer(NamedTuple):
    """The SFL buffer: the K levels of highest learnability, best first (replicated)."""

    levels: tuple
    scores: jnp.ndarray
    success_rates: jnp.ndarray


def strong(tree):
    """The same arrays without weak types, so that a jitted function sees one signature and compiles once."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)


def make_train(args, env):
    """(init, update, sfl_update, evaluate, schedule), each a function of one device's share, PureJaxRL style."""
    mask = action_mask(env.action_dims)
    actor = MLP(args.hidden_size, args.num_layers, mask.size, 0.01)
    critic = MLP(args.hidden_size, args.num_layers, 1, 1.0)
    local_envs = args.num_envs // args.num_devices
    local_mb = args.minibatch_size // args.num_devices
    if args.anneal_lr:
        schedule = optax.linear_schedule(args.learning_rate, 0.0, args.num_iterations * args.update_epochs * args.num_minibatches)
    else:
        schedule = optax.constant_schedule(args.learning_rate)
    tx = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(schedule, eps=1e-5))

    def global_ids(n_local):
        return jax.lax.axis_index("d") * n_local + jnp.arange(n_local)

    def policy(params, obs):
        return log_policy(actor.apply(params["actor"], obs), mask)

    def value_fn(params, obs):
        return critic.apply(params["critic"], obs)[..., 0]

    def keyed(fn, rng, ids, *args_):
        """vmap of fn over envs, each with its own key fold_in(rng, global id)."""
        return jax.vmap(lambda i, *a: fn(jax.random.fold_in(rng, i), *a))(ids, *args_)

    def init(rng):
        rng, k_actor, k_critic = jax.random.split(rng, 3)
        dummy = jnp.zeros((1, env.obs_dim))
        params = {"actor": actor.init(k_actor, dummy), "critic": critic.init(k_critic, dummy)}
        return strong(Shared(params, tx.init(params), rng))

    def init_local(rng):
        ids = global_ids(local_envs)
        levels = keyed(lambda k: env.sample_level(k), jax.random.fold_in(rng, 0), ids)
        obs, state = keyed(env.reset, jax.random.fold_in(rng, 1), ids, levels)
        return strong(Local(state, obs, levels, jnp.zeros(local_envs)))

    def rollout_levels(rng, buffer):
        """Each env's level for this rollout: a share rho from the buffer, the rest fresh random levels."""
        ids = global_ids(local_envs)
        k_fresh, k_pick = jax.random.split(rng)
        fresh = keyed(env.sample_level, k_fresh, ids)
        picks = keyed(lambda k: jax.random.randint(k, (), 0, args.sfl_buffer_size), k_pick, ids)
        from_buffer = from_buffer_mask(ids, args.sfl_sample_ratio)
        return jax.tree.map(
            lambda f, b: jnp.where(from_buffer.reshape((-1,) + (1,) * (f.ndim - 1)), b[picks], f), fresh, buffer.levels
        )

    def loss_fn(params, mb, advantages, targets):
        logp = policy(params, mb.obs)
        newlogprob = log_prob(logp, mb.action)
        ratio = jnp.exp(newlogprob - mb.logprob)
        pg_loss = jnp.maximum(-advantages * ratio, -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
        newvalue = value_fn(params, mb.obs)
        if args.clip_vloss:
            v_clipped = mb.value + jnp.clip(newvalue - mb.value, -args.clip_coef, args.clip_coef)
            v_loss = 0.5 * jnp.maximum((newvalue - targets) ** 2, (v_clipped - targets) ** 2).mean()
        else:
            v_loss = 0.5 * ((newvalue - targets) ** 2).mean()
        entropy_loss = entropy(logp).mean()
        clipfrac = (jnp.abs(ratio - 1.0) > args.clip_coef).mean()
        return pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss, (pg_loss, v_loss, entropy_loss, clipfrac)

    def update(shared, local, buffer):
        rng, k_levels, k_reset, k_roll, k_epochs = jax.random.split(shared.rng, 5)
        ids = global_ids(local_envs)
        levels = rollout_levels(k_levels, buffer)
        obs, env_state = keyed(env.reset, k_reset, ids, levels)
        local = local._replace(env_state=env_state, obs=obs, levels=levels)

        def env_step(local, step_key):
            logp = policy(shared.params, local.obs)
            value = value_fn(shared.params, local.obs)
            k_action, k_env = jax.random.split(step_key)
            action = keyed(lambda k, lp: jax.random.categorical(k, lp), k_action, ids, logp)
            obs, env_state, reward, done, solved = keyed(env.step, k_env, ids, local.env_state, action, local.levels)
            episode_return = local.episode_return + reward
            transition = Transition(local.obs, action, log_prob(logp, action), logp, value, reward, done.astype(jnp.float32))
            stats = (done, episode_return * done, solved)
            return local._replace(env_state=env_state, obs=obs, episode_return=episode_return * (1 - done)), (transition, stats)

        local, (traj, stats) = jax.lax.scan(env_step, local, jax.random.split(k_roll, args.num_steps))
        advantages, targets = compute_gae(traj.reward, traj.value, traj.done, value_fn(shared.params, local.obs),
                                          args.gamma, args.gae_lambda)

        def update_minibatch(carry, minibatch):
            params, opt_state = carry
            mb, mb_advantages, mb_targets = minibatch
            if args.norm_adv:  # statistics of the whole minibatch, over all devices
                mean = jax.lax.pmean(mb_advantages.mean(), "d")
                std = jnp.sqrt(jax.lax.pmean(((mb_advantages - mean) ** 2).mean(), "d"))
                mb_advantages = (mb_advantages - mean) / (std + 1e-8)
            (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb, mb_advantages, mb_targets)
            grads = jax.lax.pmean(grads, "d")  # every device holds an equal share of the minibatch
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (*jax.lax.pmean(aux, "d"), optax.global_norm(grads))

        def update_epoch(carry, rng):
            order = jnp.argsort(minibatch_ids(rng, ids, args.num_steps, args.num_minibatches).reshape(-1), stable=True)
            minibatches = jax.tree.map(
                lambda x: x.reshape((-1,) + x.shape[2:])[order].reshape((args.num_minibatches, local_mb) + x.shape[2:]),
                (traj._replace(behav_logp=None), advantages, targets),  # behaviour log-probs: KL pass only
            )
            return jax.lax.scan(update_minibatch, carry, minibatches)

        (params, opt_state), losses = jax.lax.scan(update_epoch, (shared.params, shared.opt_state),
                                                   jax.random.split(k_epochs, args.update_epochs))

        # KL(behaviour || updated policy) on the whole batch, exact; DDR = batch / KL (stagnation §4.4)
        chunks = jax.tree.map(lambda x: x.reshape((args.num_minibatches, local_mb) + x.shape[2:]), (traj.obs, traj.behav_logp))
        kl_sums = jax.lax.map(lambda c: kl_divergence(c[1], policy(params, c[0])).sum(), chunks)
        pg_loss, v_loss, entropy_loss, clipfrac, grad_norm = jax.tree.map(jnp.mean, losses)
        done, ret_sum, solved = jax.tree.map(lambda x: jax.lax.psum(x.sum(), "d"), stats)
        metrics = {
            "losses/policy_loss": pg_loss,
            "losses/value_loss": v_loss,
            "losses/entropy": entropy_loss,
            "losses/clipfrac": clipfrac,
            "losses/grad_norm": grad_norm,
            "losses/approx_kl": jax.lax.psum(kl_sums.sum(), "d") / args.batch_size,
            "episodes": done,
            "episode_return_sum": ret_sum,
            "episodes_solved": solved,
        }
        return strong(Shared(params, opt_state, rng)), strong(local), metrics

    def play(params, rng, levels, num_steps, ids=None):
        """Roll each level out from its start for num_steps steps (episodes restart on it): (successes, episodes, first solved).

        Draws are keyed by `ids`, by default the levels' global indices over the devices.
        """
        n = jax.tree.leaves(levels)[0].shape[0]
        ids = global_ids(n) if ids is None else ids
        k_reset, k_run = jax.random.split(rng)
        obs, state = keyed(env.reset, k_reset, ids, levels)

        def body(carry, step_key):
            obs, state, successes, episodes, first, running = carry
            k_action, k_env = jax.random.split(step_key)
            action = keyed(lambda k, lp: jax.random.categorical(k, lp), k_action, ids, policy(params, obs))
            obs, state, _, done, solved = keyed(env.step, k_env, ids, state, action, levels)
            first = first | (running & solved)
            return (obs, state, successes + solved, episodes + done, first, running & ~done), None

        zeros = jnp.zeros(n)
        init = (obs, state, zeros, zeros, jnp.zeros(n, dtype=bool), jnp.ones(n, dtype=bool))
        (_, _, successes, episodes, first, _), _ = jax.lax.scan(body, init, jax.random.split(k_run, num_steps))
        return successes, episodes, first

    def sfl_update(shared, rng):
        """Measure the learnability of N random levels (num-envs at a time) and keep the top K (SFL)."""
        chunks = args.sfl_num_candidates // args.num_envs
        k_levels, k_play = jax.random.split(rng)

        def chunk(c):
            ids = c * args.num_envs + global_ids(local_envs)
            levels = keyed(env.sample_level, k_levels, ids)
            successes, episodes, _ = play(shared.params, jax.random.fold_in(k_play, c), levels, args.sfl_rollout_length)
            scores, p = learnability(successes, episodes)
            return scores, p, ids, levels

        candidates = jax.lax.map(chunk, jnp.arange(chunks))
        candidates = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), candidates)
        # local top K, gathered from every device, then the global top K among those
        k_local = min(args.sfl_buffer_size, candidates[0].shape[0])
        local_top = top_k_levels(*candidates, k_local)
        gathered = jax.tree.map(lambda x: jax.lax.all_gather(x, "d", tiled=True), local_top)
        scores, p, _, levels = top_k_levels(*gathered, args.sfl_buffer_size)
        return strong(Buffer(levels, scores, p))

    def evaluate(params, rng, levels):
        """Share of `levels` (this device's) whose first episode from the start reaches the goal, averaged over devices."""
        _, _, first = play(params, rng, levels, env.max_episode_steps)
        return jax.lax.pmean(first.mean(), "d")

    def evaluate_replicated(params, rng, levels):
        """Per-level first-episode success on levels every device holds (the hand-designed ones)."""
        n = jax.tree.leaves(levels)[0].shape[0]
        _, _, first = play(params, rng, levels, env.max_episode_steps, jnp.arange(n))
        return first.astype(jnp.float32)

    return init, init_local, update, sfl_update, evaluate, evaluate_replicated, schedule


def main(args):
    env = make_env(args)
    init, init_local, update, sfl_update, evaluate, evaluate_replicated, schedule = make_train(args, env)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    shard = partial(jax.shard_map, mesh=mesh, check_vma=False)
    R, S = P(), P("d")  # replicated, split over devices
    init = jax.jit(shard(init, in_specs=R, out_specs=R))  # placed as update returns it: one compile of update
    init_local = jax.jit(shard(init_local, in_specs=R, out_specs=S))
    update = jax.jit(shard(update, in_specs=(R, S, R), out_specs=(R, S, R)), donate_argnums=1)
    sfl_update = jax.jit(shard(sfl_update, in_specs=(R, R), out_specs=R))
    evaluate = jax.jit(shard(evaluate, in_specs=(R, R, S), out_specs=R))
    evaluate_replicated = jax.jit(shard(evaluate_replicated, in_specs=(R, R, R), out_specs=R))
    sample_eval_levels = jax.jit(shard(
        lambda rng: jax.vmap(lambda i: env.sample_level(jax.random.fold_in(rng, i)))(
            jax.lax.axis_index("d") * (args.num_eval_levels // args.num_devices) + jnp.arange(args.num_eval_levels // args.num_devices)
        ), in_specs=R, out_specs=S))

    run_name = f"kinetix-{args.env_size}__{args.exp_name}__{args.seed}__{int(time.time())}"
    print(
        f"PPO + SFL on {args.num_devices} device(s): batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, "
        f"{args.num_iterations} updates, {args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} "
        f"(recipe {args.scaling_recipe}); SFL preset {args.sfl_preset}: N {args.sfl_num_candidates}, T {args.sfl_update_period}, "
        f"K {args.sfl_buffer_size}, L {args.sfl_rollout_length}, rho {args.sfl_sample_ratio:g}"
    )
    if args.track:
        import wandb

        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                   config=vars(args), name=run_name, save_code=True)
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )

    rng = jax.random.PRNGKey(args.seed)
    rng, k_init, k_local, k_sfl, k_eval_levels = jax.random.split(rng, 5)
    shared = init(k_init)
    local = init_local(k_local)
    eval_levels = sample_eval_levels(k_eval_levels)
    handmade_names, handmade_levels = env.handmade
    eval_rng = jax.random.PRNGKey(args.seed + 10_000)  # evaluation never draws from the training stream

    recent_returns = deque(maxlen=20)
    progress = tqdm(total=args.num_iterations * args.batch_size, unit="step", unit_scale=True, dynamic_ncols=True)
    start_time, global_step = time.time(), 0
    for iteration in range(1, args.num_iterations + 1):
        if (iteration - 1) % args.sfl_update_period == 0:
            buffer = sfl_update(shared, jax.random.fold_in(k_sfl, iteration))
            writer.add_scalar("sfl/mean_learnability", float(buffer.scores.mean()), global_step)
            writer.add_scalar("sfl/buffer_solve_rate", float(buffer.success_rates.mean()), global_step)
        shared, local, metrics = update(shared, local, buffer)
        metrics = jax.device_get(metrics)
        global_step += args.batch_size
        episodes, ret_sum, solved = (metrics.pop(k) for k in ("episodes", "episode_return_sum", "episodes_solved"))
        if episodes:
            recent_returns.append(ret_sum / episodes)
            writer.add_scalar("charts/episodic_return", ret_sum / episodes, global_step)
            writer.add_scalar("charts/episodic_solve_rate", solved / episodes, global_step)
        for tag, value in metrics.items():
            writer.add_scalar(tag, value, global_step)
        writer.add_scalar("charts/ddr", args.batch_size / max(float(metrics["losses/approx_kl"]), 1e-12), global_step)
        writer.add_scalar("charts/learning_rate", float(schedule(iteration * args.update_epochs * args.num_minibatches)), global_step)
        if args.eval_every and (iteration % args.eval_every == 0 or iteration == args.num_iterations):
            k_sampled, k_handmade = jax.random.split(jax.random.fold_in(eval_rng, iteration))
            writer.add_scalar("eval/solve_rate_sampled", float(evaluate(shared.params, k_sampled, eval_levels)), global_step)
            per_level = np.asarray(evaluate_replicated(shared.params, k_handmade, handmade_levels))
            writer.add_scalar("eval/solve_rate_handmade", per_level.mean(), global_step)
            for name, solved_level in zip(handmade_names, per_level):
                writer.add_scalar(f"eval_handmade/{name}", solved_level, global_step)
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/SPS", sps, global_step)
        progress.update(args.batch_size)
        progress.set_postfix(sps=sps, ret=f"{np.mean(recent_returns):.2f}" if recent_returns else "-")
    progress.close()
    writer.close()


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        resolve_args(args)
    except BadFlag as e:
        print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
        sys.exit(2)
    main(args)
