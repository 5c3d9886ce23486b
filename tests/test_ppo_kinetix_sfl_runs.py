"""ppo_kinetix_sfl.py end to end on real Kinetix levels, from a copy of the script: tiny runs with both models,
exact resumption from a checkpoint, and the same training on 2 processes x 2 forced host devices joined by
jax.distributed (4 devices: the batch, the random levels and the SFL buffer split across devices and across
processes) as on one device. The longest file of the suite: pytest.ini's workers start it first."""
import signal
import time

import numpy as np
import pytest

from helpers import (FAST_COMPILE, assert_refused, finish, finish_ok, load_script, read_tensorboard_run, read_values,
                     run_dirs, shared_runs, sigterm_one_of_two_tasks, start_copy, wait_for_file)

SCRIPT = "ppo_kinetix_sfl"
# M = 2T minibatches (envs dealt into 2 groups); random levels unfiltered: the mlp runs (one device and four, resumed,
# signalled) draw them without Kinetix's level filter (2x candidates, 64 no-op physics steps: more to trace and compile
# in every process that runs them). The transformer run draws them filtered, and
# tests/test_ppo_kinetix_sfl.py compares the filter with Kinetix's key for key; the draw's split over devices (levels
# keyed by their index, in pools) is the same code either way.
TINY = ["--model", "mlp", "--env-size", "s", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "32",
        "--update-epochs", "1", "--sfl-num-candidates", "16", "--sfl-update-period", "2", "--sfl-buffer-size", "4",
        "--sfl-rollout-length", "16", "--num-eval-levels", "8", "--eval-num-attempts", "2", "--no-filter-levels",
        "--total-timesteps", "384"]
EVERY_UPDATE = ["losses/approx_kl", "charts/ddr", "losses/policy_loss", "losses/value_loss", "losses/entropy",
                "losses/clipfrac", "losses/imp_samp_clipfrac", "losses/grad_norm", "charts/update_norm",
                "charts/update_norm_actor", "charts/SPS", "charts/learning_rate", "charts/train_seconds"]
TRAINING = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/grad_norm", "charts/episodic_return"]
# size s: 4 motors of 3 categories and 2 thrusters of 2; a fresh policy (output scale 0.01) is near uniform
UNIFORM_ENTROPY = 4 * np.log(3) + 2 * np.log(2)


# Every run of this file compiles at XLA's optimisation level 0 (conftest.py's fast_compile): nothing these tests check
# (tags, resumption, signals, one device against four, each pair compiled alike) depends on how fast the code runs.
TWO_DEVICES = f"{FAST_COMPILE} --xla_force_host_platform_device_count=2"  # each of 2 processes
pytestmark = pytest.mark.usefixtures("fast_compile")


@shared_runs(minutes=20)
def runs(tmp_path_factory, fast_compile):
    """Two tiny runs started together: compiling is mostly single-threaded and this CPU has 2 cores."""
    configs = {
        "mlp": TINY + ["--eval-every", "2", "--save-every", "1"],
        "transformer": [f for f in TINY[2:] if f != "--no-filter-levels"] + [
            "--model", "transformer", "--eval-every", "3", "--track", "--ewma-com", "4", "--level-filter-pool", "1"],
    }
    dirs = {name: tmp_path_factory.mktemp(name) for name in configs}
    started = {name: start_copy(SCRIPT, argv, dirs[name]) for name, argv in configs.items()}
    # two Kinetix compiles sharing 2 cores: about 10 min here
    return {name: (finish_ok(process, dirs[name], timeout=2400), dirs[name]) for name, process in started.items()}


@pytest.fixture(scope="module")
def tiny_run(runs):
    return runs["mlp"][0]


def assert_logs_every_tag(result, scalars, model):
    assert f"PPO + SFL ({model}) on 1 device(s)" in result.stdout
    assert all(len(scalars[tag]) == 3 for tag in EVERY_UPDATE)  # 384 // (8 * 16) updates
    assert len(scalars["sfl/mean_learnability"]) == 2  # before updates 1 and 3 (T = 2)
    assert all(0 <= v <= 0.25 for v in scalars["sfl/mean_learnability"])
    assert all(0 <= v <= 1 for v in scalars["sfl/buffer_solve_rate"])
    assert all(0 <= v <= 1 for v in scalars["eval/solve_rate_sampled"] + scalars["eval/solve_rate_handmade"])
    handmade = [tag for tag in scalars if tag.startswith("eval_handmade/")]
    assert len(handmade) == 10  # Kinetix ships 10 hand-designed levels of size s
    # 2 attempts per level: a level's solve rate is 0, 1/2 or 1; over the 8 sampled levels, a multiple of 1/16
    assert all(v in (0.0, 0.5, 1.0) for tag in handmade for v in scalars[tag])
    assert all(abs(v * 16 - round(v * 16)) < 1e-5 for v in scalars["eval/solve_rate_sampled"])
    np.testing.assert_allclose(np.mean([scalars[t] for t in handmade], axis=0), scalars["eval/solve_rate_handmade"], rtol=1e-6)
    np.testing.assert_allclose(scalars["charts/ddr"], [128 / kl for kl in scalars["losses/approx_kl"]], rtol=1e-4)
    np.testing.assert_allclose(scalars["losses/entropy"][0], UNIFORM_ENTROPY, atol=2e-3)
    assert all(0 < a < b for a, b in zip(scalars["charts/update_norm_actor"], scalars["charts/update_norm"]))  # no critic


def test_tiny_mlp_run_logs_every_tag(tiny_run):
    _, result, scalars, _ = tiny_run
    assert_logs_every_tag(result, scalars, "mlp")
    assert len(scalars["eval/solve_rate_sampled"]) == 2  # after updates 2 and 3
    assert "random levels unfiltered" in result.stdout


def test_the_update_norms_are_how_far_an_update_moved_the_parameters(tiny_run):
    """charts/update_norm, the outer step's size (stagnation §3), and charts/update_norm_actor, the actor MLP's alone, of
    update 3 against the checkpoints of updates 2 and 3, whose first leaves are the actor MLP's (MLP_0) then the
    critic's, a bias and a kernel a layer."""
    run_dir, _, scalars, _ = tiny_run
    (meta, before), (_, after) = (load_script(SCRIPT).read_checkpoint(run_dir / "checkpoints" / f"iter_{i}.npz") for i in (2, 3))
    per_mlp = 2 * (meta["args"]["num_layers"] + 1)
    assert after[per_mlp - 1].shape == (128, 16) and after[2 * per_mlp - 1].shape == (128, 1)  # the two heads' kernels
    change = [np.asarray(b, np.float64) - a for a, b in zip(before[: 2 * per_mlp], after)]
    norm = lambda leaves: np.sqrt(sum((c**2).sum() for c in leaves))
    assert scalars["charts/update_norm"][-1] == pytest.approx(norm(change), rel=1e-4)  # float32 sums
    assert scalars["charts/update_norm_actor"][-1] == pytest.approx(norm(change[:per_mlp]), rel=1e-4)


def test_the_advisor_reads_a_real_run(tiny_run):
    """benchmark/advise.py on the tiny run's own TensorBoard run: the script from its name, the step size its KL, the
    score the sampled evaluation's solve rate (analyze.py's tag for the script; 2 evaluations, too few for a slope), the
    actor's update norm among the evidence (the phase's median)."""
    from benchmark import advise

    run_dir, _, scalars, _ = tiny_run
    (report,) = advise.main([str(run_dir)])
    assert (report["script"], report["step_size"], report["score"], report["iterations"]) == \
        ("ppo_kinetix_sfl", "losses/approx_kl", "eval/solve_rate_sampled", 3)
    (phase,) = report["phases"]
    assert phase["label"] == "not improving yet" and phase["slope_per_million"] is None and not report["remedies"]
    assert phase["evidence"]["charts/update_norm_actor"] == pytest.approx(np.median(scalars["charts/update_norm_actor"]))


def test_tiny_transformer_run_logs_every_tag_and_tracks_to_wandb(runs):
    (_, result, scalars, _), workdir = runs["transformer"]
    assert_logs_every_tag(result, scalars, "transformer")
    assert len(scalars["eval/solve_rate_sampled"]) == 1
    assert "PPO-EWMA COM 4 against 32 minibatch steps per update" in result.stdout
    assert "random levels filtered as Kinetix does, in pools of 1" in result.stdout
    assert len(scalars["losses/prox_kl"]) == 3 and all(v > 0 for v in scalars["losses/prox_kl"])
    assert len(list((workdir / "wandb").glob("offline-run-*/run-*.wandb"))) == 1


def test_a_resumed_run_continues_exactly_and_a_ctrl_c_stops_it_after_the_running_update(tiny_run, tmp_path):
    """Resumed from the tiny run's checkpoint of update 1 with a longer budget (the learning rate is constant: the
    budget changes nothing an update computes; the programs are the tiny run's, from JAX's cache): every tag of
    updates 2 and 3 has the tiny run's values at the same steps, and the training clock (Fig. 16b's x) goes on from
    the checkpoint's. Then a first Ctrl-C (exit 130): a checkpoint of the update it stopped after, one line naming it.
    A launcher's SIGTERM (exit 75: requeue) takes the same path: the test of a SIGTERM to one of two processes below
    sends it; SIGUSR1 takes SIGTERM's path (tests/test_ppo_ewma_jax.py checks every JAX script's handler)."""
    run_dir, _, _, _ = tiny_run
    checkpoint = run_dir / "checkpoints" / "iter_1.npz"
    process = start_copy(SCRIPT, TINY[:-1] + [str(128 * 1000), "--eval-every", "2", "--save-every", "1", "--resume", checkpoint],
                         tmp_path)
    wait_for_file(process, tmp_path, "runs/*/checkpoints/iter_3.npz", timeout=1800)
    process.send_signal(signal.SIGINT)
    result = finish(process, 600)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "resuming" in result.stdout and "Traceback" not in result.stderr
    (resumed_dir,) = run_dirs(tmp_path)
    first, _ = read_tensorboard_run(run_dir)
    resumed, _ = read_tensorboard_run(resumed_dir)
    assert [e.step for e in resumed["losses/policy_loss"]][:2] == [256, 384]  # updates 2 and 3, then on
    for tag, events in first.items():
        expected = {e.step: e.value for e in events if e.step > 128}
        if tag in ("charts/SPS", "charts/train_seconds") or not expected:
            continue
        got = {e.step: e.value for e in resumed[tag] if e.step in expected}
        # the tiny run evaluated after its last update (3) too, the longer one evaluates after update 4
        assert set(got) == set(expected) - ({384} if tag.startswith("eval") else set()), tag
        np.testing.assert_allclose([got[s] for s in sorted(got)], [expected[s] for s in sorted(got)], rtol=1e-6, atol=1e-9,
                                   err_msg=tag)
    assert resumed["charts/train_seconds"][0].value > load_script(SCRIPT).read_checkpoint(checkpoint)[0]["train_seconds"] > 0
    saved = sorted(int(p.stem[5:]) for p in resumed_dir.glob("checkpoints/iter_*.npz"))
    last = saved[-1]
    assert 3 < last < 1000 and saved == [last - 2, last - 1, last]  # the newest 3 kept (--keep-checkpoints' default)
    assert (f"stopped by signal {int(signal.SIGINT)} after update {last}; resume with "
            f"--resume runs/{resumed_dir.name}/checkpoints/iter_{last}.npz") in result.stdout


@pytest.mark.parametrize("argv, text", [
    (["--model", "transformer"], "was saved with --model mlp"),
    (["--total-timesteps", "128"], "is at update 1, not before the last (1)"),
])
def test_resume_refuses_another_network_or_a_finished_run(tiny_run, argv, text):
    """The flag checks read the checkpoint (in this process; the exit-2 subprocess: tests/test_scripts_refuse.py)."""
    checkpoint = tiny_run[0] / "checkpoints" / "iter_1.npz"
    assert_refused(load_script(SCRIPT), TINY + ["--resume", checkpoint] + argv, text)


def test_a_signal_while_compiling_exits_at_once_without_waiting_for_xla(tmp_path, capfd):
    """SIGTERM while the programs compile (no cache: minutes of XLA on this CPU), SFL's own among them (JAX's log of its
    compilations shows it unfinished; it once compiled on the main thread, where a signal waited for it): exit 75 within
    seconds, nothing saved; the process does not wait for XLA to finish."""
    # the log goes to pytest's captured file descriptors: a pipe that nobody reads while the test waits would fill
    process = start_copy(SCRIPT, TINY + ["--no-compile-cache"], tmp_path, capture=False, extra_env={"JAX_LOG_COMPILES": "1"})
    wait_for_file(process, tmp_path, "runs/*/events.out.tfevents.*", timeout=600)
    time.sleep(2)
    signalled = time.time()
    process.send_signal(signal.SIGTERM)
    status = process.wait(300)
    stdout, stderr = capfd.readouterr()
    assert status == 75, stderr[-3000:]
    assert "stopped by signal 15 (before the first update); nothing saved: rerun the command" in stdout
    assert time.time() - signalled < 15 and not list(tmp_path.glob("runs/*/checkpoints"))
    assert "Finished XLA compilation of jit(sfl_update)" not in stderr


def assert_trains_alike(many, one):
    """Same global batch and seed: the same training up to float summation order (and the same episodes end)."""
    assert {t for t in many if not t.startswith("eval")} == {t for t in one if not t.startswith("eval")}
    for tag in TRAINING + ["sfl/mean_learnability"]:
        if tag in one:  # no episode may end in a tiny rollout on filtered levels
            np.testing.assert_allclose(many[tag], one[tag], rtol=1e-3, atol=1e-6, err_msg=tag)
    np.testing.assert_allclose(many["losses/approx_kl"], one["losses/approx_kl"], rtol=2e-2, atol=1e-7)


def test_two_processes_of_two_devices_train_like_one(tiny_run, tmp_path, monkeypatch):
    """One run as 2 tasks of a job (benchmark/launch.py --slurm-tasks-per-node 2, through submitit's local executor):
    jax.distributed over 2 processes (gloo collectives on CPU), task 0 the coordinator; only process 0 writes anything."""
    from benchmark import launch

    monkeypatch.setenv("XLA_FLAGS", TWO_DEVICES)
    counts = launch.main(["--script", SCRIPT, "--out-dir", str(tmp_path), "--slurm", "--slurm-cluster", "local",
                          "--slurm-tasks-per-node", "2", "--slurm-time", "30", "--", *TINY, "--eval-every", "2"])
    (run,) = (tmp_path / "runs").iterdir()
    logs = [(run / name).read_text() for name in ("stdout.log", "stdout.task1.log")]
    assert counts["done"] == 1, logs[0][-3000:] + logs[1][-3000:]
    assert "--distributed --coordinator-address" in logs[0] and "on 4 device(s) in 2 process(es)" in logs[0]
    assert "PPO + SFL" not in logs[1]
    (tb_run,) = run_dirs(run)
    two, _ = read_values(tb_run)
    _, _, one, _ = tiny_run
    assert_trains_alike(two, one)
    # evaluation runs on every process too (chaotic physics on another per-device batch may flip an outcome)
    assert len(two["eval/solve_rate_sampled"]) == len(two["eval/solve_rate_handmade"]) == 2


def test_sigterm_to_one_process_before_the_first_update_stops_both_after_it(tiny_run, tmp_path):
    """A SIGTERM that reaches task 1 of a two-process run alone, while it sets up: JAX's own preemption service must
    not swallow it, and task 1 must not leave alone (task 0 would wait at a barrier until JAX ended it for a lost
    task); both stop after the first update, which they agree on, task 0 checkpoints it and names it, both exit 75."""
    # the two-process run's flags (its programs, from JAX's cache): 3 updates, the signal sent long before the first
    results = sigterm_one_of_two_tasks(SCRIPT, TINY + ["--eval-every", "2"], tmp_path, {"XLA_FLAGS": TWO_DEVICES}, 1800)
    assert [r.returncode for r in results] == [75, 75], results[0].stderr[-2000:] + results[1].stderr[-2000:]
    (run_dir,) = run_dirs(tmp_path / "task0")
    assert sorted(p.name for p in run_dir.glob("checkpoints/*")) == ["iter_1.npz"]
    assert (f"stopped by signal to another process after update 1; resume with --resume runs/{run_dir.name}/checkpoints/"
            "iter_1.npz") in results[0].stdout
    assert not (tmp_path / "task1" / "runs").exists()
