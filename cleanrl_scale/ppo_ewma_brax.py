"""PPO and PPO-EWMA in JAX on Brax continuous control: the stagnation paper's outer-loop analysis at massive parallelism.

PureJaxRL's continuous PPO (`ppo_continuous_action.py`) with the instruments of the project's Kinetix/gymnax PPO-EWMA script, in place of the
papers' Isaac Gym runs (stagnation Fig. 10, the data-collection rebuttal's N_envs study):
- Brax's environments (`--env-id ant`, `humanoid`, `hopper`, ...) wrapped as PureJaxRL wraps them: episodes of 1,000
  steps with auto-reset, actions clipped to [-1, 1], running observation and return normalisation; a Gaussian policy
  with a state-independent log-std; PureJaxRL's hyper-parameters by default;
- PPO's outer loop as stochastic optimisation (stagnation §3): every iteration logs the size of the policy update
  (`charts/update_norm`), the exact KL it moved the policy by and the Data-to-Divergence Ratio (`charts/ddr`, §4.4);
- PPO-EWMA (§2.2, Hilton et al., 2022) with `--ewma-com C`: the proximal policy is an EWMA of the actor's weights with
  centre of mass C minibatch steps; openai/ppo-ewma's loss and bias-corrected EWMA; without the flag, standard PPO;
- the scaling recipes of §5 / App. D; checkpoints that can be resumed with a new COM or clip epsilon (Fig. 3a);
- the learning-dynamics metrics of the data-collection paper (App. B), computed inside the jitted update on a sample of
  the batch every --dynamics-every iterations;
- every device of every process (--distributed: jax.distributed, found from Slurm): `jax.shard_map` splits the envs over
  the devices, each holding an equal share of every minibatch (--shuffle per-env), the gradients, the advantages' and
  the normalisation's statistics averaged over them: one run on D devices trains as one run on one device.
PureJaxRL structure: one jitted `update` = rollout + GAE + epochs x minibatches, --fuse-iterations of them scanned in
one call; the host loop logs a call's stacked metrics while the next call runs, and checkpoints. Below the
appendix line: the run's plumbing.
Departures from PureJaxRL's ppo_continuous_action.py: the exact KL after the update (for the DDR), the metrics above,
--num-seeds vmapped in one program, and `--brax-fresh-starts` (off by default) for Isaac Gym's re-randomised resets.
"""
import contextlib
import io
import math
import os
import time
import warnings
from dataclasses import dataclass
from functools import partial
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
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

KL_CHUNK = 262_144  # states a forward pass of the KL after the update takes at most (its activations' memory)


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""

    # Environment
    env_id: str = "hopper"
    """a Brax environment: ant, humanoid, halfcheetah, hopper, walker2d, inverted_pendulum, ..."""
    brax_backend: str = "positional"
    """Brax's physics pipeline: positional (PureJaxRL's choice), generalized, spring or mjx"""
    brax_fresh_starts: bool = False
    """each episode from a new random start state, as Isaac Gym re-randomises at every reset (Brax's auto-reset,
    PureJaxRL's and the default, restarts each env from its own first state: N_envs distinct start states)"""
    norm_obs: bool = True
    """normalise observations by running mean and variance over all envs' steps (PureJaxRL's NormalizeVecObservation)"""
    norm_reward: bool = True
    """divide rewards by the running standard deviation of the discounted return (PureJaxRL's NormalizeVecReward);
    episodic returns are logged unscaled"""

    # Algorithm specific arguments (PureJaxRL's ppo_continuous_action.py config: the papers' Isaac Gym runs give no
    # values for Brax)
    total_timesteps: int = 50_000_000
    """total environment steps of the experiment"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (lr0 of a scaling recipe)"""
    anneal_lr: bool = False  # PureJaxRL's ANNEAL_LR
    """Toggle linear learning rate annealing to 0"""
    num_envs: int = 2048
    """the number of parallel environments"""
    num_steps: int = 10
    """the number of steps to run in each environment per policy rollout"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: Optional[int] = None
    """the number of mini-batches (default 32, or derived from --minibatch-size or the recipe)"""
    minibatch_size: int = 0
    """the mini-batch size (0 = derive it from --num-minibatches)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient epsilon (relative to the proximal policy)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function"""
    vf_clip_coef: Optional[float] = None
    """the value clipping range (unset = follow --clip-coef, as Kinetix and CleanRL do); set it to sweep epsilon alone"""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    hidden_size: int = 256
    """width of the actor's and the critic's MLP"""
    num_layers: int = 2
    """hidden layers of the actor's and the critic's MLP"""
    activation: str = "tanh"  # PureJaxRL's; the data-collection paper's networks are ReLU
    """the hidden layers' nonlinearity, tanh or relu (a ReLU unit that never fires is exactly 0, a tanh unit only near
    0: dormant neurons, data-collection App. B.2, are a ReLU network's failure)"""

    # PPO-EWMA (stagnation §2.2; Hilton et al., 2022)
    ewma_com: Optional[float] = None
    """centre of mass C of the EWMA proximal policy in minibatch steps, beta = C / (C + 1); unset = standard PPO"""
    ewma_bias_correction: bool = True
    """count the initial copy as one sample of the EWMA, as openai/ppo-ewma's EwmaModel does (total_weight)"""
    imp_samp_max: Optional[float] = None
    """bound of the ratio pi / pi_behaviour (openai/ppo-ewma's logp_adj); 0 = no bound (default: 100 with --ewma-com,
    as openai/ppo-ewma; none in PPO mode, as PureJaxRL's, CleanRL's and Kinetix's PPO)"""

    # Scaling recipes (stagnation paper §5, App. D)
    scaling_recipe: str = "none"
    """how minibatches and lr follow --num-envs: none, more-minibatches, bigger-minibatch, bigger-minibatch-sqrt-lr, hybrid"""
    base_num_envs: int = 2048
    """N0: the number of envs of the base config a recipe scales from"""
    base_num_minibatches: int = 32
    """M0: the number of minibatches of the base config a recipe scales from"""
    hybrid_minibatch_factor: int = 0
    """b of the hybrid recipe: minibatch size x b, lr x sqrt(b), minibatches x k/b (required with hybrid)"""

    # Learning-dynamics metrics (data-collection paper App. B), as the torch scripts compute them
    dynamics_every: int = 10
    """compute the dynamics/ metrics at the first iteration and every this many iterations (0 disables them)"""
    dynamics_batch: int = 1024
    """number of states of the current batch the dynamics/ metrics are computed on"""
    dormant_tau: float = 0.025
    """a neuron is dormant when its normalised mean activation is <= tau (Sokar et al., 2023)"""

    # Speed
    num_seeds: int = 1
    """train seeds --seed, --seed + 1, ... in one vmapped program, as PureJaxRL vmaps `train`; each writes its own run,
    drawing the random numbers it would alone: only the floating-point order differs, so its numbers agree with the
    lone run's closely at first, then drift apart as two runs on different hardware do"""
    # Devices (the envs split over every device of every process; the distributed flags: below, in the run's plumbing)
    shuffle: str = "auto"
    """how each epoch deals the batch into minibatches: `batch` shuffles the whole batch (PureJaxRL's; one device only);
    `per-env` shuffles each env's steps and gives every env, so every device, an equal share of each minibatch, each env
    drawing its actions and resets from its own random stream (Kinetix SFL's dealing: the same run on any number of
    devices); auto: batch on one device, per-env on several"""


# ---- Flag rules (the generic ones, and RunArgs' run flags: below, in the run's plumbing); what a checkpoint holds
BRAX_BACKENDS = ("positional", "generalized", "spring", "mjx")
ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}
ITERATION = "iteration"  # what the logs call one rollout and update
SHUFFLES = ("auto", "batch", "per-env")
FLAG_RULES = (  # (rule, holds, flags): each flag's value, when set, must hold
    ("must be positive", lambda v: v > 0, ("num_envs", "num_steps", "update_epochs", "total_timesteps", "hidden_size",
                                           "num_layers", "dynamics_batch", "num_seeds", "learning_rate", "max_grad_norm",
                                           "vf_clip_coef")),
    ("must be >= 0", lambda v: v >= 0, ("minibatch_size", "dynamics_every", "ent_coef", "vf_coef", "dormant_tau",
                                        "ewma_com")),
    ("must lie in [0, 1]", lambda v: 0 <= v <= 1, ("gamma", "gae_lambda")),
    ("must lie in (0, 1)", lambda v: 0 < v < 1, ("clip_coef",)),  # log(1 - eps) clips the ratio, as in openai/ppo-ewma
    ("must be 0 (no bound) or >= 1", lambda v: v == 0 or v >= 1, ("imp_samp_max",)),  # below 1: biased on-policy samples
    (f"must be one of {', '.join(ACTIVATIONS)}", lambda v: v in ACTIVATIONS, ("activation",)),
    (f"must be one of {', '.join(BRAX_BACKENDS)}", lambda v: v in BRAX_BACKENDS, ("brax_backend",)),
    (f"must be one of {', '.join(SHUFFLES)}", lambda v: v in SHUFFLES, ("shuffle",)),
)
# RunArgs' run flags this script does not use (given, they are refused): none, --distributed included
UNUSED_RUN_FLAGS = {}
# a checkpoint holds the runner state (parameters, optimiser, EWMA, Brax's states with the normalisation statistics,
# rng), each seed's, with a seed axis for several seeds; these flags fix their shapes (every other may change on --resume)
STRUCTURAL_FLAGS = ("env_id", "num_envs", "hidden_size", "num_layers", "activation", "brax_backend", "num_seeds")
DROPPED_FLAGS = ()  # flags this script no longer has, which a checkpoint of an older version lists


def brax_env_ids():
    """The environments Brax registers (ant, humanoid, ...)."""
    return tuple(import_brax_envs()._envs)  # Brax's registry (get_environment / register_environment read and write it)


def check_args(args, num_devices=None):
    """The rules FLAG_RULES cannot say, and the computed fields (the appendix's resolve_args calls it). `num_devices`: the
    devices the run spans (None: the run's, jax.device_count(); 0: not known yet, before jax.distributed.initialize,
    or in a launcher: checked as one device, --shuffle auto left to the run). Only the run builds the env, to check that
    it has --brax-backend (building it places its model on a device, which a launcher must not take)."""
    args.num_devices = jax.device_count() if num_devices is None else max(num_devices, 1)
    if args.shuffle == "auto" and num_devices != 0:  # (a count not known yet leaves it to the run)
        args.shuffle = "batch" if args.num_devices == 1 else "per-env"
    if args.shuffle == "batch" and args.num_devices > 1:
        raise BadFlag(f"--shuffle batch deals the whole batch on one device: on {args.num_devices} devices use per-env (or auto)")
    if args.num_envs % args.num_devices:
        raise BadFlag(f"--num-envs {args.num_envs} must be divisible by the {args.num_devices} devices (each steps an equal share)")
    if args.env_id not in brax_env_ids():
        raise BadFlag(f"--env-id must be a Brax environment ({', '.join(brax_env_ids())}) (got {args.env_id!r})")
    if num_devices is None:  # not every Brax env has every pipeline (swimmer: generalized only): build it once to know
        import mujoco

        previous = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(lambda message: None)  # MuJoCo's model warnings would write ./MUJOCO_LOG.TXT
        try:
            create_env(args)
        except ValueError as e:
            raise BadFlag(f"--brax-backend {args.brax_backend} is not one {args.env_id} has ({e})")
        finally:
            mujoco.set_mju_user_warning(previous)
    if args.imp_samp_max is None:
        args.imp_samp_max = 100.0 if args.ewma_com is not None else 0.0
    resolve_batch(args)
    # per-env: each epoch deals the steps of blocks of M / gcd(M, T) envs out (minibatch_ids); a device holds whole blocks
    m, t, local_envs = args.num_minibatches, args.num_steps, args.num_envs // args.num_devices
    if args.shuffle == "per-env" and local_envs % (m // math.gcd(m, t)):
        raise BadFlag(f"--shuffle per-env: the {local_envs} envs {'per device ' * (args.num_devices > 1)}must be a multiple of "
                      f"--num-minibatches / gcd(--num-minibatches, --num-steps) = {m // math.gcd(m, t)} (the envs whose steps fill "
                      "every minibatch equally)")
    if args.num_iterations * args.update_epochs * args.num_minibatches >= 2**31:
        raise BadFlag(f"--total-timesteps {args.total_timesteps} gives {args.num_iterations} iterations of "
                      f"{args.update_epochs * args.num_minibatches} minibatch steps: at most 2^31 - 1 steps (optax counts them "
                      "in int32)")
    if args.batch_size * args.num_seeds >= 2**31:
        raise BadFlag(f"--num-envs x --num-steps x --num-seeds must be below 2^31 (the program indexes its batch with int32; "
                      f"got {args.batch_size * args.num_seeds})")
    storage = args.batch_size * args.num_seeds * 24  # a transition's observation (one float32 at least) and 5 numbers
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if storage > memory:
        raise BadFlag(f"--num-envs {args.num_envs} x --num-steps {args.num_steps}{f' x --num-seeds {args.num_seeds}' * (args.num_seeds > 1)}: "
                      f"the batch alone takes {storage / 2**30:,.1f} GiB or more, more than this machine's {memory / 2**30:,.1f} GiB of memory")


def call_ends(args):
    """Periods (in iterations) at which a call must end besides checkpoints: none (no evaluation)."""
    return ()


# ---- Environment: Brax, wrapped as PureJaxRL's ppo_continuous_action.py wraps it, vmapped over the envs
BRAX_EPISODE_LENGTH = 1000  # Brax's EpisodeWrapper length, as PureJaxRL's BraxGymnaxWrapper and Brax's own PPO use


class EnvFns(NamedTuple):
    reset: callable  # keys -> obs, state
    # (keys, state, action) -> obs, state, reward (the one trained on), done, score (the environment's own reward,
    # summed into the logged episodic return)
    step: callable
    obs_dim: int
    action_size: int


class RunningStats(NamedTuple):
    """Running mean and variance over every env's values so far (PureJaxRL's NormalizeVec* wrappers), of every device's
    envs: the same on each device."""
    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def start(cls, shape=()):
        return cls(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4, jnp.float32))

    def update(self, batch):
        """Merge the statistics of a batch (its first axis: this device's envs; every device's, pooled over the devices'
        axis "d" with equal shares): Chan et al.'s parallel update, as PureJaxRL."""
        batch_mean, batch_var, batch_count = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        devices = jax.lax.axis_size("d")
        if devices > 1:  # the whole batch's: the mean of the shares' variances and of their means' squared spread
            mean = jax.lax.pmean(batch_mean, "d")
            batch_var = jax.lax.pmean(batch_var + (batch_mean - mean) ** 2, "d")
            batch_mean, batch_count = mean, batch_count * devices
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        return RunningStats(self.mean + delta * batch_count / total, m2 / total, total)


class BraxState(NamedTuple):
    env: object  # Brax's State (its EpisodeWrapper's step count and AutoResetWrapper's first state inside)
    obs_stats: RunningStats
    return_stats: RunningStats
    discounted_return: jnp.ndarray  # per env, what return_stats sees


def import_brax_envs():
    """brax.envs, imported on first use, without the "Failed to import warp" lines MuJoCo's MJX prints to stdout when
    the optional warp package is absent (Brax's own backends do not use it), nor the UserWarning each environment's
    construction gives that Brax is no longer maintained (the docs say so once; a start prints nothing that reads as
    an error)."""
    warnings.filterwarnings("ignore", message="Brax System, piplines and environments are not actively being maintained")
    with contextlib.redirect_stdout(io.StringIO()):
        from brax import envs
    return envs


def create_env(args, **kwargs):
    """brax.envs.create(args.env_id, ...) with the env's model on this process's first device. Brax builds it with
    mujoco.mjx.put_model, which places it on jax.devices()[0]: under --distributed, process 0's device, so that on every
    other process the model's arrays are not addressable, and the update, which closes over them, does not compile."""
    envs = import_brax_envs()  # (first: it imports mujoco.mjx without the lines that prints)
    from mujoco import mjx

    put_model = mjx.put_model
    mjx.put_model = partial(put_model, device=jax.local_devices()[0])
    try:
        return envs.create(args.env_id, backend=args.brax_backend, **kwargs)
    finally:
        mjx.put_model = put_model


def make_env(args):
    """A Brax environment as PureJaxRL's ppo_continuous_action.py wraps it (BraxGymnaxWrapper, ClipAction,
    NormalizeVecObservation, NormalizeVecReward): episodes of BRAX_EPISODE_LENGTH steps, auto-reset (Brax's
    AutoResetWrapper: an env restarts from its own first state), actions clipped to [-1, 1], observations normalised by
    the running statistics after this step's update, rewards divided by the running std of the discounted return.
    The statistics live in the env state, so checkpoints keep them. reset and step run on one device's envs, under
    jax.shard_map over the devices (the statistics pooled over them)."""
    env = create_env(args, episode_length=BRAX_EPISODE_LENGTH, auto_reset=True)

    def normalise(obs, stats):
        return (obs - stats.mean) / jnp.sqrt(stats.var + 1e-8) if args.norm_obs else obs

    def reset(keys):
        state = jax.vmap(env.reset)(keys)
        obs_stats = RunningStats.start(env.observation_size).update(state.obs)
        return normalise(state.obs, obs_stats), BraxState(state, obs_stats, RunningStats.start(), jnp.zeros(len(keys)))

    def step(keys, state, action):
        env_state = jax.vmap(env.step)(state.env, jnp.clip(action, -1.0, 1.0))
        done = env_state.done > 0.5  # ended or cut at BRAX_EPISODE_LENGTH (both end the return, as in PureJaxRL)
        if args.brax_fresh_starts:  # where an episode ended, a new random start in place of the env's first one
            fresh = jax.vmap(env.reset)(keys)
            new = lambda f, s: jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), f, s)
            env_state = env_state.replace(pipeline_state=jax.tree.map(new, fresh.pipeline_state, env_state.pipeline_state),
                                          obs=new(fresh.obs, env_state.obs))
        obs_stats = state.obs_stats.update(env_state.obs)
        discounted_return = state.discounted_return * args.gamma * (1 - done) + env_state.reward
        return_stats = state.return_stats.update(discounted_return)
        reward = env_state.reward / jnp.sqrt(return_stats.var + 1e-8) if args.norm_reward else env_state.reward
        state = BraxState(env_state, obs_stats, return_stats, discounted_return)
        return normalise(env_state.obs, obs_stats), state, reward, done, env_state.reward

    return EnvFns(reset, step, env.observation_size, env.action_size)


# ---- Network: MLPs and PureJaxRL's Gaussian policy
class MLP(nn.Module):
    hidden_size: int
    num_layers: int
    out: int
    out_scale: float
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x, with_hidden=False):
        """The output; with_hidden: (output, [the activations of every hidden layer])."""
        hidden = []
        for _ in range(self.num_layers):
            x = ACTIVATIONS[self.activation](nn.Dense(self.hidden_size, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
            hidden.append(x)
        out = nn.Dense(self.out, kernel_init=orthogonal(self.out_scale), bias_init=constant(0.0))(x)
        return (out, hidden) if with_hidden else out


# The Gaussian policy of continuous actions, PureJaxRL's (ppo_continuous_action.py: distrax.MultivariateNormalDiag of
# the actor's output and a state-independent log-std initialised at 0). A distribution is (..., 2, A): the mean and
# the log-std of each of the A action dimensions.
class GaussianActor(nn.Module):
    hidden_size: int
    num_layers: int
    action_size: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x, with_hidden=False):
        mean, hidden = MLP(self.hidden_size, self.num_layers, self.action_size, 0.01, self.activation)(x, True)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_size,))
        dist = jnp.stack([mean, jnp.broadcast_to(log_std, mean.shape)], axis=-2)
        return (dist, hidden) if with_hidden else dist


def sample_action(key, dist):
    """An action drawn from N(mean, std^2) per dimension (unclipped: the environment clips it, so its log-prob is exact)."""
    return dist[..., 0, :] + jnp.exp(dist[..., 1, :]) * jax.random.normal(key, dist[..., 0, :].shape)


def log_prob(dist, action):
    """log N(action; mean, diag(std^2)), summed over the action dimensions."""
    mean, log_std = dist[..., 0, :], dist[..., 1, :]
    return (-0.5 * ((action - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def entropy(dist):
    return (dist[..., 1, :] + 0.5 * (1.0 + math.log(2 * math.pi))).sum(-1)


def kl_divergence(dist_p, dist_q):
    """Exact KL(p || q) of two diagonal Gaussians: the sum over dimensions of
    log(std_q / std_p) + (std_p^2 + (mean_p - mean_q)^2) / (2 std_q^2) - 1/2."""
    mean_p, log_std_p, mean_q, log_std_q = dist_p[..., 0, :], dist_p[..., 1, :], dist_q[..., 0, :], dist_q[..., 1, :]
    spread = (jnp.exp(2.0 * log_std_p) + (mean_p - mean_q) ** 2) / (2.0 * jnp.exp(2.0 * log_std_q))
    return (log_std_q - log_std_p + spread - 0.5).sum(-1)


# ---- PPO-EWMA (stagnation §2.2, eq. 4; Hilton et al., 2022)
def ewma_beta(com):
    """Decay of an EWMA whose centre of mass is `com` steps: COM = 1 / (1 - beta) - 1."""
    return com / (com + 1.0)


def ewma_update(prox_params, params, beta, total_weight, bias_correction=True):
    """One EWMA step after a minibatch step: (theta_prox, total weight).

    With bias correction (openai/ppo-ewma's `EwmaModel.update`) the initial copy counts as one sample:
    w' = beta w + 1, theta_prox <- (beta w / w') theta_prox + theta / w', so early iterations are not
    pulled toward the random initialisation; w grows to 1 / (1 - beta) and the step becomes
    theta_prox <- beta theta_prox + (1 - beta) theta, which is the update without correction.
    """
    if not bias_correction:
        return jax.tree.map(lambda p, q: beta * p + (1.0 - beta) * q, prox_params, params), total_weight
    new_total = beta * total_weight + 1.0
    decayed = beta * total_weight / new_total
    return jax.tree.map(lambda p, q: decayed * p + q / new_total, prox_params, params), new_total


def decoupled_policy_loss(newlogprob, prox_logprob, behav_logprob, advantages, clip_coef, imp_samp_max):
    """PPO-EWMA's decoupled clipped objective (stagnation §2.2, eq. 4), as openai/ppo-ewma computes it.

    (pi_prox / pi_behav) min(r A, clip(r, 1 - eps, 1 + eps) A) with r = pi / pi_prox, in log space
    (`compute_losses` in ppo_ewma/ppo.py): the behaviour log-prob is replaced by
    logp_adj = max(logp_behav, stop_gradient(logp_new) - log imp_samp_max), which bounds the whole
    ratio pi / pi_behav by imp_samp_max in both terms (imp_samp_max = 0: no bound). With prox = behav
    it is PPO's clipped surrogate wherever pi / pi_behav <= imp_samp_max.
    Returns (loss, clip fraction, share of samples where the bound is active).
    """
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


def compute_gae(rewards, values, dones, last_value, gamma, gae_lambda, unroll=1):
    """GAE(lambda) over (num_steps, num_envs); dones[t] = the episode ended with transition t."""

    def body(carry, x):
        gae, next_value = carry
        reward, value, done = x
        delta = reward + gamma * next_value * (1.0 - done) - value
        gae = delta + gamma * gae_lambda * (1.0 - done) * gae
        return (gae, value), gae

    _, advantages = jax.lax.scan(body, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True,
                                 unroll=unroll)
    return advantages, advantages + values


# ---- Learning-dynamics metrics, data-collection paper App. B (B.1-B.6), as the torch scripts define them (float32)
def feature_rank(features, threshold=0.99):
    """B.1: smallest k whose top-k singular values of the centred features keep `threshold` of the variance. The
    squared singular values are the eigenvalues of the centred features' Gram matrix (units x units): one eigvalsh
    in place of the SVD of (samples x units) that the torch scripts take (same ranks, tested)."""
    centred = features - features.mean(axis=0, keepdims=True)
    gram = jnp.matmul(centred.T, centred, precision=jax.lax.Precision.HIGHEST)  # no TF32/bf16 passes on a GPU
    energy = jnp.cumsum(jnp.clip(jnp.linalg.eigvalsh(gram)[::-1], 0))  # sv**2, largest first
    return jnp.where(energy[-1] > 0, jnp.searchsorted(energy, threshold * energy[-1]) + 1, 0)


def dormant_percentage(activations, tau):
    """B.2 (Sokar et al., 2023): share of neurons whose E|h_i| / mean_k E|h_k| <= tau, over all hidden layers."""
    dormant, total = 0, 0
    for h in activations:  # (batch, units)
        score = jnp.abs(h).mean(axis=0)
        score = score / (score.mean() + 1e-9)
        dormant += (score <= tau).sum()
        total += score.size
    return 100.0 * dormant / total


def weight_norm(params):
    """B.3: sqrt of the sum of squared Frobenius norms of the weight matrices (flax `kernel`s; biases excluded)."""
    kernels = [x for path, x in jax.tree_util.tree_leaves_with_path(params) if path[-1].key == "kernel"]
    return jnp.sqrt(sum((k**2).sum() for k in kernels))


def grad_kurtosis(grads):
    """B.4 (Garg et al., 2021): kurtosis of log(|g| + 1e-8) over all gradient entries."""
    g = jnp.log(jnp.abs(jnp.concatenate([x.ravel() for x in jax.tree.leaves(grads)])) + 1e-8)
    centred = g - g.mean()
    return (centred**4).mean() / (centred**2).mean() ** 2


def ess_percentage(ratios):
    """B.5 (Martino et al., 2017): 100 * ESS / N with ESS = 1 / sum_i w_i^2, w = r / sum r."""
    w = ratios / ratios.sum()
    return 100.0 / (w**2).sum() / ratios.size


def policy_variance(dist):
    """B.6 for continuous actions: the mean over action dimensions of the variance across states of the mean action
    (the discrete definition averages Var_s[pi(a|s)] over the actions, a finite set a density does not have)."""
    return dist[..., 0, :].var(axis=0).mean()


# ---- Devices: the envs split over every device (jax.shard_map over the axis "d", in `train`); these functions run on
# one device's share. --shuffle per-env makes every random number of an env its own (the same on any device count).
def env_ids(args):
    """The global ids of this device's envs."""
    num_envs = args.num_envs // args.num_devices
    return jax.lax.axis_index("d") * num_envs + jnp.arange(num_envs)


def env_keys(args, rng):
    """A key for each of this device's envs: one split over the envs (--shuffle batch, one device), or folded from each
    env's global id (per-env)."""
    if args.shuffle == "per-env":
        return jax.vmap(jax.random.fold_in, (None, 0))(rng, env_ids(args))
    return jax.random.split(rng, args.num_envs)


def sample_actions(args, rng, dist):
    """An action of each of this device's envs from the policy's mean and log-std (envs, 2, A)."""
    if args.shuffle == "per-env":
        return jax.vmap(sample_action)(env_keys(args, rng), dist)
    return sample_action(rng, dist)


def minibatch_rows(args, rng):
    """(minibatches, rows): the rows of this device's flattened batch (steps x envs) each minibatch of an epoch takes:
    a shuffle of the whole batch (--shuffle batch, PureJaxRL's), or each env's steps dealt out (per-env)."""
    batch_size, minibatch_size = args.batch_size // args.num_devices, args.minibatch_size // args.num_devices
    if args.shuffle == "per-env":
        ids = minibatch_ids(rng, env_ids(args), args.num_steps, args.num_minibatches)
        return jnp.argsort(ids.reshape(-1), stable=True).reshape(args.num_minibatches, minibatch_size)
    return jax.random.permutation(rng, batch_size).reshape(args.num_minibatches, minibatch_size)


def variance(x):
    """jnp.var of x over every device's equal share: the mean of the shares' variances and of their means' squared
    distances to the whole's (on one device, jnp.var itself)."""
    if jax.lax.axis_size("d") == 1:
        return jnp.var(x)
    mean = x.mean()
    return jax.lax.pmean(jnp.var(x) + (mean - jax.lax.pmean(mean, "d")) ** 2, "d")


def sample_states(args, rows, rng):
    """`rows` (a tuple of the flattened batch's arrays) at --dynamics-batch states of the batch, on every device: a random
    sample of the batch (--shuffle batch), or (per-env) the states of lowest random 32-bit score, each drawn from its
    env's own stream, ties broken by the state's place in the whole batch: the same states on any number of devices."""
    size, batch_size = min(args.dynamics_batch, args.batch_size), args.batch_size // args.num_devices
    if args.shuffle != "per-env":
        sample = jax.random.permutation(rng, batch_size)[:size]
        return jax.tree.map(lambda x: x[sample], rows)
    ids = env_ids(args)
    scores = jax.vmap(lambda env: jax.random.bits(jax.random.fold_in(rng, env), (args.num_steps,)), out_axes=1)(ids)
    position = jnp.arange(args.num_steps)[:, None] * args.num_envs + ids  # (step, env) in the whole batch
    scores, position = scores.reshape(-1), position.reshape(-1)  # as the batch is flattened: steps x envs

    def lowest(scores, position, n):
        return jax.lax.sort((scores, position, jnp.arange(len(scores))), num_keys=2)[2][:n]

    local = lowest(scores, position, min(size, batch_size))  # this device's candidates, then every device's
    candidates = jax.lax.all_gather((scores[local], position[local], jax.tree.map(lambda x: x[local], rows)), "d", tiled=True)
    picked = lowest(candidates[0], candidates[1], size)
    return jax.tree.map(lambda x: x[picked], candidates[2])


def minibatch_ids(rng, global_ids, num_steps, num_minibatches):
    """(num_steps, envs) minibatch index of every transition, decided per env so that it does not depend on the devices
    (--shuffle per-env).

    The envs form blocks of B = M / gcd(M, T) consecutive global ids, whose B x T steps fill every one of the M
    minibatches equally (B x T is a multiple of M). Each epoch, the envs of a block are put in a new random order
    (positions p), each env's steps are shuffled (its own permutation), and step j of the env at position p goes to
    minibatch (p T + j + offset) mod M, the offset a random turn of the epoch. So every minibatch gets an equal share
    of every block, and of every device (which holds whole blocks); with M | T every env gives T / M steps to each
    minibatch (B = 1), with T | M its T steps go to T different ones; which envs share a minibatch changes from epoch
    to epoch (as Kinetix's per-epoch env permutation does)."""
    block = num_minibatches // math.gcd(num_minibatches, num_steps)
    k_steps, k_blocks, k_offset = jax.random.split(rng, 3)
    offset = jax.random.randint(k_offset, (), 0, num_minibatches)

    def per_env(env_id):
        steps = jax.random.permutation(jax.random.fold_in(k_steps, env_id), num_steps)
        position = jax.random.permutation(jax.random.fold_in(k_blocks, env_id // block), block)[env_id % block]
        return (position * num_steps + steps + offset) % num_minibatches

    return jax.vmap(per_env, out_axes=1)(global_ids)


# ---- Training, PureJaxRL style: one jitted `update` = rollout + GAE + epochs x minibatches, of one device's envs
class Transition(NamedTuple):
    obs: jnp.ndarray
    action: jnp.ndarray
    logprob: jnp.ndarray
    behav_dist: jnp.ndarray  # the behaviour policy's mean and log-std at obs (..., 2, A), for the exact KL
    value: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray


class RunnerState(NamedTuple):
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: tuple
    prox_params: dict  # EWMA of the actor's params (= the actor's params under standard PPO)
    ewma_weight: jnp.ndarray  # total weight of the EWMA (openai's total_weight; 1 = only the initial copy)
    env_state: tuple
    obs: jnp.ndarray
    episode_return: jnp.ndarray
    episode_length: jnp.ndarray
    rng: jnp.ndarray


def make_train(args, env):
    """(init, update, learning-rate schedule) for these flags, PureJaxRL style. init and update are the functions of one
    device's share of the envs, run under `jax.shard_map` over the devices' axis "d" (`train`): the parameters are the
    same on every device, the minibatches' gradients and statistics averaged over them."""
    actor = GaussianActor(args.hidden_size, args.num_layers, env.action_size, args.activation)
    critic = MLP(args.hidden_size, args.num_layers, 1, 1.0, args.activation)
    unroll = max(args.unroll, 1)  # (lax.scan would read 0, --unroll's "by the device", as "the whole loop")
    ewma = args.ewma_com is not None
    constants = hyperparameters(args)  # an update called without them: the flags as Python constants

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

    def policy(actor_params, obs):
        """The policy's mean and log-std at obs, (..., 2, A)."""
        return actor.apply(actor_params, obs)

    def value_fn(critic_params, obs):
        return critic.apply(critic_params, obs)[..., 0]

    num_envs, batch_size = args.num_envs // args.num_devices, args.batch_size // args.num_devices  # this device's share

    def init(rng):
        rng, k_actor, k_critic, _, _, k_reset = jax.random.split(rng, 6)  # the Kinetix/gymnax script's keys: a seed's same draws
        dummy = jnp.zeros((1, env.obs_dim))
        params = {"actor": actor.init(k_actor, dummy), "critic": critic.init(k_critic, dummy)}
        obs, env_state = env.reset(env_keys(args, k_reset))
        env_state = jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), env_state)  # drop weak types: one compile of update
        zeros = jnp.zeros(num_envs)
        return RunnerState(params, tx.init(params), params["actor"], jnp.ones(()), env_state, obs, zeros, zeros, rng)

    def loss_fn(params, prox_logprob, mb, advantages, targets, h):
        dist = policy(params["actor"], mb.obs)
        newlogprob = log_prob(dist, mb.action)
        pg_loss, clipfrac, imp_samp_clipfrac = decoupled_policy_loss(newlogprob, prox_logprob, mb.logprob, advantages,
                                                                     h["clip_coef"], args.imp_samp_max)
        newvalue = value_fn(params["critic"], mb.obs)
        if args.clip_vloss:
            v_clipped = mb.value + jnp.clip(newvalue - mb.value, -h["vf_clip_coef"], h["vf_clip_coef"])
            v_loss = 0.5 * jnp.maximum((newvalue - targets) ** 2, (v_clipped - targets) ** 2).mean()
        else:
            v_loss = 0.5 * ((newvalue - targets) ** 2).mean()
        entropy_loss = entropy(dist).mean()
        loss = pg_loss - h["ent_coef"] * entropy_loss + v_loss * h["vf_coef"]
        return loss, (pg_loss, v_loss, entropy_loss, clipfrac, imp_samp_clipfrac)

    def minibatch_grads(params, prox_params, minibatch, h):
        """(gradient of the loss on one minibatch, the loss's statistics), each averaged over the devices' equal shares of
        the minibatch; the advantages are normalised here, by the whole minibatch's statistics."""
        mb, mb_advantages, mb_targets = minibatch
        if args.norm_adv:
            mean = jax.lax.pmean(mb_advantages.mean(), "d")
            mb_advantages = (mb_advantages - mean) / (jnp.sqrt(variance(mb_advantages)) + 1e-8)
        prox_logprob = log_prob(policy(prox_params, mb.obs), mb.action) if ewma else mb.logprob
        (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, prox_logprob, mb, mb_advantages, mb_targets, h)
        return jax.lax.pmean((grads, aux), "d")

    def dynamics_metrics(params, first_grads, sample):
        """App. B's metrics after the update on a sample of --dynamics-batch states of the batch (the torch scripts'
        `dynamics_metrics`), and the kurtosis of the first minibatch's raw gradient (before clipping)."""
        obs, action, behav_logprob = sample
        dist, actor_hidden = actor.apply(params["actor"], obs, True)
        _, critic_hidden = critic.apply(params["critic"], obs, True)
        return {
            "dynamics/weight_norm": weight_norm(params),
            "dynamics/feature_rank": feature_rank(actor_hidden[-1]).astype(jnp.float32),
            "dynamics/dormant_pct": dormant_percentage(actor_hidden, args.dormant_tau),
            "dynamics/feature_rank_critic": feature_rank(critic_hidden[-1]).astype(jnp.float32),
            "dynamics/dormant_pct_critic": dormant_percentage(critic_hidden, args.dormant_tau),
            "dynamics/policy_variance": policy_variance(dist),
            "dynamics/ess_pct": ess_percentage(jnp.exp(log_prob(dist, action) - behav_logprob)),
            "dynamics/grad_kurtosis": grad_kurtosis(first_grads),
        }

    @jax.jit  # jitted so that its trace is cached: `update` asks for its shapes, then calls it
    def measured(start_params, prox_params, params, batch, first_epoch_key, k_epochs, h):
        """The dynamics/ metrics of an iteration."""
        # the first minibatch of the first epoch, as update_epoch draws it, at the parameters it saw: its raw gradient
        first = minibatch_rows(args, first_epoch_key)[0]
        first_grads, _ = minibatch_grads(start_params, prox_params, jax.tree.map(lambda x: x[first], batch), h)
        return dynamics_metrics(params, first_grads, sample_states(args, (batch[0].obs, batch[0].action, batch[0].logprob),
                                                                    jax.random.fold_in(k_epochs, args.update_epochs)))

    def update(runner, measure=False, hyper=None):
        """One iteration: rollout, GAE, epochs x minibatches; `measure` (a traced bool) adds the dynamics/ metrics.
        `hyper`: hyperparameters(args) as arrays, so that other values of those flags run this same program (else
        they are compiled in as constants)."""
        h = constants if hyper is None else hyper
        tx = optimizer(h)
        start_params = runner.params

        def env_step(runner, _):
            rng, k_action, k_env, _ = jax.random.split(runner.rng, 4)
            dist = policy(runner.params["actor"], runner.obs)
            action = sample_actions(args, k_action, dist)
            value = value_fn(runner.params["critic"], runner.obs)
            obs, env_state, reward, done, score = env.step(env_keys(args, k_env), runner.env_state, action)
            episode_return = runner.episode_return + score
            episode_length = runner.episode_length + 1
            stats = (done, episode_return * done, episode_length * done)
            transition = Transition(runner.obs, action, log_prob(dist, action), dist, value, reward, done.astype(jnp.float32))
            runner = runner._replace(env_state=env_state, obs=obs, rng=rng,
                                     episode_return=episode_return * (1 - done), episode_length=episode_length * (1 - done))
            return runner, (transition, stats)

        runner, (traj, stats) = jax.lax.scan(env_step, runner, None, args.num_steps, unroll=unroll)
        last_value = value_fn(runner.params["critic"], runner.obs)
        advantages, targets = compute_gae(traj.reward, traj.value, traj.done, last_value, h["gamma"], h["gae_lambda"],
                                          unroll)

        def update_minibatch(carry, minibatch):
            params, opt_state, prox_params, ewma_weight = carry
            grads, aux = minibatch_grads(params, prox_params, minibatch, h)
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            if ewma:
                prox_params, ewma_weight = ewma_update(prox_params, params["actor"], h["ewma_beta"], ewma_weight,
                                                       args.ewma_bias_correction)
            else:
                prox_params = params["actor"]
            return (params, opt_state, prox_params, ewma_weight), (*aux, optax.global_norm(grads),
                                                                   optax.global_norm(grads["actor"]))

        # flattened once; the behaviour log-probs only feed the KL pass below, so they are not shuffled
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]),
                             (traj._replace(behav_dist=None), advantages, targets))

        def update_epoch(carry, rng):
            # each minibatch gathers its rows of the batch where it is used: no shuffled copy of the whole batch
            return jax.lax.scan(lambda carry, rows: update_minibatch(carry, jax.tree.map(lambda x: x[rows], batch)),
                                carry, minibatch_rows(args, rng), unroll=unroll)

        rng, k_epochs = jax.random.split(runner.rng)
        epoch_keys = jax.random.split(k_epochs, args.update_epochs)
        (params, opt_state, prox_params, ewma_weight), losses = jax.lax.scan(
            update_epoch, (runner.params, runner.opt_state, runner.prox_params, runner.ewma_weight), epoch_keys
        )

        operands = (start_params, runner.prox_params, params, batch, epoch_keys[0], k_epochs, h)
        shapes = jax.eval_shape(measured, *operands)  # traces `measured` once: the cond below reuses the trace
        dynamics = jax.lax.cond(measure, measured, lambda *_: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes),
                                *operands)
        runner = runner._replace(params=params, opt_state=opt_state, prox_params=prox_params, ewma_weight=ewma_weight, rng=rng)

        # KL(behaviour || updated policy) on the whole batch after the last epoch, exact (diagonal Gaussians);
        # DDR = transitions per iteration / that KL (stagnation §4.4). In chunks of at most KL_CHUNK states (a chunk a
        # minibatch or more: one forward pass for a small batch, where each extra pass costs kernel launches).
        def batch_kls(chunk):
            obs, behav_dist = chunk
            new_dist = policy(params["actor"], obs)
            prox_kl = kl_divergence(policy(prox_params, obs), new_dist).sum() if ewma else 0.0
            return kl_divergence(behav_dist, new_dist).sum(), prox_kl

        num_chunks = next(c for c in range(1, args.num_minibatches + 1)
                          if args.num_minibatches % c == 0 and (batch_size // c <= KL_CHUNK or c == args.num_minibatches))
        chunks = jax.tree.map(lambda x: x.reshape((num_chunks, batch_size // num_chunks) + x.shape[2:]),
                              (traj.obs, traj.behav_dist))
        kl_sums, prox_kl_sums = jax.lax.map(batch_kls, chunks)  # (a scan unrolled here crashed XLA:GPU at 524,288 envs)
        kl_sum, prox_kl_sum = jax.lax.psum((kl_sums.sum(), prox_kl_sums.sum()), "d")  # over every device's share
        pg_loss, v_loss, entropy_loss, clipfrac, imp_samp_clipfrac, grad_norm, grad_norm_actor = jax.tree.map(jnp.mean, losses)
        diff = jax.tree.map(lambda a, b: a - b, params, start_params)
        done, ret_sum, len_sum = jax.lax.psum(jax.tree.map(jnp.sum, stats), "d")
        metrics = {
            "losses/policy_loss": pg_loss,
            "losses/value_loss": v_loss,
            "losses/entropy": entropy_loss,
            "losses/clipfrac": clipfrac,
            "losses/imp_samp_clipfrac": imp_samp_clipfrac,
            "losses/grad_norm": grad_norm,
            "losses/grad_norm_actor": grad_norm_actor,
            "losses/approx_kl": kl_sum / args.batch_size,
            "charts/update_norm": optax.global_norm(diff),
            "charts/update_norm_actor": optax.global_norm(diff["actor"]),
            "losses/explained_variance": 1.0 - variance(targets - traj.value) / variance(targets),
            "episodes": done,
            "episode_return_sum": ret_sum,
            "episode_length_sum": len_sum,
        }
        if ewma:
            metrics["losses/prox_kl"] = prox_kl_sum / args.batch_size
        return runner, {**metrics, **dynamics}

    return init, fuse(jax.jit(update)), schedule


# ---- The host side: for each call, train its iterations of every seed, log them (the plumbing: Run, below)
def logged_metrics(args, metrics):
    """One iteration's {tag: value} of one run as logged: the episodes that ended, as means; the DDR (§4.4)."""
    episodes, ret_sum, len_sum = (metrics.pop(k) for k in ("episodes", "episode_return_sum", "episode_length_sum"))
    if episodes:
        metrics["charts/episodic_return"] = ret_sum / episodes
        metrics["charts/episodic_length"] = len_sum / episodes
    metrics["charts/ddr"] = args.batch_size / max(metrics["losses/approx_kl"], 1e-12)
    return metrics


def describe(args, seeds, start_iteration):
    """The run in a line (two with PPO-EWMA: its COM against PPO's own lag)."""
    mode = "PPO" if args.ewma_com is None else f"PPO-EWMA (COM {args.ewma_com:g}, beta {ewma_beta(args.ewma_com):.4f})"
    print(f"{mode}: batch {args.batch_size} = {args.num_envs} envs x {args.num_steps} steps, {args.num_iterations} iterations, "
          f"{args.num_minibatches} minibatches of {args.minibatch_size}, lr {args.learning_rate:g} (recipe "
          f"{args.scaling_recipe}), {args.update_epochs} epochs, clip {args.clip_coef:g}"
          + (f"; seeds {seeds[0]}..{seeds[-1]} in one program" if args.num_seeds > 1 else "")
          + (f"; {args.num_devices} devices in {jax.process_count()} process(es), shuffle {args.shuffle}" if args.num_devices > 1
             else f"; shuffle {args.shuffle}" if args.shuffle != "batch" else "")
          + (f"; resuming {args.resume} after iteration {start_iteration}" if args.resume else ""))
    if args.ewma_com is not None:
        steps = args.update_epochs * args.num_minibatches
        print(f"PPO-EWMA: COM {args.ewma_com:g}; PPO's proximal policy lags (steps - 1) / 2 = {(steps - 1) / 2:g} of the "
              f"{steps} minibatch steps of an iteration on average (COM / lag = {args.ewma_com / max((steps - 1) / 2, 0.5):.2g}); "
              "far below it, watch losses/approx_kl and losses/entropy")


def train(args, run):
    """PureJaxRL's train(rng), one call at a time: each seed's state, then for each call its iterations, logged. The
    envs are split over every device (of every process): the arrays of the envs' state by their env axis, the rest
    (parameters, optimiser, EWMA, keys, the normalisation's statistics) the same on each."""
    env = make_env(args)
    init, update, schedule = make_train(args, env)
    if jax.device_count() != args.num_devices:  # each device's share was resolved for another count
        raise BadFlag(f"the flags were resolved for {args.num_devices} devices; this process sees {jax.device_count()}")
    mesh = Mesh(np.array(jax.devices()), ("d",))
    envs = P(None, "d")  # (seeds, envs, ...): each device its share of the envs
    runner_specs = RunnerState(P(), P(), P(), P(), BraxState(envs, P(), P(), envs), envs, envs, envs, P())
    shard = partial(jax.shard_map, mesh=mesh, check_vma=False)

    def place(tree, specs):
        """Host arrays (or shapes) -> global arrays (or shapes) laid out over the devices as `specs` (a prefix of tree) says."""
        def put(spec, sub):
            sharding = NamedSharding(mesh, spec)
            if isinstance(jax.tree.leaves(sub)[0], jax.ShapeDtypeStruct):
                return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), sub)
            return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), sub)
        return jax.tree.map(put, specs, tree, is_leaf=lambda x: isinstance(x, P))

    # --num-seeds: each seed's keys as a lone run makes them; every array below has a leading seed axis
    seeds = [args.seed + i for i in range(args.num_seeds)]
    # (seeds, [rng, levels, init]): the Kinetix/gymnax script's split, whose second key samples its levels
    k_init = np.stack([jax.random.split(jax.random.PRNGKey(seed), 3) for seed in seeds])[:, 2]
    start = jax.jit(shard(jax.vmap(init), in_specs=P(), out_specs=runner_specs))
    shape = place(jax.eval_shape(start, k_init), runner_specs)
    if args.resume is not None:
        runner = place(run.restore_seeds(shape), runner_specs)
    train_call, tags = over_seeds(update, args.num_seeds, over=partial(
        shard, in_specs=(runner_specs, P(), P(), P()), out_specs=(runner_specs, P())))
    hyper = place(hyperparameters(args), P())  # traced: other values of these flags run the same program
    slots = place(jax.ShapeDtypeStruct((args.fuse_iterations,), jnp.bool_), P())
    (train_call,) = run.compile(lambda f=train_call: f.lower(shape, slots, slots, hyper).compile())  # on another thread
    stamp = int(time.time())
    run.start([f"{args.env_id}__{args.exp_name}__{seed}__{stamp}" for seed in seeds], schedule)
    if run.lead:
        describe(args, seeds, run.start_iteration)
    if args.resume is None:
        runner = start(place(k_init, P()))
    (train_call,) = run.begin(train_call)
    for first, last, active in run.calls():
        numbers = np.arange(first, first + args.fuse_iterations)
        measure = active & (args.dynamics_every > 0) & ((numbers % max(args.dynamics_every, 1) == 0) | (numbers == 1))
        runner, scalars = train_call(runner, *place((measure, active), P()), hyper)
        run.log(first, last, partial(call_metrics, scalars, tags, measure, active))
        run.checkpoint(lambda: run.seeds_state(runner))
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
