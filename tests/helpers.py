"""What the tests share: running a copy of a script and reading its logs (benchmark/common.py's, re-exported), the
bad-input rule (a script's flag checks in this process, a directory made unwritable), the coverage states' checks, a reference GAE, and the module fixtures that train."""
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.common import (cli_args, finish, load_script, on_one_device, read_tensorboard_run, run_copy,  # noqa: E402,F401
                              run_dirs, start_copy)

# what the torch PPO scripts (ppo_atari_envpool, ppo_procgen_envpool) log every iteration, and their dynamics/ tags
PPO_EVERY_ITERATION = ["losses/approx_kl", "losses/clipfrac", "losses/grad_norm", "losses/explained_variance",
                       "losses/value_loss", "losses/policy_loss", "losses/entropy", "charts/ddr", "charts/SPS",
                       "charts/learning_rate", "charts/update_norm", "charts/update_norm_actor"]
PPO_DYNAMICS = ["dynamics/feature_rank", "dynamics/dormant_pct", "dynamics/weight_norm", "dynamics/grad_kurtosis",
                "dynamics/policy_variance", "dynamics/ess_pct"]


def read_values(run_dir):
    """({tag: [values]}, {tag: [texts]}) of a run."""
    scalars, texts = read_tensorboard_run(run_dir)
    return {tag: [e.value for e in events] for tag, events in scalars.items()}, texts


def assert_refused(module, flags, text, **checks):
    """The script's flag checks refuse `flags` with a message holding `text` (in this process: benchmark/common.py's
    refusal; one subprocess per script checks that a refusal exits 2 with that one line)."""
    said = refusal(module, flags, **checks)
    assert said is not None and text in said, said


def assert_bad_input(result, workdir, text):
    """The bad-input rule: exit status 2, one stderr line naming the flag, nothing written."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0] and ": error: " in lines[0], result.stderr[-3000:]
    assert not (Path(workdir) / "runs").exists() and not (Path(workdir) / "wandb").exists()


# XLA's CPU code generation at optimisation level 0: a tiny run compiles in a half to three quarters of the time on 2
# cores, and then runs slower. As jax.jit's compiler_options, for one function of this process (XLA reads XLA_FLAGS once
# a process), and as XLA_FLAGS for the runs a test starts (conftest.py's fast_compile): for checks of what a computation
# gives, not how fast
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
FAST_COMPILE = " ".join(f"--{name}={str(value).lower()}" for name, value in FAST_COMPILE_OPTIONS.items())


def at_fast_compile(fn, *args):
    """fn(*args), jitted in this process with FAST_COMPILE_OPTIONS."""
    import jax

    return jax.jit(fn, compiler_options=FAST_COMPILE_OPTIONS)(*args)


def shared_runs(minutes, **kwargs):
    """A module fixture that trains: real runs that several tests of its file then read. pytest.ini runs the suite
    on 2 pytest-xdist workers, a test file at a time on one worker (--dist loadfile: a module's runs happen once);
    the files whose runs take longest (`minutes`, on 2 idle cores) are handed out first."""
    def decorate(func):
        func.shared_runs_minutes = minutes
        return pytest.fixture(scope="module", **kwargs)(func)
    return decorate


def assert_coverage(workdir, iterations, obs_shape, feature_dim, samples):
    """The states a run saved for the coverage metric: `samples` of each measured iteration, the global step of
    each, the thumbnail shape, and penultimate features, finite and >= 0 (after a ReLU)."""
    from benchmark.coverage_metric import read_coverage

    records = read_coverage(workdir)
    assert records["iteration"].tolist() == [i for i in iterations for _ in range(samples)]
    assert len(set(records["global_step"][records["iteration"] == iterations[-1]].tolist())) == 1
    assert records["obs"].shape[1:] == obs_shape and records["features"].shape[1:] == (feature_dim,)
    assert np.all(np.isfinite(records["features"])) and np.abs(records["features"]).max() > 0
    assert records["features"].min() >= 0


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l}, summed forward until the episode ends."""
    T, N = rewards.shape
    values_ext = np.concatenate([values, next_value[None]])
    dones_ext = np.concatenate([dones, next_done[None]])
    adv = np.zeros((T, N))
    for env in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                notdone = 1.0 - dones_ext[k + 1, env]
                delta = rewards[k, env] + gamma * values_ext[k + 1, env] * notdone - values_ext[k, env]
                total += weight * delta
                if notdone == 0.0:
                    break
                weight *= gamma * lam
            adv[t, env] = total
    return adv


def wait_for_file(process, workdir, pattern, timeout=300):
    """The first file under `workdir` matching the glob `pattern`, once a started copy has written it (the copy must
    still be running)."""
    start = time.time()
    while not (found := sorted(Path(workdir).glob(pattern))):
        assert process.poll() is None, f"the run ended ({process.returncode}) before writing {pattern}: {finish(process).stderr[-3000:]}"
        assert time.time() - start < timeout, f"no {pattern} after {timeout} s"
        time.sleep(0.1)
    return found[0]


def finish_ok(process, workdir, timeout=900):
    """Wait for a started copy that must succeed: (run_dir, result, scalars, texts) of its one run."""
    result = finish(process, timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = run_dirs(workdir)
    return (run_dir, result, *read_values(run_dir))


def run_ok(script, args, workdir, timeout=900, extra_env=None):
    """Run a copy of `script` that must succeed: (run_dir, result, scalars, texts) of its one run."""
    return finish_ok(start_copy(script, args, workdir, extra_env=extra_env), workdir, timeout)


def assert_schedule_is_optax(script, args_and_schedule, anneal):
    """A JAX script's learning-rate schedule (make_train's; of the flags as constants and of hyperparameters(args) as
    the update traces them, which the host logs too) against optax.linear_schedule / constant_schedule, at random
    rates and the edges: the first step, the last, past the last. args_and_schedule(lr) -> (args, schedule)."""
    import optax

    rng = np.random.default_rng(0)
    for lr in rng.uniform(1e-5, 1e-2, size=3):
        args, schedule = args_and_schedule(float(lr))
        updates = args.num_iterations * args.update_epochs * args.num_minibatches
        reference = optax.linear_schedule(lr, 0.0, updates) if anneal else optax.constant_schedule(lr)
        counts = np.array([0, 1, updates // 2, updates - 1, updates, updates + 5, *rng.integers(0, updates, 5)])
        for rates in (schedule(counts), schedule(counts, script.hyperparameters(args))):
            np.testing.assert_allclose(np.asarray(rates), np.asarray(reference(counts)), rtol=1e-6, atol=1e-12)


def checkpoint_change(run_dir, network, first, last):
    """{parameter name: its change (float64, flat)} of a torch run's `network` between its checkpoints iter_<first>.pt
    and iter_<last>.pt: what the update norms it logs are taken over."""
    import torch

    nets = [torch.load(Path(run_dir) / "checkpoints" / f"iter_{i}.pt", weights_only=False)[network] for i in (first, last)]
    return {name: (nets[1][name] - nets[0][name]).double().flatten() for name in nets[1]}


def refusal(module, flags, **checks):
    """What a script's flag checks say of `flags` (the line it prints after "error: "), or None if they pass: the rule
    tested in this process, without a subprocess's imports (one subprocess per script tests the exit-2 contract).
    `checks`: resolve_args's own keywords (ppo_kinetix_sfl's num_devices)."""
    import tyro

    args = tyro.cli(cli_args(module), args=[str(flag) for flag in flags])
    try:
        module.resolve_args(args, **checks)
    except module.BadFlag as e:
        return str(e)
    return None


@contextlib.contextmanager
def read_only(directory):
    """`directory` unwritable while the block runs, root included: for root (whom permissions do not stop) a read-only
    bind mount of it, else its write bits off. Skips the calling test where root cannot mount."""
    directory = str(directory)
    if os.geteuid() != 0:
        mode = os.stat(directory).st_mode
        os.chmod(directory, 0o555)
        try:
            yield
        finally:
            os.chmod(directory, mode)
        return
    if subprocess.run(["mount", "--bind", directory, directory], capture_output=True).returncode:
        pytest.skip("root without mount(8) here: no way to make a directory unwritable for root")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", directory], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", directory], check=True)


def handles(pid, signum):
    """Whether process `pid` has a handler for `signum` yet (Linux: the caught-signals mask in /proc)."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


def sigterm_one_of_two_tasks(script, flags, workdir, extra_env, timeout):
    """One run as two processes joined by jax.distributed on localhost (`flags` and the coordinator's; task r in
    workdir/task<r>), and a SIGTERM to task 1 alone once it handles SIGTERM and has set up for 3 s (jax.distributed's
    set-up, the compilations): both tasks' CompletedProcesses."""
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = list(flags) + ["--distributed", "--coordinator-address", f"127.0.0.1:{port}", "--num-processes", "2"]
    tasks = [start_copy(script, flags + ["--process-id", str(i)], Path(workdir) / f"task{i}", extra_env=extra_env)
             for i in (0, 1)]
    start = time.time()
    while not handles(tasks[1].pid, signal.SIGTERM):
        assert tasks[1].poll() is None and time.time() - start < 300, "task 1 installed no SIGTERM handler"
        time.sleep(0.05)
    time.sleep(3)
    tasks[1].send_signal(signal.SIGTERM)
    return [finish(task, timeout) for task in tasks]


def stop_one_of_two_tasks_then_resume(script, flags, workdir, extra_env, resume_env, timeout):
    """sigterm_one_of_two_tasks, checked as every PPO-EWMA script must meet it: both tasks exit 75 after iteration 1,
    which task 0 checkpoints (one checkpoint) and names, task 1 writes no run; then that checkpoint, resumed with the
    same flags in task 0's folder (`resume_env`), runs to the end. (the tasks' results, the checkpoint, the resumed
    runs' folders, one a seed)."""
    workdir = Path(workdir)
    results = sigterm_one_of_two_tasks(script, flags, workdir, extra_env, timeout)
    assert [r.returncode for r in results] == [75, 75], results[0].stderr[-2000:] + results[1].stderr[-2000:]
    run_dir = run_dirs(workdir / "task0")[0]
    (checkpoint,) = run_dir.glob("checkpoints/*.npz")
    relative = f"runs/{run_dir.name}/checkpoints/{checkpoint.name}"
    assert f"stopped by signal to another process after iteration 1; resume with --resume {relative}" in results[0].stdout
    assert not (workdir / "task1" / "runs").exists()
    resumed = finish(start_copy(script, list(flags) + ["--resume", relative], workdir / "task0", extra_env=resume_env),
                     timeout)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    stamp = run_dir.name.split("__")[-1]
    return results, checkpoint, [d for d in run_dirs(workdir / "task0") if d.name.split("__")[-1] != stamp]
