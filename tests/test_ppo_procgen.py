"""ppo_procgen_envpool.py: CleanRL's reward normaliser and IMPALA CNN ported line by line and compared, a few real
iterations on envpool's Procgen from a lone copy (every tag, evaluation on held-out levels), bad input. Resume,
signals, determinism and the raw-gradient kurtosis are in test_torch_runs_survive.py."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from helpers import PPO_DYNAMICS as DYNAMICS, PPO_EVERY_ITERATION as EVERY_ITERATION
from helpers import assert_bad_input, assert_coverage, assert_refused, load_script, run_copy, run_ok

SCRIPT = "ppo_procgen_envpool"


@pytest.fixture(scope="module")
def procgen():
    return load_script(SCRIPT)


# ---------------------------------------------------------------- the reward normaliser
class GymRunningMeanStd:
    """gym 0.23's gym.wrappers.normalize.RunningMeanStd (CleanRL's ppo_procgen uses gym 0.23), line by line."""

    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, "float64")
        self.var = np.ones(shape, "float64")
        self.count = epsilon

    def update(self, x):
        batch_mean = np.mean(x, axis=0)
        batch_var = np.var(x, axis=0)
        batch_count = x.shape[0]
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * self.count
        m_b = batch_var * batch_count
        M2 = m_a + m_b + np.square(delta) * self.count * batch_count / tot_count
        self.mean, self.var, self.count = new_mean, M2 / tot_count, tot_count


class GymNormalizeRewardThenClip:
    """gym 0.23's NormalizeReward.step (vector env) followed by CleanRL's TransformReward(np.clip(r, -10, 10))."""

    def __init__(self, num_envs, gamma=0.99, epsilon=1e-8):
        self.return_rms = GymRunningMeanStd(shape=())
        self.returns = np.zeros(num_envs)
        self.gamma = gamma
        self.epsilon = epsilon

    def step(self, rews, dones):
        self.returns = self.returns * self.gamma + rews
        rews = self.normalize(rews)
        self.returns[dones] = 0.0
        return np.clip(rews, -10, 10)

    def normalize(self, rews):
        self.return_rms.update(self.returns)
        return rews / np.sqrt(self.return_rms.var + self.epsilon)


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e4])  # all-zero rewards, Procgen's 0-10 range, large ones
def test_reward_normaliser_matches_gyms_normalize_reward_and_cleanrls_clip(procgen, scale):
    """100 steps without a reward shrink the running variance, so that the first rewards after them are clipped."""
    rng = np.random.default_rng(0)
    num_envs, gamma = 6, 0.999
    reference = GymNormalizeRewardThenClip(num_envs, gamma)
    rms, returns = procgen.RunningMeanStd(), np.zeros(num_envs)
    clipped = 0
    for step in range(300):
        rewards = scale * rng.random(num_envs) * (rng.random(num_envs) < 0.2) * (step >= 100)
        dones = rng.random(num_envs) < 0.05
        ours = procgen.normalize_rewards(rms, returns, rewards, dones, gamma)
        np.testing.assert_allclose(ours, reference.step(rewards, dones), rtol=1e-12, atol=0)
        np.testing.assert_allclose(returns, reference.returns, rtol=1e-12, atol=0)
        clipped += int((np.abs(ours) == 10).sum())
    assert (rms.mean, rms.var, rms.count) == pytest.approx((reference.return_rms.mean, reference.return_rms.var,
                                                            reference.return_rms.count), rel=1e-12)
    assert clipped > 0 if scale else clipped == 0


# ---------------------------------------------------------------- the IMPALA CNN
class CleanRLResidualBlock(nn.Module):
    """CleanRL ppo_procgen.py's ResidualBlock, line by line."""

    def __init__(self, channels):
        super().__init__()
        self.conv0 = nn.Conv2d(in_channels=channels, out_channels=channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(in_channels=channels, out_channels=channels, kernel_size=3, padding=1)

    def forward(self, x):
        inputs = x
        x = nn.functional.relu(x)
        x = self.conv0(x)
        x = nn.functional.relu(x)
        x = self.conv1(x)
        return x + inputs


class CleanRLConvSequence(nn.Module):
    def __init__(self, input_shape, out_channels):
        super().__init__()
        self._input_shape = input_shape
        self._out_channels = out_channels
        self.conv = nn.Conv2d(in_channels=self._input_shape[0], out_channels=self._out_channels, kernel_size=3, padding=1)
        self.res_block0 = CleanRLResidualBlock(self._out_channels)
        self.res_block1 = CleanRLResidualBlock(self._out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = nn.functional.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        x = self.res_block0(x)
        x = self.res_block1(x)
        return x

    def get_output_shape(self):
        _c, h, w = self._input_shape
        return (self._out_channels, (h + 1) // 2, (w + 1) // 2)


def cleanrl_network():
    shape, conv_seqs = (3, 64, 64), []
    for out_channels in [16, 32, 32]:
        conv_seq = CleanRLConvSequence(shape, out_channels)
        shape = conv_seq.get_output_shape()
        conv_seqs.append(conv_seq)
    conv_seqs += [nn.Flatten(), nn.ReLU(), nn.Linear(in_features=shape[0] * shape[1] * shape[2], out_features=256), nn.ReLU()]
    return nn.Sequential(*conv_seqs)


def test_impala_cnn_is_cleanrls_with_the_same_weights(procgen):
    """Same parameters in the same order (so the same state), same features: the ReLU moved before the flatten
    changes nothing; the features of uint8 frames through the agent are CleanRL's of frames / 255."""
    torch.manual_seed(0)
    ours, reference = procgen.Agent(15), cleanrl_network()
    assert [p.shape for p in ours.network.parameters()] == [p.shape for p in reference.parameters()]
    with torch.no_grad():
        for a, b in zip(ours.network.parameters(), reference.parameters()):
            a.copy_(torch.randn_like(a) * 0.1)
            b.copy_(a)
    frames = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8)
    features = ours.torsos(frames)[0]
    torch.testing.assert_close(features, reference(frames.float() / 255.0), rtol=1e-5, atol=1e-6)
    assert features.shape == (5, 256)


def test_hidden_activations_are_every_relu_in_order_the_last_the_features(procgen):
    torch.manual_seed(0)
    agent = procgen.Agent(15)
    x = agent.preprocess(torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8))
    acts = procgen.hidden_activations(agent.network, x)
    # 3 stages x 2 residual blocks x 2 ReLUs, the ReLU before the flatten, the dense layer's
    assert [tuple(a.shape[1:]) for a in acts] == [(16, 32, 32)] * 4 + [(32, 16, 16)] * 4 + [(32, 8, 8)] * 5 + [(256,)]
    torch.testing.assert_close(acts[-1], agent.network(x))
    assert all((a >= 0).all() for a in acts)
    assert not any(m._forward_hooks for m in agent.network.modules())  # the hooks are gone


# ---------------------------------------------------------------- a real run


def test_tiny_run_logs_every_tag_and_evaluates_on_held_out_levels(tmp_path):
    """3 iterations of 6 envs x 32 steps on levels 100 ... 109 with separate encoders, tracked; evaluated after
    iterations 2 and 3 on 3 levels of the full distribution, none of them a training level."""
    flags = ["--num-envs", "6", "--num-steps", "32", "--total-timesteps", "576", "--num-minibatches", "4",
             "--dynamics-every", "2", "--dynamics-batch", "64", "--eval-every", "2", "--eval-episodes", "3",
             "--num-levels", "10", "--start-level", "100", "--separate-encoders", "--track", "--save-model"]
    run_dir, result, scalars, texts = run_ok(SCRIPT, flags, tmp_path, timeout=600)
    assert "levels 100 to 109" in result.stdout and "4 minibatches of 48" in result.stdout
    assert all(len(scalars[tag]) == 3 for tag in EVERY_ITERATION)
    assert len(scalars["dynamics/feature_rank"]) == 2 and len(scalars["dynamics/feature_rank_critic"]) == 2
    for tag in EVERY_ITERATION + DYNAMICS + ["eval/episodic_return", "dynamics/dormant_pct_critic"]:
        assert np.all(np.isfinite(scalars[tag])), tag
    assert scalars["eval/training_levels"] == [0, 0] and len(scalars["eval/episodic_return"]) == 2
    np.testing.assert_allclose(scalars["charts/ddr"], [192 / kl for kl in scalars["losses/approx_kl"]], rtol=1e-4)
    assert all(1 <= r <= 256 for r in scalars["dynamics/feature_rank"])
    assert "|gamma|0.999|" in texts["hyperparameters/text_summary"][0]
    assert (run_dir / f"{SCRIPT}.pt").is_file() and list((tmp_path / "wandb").glob("offline-run-*"))
    assert_coverage(tmp_path, [1, 2], (3, 16, 16), 256, samples=64)


def test_training_levels_are_the_ones_asked_for(procgen):
    """--num-levels 10 --start-level 5: envpool deals levels 5 ... 14 only; evaluation levels (full distribution,
    another seed) lie elsewhere."""
    envs = procgen.make_env("StarpilotEasy-v0", 4, 1, num_levels=10, start_level=5)
    _, info = envs.reset()
    seen = set(info["level_seed"].tolist())
    rng = np.random.default_rng(0)
    for _ in range(400):
        info = envs.step(rng.integers(0, 15, 4))[-1]
        seen |= set(info["level_seed"].tolist())
    assert seen <= set(range(5, 15)) and len(seen) > 4
    torch.manual_seed(0)
    returns, levels = procgen.evaluate(procgen.Agent(15), "StarpilotEasy-v0", 3, 10_001, "cpu")
    assert returns.shape == (3,) and not set(levels.tolist()) & set(range(5, 15))
    again = procgen.evaluate(procgen.Agent(15), "StarpilotEasy-v0", 3, 10_001, "cpu")[1]
    assert levels.tolist() == again.tolist()  # the same levels at every evaluation


def test_training_levels_counts_the_half_open_range(procgen):
    levels = [4, 5, 14, 15, 2**31 - 1]
    assert procgen.training_levels(levels, 5, 10) == 2  # 5 and 14 of 5 ... 14
    assert procgen.training_levels(levels, 0, 2**31 - 1) == 4  # every level but 2^31 - 1
    assert procgen.training_levels(levels, 15, 1) == 1 and procgen.training_levels([], 0, 10) == 0


def test_evaluating_does_not_change_what_the_run_learns(tmp_path):
    """--eval-every is not a learning flag: evaluating after every iteration logs the same training values as never."""
    flags = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "192", "--num-minibatches", "2",
             "--dynamics-every", "0", "--eval-episodes", "2"]
    logs = [run_ok(SCRIPT, flags + ["--eval-every", every], tmp_path / every, timeout=600)[2] for every in ("0", "1")]
    assert len(logs[1]["eval/episodic_return"]) == 3 and "eval/episodic_return" not in logs[0]
    for tag in ["losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/grad_norm"]:
        assert logs[0][tag] == logs[1][tag], tag


BAD_INPUT = [
    (["--env-id", "Breakout-v5"], "--env-id must be an envpool Procgen id"),
    (["--env-id", "starpilot"], "--env-id must be an envpool Procgen id"),
    (["--num-levels=-1"], "--num-levels must be >= 0"),
    (["--start-level", "2147483600", "--num-levels", "100"], "--start-level + --num-levels must be below 2^31"),
    (["--eval-every=-1"], "--eval-every must be >= 0"),
    (["--start-level", "5"], "--start-level 5 needs --num-levels > 0"),
    (["--eval-episodes", "0"], "--eval-episodes must be positive"),
    (["--num-minibatches", "7"], "--num-minibatches 7 must be positive and divide the batch 16384"),
    (["--learning-rate", "nan"], "--learning-rate must be a finite number"),
    (["--coverage-every", "3", "--dynamics-every", "2"], "--coverage-every 3 must be a multiple of --dynamics-every 2"),
]


@pytest.mark.parametrize("argv,text", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_refused_by_the_flag_checks(procgen, argv, text):
    assert_refused(procgen, argv, text)


def test_bad_input_exits_2_with_one_line_and_no_run_dir(tmp_path):
    """The contract the cases above rest on, as a user meets it: exit status 2, one line, nothing written."""
    argv, text = BAD_INPUT[0]
    assert_bad_input(run_copy(SCRIPT, argv, tmp_path, timeout=120), tmp_path, text)
