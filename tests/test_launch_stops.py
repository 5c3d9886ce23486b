"""benchmark/launch.py stopped by a signal: SIGTERM, SIGUSR1 or Ctrl-C to the launcher stops the whole grid (each
running run checkpoints, nothing new starts, one line says how to continue, exit 75 or 130), a second Ctrl-C kills the
runs, the same command again finishes the grid, resuming the stopped runs, and a launcher killed outright leaves no run
training. Tiny torch runs (ppo_atari_envpool on Breakout: seconds to start, a checkpoint when signalled); a terminal's
Ctrl-C (to the launcher's process group) is test_grid.py's."""
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "benchmark" / "launch.py"
# 3 runs of 10 iterations of 128 steps, a checkpoint every 2 (and when signalled)
GRID = ["--script", "ppo_atari_envpool", "--env-ids", "Breakout-v5", "--seeds", "1", "2", "3", "--iterations", "10",
        "--save-every", "2"]
FLAGS = ["--", "--num-envs", "4", "--num-steps", "32", "--update-epochs", "1", "--dynamics-every", "0"]


def start(argv, cwd):
    launcher = subprocess.Popen([sys.executable, str(LAUNCH), *argv], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, WANDB_MODE="offline"))
    launcher.runs = []  # the runs it was seen running, for cleanup()
    return launcher


def run_of(out, seed):
    """The store directory of the grid's run of `seed`, once the launcher registered it."""
    (found,) = [p.resolve() for p in (out / "runs").glob(f"*__s{seed}__*")]
    return found


def wait_until_training(launcher, out, seeds, pattern="checkpoints/iter_*.pt", timeout=120):
    """Wait until the runs of `seeds` have each written a file `pattern` of their TensorBoard run: by default a
    checkpoint (a signal then stops them at the end of an iteration, with one); their processes."""
    start = time.time()
    while not all(list((out / "runs").glob(f"*__s{seed}__*/runs/*/{pattern}")) for seed in seeds):
        assert launcher.poll() is None, launcher.communicate()
        assert time.time() - start < timeout, "the runs did not start"
        time.sleep(0.1)
    launcher.runs = psutil.Process(launcher.pid).children()
    return launcher.runs


def cleanup(launcher):
    """Kill what a failed test left running: the launcher and its runs (those it started last, and those seen)."""
    try:
        children = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for process in {*children, *launcher.runs}:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait()


def assert_stopped(run_dir, signum):
    """The run checkpointed when the launcher passed the signal on, exited 75, and is recorded as preempted."""
    record = json.loads((run_dir / "preempted.json").read_text())
    assert record["returncode"] == 75 and not (run_dir / "failed.json").exists(), record
    log = (run_dir / "stdout.log").read_text()
    assert re.search(rf"stopped by signal {signum:d} (after|during) iteration \d+; resume with --resume \S+/iter_\d+\.pt", log), log


def assert_never_started(run_dir):
    assert not (run_dir / "stdout.log").exists() and not (run_dir / "runs").exists()
    assert not any((run_dir / f"{state}.json").exists() for state in ("done", "failed", "preempted"))


def continue_line(stderr):
    """The launcher's one stderr line, and the command it names."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("launch.py: "), stderr
    assert "run the same command again" in lines[0], lines[0]
    return lines[0], shlex.split(lines[0].split("): ", 1)[1])


def test_sigterm_stops_the_grid_and_the_same_command_finishes_it(tmp_path):
    """--workers 1: SIGTERM while run 1 trains; run 1 checkpoints (exit 75), runs 2 and 3 never start, the launcher
    exits 75 naming the command; that command then runs 2 and 3 and resumes run 1."""
    out = tmp_path / "out"
    argv = [*GRID, "--out-dir", str(out), *FLAGS]
    launcher = start(argv, tmp_path)
    try:
        wait_until_training(launcher, out, [1])
        launcher.send_signal(signal.SIGTERM)
        sent = time.time()
        stdout, stderr = launcher.communicate(timeout=60)
    finally:
        cleanup(launcher)
    assert launcher.returncode == 75, stdout + stderr
    assert time.time() - sent < 30, "the launcher did not stop promptly"
    line, command = continue_line(stderr)
    assert "SIGTERM" in line
    assert_stopped(run_of(out, 1), signal.SIGTERM)
    for seed in (2, 3):
        assert_never_started(run_of(out, seed))
    assert command[1:] == [str(LAUNCH), *argv], command  # as it was started
    again = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, WANDB_MODE="offline"))
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1].startswith("3 done"), again.stdout + again.stderr
    first = run_of(out, 1)
    assert "checkpoints/iter_" in json.loads((first / "done.json").read_text())["resumed_from"]
    assert len(list((first / "runs").iterdir())) == 2 and (first / "stdout.log.1").exists()  # the stopped attempt, kept
    for seed in (2, 3):
        assert len(list((run_of(out, seed) / "runs").iterdir())) == 1 and not list(run_of(out, seed).glob("stdout.log.*"))


def test_sigusr1_stops_every_running_run_of_the_grid(tmp_path):
    """--workers 2: SIGUSR1 (Slurm's pre-timeout signal) once runs 1 and 2 train: both get it and checkpoint, run 3
    never starts, exit 75."""
    out = tmp_path / "out"
    launcher = start([*GRID, "--workers", "2", "--out-dir", str(out), *FLAGS], tmp_path)
    try:
        wait_until_training(launcher, out, [1, 2])
        launcher.send_signal(signal.SIGUSR1)
        stdout, stderr = launcher.communicate(timeout=60)
    finally:
        cleanup(launcher)
    assert launcher.returncode == 75, stdout + stderr
    assert "SIGUSR1" in continue_line(stderr)[0]
    for seed in (1, 2):
        assert_stopped(run_of(out, seed), signal.SIGUSR1)
    assert_never_started(run_of(out, 3))


def test_a_second_ctrl_c_kills_the_runs_at_once(tmp_path):
    """A first Ctrl-C (SIGINT to the launcher alone, as `kill -INT`) waits for the running run to checkpoint and
    starts nothing; a second kills it at once (here a run frozen with SIGSTOP, which could never checkpoint): exit 130."""
    out = tmp_path / "out"
    launcher = start([*GRID, "--out-dir", str(out), *FLAGS], tmp_path)
    try:
        (run,) = wait_until_training(launcher, out, [1], pattern="events.out.tfevents.*")
        run.suspend()
        launcher.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert launcher.poll() is None  # waiting for the run to checkpoint
        launcher.send_signal(signal.SIGINT)
        stdout, stderr = launcher.communicate(timeout=20)
    finally:
        cleanup(launcher)
    assert launcher.returncode == 130, stdout + stderr
    assert not run.is_running()
    assert "SIGINT" in continue_line(stderr)[0]
    assert json.loads((run_of(out, 1) / "preempted.json").read_text())["returncode"] == -signal.SIGKILL
    for seed in (2, 3):
        assert_never_started(run_of(out, seed))


def test_a_run_outliving_its_killed_launcher_checkpoints_and_stops(tmp_path):
    """The runs are in process groups of their own (a terminal's Ctrl-C reaches the launcher alone): a launcher killed
    outright (SIGKILL, or its terminal closed) leaves no run training unwatched: each gets SIGTERM and checkpoints."""
    out = tmp_path / "out"
    launcher = start([*GRID, "--out-dir", str(out), *FLAGS], tmp_path)
    try:
        (run,) = wait_until_training(launcher, out, [1])
        launcher.kill()
        launcher.communicate(timeout=20)
        assert run.wait(timeout=30) is None  # not our child: psutil gives no exit status
    finally:
        cleanup(launcher)
    log = (run_of(out, 1) / "stdout.log").read_text()
    assert re.search(r"stopped by signal 15 (after|during) iteration \d+; resume with --resume", log), log
    assert_never_started(run_of(out, 2))
