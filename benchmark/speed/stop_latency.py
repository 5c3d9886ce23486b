"""How soon does a script stop after SIGTERM, and what does it leave? Starts a copy of each command alone in a
temporary directory, sends SIGTERM a few seconds after its progress bar first moves (training has begun; or at
--wait seconds, whatever it is doing then), and writes one row per command: the seconds from the signal to the exit,
the exit status, where it was when signalled, the line it printed at the signal and at the end, and whether the
checkpoint that line names exists.

    python benchmark/speed/stop_latency.py --out benchmark/results/<dir>/stop_latency.csv [--only NAME ...]

The commands are README's examples as a user types them (sized for a GPU; on a CPU their iterations are long), and
its CPU-sized ones (`first_progress_s`: how soon their progress bar moves). Slurm kills a job 30 s after its SIGTERM by default (KillWait): the column `within_30s`
says whether the run stopped in that time."""
import argparse
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmark.common import SCRIPTS, describe_machine  # noqa: E402

COMMANDS = {  # name: (script, flags); README's examples, then its CPU-sized ones
    "atari_readme": ("ppo_atari_envpool", ["--num-envs", "16", "--num-steps", "64"]),
    "ewma_locomotion_com16": ("ppo_ewma_jax", ["--ewma-com", "16"]),
    "brax_ant": ("ppo_ewma_brax", ["--env-id", "ant"]),
    "sfl_s_2048": ("ppo_kinetix_sfl", ["--env-size", "s", "--sfl-preset", "2048"]),
    "pqn_breakout": ("pqn_atari", ["--env-id", "Breakout-v5", "--num-envs", "16", "--num-steps", "64"]),
    "rnd_32": ("ppo_rnd", ["--num-envs", "32"]),
    "procgen_bigfish_128x128": ("ppo_procgen_envpool", ["--env-id", "BigfishEasy-v0", "--num-envs", "128", "--num-steps", "128"]),
    "cpu_ewma_cartpole": ("ppo_ewma_jax", ["--env-id", "CartPole-v1", "--num-envs", "16", "--num-steps", "128",
                                           "--num-minibatches", "4", "--update-epochs", "4", "--gamma", "0.99", "--gae-lambda",
                                           "0.95", "--learning-rate", "2.5e-4", "--anneal-lr", "--total-timesteps", "500000"]),
    "cpu_ewma_locomotion_s": ("ppo_ewma_jax", ["--ewma-com", "16", "--env-size", "s", "--num-morphologies", "8",
                                               "--num-envs", "64", "--num-steps", "64"]),
    "cpu_brax_ant": ("ppo_ewma_brax", ["--env-id", "ant", "--num-envs", "64", "--num-minibatches", "4"]),
    "cpu_atari_breakout": ("ppo_atari_envpool", ["--env-id", "Breakout-v5", "--num-envs", "8", "--num-steps", "128"]),
    "cpu_rnd": ("ppo_rnd", ["--num-envs", "8", "--num-iterations-obs-norm-init", "5"]),
    "cpu_procgen_bigfish": ("ppo_procgen_envpool", ["--env-id", "BigfishEasy-v0", "--num-envs", "16", "--num-steps", "128"]),
}


def moved(stderr_text):
    """Whether a tqdm progress bar in the text has counted any steps (it printed a rate or a return)."""
    return bool(re.search(r"ret=|sps=", stderr_text))


def measure(name, script, flags, workdir, after, wait):
    shutil.copy(SCRIPTS / f"{script}.py", workdir)  # a copy, alone, as a user runs it
    err_path = workdir / "stderr.txt"
    with open(err_path, "w") as err, open(workdir / "stdout.txt", "w") as out:
        process = subprocess.Popen([sys.executable, f"{script}.py", *flags], cwd=workdir, stdout=out, stderr=err,
                                   text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        started, training = time.time(), None
        while time.time() - started < wait and process.poll() is None:
            if training is None and moved(err_path.read_text(errors="replace")):
                training = time.time()
            if training is not None and time.time() - training >= after:
                break
            time.sleep(0.5)
        phase = "training" if training is not None else "setting up (bar not moved)"
        sent = time.time()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=900)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        took = time.time() - sent
    stdout, stderr = (workdir / "stdout.txt").read_text(errors="replace"), err_path.read_text(errors="replace")
    said = next((line.strip() for line in stderr.replace("\r", "\n").splitlines() if "received: stopping" in line), "")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    named = re.search(r"--resume (\S+)", last)
    return {"command": name, "script": script, "flags": " ".join(flags),
            "first_progress_s": round(training - started, 1) if training is not None else "",
            "seconds_to_signal": round(sent - started, 1),
            "phase": phase, "seconds_to_stop": round(took, 1), "within_30s": took <= 30, "exit": process.returncode,
            "said_at_signal": said, "last_line": last,
            "checkpoint_exists": bool(named and (workdir / named[1]).is_file()) if named else ""}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the CSV written (its directory is created)")
    parser.add_argument("--only", nargs="+", choices=sorted(COMMANDS), help="these commands only")
    parser.add_argument("--after", type=float, default=5.0, help="seconds after the progress bar first moves")
    parser.add_argument("--wait", type=float, default=150.0, help="signal at this many seconds whatever the run is doing")
    opts = parser.parse_args()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    print(describe_machine(), flush=True)
    for name in opts.only or COMMANDS:
        script, flags = COMMANDS[name]
        with tempfile.TemporaryDirectory() as directory:
            row = measure(name, script, flags, Path(directory), opts.after, opts.wait)
        rows.append(row)
        print(f"{name}: signalled at {row['seconds_to_signal']} s ({row['phase']}), stopped {row['seconds_to_stop']} s "
              f"later, exit {row['exit']}; {row['last_line']}", flush=True)
        with open(opts.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
