"""ppo_kinetix_sfl.py: learnability, top-K selection and the rho mix on hand-made numbers, the per-env
minibatches, Table 3 presets, bad input, a tiny end-to-end run on real Kinetix levels from a copy of
the script, and the same run on 4 forced host devices giving the same training."""
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_bad_input, load_script, run_copy, run_ok

SCRIPT = "ppo_kinetix_sfl"
FOUR_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
TINY = ["--env-size", "s", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
        "--sfl-num-candidates", "16", "--sfl-update-period", "2", "--sfl-buffer-size", "4", "--sfl-rollout-length", "16",
        "--num-eval-levels", "8", "--total-timesteps", "384"]
EVERY_UPDATE = ["losses/approx_kl", "charts/ddr", "losses/policy_loss", "losses/value_loss", "losses/entropy",
                "losses/clipfrac", "losses/grad_norm", "charts/SPS", "charts/learning_rate"]
TRAINING = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/grad_norm", "charts/episodic_return"]


@pytest.fixture(scope="module")
def sfl():
    return load_script(SCRIPT)


def test_learnability_is_p_times_1_minus_p_of_finished_episodes(sfl):
    successes = jnp.array([0.0, 2.0, 4.0, 1.0, 0.0])
    episodes = jnp.array([4.0, 4.0, 4.0, 4.0, 0.0])  # the last level finished no episode: p = 0
    scores, p = sfl.learnability(successes, episodes)
    np.testing.assert_allclose(p, [0.0, 0.5, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(scores, [0.0, 0.25, 0.0, 0.1875, 0.0])


def test_top_k_keeps_the_most_learnable_levels_best_first_and_breaks_ties_by_index(sfl):
    scores = jnp.array([0.1, 0.25, 0.0, 0.25, 0.1875, 0.1])
    p = jnp.linspace(0, 1, 6)
    ids = jnp.arange(6) + 100
    levels = {"x": jnp.arange(6) * 10}
    top_scores, top_p, top_ids, top_levels = sfl.top_k_levels(scores, p, ids, levels, 4)
    np.testing.assert_allclose(top_scores, [0.25, 0.25, 0.1875, 0.1])
    np.testing.assert_array_equal(top_ids, [101, 103, 104, 100])
    np.testing.assert_array_equal(top_levels["x"], [10, 30, 40, 0])
    np.testing.assert_allclose(top_p, p[jnp.array([1, 3, 4, 0])])


def test_top_k_of_local_top_ks_is_the_global_top_k(sfl):
    rng = np.random.default_rng(0)
    scores = jnp.asarray(rng.choice([0.0, 0.09, 0.25], size=64))  # many ties
    ids, p, levels = jnp.arange(64), jnp.zeros(64), {"x": jnp.arange(64)}
    whole = sfl.top_k_levels(scores, p, ids, levels, 8)
    parts = [sfl.top_k_levels(scores[i::4], p[i::4], ids[i::4], {"x": levels["x"][i::4]}, 8) for i in range(4)]
    gathered = [jnp.concatenate([part[j] for part in parts]) for j in range(3)] + [{"x": jnp.concatenate([part[3]["x"] for part in parts])}]
    split = sfl.top_k_levels(*gathered, 8)
    np.testing.assert_array_equal(whole[2], split[2])


@pytest.mark.parametrize("rho, n", [(0.5, 16), (0.25, 12), (0.0, 8), (1.0, 8), (0.3, 10)])
def test_rho_of_the_envs_take_buffer_levels_spread_evenly(sfl, rho, n):
    mask = np.asarray(sfl.from_buffer_mask(jnp.arange(n), rho))
    assert mask.sum() == np.floor(n * rho)
    halves = [mask[: n // 2].sum(), mask[n // 2 :].sum()]
    assert abs(halves[0] - halves[1]) <= 1


@pytest.mark.parametrize("steps, minibatches, envs", [(16, 4, 6), (16, 16, 3), (4, 8, 6), (4, 16, 8)])
def test_minibatches_are_equal_and_do_not_depend_on_how_envs_are_split(sfl, steps, minibatches, envs):
    import jax

    ids = sfl.minibatch_ids(jax.random.PRNGKey(3), jnp.arange(envs), steps, minibatches)
    assert ids.shape == (steps, envs)
    counts = np.bincount(np.asarray(ids).ravel(), minlength=minibatches)
    assert len(counts) == minibatches and (counts == steps * envs // minibatches).all()
    half = sfl.minibatch_ids(jax.random.PRNGKey(3), jnp.arange(envs // 2, envs), steps, minibatches)
    np.testing.assert_array_equal(half, ids[:, envs // 2 :])  # a device holding envs 3..5 builds the same


@pytest.mark.parametrize("preset, expected", [
    ("2048", (2048, 12288, 128, 1024)), ("8192", (8192, 262144, 256, 8192)),
    ("65536", (65536, 262144, 32, 8192)), ("1m", (1048576, 4194304, 2, 8192)),
])
def test_presets_are_table_3(sfl, preset, expected):
    args = sfl.resolve_args(sfl.Args(sfl_preset=preset), num_devices=1)
    assert (args.num_envs, args.sfl_num_candidates, args.sfl_update_period, args.sfl_buffer_size) == expected
    assert (args.sfl_rollout_length, args.sfl_sample_ratio, args.learning_rate, args.num_minibatches) == (512, 0.5, 5e-5, 32)


def test_explicit_flags_override_the_preset(sfl):
    args = sfl.resolve_args(sfl.Args(sfl_preset="65536", num_envs=4096, sfl_buffer_size=100), num_devices=1)
    assert (args.num_envs, args.sfl_num_candidates, args.sfl_update_period, args.sfl_buffer_size) == (4096, 262144, 32, 100)


@pytest.mark.parametrize("argv, flag, env", [
    (["--num-envs", "6", "--sfl-num-candidates", "12", "--sfl-buffer-size", "4"], "--num-envs 6 must be divisible by the 4 devices", FOUR_DEVICES),
    (["--sfl-buffer-size", "20000"], "--sfl-buffer-size 20000 must not exceed --sfl-num-candidates 12288", None),
    (["--sfl-sample-ratio", "1.5"], "--sfl-sample-ratio must lie in [0, 1]", None),
    (["--sfl-preset", "4096"], "--sfl-preset must be one of", None),
    (["--sfl-num-candidates", "3000"], "must be a multiple of --num-envs", None),
    (["--num-steps", "12", "--num-minibatches", "8"], "--num-minibatches 8 must divide --num-steps 12", None),
])
def test_bad_input_exits_2_with_one_line(tmp_path, argv, flag, env):
    assert_bad_input(run_copy(SCRIPT, argv, tmp_path, timeout=120, extra_env=env), tmp_path, flag)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return run_ok(SCRIPT, TINY + ["--eval-every", "2"], tmp_path_factory.mktemp("sfl1"))


def test_tiny_run_logs_every_tag(tiny_run):
    _, result, scalars, _ = tiny_run
    assert "on 1 device(s)" in result.stdout
    assert all(len(scalars[tag]) == 3 for tag in EVERY_UPDATE)  # 384 // (8 * 16) updates
    assert len(scalars["sfl/mean_learnability"]) == 2  # before updates 1 and 3 (T = 2)
    assert all(0 <= v <= 0.25 for v in scalars["sfl/mean_learnability"])
    assert all(0 <= v <= 1 for v in scalars["sfl/buffer_solve_rate"])
    for tag in ["eval/solve_rate_sampled", "eval/solve_rate_handmade"]:
        assert len(scalars[tag]) == 2 and all(0 <= v <= 1 for v in scalars[tag])  # updates 2 and 3
    handmade = [tag for tag in scalars if tag.startswith("eval_handmade/")]
    assert len(handmade) == 10  # Kinetix ships 10 hand-designed levels of size s
    np.testing.assert_allclose(np.mean([scalars[t] for t in handmade], axis=0), scalars["eval/solve_rate_handmade"], rtol=1e-6)
    np.testing.assert_allclose(scalars["charts/ddr"], [128 / kl for kl in scalars["losses/approx_kl"]], rtol=1e-4)


def test_four_devices_train_like_one(tiny_run, tmp_path):
    _, _, one, _ = tiny_run
    _, result, four, _ = run_ok(SCRIPT, TINY + ["--eval-every", "0"], tmp_path, extra_env=FOUR_DEVICES)
    assert "on 4 device(s)" in result.stdout
    for tag in TRAINING + ["sfl/mean_learnability"]:
        np.testing.assert_allclose(four[tag], one[tag], rtol=1e-3, atol=1e-6, err_msg=tag)
    np.testing.assert_allclose(four["losses/approx_kl"], one["losses/approx_kl"], rtol=2e-2, atol=1e-7)
