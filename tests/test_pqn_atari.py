"""pqn_atari.py: Q(lambda) targets against a plain loop and their lambda = 0 / 1 limits, exploration,
bad input, and a tiny end-to-end run of a copy of the script on real envpool Atari."""
import numpy as np
import pytest
import torch

from helpers import assert_coverage, assert_refused, load_script, run_ok, shared_runs

SCRIPT = "pqn_atari"
TINY = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "512", "--dynamics-every", "2",
        "--dynamics-batch", "64", "--update-epochs", "2"]
EVERY_ITERATION = ["losses/td_loss", "losses/q_values", "losses/grad_norm", "charts/epsilon", "charts/SPS",
                   "charts/learning_rate", "charts/update_norm"]
DYNAMICS = ["dynamics/feature_rank", "dynamics/dormant_pct", "dynamics/weight_norm", "dynamics/grad_kurtosis"]


@pytest.fixture(scope="module")
def pqn():
    return load_script(SCRIPT)


def reference_q_lambda(rewards, dones, next_max_q, gamma, lam):
    """G_t = r_t + gamma (1 - d_t) [(1 - lam) maxQ(s_{t+1}) + lam G_{t+1}], G_T = maxQ(s_T), one env at a time."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for env in range(N):
        g = next_max_q[T - 1, env]
        for t in range(T - 1, -1, -1):
            g = rewards[t, env] + gamma * (1 - dones[t, env]) * ((1 - lam) * next_max_q[t, env] + lam * g)
            out[t, env] = g
    return out


def rollout(seed=0, T=19, N=5):
    rng = np.random.default_rng(seed)
    dones = (rng.random((T, N)) < 0.2).astype(np.float64)
    dones[T // 2, 0] = 1.0  # an episode end inside the rollout for sure
    return rng.normal(size=(T, N)), dones, rng.normal(size=(T, N))


def q_lambda(pqn, rewards, dones, next_max_q, gamma, lam):
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    return pqn.q_lambda_returns(t(rewards), t(dones), t(next_max_q), gamma, lam).numpy()


@pytest.mark.parametrize("lam", [0.65, 0.0, 1.0, 0.3])
def test_q_lambda_targets_match_a_plain_loop_across_episode_ends(pqn, lam):
    rewards, dones, next_max_q = rollout()
    np.testing.assert_allclose(q_lambda(pqn, rewards, dones, next_max_q, 0.99, lam),
                               reference_q_lambda(rewards, dones, next_max_q, 0.99, lam), atol=1e-12)


def test_lambda_0_is_one_step_td(pqn):
    rewards, dones, next_max_q = rollout(1)
    expected = rewards + 0.9 * (1 - dones) * next_max_q
    np.testing.assert_allclose(q_lambda(pqn, rewards, dones, next_max_q, 0.9, 0.0), expected, atol=1e-12)


def test_lambda_1_is_the_monte_carlo_return_of_each_episode(pqn):
    # one env, episodes of lengths 3 and 4, the second ending at the rollout's end: no bootstrap anywhere
    rewards = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]])
    dones = np.array([[0.0], [0.0], [1.0], [0.0], [0.0], [0.0], [1.0]])
    next_max_q = np.full((7, 1), 100.0)  # would show up if any step bootstrapped
    g = 0.5
    expected = [1 + g * 2 + g**2 * 3, 2 + g * 3, 3, 4 + g * 5 + g**2 * 6 + g**3 * 7, 5 + g * 6 + g**2 * 7, 6 + g * 7, 7]
    np.testing.assert_allclose(q_lambda(pqn, rewards, dones, next_max_q, g, 1.0)[:, 0], expected)
    # without an end the last target bootstraps from max_a Q(s_T, a)
    dones[-1] = 0.0
    assert q_lambda(pqn, rewards, dones, next_max_q, g, 1.0)[-1, 0] == pytest.approx(7 + g * 100.0)


def test_epsilon_decays_linearly_then_stays(pqn):
    assert pqn.linear_schedule(1.0, 0.01, 1000, 0) == 1.0
    assert pqn.linear_schedule(1.0, 0.01, 1000, 500) == pytest.approx(0.505)
    assert pqn.linear_schedule(1.0, 0.01, 1000, 1000) == pqn.linear_schedule(1.0, 0.01, 1000, 5000) == 0.01


def test_a_zero_exploration_duration_is_end_e_from_the_start(pqn):
    """--exploration-fraction 0 used to keep epsilon at 1.0 for the whole run (max(0 * t + start, end))."""
    assert [pqn.linear_schedule(1.0, 0.05, 0, t) for t in (0, 1, 10**6)] == [0.05, 0.05, 0.05]


@pytest.mark.parametrize("start, end", [(1.0, 0.01), (0.5, 0.5), (0.9, 0.0), (1.0, 1.0)])
def test_epsilon_stays_between_end_e_and_start_e(pqn, start, end):
    values = [pqn.linear_schedule(start, end, 1000.0, t) for t in range(0, 3000, 7)]
    assert all(end <= v <= start for v in values) and values[-1] == end


def test_epsilon_greedy_is_greedy_at_0_and_uniform_at_1(pqn):
    q = torch.tensor([[0.0, 2.0, 1.0]]).repeat(3000, 1)
    assert (pqn.epsilon_greedy(q, 0.0) == 1).all()
    counts = torch.bincount(pqn.epsilon_greedy(q, 1.0, torch.Generator().manual_seed(0)), minlength=3)
    assert (counts > 900).all() and (counts < 1100).all()


def test_optimizer_is_adam_as_table_1_says_and_radam_as_cleanrl_on_request(pqn):
    assert pqn.Args().optimizer == "adam" and pqn.OPTIMIZERS == {"adam": torch.optim.Adam, "radam": torch.optim.RAdam}


def test_recipe_keeps_the_minibatch_size_of_the_8_env_base(pqn):
    args = pqn.resolve_args(pqn.RunArgs(num_envs=32, scaling_recipe="more-minibatches"))
    assert (args.num_minibatches, args.minibatch_size, args.learning_rate) == (16, 256, 2.5e-4)


BAD_INPUT = [
    (["--q-lambda", "1.5"], "--q-lambda must lie in [0, 1]"),
    (["--end-e", "-0.1"], "--end-e must lie in [0, 1]"),
    (["--num-envs", "3", "--num-steps", "5"], "--num-minibatches 4 must be positive and divide the batch 15"),
    (["--max-grad-norm", "0"], "--max-grad-norm must be positive"),
    (["--env-id", "CartPole-v1"], "--env-id must be an envpool Atari id"),
    (["--scaling-recipe", "bigger"], "--scaling-recipe must be one of"),
    (["--start-e", "0.05", "--end-e", "0.9"], "--end-e 0.9 must not exceed --start-e 0.05"),
    (["--exploration-fraction", "1.5"], "--exploration-fraction must lie in [0, 1]"),
    (["--optimizer", "sgd"], "--optimizer must be one of adam, radam"),
    (["--learning-rate", "inf"], "--learning-rate must be a finite number"),
    (["--seed", "2147483648"], "--seed must lie in [0, 2^31)"),
    (["--hybrid-minibatch-factor", "2"], "--hybrid-minibatch-factor applies to --scaling-recipe hybrid only"),
    (["--max-grad-norm=-1"], "--max-grad-norm must be positive"),
    (["--coverage-samples", "65", "--dynamics-batch", "64"], "--coverage-samples must lie in [0, --dynamics-batch 64]"),
]


@pytest.mark.parametrize("argv, flag", BAD_INPUT)
def test_bad_input_is_refused_by_the_flag_checks(pqn, argv, flag):
    assert_refused(pqn, argv, flag)


@shared_runs(minutes=0.5)
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pqn")
    return (workdir, *run_ok(SCRIPT, TINY + ["--track", "--save-model", "--eval-episodes", "2"], workdir))


def test_tiny_run_logs_every_tag(tiny_run, pqn):
    workdir, run_dir, result, scalars, texts = tiny_run
    assert not set(EVERY_ITERATION + DYNAMICS) - set(scalars)
    assert all(len(scalars[tag]) == 4 for tag in EVERY_ITERATION)  # 512 // (4 * 32) iterations
    assert len(scalars["dynamics/feature_rank"]) == 3  # iterations 1, 2, 4
    assert all(1 <= r <= 512 for r in scalars["dynamics/feature_rank"])
    assert all(0 <= d <= 100 for d in scalars["dynamics/dormant_pct"])
    assert all(k >= 1 for k in scalars["dynamics/grad_kurtosis"])
    assert all(np.isfinite(scalars["losses/td_loss"])) and scalars["charts/epsilon"][-1] == pytest.approx(0.01)
    assert "|q_lambda|0.65|" in texts["hyperparameters/text_summary"][0]
    q_network = pqn.QNetwork(4)
    q_network.load_state_dict(torch.load(run_dir / f"{SCRIPT}.pt"))
    assert len(scalars["eval/episodic_return"]) == 2
    assert list((workdir / "wandb").glob("offline-run-*")), "wandb offline run missing"
    assert_coverage(workdir, [1, 2, 4], (21, 21), 512, samples=64)  # the whole dynamics/ sample


def test_no_exploration_schedule_and_radam_in_a_real_run(tmp_path):
    """--exploration-fraction 0 acts at end-e from the first step; --optimizer radam trains (CleanRL's optimiser)."""
    flags = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "256", "--dynamics-every", "0",
             "--exploration-fraction", "0", "--optimizer", "radam"]
    _, result, scalars, _ = run_ok(SCRIPT, flags, tmp_path)
    assert scalars["charts/epsilon"] == [pytest.approx(0.01)] * 2 and "radam" in result.stdout
