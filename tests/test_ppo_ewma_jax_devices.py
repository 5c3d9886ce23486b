"""ppo_ewma_jax.py over several devices, from copies of the script on forced host devices
(--xla_force_host_platform_device_count): one run on 1, 2 and 4 devices at the same total envs trains alike (the same
episodes, losses and parameters, up to float summation order), with --num-seeds; a checkpoint of 4 devices resumes on
1; the device flags' rules; the per-env dealing against the whole-batch one."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from benchmark.common import ROOT
from helpers import (FAST_COMPILE, assert_refused, finish, load_script, read_values, run_dirs, shared_runs,
                     start_copy, stop_one_of_two_tasks_then_resume)

SCRIPT = "ppo_ewma_jax"
pytestmark = pytest.mark.usefixtures("fast_compile")
# CartPole: 8 envs of 16 steps, 32 minibatches (blocks of 2 envs fill them: one block a device at 4 devices), 3
# iterations of 2 epochs; PPO-EWMA, ReLU units; every metric each iteration on 100 of the 128 states (a device has 32 at
# 4 devices); 2 seeds
TINY = ["--env-id", "CartPole-v1", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "32", "--update-epochs", "2",
        "--total-timesteps", str(8 * 16 * 3), "--ewma-com", "4", "--activation", "relu", "--dynamics-every", "1",
        "--dynamics-batch", "100", "--num-seeds", "2", "--shuffle", "per-env", "--save-every", "1", "--keep-checkpoints", "0"]
# what the runs must agree on: the data (episodes), the losses, the KL and the App. B metrics
TRAINING = ["charts/episodic_return", "charts/episodic_length", "losses/policy_loss", "losses/value_loss", "losses/entropy",
            "losses/approx_kl", "losses/prox_kl", "losses/clipfrac", "losses/imp_samp_clipfrac", "losses/grad_norm",
            "losses/grad_norm_actor", "charts/update_norm", "charts/update_norm_actor", "losses/explained_variance",
            "dynamics/weight_norm", "dynamics/feature_rank", "dynamics/dormant_pct", "dynamics/feature_rank_critic",
            "dynamics/dormant_pct_critic", "dynamics/policy_variance", "dynamics/ess_pct", "dynamics/grad_kurtosis"]


def devices(n):
    return {"XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count={n}"}


@shared_runs(minutes=4)
def runs(tmp_path_factory, fast_compile):
    """The tiny run on 1, 2 and 4 devices (two at a time: 2 cores), then the 4-device run's checkpoint after iteration 2
    resumed on 1 device."""
    dirs = {n: tmp_path_factory.mktemp(f"devices_{n}") for n in (1, 2, 4)}
    results = {}
    for batch in ((1, 2), (4,)):
        started = {n: start_copy(SCRIPT, TINY, dirs[n], extra_env=devices(n)) for n in batch}
        results.update({n: finish(process, 900) for n, process in started.items()})
    for n, result in results.items():
        assert result.returncode == 0, result.stderr[-3000:]
    four = run_dirs(dirs[4])[0]
    resumed = tmp_path_factory.mktemp("resumed_on_1")
    result = finish(start_copy(SCRIPT, TINY + ["--resume", str(four / "checkpoints" / "iter_2.npz")], resumed,
                               extra_env=devices(1)), 900)
    assert result.returncode == 0, result.stderr[-3000:]
    results["resumed"], dirs["resumed"] = result, resumed
    return {n: (results[n], [read_values(d)[0] for d in run_dirs(dirs[n])], run_dirs(dirs[n])) for n in results}


def assert_alike(many, one, iterations=slice(None)):
    for tag in TRAINING:
        np.testing.assert_allclose(many[tag][iterations], one[tag][iterations], rtol=1e-3, atol=1e-5, err_msg=tag)


@pytest.mark.parametrize("n", [2, 4])
def test_two_and_four_devices_train_as_one_device(runs, n):
    result, seeds, _ = runs[n]
    assert f"{n} devices in 1 process(es), shuffle per-env" in result.stdout
    assert len(seeds) == 2  # --num-seeds composes with the devices
    for many, one in zip(seeds, runs[1][1]):
        assert all(len(many[tag]) == 3 for tag in TRAINING)
        assert_alike(many, one)
    assert seeds[0]["losses/policy_loss"] != seeds[1]["losses/policy_loss"]  # two seeds, two runs


@pytest.mark.parametrize("n", [2, 4])
def test_the_parameters_after_each_iteration_are_one_devices(runs, n):
    ewma = load_script(SCRIPT)
    (run, _), (lone, _) = runs[n][2], runs[1][2]  # the checkpoint of both seeds: in the first seed's run
    for iteration in (1, 3):
        many, one = (ewma.read_checkpoint(d / "checkpoints" / f"iter_{iteration}.npz")[1] for d in (run, lone))
        assert len(many) == len(one) > 10
        for a, b in zip(many, one):  # the whole state: parameters, optimiser, EWMA, envs, keys, morphologies
            assert a.shape == b.shape and a.dtype == b.dtype
            if a.dtype.kind == "f":
                np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
            else:  # the envs' integers, the keys
                np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_four_devices_resumes_on_one(runs):
    result, seeds, _ = runs["resumed"]
    assert "shuffle per-env" in result.stdout and "devices in" not in result.stdout
    for resumed, one in zip(seeds, runs[1][1]):
        assert all(len(resumed[tag]) == 1 for tag in TRAINING)  # iteration 3 alone
        assert_alike({tag: resumed[tag] for tag in TRAINING}, {tag: one[tag][2:] for tag in TRAINING})


@pytest.mark.parametrize("flags, devices_, message", [
    (["--num-envs", "6"], 4, "--num-envs 6 must be divisible by the 4 devices"),
    (["--shuffle", "batch"], 2, "--shuffle batch deals the whole batch on one device: on 2 devices use per-env"),
    (["--num-envs", "8", "--num-steps", "4", "--num-minibatches", "16"], 4,
     "--shuffle per-env: the 2 envs per device must be a multiple of --num-minibatches / gcd(--num-minibatches, "
     "--num-steps) = 4 (the envs whose steps fill every minibatch equally)"),
    (["--shuffle", "rows"], 1, "--shuffle must be one of auto, batch, per-env"),
    (["--num-devices", "2"], 1, "--num-devices is computed from the other flags"),
])
def test_device_flag_rules(flags, devices_, message):
    ewma = load_script(SCRIPT)
    argv = ["--env-id", "CartPole-v1", "--num-envs", "8", "--num-steps", "32", "--num-minibatches", "4"]
    shuffle = [] if "--shuffle" in flags else ["--shuffle", "per-env"]
    assert_refused(ewma, argv + shuffle + flags, message, num_devices=devices_)


@pytest.mark.parametrize("devices_, expected", [(1, "batch"), (2, "per-env"), (0, "auto")])
def test_auto_shuffle_is_the_whole_batch_on_one_device_and_per_env_on_several(devices_, expected):
    """A count not known yet (a launcher's check, or before jax.distributed) leaves auto to the run: a run's identity
    in the launcher's store then says so, rather than guessing one device."""
    ewma = load_script(SCRIPT)
    args = ewma.resolve_args(ewma.RunArgs(env_id="CartPole-v1", num_envs=8, num_steps=32, num_minibatches=4), num_devices=devices_)
    assert args.shuffle == expected and args.num_devices == max(devices_, 1)


@pytest.mark.parametrize("steps, envs, minibatches", [(32, 8, 4), (4, 8, 16), (6, 4, 3), (2, 4, 4), (10, 16, 32), (16, 6, 24)])
def test_per_env_dealing_gives_each_block_of_envs_its_share_of_every_minibatch(steps, envs, minibatches):
    """Every transition in one minibatch, each minibatch the same size, and every block of M / gcd(M, T) envs an equal
    share of each (a device holds whole blocks); with M | T each env T / M steps of each, with T | M each env at most
    one step of each; PureJaxRL's Brax defaults (10 steps, 32 minibatches) and Fig. 10's (16, 24) included; a new
    dealing each epoch, in which envs share a minibatch too."""
    ewma = load_script(SCRIPT)
    ids = np.asarray(ewma.minibatch_ids(jax.random.PRNGKey(0), jnp.arange(envs), steps, minibatches))
    assert ids.shape == (steps, envs) and ids.min() >= 0 and ids.max() < minibatches
    assert (np.bincount(ids.ravel(), minlength=minibatches) == steps * envs // minibatches).all()
    block = minibatches // np.gcd(minibatches, steps)
    for first in range(0, envs, block):
        share = np.bincount(ids[:, first:first + block].ravel(), minlength=minibatches)
        assert (share == block * steps // minibatches).all()
    counts = np.stack([np.bincount(ids[:, e], minlength=minibatches) for e in range(envs)])
    if steps % minibatches == 0:
        assert (counts == steps // minibatches).all()
    elif minibatches % steps == 0:
        assert counts.max() == 1 and (counts.sum(1) == steps).all()
    again = np.asarray(ewma.minibatch_ids(jax.random.PRNGKey(1), jnp.arange(envs), steps, minibatches))
    assert (again != ids).any()
    if block > 1 and 2 * steps <= minibatches:  # envs of a block dealt anew: which pairs share a minibatch changes
        assert (sharing(ids) != sharing(again)).any()


def sharing(ids):
    """Which pairs of envs have a minibatch in common, of a dealing (steps, envs)."""
    sets = [set(ids[:, e]) for e in range(ids.shape[1])]
    return np.array([[bool(a & b) for b in sets] for a in sets])


def test_per_env_rows_on_two_devices_are_the_rows_of_one_device():
    """minibatch_rows per device, mapped to global (step, env) positions, are one device's minibatches split by env."""
    ewma = load_script(SCRIPT)
    args = ewma.resolve_args(ewma.RunArgs(env_id="CartPole-v1", num_envs=8, num_steps=32, num_minibatches=4,
                                          shuffle="per-env"), num_devices=1)
    key = jax.random.PRNGKey(3)
    one = np.asarray(jax.shard_map(lambda k: ewma.minibatch_rows(args, k), mesh=Mesh(np.array(jax.devices()[:1]), ("d",)),
                                   in_specs=P(), out_specs=P(), check_vma=False)(key))
    steps, envs = divmod(one, 8)  # flattened steps x envs
    for device in (0, 1):
        local = np.asarray(ewma.minibatch_ids(key, jnp.arange(4) + 4 * device, 32, 4))  # this device's 4 envs
        for m in range(4):
            positions = {(s, e) for s, e in zip(steps[m], envs[m]) if e // 4 == device}
            assert positions == {(s, e + 4 * device) for s, e in zip(*np.nonzero(local == m))}


VARIANCE_ON_DEVICES = """
import sys, jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
sys.path.insert(0, sys.argv[1])
from benchmark.common import load_script
variance = load_script(sys.argv[2]).variance
rng = np.random.default_rng(0)
cases = [rng.normal(3.0, 2.0, 64), rng.normal(-5.0, 0.5, 64), np.full(64, 7.5), np.r_[np.zeros(48), np.ones(16)],
         np.arange(64.0), rng.standard_cauchy(64)]  # (the last two: the shares' means far apart)
for n in (1, 2, 4):
    mesh = Mesh(np.array(jax.devices()[:n]), ("d",))
    pooled = jax.shard_map(variance, mesh=mesh, in_specs=P("d"), out_specs=P(), check_vma=False)
    collective = "psum" in str(jax.make_jaxpr(pooled)(np.ones(64, np.float32)))
    for x in cases:
        x = x.astype(np.float32)
        print(n, int(collective), float(pooled(x)), float(np.var(x.astype(np.float64))))
"""


@pytest.mark.parametrize("script", ["ppo_ewma_jax", "ppo_ewma_brax"])
def test_variance_over_device_shares_is_the_variance_of_the_whole(script):
    """variance() of the shares of 1, 2 and 4 devices is np.var of the whole batch (float64) to float32 precision, edge
    cases included (a constant batch: exactly 0; shares whose means differ most: the between-device term carries it);
    on one device its program has no collective (jnp.var itself), on several it has."""
    result = subprocess.run([sys.executable, "-c", VARIANCE_ON_DEVICES, str(ROOT), script], capture_output=True, text=True,
                            env={**os.environ, **devices(4)}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    assert len(rows) == 18 and {int(r[0]) for r in rows} == {1, 2, 4}
    for n, collective, pooled, whole in ((int(r[0]), int(r[1]), *map(float, r[2:])) for r in rows):
        assert collective == (n > 1)
        np.testing.assert_allclose(pooled, whole, rtol=1e-4, atol=1e-12)
        if whole == 0.0:
            assert pooled == 0.0


def test_two_processes_of_two_devices_train_like_one_device(runs, tmp_path, monkeypatch):
    """One run as 2 tasks of a job (benchmark/launch.py --slurm-tasks-per-node 2, submitit's local executor):
    jax.distributed over 2 processes of 2 devices (gloo collectives on CPU); the envs' state split over both processes
    is gathered from each into process 0's checkpoints; only process 0 writes anything. Seed 1 alone (the launcher
    packs seeds itself): the packed seed 1 of one device, up to float order."""
    from benchmark import launch

    monkeypatch.setenv("XLA_FLAGS", devices(2)["XLA_FLAGS"])
    at = TINY.index("--num-seeds")
    alone = TINY[:at] + TINY[at + 2:]
    counts = launch.main(["--script", SCRIPT, "--out-dir", str(tmp_path), "--slurm", "--slurm-cluster", "local",
                          "--slurm-tasks-per-node", "2", "--slurm-time", "30", "--seeds", "1", "--", *alone])
    (run,) = (tmp_path / "runs").iterdir()
    logs = [(run / name).read_text() for name in ("stdout.log", "stdout.task1.log")]
    assert counts["done"] == 1, logs[0][-3000:] + logs[1][-3000:]
    assert "--distributed --coordinator-address" in logs[0] and "4 devices in 2 process(es), shuffle per-env" in logs[0]
    assert "PPO-EWMA" not in logs[1]
    (tb_run,) = run_dirs(run)
    assert_alike(read_values(tb_run)[0], runs[1][1][0])
    ewma = load_script(SCRIPT)
    many, one = (ewma.read_checkpoint(d / "checkpoints" / "iter_3.npz")[1] for d in (tb_run, runs[1][2][0]))
    for a, b in zip(many, one):  # the pack's arrays hold seeds 1 and 2
        assert a.shape == b.shape[1:]
        np.testing.assert_allclose(a, b[0], rtol=1e-3, atol=1e-5)


def test_sigterm_to_one_process_stops_both_with_a_checkpoint_that_resumes(runs, tmp_path):
    """A SIGTERM that reaches task 1 of a two-process run alone, while it sets up: both stop after the first call, which
    they agree on; task 0 checkpoints it (the envs gathered from both) and names it; both exit 75. The checkpoint then
    resumes on one process of one device and ends where the lone run ends."""
    _, _, ends = stop_one_of_two_tasks_then_resume(SCRIPT, TINY, tmp_path, devices(2), devices(1), 1200)
    assert len(ends) == 2  # one run a seed, iterations 2 and 3
    for d, one in zip(ends, runs[1][1]):
        values = read_values(d)[0]
        assert_alike({tag: values[tag][-1:] for tag in TRAINING}, {tag: one[tag][-1:] for tag in TRAINING})


def test_the_multinode_sbatch_example_passes_the_flag_checks_at_its_gpu_count():
    """benchmark/slurm/ppo_ewma_jax_multinode.sbatch's command, at its nodes x GPUs: the paper's 2^20 envs, a trillion
    steps, the hybrid recipe's lr and minibatches, the envs dealt per env."""
    import re
    import shlex
    from pathlib import Path

    from helpers import refusal

    text = (Path(__file__).resolve().parents[1] / "benchmark/slurm/ppo_ewma_jax_multinode.sbatch").read_text()
    nodes, tasks = (int(re.search(rf"^#SBATCH --{name}=(\d+)$", text, re.M)[1]) for name in ("nodes", "ntasks-per-node"))
    command = shlex.split(re.search(r"^srun (.*?)$", text.replace("\\\n", " "), re.M)[1])
    assert command[:2] == ["python", "cleanrl_scale/ppo_ewma_jax.py"] and command[-1] == "$@"
    ewma = load_script(SCRIPT)
    assert refusal(ewma, command[2:-1], num_devices=nodes * tasks) is None
    args = ewma.resolve_args(ewma.RunArgs(num_envs=2**20, scaling_recipe="hybrid", hybrid_minibatch_factor=16,
                                          total_timesteps=10**12), num_devices=nodes * tasks)
    assert "--distributed" in command and args.shuffle == "per-env" and args.learning_rate == pytest.approx(1.2e-3)
    assert args.num_minibatches == 32 * 512 // 16 and args.minibatch_size == 2048 * 256 // 32 * 16


def test_the_tests_one_device_wrapper_is_one_compiled_program():
    """helpers.on_one_device, which the in-process tests run the scripts' functions through, is jitted: an eager
    jax.shard_map compiles each operation apart (a Brax reset took over 10 minutes so)."""
    from helpers import on_one_device

    double = on_one_device(lambda x: 2 * x)
    assert hasattr(double, "lower")  # jax.jit's, which a bare shard_map's function lacks
    np.testing.assert_array_equal(double(jnp.arange(3.0)), [0.0, 2.0, 4.0])
