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
- the scaling recipes of §5 / App. D and `--sfl-preset` for Table 3's four scales;
- Kinetix's entity transformer (default) or a fast MLP on flat symbolic observations;
- `--distributed` for several hosts (only process 0 logs and checkpoints) and exactly-resumable
  checkpoints (`--save-every`, `--resume`);
- minutes of compilation on a CPU before the first update, so: JAX's persistent compilation cache, the
  update's float flags traced (a grid over lr, epsilon, COM or budget shares one program), Kinetix's step
  and level sampler traced once for the update and SFL, the update compiled beside the first SFL buffer.
Below the appendix line: the run's plumbing (flags of a run, checkpoints, signals, logs, several processes).
"""
import logging
import math
import os
import time
from dataclasses import dataclass
from functools import cache, partial
from typing import NamedTuple, Optional

# XLA's C++ log quiet below FATAL: its CPU loader calls each program loaded from the compilation cache one built for
# another machine, 3 KB lines that read as a crash (a tuning preference taken for a CPU feature, openxla/xla issue
# 44565); XLA's errors still raise. TF_CPP_MIN_LOG_LEVEL=0 shows its log (1, unset: JAX's default, as a parent process
# that imported JAX passes it on)
if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") == "1":
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.traverse_util import flatten_dict
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MODELS = ("transformer", "mlp")
# the Kinetix baseline's entity transformer (Kinetix configs/model/model-transformer.yaml), before
# the --num-layers tanh layers of --hidden-size of the actor and the critic
TRANSFORMER = dict(transformer_depth=2, num_heads=8, transformer_encoder_size=128, transformer_size=16,
                   aggregate_mode="dummy_and_mean", full_attention_mask=False, transformer_ffn=False,
                   multilayer_joint_thruster_mixing=False, joint_thruster_block_num_layers=2,
                   joint_thruster_block_hidden_dim_multiplication=4)
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
    seed: int = 1
    """seed of the experiment"""

    # Environment and network
    env_size: str = "l"
    """Kinetix static size of the random levels: s, m or l"""
    dense_reward_scale: float = 0.2
    """scale of Kinetix's dense distance-to-goal reward"""
    model: str = "transformer"
    """actor-critic: transformer (Kinetix's, on entity observations) or mlp (on flat symbolic observations)"""
    eval_every: int = 10
    """evaluate the solve rates every this many updates (and after the last; 0 = never)"""
    num_eval_levels: int = 100
    """number of random levels in `eval/solve_rate_sampled`'s set (Kinetix: 100)"""
    eval_levels_seed: int = 100
    """seed of that set, the same for every --seed (Kinetix samples it with PRNGKey(100))"""
    eval_num_attempts: int = 20
    """attempts per evaluation level, each from the level's start (Kinetix's eval_num_attempts)"""
    filter_levels: bool = True
    """draw random levels as Kinetix does (filter_levels): 2x candidates, 64 no-op steps, levels a no-op solves kept with weight 0.001"""
    level_filter_pool: Optional[int] = None
    """random levels are filtered in pools of this many (from 2x candidates), keyed by pool; must divide each device's
    fresh levels and envs (default: Kinetix's 512, or the largest pool below it that divides both)"""

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
    """the surrogate clipping coefficient epsilon (relative to the proximal policy)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function"""
    vf_clip_coef: Optional[float] = None
    """the value clipping range (unset = follow --clip-coef, as Kinetix does); set it to sweep epsilon alone"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    hidden_size: int = 128  # the Kinetix baseline's 5 tanh layers of 128, not a Table 2 entry
    """width of the actor's and the critic's tanh layers (after the transformer, or on the flat observation)"""
    num_layers: int = 5
    """tanh layers of the actor and of the critic"""

    # PPO-EWMA (stagnation §2.2, App. E, Fig. 18; Hilton et al., 2022), as in the Kinetix/gymnax PPO-EWMA script
    ewma_com: Optional[float] = None
    """centre of mass C of the EWMA proximal policy in minibatch steps, beta = C / (C + 1); unset = standard PPO"""
    ewma_bias_correction: bool = True
    """count the initial copy as one sample of the EWMA, as openai/ppo-ewma's EwmaModel does (total_weight)"""
    imp_samp_max: Optional[float] = None
    """bound of the ratio pi / pi_behaviour (openai/ppo-ewma's logp_adj); 0 = no bound (default: 100 with --ewma-com,
    as openai/ppo-ewma; none in PPO mode, as PureJaxRL's, CleanRL's and Kinetix's PPO)"""

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


# ---- Flag rules (the generic ones, and RunArgs' run flags: below, in the run's plumbing); what a checkpoint holds
ITERATION = "update"  # what the logs call one rollout and update
FLAG_RULES = (  # (rule, holds, flags): each flag's value, when set, must hold (the preset's: after it fills them)
    ("must be positive", lambda v: v > 0, ("num_envs", "num_steps", "update_epochs", "total_timesteps", "hidden_size",
                                           "num_layers", "num_eval_levels", "eval_num_attempts", "sfl_num_candidates",
                                           "sfl_update_period", "sfl_buffer_size", "sfl_rollout_length", "learning_rate",
                                           "max_grad_norm", "vf_clip_coef", "level_filter_pool")),
    ("must be >= 0", lambda v: v >= 0, ("minibatch_size", "eval_every", "dense_reward_scale", "ent_coef", "vf_coef",
                                        "ewma_com")),
    ("must lie in [0, 1]", lambda v: 0 <= v <= 1, ("gamma", "gae_lambda", "sfl_sample_ratio")),
    ("must lie in (0, 1)", lambda v: 0 < v < 1, ("clip_coef",)),  # log(1 - eps) clips the ratio, as in openai/ppo-ewma
    ("must be 0 (no bound) or >= 1", lambda v: v == 0 or v >= 1, ("imp_samp_max",)),  # below 1: biased on-policy samples
    (f"must be one of {', '.join(MODELS)}", lambda v: v in MODELS, ("model",)),
    (f"must be one of {', '.join(ENV_SIZES)}", lambda v: v in ENV_SIZES, ("env_size",)),
    (f"must be one of {', '.join(SFL_PRESETS)}", lambda v: v in SFL_PRESETS, ("sfl_preset",)),
)
# RunArgs' run flags this script does not use: given, they are refused
UNUSED_RUN_FLAGS = {"fuse_iterations": "its loop calls one update at a time (SFL's buffer is refreshed between them)",
                    "unroll": "its scans are not unrolled"}
# a checkpoint holds the training state (parameters, optimiser, EWMA, rng: every env starts afresh each update) and the
# SFL buffer; these flags fix their shapes (every other may change on --resume)
STRUCTURAL_FLAGS = ("env_size", "model", "hidden_size", "num_layers", "sfl_buffer_size")
DROPPED_FLAGS = ()  # flags this script no longer has, which a checkpoint of an older version lists
# bytes of one observation by --env-size and --model (symbolic flat for the MLP, entities for the transformer), as
# Kinetix 3.0.2 builds them (a test compares them with make_env's): the batch's memory is checked before any compute
OBS_BYTES = {("s", "mlp"): 560, ("s", "transformer"): 1126, ("m", "mlp"): 988, ("m", "transformer"): 1671,
             ("l", "mlp"): 2716, ("l", "transformer"): 3878}


def check_args(args, num_devices=None):
    """The rules FLAG_RULES cannot say, and the computed fields (the appendix's resolve_args calls it). `num_devices`: the
    devices the run spans (None: jax.device_count(); 0: not known yet, before jax.distributed.initialize: checked as one
    device, where every divisibility rule that passes at some count passes, and without the per-device size rules, which
    one device would break first)."""
    for name, value in SFL_PRESETS[args.sfl_preset].items():  # --num-envs and the SFL sizes not given: Table 3's
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.num_devices = jax.device_count() if num_devices is None else max(num_devices, 1)
    args.fuse_iterations = args.unroll = 1  # one update a call; scans rolled
    for name in ("num_envs", "sfl_num_candidates"):  # global env and level ids are int32 in the programs
        if getattr(args, name) >= 2**31:
            raise BadFlag(f"{flag(name)} must be below 2^31 (got {getattr(args, name)})")
    local_batch = args.num_envs * args.num_steps // args.num_devices
    if num_devices != 0 and local_batch >= 2**31:
        raise BadFlag(f"--num-envs x --num-steps per device must be below 2^31 (the programs index a device's batch with "
                      f"int32; got {local_batch})")
    storage = local_batch * (OBS_BYTES[args.env_size, args.model] + 64)  # and a transition's numbers, under 64 bytes
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if num_devices != 0 and storage > memory:
        raise BadFlag(f"--num-envs {args.num_envs} x --num-steps {args.num_steps}: a device's batch alone takes "
                      f"{storage / 2**30:,.1f} GiB or more, more than this machine's {memory / 2**30:,.1f} GiB of memory")
    if args.imp_samp_max is None:
        args.imp_samp_max = 100.0 if args.ewma_com is not None else 0.0
    if args.sfl_buffer_size > args.sfl_num_candidates:
        raise BadFlag(f"--sfl-buffer-size {args.sfl_buffer_size} must not exceed --sfl-num-candidates {args.sfl_num_candidates}")
    for name in ("num_envs", "sfl_num_candidates"):
        if getattr(args, name) % args.num_devices:
            raise BadFlag(f"{flag(name)} {getattr(args, name)} must be divisible by the {args.num_devices} devices")
    if args.sfl_num_candidates % args.num_envs:
        raise BadFlag(f"--sfl-num-candidates {args.sfl_num_candidates} must be a multiple of --num-envs {args.num_envs} (rolled out num-envs at a time)")
    fresh, _ = buffer_positions(args.num_envs, args.num_devices, args.sfl_sample_ratio)  # raises on an uneven split
    local_envs = args.num_envs // args.num_devices
    if args.level_filter_pool is None:  # Kinetix's 512 where it divides both, else the largest pool that does
        common = math.gcd(fresh.shape[1], local_envs)
        args.level_filter_pool = max(d for d in range(1, min(512, common) + 1) if common % d == 0)
    if args.filter_levels and (fresh.shape[1] % args.level_filter_pool or local_envs % args.level_filter_pool):
        raise BadFlag(f"--level-filter-pool {args.level_filter_pool} must divide each device's {fresh.shape[1]} fresh levels "
                      f"and {local_envs} envs (random levels are filtered in pools); lower it, or --no-filter-levels")
    resolve_batch(args)
    # minibatches are built per env (see minibatch_ids): M | T, or T | M with M / T dividing each device's envs
    # (envs are dealt into the M / T groups within blocks of M / T consecutive ids)
    m, t = args.num_minibatches, args.num_steps
    if not (t % m == 0 or (m % t == 0 and local_envs % (m // t) == 0)):
        raise BadFlag(f"--num-minibatches {m} must divide --num-steps {t}, or be a multiple of it by a factor that divides "
                      f"the {local_envs} envs per device")


def call_ends(args):
    """Periods (in updates) at which a call must end besides checkpoints: evaluations and SFL's buffer refreshes."""
    return args.eval_every, args.sfl_update_period


# ---- Kinetix
class Env(NamedTuple):
    sample_levels: callable  # (rng, n) -> n random levels (Kinetix's filtered sampler, or plain draws)
    reset: callable  # (key, level) -> obs, state
    step: callable  # (key, state, action, level) -> obs, state, reward, done, solved; resets onto `level`
    example_obs: object  # shapes and dtypes of one observation (an array, or Kinetix's EntityObservation)
    action_dims: tuple
    max_episode_steps: int
    handmade: callable  # () -> (names, levels) of the hand-designed levels Kinetix ships for this size (slow: called at the first evaluation)


def make_env(args):
    # Grain (imported by Kinetix) warns through absl that its worker profiling needs a newer jaxlib: nothing here uses it
    logging.getLogger("absl").addFilter(lambda record: "Grain multiprocess worker profiling" not in record.getMessage())
    from kinetix.environment.env import make_kinetix_env
    from kinetix.environment.env_state import EnvParams
    from kinetix.environment.spaces import ActionType, ObservationType
    from kinetix.environment.ued.ued import UEDParams, create_vmapped_filtered_distribution, make_reset_fn_sample_kinetix_level
    from kinetix.environment.utils import create_empty_env, static_env_params_from_size
    from kinetix.util.saving import load_evaluation_levels

    static_params = static_env_params_from_size(args.env_size)
    env_params = EnvParams(dense_reward_scale=args.dense_reward_scale)
    obs_type = ObservationType.SYMBOLIC_ENTITY if args.model == "transformer" else ObservationType.SYMBOLIC_FLAT
    env = make_kinetix_env(ActionType.MULTI_DISCRETE, obs_type, None, env_params, static_params)
    sample_level = make_reset_fn_sample_kinetix_level(env_params, static_params, physics_engine=env.physics_engine)

    def sample_levels(key, n):
        """n random levels from one key. With --filter-levels, Kinetix's own filter (`filter_levels: true`,
        `level_filter_sample_ratio: 2`, `level_filter_n_steps: 64` of configs/learning/ppo-base.yaml): 2n
        candidates, 64 no-op steps, n drawn without replacement with weight 0.001 for levels a no-op solves."""
        if args.filter_levels:
            return create_vmapped_filtered_distribution(key, sample_level, env_params, static_params, UEDParams(), n, env,
                                                        True, 2, args.env_size, 64)[0]
        return jax.vmap(sample_level)(jax.random.split(key, n))

    def reset(key, level):
        return env.reset(key, env_params, level)

    def step(key, state, action, level):
        obs, state, reward, done, info = env.step(key, state, action, env_params, level)
        return obs, state, reward, done, info["GoalR"] & done

    def handmade():  # Kinetix parses a level's JSON one small array at a time: tens of seconds for size s's 10 on a CPU
        import kinetix

        folder = os.path.join(os.path.dirname(kinetix.__file__), "levels", args.env_size)
        names = sorted(f[: -len(".json")] for f in os.listdir(folder) if f.endswith(".json"))
        levels, _ = load_evaluation_levels([f"{args.env_size}/{n}.json" for n in names], static_env_params_override=static_params)
        return tuple(names), levels

    dims = tuple(int(n) for n in np.asarray(env.action_space(env_params).number_of_dims_per_distribution))
    # the observation's shape from the empty level every sampled level starts from (tested: a sampled level's, both
    # observation types): tracing the sampler here took 10-16 s on a CPU, and the update's trace traced it again
    example_obs = jax.eval_shape(lambda key: reset(key, create_empty_env(static_params))[0], jax.random.PRNGKey(0))
    return Env(sample_levels, reset, step, example_obs, dims, int(env_params.max_timesteps), handmade)


# ---- Networks and the multi-categorical policy (one categorical per motor / thruster)
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


class ActorCriticMLP(nn.Module):
    """Separate actor and critic MLPs on the flat symbolic observation: (flat logits, value)."""

    action_dims: tuple
    hidden_size: int
    num_layers: int

    @nn.compact
    def __call__(self, obs):
        logits = MLP(self.hidden_size, self.num_layers, sum(self.action_dims), 0.01)(obs)
        return logits, MLP(self.hidden_size, self.num_layers, 1, 1.0)(obs)[..., 0]


class ActorCriticTransformer(nn.Module):
    """Kinetix's permutation-invariant transformer over the scene's entities (non-recurrent), whose
    pooled embedding feeds the actor's and the critic's tanh layers: (flat logits, value)."""

    action_dims: tuple
    hidden_size: int
    num_layers: int

    @nn.compact
    def __call__(self, obs):
        from kinetix.environment.spaces import ActionType
        from kinetix.models.transformer_model import ActorCriticTransformer as KinetixTransformer

        net = KinetixTransformer(
            action_dim=sum(self.action_dims), actor_width=self.hidden_size, critic_width=self.hidden_size,
            actor_depth=self.num_layers, critic_depth=self.num_layers, action_mode=ActionType.MULTI_DISCRETE,
            hybrid_action_continuous_dim=0, multi_discrete_number_of_dims_per_distribution=list(self.action_dims),
            activation="tanh", recurrent=False, **TRANSFORMER,
        )
        timestep = jax.tree.map(lambda x: x[None], obs)  # Kinetix's models take (time, batch, ...)
        dones = jnp.zeros((1, jax.tree.leaves(obs)[0].shape[0]))
        _, pi, value = net(None, (timestep, dones))
        return jnp.concatenate([d.logits for d in pi.distributions], axis=-1)[0], value[0]


def actor_part(params, model, num_layers):
    """The parameters the policy's logits depend on, flat (charts/update_norm_actor): the actor MLP's; for the transformer
    every parameter but the critic's tower and head, the shared entity encoders and transformer included (Kinetix's
    GeneralActorCriticRNN builds the actor's num_layers layers, then the critic's; its Dense_0 is the actor's head,
    Dense_1 the critic's)."""
    flat = flatten_dict(params["params"])
    if model == "mlp":
        return {k: v for k, v in flat.items() if k[0] == "MLP_0"}
    critic = {f"DenseAndActivation_{i}" for i in range(num_layers, 2 * num_layers)} | {"Dense_1"}
    return {k: v for k, v in flat.items() if not (k[1] == "GeneralActorCriticRNN_0" and k[2] in critic)}


def action_layout(action_dims):
    """(D, K) position in the flat logits of every category of the D action dimensions, and which exist."""
    offsets = np.cumsum([0, *action_dims[:-1]])
    exists = np.arange(max(action_dims))[None, :] < np.asarray(action_dims)[:, None]
    return jnp.asarray(np.where(exists, offsets[:, None] + np.arange(max(action_dims))[None, :], 0)), jnp.asarray(exists)


def log_policy(flat_logits, layout):
    """Per-dimension log-probabilities (..., D, K) from the flat logits; missing categories get probability 0."""
    index, exists = layout
    return jax.nn.log_softmax(jnp.where(exists, flat_logits[..., index], -1e9), axis=-1)


def log_prob(logp, action):
    return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0].sum(-1)


def entropy(logp):
    return -(jnp.exp(logp) * logp).sum((-2, -1))


def kl_divergence(logp_p, logp_q):
    """Exact KL(p || q) of two multi-categorical policies."""
    return (jnp.exp(logp_p) * (logp_p - logp_q)).sum((-2, -1))


# ---- PPO-EWMA (stagnation §2.2, eq. 4; App. E), as openai/ppo-ewma does it (as the Kinetix/gymnax PPO-EWMA script)
def ewma_beta(com):
    """Decay of an EWMA whose centre of mass is `com` steps: COM = 1 / (1 - beta) - 1."""
    return com / (com + 1.0)


def ewma_update(prox_params, params, beta, total_weight, bias_correction=True):
    """One EWMA step after a minibatch step: (theta_prox, total weight); openai's `EwmaModel.update`
    counts the initial copy as one sample: w' = beta w + 1, theta_prox <- (beta w / w') theta_prox + theta / w'."""
    if not bias_correction:
        return jax.tree.map(lambda p, q: beta * p + (1.0 - beta) * q, prox_params, params), total_weight
    new_total = beta * total_weight + 1.0
    decayed = beta * total_weight / new_total
    return jax.tree.map(lambda p, q: decayed * p + q / new_total, prox_params, params), new_total


def decoupled_policy_loss(newlogprob, prox_logprob, behav_logprob, advantages, clip_coef, imp_samp_max):
    """openai/ppo-ewma's `compute_losses` (ppo_ewma/ppo.py): the clipped objective relative to the proximal
    policy, with log pi_behav replaced by max(log pi_behav, stop_gradient(log pi) - log imp_samp_max) in both
    terms (the ratio pi / pi_behav bounded by imp_samp_max; 0 = no bound). With prox = behav: PPO's loss.
    Returns (loss, clip fraction, share of samples where the bound is active)."""
    logratio = newlogprob - prox_logprob
    logp_adj = behav_logprob
    if imp_samp_max > 0:
        logp_adj = jnp.maximum(behav_logprob, jax.lax.stop_gradient(newlogprob) - math.log(imp_samp_max))
    pg_losses = -advantages * jnp.exp(newlogprob - logp_adj)
    low, high = jnp.log(1.0 - clip_coef), jnp.log(1.0 + clip_coef)  # clip_coef may be traced
    clipped_logratio = jnp.clip(logratio, low, high)
    pg_losses2 = -advantages * jnp.exp(clipped_logratio + prox_logprob - logp_adj)
    loss = jnp.maximum(pg_losses, pg_losses2).mean()
    clipfrac = ((logratio < low) | (logratio > high)).mean()
    if imp_samp_max > 0:
        imp_samp_clipfrac = (newlogprob - behav_logprob > math.log(imp_samp_max)).mean()
    else:
        imp_samp_clipfrac = jnp.zeros(())
    return loss, clipfrac, imp_samp_clipfrac


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


# ---- SFL (Rutherford et al., 2024): learnability, top-K buffer, the rho mix of a batch
def learnability(successes, episodes):
    """p (1 - p) with p the success rate of a level's finished episodes (p = 0 when none finished)."""
    p = jnp.where(episodes > 0, successes / jnp.maximum(episodes, 1), 0.0)
    return p * (1.0 - p), p


def buffer_score(p):
    """What Kinetix's SFL ranks candidates by (`experiments/sfl.py`): p (1 - p) + 0.001 p, so ties go to solved levels."""
    return p * (1.0 - p) + 0.001 * p


def top_k_levels(scores, success_rates, level_ids, levels, k):
    """The k highest-scoring levels, best first, ties broken by the lower global level index.

    The explicit tie-break makes the buffer the same however the candidates are split over devices.
    """
    idx = jnp.lexsort((level_ids, -scores))[:k]
    return scores[idx], success_rates[idx], level_ids[idx], jax.tree.map(lambda x: x[idx], levels)


def top_k_over_devices(scores, success_rates, level_ids, levels, k):
    """`top_k_levels` of every device's candidates together, inside `shard_map` over axis "d" (replicated result).

    Each device ranks its own candidates; the (score, p, id) of each local top k are gathered and every
    device picks the same global top k; then only the k winning levels travel: each device fills in the
    winners it holds and a psum assembles them (k levels, not devices x k).
    """
    k_local = min(k, scores.shape[0])
    local = jnp.lexsort((level_ids, -scores))[:k_local]
    gathered = jax.tree.map(lambda x: jax.lax.all_gather(x[local], "d", tiled=True), (scores, success_rates, level_ids))
    winners = jnp.lexsort((gathered[2], -gathered[0]))[:k]  # gathered device by device: winner w is device w // k_local's
    mine = (winners // k_local) == jax.lax.axis_index("d")
    held = local[winners % k_local]

    def assemble(x):
        # the devices that do not hold a winner add 0; floats are summed as their bit patterns, so that every
        # value arrives exactly (signed zeros too), and booleans as bytes
        mask = mine.reshape((-1,) + (1,) * (x.ndim - 1))
        if jnp.issubdtype(x.dtype, jnp.floating):
            bits = jnp.dtype(f"uint{x.dtype.itemsize * 8}")
            part = jnp.where(mask, jax.lax.bitcast_convert_type(x[held], bits), jnp.zeros((), bits))
            return jax.lax.bitcast_convert_type(jax.lax.psum(part, "d"), x.dtype)
        part = jnp.where(mask, x[held], jnp.zeros((), x.dtype)).astype(jnp.uint8 if x.dtype == jnp.bool_ else x.dtype)
        return jax.lax.psum(part, "d").astype(x.dtype)

    return gathered[0][winners], gathered[1][winners], gathered[2][winners], jax.tree.map(assemble, levels)


def from_buffer_mask(global_ids, rho):
    """Which envs draw their level from the buffer: exactly floor((i + 1) rho) of the first i + 1, spread evenly."""
    return np.floor((np.asarray(global_ids) + 1) * rho) > np.floor(np.asarray(global_ids) * rho)


def buffer_positions(num_envs, num_devices, rho):
    """(fresh, buffer): the local positions of each device's fresh-level and buffer-level envs, (devices, count).

    The mask is a function of the global env id, so any split over devices draws the same levels; each
    device must hold the same number of each (rho x envs per device a whole number), so that it samples
    exactly the fresh levels it uses.
    """
    mask = from_buffer_mask(np.arange(num_envs), rho).reshape(num_devices, -1)
    counts = mask.sum(1)
    if (counts != counts[0]).any():
        raise BadFlag(
            f"--sfl-sample-ratio {rho} gives the devices' {num_envs // num_devices} envs {counts.min()} to {counts.max()} "
            "buffer levels, where each must hold as many: rho x envs per device must be a whole number"
        )
    order = np.argsort(mask, axis=1, kind="stable")  # fresh positions first, each in increasing order
    n_fresh = mask.shape[1] - counts[0]
    return order[:, :n_fresh].astype(np.int32), order[:, n_fresh:].astype(np.int32)


def minibatch_ids(rng, global_ids, num_steps, num_minibatches):
    """(num_steps, envs) minibatch index of every transition, decided per env so that it does not depend on the devices.

    Each env's steps are shuffled. With M | T every minibatch gets T / M steps of every env. With T | M the
    envs form G = M / T groups, each env spreading its T steps over its group's T minibatches; envs are
    dealt into the groups by a new random permutation of every block of G consecutive global ids each
    epoch, so each device (which holds whole blocks) has an equal share of every minibatch, and which
    envs share a minibatch changes from epoch to epoch (as Kinetix's per-epoch env permutation does).
    """
    k_steps, k_groups = jax.random.split(rng)

    def per_env(env_id):
        perm = jax.random.permutation(jax.random.fold_in(k_steps, env_id), num_steps)
        if num_steps % num_minibatches == 0:
            return perm // (num_steps // num_minibatches)
        groups = num_minibatches // num_steps
        group = jax.random.permutation(jax.random.fold_in(k_groups, env_id // groups), groups)[env_id % groups]
        return group * num_steps + perm

    return jax.vmap(per_env, out_axes=1)(global_ids)


# ---- Training: the update (rollout, GAE, epochs of minibatches), SFL's buffer and the evaluation, per device
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
    prox_params: dict  # PPO-EWMA's EWMA of the params (= the params under standard PPO)
    ewma_weight: jnp.ndarray  # total weight of the EWMA (openai's total_weight)
    rng: jnp.ndarray


class Buffer(NamedTuple):
    """The SFL buffer: the K levels of highest buffer_score (p (1 - p) + 0.001 p), best first (replicated)."""

    levels: tuple
    scores: jnp.ndarray
    success_rates: jnp.ndarray


# Kinetix's reset, step and level sampler take seconds to a minute each to trace and batch on a CPU. The two functions
# below are jitted with them as static arguments, so each is traced once per shape for the whole process: the update's
# rollout and SFL's rollouts (num-envs wide) share one trace, as do the update's fresh levels and SFL's candidates.
@partial(jax.jit, static_argnums=0)
def keyed(fn, rng, ids, *args):
    """vmap of fn over envs, each with its own key fold_in(rng, global id)."""
    return jax.vmap(lambda i, *a: fn(jax.random.fold_in(rng, i), *a))(ids, *args)


@partial(jax.jit, static_argnums=(0, 1, 4))
def levels_by_index(sample_levels, pool, rng, first, n):
    """Random levels number first ... first + n - 1 of the stream keyed by rng, drawn in pools of `pool` keyed by the
    pool's index, so that any split over devices draws the same levels."""
    pools = jax.vmap(lambda j: sample_levels(jax.random.fold_in(rng, j), pool))(first // pool + jnp.arange(n // pool))
    return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), pools)


def strong(tree):
    """The same arrays without weak types, so that a jitted function sees one signature and compiles once."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)


def make_train(args, env):
    """(init, update, sfl_update, evaluate, schedule), each a function of one device's share, PureJaxRL style.

    As in Kinetix's SFL, every update starts each env afresh on a new level, so no env state is carried
    from one update to the next: the whole training state is `Shared` and the SFL `Buffer`.
    """
    layout = action_layout(env.action_dims)
    model = ActorCriticTransformer if args.model == "transformer" else ActorCriticMLP
    network = model(env.action_dims, args.hidden_size, args.num_layers)
    local_envs = args.num_envs // args.num_devices
    local_mb = args.minibatch_size // args.num_devices
    ewma = args.ewma_com is not None
    constants = hyperparameters(args)  # for the optimizer state's structure and the host's log of the learning rate
    fresh_positions, buffer_positions_ = (jnp.asarray(x) for x in buffer_positions(args.num_envs, args.num_devices, args.sfl_sample_ratio))
    local_fresh = fresh_positions.shape[1]
    pool = args.level_filter_pool if args.filter_levels else 1

    def schedule(count, h=constants):
        """The learning rate after `count` minibatch steps: linear to 0 over the run if --anneal-lr (CleanRL's and
        PureJaxRL's annealing, optax.linear_schedule's formula), of h's values, traced or not."""
        if not args.anneal_lr:
            return h["learning_rate"] + 0 * count
        return h["learning_rate"] * (1 - jnp.clip(count, 0, h["lr_anneal_updates"]) / h["lr_anneal_updates"])

    def optimizer(h):
        """Adam after clipping the global norm, at schedule's learning rate; one structure for any h (one checkpoint)."""
        return optax.chain(optax.clip_by_global_norm(h["max_grad_norm"]), optax.adam(partial(schedule, h=h), eps=1e-5))

    tx = optimizer(constants)  # its state's structure, for init

    def global_ids(n_local):
        return jax.lax.axis_index("d") * n_local + jnp.arange(n_local)

    def policy_and_value(params, obs):
        logits, value = network.apply(params, obs)
        return log_policy(logits, layout), value

    reset_envs, step_envs = partial(keyed, env.reset), partial(keyed, env.step)

    def init(rng):
        rng, k_net = jax.random.split(rng)
        params = network.init(k_net, jax.tree.map(lambda x: jnp.zeros((1,) + x.shape, x.dtype), env.example_obs))
        return strong(Shared(params, tx.init(params), params, jnp.ones(()), rng))

    def candidate_levels(rng, first):
        """levels_by_index(..., rng, first, local_envs), drawn in pieces the size of an update's fresh levels where
        they divide it: the same levels, from the sampler the update traced."""
        piece = local_fresh if local_fresh and local_envs % local_fresh == 0 else local_envs
        # a loop over the pieces, not a list: one copy of Kinetix's sampler in the program (a copy a piece doubled the
        # SFL program's compilation at Table 3's presets)
        pieces = jax.lax.map(lambda j: levels_by_index(env.sample_levels, pool, rng, first + j * piece, piece),
                             jnp.arange(local_envs // piece, dtype=jnp.int32))
        return strong(jax.tree.map(lambda x: x.reshape((local_envs,) + x.shape[2:]), pieces))  # the update's types

    def rollout_levels(rng, buffer):
        """Each env's level for this rollout: a share rho from the buffer (picked uniformly), the rest fresh
        random levels; only the fresh levels that are used are sampled."""
        device = jax.lax.axis_index("d")
        fresh_pos, buffer_pos = fresh_positions[device], buffer_positions_[device]
        k_fresh, k_pick = jax.random.split(rng)
        example = jax.tree.map(lambda x: x[0], buffer.levels)
        levels = jax.tree.map(lambda x: jnp.zeros((local_envs,) + x.shape, x.dtype), example)
        if local_fresh:  # the k-th fresh env over all devices gets fresh level k
            fresh = levels_by_index(env.sample_levels, pool, k_fresh, device * local_fresh, local_fresh)
            levels = jax.tree.map(lambda x, f: x.at[fresh_pos].set(f), levels, fresh)
        if buffer_pos.shape[0]:
            picks = keyed(lambda k: jax.random.randint(k, (), 0, args.sfl_buffer_size), k_pick, global_ids(local_envs)[buffer_pos])
            levels = jax.tree.map(lambda x, b: x.at[buffer_pos].set(b[picks]), levels, buffer.levels)
        return levels

    def loss_fn(params, prox_logprob, mb, advantages, targets, h):
        logp, newvalue = policy_and_value(params, mb.obs)
        newlogprob = log_prob(logp, mb.action)
        pg_loss, clipfrac, imp_samp_clipfrac = decoupled_policy_loss(newlogprob, prox_logprob, mb.logprob, advantages,
                                                                     h["clip_coef"], args.imp_samp_max)
        if args.clip_vloss:
            v_clipped = mb.value + jnp.clip(newvalue - mb.value, -h["vf_clip_coef"], h["vf_clip_coef"])
            v_loss = 0.5 * jnp.maximum((newvalue - targets) ** 2, (v_clipped - targets) ** 2).mean()
        else:
            v_loss = 0.5 * ((newvalue - targets) ** 2).mean()
        entropy_loss = entropy(logp).mean()
        loss = pg_loss - h["ent_coef"] * entropy_loss + h["vf_coef"] * v_loss
        return loss, (pg_loss, v_loss, entropy_loss, clipfrac, imp_samp_clipfrac)

    def update(shared, buffer, h):
        """One PPO update on this device's share. `h`: hyperparameters(args), traced, so that other values of those
        flags run this same program."""
        tx = optimizer(h)
        rng, k_levels, k_reset, k_roll, k_epochs = jax.random.split(shared.rng, 5)
        ids = global_ids(local_envs)
        levels = rollout_levels(k_levels, buffer)
        obs, env_state = reset_envs(k_reset, ids, levels)

        def env_step(carry, step_key):
            env_state, obs, episode_return = carry
            logp, value = policy_and_value(shared.params, obs)
            k_action, k_env = jax.random.split(step_key)
            action = keyed(lambda k, lp: jax.random.categorical(k, lp), k_action, ids, logp)
            next_obs, env_state, reward, done, solved = step_envs(k_env, ids, env_state, action, levels)
            episode_return = episode_return + reward
            transition = Transition(obs, action, log_prob(logp, action), logp, value, reward, done.astype(jnp.float32))
            stats = (done, episode_return * done, solved)
            return (env_state, next_obs, episode_return * (1 - done)), (transition, stats)

        (_, last_obs, _), (traj, stats) = jax.lax.scan(env_step, (env_state, obs, jnp.zeros(local_envs)),
                                                       jax.random.split(k_roll, args.num_steps))
        advantages, targets = compute_gae(traj.reward, traj.value, traj.done, policy_and_value(shared.params, last_obs)[1],
                                          h["gamma"], h["gae_lambda"])

        def update_minibatch(carry, minibatch):
            params, opt_state, prox_params, ewma_weight = carry
            mb, mb_advantages, mb_targets = minibatch
            if args.norm_adv:  # statistics of the whole minibatch, over all devices
                mean = jax.lax.pmean(mb_advantages.mean(), "d")
                std = jnp.sqrt(jax.lax.pmean(((mb_advantages - mean) ** 2).mean(), "d"))
                mb_advantages = (mb_advantages - mean) / (std + 1e-8)
            prox_logprob = log_prob(policy_and_value(prox_params, mb.obs)[0], mb.action) if ewma else mb.logprob
            (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, prox_logprob, mb, mb_advantages, mb_targets, h)
            grads = jax.lax.pmean(grads, "d")  # every device holds an equal share of the minibatch
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            if ewma:
                prox_params, ewma_weight = ewma_update(prox_params, params, h["ewma_beta"], ewma_weight, args.ewma_bias_correction)
            else:
                prox_params = params
            return (params, opt_state, prox_params, ewma_weight), (*jax.lax.pmean(aux, "d"), optax.global_norm(grads))

        def update_epoch(carry, rng):
            order = jnp.argsort(minibatch_ids(rng, ids, args.num_steps, args.num_minibatches).reshape(-1), stable=True)
            minibatches = jax.tree.map(
                lambda x: x.reshape((-1,) + x.shape[2:])[order].reshape((args.num_minibatches, local_mb) + x.shape[2:]),
                (traj._replace(behav_logp=None), advantages, targets),  # behaviour log-probs: KL pass only
            )
            return jax.lax.scan(update_minibatch, carry, minibatches)

        (params, opt_state, prox_params, ewma_weight), losses = jax.lax.scan(
            update_epoch, (shared.params, shared.opt_state, shared.prox_params, shared.ewma_weight),
            jax.random.split(k_epochs, args.update_epochs))

        # KL(behaviour || updated policy) on the whole batch, exact; DDR = batch / KL (stagnation §4.4)
        chunks = jax.tree.map(lambda x: x.reshape((args.num_minibatches, local_mb) + x.shape[2:]), (traj.obs, traj.behav_logp))
        kl_sums = jax.lax.map(lambda c: kl_divergence(c[1], policy_and_value(params, c[0])[0]).sum(), chunks)
        pg_loss, v_loss, entropy_loss, clipfrac, imp_samp_clipfrac, grad_norm = jax.tree.map(jnp.mean, losses)
        diff = jax.tree.map(lambda a, b: a - b, params, shared.params)  # the outer step (stagnation §3)
        done, ret_sum, solved = jax.tree.map(lambda x: jax.lax.psum(x.sum(), "d"), stats)
        metrics = {
            "losses/policy_loss": pg_loss,
            "losses/value_loss": v_loss,
            "losses/entropy": entropy_loss,
            "losses/clipfrac": clipfrac,
            "losses/imp_samp_clipfrac": imp_samp_clipfrac,
            "losses/grad_norm": grad_norm,
            "losses/approx_kl": jax.lax.psum(kl_sums.sum(), "d") / args.batch_size,
            "charts/update_norm": optax.global_norm(diff),
            "charts/update_norm_actor": optax.global_norm(actor_part(diff, args.model, args.num_layers)),
            "episodes": done,
            "episode_return_sum": ret_sum,
            "episodes_solved": solved,
        }
        if ewma:
            prox_kls = jax.lax.map(lambda c: kl_divergence(policy_and_value(prox_params, c[0])[0],
                                                           policy_and_value(params, c[0])[0]).sum(), chunks)
            metrics["losses/prox_kl"] = jax.lax.psum(prox_kls.sum(), "d") / args.batch_size
        return strong(Shared(params, opt_state, prox_params, ewma_weight, rng)), metrics

    def play(params, rng, levels, num_steps, ids=None):
        """Roll each level out from its start for num_steps steps (episodes restart on it): (successes, episodes, first solved).

        Draws are keyed by `ids`, by default the levels' global indices over the devices.
        """
        n = jax.tree.leaves(levels)[0].shape[0]
        ids = global_ids(n) if ids is None else ids
        k_reset, k_run = jax.random.split(rng)
        obs, state = reset_envs(k_reset, ids, levels)

        def body(carry, step_key):
            obs, state, successes, episodes, first, running = carry
            k_action, k_env = jax.random.split(step_key)
            action = keyed(lambda k, lp: jax.random.categorical(k, lp), k_action, ids, policy_and_value(params, obs)[0])
            obs, state, _, done, solved = step_envs(k_env, ids, state, action, levels)
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
            ids = c * args.num_envs + global_ids(local_envs)  # candidate c * num_envs + i is env i's level in chunk c
            levels = candidate_levels(k_levels, ids[0])
            successes, episodes, _ = play(shared.params, jax.random.fold_in(k_play, c), levels, args.sfl_rollout_length, ids)
            _, p = learnability(successes, episodes)
            return buffer_score(p), p, ids, levels

        candidates = jax.lax.map(chunk, jnp.arange(chunks))
        scores, p, _, levels = top_k_over_devices(*jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), candidates),
                                                  args.sfl_buffer_size)
        return strong(Buffer(levels, scores, p))

    def evaluate(params, rng, levels):
        """Per level, the share of --eval-num-attempts attempts, each from the level's start, whose first
        episode reaches the goal (Kinetix's eval). Every device plays every level alike (replicated)."""
        n = jax.tree.leaves(levels)[0].shape[0]
        attempt = lambda k: play(params, k, levels, env.max_episode_steps, jnp.arange(n))[2]
        return jax.vmap(attempt)(jax.random.split(rng, args.eval_num_attempts)).astype(jnp.float32).mean(0)

    return init, update, sfl_update, evaluate, schedule


def over_devices(init, update, sfl_update, evaluate, mesh):
    """make_train's functions of one device's share, jitted over the mesh's devices (every argument and result
    replicated: each device's share of the envs is picked inside the functions by its axis index)."""
    shard, R = partial(jax.shard_map, mesh=mesh, check_vma=False), P()
    return (jax.jit(shard(init, in_specs=R, out_specs=R)),
            jax.jit(shard(update, in_specs=(R, R, R), out_specs=(R, R)), donate_argnums=0),
            jax.jit(shard(sfl_update, in_specs=(R, R), out_specs=R)),
            jax.jit(shard(evaluate, in_specs=(R, R, R), out_specs=R)))




# ---- The host side: SFL's buffer every T updates, the update, its logs, evaluations (the plumbing: Run, below)
def logged_metrics(args, metrics):
    """One update's {tag: value} as logged: the episodes that ended, as means; the DDR (§4.4)."""
    episodes, ret_sum, solved = (metrics.pop(k) for k in ("episodes", "episode_return_sum", "episodes_solved"))
    if episodes:
        metrics["charts/episodic_return"] = ret_sum / episodes
        metrics["charts/episodic_solve_rate"] = solved / episodes
    metrics["charts/ddr"] = args.batch_size / max(float(metrics["losses/approx_kl"]), 1e-12)
    return metrics


def train(args, run):
    """Kinetix SFL's loop: every T updates a new buffer, then each update on a rho mix of buffer and fresh levels."""
    env = make_env(args)
    init, update, sfl_update, evaluate, schedule = make_train(args, env)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    init, update, sfl_update, evaluate = over_devices(init, update, sfl_update, evaluate, mesh)
    replicated = NamedSharding(mesh, P())

    def replicate(tree):
        """Host arrays -> global arrays replicated on every device of every process (what a jit here expects)."""
        return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), replicated, lambda i: np.asarray(x)[i]), tree)

    rng = jax.random.fold_in(jax.random.PRNGKey(args.seed), 1)  # apart from the evaluation set's PRNGKey(--eval-levels-seed)
    rng, k_init, k_sfl = jax.random.split(rng, 3)
    shapes = jax.eval_shape(lambda: (init(k_init), sfl_update(init(k_init), k_sfl)))  # (shared, buffer)
    if args.resume is not None:
        shared, buffer = replicate(run.restore(shapes))
    # the update, init and SFL's program compile on other threads while this one sets the run up (and waits where a
    # signal can reach it: a compile on this thread would hold a SIGTERM until XLA finished)
    hyper = replicate(hyperparameters(args))  # traced: other values of these flags run the same program
    shapes = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated), (*shapes, hyper))
    key_shape = jax.ShapeDtypeStruct(k_init.shape, k_init.dtype, sharding=replicated)
    compiled_update, compiled_init, compiled_sfl = run.compile(
        lambda: update.lower(*shapes).compile(), lambda: init.lower(key_shape).compile(),
        lambda program=sfl_update: program.lower(shapes[0], key_shape).compile())

    @cache  # at the first evaluation: drawing and loading it takes a minute on a CPU
    def evaluation_set():
        """--num-eval-levels random levels drawn once with --eval-levels-seed (the same for every --seed, as
        Kinetix's PRNGKey(100) set), then the hand-designed levels' names and levels; every process draws it alike."""
        # drawn under the training programs' shard_map: Kinetix's sampler is traced there already (a plain jit traced
        # it again, ~50 s on a CPU); with replicated specs every device draws the same levels from the same key
        draw = jax.shard_map(lambda key: env.sample_levels(key, args.num_eval_levels), mesh=mesh, in_specs=P(), out_specs=P(),
                             check_vma=False)
        sampled = jax.jit(draw)(replicate(jax.random.PRNGKey(args.eval_levels_seed)))
        names, handmade = env.handmade()
        return names, replicate(jax.tree.map(lambda a, b: np.concatenate([np.asarray(a), np.asarray(b)]), jax.device_get(sampled), handmade))

    eval_rng = jax.random.PRNGKey(args.seed + 10_000)  # evaluation never draws from the training stream
    run.start([f"kinetix-{args.env_size}__{args.exp_name}__{args.seed}__{int(time.time())}"], schedule)
    if run.lead:
        print(
            f"PPO + SFL ({args.model}) on {args.num_devices} device(s) in {jax.process_count()} process(es): batch "
            f"{args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} updates, "
            f"{args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} (recipe {args.scaling_recipe}); "
            f"SFL preset {args.sfl_preset}: N {args.sfl_num_candidates}, T {args.sfl_update_period}, K {args.sfl_buffer_size}, "
            f"L {args.sfl_rollout_length}, rho {args.sfl_sample_ratio:g}; random levels "
            + (f"filtered as Kinetix does, in pools of {args.level_filter_pool}" if args.filter_levels else "unfiltered")
            + ("" if args.ewma_com is None else
               f"; PPO-EWMA COM {args.ewma_com:g} against {args.update_epochs * args.num_minibatches} minibatch steps per update "
               f"(PPO's proximal policy lags {(args.update_epochs * args.num_minibatches - 1) / 2:g} on average)")
            + (f"; resuming {args.resume} after update {run.start_iteration}" if args.resume else ""))
    sfl_update = compiled_sfl.result()
    if args.resume is None:
        shared = compiled_init.result()(replicate(k_init))
    # several processes: the update compiled on each before SFL's rollouts (one still compiling it rolls out slower,
    # and JAX's cache serves only process 0's writes), then all wait for each other, as SFL holds collectives
    if jax.process_count() > 1:
        compiled_update.result()
    barrier("set up")
    started = time.time()  # training's clock counts the SFL buffers, and the first one's wait for the update's compile
    for first, last, _ in run.calls():  # one update a call
        if (first - 1) % args.sfl_update_period == 0:
            buffer = sfl_update(shared, replicate(jax.random.fold_in(k_sfl, first)))
            p = host(buffer.success_rates)
            run.write([{"sfl/mean_learnability": (p * (1 - p)).mean(), "sfl/buffer_solve_rate": p.mean()}])
        if first == run.start_iteration + 1:
            (update,) = run.begin(compiled_update, since=started)
        # one update a call, waited for: a signal during it stops the run after it (fetched while the next one ran, it
        # would stop the run one update later)
        shared, metrics = ready(update(shared, buffer, hyper))
        run.log(first, last, partial(lambda metrics: [[jax.tree.map(host, metrics)]], metrics))
        if run.due(args.eval_every):
            handmade_names, eval_levels = evaluation_set()
            per_level = host(evaluate(shared.params, replicate(jax.random.fold_in(eval_rng, last)), eval_levels))
            sampled, handmade = per_level[: args.num_eval_levels], per_level[args.num_eval_levels :]
            run.write([{"eval/solve_rate_sampled": sampled.mean(), "eval/solve_rate_handmade": handmade.mean(),
                        **{f"eval_handmade/{name}": solved for name, solved in zip(handmade_names, handmade)}}])
        run.checkpoint(lambda: (shared, buffer))
    return run.finish()
# ==== appendix: the run's plumbing, one text in every JAX script; change it in all of them ====
# The flags of a run (not of the algorithm) and their generic rules, the scaling recipes' arithmetic, checkpoints,
# signals, logs, the host's schedule of fused calls, compilation on other threads and its cache, several processes, the
# entry point. What differs from script to script it reads off the page above by name: Args, ITERATION, FLAG_RULES,
# UNUSED_RUN_FLAGS, STRUCTURAL_FLAGS, DROPPED_FLAGS, check_args, call_ends, logged_metrics, train, ewma_beta.
import contextlib
import copy
import glob
import io
import json
import re
import shutil
import signal
import sys
import threading
import traceback
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict, field, fields, make_dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Annotated

import tyro
from jax.experimental import multihost_utils
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.summary.writer import event_file_writer
from tqdm import tqdm

# --fuse-iterations 0: iterations per call until a call trains on this many transitions (below, a call's host cost,
# dispatch and logging, is a large share: 32,768 transitions take ~0.5-1 s on 2 CPU cores, a few ms on a GPU)
FUSE_TRANSITIONS = {"cpu": 32_768, "accelerator": 2_097_152}
# a call takes no more iterations than end within this many seconds (measured on the calls before it): a signal is
# honoured at the end of the running call, and Slurm sends SIGKILL 30 s after SIGTERM by default
CALL_SECONDS = 5.0
UNROLL = {"cpu": 1, "accelerator": 4}  # --unroll 0 by the device (measured with the update unrolled K times)
LR_BLOCK = 65_536  # iterations whose logged learning rates are computed at once
REQUEUE = 75  # exit status of a run stopped by SIGTERM / SIGUSR1 with a checkpoint: "requeue me" (EX_TEMPFAIL)
RECIPES = ("none", "more-minibatches", "bigger-minibatch", "bigger-minibatch-sqrt-lr", "hybrid")


@dataclass
class RunArgs(Args):
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanrl-scale"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""

    # Speed
    fuse_iterations: int = 0
    """iterations per jitted call (scanned, their metrics fetched once); 0: as many as fill 32,768 transitions of all
    seeds on a CPU, 2,097,152 on a GPU or TPU; a call also ends at each checkpoint, and at each evaluation where the
    script evaluates"""
    unroll: int = 0
    """steps of the rollout, GAE and minibatch scans unrolled (lax.scan's `unroll`; the same computation, float
    rounding aside); 0: 4 on a GPU or TPU where a call holds several iterations of a batch below 2,097,152
    transitions, else 1"""
    compile_cache: bool = True
    """keep compiled programs in JAX's persistent cache ($JAX_COMPILATION_CACHE_DIR, else ~/.cache/cleanrl-scale/jax):
    a rerun, a resumed run or a grid point with the same shapes and flags skips compilation (--no-compile-cache or
    JAX_ENABLE_COMPILATION_CACHE=false: off)"""

    # Checkpoints and several hosts
    save_every: int = 0
    """write a checkpoint under runs/{run_name}/checkpoints every this many iterations (0: never)"""
    keep_checkpoints: int = 3
    """keep the run's newest this many checkpoints (0: keep every one)"""
    resume: Optional[str] = None
    """continue from this checkpoint: its run, under its seed (--seed left out takes it, another is refused); every
    flag but the structural ones (the shapes of what it holds) may change, --ewma-com and --clip-coef among them"""
    distributed: bool = False
    """call jax.distributed.initialize() to span several processes / hosts (found from Slurm unless given below; a
    script that trains on one device refuses it)"""
    coordinator_address: Optional[str] = None
    """host:port of process 0 with --distributed (default: from the cluster, or JAX_COORDINATOR_ADDRESS)"""
    num_processes: Optional[int] = None
    """number of processes with --distributed (default: from the cluster)"""
    process_id: Optional[int] = None
    """this process's index with --distributed (default: from the cluster)"""

    # to be filled in runtime
    num_devices: int = 0
    """the number of JAX devices the envs are split over (computed in runtime: setting it is refused)"""
    batch_size: int = 0
    """the batch size (computed in runtime: setting it is refused)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime: setting it is refused)"""


def command_line():
    """RunArgs as the command line reads it: the run flags this script does not use (UNUSED_RUN_FLAGS) are none of its
    flags (--help lists the others, the algorithm's first)."""
    unused = [(f.name, Annotated[f.type, tyro.conf.Suppress], field(default=f.default)) for f in fields(RunArgs)
              if f.name in UNUSED_RUN_FLAGS]
    return make_dataclass("RunArgs", unused, bases=(RunArgs,)) if unused else RunArgs


class BadFlag(ValueError):
    """A flag value that breaks a rule; reported as one line, exit status 2."""


def parse_command_line():
    """The flags (command_line()), read by tyro. What tyro refuses (an unknown flag, a value not of the flag's type, a
    missing value) is a BadFlag too: tyro draws a box of 5-10 lines on stderr, taken apart here into one line."""
    said, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100000"  # tyro wraps its box at the terminal's width, mid-word
    try:
        with contextlib.redirect_stderr(said):
            args = tyro.cli(command_line())
    except SystemExit as e:
        if e.code != 2:  # --help
            raise
        raise BadFlag(one_line(said.getvalue())) from None
    finally:
        os.environ.pop("COLUMNS") if columns is None else os.environ.update(COLUMNS=columns)
    sys.stderr.write(said.getvalue())  # tyro's warnings, if any
    return args


def one_line(box):
    """tyro's error box as one line: its message, the flag it suggests; a run flag this script does not take, its why."""
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
    if message.startswith("Unrecognized options: "):
        for name, why in UNUSED_RUN_FLAGS.items():
            if re.search(rf"(^|[ ,]){re.escape(flag(name))}(=|,|$)", message[len("Unrecognized options: "):]):
                return f"{flag(name)} does not apply to this script: {why}"
    typed = re.match(r"Error parsing (--\S+): (invalid literal for int\(\)|could not convert string to float).*: (\S+)$", message)
    if typed:
        return f"{typed[1]} must be {'an integer' if 'int' in typed[2] else 'a number'} (got {typed[3]})"
    missing = re.match(r"Missing value for argument '(--\S+)'", message)
    if missing:
        return f"{missing[1]} needs a value; see --help"
    meant = [row.split()[0] for section in sections[1:] if section[0].startswith(("Perhaps you meant", "Arguments similar"))
             for row in section[1:] if row.startswith("--")]
    return message + (f" (perhaps {' or '.join(dict.fromkeys(meant))})" if meant else "") + "; see --help"


def flag(name):
    return f"--{name.replace('_', '-')}"


def run_flags(args):
    """{flag: value} of the flags this script has (RunArgs less UNUSED_RUN_FLAGS): its logged hyper-parameters."""
    return {name: value for name, value in vars(args).items() if name not in UNUSED_RUN_FLAGS}


def num_runs(args):
    """Runs one program trains: --num-seeds where a script has it."""
    return getattr(args, "num_seeds", 1)


def check_run_flags(args):
    """The run flags this script does not use, and --distributed's (before jax.distributed.initialize, which must come
    before any device use)."""
    defaults = RunArgs()
    for name, why in UNUSED_RUN_FLAGS.items():
        if getattr(args, name) != getattr(defaults, name):
            raise BadFlag(f"{flag(name)} does not apply to this script: {why}")
    given = [name for name in ("coordinator_address", "num_processes", "process_id") if getattr(args, name) is not None]
    if given and not args.distributed:
        raise BadFlag(f"{flag(given[0])} only applies with --distributed")
    if args.num_processes is not None and args.num_processes <= 0:
        raise BadFlag(f"--num-processes must be positive (got {args.num_processes})")
    if args.process_id is not None and not 0 <= args.process_id < (args.num_processes or float("inf")):
        raise BadFlag(f"--process-id must lie in [0, --num-processes) (got {args.process_id})")


def check_runs_directory():
    """runs/ in the working directory must be a directory this process can write: checked before any compute."""
    if os.path.lexists("runs") and not os.path.isdir("runs"):
        raise BadFlag(f"{os.path.abspath('runs')} is not a directory: the runs are written under it")
    if not os.access("runs" if os.path.isdir("runs") else ".", os.W_OK | os.X_OK):
        raise BadFlag(f"cannot write {os.path.abspath('runs')}: start the run from a directory you can write")


def resolve_args(args, num_devices=None):
    """Check every flag and fill the values computed at run time; raises BadFlag before any compute. `num_devices`: the
    devices the run spans, for a script that splits its envs over them (None: jax.device_count(); 0: not known yet,
    before jax.distributed.initialize)."""
    if args.exp_name in ("", ".", "..") or "/" in args.exp_name or os.sep in args.exp_name or "\0" in args.exp_name:
        raise BadFlag(f"--exp-name must be a plain name, without '/' (it names a directory under runs/; got {args.exp_name!r})")
    if len(os.fsencode(args.exp_name)) > 128:  # a file name holds 255 bytes: the run's adds the env id, seed and time
        raise BadFlag(f"--exp-name must be at most 128 bytes (it names a directory under runs/; got {len(os.fsencode(args.exp_name))})")
    for name in ("num_devices", "batch_size", "num_iterations"):  # filled in below from the other flags
        if getattr(args, name) and name not in UNUSED_RUN_FLAGS:
            raise BadFlag(f"{flag(name)} is computed from the other flags: do not set it (got {getattr(args, name)})")
    check_run_flags(args)
    runs = num_runs(args)
    if not 0 <= args.seed <= 2**31 - runs:  # the seeds are int32 inside the programs
        span = f"[0, 2**31 - --num-seeds] = [0, {2**31 - runs}]" if hasattr(args, "num_seeds") else "[0, 2**31)"
        raise BadFlag(f"--seed must lie in {span} (got {args.seed})")
    if args.track and runs > 1:
        raise BadFlag("--track logs one wandb run a process: use --num-seeds 1 with it (or `wandb sync` the runs after)")
    for name, value in vars(args).items():  # inf and nan break every rule below without failing a comparison
        if isinstance(value, float) and not math.isfinite(value):
            raise BadFlag(f"{flag(name)} must be a finite number (got {value})")
    rules = (("must be >= 0", lambda v: v >= 0, ("save_every", "keep_checkpoints", "fuse_iterations", "unroll")),
             *FLAG_RULES)
    for rule, holds, names in rules:
        for name in names:  # unset (None): a default check_args fills in
            if getattr(args, name) is not None and not holds(getattr(args, name)):
                raise BadFlag(f"{flag(name)} {rule} (got {getattr(args, name)!r})")
    check_args(args, num_devices)
    args.fuse_iterations = min(args.fuse_iterations, args.num_iterations)  # 0 (by the device): resolve_fuse_iterations
    if args.resume is not None:
        check_resume(args)
    return args


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


def resolve_batch(args):
    """batch_size, the minibatches (of --scaling-recipe, --minibatch-size or --num-minibatches) and num_iterations."""
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
        args.num_minibatches = 32 if args.num_minibatches is None else args.num_minibatches
        if args.num_minibatches <= 0 or args.batch_size % args.num_minibatches:
            raise BadFlag(f"--num-minibatches {args.num_minibatches} must be positive and divide the batch {args.batch_size} (num-envs x num-steps)")
        args.minibatch_size = args.batch_size // args.num_minibatches
    if args.total_timesteps >= 2**62:  # the step count is an int64 in TensorBoard and the checkpoints
        raise BadFlag(f"--total-timesteps must be below 2^62 (got {args.total_timesteps})")
    args.num_iterations = args.total_timesteps // args.batch_size
    if args.num_iterations == 0:
        raise BadFlag(f"--total-timesteps {args.total_timesteps} is less than one batch ({args.batch_size} = num-envs x num-steps)")


def check_resume(args):
    """--resume: a checkpoint of this script, of the same structural flags and seed, before the run's last iteration."""
    if not os.path.isfile(args.resume):
        raise BadFlag(no_checkpoint_at(args.resume))
    try:
        meta, _ = read_checkpoint(args.resume)
        missing = [key for key in ("iteration", "global_step", "args") if key not in meta]
        missing += [flag(name) for name in STRUCTURAL_FLAGS if name not in meta.get("args", {})]
    except Exception as e:  # a truncated or foreign file
        raise BadFlag(f"--resume {args.resume} is not a checkpoint of this script ({type(e).__name__}: {e})")
    this = os.path.basename(__file__)  # before the "script" key: another script's has flags this one lacks
    foreign = set(meta.get("args", {})) - set(asdict(args)) - set(DROPPED_FLAGS)
    written_by = meta.get("script") or ("another script" if foreign else this)
    if written_by != this:
        raise BadFlag(f"--resume {args.resume} is a checkpoint of {written_by}, not of {this}")
    if missing:
        raise BadFlag(f"--resume {args.resume} is not a checkpoint of this script (its metadata lacks {', '.join(missing)})")
    for name in STRUCTURAL_FLAGS:
        if meta["args"][name] != getattr(args, name):
            raise BadFlag(f"--resume {args.resume} was saved with {flag(name)} {meta['args'].get(name)}, this run has "
                          f"{getattr(args, name)}; only flags that keep the shapes of what it holds may change")
    seed = meta["args"].get("seed", args.seed)  # the run's random state is in the checkpoint: it goes on under its seed
    given = any(word == "--seed" or word.startswith("--seed=") for word in sys.argv[1:])  # even at the default's value
    if args.seed != seed and (given or args.seed != RunArgs.seed):
        raise BadFlag(f"--seed {args.seed} does not match the checkpoint's seed {seed}: a resume continues its run's "
                      f"seed; drop --seed or pass {seed}")
    args.seed = seed  # --seed left at its default: the checkpoint's
    if meta["iteration"] >= args.num_iterations:
        raise BadFlag(f"--resume {args.resume} is at {ITERATION} {meta['iteration']}, not before the last "
                      f"({args.num_iterations}); raise --total-timesteps")


def no_checkpoint_at(path):
    """Why --resume names no checkpoint: no such file, or a directory (and the newest checkpoint under it)."""
    if not os.path.isdir(path):
        return f"--resume {path}: no such file"
    found = sorted((name for pattern in ("", "checkpoints", "*/checkpoints", "runs/*/checkpoints")
                    for name in glob.glob(os.path.join(glob.escape(path), pattern, "iter_*.npz"))),
                   key=lambda name: os.stat(name).st_mtime if os.path.exists(name) else 0)
    return f"--resume {path} is a directory: name a checkpoint file" + (f", such as {found[-1]}" if found else " (none is in it)")


def hyperparameters(args):
    """The float flags the update takes as traced values, float32: one compiled program serves every value of them (a
    grid over the learning rate, clip epsilon or COM, a run's budget, a resume with a new COM or epsilon), so the
    persistent compilation cache serves them all. The flags that shape the program stay Python constants."""
    updates = args.num_iterations * args.update_epochs * args.num_minibatches
    values = {"learning_rate": args.learning_rate, "lr_anneal_updates": updates, "clip_coef": args.clip_coef,
              "vf_clip_coef": args.clip_coef if args.vf_clip_coef is None else args.vf_clip_coef,
              "ent_coef": args.ent_coef, "vf_coef": args.vf_coef, "max_grad_norm": args.max_grad_norm,
              "gamma": args.gamma, "gae_lambda": args.gae_lambda,
              "ewma_beta": ewma_beta(args.ewma_com) if args.ewma_com is not None else 0.0}
    return {name: np.float32(value) for name, value in values.items()}


def filling_iterations(args, device=None):
    """Iterations of all seeds that fill FUSE_TRANSITIONS on `device` (None: the one this process trains on)."""
    device = device or ("cpu" if jax.default_backend() == "cpu" else "accelerator")
    return max(1, FUSE_TRANSITIONS[device] // (args.batch_size * num_runs(args)))


def resolve_fuse_iterations(args, device=None):
    """--fuse-iterations 0 and --unroll 0: their values on `device` ("cpu" or "accelerator"; None: the one this process
    trains on, whose backend starts here, not while the flags are checked: a launcher that checks them on a GPU machine
    takes no GPU)."""
    device = device or ("cpu" if jax.default_backend() == "cpu" else "accelerator")
    if args.fuse_iterations == 0:  # a call ends at each evaluation and checkpoint: no more slots than fit between them
        intervals = [every for every in (*call_ends(args), args.save_every) if every]
        args.fuse_iterations = min([filling_iterations(args, device), args.num_iterations] + intervals)
    if args.unroll == 0:  # only where a call holds several iterations of small batches, where loop trips cost (on an
        # H200, XLA failed to compile the update at 8M-transition batches with its scans unrolled)
        small = args.batch_size * num_runs(args) < FUSE_TRANSITIONS[device]
        args.unroll = UNROLL[device] if small and args.fuse_iterations > 1 else 1
    return args


def fuse(update, operands=0):
    """--fuse-iterations iterations in one call: a scan of the jitted update(runner, *operands, measure, hyper) (one
    iteration) whose metrics come back stacked, called as fused(runner, *operands, measure, active[, hyper]). An
    iteration whose `active` is False leaves the runner as it is (a call that ends early, at an evaluation, a checkpoint
    or the last iteration, has the same shapes and so the same compiled program)."""

    def fused(runner, *rest):
        static, (measure, active, *hyper) = rest[:operands], rest[operands:]
        hyper = hyper[0] if hyper else None
        shapes = jax.eval_shape(update, runner, *static, measure[0], hyper)[1]  # cached: the cond below traces no more

        def skipped(runner):
            return runner, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        def body(runner, x):
            measure, active = x
            return jax.lax.cond(active, lambda r: update(r, *static, measure, hyper), skipped, runner)

        return jax.lax.scan(body, runner, (measure, active))

    return fused


def over_seeds(update, num_seeds, operands=0, over=None):
    """A fused update of one run over the seeds' leading axis (--num-seeds; one seed: the lone run's program itself),
    jitted, its runner donated: every scalar metric comes back in one (seeds, iterations, tags) array, one transfer a
    call. `over`: what makes the program of one device's share a program over all the devices (a jax.shard_map; None:
    one device). Returns it and its tags, in that order (set when it is traced)."""
    tags = []

    def train_call(runner, *rest):
        static, flags = rest[:operands], rest[operands:]  # (levels, ...), then measure, active, hyper
        if num_seeds == 1:
            runner, metrics = update(*jax.tree.map(lambda x: x[0], (runner, *static)), *flags)
            runner, metrics = jax.tree.map(lambda x: x[None], (runner, metrics))
        else:
            runner, metrics = jax.vmap(update, in_axes=(0,) * (1 + operands) + (None,) * len(flags))(runner, *rest)
        tags[:] = list(metrics)
        return runner, jnp.stack([metrics[tag].astype(jnp.float32) for tag in tags], axis=-1)

    return jax.jit(over(train_call) if over else train_call, donate_argnums=0), tags


def call_metrics(scalars, tags, measure, active):
    """A call's stacked metrics on the host, as Run.log takes them: per active iteration, each run's {tag: value}, the
    dynamics/ ones where measured. The call's own buffer whole: an indexing op would queue behind the running call."""
    scalars = host(scalars)
    return [[{tag: value for tag, value in zip(tags, scalars[s, i].tolist()) if measure[i] or not tag.startswith("dynamics/")}
             for s in range(len(scalars))] for i in np.flatnonzero(active)]


class SummaryWriter:
    """The event files torch.utils.tensorboard.SummaryWriter writes (scalars as simple values, text for the text
    plugin), through the tensorboard package's own EventFileWriter: importing torch only for them took ~1.2 s of every
    run's start."""

    def __init__(self, logdir):
        self.file = event_file_writer.EventFileWriter(logdir)  # looked up now: wandb's sync_tensorboard patches it

    def add_scalars(self, values, step):
        """Every {tag: value} at one step in one event: one write where one a tag took ~10 times the host's time (what
        TensorBoard and wandb read back is the same)."""
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value)) for tag, value in values.items()])
        self.file.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def add_text(self, tag, text):
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        summary = Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)])
        self.file.add_event(Event(wall_time=time.time(), step=0, summary=summary))

    def close(self):
        self.file.close()


def ready(tree):
    """`tree`, once every array in it is computed: waited for in short sleeps, where a signal's handler runs at once (in
    jax.device_get or block_until_ready this thread sits in XLA, and Python runs the handler only when the wait ends)."""
    for x in jax.tree.leaves(tree):
        while isinstance(x, jax.Array) and not x.is_ready():
            time.sleep(0.01)
    return tree


def host(x):
    """The whole of an array on the host, once computed (ready): of one on one device or replicated on several, this
    process's copy (works across hosts, unlike device_get); of one split over the devices of several processes, gathered
    from every process (a collective: every process calls it)."""
    if not isinstance(x, jax.Array):
        return np.asarray(x)
    if ready(x).is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    return np.asarray(x) if x.is_fully_addressable else multihost_utils.process_allgather(x, tiled=True)


def read_checkpoint(path):
    """(meta dict, list of arrays) of a checkpoint written by `save_checkpoint`."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        leaves = [data[f"leaf_{i}"] for i in range(meta["num_leaves"])]
    return meta, leaves


def save_checkpoint(path, state, iteration, global_step, train_seconds, args):
    """One .npz: every array of `state`, plus the flags and counters."""
    leaves = [host(x) for x in jax.tree.leaves(state)]
    meta = {"num_leaves": len(leaves), "iteration": iteration, "global_step": global_step,
            "train_seconds": train_seconds, "args": run_flags(args), "script": os.path.basename(__file__)}
    tmp = f"{path}.tmp.npz"
    np.savez(tmp, meta=np.array(json.dumps(meta)), **{f"leaf_{i}": x for i, x in enumerate(leaves)})
    os.replace(tmp, path)  # never a half-written checkpoint


def prune_checkpoints(directory, keep):
    """Delete all but the newest `keep` checkpoints iter_<i>.npz of a run (keep 0: delete none)."""
    iterations = sorted(int(name[5:-4]) for name in os.listdir(directory) if re.fullmatch(r"iter_\d+\.npz", name))
    for iteration in iterations[:-keep] if keep else []:
        os.remove(os.path.join(directory, f"iter_{iteration}.npz"))


def restore_checkpoint(path, target):
    """The state saved at `path` (host arrays), iteration, global_step, training seconds; checked leaf by leaf against
    `target`'s shapes."""
    meta, leaves = read_checkpoint(path)
    expected, treedef = jax.tree.flatten(target)
    if len(leaves) != len(expected) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(leaves, expected)):
        raise BadFlag(f"--resume {path} does not match this run's state: its network, environment or buffer (array shapes differ)")
    return jax.tree.unflatten(treedef, leaves), meta["iteration"], meta["global_step"], meta.get("train_seconds", 0.0)


class Stop(BaseException):  # not an Exception: no `except Exception` (a library's, ours) may swallow it
    """SIGTERM, SIGUSR1 (Slurm's pre-timeout signal) and a first Ctrl-C stop the run at the end of the running call, with
    a checkpoint and a line naming --resume (exit 75; 130 for Ctrl-C); a second signal with a Ctrl-C among the two
    aborts at once (the logs flushed, the last checkpoint named). Each signal prints a line as it arrives. Before the
    first call there is nothing to save: the signal raises this at once, and the process exits without waiting for XLA;
    with several processes (`together`) it waits for the first call instead, where every process agrees to stop (one
    that left alone would leave the others waiting at a barrier, until JAX ends them for a lost task)."""

    def __init__(self):
        super().__init__()
        self.signum, self.training, self.together, self.checkpoint, self.compiling = None, False, False, None, []
        self.ctrl_c, self.aborted, self.raised, self.writers, self.eta = False, False, False, [], lambda: None
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            signal.signal(signum, self.handle)

    def handle(self, signum, frame):
        again = self.signum is not None and (self.ctrl_c or signum == signal.SIGINT)
        self.ctrl_c = self.ctrl_c or signum == signal.SIGINT
        name = signal.Signals(signum).name
        if not (self.training or self.together) or again:  # a second signal with a Ctrl-C among them aborts
            self.signum, self.aborted, self.raised = signum, again, True
            raise self
        self.signum = self.signum or signum
        seconds = self.eta()  # a line at once, written straight to the descriptor (a print here could land inside one)
        try:
            os.write(2, (f"\n{name} received: stopping after the running call, with a checkpoint"
                         + (f", in about {seconds:.0f} s" if seconds is not None else " (the first: its length is not known yet)")
                         + "; a Ctrl-C aborts at once\n").encode())
        except OSError:  # stderr closed (a pipe's reader gone): the stop goes on
            pass

    @property
    def exit_status(self):
        return 128 + signal.SIGINT if self.ctrl_c else REQUEUE


def in_background(*fns):
    """Each fn() on a daemon thread of its own, as Futures: a run that stops or fails while XLA compiles does not wait
    for it (XLA compiles without holding the GIL: on two or more cores the set-up's own compilations run beside it)."""
    futures = [Future() for _ in fns]

    def run(fn, future):
        try:
            future.set_result(fn())
        except BaseException as e:  # handed to whoever asks for the result
            future.set_exception(e)

    for fn, future in zip(fns, futures):
        threading.Thread(target=run, args=(fn, future), daemon=True).start()
    return futures


def barrier(name):
    """With several processes, wait until every one is here (JAX's coordination service, not a collective): one that
    compiled sooner, or loaded its programs from the cache, would otherwise wait at the first collective for the
    others, and Gloo (CPU hosts) gives up after 30 s."""
    from jax._src import distributed  # the coordination service's client, as JAX's own checkpointing reaches it

    if jax.process_count() > 1 and distributed.global_state.client is not None:
        distributed.global_state.client.wait_at_barrier(name, timeout_in_ms=3_600_000)


class Run:
    """A run's host side: its clock, checkpoints, logs (TensorBoard, wandb, the progress bar; process 0 only), the
    schedule of its calls and the stop a signal asks for. `train` on the page above reads: run.restore, run.compile,
    run.start, run.begin, then for each call of run.calls(): the call, run.log, evaluations (run.due, run.write),
    run.checkpoint; run.finish."""

    def __init__(self, args, stop):
        self.args, self.stop = resolve_fuse_iterations(args), stop
        self.lead = jax.process_index() == 0  # only process 0 logs and checkpoints
        self.start_iteration, self.global_step, self.train_seconds = 0, 0, 0.0
        self.writers, self.names, self.pending, self.stopping, self.last = [], [], None, False, 0
        self.recent_returns = deque(maxlen=20)
        # iterations a call may take (CALL_SECONDS): one until a call is measured (two calls run before the first is
        # measured, and a stop waits for both), then as many as fit
        self.call_iterations, self.per_iteration = 1, None
        stop.eta = self.seconds_to_stop

    def restore(self, target):
        """The state of the --resume checkpoint (host arrays, checked against target's shapes); the run goes on from its
        iteration, step count and training clock."""
        state, self.start_iteration, self.global_step, self.train_seconds = restore_checkpoint(self.args.resume, target)
        return state

    def restore_seeds(self, shapes):
        """restore() of a state with a leading seed axis (--num-seeds): a lone seed's checkpoint holds it without."""
        lone = num_runs(self.args) == 1
        state = self.restore(jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), shapes) if lone else shapes)
        return jax.tree.map(lambda x: x[None], state) if lone else state

    def seeds_state(self, state):
        """What a checkpoint of a state with a leading seed axis holds: a lone seed's arrays without it."""
        return jax.tree.map(lambda x: x[0], state) if num_runs(self.args) == 1 else state

    def compile(self, *programs):
        """Each program() (a compilation) on another thread while this one sets the run up and waits where a signal
        can reach it: Futures."""
        futures = in_background(*programs)
        self.stop.compiling += futures
        return futures

    def start(self, names, schedule):
        """The run's logs, one per name (per seed), each with the flags as its hyperparameters text (its own seed);
        `schedule`: the learning rate after a number of minibatch steps."""
        args, self.names, self.schedule = self.args, names, schedule
        if self.lead:
            flags = run_flags(args)
            if args.track:
                import wandb

                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=flags,
                           name=names[0], save_code=True)
            self.writers = [SummaryWriter(f"runs/{name}") for name in names]
            self.stop.writers = self.writers  # flushed by an abort
            for i, writer in enumerate(self.writers):
                writer.add_text("hyperparameters", "|param|value|\n|-|-|\n%s" % "\n".join(
                    f"|{key}|{args.seed + i if key == 'seed' else value}|" for key, value in flags.items()))
        self.learning_rates(self.start_iteration // LR_BLOCK)
        self.progress = tqdm(total=args.num_iterations * args.batch_size * len(names), unit="step", unit_scale=True,
                             initial=self.global_step * len(names), dynamic_ncols=True, disable=not self.lead)

    def begin(self, *compiling, since=None):
        """Training starts: the compiled programs (every process waits for the others'); a signal from now on stops the
        run after the running call, with a checkpoint. The clock (charts/SPS, charts/train_seconds) starts now, or at
        `since` (a time.time() of work done before, training's own)."""
        programs = [future.result() for future in compiling]
        barrier("programs ready")
        if self.stop.signum is not None and not self.stop.together:  # its raise was lost (a gc callback ignores it)
            raise self.stop
        self.stop.training = True
        self.start_time = self.logged_time = time.time() if since is None else since
        self.start_step, self.flushed = self.global_step, self.start_iteration
        return programs

    def calls(self):
        """(first, last, active) of each call: up to --fuse-iterations iterations (and as many as end within CALL_SECONDS),
        ending at each of call_ends(args), each checkpoint and the last iteration; `active` marks which of the call's
        --fuse-iterations slots train. Ends after the call a signal stopped the run at."""
        args, iteration = self.args, self.start_iteration
        self.ends = (*call_ends(args), args.save_every)
        while iteration < args.num_iterations:
            last = min(iteration + self.call_iterations, args.num_iterations)
            for every in self.ends:
                if every:
                    last = min(last, (iteration // every + 1) * every)
            self.last = last
            yield iteration + 1, last, np.arange(iteration + 1, iteration + args.fuse_iterations + 1) <= last
            iteration = last
            if self.stopping:
                self.progress.close()
                if self.lead:
                    print(f"stopped by signal {self.stop.signum or 'to another process'} after {ITERATION} {iteration}; "
                          f"resume with --resume {self.stop.checkpoint}")
                return

    def seconds_to_stop(self):
        """About how long the calls in flight have left (None until a call is measured)."""
        if self.per_iteration is None:
            return None
        return max(0.0, self.logged_time + self.per_iteration * (self.last - self.flushed) - time.time())

    def due(self, every):
        """Whether the call that just ran ends a period of `every` iterations (or the run)."""
        return bool(every) and (self.last % every == 0 or self.last == self.args.num_iterations)

    def log(self, first, last, rows):
        """Log iterations first..last of the call just dispatched: `rows()`, a list per iteration of each run's {tag:
        value}, is fetched while the next call computes (JAX dispatches asynchronously), or now where this call ends at
        an evaluation, checkpoint, stop or the run's end, or is the first or a long one. A signal (to any process) stops
        every one after this call."""
        if self.pending:
            self.flush()
        self.pending = (first, last, rows)
        # a call the next one would not start before anyway (the first, or one longer than CALL_SECONDS) is waited for
        # here, before the stop is read: a signal during it stops the run after it, with no call queued behind it
        long = self.per_iteration is None or self.per_iteration * (last - first + 1) > CALL_SECONDS
        if jax.process_count() > 1:  # several processes agree (a flush decides whether they meet at a barrier)
            long = bool(multihost_utils.process_allgather(np.int32(long)).any())
        if long:
            self.flush()
        stopping = self.stop.signum is not None and last < self.args.num_iterations  # read once: it may change any time
        if jax.process_count() > 1:  # several processes: they agree on it
            stopping = bool(multihost_utils.process_allgather(np.int32(stopping)).any())
        self.stopping = stopping
        if stopping or long or last == self.args.num_iterations or any(self.due(every) for every in self.ends):
            self.flush()

    def flush(self):
        """Write the pending call's iterations, each at its own step; the call's wall time (from the previous call's
        metrics to this one's) is shared evenly among them."""
        if not self.pending:
            return
        (first, last, rows), self.pending = self.pending, None
        args, n = self.args, last - first + 1
        rows, now = rows(), time.time()
        for i, iteration in enumerate(range(first, last + 1)):
            self.global_step += args.batch_size
            seconds = self.logged_time + (now - self.logged_time) * (i + 1) / n - self.start_time
            for writer, metrics in zip(self.writers, rows[i]):
                metrics = logged_metrics(args, metrics)
                if "charts/episodic_return" in metrics:
                    self.recent_returns.append(metrics["charts/episodic_return"])
                metrics["charts/learning_rate"] = self.learning_rates(iteration // LR_BLOCK)[iteration % LR_BLOCK]
                metrics["charts/SPS"] = int((self.global_step - self.start_step) / seconds)
                metrics["charts/train_seconds"] = self.train_seconds + seconds  # wall-clock x
                writer.add_scalars(metrics, self.global_step)
        self.per_iteration, self.flushed = (now - self.logged_time) / n, last
        self.call_iterations = min(args.fuse_iterations, max(1, int(CALL_SECONDS / max(self.per_iteration, 1e-9))))
        self.logged_time = now
        self.progress.update(args.batch_size * len(self.names) * n)
        self.progress.set_postfix(sps=int(len(self.names) * (self.global_step - self.start_step) / (now - self.start_time)),
                                  ret=f"{np.mean(self.recent_returns):.2f}" if self.recent_returns else "-")

    def write(self, rows):
        """Each run's {tag: value} at the step reached (the pending call logged first)."""
        self.flush()
        for writer, values in zip(self.writers, rows):
            writer.add_scalars(values, self.global_step)

    @lru_cache(maxsize=1)
    def learning_rates(self, block):
        """The learning rate after each iteration of block `block` (LR_BLOCK iterations), computed once a block: a jax
        call in the loop waits for the running update."""
        iterations = np.minimum(np.arange(block * LR_BLOCK, (block + 1) * LR_BLOCK), self.args.num_iterations)
        counts = iterations * self.args.update_epochs * self.args.num_minibatches
        return np.broadcast_to(np.asarray(self.schedule(counts)), counts.shape)

    def checkpoint(self, state):
        """After the call: a checkpoint of state() if one is due (--save-every, the run's end, a stop), named for the
        resume line; then, where the call ended early, every process waits for the others (work of differing length)."""
        args, last = self.args, self.last
        if self.due(args.save_every) or self.stopping:
            state = jax.tree.map(host, state())  # on every process: a state split over several is gathered from each
        if (self.due(args.save_every) or self.stopping) and self.lead:
            os.makedirs(f"runs/{self.names[0]}/checkpoints", exist_ok=True)
            path = f"runs/{self.names[0]}/checkpoints/iter_{last}.npz"
            save_checkpoint(path, state, last, self.global_step, self.train_seconds + time.time() - self.start_time, args)
            self.stop.checkpoint = path  # named once written, before the older ones go: an abort names this one
            prune_checkpoints(os.path.dirname(path), args.keep_checkpoints)
        if self.pending is None:
            barrier(f"after {ITERATION} {last}")

    def finish(self):
        """The logs closed; the exit status: 0, or 75 / 130 after a stop with a checkpoint."""
        self.progress.close()
        for writer in self.writers:
            writer.close()
        return self.stop.exit_status if self.stopping else 0


def use_compile_cache(args):
    """JAX's persistent compilation cache: $JAX_COMPILATION_CACHE_DIR, else the user's cache directory. Set before
    anything compiles (checking the flags builds some envs): JAX settles the cache at its first compilation. With
    --distributed too: every process waits for the others before a program's first collective (barrier). Returns the
    outermost directory of it that does not exist yet (None: all do), for a refusal to take away again."""
    if not args.compile_cache or os.environ.get("JAX_ENABLE_COMPILATION_CACHE", "").lower() in ("0", "false"):
        jax.config.update("jax_enable_compilation_cache", False)  # JAX itself would follow $JAX_COMPILATION_CACHE_DIR
        return None
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cleanrl-scale", "jax")
    path = os.path.abspath(os.environ.get("JAX_COMPILATION_CACHE_DIR", default))
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)  # the update, init and evaluation programs
    new = None
    while not os.path.exists(path):
        new, path = path, os.path.dirname(path)
    return new


def take_away(new):
    """Remove the directory use_compile_cache made, if no program was written in it (a refused run writes nothing;
    JAX's size-bounded cache makes its .lockfile first)."""
    if new and os.path.isdir(new) and not any(set(files) - {".lockfile"} for _, _, files in os.walk(new)):
        shutil.rmtree(new, ignore_errors=True)


if __name__ == "__main__":
    try:
        args = parse_command_line()
    except BadFlag as e:
        print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
        sys.exit(2)
    made = use_compile_cache(args)
    stop = Stop()
    try:
        check_run_flags(args)
        if args.distributed:  # before anything touches a device, so that jax.devices() spans every process
            stop.together = True  # from here a signal waits for the first call, which every process stops after
            # every flag a device count cannot make right is checked first: initialize waits for all the processes
            resolve_args(copy.deepcopy(args), num_devices=0)
            check_runs_directory()
            # JAX's preemption service would take SIGTERM from Stop's handler (a SIGTERM then neither checkpoints nor
            # stops the run): Stop's handler and the per-call agreement (Run.log) do its work, for SIGUSR1 and Ctrl-C too
            jax.config.update("jax_enable_preemption_service", False)
            try:
                jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
            except ValueError as e:  # no cluster JAX can read them from (Slurm, Open MPI, ...)
                raise BadFlag(f"--distributed needs --coordinator-address, --num-processes and --process-id here: {e}")
        resolve_args(args)
        check_runs_directory()
        status = train(args, Run(args, stop))
    except (Exception, Stop) as e:  # bad input, stopped before the first call or aborted by a second signal, or an error
        if stop.raised:  # the Stop, or an error a library made of it (JAX's bind swallows any exception, then raises its own)
            e = stop
        if isinstance(e, BadFlag):
            take_away(made)
            print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
            sys.exit(2)
        if isinstance(e, Stop):
            resume = stop.checkpoint or args.resume
            for writer in stop.writers:  # what was logged up to the abort
                writer.close()
            print(f"stopped by signal {e.signum} ({'aborted: a second signal' if e.aborted else f'before the first {ITERATION}'}); "
                  + (f"resume with --resume {resume}" if resume else "nothing saved: rerun the command"))
            status = e.exit_status
        else:
            traceback.print_exc()
            status = 1
        # exit now: not when XLA finishes compiling, or the running call (an abort)
        if any(not future.done() for future in stop.compiling) or isinstance(e, Stop) and e.aborted:
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(status)
    sys.exit(status)
