"""ppo_kinetix_sfl.py: learnability, top-K selection and the rho mix on hand-made numbers, the top K over 4
devices, the per-env minibatches, Kinetix's filtered level sampler, Table 3 presets and bad input. Real runs are
in test_ppo_kinetix_sfl_runs.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import assert_bad_input, assert_refused, assert_schedule_is_optax, at_fast_compile, load_script, run_copy

SCRIPT = "ppo_kinetix_sfl"
FOUR_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}


@pytest.fixture(scope="module")
def sfl():
    return load_script(SCRIPT)


def test_learnability_is_p_times_1_minus_p_of_finished_episodes(sfl):
    successes = jnp.array([0.0, 2.0, 4.0, 1.0, 0.0])
    episodes = jnp.array([4.0, 4.0, 4.0, 4.0, 0.0])  # the last level finished no episode: p = 0
    scores, p = sfl.learnability(successes, episodes)
    np.testing.assert_allclose(p, [0.0, 0.5, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(scores, [0.0, 0.25, 0.0, 0.1875, 0.0])


def test_buffer_score_is_kinetix_learnability_plus_a_thousandth_of_p(sfl):
    """Kinetix experiments/sfl.py: `learnability = learnability + success_rates * 0.001`, top by argsort."""
    p = jnp.array([0.0, 1.0, 0.5, 0.25, 0.75])
    np.testing.assert_allclose(sfl.buffer_score(p), p * (1 - p) + 0.001 * p, rtol=1e-6)
    # unsolved and solved levels both have p (1 - p) = 0: the solved one ranks first, as in Kinetix
    _, _, ids, _ = sfl.top_k_levels(sfl.buffer_score(p[:2]), p[:2], jnp.arange(2), {"x": jnp.arange(2)}, 1)
    assert ids.tolist() == [1]
    # 0.75 and 0.25 have equal p (1 - p); 0.75 ranks first
    _, _, ids, _ = sfl.top_k_levels(sfl.buffer_score(p), p, jnp.arange(5), {"x": jnp.arange(5)}, 3)
    assert ids.tolist() == [2, 4, 3]


def test_random_levels_come_from_kinetix_filtered_sampler_with_its_ppo_base_config(sfl):
    """--filter-levels draws what Kinetix's own sampler draws under configs/learning/ppo-base.yaml
    (filter_levels: true, level_filter_n_steps: 64, level_filter_sample_ratio: 2), key for key."""
    import jax
    from kinetix.environment import make_vmapped_filtered_level_sampler
    from kinetix.environment.env import make_kinetix_env
    from kinetix.environment.env_state import EnvParams
    from kinetix.environment.spaces import ActionType, ObservationType
    from kinetix.environment.ued.ued import make_reset_fn_sample_kinetix_level
    from kinetix.environment.utils import static_env_params_from_size

    args = sfl.resolve_args(sfl.RunArgs(env_size="s", model="mlp", num_envs=8, sfl_num_candidates=8, sfl_buffer_size=4,
                                     level_filter_pool=4), num_devices=1)
    sample_levels = sfl.make_env(args).sample_levels
    ours = at_fast_compile(lambda key: sample_levels(key, 4), jax.random.PRNGKey(7))
    static_params, env_params = static_env_params_from_size("s"), EnvParams(dense_reward_scale=0.2)
    env = make_kinetix_env(ActionType.MULTI_DISCRETE, ObservationType.SYMBOLIC_FLAT, None, env_params, static_params)
    sample_level = make_reset_fn_sample_kinetix_level(env_params, static_params, physics_engine=env.physics_engine)
    config = {"filter_levels": True, "level_filter_n_steps": 64, "level_filter_sample_ratio": 2, "env_size_name": "s"}
    kinetix_sampler = make_vmapped_filtered_level_sampler(sample_level, env_params, static_params, config, env)
    kinetix = at_fast_compile(lambda key: kinetix_sampler(key, 4), jax.random.PRNGKey(7))
    assert len(jax.tree.leaves(ours)) == len(jax.tree.leaves(kinetix))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(kinetix)):
        np.testing.assert_array_equal(a, b)


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


TOP_K_OVER_4_DEVICES = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
sys.path.insert(0, sys.argv[1])
from benchmark.common import load_script
sfl = load_script("ppo_kinetix_sfl")
rng = np.random.default_rng(0)
n, k = 24, 10  # 6 candidates on each of 4 devices, k larger than that
scores = jnp.asarray(rng.choice([0.0, 0.09, 0.1875, 0.25], n), jnp.float32)  # many ties
p, ids = jnp.asarray(rng.random(n), jnp.float32), jnp.arange(n) + 100
levels = {"id": ids * 10, "minus_zero": -jnp.zeros(n), "flag": ids % 3 == 0, "x": jnp.asarray(rng.normal(size=(n, 2)), jnp.float32)}
mesh = Mesh(np.array(jax.devices()), ("d",))
top = jax.jit(jax.shard_map(lambda *a: sfl.top_k_over_devices(*a, k), mesh=mesh, in_specs=P("d"), out_specs=P(), check_vma=False))
got, want = top(scores, p, ids, levels), sfl.top_k_levels(scores, p, ids, levels, k)
assert len(jax.devices()) == 4
for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(a, b)
assert np.signbit(np.asarray(got[3]["minus_zero"])).all()  # a signed zero survives the psum
print("same top k")
"""


def test_top_k_over_four_devices_is_the_top_k_of_all_candidates(tmp_path):
    """Local top k, gathered (score, p, id), winners' levels assembled by a psum: the same buffer as one device's."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([sys.executable, "-c", TOP_K_OVER_4_DEVICES, str(Path(__file__).resolve().parents[1])],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ, **FOUR_DEVICES))
    assert result.returncode == 0 and "same top k" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("rho, n", [(0.5, 16), (0.25, 12), (0.0, 8), (1.0, 8), (0.3, 10)])
def test_rho_of_the_envs_take_buffer_levels_spread_evenly(sfl, rho, n):
    mask = np.asarray(sfl.from_buffer_mask(jnp.arange(n), rho))
    assert mask.sum() == np.floor(n * rho)
    halves = [mask[: n // 2].sum(), mask[n // 2 :].sum()]
    assert abs(halves[0] - halves[1]) <= 1


@pytest.mark.parametrize("envs, devices, rho, fresh", [(16, 4, 0.5, 2), (16, 2, 0.25, 6), (8, 1, 0.0, 8), (8, 2, 1.0, 0)])
def test_buffer_positions_split_evenly_over_devices(sfl, envs, devices, rho, fresh):
    fresh_pos, buffer_pos = sfl.buffer_positions(envs, devices, rho)
    assert fresh_pos.shape == (devices, fresh) and buffer_pos.shape == (devices, envs // devices - fresh)
    mask = sfl.from_buffer_mask(np.arange(envs), rho).reshape(devices, -1)
    for d in range(devices):  # the same global envs take buffer levels however the envs are split
        assert not mask[d, fresh_pos[d]].any() and mask[d, buffer_pos[d]].all()


def test_buffer_positions_refuse_an_uneven_split(sfl):
    with pytest.raises(sfl.BadFlag, match="rho x envs per device must be a whole number"):
        sfl.buffer_positions(10, 2, 0.3)  # ids 3 | 6, 9 take buffer levels: 1 on one device, 2 on the other


def test_every_minibatch_holds_buffer_levels_at_rate_rho_when_minibatches_outnumber_steps(sfl):
    """App. D's 1M config has M = 4T: each minibatch's buffer share must be rho within sampling error, not 0 or 1
    (envs used to be grouped by index mod M / T, the same index the buffer mask uses)."""
    import jax

    envs, steps, minibatches = 1024, 4, 16
    from_buffer = sfl.from_buffer_mask(np.arange(envs), 0.5)
    memberships = []
    for epoch in range(4):
        ids = np.asarray(sfl.minibatch_ids(jax.random.PRNGKey(epoch), jnp.arange(envs), steps, minibatches))
        share = np.array([from_buffer[np.nonzero(ids == m)[1]].mean() for m in range(minibatches)])
        # 256 envs per minibatch, one from each block of 4 ids: sd = sqrt(0.5 * 0.5 / 256) ~ 0.031
        assert np.abs(share - 0.5).max() < 0.16, share
        memberships.append(ids[0] // steps)  # each env's group this epoch
    assert not all((m == memberships[0]).all() for m in memberships[1:])  # new groups every epoch


@pytest.mark.parametrize("steps, minibatches, envs", [(16, 4, 6), (16, 16, 3), (4, 8, 8), (4, 16, 8)])
def test_minibatches_are_equal_and_do_not_depend_on_how_envs_are_split(sfl, steps, minibatches, envs):
    import jax

    ids = sfl.minibatch_ids(jax.random.PRNGKey(3), jnp.arange(envs), steps, minibatches)
    assert ids.shape == (steps, envs)
    counts = np.bincount(np.asarray(ids).ravel(), minlength=minibatches)
    assert len(counts) == minibatches and (counts == steps * envs // minibatches).all()
    half = sfl.minibatch_ids(jax.random.PRNGKey(3), jnp.arange(envs // 2, envs), steps, minibatches)
    np.testing.assert_array_equal(half, ids[:, envs // 2 :])  # a device holding the second half builds the same
    for device in range(2):  # and each half (a device's share) holds an equal part of every minibatch
        part = np.bincount(np.asarray(ids)[:, device * envs // 2 : (device + 1) * envs // 2].ravel(), minlength=minibatches)
        assert (part == part[0]).all()


def test_ewma_and_loss_are_the_same_as_ppo_ewma_jax(sfl):
    """The SFL script's copy of PPO-EWMA's loss and EWMA (CleanRL's bargain) equals ppo_ewma_jax.py's, which is
    tested against openai/ppo-ewma."""
    ewma = load_script("ppo_ewma_jax")
    rng = np.random.default_rng(0)
    behav = rng.normal(-3, 2, 128)
    new, prox, adv = behav + rng.normal(0, 2.5, 128), behav + rng.normal(0, 2.5, 128), rng.normal(0, 1, 128)
    for imp_samp_max in (100.0, 0.0):
        args = [jnp.asarray(x, jnp.float32) for x in (new, prox, behav, adv)] + [0.2, imp_samp_max]
        for a, b in zip(sfl.decoupled_policy_loss(*args), ewma.decoupled_policy_loss(*args)):
            np.testing.assert_array_equal(a, b)
    prox_params, params = {"w": jnp.ones(3)}, {"w": jnp.arange(3.0)}
    for correction in (True, False):
        a, b = (m.ewma_update(prox_params, params, 0.9, jnp.array(2.0), correction) for m in (sfl, ewma))
        np.testing.assert_array_equal(a[0]["w"], b[0]["w"])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("preset, expected", [
    ("2048", (2048, 12288, 128, 1024)), ("8192", (8192, 262144, 256, 8192)),
    ("65536", (65536, 262144, 32, 8192)), ("1m", (1048576, 4194304, 2, 8192)),
])
def test_presets_are_table_3(sfl, preset, expected):
    """(Resolved over 64 devices: on one, the largest presets' batches are refused as more than this machine's memory.)"""
    args = sfl.resolve_args(sfl.RunArgs(sfl_preset=preset), num_devices=64)
    assert (args.num_envs, args.sfl_num_candidates, args.sfl_update_period, args.sfl_buffer_size) == expected
    assert (args.sfl_rollout_length, args.sfl_sample_ratio, args.learning_rate, args.num_minibatches) == (512, 0.5, 5e-5, 32)


def test_explicit_flags_override_the_preset(sfl):
    args = sfl.resolve_args(sfl.RunArgs(sfl_preset="65536", num_envs=4096, sfl_buffer_size=100), num_devices=1)
    assert (args.num_envs, args.sfl_num_candidates, args.sfl_update_period, args.sfl_buffer_size) == (4096, 262144, 32, 100)


@pytest.mark.parametrize("argv, flag, env", [
    (["--num-envs", "6", "--sfl-num-candidates", "12", "--sfl-buffer-size", "4"], "--num-envs 6 must be divisible by the 4 devices", FOUR_DEVICES),
    (["--sfl-buffer-size", "20000"], "--sfl-buffer-size 20000 must not exceed --sfl-num-candidates 12288", None),
    (["--sfl-sample-ratio", "1.5"], "--sfl-sample-ratio must lie in [0, 1]", None),
    (["--sfl-preset", "4096"], "--sfl-preset must be one of", None),
    (["--sfl-num-candidates", "3000"], "must be a multiple of --num-envs", None),
    (["--num-steps", "12", "--num-minibatches", "8"], "--num-minibatches 8 must divide --num-steps 12", None),
    (["--model", "cnn"], "--model must be one of transformer, mlp", None),
    (["--process-id", "1"], "--process-id only applies with --distributed", None),
    (["--distributed"], "--distributed needs --coordinator-address, --num-processes and --process-id here", None),
    (["--distributed", "--num-processes", "2", "--process-id", "2"], "--process-id must lie in [0, --num-processes)", None),
    (["--resume", "missing.npz"], "--resume missing.npz: no such file", None),
    (["--max-grad-norm", "0"], "--max-grad-norm must be positive", None),
    (["--seed", "-1"], "--seed must lie in [0, 2**31)", None),
    (["--seed", str(2**31)], "--seed must lie in [0, 2**31)", None),
    (["--max-grad-norm", "-1"], "--max-grad-norm must be positive", None),
    (["--learning-rate", "inf"], "--learning-rate must be a finite number", None),
    (["--ewma-com", "inf"], "--ewma-com must be a finite number", None),
    (["--vf-clip-coef", "0"], "--vf-clip-coef must be positive", None),
    (["--imp-samp-max", "0.5"], "--imp-samp-max must be 0 (no bound) or >= 1", None),
    (["--num-envs", "8", "--sfl-num-candidates", "16", "--sfl-buffer-size", "4", "--sfl-sample-ratio", "0.25"],
     "rho x envs per device must be a whole number", FOUR_DEVICES),
    (["--num-envs", "8", "--sfl-num-candidates", "16", "--sfl-buffer-size", "4", "--level-filter-pool", "512"],
     "--level-filter-pool 512 must divide", None),
    (["--level-filter-pool", "0"], "--level-filter-pool must be positive", None),
    (["--num-envs", str(2**31)], "--num-envs must be below 2^31 (got 2147483648)", None),
    (["--num-envs", "1048576", "--num-steps", "2048", "--sfl-num-candidates", "1048576", "--sfl-buffer-size", "4"],
     "--num-envs x --num-steps per device must be below 2^31", None),
    # a lone process of two: refused at once, not after jax.distributed.initialize waited for the other (5 minutes)
    (["--distributed", "--coordinator-address", "localhost:29517", "--num-processes", "2", "--process-id", "0",
      "--num-envs", "0"], "--num-envs must be positive (got 0)", None),
])
def test_bad_input_is_refused(sfl, tmp_path, argv, flag, env):
    """The rules resolve_args checks, in this process (over the devices the run would have); those of --distributed that
    only a starting process can check (jax.distributed.initialize's, and every other rule before it waits for the
    others), as a subprocess: exit 2, one line, nothing written."""
    if argv == ["--distributed"] or "--coordinator-address" in argv:
        return assert_bad_input(run_copy(SCRIPT, argv, tmp_path, timeout=120, extra_env=env), tmp_path, flag)
    assert_refused(sfl, argv, flag, num_devices=4 if env == FOUR_DEVICES else 1)


def test_a_batch_that_cannot_fit_in_memory_is_refused_with_its_size(sfl):
    envs, steps = 1_048_576, 2047  # just under 2^31 transitions of size s's 560-byte observation (and 64 bytes of numbers)
    flags = ["--num-envs", str(envs), "--num-steps", str(steps), "--sfl-num-candidates", str(envs), "--sfl-buffer-size", "4",
             "--env-size", "s", "--model", "mlp"]
    assert_refused(sfl, flags, f"--num-envs {envs} x --num-steps {steps}: a device's batch alone takes 1,247.4 GiB or more")


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_the_observation_sizes_the_memory_check_uses_are_kinetix_own(sfl, model):
    args = sfl.resolve_args(sfl.RunArgs(env_size="s", model=model, num_envs=8, sfl_num_candidates=16, sfl_buffer_size=4),
                            num_devices=1)
    obs = sfl.make_env(args).example_obs
    assert sfl.OBS_BYTES["s", model] == sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(obs))


def test_before_jax_distributed_a_batch_that_only_fits_on_several_devices_passes(sfl):
    """Checked before jax.distributed.initialize (num_devices 0: the count is unknown), 2^31 transitions are not refused:
    over two devices each holds 2^30; the check after it, with the count, decides."""
    args = dict(num_envs=2**20, num_steps=2048, sfl_num_candidates=2**20, sfl_buffer_size=4, env_size="s", model="mlp")
    sfl.resolve_args(sfl.RunArgs(**args), num_devices=0)
    with pytest.raises(sfl.BadFlag, match="--num-envs x --num-steps per device must be below 2"):
        sfl.resolve_args(sfl.RunArgs(**args), num_devices=1)


@pytest.mark.parametrize("num_envs, devices, pool", [(2048, 1, 512), (16, 1, 8), (24, 1, 12), (48, 4, 6), (4096, 2, 512)])
def test_the_default_level_filter_pool_divides_every_valid_num_envs(sfl, num_envs, devices, pool):
    """Kinetix's 512 where it divides each device's fresh levels (rho = 0.5: half its envs) and envs, else the largest
    pool that does: a valid --num-envs needs no --level-filter-pool."""
    args = sfl.resolve_args(sfl.RunArgs(num_envs=num_envs, sfl_num_candidates=num_envs, sfl_buffer_size=4, num_steps=16,
                                     num_minibatches=2), num_devices=devices)
    assert args.level_filter_pool == pool


@pytest.mark.parametrize("flags, bound", [({}, 0.0), ({"ewma_com": 4.0}, 100.0), ({"imp_samp_max": 10.0}, 10.0)])
def test_the_ratio_is_bounded_by_default_only_in_ppo_ewma(sfl, flags, bound):
    """openai/ppo-ewma's 100 with --ewma-com; PPO mode unbounded by default, as Kinetix's own PPO."""
    assert sfl.resolve_args(sfl.RunArgs(**flags), num_devices=1).imp_samp_max == bound


def test_a_grid_over_lr_epsilon_com_or_budget_shares_one_program_and_traces_kinetix_once(sfl):
    """The float flags a grid varies are arguments of the compiled update, not constants in it: other values (and
    another budget, whose lr annealing spans other updates) lower to the same program, which the persistent cache
    then serves; a flag that shapes the program does not. Kinetix's step and level sampler, slow to trace, are traced
    once in the process: the update's rollout and SFL's candidate rollouts (both num-envs wide) share the step, the
    update's fresh levels and SFL's candidates (drawn in pieces of the update's size) the sampler, and another grid
    point traces neither again. (That the traced flags train as the constants did: a tiny run before and after the
    change gave the same numbers, KL aside at 2e-4 relative; the learning-rate schedule is tested below.)"""
    import jax

    calls = {"step": 0, "sample_levels": 0}

    def counted(name, fn):
        def traced(*a):
            calls[name] += 1
            return fn(*a)
        return traced

    def lowered(**flags):
        args = sfl.resolve_args(sfl.RunArgs(env_size="s", model="mlp", num_envs=8, num_steps=4, num_minibatches=2,
                                          update_epochs=1, sfl_num_candidates=16, sfl_buffer_size=4, sfl_rollout_length=4,
                                          level_filter_pool=4, **{"total_timesteps": 32 * 10, **base, **flags}), num_devices=1)
        init, update, sfl_update, evaluate, _ = sfl.make_train(args, env)
        init, update, sfl_update, _ = sfl.over_devices(init, update, sfl_update, evaluate, Mesh(np.array(jax.devices()), ("d",)))
        key = jax.random.PRNGKey(0)
        shared, buffer = jax.eval_shape(lambda: (init(key), sfl_update(init(key), key)))
        return update.lower(shared, buffer, sfl.hyperparameters(args)).as_text()

    from jax.sharding import Mesh

    base = dict(ewma_com=100.0, anneal_lr=True)
    env = sfl.make_env(sfl.resolve_args(sfl.RunArgs(env_size="s", model="mlp", num_envs=8, sfl_num_candidates=8,
                                                 sfl_buffer_size=4, level_filter_pool=4), num_devices=1))
    env = env._replace(step=counted("step", env.step), sample_levels=counted("sample_levels", env.sample_levels))
    program = lowered()
    assert calls == {"step": 1, "sample_levels": 1}
    assert lowered(learning_rate=1e-4, clip_coef=0.1, vf_clip_coef=0.5, ewma_com=10.0, total_timesteps=32 * 30, gamma=0.9,
                   gae_lambda=0.8, ent_coef=0.02, vf_coef=1.0, max_grad_norm=1.0) == program
    assert lowered(hidden_size=32) != program
    assert calls == {"step": 1, "sample_levels": 1}


@pytest.mark.parametrize("anneal", [True, False])
def test_learning_rate_schedule_is_optax_linear_schedule(sfl, anneal):
    def args_and_schedule(lr):
        args = sfl.resolve_args(sfl.RunArgs(env_size="s", model="mlp", num_envs=8, num_steps=4, num_minibatches=2,
                                         update_epochs=2, sfl_num_candidates=16, sfl_buffer_size=4, level_filter_pool=4,
                                         total_timesteps=32 * 7, learning_rate=lr, anneal_lr=anneal), num_devices=1)
        return args, sfl.make_train(args, sfl.Env(*[None] * 4, (1,), 1, None))[4]  # the schedule reads no env

    assert_schedule_is_optax(sfl, args_and_schedule, anneal)


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_the_example_observation_is_a_sampled_levels(sfl, model):
    """make_env takes the observation's shapes from Kinetix's empty level (no traced sampler): those of a sampled one."""
    import jax

    env = sfl.make_env(sfl.resolve_args(sfl.RunArgs(env_size="s", model=model, num_envs=8, sfl_num_candidates=8,
                                                 sfl_buffer_size=4, filter_levels=False), num_devices=1))
    key = jax.random.PRNGKey(0)
    sampled = jax.eval_shape(lambda: env.reset(key, jax.tree.map(lambda x: x[0], env.sample_levels(key, 1)))[0])
    assert sampled == env.example_obs


@pytest.mark.parametrize("model, num_layers", [("mlp", 5), ("transformer", 5), ("transformer", 2)])
def test_the_actors_update_norm_covers_what_the_policy_depends_on(sfl, model, num_layers):
    """charts/update_norm_actor's parameters (actor_part, by name): each one the logits' gradient reaches, or none of the
    two heads' gradients does (an entity encoder of a kind the empty level lacks); left out, only those the value's
    gradient alone reaches (the critic's tower and head). Gradients at initial parameters on Kinetix's empty level."""
    from flax.traverse_util import flatten_dict
    from kinetix.environment.utils import create_empty_env, static_env_params_from_size

    args = sfl.resolve_args(sfl.RunArgs(env_size="s", model=model, num_layers=num_layers, num_envs=8, sfl_num_candidates=8,
                                     sfl_buffer_size=4, filter_levels=False), num_devices=1)
    env = sfl.make_env(args)
    obs = jax.tree.map(lambda x: x[None], env.reset(jax.random.PRNGKey(0), create_empty_env(static_env_params_from_size("s")))[0])
    network = (sfl.ActorCriticMLP if model == "mlp" else sfl.ActorCriticTransformer)(env.action_dims, args.hidden_size, num_layers)
    params = network.init(jax.random.PRNGKey(1), obs)
    reached = [{k for k, g in flatten_dict(jax.grad(lambda p: network.apply(p, obs)[head].sum())(params)["params"]).items()
                if np.any(np.asarray(g) != 0)} for head in (0, 1)]
    actor = set(sfl.actor_part(params, model, num_layers))
    everything = set(flatten_dict(params["params"]))
    assert reached[0] <= actor and not (actor - reached[0]) & reached[1]
    assert everything - actor == reached[1] - reached[0] and everything - actor  # the critic's own, some of them
