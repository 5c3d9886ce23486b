"""ppo_ewma_brax.py (Brax continuous control in place of the papers' Isaac Gym): the Gaussian policy's log-probability,
entropy, exact KL and policy variance against their closed forms (scipy and numpy, on random inputs and edge cases),
the running normalisation against PureJaxRL's NormalizeVec* wrappers ported line by line, PureJaxRL's defaults, bad
flags, and real Brax runs from a lone copy: every tag logged, DDR = batch / exact KL, no update = no KL, exact resume
with the normalisation statistics, and learning on inverted_pendulum; over several forced host devices, the pooled
normalisation against PureJaxRL's on the whole batch and a run on 2 devices against one on 1."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from benchmark.common import ROOT
from helpers import (FAST_COMPILE, FAST_COMPILE_OPTIONS, assert_bad_input, assert_refused, finish, load_script,
                     on_one_device, read_values, run_copy, run_dirs, shared_runs, start_copy,
                     stop_one_of_two_tasks_then_resume)

SCRIPT = "ppo_ewma_brax"
# its runs compile at XLA's optimisation level 0 (conftest.py), but the one that learns (default_compile)
pytestmark = pytest.mark.usefixtures("fast_compile")
# Brax's Ant (27 numbers observed, 8 motors), PureJaxRL's recipe at 16 envs x 10 steps, 4 minibatches; 4 iterations
TINY_ANT = ["--env-id", "ant", "--num-envs", "16", "--num-minibatches", "4", "--total-timesteps", "640",
            "--dynamics-every", "2", "--dynamics-batch", "64"]
LOGGED = ["losses/approx_kl", "charts/ddr", "losses/prox_kl", "losses/entropy", "losses/policy_loss", "losses/value_loss",
          "losses/clipfrac", "losses/grad_norm", "charts/update_norm", "charts/episodic_return", "charts/SPS",
          "dynamics/policy_variance", "dynamics/ess_pct", "dynamics/feature_rank", "dynamics/dormant_pct",
          "dynamics/weight_norm", "dynamics/grad_kurtosis"]


@pytest.fixture(scope="module")
def ewma():
    return load_script(SCRIPT)


def random_gaussians(seed, n=32, dims=6, spread=1.0):
    """Distributions (n, 2, dims) as the script stores them: the mean, then the log-std."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.normal(0, 2 * spread, (n, dims)), rng.normal(0, spread, (n, dims))], axis=1)


def closed_form_kl(p, q):
    """KL(p || q) of diagonal Gaussians, summed over dimensions: log(s_q/s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2."""
    mp, sp = p[:, 0].astype(np.float64), np.exp(p[:, 1].astype(np.float64))
    mq, sq = q[:, 0].astype(np.float64), np.exp(q[:, 1].astype(np.float64))
    return (np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5).sum(-1)


# ---- the Gaussian policy against closed forms ---------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_log_prob_entropy_and_kl_are_the_closed_forms_on_random_inputs(ewma, seed):
    p, q = random_gaussians(seed), random_gaussians(seed + 100)
    action = np.random.default_rng(seed).normal(0, 3, p[:, 0].shape)  # many outside [-1, 1]: the unclipped sample
    expected_logp = stats.norm.logpdf(action, loc=p[:, 0], scale=np.exp(p[:, 1])).sum(-1)
    np.testing.assert_allclose(ewma.log_prob(jnp.asarray(p), jnp.asarray(action)), expected_logp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ewma.entropy(jnp.asarray(p)), stats.norm.entropy(scale=np.exp(p[:, 1])).sum(-1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ewma.kl_divergence(jnp.asarray(p), jnp.asarray(q)), closed_form_kl(p, q), rtol=1e-4, atol=1e-5)


def test_kl_is_the_expected_log_ratio_of_samples(ewma):
    """The closed form is KL itself: E_p[log p(a) - log q(a)] over 400k samples of p, by the script's own sampler."""
    p, q = random_gaussians(7, n=1, dims=3, spread=0.5), random_gaussians(8, n=1, dims=3, spread=0.5)
    actions = ewma.sample_action(jax.random.PRNGKey(0), jnp.broadcast_to(jnp.asarray(p[0]), (400_000, 2, 3)))
    log_ratio = ewma.log_prob(jnp.asarray(p[0]), actions) - ewma.log_prob(jnp.asarray(q[0]), actions)
    kl = float(ewma.kl_divergence(jnp.asarray(p), jnp.asarray(q))[0])
    assert abs(float(log_ratio.mean()) - kl) < 5 * float(log_ratio.std()) / np.sqrt(400_000) + 1e-3
    np.testing.assert_allclose(np.asarray(actions).mean(0), p[0, 0], atol=0.02)
    np.testing.assert_allclose(np.asarray(actions).std(0), np.exp(p[0, 1]), rtol=0.01)


@pytest.mark.parametrize("case", ["same", "std_far_apart", "std_far_apart_reversed", "one_sample_one_dim", "mean_far_apart"])
def test_kl_and_log_prob_edge_cases(ewma, case):
    p = random_gaussians(3, n=5, dims=4)
    if case == "same":
        q = p.copy()
    elif case.startswith("std_far_apart"):  # std ratio e^8: a narrow p against a wide q, and the reverse
        q = p.copy()
        p[:, 1], q[:, 1] = (-5.0, 3.0) if case == "std_far_apart" else (3.0, -5.0)
    elif case == "one_sample_one_dim":
        p, q = p[:1, :, :1], random_gaussians(4, n=1, dims=1)
    else:
        q = p.copy()
        q[:, 0] += 50.0
    kl, expected = np.asarray(ewma.kl_divergence(jnp.asarray(p), jnp.asarray(q))), closed_form_kl(p, q)
    np.testing.assert_allclose(kl, expected, rtol=1e-4, atol=1e-6)
    assert np.all(kl >= 0) and (case != "same" or np.all(kl == 0))
    action = p[:, 0] + 10 * np.exp(p[:, 1])  # ten standard deviations out
    np.testing.assert_allclose(ewma.log_prob(jnp.asarray(p), jnp.asarray(action)),
                               stats.norm.logpdf(action, p[:, 0], np.exp(p[:, 1])).sum(-1), rtol=1e-5)


def test_policy_variance_is_the_variance_of_the_mean_action_across_states(ewma):
    p = random_gaussians(5, n=64, dims=3)
    np.testing.assert_allclose(ewma.policy_variance(jnp.asarray(p)), p[:, 0].var(axis=0).mean(), rtol=1e-5)
    p[:, 1] = np.random.default_rng(0).normal(size=p[:, 1].shape)  # the std plays no part
    np.testing.assert_allclose(ewma.policy_variance(jnp.asarray(p)), p[:, 0].var(axis=0).mean(), rtol=1e-5)


def test_actor_starts_at_purejaxrls_gaussian(ewma):
    """PureJaxRL's actor: log-std 0 (std 1) for every state, mean near 0 (an orthogonal output layer of scale 0.01)."""
    actor = ewma.GaussianActor(64, 2, 5)
    obs = jax.random.normal(jax.random.PRNGKey(1), (100, 7))
    params = actor.init(jax.random.PRNGKey(0), obs)
    dist, hidden = actor.apply(params, obs, True)
    assert dist.shape == (100, 2, 5) and len(hidden) == 2 and hidden[-1].shape == (100, 64)
    assert np.all(np.asarray(dist[:, 1]) == 0.0) and np.abs(np.asarray(dist[:, 0])).max() < 0.1
    assert params["params"]["log_std"].shape == (5,)


# ---- running normalisation: PureJaxRL's NormalizeVecObservation / NormalizeVecReward -------------------
def purejaxrl_update(mean, var, count, batch):
    """The statistics update both PureJaxRL wrappers repeat (wrappers.py), line by line in numpy."""
    batch_mean = np.mean(batch, axis=0)
    batch_var = np.var(batch, axis=0)
    batch_count = batch.shape[0]
    delta = batch_mean - mean
    tot_count = count + batch_count
    new_mean = mean + delta * batch_count / tot_count
    m_a = var * count
    m_b = batch_var * batch_count
    M2 = m_a + m_b + np.square(delta) * count * batch_count / tot_count
    new_var = M2 / tot_count
    new_count = tot_count
    return new_mean, new_var, new_count


@pytest.mark.parametrize("batch", [1, 7, 512])
def test_running_stats_are_purejaxrls_normalize_wrappers(ewma, batch):
    rng = np.random.default_rng(batch)
    stats_, mean, var, count = ewma.RunningStats.start(3), np.zeros(3), np.ones(3), 1e-4
    seen, update = [], on_one_device(lambda stats, batch: stats.update(batch))
    for step in range(20):
        x = rng.normal(step, 1 + step, (batch, 3)).astype(np.float32)  # drifting, as observations do
        seen.append(x)
        stats_ = update(stats_, jnp.asarray(x))
        mean, var, count = purejaxrl_update(mean, var, count, x)
        np.testing.assert_allclose(stats_.mean, mean, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(stats_.var, var, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(stats_.count, count, rtol=1e-6)
    everything = np.concatenate(seen)  # and they are the mean and variance of all values so far
    np.testing.assert_allclose(stats_.mean, everything.mean(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(stats_.var, everything.var(0), rtol=1e-3)


def test_the_brax_env_steps_are_purejaxrls_wrappers(ewma):
    """The script's Brax env against PureJaxRL's ClipAction, NormalizeVecObservation and NormalizeVecReward ported to
    numpy and fed the raw Brax observations, rewards and dones: 4 inverted pendulums for 60 steps of wide random
    actions (episodes end and restart in between)."""
    gamma = 0.9
    args = ewma.resolve_args(ewma.RunArgs(env_id="inverted_pendulum", num_envs=4, num_minibatches=4, gamma=gamma))
    env = ewma.make_env(args)
    reset, step = (on_one_device(f, compiler_options=FAST_COMPILE_OPTIONS) for f in (env.reset, env.step))
    obs, state = reset(jax.random.split(jax.random.PRNGKey(0), 4))
    raw = state.env.obs
    mean, var, count = purejaxrl_update(np.zeros(raw.shape[1]), np.ones(raw.shape[1]), 1e-4, np.asarray(raw))
    np.testing.assert_allclose(obs, (raw - mean) / np.sqrt(var + 1e-8), rtol=1e-4, atol=1e-4)
    ret_mean, ret_var, ret_count, return_val = 0.0, 1.0, 1e-4, np.zeros(4)
    ends = 0
    for t in range(60):
        action = jax.random.uniform(jax.random.PRNGKey(t), (4, 1), minval=-3.0, maxval=3.0)
        obs, state, reward, done, score = step(None, state, action)
        raw_obs, raw_reward, raw_done = (np.asarray(x) for x in (state.env.obs, state.env.reward, state.env.done))
        mean, var, count = purejaxrl_update(mean, var, count, raw_obs)
        np.testing.assert_allclose(obs, (raw_obs - mean) / np.sqrt(var + 1e-8), rtol=1e-3, atol=1e-3)
        return_val = return_val * gamma * (1 - raw_done) + raw_reward
        ret_mean, ret_var, ret_count = purejaxrl_update(ret_mean, ret_var, ret_count, return_val)
        np.testing.assert_allclose(reward, raw_reward / np.sqrt(ret_var + 1e-8), rtol=1e-4)
        np.testing.assert_array_equal(score, raw_reward)  # the logged return is the environment's own
        np.testing.assert_array_equal(done, raw_done > 0.5)
        ends += int(raw_done.sum())
    assert ends > 0  # the auto-reset path was taken


@pytest.mark.parametrize("fresh", [False, True])
def test_an_ended_episode_restarts_from_the_envs_first_state_or_a_fresh_random_one(ewma, fresh):
    """Brax's auto-reset puts an env back in its own first state (N_envs start states in all); --brax-fresh-starts
    draws a new random one, as Isaac Gym re-randomises at every reset. Both inverted pendulums are put at their
    episode's last step, so the next step ends (truncates) both episodes."""
    args = ewma.resolve_args(ewma.RunArgs(env_id="inverted_pendulum", num_envs=2, num_minibatches=2, norm_obs=False,
                                       brax_fresh_starts=fresh))
    env = ewma.make_env(args)
    reset, step = (on_one_device(f, compiler_options=FAST_COMPILE_OPTIONS) for f in (env.reset, env.step))
    first, state = reset(jax.random.split(jax.random.PRNGKey(0), 2))
    steps = jnp.full(2, ewma.BRAX_EPISODE_LENGTH - 1.0)
    state = state._replace(env=state.env.replace(info={**state.env.info, "steps": steps}))
    obs, state, _, done, _ = step(jax.random.split(jax.random.PRNGKey(1), 2), state, jnp.zeros((2, 1)))
    assert done.all()
    if fresh:
        assert np.abs(np.asarray(obs) - np.asarray(first)).min() > 1e-4  # every number new: a new random start
        np.testing.assert_array_equal(obs, state.env.obs)
    else:
        np.testing.assert_allclose(obs, first, rtol=0, atol=0)


# ---- flags -------------------------------------------------------------------------------------------
def test_defaults_are_purejaxrls(ewma):
    args = ewma.resolve_args(ewma.RunArgs(env_id="ant"))
    assert (args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs) == (2048, 10, 32, 4)
    assert (args.gamma, args.gae_lambda, args.ent_coef, args.learning_rate, args.clip_coef) == (0.99, 0.95, 0.0, 3e-4, 0.2)
    assert (args.num_layers, args.hidden_size, args.total_timesteps, args.anneal_lr) == (2, 256, 50_000_000, False)
    assert (args.brax_backend, args.norm_obs, args.norm_reward, args.max_grad_norm) == ("positional", True, True, 0.5)
    assert ewma.RunArgs().env_id == "hopper"  # PureJaxRL's ENV_NAME


@pytest.mark.parametrize("flags, message", [
    (["--env-id", "ant", "--brax-backend", "physx"], "--brax-backend must be one of positional, generalized, spring, mjx"),
    (["--env-id", "Ant-v4"], "--env-id must be a Brax environment (ant, "),
    (["--env-id", "CartPole-v1"], "--env-id must be a Brax environment"),
    (["--env-id", "ant", "--num-steps", "0"], "--num-steps must be positive"),
    (["--env-id", "ant", "--gamma", "1.5"], "--gamma must lie in [0, 1]"),
    (["--env-id", "ant", "--ent-coef", "nan"], "--ent-coef must be a finite number"),
    (["--env-id", "ant", "--num-envs", "7"], "--num-minibatches 32 must be positive and divide the batch 70"),
    (["--env-id", "swimmer"], "--brax-backend positional is not one swimmer has"),  # swimmer: generalized only
])
def test_bad_flags_are_refused_by_the_flag_checks(ewma, flags, message):
    assert_refused(ewma, flags, message)


def test_bad_input_exits_2_with_one_line_before_compute(tmp_path):
    """As a user meets it: exit status 2, one line, nothing written. Halfcheetah's model makes MuJoCo warn, which it
    writes to ./MUJOCO_LOG.TXT unless told otherwise; MJX prints "Failed to import warp" without the optional package."""
    cache = tmp_path / "cache" / "jax"  # the compilation cache it would have used: not made for a refused run
    result = run_copy(SCRIPT, ["--env-id", "halfcheetah", "--num-envs", "7"], tmp_path,
                      extra_env={"JAX_COMPILATION_CACHE_DIR": str(cache)})
    assert_bad_input(result, tmp_path, "--num-minibatches 32 must be positive and divide the batch 70")
    assert "Failed to import" not in result.stdout
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists() and not (tmp_path / "cache").exists()


# ---- real Brax runs ----------------------------------------------------------------------------------
@shared_runs(minutes=2)
def ant_run(tmp_path_factory, fast_compile):
    """PPO-EWMA on Brax's Ant from a lone copy: 4 iterations of 16 envs x 10 steps, a checkpoint every 2."""
    workdir = tmp_path_factory.mktemp("ant")
    result = run_copy(SCRIPT, TINY_ANT + ["--ewma-com", "4", "--save-every", "2"], workdir, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # a quiet start: Brax's notice that it is unmaintained (a UserWarning at each env's construction) filtered out
    assert "not actively being maintained" not in result.stderr, result.stderr[-3000:]
    return workdir


def test_ant_logs_every_tag_and_ddr_is_the_batch_over_the_exact_kl(ant_run):
    scalars, texts = read_values(run_dirs(ant_run)[0])
    missing = [tag for tag in LOGGED if tag not in scalars]
    assert not missing, missing
    kl, ddr = np.array(scalars["losses/approx_kl"]), np.array(scalars["charts/ddr"])
    assert len(kl) == 4 and np.all(kl > 0) and np.allclose(ddr, 160 / kl, rtol=1e-5)
    # entropy of 8 dimensions at std ~1 (the log-std starts at 0 and moves little in 4 x 16 minibatch steps)
    np.testing.assert_allclose(scalars["losses/entropy"][0], 8 * 0.5 * (1 + np.log(2 * np.pi)), atol=0.1)
    assert all(0 < v <= 100 for v in scalars["dynamics/ess_pct"]) and all(v > 0 for v in scalars["dynamics/policy_variance"])
    assert "brax_backend" in texts["hyperparameters/text_summary"][0]
    assert not (run_dirs(ant_run)[0] / "coverage.bin").exists()  # the coverage metric is the torch scripts' (Atari, Procgen)


def test_ant_resumes_exactly_with_its_normalisation_statistics(ant_run, tmp_path):
    checkpoint = run_dirs(ant_run)[0] / "checkpoints" / "iter_2.npz"
    result = run_copy(SCRIPT, TINY_ANT + ["--ewma-com", "4", "--resume", str(checkpoint)], tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    original, resumed = read_values(run_dirs(ant_run)[0])[0], read_values(run_dirs(tmp_path)[0])[0]
    for tag in ["losses/approx_kl", "losses/prox_kl", "losses/value_loss", "losses/policy_loss", "charts/update_norm"]:
        np.testing.assert_allclose(resumed[tag], original[tag][2:], rtol=1e-5, err_msg=tag)



def test_the_checkpoint_holds_the_normalisation_statistics(ewma, ant_run):
    """What the resume above rests on: the statistics of every observation and return so far are in the checkpoint
    (16 envs x (1 reset + 2 x 10 steps), from a count of 1e-4), not fresh ones."""
    args = ewma.resolve_args(ewma.RunArgs(env_id="ant", num_envs=16, num_minibatches=4, total_timesteps=640))
    env = ewma.make_env(args)
    init = ewma.make_train(args, env)[0]
    target = jax.eval_shape(lambda: on_one_device(init)(jax.random.PRNGKey(0)))
    runner, iteration, _, _ = ewma.restore_checkpoint(run_dirs(ant_run)[0] / "checkpoints" / "iter_2.npz", target)
    obs_stats, return_stats = runner.env_state.obs_stats, runner.env_state.return_stats
    assert iteration == 2 and obs_stats.mean.shape == (27,)
    np.testing.assert_allclose(obs_stats.count, 1e-4 + 16 * 21, rtol=1e-6)
    np.testing.assert_allclose(return_stats.count, 1e-4 + 16 * 20, rtol=1e-6)
    assert np.abs(np.asarray(obs_stats.mean)).max() > 0.01 and not np.allclose(obs_stats.var, 1.0, atol=1e-2)


def test_an_update_that_does_not_move_the_policy_has_zero_kl(ewma):
    """The behaviour distribution stored with each transition is the policy at the (normalised) observation it was
    trained on: at a learning rate of 1e-30 the update moves the zero-initialised biases and log-std by ~1e-30 and
    nothing else, and KL, clip fraction and the ratio are those of an unchanged policy in float32."""
    args = ewma.resolve_args(ewma.RunArgs(env_id="inverted_pendulum", num_envs=4, num_steps=8, num_minibatches=2,
                                       total_timesteps=32, learning_rate=1e-30, dynamics_batch=32))
    env = ewma.make_env(args)
    init, update, _ = ewma.make_train(args, env)
    init, update = (on_one_device(f, compiler_options=FAST_COMPILE_OPTIONS) for f in (init, update))
    runner = init(jax.random.PRNGKey(1))
    _, metrics = update(runner, jnp.asarray([True]), jnp.asarray([True]))
    assert float(metrics["losses/approx_kl"][0]) == 0.0 and float(metrics["losses/clipfrac"][0]) == 0.0
    np.testing.assert_allclose(metrics["dynamics/ess_pct"][0], 100.0, rtol=1e-5)
    np.testing.assert_allclose(metrics["losses/entropy"][0], 0.5 * (1 + np.log(2 * np.pi)), rtol=1e-5)  # 1 dimension


@pytest.mark.usefixtures("default_compile")
def test_inverted_pendulum_learns(tmp_path):
    """PureJaxRL's recipe at 64 envs: the pole is held for most of its 1000 steps within 200k steps."""
    result = run_copy(SCRIPT, ["--env-id", "inverted_pendulum", "--num-envs", "64", "--total-timesteps", "200000",
                               "--dynamics-every", "0"], tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = read_values(run_dirs(tmp_path)[0])[0]["charts/episodic_return"]
    assert max(returns[-20:]) >= 500, returns[-20:]


# ---- several devices (forced CPU host devices), as tests/test_ppo_ewma_jax_devices.py checks the gymnax script --------
STATS_ON_DEVICES = """
import sys, jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
sys.path.insert(0, sys.argv[1])
from benchmark.common import load_script
RunningStats = load_script("ppo_ewma_brax").RunningStats
rng = np.random.default_rng(0)
for n in (1, 2, 4):
    mesh = Mesh(np.array(jax.devices()[:n]), ("d",))
    update = jax.jit(jax.shard_map(lambda stats, batch: stats.update(batch), mesh=mesh, in_specs=(P(), P("d")),
                                   out_specs=P(), check_vma=False))
    for envs in (4, 64):  # 4 at 4 devices: one env each (a share's variance 0)
        stats = RunningStats.start(3)
        collective = int("psum" in str(jax.make_jaxpr(update)(stats, np.ones((envs, 3), np.float32))))
        for step in range(5):  # sorted over the envs: the shares' means far apart
            batch = np.sort(rng.normal(step, 1 + step, (envs, 3)), axis=0).astype(np.float32)
            stats = update(stats, batch)
            print(n, collective, envs, step, *np.asarray(stats.mean).tolist(), *np.asarray(stats.var).tolist(), float(stats.count))
            np.save(f"{sys.argv[2]}/batch_{n}_{envs}_{step}.npy", batch)
"""


def test_running_stats_pooled_over_device_shares_are_purejaxrls_on_the_whole_batch(tmp_path):
    """RunningStats.update over the shares of 1, 2 and 4 devices is PureJaxRL's update on the whole batch, step after
    step, with shares whose means lie far apart and with one env a device; on one device its program has no
    collective (PureJaxRL's update itself), on several it has."""
    result = subprocess.run([sys.executable, "-c", STATS_ON_DEVICES, str(ROOT), str(tmp_path)], capture_output=True,
                            text=True, env={**os.environ, "XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count=4"},
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    assert len(rows) == 3 * 2 * 5
    reference = {}
    for row in rows:
        n, collective, envs, step = map(int, row[:4])
        assert collective == (n > 1)
        mean, var, count = reference.get((n, envs), (np.zeros(3), np.ones(3), 1e-4))
        mean, var, count = reference[(n, envs)] = purejaxrl_update(mean, var, count, np.load(
            tmp_path / f"batch_{n}_{envs}_{step}.npy").astype(np.float64))
        values = np.array(row[4:], dtype=np.float64)
        np.testing.assert_allclose(values[:3], mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(values[3:6], var, rtol=1e-5)
        np.testing.assert_allclose(values[6], count, rtol=1e-6)


# inverted_pendulum with fresh random starts (episodes end; each env's resets and fresh starts from its own stream), 16
# envs x 10 steps, 5 minibatches (per-env: they divide the 10 steps), PPO-EWMA, 2 seeds, 4 iterations, every metric
DEVICE_FLAGS = ["--env-id", "inverted_pendulum", "--brax-fresh-starts", "--num-envs", "16", "--num-steps", "10",
                "--num-minibatches", "5", "--total-timesteps", "640", "--ewma-com", "4", "--shuffle", "per-env",
                "--num-seeds", "2", "--dynamics-every", "1", "--dynamics-batch", "64", "--save-every", "2"]
DEVICE_TAGS = ["charts/episodic_return", "charts/episodic_length", "losses/policy_loss", "losses/value_loss",
               "losses/entropy", "losses/approx_kl", "losses/prox_kl", "losses/grad_norm", "losses/explained_variance",
               "charts/update_norm", "dynamics/feature_rank", "dynamics/ess_pct", "dynamics/policy_variance",
               "dynamics/grad_kurtosis"]


def forced_devices(n):
    return {"XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count={n}"}


@shared_runs(minutes=2)
def device_runs(tmp_path_factory, fast_compile):
    """The run on 1 device and on 2."""
    dirs = {n: tmp_path_factory.mktemp(f"devices_{n}") for n in (1, 2)}
    started = {n: start_copy(SCRIPT, DEVICE_FLAGS, dirs[n], extra_env=forced_devices(n)) for n in (1, 2)}
    results = {n: finish(process, 1200) for n, process in started.items()}
    for n, result in results.items():
        assert result.returncode == 0, result.stderr[-3000:]
    return {n: (results[n], run_dirs(dirs[n])) for n in (1, 2)}


def assert_as_one_device(runs, one_runs):
    assert len(runs) == len(one_runs) == 2  # a run a seed
    for many, one in zip(runs, one_runs):
        many, one = read_values(many)[0], read_values(one)[0]
        assert len(one["charts/episodic_return"]) == 4 and len(one["charts/episodic_length"]) == 4  # episodes end
        for tag in DEVICE_TAGS:
            assert len(one[tag]) == 4, tag
            np.testing.assert_allclose(many[tag], one[tag], rtol=1e-3, atol=1e-5, err_msg=tag)
    ewma = load_script(SCRIPT)
    for iteration in (2, 4):  # the whole state of both seeds, in the first seed's run
        many, one = (ewma.read_checkpoint(d[0] / "checkpoints" / f"iter_{iteration}.npz")[1] for d in (runs, one_runs))
        assert len(many) == len(one) > 10
        for a, b in zip(many, one):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_two_devices_train_as_one_device_with_the_normalisation_pooled_over_them(device_runs):
    """On 2 devices (8 envs each) the same episodes, losses, KLs and dynamics/ metrics as on 1 device, and the same
    checkpoints: parameters, Brax states and the observation and return statistics pooled over both devices' envs
    (PureJaxRL's normalisation of all 16; a device's own 8 would differ in every leaf of the statistics), up to float
    summation order."""
    result, runs = device_runs[2]
    assert "2 devices in 1 process(es), shuffle per-env" in result.stdout
    assert_as_one_device(runs, device_runs[1][1])


def test_a_signal_to_one_of_two_processes_stops_both_and_they_train_as_one_device(device_runs, tmp_path):
    """The run as two processes of 2 devices each, joined by jax.distributed on localhost (each builds its env's model on
    its own device), and a SIGTERM to process 1 alone while it sets up: both stop after the first call, which they agree
    on; process 0 checkpoints it (every device's envs and normalisation statistics) and names it; both exit 75. Resumed
    on one process of one device, iterations 2 to 4 log what the run on 1 device logs, and end in its checkpoint."""
    results, checkpoint, ends = stop_one_of_two_tasks_then_resume(SCRIPT, DEVICE_FLAGS, tmp_path, forced_devices(2),
                                                                  forced_devices(1), 1200)
    assert "4 devices in 2 process(es), shuffle per-env" in results[0].stdout
    assert checkpoint.name == "iter_1.npz"
    one_runs = device_runs[1][1]
    assert len(ends) == len(one_runs) == 2  # a run a seed
    for end, one in zip(ends, one_runs):
        values, one = read_values(end)[0], read_values(one)[0]
        for tag in DEVICE_TAGS:
            assert len(values[tag]) == 3, tag  # iterations 2, 3 and 4
            np.testing.assert_allclose(values[tag], one[tag][-3:], rtol=1e-3, atol=1e-5, err_msg=tag)
    ewma = load_script(SCRIPT)
    many, one = (ewma.read_checkpoint(d[0] / "checkpoints" / "iter_4.npz")[1] for d in (ends, one_runs))
    assert len(many) == len(one) > 10
    for a, b in zip(many, one):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
