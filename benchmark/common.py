"""Helpers shared by the benchmarks and the tests: run a copy of a script, read its TensorBoard logs."""
import argparse
import filecmp
import importlib.util
import json
import os
import platform
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "cleanrl_scale"
# Args fields that cannot change what a run learns: left out of a run's identity (benchmark/launch.py) and of the
# configs the analysis tells apart (benchmark/configs.py). Checkpoints and logging; the states saved for the coverage
# metric (no random number is drawn for them); speed (compilation, fused and unrolled loops); the process layout of a
# run that spans several processes (the scripts train alike on any device split). tests/test_identity_flags.py holds
# it against what the scripts themselves count as not changing learning.
NON_IDENTITY = ("save_every", "keep_checkpoints", "track", "wandb_project_name", "wandb_entity", "coverage_samples",
                "coverage_every", "fuse_iterations", "unroll", "compile_cache", "compile", "cudagraphs", "distributed",
                "coordinator_address", "num_processes", "process_id", "num_devices")


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, its errors (an unknown flag, a bad value, a missing argument) the bad-input rule's one line
    `<prog>: error: <message>` and exit status 2, without the usage block argparse prints before it (`--help` has
    it). Give `prog` (the script's file name): under a test runner sys.argv[0] is not the script."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def load_script(name):
    """Import cleanrl_scale/<name>.py as a module (its training only runs under __main__)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # tyro reads the Args docstrings through inspect, which needs it
    spec.loader.exec_module(module)
    return module


def cli_args(module):
    """The dataclass a script's command line fills: its RunArgs (the algorithm's Args and the run's flags, from its
    appendix; a JAX script's command_line() hides the run flags it does not use), or Args for a script without one."""
    if hasattr(module, "command_line"):
        return module.command_line()
    return getattr(module, "RunArgs", module.Args)


def script_flags(module):
    """The fields of a script's command line that are its flags (a JAX script's UNUSED_RUN_FLAGS are not)."""
    import dataclasses

    return {f.name for f in dataclasses.fields(cli_args(module))} - set(getattr(module, "UNUSED_RUN_FLAGS", ()))


def start_copy(name, args, workdir, capture=True, extra_env=None, source=None, python_flags=()):
    """Copy the script alone into `workdir` and start it there, as a user who copied it would (a Popen);
    `source`: another version of it to copy (e.g. an earlier revision); `python_flags` go before the script's name
    (e.g. `-m cProfile -o FILE`)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / f"{name}.py"
    if not (copy.exists() and filecmp.cmp(source or SCRIPTS / f"{name}.py", copy, shallow=False)):  # kept if the same
        shutil.copy(source or SCRIPTS / f"{name}.py", copy)
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1", **(extra_env or {}))
    pipe = subprocess.PIPE if capture else None
    return subprocess.Popen([sys.executable, *python_flags, f"{name}.py", *map(str, args)], cwd=workdir, env=env,
                            stdout=pipe, stderr=pipe, text=True)


def finish(process, timeout=None):
    """Wait for a started copy: a CompletedProcess (killed at `timeout`, as subprocess.run does)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_copy(name, args, workdir, timeout=None, capture=True, extra_env=None, source=None, python_flags=()):
    """Run a copy of the script in `workdir` to its end."""
    return finish(start_copy(name, args, workdir, capture, extra_env, source, python_flags), timeout)


def script_at(name, revision, directory):
    """cleanrl_scale/<name>.py as it was at git `revision`, written under `directory`: its path."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:cleanrl_scale/{name}.py"], capture_output=True,
                          text=True, check=True).stdout
    path = Path(directory) / f"{name}@{revision.replace('/', '_')}.py"
    path.write_text(text)
    return path


def run_dirs(workdir):
    runs = Path(workdir) / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def read_tensorboard_run(run_dir):
    """({tag: [ScalarEvent(wall_time, step, value)]}, {tag: [text]}) of one TensorBoard run (a script's runs/<run>),
    through TensorBoard's own reader."""
    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    scalars = {tag: ea.Scalars(tag) for tag in ea.Tags()["scalars"]}
    texts = {tag: [e.tensor_proto.string_val[0].decode() for e in ea.Tensors(tag)] for tag in ea.Tags()["tensors"]}
    return scalars, texts


def describe_machine():
    """The CPU model, its cores and the GPUs (nvidia-smi), e.g. "AMD EPYC 7B13, 2 cores, no GPU"."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = []
    if shutil.which("nvidia-smi"):
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)"; MIG slices are listed below their GPU, indented
        gpus = [line.split(":", 1)[1].split("(")[0].strip() for line in listing.splitlines() if line.startswith("GPU")]
    return f"{cpu}, {os.cpu_count()} cores, " + (f"GPU: {', '.join(gpus)}" if gpus else "no GPU")


def repeat_and_report(opts, measure, describe, label, machine=""):
    """Run `measure()` --repeats times, print every row and the median through `describe`; --json keeps them all."""
    machine = machine or describe_machine()
    rows = []
    for repeat in range(opts.repeats):
        rows.append(measure())
        print(f"repeat {repeat}: {describe(rows[-1])}", flush=True)
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {opts.repeats} ({label}, {machine}): {describe(median)}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "machine": machine, "repeats": rows, "median": median}, f, indent=2)
    return median


def update_wall_times(name, args, extra_env=None):
    """Train a copy of `name` in a temporary directory: (wall time of each logged charts/SPS, launch time)."""
    with tempfile.TemporaryDirectory() as tmp:
        launched = time.time()
        result = run_copy(name, args, tmp, extra_env=extra_env)
        if result.returncode:
            raise SystemExit(f"{name} failed:\n{result.stderr[-3000:]}")
        scalars, _ = read_tensorboard_run(run_dirs(tmp)[0])
    return [e.wall_time for e in scalars["charts/SPS"]], launched


def on_one_device(fn, **jit_kwargs):
    """A function of a JAX script's make_train or make_env that runs on one device's share of the envs, its collectives
    over the devices' axis "d", as the script runs it on one device: under jax.shard_map over a one-device mesh, jitted
    (with `jit_kwargs`)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec

    # jitted: an eager shard_map compiles each operation apart (a Brax reset took over 10 minutes so)
    return jax.jit(jax.shard_map(fn, mesh=Mesh(np.array(jax.devices()[:1]), ("d",)), in_specs=PartitionSpec(),
                                 out_specs=PartitionSpec(), check_vma=False), **jit_kwargs)


def jax_machine():
    import jax

    return f"{describe_machine()}, jax {jax.__version__} on {jax.default_backend()}"
