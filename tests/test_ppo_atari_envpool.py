"""ppo_atari_envpool.py: metrics in closed form, GAE against a reference loop, recipe arithmetic,
bad input, and tiny end-to-end runs of a copy of the script on real envpool Atari (checkpoints, resumption,
signals and the raw-gradient kurtosis: test_torch_runs_survive.py)."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from helpers import PPO_DYNAMICS as DYNAMICS, PPO_EVERY_ITERATION as EVERY_ITERATION
from helpers import assert_bad_input, assert_refused, checkpoint_change, load_script, read_values, reference_gae, run_copy, run_dirs

SCRIPT = "ppo_atari_envpool"


# ---------------------------------------------------------------- metrics (data-collection App. B)
def _rank_r_features(batch, dim, singular_values, seed=0):
    """A centred (batch, dim) matrix whose singular values are exactly `singular_values`."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, len(singular_values), generator=gen, dtype=torch.float64)
    u = torch.linalg.qr(u - u.mean(0))[0]
    v = torch.linalg.qr(torch.randn(dim, len(singular_values), generator=gen, dtype=torch.float64))[0]
    return u @ torch.diag(torch.tensor(singular_values, dtype=torch.float64)) @ v.T


@pytest.mark.parametrize("r", [1, 7, 32])
def test_feature_rank_of_rank_r_matrix_is_r(ppo_atari, r):
    features = _rank_r_features(256, 64, [1.0] * r) + 5.0  # an offset is removed by the centring
    assert ppo_atari.feature_rank(features) == r


def test_feature_rank_keeps_99_percent_of_the_energy(ppo_atari):
    # energies 100, 2.25, 0.01: the top one holds 97.79% < 99%, the top two 99.99%
    assert ppo_atari.feature_rank(_rank_r_features(128, 16, [10.0, 1.5, 0.1])) == 2
    # energies 100, 0.5, 0.5: the top one holds 99.0099% >= 99%
    assert ppo_atari.feature_rank(_rank_r_features(128, 16, [10.0, 0.5**0.5, 0.5**0.5])) == 1


def test_dormant_percentage_counts_units_below_tau_of_the_layer_mean(ppo_atari):
    batch = 32
    dense = torch.ones(batch, 4)
    dense[:, 0] = 0.0  # dead
    dense[:, 1] = torch.tensor([0.02, -0.02] * (batch // 2))  # E|h| = 0.02; layer mean 0.505 -> 0.0396 > 0.025
    conv = torch.ones(batch, 10, 3, 3)
    conv[:, 2] = 0.0  # one dead channel out of 10
    conv[:, 5, 0, 0] = 1e-3  # a channel that is almost dead: E|h| = 1e-3/9 of the mean -> dormant
    conv[:, 5, 1:, :] = 0.0
    conv[:, 5, 0, 1:] = 0.0
    assert ppo_atari.dormant_percentage([dense], 0.025) == pytest.approx(25.0)
    assert ppo_atari.dormant_percentage([conv], 0.025) == pytest.approx(20.0)
    assert ppo_atari.dormant_percentage([dense, conv], 0.025) == pytest.approx(100 * 3 / 14)
    assert ppo_atari.dormant_percentage([dense], 0.04) == pytest.approx(50.0)


def test_weight_norm_sums_weight_tensors_only(ppo_atari):
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.fill_(100.0)
        net[2].weight.fill_(2.0)
        net[2].bias.fill_(-100.0)
    assert ppo_atari.weight_norm(net) == pytest.approx(math.sqrt(6 * 1 + 2 * 4))


def test_grad_kurtosis_is_taken_of_log_magnitudes(ppo_atari):
    # log|g| takes the values +1 and -1 equally often: a two-point distribution has kurtosis 1
    g = torch.tensor([math.e, -math.e, 1 / math.e, -1 / math.e] * 250)
    assert ppo_atari.grad_kurtosis([g[:600], g[600:].reshape(20, 20)]) == pytest.approx(1.0, abs=1e-6)
    # log-normal magnitudes: log|g| is normal, kurtosis 3 (the raw values would give hundreds)
    z = torch.randn(400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert ppo_atari.grad_kurtosis([torch.exp(z)]) == pytest.approx(3.0, abs=0.05)


def test_ess_is_100_percent_for_equal_ratios_and_1_over_n_for_one_sample(ppo_atari):
    assert ppo_atari.ess_percentage(torch.full((50,), 1.7)) == pytest.approx(100.0)
    one = torch.zeros(50)
    one[3] = 2.0
    assert ppo_atari.ess_percentage(one) == pytest.approx(2.0)
    # w = (0.25, 0.75): ESS = 1 / 0.625 = 1.6 of 2 samples
    assert ppo_atari.ess_percentage(torch.tensor([1.0, 3.0])) == pytest.approx(80.0)


def test_policy_variance_of_opposite_and_identical_policies(ppo_atari):
    assert ppo_atari.policy_variance(torch.tensor([[1.0, 0.0], [0.0, 1.0]])) == pytest.approx(0.25)
    assert ppo_atari.policy_variance(torch.tensor([[0.2, 0.3, 0.5]] * 7)) == pytest.approx(0.0)
    # one action: probs 0.1, 0.3 (var 0.01), the other 0.9, 0.7 (var 0.01)
    assert ppo_atari.policy_variance(torch.tensor([[0.1, 0.9], [0.3, 0.7]])) == pytest.approx(0.01)


# ---------------------------------------------------------------- GAE
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.97, 1.0)])
def test_gae_matches_reference_loop_across_episode_ends(ppo_atari, gamma, lam):
    rng = np.random.default_rng(0)
    T, N = 17, 5
    rewards, values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones = (rng.random((T, N)) < 0.15).astype(np.float64)
    next_value, next_done = rng.normal(size=N), np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    adv, ret = ppo_atari.compute_gae(t(rewards), t(values), t(dones), t(next_value), t(next_done), gamma, lam)
    expected = reference_gae(rewards, values, dones, next_value, next_done, gamma, lam)
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(ret.numpy(), expected + values, atol=1e-10)


def test_gae_with_lambda_1_and_no_ends_is_the_bootstrapped_discounted_return(ppo_atari):
    T, gamma = 6, 0.9
    rewards = torch.arange(1.0, T + 1, dtype=torch.float64).reshape(T, 1)
    values = torch.zeros(T, 1, dtype=torch.float64)
    _, ret = ppo_atari.compute_gae(rewards, values, torch.zeros(T, 1), torch.tensor([10.0]), torch.zeros(1), gamma, 1.0)
    expected = [sum(gamma**k * (t + k + 1) for k in range(T - t)) + gamma ** (T - t) * 10.0 for t in range(T)]
    np.testing.assert_allclose(ret[:, 0].numpy(), expected)


# ---------------------------------------------------------------- scaling recipes (stagnation §5, App. D)
@pytest.mark.parametrize(
    "recipe,b,expected",
    [
        ("more-minibatches", 0, (16, 256, 2.5e-4)),
        ("bigger-minibatch", 0, (4, 1024, 2.5e-4)),
        ("bigger-minibatch-sqrt-lr", 0, (4, 1024, 5e-4)),
        ("hybrid", 2, (8, 512, 2.5e-4 * math.sqrt(2))),
        ("hybrid", 4, (4, 1024, 5e-4)),  # a = 1: the hybrid is bigger-minibatch-sqrt-lr
        ("hybrid", 1, (16, 256, 2.5e-4)),  # b = 1: the hybrid is more-minibatches
    ],
)
def test_recipe_arithmetic_from_8_to_32_envs(ppo_atari, recipe, b, expected):
    minibatches, size, lr = ppo_atari.resolve_recipe(recipe, 32, 128, 2.5e-4, 8, 4, b)
    assert (minibatches, size) == expected[:2]
    assert lr == pytest.approx(expected[2])
    assert minibatches * size == 32 * 128


def test_hybrid_recipe_of_appendix_d_32x_minibatches_16x_size_4x_lr(ppo_atari):
    # k = 512 = a * b with b = 16
    assert ppo_atari.resolve_recipe("hybrid", 8 * 512, 256, 5e-5, 8, 32, 16) == (32 * 32, 16 * 64, pytest.approx(2e-4))


def test_recipe_scaling_down_halves_minibatches(ppo_atari):
    assert ppo_atari.resolve_recipe("more-minibatches", 4, 128, 1e-3, 8, 4) == (2, 256, 1e-3)


def test_recipe_none_keeps_the_flags(ppo_atari):
    args = ppo_atari.resolve_args(ppo_atari.RunArgs(num_envs=32, num_minibatches=8))
    assert (args.batch_size, args.num_minibatches, args.minibatch_size, args.learning_rate) == (4096, 8, 512, 2.5e-4)
    args = ppo_atari.resolve_args(ppo_atari.RunArgs(num_envs=32, minibatch_size=256, total_timesteps=10_000))
    assert (args.num_minibatches, args.num_iterations) == (16, 2)


# ---------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def module():
    return load_script(SCRIPT)


BAD_INPUT = [
    (["--num-envs", "0"], "--num-envs"),
    (["--num-steps=-1"], "--num-steps"),
    (["--update-epochs", "0"], "--update-epochs"),
    (["--num-minibatches", "3"], "--num-minibatches"),
    (["--minibatch-size", "100"], "--minibatch-size"),
    (["--num-minibatches", "8", "--minibatch-size", "256"], "--num-minibatches"),
    (["--total-timesteps", "100"], "--total-timesteps"),
    (["--env-id", "NotAGame-v5"], "--env-id"),
    (["--env-id", "CartPole-v1"], "--env-id"),
    (["--scaling-recipe", "bogus"], "--scaling-recipe"),
    (["--scaling-recipe", "hybrid"], "--hybrid-minibatch-factor"),
    (["--scaling-recipe", "more-minibatches", "--base-num-envs", "0"], "--base-num-envs"),
    (["--scaling-recipe", "more-minibatches", "--num-envs", "3"], "--num-envs"),
    (["--scaling-recipe", "more-minibatches", "--num-minibatches", "8"], "--num-minibatches"),
    (["--gamma", "1.5"], "--gamma"),
    (["--clip-coef", "0"], "--clip-coef"),
    (["--minibatch-size", "1"], "--minibatch-size must be at least 2 with --norm-adv"),
    (["--scaling-recipe", "more-minibatches", "--num-steps", "1", "--base-num-envs", "4", "--base-num-minibatches", "4"],
     "--minibatch-size must be at least 2"),  # a recipe that resolves to minibatches of one sample
    (["--learning-rate", "inf"], "--learning-rate must be a finite number"),
    (["--gae-lambda", "nan"], "--gae-lambda must be a finite number"),
    (["--seed", "2147483648"], "--seed must lie in [0, 2^31)"),
    (["--seed=-1"], "--seed must lie in [0, 2^31)"),
    (["--max-grad-norm=-1"], "--max-grad-norm must be positive"),
    (["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    (["--target-kl", "0"], "--target-kl must be positive"),
    (["--hybrid-minibatch-factor", "2"], "--hybrid-minibatch-factor applies to --scaling-recipe hybrid only"),
    (["--ent-coef=-0.01"], "--ent-coef must be >= 0"),
    (["--vf-coef=-1"], "--vf-coef must be >= 0"),
    (["--kl-sample", "1025"], "--kl-sample 1025 is more than the batch"),
    (["--coverage-samples=-1"], "--coverage-samples must lie in [0, --dynamics-batch 1024]"),
    (["--coverage-samples", "65", "--dynamics-batch", "64"], "--coverage-samples must lie in [0, --dynamics-batch 64]"),
    (["--coverage-every", "15"], "--coverage-every 15 must be a multiple of --dynamics-every 10"),
    (["--save-every=-1"], "--save-every must be >= 0"),
    (["--resume", "no/such.pt"], "--resume no/such.pt: no such file"),
]


@pytest.mark.parametrize("argv,flag", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_refused_by_the_flag_checks(module, argv, flag):
    assert_refused(module, argv, flag)


def test_bad_input_exits_2_with_one_line_and_no_run_dir(tmp_path):
    """The contract the cases above rest on, as a user meets it: exit status 2, one line, nothing written."""
    argv, flag = BAD_INPUT[0]
    assert_bad_input(run_copy(SCRIPT, argv, tmp_path, timeout=120), tmp_path, flag)


# ---------------------------------------------------------------- end to end on real envpool Atari
TINY = ["--num-envs", "8", "--num-steps", "64", "--total-timesteps", "2048", "--dynamics-every", "2",
        "--dynamics-batch", "128", "--update-epochs", "2"]

COMBINATIONS = {
    "default+track+save": (["--track", "--save-model", "--eval-episodes", "2"], (4, 128)),
    "separate-encoders": (["--separate-encoders", "--save-every", "1"], (4, 128)),
    "more-minibatches": (["--scaling-recipe", "more-minibatches", "--base-num-envs", "4", "--base-num-minibatches", "2"], (4, 128)),
    "bigger-minibatch": (["--scaling-recipe", "bigger-minibatch", "--base-num-envs", "4", "--base-num-minibatches", "4"], (4, 128)),
    "bigger-minibatch-sqrt-lr": (["--scaling-recipe", "bigger-minibatch-sqrt-lr", "--base-num-envs", "2", "--base-num-minibatches", "8"], (8, 64)),
    "hybrid": (["--scaling-recipe", "hybrid", "--base-num-envs", "2", "--base-num-minibatches", "2", "--hybrid-minibatch-factor", "2"], (4, 128)),
    "minibatch-size+target-kl+no-clip-vloss": (["--minibatch-size", "256", "--target-kl", "0.001", "--no-clip-vloss", "--no-norm-adv", "--no-anneal-lr"], (2, 256)),
}


_TINY_RUNS = {}


def _tiny_run(name, tmp_path_factory):
    """Run one combination once per session: (name, (minibatches, size), workdir, run_dir, result, scalars, texts)."""
    if name not in _TINY_RUNS:
        extra, minibatches = COMBINATIONS[name]
        workdir = tmp_path_factory.mktemp(name)
        result = run_copy(SCRIPT, TINY + extra, workdir, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        (run_dir,) = run_dirs(workdir)
        _TINY_RUNS[name] = (name, minibatches, workdir, run_dir, result, *read_values(run_dir))
    return _TINY_RUNS[name]


@pytest.fixture(params=list(COMBINATIONS))
def tiny_run(request, tmp_path_factory):
    return _tiny_run(request.param, tmp_path_factory)


def test_tiny_run_logs_every_tag(tiny_run):
    name, _, _, _, _, scalars, _ = tiny_run
    expected = EVERY_ITERATION + DYNAMICS + ["charts/episodic_return"]
    if name == "separate-encoders":
        expected += ["dynamics/feature_rank_critic", "dynamics/dormant_pct_critic"]
    assert not set(expected) - set(scalars)
    assert all(len(scalars[tag]) == 4 for tag in EVERY_ITERATION)  # 2048 // (8 * 64) iterations
    assert len(scalars["dynamics/feature_rank"]) == 3  # iterations 1, 2 and 4 (--dynamics-every 2)
    for tag in expected:
        assert all(np.isfinite(scalars[tag])), tag


def test_with_separate_encoders_the_actors_update_norm_leaves_the_critics_encoder_out(tmp_path_factory):
    """charts/update_norm_actor: the change of the policy's parameters alone (its encoder `network.*` and head
    `actor.*`), not of the critic's encoder, from the checkpoints of iterations 3 and 4."""
    *_, run_dir, _, scalars, _ = _tiny_run("separate-encoders", tmp_path_factory)
    change = checkpoint_change(run_dir, "agent", 3, 4)
    actor = torch.cat([v for k, v in change.items() if k.startswith(("network.", "actor."))]).norm().item()
    critic_encoder = torch.cat([v for k, v in change.items() if k.startswith("critic_network.")]).norm().item()
    assert critic_encoder > 0 and scalars["charts/update_norm_actor"][3] == pytest.approx(actor, rel=1e-4)


def test_tiny_run_metrics_are_in_range(tiny_run):
    *_, scalars, _ = tiny_run
    assert all(1 <= r <= 512 for r in scalars["dynamics/feature_rank"])
    assert all(0 <= d <= 100 for d in scalars["dynamics/dormant_pct"])
    assert all(0 < e <= 100 for e in scalars["dynamics/ess_pct"])
    assert all(k >= 1 for k in scalars["dynamics/grad_kurtosis"])  # kurtosis >= 1 for any distribution
    assert all(0 <= v <= 0.25 for v in scalars["dynamics/policy_variance"])
    assert all(kl >= 0 for kl in scalars["losses/approx_kl"])
    ddr = [512 / kl for kl in scalars["losses/approx_kl"]]
    np.testing.assert_allclose(scalars["charts/ddr"], ddr, rtol=1e-4)
    assert all(0 <= c <= 1 for c in scalars["losses/clipfrac"])


def test_tiny_run_resolves_and_records_minibatches(tiny_run):
    name, (minibatches, size), _, _, result, _, texts = tiny_run
    hyper = texts["hyperparameters/text_summary"][0]
    assert f"|num_minibatches|{minibatches}|" in hyper and f"|minibatch_size|{size}|" in hyper
    assert f"{minibatches} minibatches of {size}" in result.stdout
    if name == "bigger-minibatch-sqrt-lr":  # k = 4 -> lr x 2
        assert "|learning_rate|0.0005|" in hyper


def test_save_model_writes_a_loadable_model_and_evaluates_it(tmp_path_factory, ppo_atari):
    _, _, workdir, run_dir, result, scalars, _ = _tiny_run("default+track+save", tmp_path_factory)
    state = torch.load(run_dir / f"{SCRIPT}.pt")
    agent = ppo_atari.Agent(4)
    agent.load_state_dict(state)
    assert len(scalars["eval/episodic_return"]) == 2
    assert "eval: mean score" in result.stdout
    assert list((workdir / "wandb").glob("offline-run-*")), "wandb offline run missing"


def test_dynamics_every_0_disables_the_metrics(tmp_path):
    result = run_copy(SCRIPT, ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128", "--dynamics-every", "0"], tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    scalars, _ = read_values(run_dirs(tmp_path)[0])
    assert "charts/ddr" in scalars and not [t for t in scalars if t.startswith("dynamics/")]


def test_grad_accumulation_over_chunks_reproduces_the_whole_minibatch_update(tmp_path):
    """--grad-accum-size splits a minibatch for memory only: the same seed gives the same training."""
    common = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "384", "--num-minibatches", "1",
              "--dynamics-every", "1", "--dynamics-batch", "64"]
    logs = []
    for accum in ("0", "32"):
        result = run_copy(SCRIPT, common + ["--grad-accum-size", accum], tmp_path / accum, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        logs.append(read_values(run_dirs(tmp_path / accum)[0])[0])
    for tag in ["losses/value_loss", "losses/policy_loss", "losses/approx_kl", "losses/grad_norm", "dynamics/weight_norm"]:
        np.testing.assert_allclose(logs[0][tag], logs[1][tag], rtol=2e-3, atol=1e-7, err_msg=tag)
    assert logs[0]["dynamics/weight_norm"][0] != logs[0]["dynamics/weight_norm"][-1]  # the weights did move
