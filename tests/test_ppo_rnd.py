"""ppo_rnd.py: running statistics against numpy (and on the device), the discounted-return filter over time as
OpenAI's RND runs it, the two-head GAE, every hidden layer in the dynamics metrics, OpenAI's defaults, bad input,
and a tiny end-to-end run of a copy of the script on real envpool Montezuma's Revenge."""
import numpy as np
import pytest
import torch

from helpers import assert_bad_input, assert_coverage, assert_refused, load_script, reference_gae, run_copy, run_ok

SCRIPT = "ppo_rnd"
TINY = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "384", "--dynamics-every", "2",
        "--dynamics-batch", "64", "--update-epochs", "2", "--num-iterations-obs-norm-init", "1"]
EVERY_ITERATION = [
    "charts/intrinsic_reward_mean", "losses/rnd_loss", "charts/rooms_visited", "losses/approx_kl", "charts/ddr",
    "losses/value_loss", "losses/value_loss_ext", "losses/value_loss_int", "losses/policy_loss", "losses/entropy",
    "losses/clipfrac", "losses/grad_norm", "losses/explained_variance", "charts/SPS", "charts/learning_rate",
]
DYNAMICS = ["dynamics/feature_rank", "dynamics/feature_rank_critic", "dynamics/dormant_pct", "dynamics/weight_norm", "dynamics/grad_kurtosis",
            "dynamics/policy_variance", "dynamics/ess_pct"]


@pytest.fixture(scope="module")
def rnd():
    return load_script(SCRIPT)


def test_running_mean_std_matches_numpy_on_the_concatenated_data(rnd):
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, 3)) for n in (5, 17, 1, 40)]
    rms = rnd.RunningMeanStd(epsilon=1e-12, shape=(3,))
    for batch in batches:
        rms.update(batch)
    data = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-9)
    assert rms.count == pytest.approx(len(data))


def test_frame_normaliser_on_the_device_matches_numpys_float64(rnd):
    """The observation normaliser (torch, the batch moments from chunked float64 sums) against the numpy RunningMeanStd in
    float64, with batches that span several chunks and one of a single constant frame."""
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 256, size=(n, 1, 84, 84), dtype=np.uint8) for n in (64, 3, 512, 1)]
    batches.insert(2, np.full((7, 1, 84, 84), 255, dtype=np.uint8))  # a batch with no variance at all
    reference, frames = rnd.RunningMeanStd(shape=(1, 84, 84)), rnd.FrameRunningMeanStd((1, 84, 84), torch.device("cpu"))
    for batch in batches:
        reference.update(batch.astype(np.float64))
        frames.update(torch.as_tensor(batch), chunk=100)  # 512 frames: 6 chunks, the last of 12
    listed = rnd.FrameRunningMeanStd((1, 84, 84), torch.device("cpu"))  # a batch given as a list of its pieces
    for batch in batches:
        listed.update([torch.as_tensor(piece) for piece in np.array_split(batch, 3)])
    np.testing.assert_allclose(listed.mean.numpy(), frames.mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(listed.var.numpy(), frames.var.numpy(), rtol=1e-12)
    assert listed.count == pytest.approx(frames.count)
    np.testing.assert_allclose(frames.mean.numpy(), reference.mean, rtol=1e-10)
    np.testing.assert_allclose(frames.var.numpy(), reference.var, rtol=1e-10)
    assert frames.count == pytest.approx(reference.count)


def openai_rff_returns(rewards_env_major, gamma, rewems=None):
    """OpenAI RND (ppo_agent.py): `np.array([rff_int.update(rew) for rew in buf_rews_int.T])`, buf_rews_int being
    (nenvs, nsteps): one time step of every env per update; RewardForwardFilter: rewems = rewems * gamma + rews."""
    out = []
    for rews in rewards_env_major.T:
        rewems = rews if rewems is None else rewems * gamma + rews
        out.append(rewems)
    return np.array(out), rewems


def test_intrinsic_reward_filter_runs_over_time_as_openais_rnd(rnd):
    rng = np.random.default_rng(2)
    f, rewems = rnd.RewardForwardFilter(0.99), None
    for _ in range(2):  # two rollouts: the filter carries on across them (non-episodic)
        rewards = rng.random((7, 3))  # (num_steps, num_envs), as the script stores them
        expected, rewems = openai_rff_returns(rewards.T, 0.99, rewems)
        np.testing.assert_allclose(rnd.discounted_intrinsic_returns(f, rewards), expected, rtol=1e-12)
    # CleanRL's `.T` would feed it envs, not steps: another result
    assert not np.allclose(rnd.discounted_intrinsic_returns(rnd.RewardForwardFilter(0.99), rewards.T).T,
                           openai_rff_returns(rewards.T, 0.99)[0])


def test_dynamics_count_every_hidden_layer_of_the_agent(rnd):
    """Torso (32 + 64 + 64 channels, 256, 448), extra layer (448) and the actor's hidden layer (448): a dead actor
    hidden layer shows up as 448 dormant units of 1760."""
    torch.manual_seed(0)
    agent = rnd.Agent(18)
    obs = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    acts, logits = rnd.hidden_activations(agent, obs)
    assert [a.shape[1] for a in acts] == [32, 64, 64, 256, 448, 448, 448] and logits.shape == (64, 18)
    before = rnd.dynamics_metrics(agent, obs, torch.zeros(64, dtype=torch.long), torch.zeros(64), 0.025)["dynamics/dormant_pct"]
    with torch.no_grad():
        agent.actor[0].weight.zero_()
        agent.actor[0].bias.fill_(-1.0)
    after = rnd.dynamics_metrics(agent, obs, torch.zeros(64, dtype=torch.long), torch.zeros(64), 0.025)
    actor_dormant_before = rnd.dormant_percentage([acts[-1]], 0.025)  # % of the actor's hidden layer dormant already
    assert after["dynamics/dormant_pct"] == pytest.approx(before + (100 - actor_dormant_before) * 448 / 1760)
    assert actor_dormant_before < 100
    assert after["dynamics/feature_rank"] == 0  # the actor's penultimate features are all zero


def test_reward_forward_filter_is_the_discounted_sum_so_far(rnd):
    f = rnd.RewardForwardFilter(0.5)
    outs = [f.update(np.array([r])) for r in (1.0, 2.0, 4.0)]
    np.testing.assert_allclose(np.concatenate(outs), [1.0, 2.5, 5.25])


def test_two_head_gae_cuts_extrinsic_at_episode_ends_and_never_intrinsic(rnd):
    rng = np.random.default_rng(1)
    T, N = 13, 4
    ext, intr = rng.normal(size=(T, N)), rng.random((T, N))
    ext_values, int_values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones = (rng.random((T, N)) < 0.25).astype(np.float64)
    next_ext, next_int, next_done = rng.normal(size=N), rng.normal(size=N), np.array([0.0, 1.0, 0.0, 1.0])
    args = rnd.Args(gamma=0.999, int_gamma=0.99, gae_lambda=0.95)
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    ext_adv, ext_ret, int_adv, int_ret = rnd.two_head_gae(args, t(ext), t(intr), t(ext_values), t(int_values), t(dones),
                                                          t(next_ext[None]), t(next_int[None]), t(next_done))
    expected_ext = reference_gae(ext, ext_values, dones, next_ext, next_done, 0.999, 0.95)
    expected_int = reference_gae(intr, int_values, np.zeros_like(dones), next_int, np.zeros(N), 0.99, 0.95)
    np.testing.assert_allclose(ext_adv.numpy(), expected_ext, atol=1e-10)
    np.testing.assert_allclose(int_adv.numpy(), expected_int, atol=1e-10)
    np.testing.assert_allclose(ext_ret.numpy(), expected_ext + ext_values, atol=1e-10)
    np.testing.assert_allclose(int_ret.numpy(), expected_int + int_values, atol=1e-10)


def test_observation_normaliser_clips_to_5_std(rnd):
    rms = rnd.FrameRunningMeanStd((1, 84, 84), torch.device("cpu"))
    rms.mean[:], rms.var[:] = 100.0, 4.0
    frames = torch.zeros((2, 4, 84, 84), dtype=torch.uint8)
    frames[0, 3], frames[1, 3] = 104, 255
    out = rnd.normalise_frame(frames, rms.stats())
    assert out.shape == (2, 1, 84, 84)
    assert torch.allclose(out[0], torch.tensor(2.0)) and torch.allclose(out[1], torch.tensor(5.0))


def test_defaults_are_cleanrl_ppo_rnd_envpool_but_where_openais_rnd_differs(rnd):
    args = rnd.resolve_args(rnd.RunArgs())
    assert (args.num_envs, args.num_steps, args.learning_rate, args.gamma, args.int_gamma) == (128, 128, 1e-4, 0.999, 0.99)
    assert (args.int_coef, args.ext_coef, args.update_proportion, args.num_minibatches) == (1.0, 2.0, 0.25, 4)
    assert (args.update_epochs, args.clip_coef, args.ent_coef, args.num_iterations_obs_norm_init) == (4, 0.1, 0.001, 50)
    # OpenAI's RND, not CleanRL: value coefficient 1 (CleanRL 0.5), no episodic life, sticky actions
    assert args.vf_coef == 1.0 and args.sticky_action
    envs = rnd.make_env("MontezumaRevenge-v5", 1, 0)
    assert envs.config["episodic_life"] is False and envs.config["repeat_action_probability"] == 0.25
    envs.close()


BAD_INPUT = [
    (["--update-proportion", "0"], "--update-proportion must lie in (0, 1]"),
    (["--int-gamma", "1.1"], "--int-gamma must lie in [0, 1]"),
    (["--num-iterations-obs-norm-init", "0"], "--num-iterations-obs-norm-init must be positive"),
    (["--int-coef", "-1"], "--int-coef must be >= 0"),
    (["--num-envs", "3", "--num-steps", "7"], "--num-minibatches 4 must be positive and divide the batch 21"),
    (["--env-id", "Montezuma"], "--env-id must be an envpool Atari id"),
    (["--minibatch-size", "1"], "--minibatch-size must be at least 2 with --norm-adv"),
    (["--max-grad-norm=-1"], "--max-grad-norm must be positive"),
    (["--target-kl", "0"], "--target-kl must be positive"),
    (["--vf-coef=-1"], "--vf-coef must be >= 0"),
    (["--learning-rate", "nan"], "--learning-rate must be a finite number"),
    (["--seed", "2147483648"], "--seed must lie in [0, 2^31)"),
    (["--hybrid-minibatch-factor", "4"], "--hybrid-minibatch-factor applies to --scaling-recipe hybrid only"),
    (["--coverage-samples=-1"], "--coverage-samples must lie in [0, --dynamics-batch 1024]"),
]


@pytest.mark.parametrize("argv, flag", BAD_INPUT)
def test_bad_input_is_refused_by_the_flag_checks(rnd, argv, flag):
    assert_refused(rnd, argv, flag)


def test_bad_input_exits_2_with_one_line(tmp_path):
    """The contract the cases above rest on, as a user meets it: exit status 2, one line, nothing written."""
    argv, flag = BAD_INPUT[0]
    assert_bad_input(run_copy(SCRIPT, argv, tmp_path, timeout=120), tmp_path, flag)


def test_tiny_run_on_montezuma_logs_every_tag(tmp_path, rnd):
    run_dir, result, scalars, texts = run_ok(SCRIPT, TINY + ["--save-model", "--eval-episodes", "1"], tmp_path)
    assert not set(EVERY_ITERATION + DYNAMICS) - set(scalars)
    assert all(len(scalars[tag]) == 3 for tag in EVERY_ITERATION)  # 384 // (4 * 32) iterations
    assert len(scalars["dynamics/feature_rank"]) == 2  # iterations 1 and 2
    assert all(r >= 1 for r in scalars["charts/rooms_visited"])  # room 1 is where every game starts
    assert all(v > 0 for v in scalars["charts/intrinsic_reward_mean"]) and all(v > 0 for v in scalars["losses/rnd_loss"])
    np.testing.assert_allclose(scalars["charts/ddr"], [128 / kl for kl in scalars["losses/approx_kl"]], rtol=1e-4)
    state = torch.load(run_dir / f"{SCRIPT}.pt", weights_only=False)
    rnd.Agent(18).load_state_dict(state["agent"])
    assert len(scalars["eval/episodic_return"]) == 1
    assert_coverage(tmp_path, [1, 2], (21, 21), 448, samples=64)
