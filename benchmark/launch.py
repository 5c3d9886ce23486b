"""Launch a grid of runs of any cleanrl_scale script, locally or on Slurm, idempotently.

The grid is env ids x seeds x the cartesian product of the flag values given after `--` (a flag
with one value, or a switch, goes to every run; `--flag=value` is a value too):

    python benchmark/launch.py --script ppo_atari_envpool --env-ids Breakout-v5 Pong-v5 --seeds 1 2 3 \\
        --total-timesteps 10000000 --fixed-budget --workers 2 --out-dir grids/nenvs \\
        -- --num-envs 1 2 4 8 16 32 64 --num-steps 128

Run identity. Every run's command is parsed with the script's own `Args` (tyro) and checked with its
own `resolve_args` before anything runs: a bad flag stops the launch with one line and exit status 2.
A run's identity is the canonical form of its fully resolved command -- every field of `Args`
(defaults filled in, the budget included), sorted -- less the fields that cannot change what is
learned (benchmark/common.py's NON_IDENTITY). Its directory name is a readable part (script, env,
the grid's flags, seed) and a short hash of that identity, so `--num-steps 128` given or left at its
default, or flags given in another order, are the same run, and a pilot at another budget is another run.

Run store. Runs live in `--store` (default `<out-dir>/runs`), one directory per identity with its
`command.json`, `stdout.log` (earlier attempts: `stdout.log.1`, ...), the script's TensorBoard runs
under `runs/` and `done.json` or `failed.json`; `<out-dir>/runs/<run>` links to it. Runners share one
store, so a run that belongs to several figures runs once. Membership is recorded before anything
runs, so the analysis can list what is missing.

Seeds packed. Runs of ppo_ewma_jax.py and ppo_ewma_brax.py that differ only in consecutive seeds train in one process (--num-seeds, a
vmap over seeds) while their batches are small (--seeds-per-process: 0 up to 8 within 262,144 transitions an
iteration, K up to K, 1 never); each keeps its directory, TensorBoard run and status.

Failures. A run holds a lock (`filelock`) while it runs: a second launcher skips it ("busy") and a
finished run is skipped. A failed run is retried up to --retries times; exit status 2 (bad input) is
never retried. A retry of a script that checkpoints (`--save-every`, `--resume`) resumes from the
newest checkpoint the failed attempt left; exit status 75 (EX_TEMPFAIL: the run was preempted and
checkpointed) leaves the run for the next launch (locally) or requeues it (Slurm, through
submitit's checkpointing).

Stopping. SIGTERM, SIGUSR1 or Ctrl-C to a local launch stops the whole grid: every running run gets the signal (each
runs in a process group of its own, so a terminal's Ctrl-C reaches the launcher alone, which passes it on once),
checkpoints and exits, no other run starts, and the launcher prints the summary and one line naming the command that
continues -- the same command: finished runs are skipped, stopped ones resume from their newest checkpoint -- and
exits 75 (130 after a Ctrl-C). A second Ctrl-C kills the running runs at once. A launcher killed outright (SIGKILL,
its terminal closed) leaves no run training unwatched: each gets SIGTERM.

Budgets. --fixed-budget gives every run --total-timesteps (data-collection §4.2: N_envs and
rollout length vary at a fixed budget); --iterations I (I > 0) gives each run I x batch steps (the batch as
the script resolves it for that run's env, recipes, presets and suite defaults included; noisy_sgd: I
gradient steps); neither: the script's own budget.

Local runs (--workers K) each get a 1/K share of the CPUs (affinity and thread-count variables)
and, when CUDA_VISIBLE_DEVICES lists GPUs, one of them (--gpus-per-run G: G of them); runs that share a GPU get
XLA_PYTHON_CLIENT_PREALLOCATE=false unless the environment sets JAX's memory already. --slurm submits the runs as a Slurm job
array through submitit (--slurm-* flags; --no-wait returns once submitted, and a later launch leaves a run that
an earlier one's job still holds, as squeue lists it, to that job); it needs Slurm's sbatch on PATH (else it is
refused: a dry run needs none); --slurm-cluster debug/local runs that path here. A run of several processes
(--slurm-nodes N --slurm-tasks-per-node G: a JAX script over N nodes of G GPUs) starts one process per task,
joined by jax.distributed with task 0 as the coordinator; task 0 keeps the run's lock, log and status, task r logs
to stdout.task<r>.log.
"""
import argparse
import contextlib
import copy
import ctypes
import dataclasses
import functools
import hashlib
import inspect
import io
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import submitit
import tyro
from filelock import FileLock, Timeout

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "cleanrl_scale"
sys.path.insert(0, str(ROOT))
from benchmark.common import NON_IDENTITY, OneLineParser, cli_args, load_script, script_flags  # noqa: E402

DERIVED = ("batch_size", "num_iterations")  # filled in by resolve_args from other fields: left out of the readable name
PACKABLE = ("ppo_ewma_jax", "ppo_ewma_brax")  # scripts whose --num-seeds trains seeds --seed.. in one process, a run each
PACK_SEEDS, PACK_TRANSITIONS = 8, 262_144  # --seeds-per-process 0: up to 8 seeds, up to 262,144 transitions an iteration
BAD_INPUT, REQUEUE = 2, 75  # the scripts' exit status for bad flags; "preempted, checkpointed: requeue me"
# a run stopped, not failed: it said so (75; 130 after a Ctrl-C, checkpointed too), or a SIGTERM / SIGINT ended it
STOPPED = (REQUEUE, 128 + signal.SIGINT, -signal.SIGTERM, -signal.SIGINT)
CHECKPOINT = re.compile(r"iter_(\d+)\.(npz|pt)")  # the scripts' checkpoint files, runs/<tb run>/checkpoints/iter_<N>.npz
NAME_LIMIT = 150  # characters of the readable part of a run's name (file names stop at 255)


def fail(message):
    """Bad input to the launcher: one line, exit status 2, nothing run."""
    print(f"launch.py: error: {message}", file=sys.stderr)
    raise SystemExit(BAD_INPUT)


def parse_grid(tokens):
    """['--num-envs', '1', '2', '--lr=3e-4', '--anneal-lr'] -> {'--num-envs': ['1', '2'], '--lr': ['3e-4'], '--anneal-lr': []}."""
    grid, flag = {}, None
    for token in tokens:
        if token.startswith("--") and not _is_number(token):
            flag, _, value = token.partition("=")
            if flag in grid:
                fail(f"grid flag {flag} is given twice")
            grid[flag] = [value] if value else []
        elif flag is None:
            fail(f"grid value {token!r} comes before any flag")
        else:
            if token in grid[flag]:
                fail(f"grid flag {flag}: the value {token} is given twice")
            grid[flag].append(token)
    return grid


def _is_number(token):
    try:
        float(token)
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=None)
def script_module(script):
    return load_script(script)


def field_of(flag):
    return flag[2:].replace("-", "_")


def check_flags(script, flags):
    """Every grid flag names a field of the script's Args (`--no-x` for a switch x)."""
    fields = {f.name: f for f in dataclasses.fields(cli_args(script_module(script)))}
    for flag in flags:
        name = field_of(flag)
        if name not in fields and not (name.startswith("no_") and name[3:] in fields):
            fail(f"{flag}: {script}.py has no such flag")


def parse_args(script, argv):
    """The script's Args for `argv`, parsed by tyro exactly as the script would; fail() with tyro's reason."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            return tyro.cli(cli_args(script_module(script)), args=argv)
    except SystemExit:
        text = out.getvalue().split("Argument helptext")[0].split("For full helptext")[0]
        reason = " ".join(w for w in text.replace("│", " ").split() if set(w) - set("-─╭╮╰╯"))
        fail(f"{script}.py rejects `{' '.join(argv)}`: {reason}")


def batch_size(script, args, devices=0):
    """The batch of `args` as the script resolves it: read from a copy at a budget of at least one batch whose count of
    iterations the script accepts (a budget too large for a small batch breaks a rule of its own, e.g. optax's int32
    step count; a bad flag is reported as the first budget finds it)."""
    budgets = (2**31 - 1, 2**20)
    for budget in budgets:
        probe = resolved_copy(script, dataclasses.replace(args, total_timesteps=budget), strict=False, devices=devices)
        if probe is not None:
            return probe.batch_size
    resolved_copy(script, dataclasses.replace(args, total_timesteps=budgets[0]), devices=devices)  # fails, naming the rule


def resolved_copy(script, args, strict=True, devices=0):
    """A copy of `args` through the script's own resolve_args (its bad-input rules); fail() with its message
    (strict=False: None instead). `devices`: the devices a run spans (--gpus-per-run), 0 where not known here."""
    module = script_module(script)
    probe = copy.deepcopy(args)
    try:
        if "num_devices" in inspect.signature(module.resolve_args).parameters:
            # the device count of the machine that runs it, unless --gpus-per-run gives it, is not known here: the rules
            # that hold at every count
            module.resolve_args(probe, num_devices=devices)
        else:
            module.resolve_args(probe)
    except module.BadFlag as e:
        if not strict:
            return None
        fail(f"{script}.py: {e}")
    return probe


def identity(script, resolved):
    """(fields, short hash) of a run: every field of its Args after the script's own resolve_args (defaults and
    derived values filled in: `--num-minibatches 32` given or left to default is one run), but NON_IDENTITY."""
    fields = {k: v for k, v in sorted(dataclasses.asdict(resolved).items()) if k not in NON_IDENTITY}
    canonical = json.dumps({"script": script, "args": fields}, sort_keys=True, default=str)
    return json.loads(canonical)["args"], hashlib.sha256(canonical.encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=None)
def default_fields(script, env_field, env_id):
    """The resolved fields of the script's defaults (with this env): what a run's readable name leaves out."""
    args = cli_args(script_module(script))()
    if env_id is not None:
        setattr(args, env_field, env_id)
    resolved = resolved_copy(script, args, strict=False)
    return identity(script, resolved or args)[0]


def run_name(script, env_field, env_id, seed, fields, digest):
    """<script>__<env>__<flag=value of every resolved field off its default, sorted>__s<seed>__<hash>: a function
    of the identity alone, so one run has one directory whatever the order or spelling of its flags."""
    defaults = default_fields(script, env_field, env_id)
    label = "__".join(f"{k.replace('_', '-')}={readable(v)}" for k, v in fields.items()
                      if k not in (env_field, "seed") + DERIVED and v != defaults.get(k)) or "default"
    name = "__".join(x for x in (script, env_id and readable(env_id), label) if x)
    if len(name) > NAME_LIMIT:  # whole fields only: a value cut short would say something false
        name = name[:NAME_LIMIT].rsplit("__", 1)[0] + "__etc"
    return f"{name}__s{seed}__{digest}"


def readable(text):
    return re.sub(r"[^A-Za-z0-9.=+_-]", "-", str(text))


def expand(opts, grid):
    """Every run of the grid: a dict with its name, identity, env, seed, grid flags, argv and resolved Args."""
    check_flags(opts.script, list(grid) + [opts.env_flag] * bool(opts.env_ids))
    fields = {f.name for f in dataclasses.fields(cli_args(script_module(opts.script)))}
    owned = {"--seed": "--seeds"}  # grid flags the launcher sets itself
    if opts.env_ids:
        owned[opts.env_flag] = "--env-ids"
    if opts.fixed_budget or (opts.iterations and "total_timesteps" in fields):
        owned["--total-timesteps"] = "--fixed-budget/--iterations"
    elif opts.iterations:
        owned["--num-steps"] = "--iterations"
    for flag, by in owned.items():
        if flag in grid:
            fail(f"{flag} after -- is set by the launcher's {by}; give it there only")
    if opts.script in PACKABLE and "--num-seeds" in grid:  # a run directory holds one seed's run; packs are the launcher's
        fail("--num-seeds after --: give the seeds with --seeds (--seeds-per-process runs several in one process, each "
             "in its own run directory)")
    if (opts.fixed_budget or opts.iterations) and "total_timesteps" not in fields and opts.script != "noisy_sgd":
        fail(f"--fixed-budget/--iterations: {opts.script}.py has no --total-timesteps")
    if opts.fixed_budget and "total_timesteps" not in fields:
        fail(f"--fixed-budget: {opts.script}.py has no --total-timesteps; use --iterations (its gradient steps)")
    switches = [f for f, values in grid.items() if not values]
    valued = {f: values for f, values in grid.items() if values}
    switch_fields = {f.name for f in dataclasses.fields(cli_args(script_module(opts.script))) if f.type in (bool, "bool")}
    runs, parsed = [], {}
    # the devices a run spans, where known here: --gpus-per-run's (local), or one per task of a run of several tasks
    tasks = opts.slurm_nodes * opts.slurm_tasks_per_node
    devices = opts.gpus_per_run if opts.gpus_per_run > 1 else tasks if opts.slurm and tasks > 1 else 0
    for values in itertools.product(*valued.values()):
        flags = dict(zip(valued, values))
        argv = [x for f, v in flags.items() for x in as_argv(f, v, switch_fields)] + switches
        args = parse_args(opts.script, argv)
        if opts.fixed_budget:
            args.total_timesteps = opts.total_timesteps
        elif opts.iterations and "total_timesteps" in fields:
            pass  # below, for each env: the batch is checked with it
        elif opts.iterations:
            args.num_steps = opts.iterations
        if opts.save_every and "save_every" in fields and "--save-every" not in flags:
            args.save_every = opts.save_every
        parsed[tuple(values)] = (flags, args)
    for env_id, seed, values in itertools.product(opts.env_ids or [None], opts.seeds, parsed):
        flags, args = parsed[values]
        args = dataclasses.replace(args, seed=seed, **({field_of(opts.env_flag): env_id} if env_id is not None else {}))
        # a pack's checkpoint (--num-seeds K) resumes only as a pack of K again: its runs are checked as the pack runs
        resume = getattr(args, "resume", None) if opts.script in PACKABLE else None
        held = checkpoint_seeds(Path(resume)) if resume and Path(resume).is_file() else 1
        if held > 1 and opts.seeds_per_process != held:
            fail(f"--resume {resume} holds {held} seeds (a pack's checkpoint): launch them with --seeds-per-process {held}")
        first = int(checkpoint_args(Path(resume)).get("seed", seed)) if resume and Path(resume).is_file() else seed
        if not first <= seed < first + held:  # a resume continues its checkpoint's seed (a pack's: under its first)
            fail(f"--resume {resume} holds seed{f's {first}..{first + held - 1}' if held > 1 else f' {first}'}: "
                 f"seed {seed} is {'none of them' if held > 1 else 'another'}")
        as_run = dataclasses.replace(args, num_seeds=held, seed=first) if held > 1 else args
        if opts.iterations and not opts.fixed_budget and "total_timesteps" in fields:
            args.total_timesteps = as_run.total_timesteps = opts.iterations * batch_size(opts.script, as_run, devices)
        probe = resolved_copy(opts.script, as_run, devices=devices)  # the script's own bad-input rules, for this env and seed
        if held > 1:
            probe.num_seeds, probe.seed = args.num_seeds, seed  # a run is one seed's; its pack's are the launcher's
        resolved, digest = identity(opts.script, probe)
        shown = {**flags, **{s: "on" for s in switches}}
        name = run_name(opts.script, field_of(opts.env_flag), env_id, seed, resolved, digest)
        runs.append({"name": name, "id": digest, "script": opts.script, "env": env_id or "",
                     "env_field": field_of(opts.env_flag), "seed": seed, "flags": shown, "argv": command_line(args, fields),
                     "resolved": resolved, **({"batch_size": probe.batch_size} if hasattr(probe, "batch_size") else {})})
    return runs


def as_argv(flag, value, switch_fields):
    """A grid value as the script's flags: a switch's True/False (on/off) becomes --x / --no-x."""
    if field_of(flag) not in switch_fields:
        return [flag, value]
    if value.lower() in ("true", "on", "yes", "1"):
        return [flag]
    if value.lower() in ("false", "off", "no", "0"):
        return [f"--no-{flag[2:]}"]
    fail(f"{flag} is a switch: its grid values are True/False (got {value!r})")


def command_line(args, fields):
    """The command that reproduces `args`: every field that differs from the script's default, as flags."""
    defaults = type(args)()
    argv = []
    for name in sorted(fields):
        value, default = getattr(args, name), getattr(defaults, name)
        if value == default:
            continue
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, (tuple, list)):
            argv += [flag, *map(str, value)]
        elif value is None:
            continue  # an Optional left unset: its default
        else:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    return argv


def packs(todo, opts):
    """The processes that run `todo`: a run alone, or a pack of runs that differ only in their consecutive seeds, which
    one process trains with --num-seeds (PureJaxRL's vmap over seeds; ppo_ewma_jax.py). A pack is its first run's
    record with "pack": every member run. --seeds-per-process K packs up to K; 0: up to PACK_SEEDS while the pack's
    transitions an iteration stay within PACK_TRANSITIONS (small batches, where a process's own cost dominates).
    A run whose directory holds a checkpoint resumes it: with the runs after it that the checkpoint's seeds name
    (a pack's checkpoint lives in its first run), else alone; no other pack takes it in."""
    if opts.script not in PACKABLE or opts.seeds_per_process == 1 or opts.slurm_nodes * opts.slurm_tasks_per_node > 1:
        return list(todo)
    groups = {}
    for run in todo:  # the same run but for its seed: the same resolved flags less the seed
        key = json.dumps({k: v for k, v in run["resolved"].items() if k != "seed"}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    jobs = []
    for group in groups.values():
        group.sort(key=lambda run: run["seed"])
        size = opts.seeds_per_process or max(1, min(PACK_SEEDS, PACK_TRANSITIONS // run_batch(group[0])))
        saved = {run["name"]: newest_checkpoint(run_dir(opts, run)) for run in group}
        pack, i = [], 0
        while i < len(group):
            run = group[i]
            if saved[run["name"]] is not None:  # its own pack: the seeds its checkpoint holds, if they are all here
                if pack:
                    jobs.append(as_job(pack))
                want = checkpoint_seeds(saved[run["name"]])
                rest = group[i + 1:i + want]
                if len(rest) == want - 1 and all(r["seed"] == run["seed"] + k + 1 and saved[r["name"]] is None
                                                 for k, r in enumerate(rest)):
                    jobs.append(as_job([run, *rest]))
                    i += want
                else:  # resumed_argv says why it cannot resume, and leaves the checkpoint
                    jobs.append(run)
                    i += 1
                pack = []
                continue
            if pack and (run["seed"] != pack[-1]["seed"] + 1 or len(pack) == size):
                jobs.append(as_job(pack))
                pack = []
            pack.append(run)
            i += 1
        if pack:
            jobs.append(as_job(pack))
    return jobs


def run_batch(run):
    return run.get("batch_size") or 1


def as_job(pack):
    return pack[0] if len(pack) == 1 else {**pack[0], "pack": pack}


def members(job):
    return job.get("pack", [job])


# ---------------------------------------------------------------------------------------------
# The run store
# ---------------------------------------------------------------------------------------------
def run_dir(opts, run):
    return Path(opts.store) / run["name"]


def register(opts, runs):
    """Create every run's directory in the store (command.json) and link it from the grid's runs/."""
    links = Path(opts.out_dir) / "runs"
    links.mkdir(parents=True, exist_ok=True)
    for run in runs:
        d = run_dir(opts, run)
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "command.json").exists():
            write_json(d / "command.json", run)
        link = links / run["name"]
        if link.resolve() == d.resolve():
            continue
        if link.is_symlink():  # a stale link (the store moved)
            link.unlink(missing_ok=True)
        try:
            link.symlink_to(os.path.relpath(d, links), target_is_directory=True)
        except FileExistsError:  # another launcher linked it meanwhile
            pass


def write_json(path, record):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)  # never half-written, even with two launchers


def status(opts, run):
    d = run_dir(opts, run)
    for state in ("done", "failed", "preempted"):
        if (d / f"{state}.json").exists():
            return state
    return "new"


def newest_checkpoint(d):
    """The checkpoint with the highest iteration under the run's TensorBoard runs (None if there is none)."""
    found = [p for p in (d / "runs").glob("*/checkpoints/*") if CHECKPOINT.fullmatch(p.name)]  # not a .tmp being written
    return max(found, key=lambda p: (int(CHECKPOINT.fullmatch(p.name)[1]), p.stat().st_mtime), default=None)


def rotate_log(d):
    """stdout.log -> stdout.log.N (the next free N): every attempt's log is kept."""
    if (d / "stdout.log").exists():
        n = 1 + max([int(p.suffix[1:]) for p in d.glob("stdout.log.*") if p.suffix[1:].isdigit()], default=0)
        (d / "stdout.log").rename(d / f"stdout.log.{n}")


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in a forked child
except (OSError, AttributeError):  # not Linux
    _prctl = None
PR_SET_PDEATHSIG = 1


def child_setup(cpus, launcher):
    """In a run's process before the script starts: its CPUs; SIGTERM (checkpoint and stop) when `launcher`, its
    parent, dies without waiting for it (killed, or its terminal closed), so that no run trains on unwatched. (Linux
    sends it when the thread that started the process ends: a worker of the launch's pool, which lives until the
    grid's end.)"""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if launcher is not None and _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != launcher:  # it died before that took effect
            os.kill(os.getpid(), signal.SIGTERM)


class Attempt:
    """One run of a grid point in its store directory, under its lock. `signal(signum)` passes a signal on to its
    process and starts no other (a run the launch stopped before it began is "unstarted"); `kill()` ends it at once;
    `stop()` (a Slurm task's) passes on SIGTERM and waits for the run to checkpoint and exit."""

    def __init__(self, own_group=False):
        """own_group: the run's process in a process group of its own, and sent SIGTERM if the launcher dies (a local
        launch: a signal to the launcher's group, a terminal's Ctrl-C, reaches the launcher alone, which passes it on
        once). Else (a Slurm task) it stays in the task's group."""
        self.process, self.stopped, self.signum, self.own_group = None, False, signal.SIGTERM, own_group

    def __call__(self, run, store, env=None, cpus=None, task=None):
        """The run's (or pack's) state; a pack some of whose runs another launcher finished meanwhile runs the rest
        one by one and returns {name: state}."""
        if self.stopped:
            return "unstarted"
        dirs = [Path(store) / m["name"] for m in members(run)]
        held, states = [], {}
        try:
            for m, d in zip(members(run), dirs):
                lock = FileLock(d / ".lock")
                try:
                    lock.acquire(timeout=0)
                    held.append(lock)
                except Timeout:
                    states[m["name"]] = "busy"
                    continue
                if (d / "done.json").exists():  # another launcher finished it meanwhile
                    states[m["name"]] = "skipped"
            if len(dirs) == 1:
                return states.get(run["name"]) or self.execute(run, dirs[0], env, cpus, task)
            if not states:
                return self.execute(run, dirs[0], env, cpus, task)
            # another launcher holds or finished some of the pack: the others run one by one
            for m, d in zip(members(run), dirs):
                if m["name"] not in states:
                    states[m["name"]] = "unstarted" if self.stopped else self.execute(m, d, env, cpus)
            return states
        finally:
            for lock in held:
                lock.release()

    def execute(self, run, d, env, cpus, task=None):
        """One attempt, in the first member's directory; a pack trains its seeds with --num-seeds and each seed's
        TensorBoard run is then moved to its own member's directory."""
        if self.stopped:  # the launch was stopped while this attempt took its lock: leave the run as it is
            return "unstarted"
        pack = members(run)
        dirs = [d.parent / m["name"] for m in pack]
        argv, checkpoint = resumed_argv(run, d)
        if argv is None:  # a checkpoint of another pack of seeds: say so, and leave it where it is
            print(checkpoint, flush=True)
            for m in dirs:
                write_json(m / "failed.json", {"returncode": BAD_INPUT, "seconds": 0, "log": None, "reason": checkpoint})
            return "failed"
        argv += task_flags(task) + (["--num-seeds", str(len(pack))] if len(pack) > 1 else [])
        kept = [m for m in dirs[1:] if newest_checkpoint(m) is not None]
        if kept:  # never wiped: a pack that would start clean over a run's own checkpoint is refused
            why = f"{run['name']}: the pack would start {kept[0].name} over, whose checkpoint {newest_checkpoint(kept[0])} it cannot resume"
            print(why, flush=True)
            for m in dirs:
                write_json(m / "failed.json", {"returncode": BAD_INPUT, "seconds": 0, "log": None, "reason": why})
            return "failed"
        for m in dirs:
            if checkpoint is None:  # start clean: no half-written logs of an earlier attempt remain
                for stale in ("runs", "wandb"):
                    shutil.rmtree(m / stale, ignore_errors=True)
            for old in ("failed.json", "preempted.json"):
                (m / old).unlink(missing_ok=True)
        rotate_log(d)
        shutil.copy(SCRIPTS / f"{run['script']}.py", d / f"{run['script']}.py")
        start = time.time()
        with open(d / "stdout.log", "w") as log:
            log.write(f"$ python {run['script']}.py {' '.join(argv)}\n")
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, f"{run['script']}.py", *argv], cwd=d, stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                start_new_session=self.own_group,
                preexec_fn=functools.partial(child_setup, cpus, os.getpid() if self.own_group else None)
                if cpus or self.own_group else None,
            )
            if self.stopped:  # a stop that came while the process started (signal() set the flag, then read process)
                self.process.send_signal(self.signum)
            returncode = self.process.wait()
        state = "done" if returncode == 0 else "preempted" if returncode in STOPPED or self.stopped else "failed"
        for member, m in zip(pack[1:], dirs[1:]):  # runs/<env>__<exp>__<seed>__<time>: each seed's to its own run
            (m / "runs").mkdir(exist_ok=True)
            for tb_run in (d / "runs").glob(f"*__{member['seed']}__*"):
                if tb_run.name.rsplit("__", 2)[1] == str(member["seed"]):
                    tb_run.rename(m / "runs" / tb_run.name)
        drop = state == "failed" and newest_checkpoint(d) is None
        record = {"returncode": returncode, "seconds": round(time.time() - start, 1),
                  "resumed_from": checkpoint and str(checkpoint), **({"pack": [m["name"] for m in pack]} if len(pack) > 1 else {})}
        for m in dirs:
            if m != d:  # the pack's one log, in every member's directory (the earlier attempts' kept as alone)
                rotate_log(m)
                shutil.copy(d / "stdout.log", m / "stdout.log")
            if drop:  # keep the log, drop what the run half-wrote
                for partial in ("runs", "wandb"):
                    shutil.rmtree(m / partial, ignore_errors=True)
            write_json(m / f"{state}.json", {**record, "log": str(m / "stdout.log")})
        return state

    def follow(self, run, store, task):
        """Task `rank` > 0 of a job of several tasks: one more process of the same command, joined to task 0's by
        jax.distributed; the run's lock, log, status and copy of the script are task 0's (this task runs the script from
        cleanrl_scale/, the copy's source, and logs to stdout.task<rank>.log)."""
        d = Path(store) / run["name"]
        argv = resumed_argv(run, d)[0] + task_flags(task)
        with open(d / f"stdout.task{task[0]}.log", "w") as log:
            log.write(f"$ python {run['script']}.py {' '.join(argv)}\n")
            log.flush()
            self.process = subprocess.Popen([sys.executable, SCRIPTS / f"{run['script']}.py", *argv], cwd=d,
                                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            returncode = self.process.wait()
        return "done" if returncode == 0 else "preempted" if returncode in STOPPED else "failed"

    def signal(self, signum):
        """Pass `signum` on to the running process, if any, and start no other. Safe in a signal handler: it sets the
        flag before it reads the process, and execute() reads the flag after it set the process, so a process that
        starts meanwhile gets the signal too (from one of them, or both)."""
        self.signum, self.stopped = signum, True
        process = self.process
        if process is not None:
            process.send_signal(signum)  # a no-op once the process has exited

    def kill(self):
        """End the running process at once (SIGKILL), and start no other."""
        self.stopped = True
        process = self.process
        if process is not None:
            process.kill()

    def stop(self):
        self.signal(signal.SIGTERM)
        process = self.process
        if process is not None and process.poll() is None:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def checkpoint_args(path):
    """The flags a JAX script's checkpoint lists in its metadata ({} for any other)."""
    if path.suffix != ".npz":
        return {}
    with np.load(path) as f:
        meta = json.loads(str(f["meta"])) if "meta" in f.files else {}
    return meta.get("args", {})


def checkpoint_seeds(path):
    """The number of seeds a checkpoint holds (the PPO-EWMA scripts' --num-seeds in its metadata; 1 for any other)."""
    return int(checkpoint_args(path).get("num_seeds", 1))


def resumed_argv(run, d):
    """(argv, checkpoint) of the next attempt: the run's command, resuming from the newest checkpoint a previous
    attempt left, if any (a user --resume is replaced); (None, why) if that checkpoint holds another number of seeds
    than this attempt trains (another --seeds-per-process)."""
    argv = list(run["argv"])
    checkpoint = newest_checkpoint(d) if "resume" in run["resolved"] else None
    if checkpoint is not None and checkpoint_seeds(checkpoint) != len(members(run)):
        seeds = checkpoint_seeds(checkpoint)
        return None, (f"{run['name']}: its checkpoint {checkpoint} holds seeds {run['seed']}..{run['seed'] + seeds - 1}, "
                      f"this launch trains {len(members(run))} from it: relaunch with all of them among --seeds and "
                      f"--seeds-per-process other than 1 (the checkpoint is left as it is)")
    if checkpoint is not None:
        at = argv.index("--resume") if "--resume" in argv else None
        argv = (argv[:at] + argv[at + 2:] if at is not None else argv) + ["--resume", str(checkpoint.relative_to(d))]
    return argv, checkpoint


def task_flags(task):
    """The flags that join task (rank, count, coordinator) of a job of several tasks to the others (jax.distributed)."""
    if task is None:
        return []
    rank, count, coordinator = task
    return ["--distributed", "--coordinator-address", coordinator, "--num-processes", str(count), "--process-id", str(rank)]


def failure_code(store, run):
    return json.loads((Path(store) / run["name"] / "failed.json").read_text())["returncode"]


def attempt_with_retries(run, store, retries, env=None, cpus=None, attempt=None):
    """Run until done, busy elsewhere or preempted, retrying a failure (not bad input) up to `retries` times."""
    attempt = attempt or Attempt()
    for n in range(1 + retries):
        state = attempt(run, store, env, cpus)
        if isinstance(state, dict):  # a pack run one by one: a member that failed gets the attempts left
            for m in members(run):
                if state[m["name"]] == "failed" and retries - n > 0 and failure_code(store, m) != BAD_INPUT:
                    state[m["name"]] = attempt_with_retries(m, store, retries - n - 1, env, cpus, attempt)
            return state
        if state != "failed":
            return state
        code = failure_code(store, run)
        print(f"failed with exit status {code} (attempt {n + 1} of {1 + retries}): {run['name']}", flush=True)
        if code == BAD_INPUT:
            break
    return "failed"


class SlurmTask(submitit.helpers.Checkpointable):
    """A Slurm array task: on timeout or preemption (submitit's signal) stop the run and requeue this task,
    which resumes the run from its newest checkpoint."""

    def __init__(self):
        self.attempt = Attempt()

    def __call__(self, run, store, retries):
        job = submitit.JobEnvironment()
        if job.num_tasks == 1:
            return attempt_with_retries(run, store, retries, attempt=self.attempt)
        # one process per task (--slurm-nodes x --slurm-tasks-per-node), task 0 the coordinator; no retry, which the
        # other tasks would not join (a requeue restarts them all, from the newest checkpoint)
        port = 20000 + int(hashlib.sha256(job.job_id.encode()).hexdigest(), 16) % 30000
        task = (job.global_rank, job.num_tasks, f"{job.hostnames[0]}:{port}")
        return self.attempt.follow(run, store, task) if job.global_rank else self.attempt(run, store, task=task)

    def checkpoint(self, *args, **kwargs):
        self.attempt.stop()  # the script checkpoints on SIGTERM where it can (exit 75)
        return submitit.helpers.DelayedSubmission(SlurmTask(), *args, **kwargs)


def worker_resources(slot, workers, gpus_per_run=1):
    """CPU share, thread variables and GPUs (`gpus_per_run` of them, consecutive) of local worker `slot`."""
    cpus = sorted(os.sched_getaffinity(0))
    share = cpus[slot::workers] or cpus
    threads = str(len(share))
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[(slot * gpus_per_run + i) % len(gpus)] for i in range(gpus_per_run))
    if workers * gpus_per_run > max(len(gpus), 1) and not {"XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"} & set(os.environ):
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # runs share a GPU: JAX's first would take 75% of its memory
    return env, set(share)


def spread(job, state):
    """{member name: state} of a job's outcome (one state for every member, or a pack's own dict)."""
    return state if isinstance(state, dict) else {m["name"]: state for m in members(job)}


def say(line):
    """A line on stdout from a signal handler: os.write, not print (the main thread may be inside a print)."""
    try:
        os.write(sys.stdout.fileno(), f"{line}\n".encode())
    except (OSError, ValueError):  # no file descriptor (stdout captured in this process)
        pass


class GridStop:
    """A stop of the whole local grid. The first SIGTERM, SIGUSR1 or Ctrl-C (SIGINT) to the launcher passes the signal
    on to every running run (each in a process group of its own: a terminal's Ctrl-C reaches the launcher alone) and
    starts no other; the runs checkpoint and exit 75 (130 after a Ctrl-C), and the launch then exits 75 (130 after a
    Ctrl-C). A second Ctrl-C kills the running runs at once (SIGKILL)."""

    NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGUSR1: "SIGUSR1", signal.SIGINT: "SIGINT (Ctrl-C)"}

    def __init__(self):
        self.signum, self.aborted, self.attempts = None, False, []

    def __bool__(self):
        return self.signum is not None

    def add(self, attempt):
        """Register an attempt before it runs (then read the stop: see Attempt.signal)."""
        self.attempts.append(attempt)
        if self:
            attempt.stopped = True

    def handle(self, signum, frame):
        if self and signum == signal.SIGINT and not self.aborted:  # a Ctrl-C after the stop: no waiting for checkpoints
            self.aborted = True
            for attempt in list(self.attempts):
                attempt.kill()
            say("launch.py: Ctrl-C again: killed the running runs")
            return
        if self:  # a second SIGTERM / SIGUSR1: the runs have it already
            return
        self.signum = signum  # set before the attempts are read (see add())
        for attempt in list(self.attempts):
            attempt.signal(signum)
        say(f"launch.py: {self.NAMES[signum]}: stopping the grid: the running runs checkpoint and stop, no other "
            f"starts (Ctrl-C again: kill them at once)")

    @property
    def exit_code(self):
        return 128 + signal.SIGINT if self.signum == signal.SIGINT or self.aborted else REQUEUE

    @contextlib.contextmanager
    def installed(self):
        """Its handler for SIGTERM, SIGUSR1 and SIGINT while the block runs (in the main thread only: elsewhere
        Python cannot set one, and the caller's own handling stays)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.signal(signum, self.handle) for signum in self.NAMES}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def launch_local(todo, opts, stop=None):
    """Run `todo` on --workers local processes; {name: outcome}. After a `stop` (GridStop) the runs not yet begun are
    "unstarted"."""
    slots, lock, outcome = list(range(opts.workers)), threading.Lock(), {}
    stop = GridStop() if stop is None else stop

    def one(run):
        attempt = Attempt(own_group=True)
        stop.add(attempt)
        if attempt.stopped:  # stopped before it began: nothing of it is touched
            outcome.update(spread(run, "unstarted"))
            return
        with lock:
            slot = slots.pop()
        try:
            outcome.update(spread(run, attempt_with_retries(run, opts.store, opts.retries, *worker_resources(slot, opts.workers, opts.gpus_per_run),
                                                            attempt=attempt)))
        finally:
            with lock:
                slots.append(slot)

    with ThreadPoolExecutor(opts.workers) as pool:
        list(pool.map(one, todo))
    return outcome


def queued_job(opts, run):
    """The id of a Slurm job of an earlier launch that still holds (or will run) this run, else None."""
    record = run_dir(opts, run) / "slurm.json"
    if not record.exists():
        return None
    job = json.loads(record.read_text())
    if job.get("cluster") != "slurm":
        return None
    try:  # squeue lists a job until it has ended (pending, running, requeued, suspended, completing); no accounting needed
        listed = subprocess.run(["squeue", "--noheader", "--jobs", job["job_id"], "--format", "%T"], capture_output=True,
                                text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return job["job_id"] if listed.returncode == 0 and listed.stdout.split() else None


def launch_slurm(todo, opts):
    """Submit `todo` as one job array; wait for it unless --no-wait. {name: outcome} of what finished."""
    queued = {run["name"]: next((job for job in map(functools.partial(queued_job, opts), members(run)) if job), None)
              for run in todo}
    outcome = {m["name"]: f"queued ({queued[run['name']]})" for run in todo if queued[run["name"]] for m in members(run)}
    todo = [run for run in todo if queued[run["name"]] is None]
    if not todo:
        return outcome
    folder = Path(opts.out_dir) / "slurm"
    executor = submitit.AutoExecutor(folder=folder, cluster=opts.slurm_cluster)
    executor.update_parameters(timeout_min=opts.slurm_time, name=f"grid-{opts.script}", tasks_per_node=opts.slurm_tasks_per_node)
    if opts.slurm_nodes > 1:
        executor.update_parameters(nodes=opts.slurm_nodes)
    if executor.cluster == "slurm":
        if opts.slurm_gpus:
            executor.update_parameters(gpus_per_node=opts.slurm_gpus)
        executor.update_parameters(cpus_per_task=opts.slurm_cpus, slurm_signal_delay_s=120,
                                   slurm_partition=opts.slurm_partition, slurm_array_parallelism=opts.slurm_array_parallelism)
    with executor.batch():
        jobs = [executor.submit(SlurmTask(), run, opts.store, opts.retries) for run in todo]
    for run, job in zip(todo, jobs):
        for m in members(run):
            write_json(run_dir(opts, m) / "slurm.json", {"job_id": job.job_id, "cluster": executor.cluster, "folder": str(folder)})
    print(f"submitted {len(jobs)} runs as {jobs[0].job_id.split('_')[0]}" + ("" if opts.no_wait else "; waiting"), flush=True)
    if opts.no_wait:
        return {**outcome, **{k: v for run, job in zip(todo, jobs) for k, v in spread(run, f"queued ({job.job_id})").items()}}
    for run, job in zip(todo, jobs):
        try:
            outcome.update(spread(run, job.results()[0]))  # (task 0's, when the run spans several tasks)
        except Exception as e:  # timed out past its requeues, cancelled, node failure: reported, not raised
            outcome.update(spread(run, "failed"))
            print(f"job {job.job_id} ({run['name']}) did not finish: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
    return outcome


def summary(runs, outcome, opts):
    """Print a table of every run and a count line; {state: count}."""
    counts = {s: 0 for s in ("done", "skipped", "failed", "busy", "preempted", "queued", "unstarted")}
    print("\n| run | status | exit | log |\n|---|---|---|---|")
    for run in runs:
        state = outcome.get(run["name"], "skipped")
        if state == "done" and run["name"] not in outcome:
            state = "skipped"
        record = {}
        for file in ("done.json", "failed.json", "preempted.json"):
            if (run_dir(opts, run) / file).exists():
                record = json.loads((run_dir(opts, run) / file).read_text())
        counts[state.split(" ")[0]] += 1
        log = record.get("log", "-") if state in ("failed", "preempted") else ""
        code = record.get("returncode", "-") if state not in ("skipped", "unstarted") else ""
        print(f"| {run['name']} | {state} | {code} | {log} |")
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s in ("done", "skipped", "failed")) + f" (of {len(runs)})")
    return {s: n for s, n in counts.items() if n or s in ("done", "skipped", "failed")}


def build_parser():
    # argparse's own errors (a missing --script, a value not a number) are the bad-input rule's one line too
    parser = OneLineParser(prog="launch.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", required=True, help="a script of cleanrl_scale/, without .py")
    parser.add_argument("--env-ids", nargs="*", default=[], help="values of --env-flag (none: the script's default)")
    parser.add_argument("--env-flag", default="--env-id", help="the script's flag that takes an env id")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--total-timesteps", type=int, default=None, help="with --fixed-budget: every run's budget")
    parser.add_argument("--fixed-budget", action="store_true", help="every run gets --total-timesteps")
    parser.add_argument("--iterations", type=int, default=None,
                        help="without --fixed-budget: budget = iterations x batch (default: the script's own budget)")
    parser.add_argument("--out-dir", default=os.environ.get("OUT_DIR", "grids"), help="the grid's directory (env OUT_DIR)")
    parser.add_argument("--store", default=None, help="where runs live, shared by grids (default: <out-dir>/runs)")
    parser.add_argument("--save-every", type=int, default=50,
                        help="give scripts that checkpoint --save-every N iterations, so a retry or a requeued job resumes "
                             "(not part of a run's identity; 0: the script's own default)")
    parser.add_argument("--workers", type=int, default=1, help="local runs at once")
    parser.add_argument("--gpus-per-run", type=int, default=1,
                        help="local runs: GPUs of CUDA_VISIBLE_DEVICES each run gets, consecutive (a script that splits its envs "
                             "over every device it sees, the JAX scripts, then runs on them all)")
    parser.add_argument("--seeds-per-process", type=int, default=0,
                        help="scripts with --num-seeds (ppo_ewma_jax, ppo_ewma_brax): runs that differ only in consecutive seeds train "
                             "in one process, up to this many (0: up to 8 while the pack's batches stay within 262,144 "
                             "transitions; 1: a process a run); each keeps its own run directory")
    parser.add_argument("--retries", type=int, default=0, help="re-runs of a failed run (bad input, exit 2, is never retried)")
    parser.add_argument("--dry-run", action="store_true", help="check the grid and print the commands only")
    parser.add_argument("--print-checkpoints", action="store_true",
                        help="print each run's newest checkpoint, a tab and the seeds it holds (or -, 0) and stop: a pack's one "
                             "checkpoint is in its first seed's run, the others print -, 0")
    parser.add_argument("--slurm", action="store_true", help="submit as a Slurm job array through submitit")
    parser.add_argument("--no-wait", action="store_true", help="with --slurm: return once the array is submitted")
    parser.add_argument("--slurm-cluster", default=None, choices=("slurm", "local", "debug"),
                        help="submitit cluster: slurm (default; needs Slurm's sbatch), or local / debug: the Slurm path run "
                             "on this machine")
    parser.add_argument("--slurm-partition", default=None)
    parser.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per node")
    parser.add_argument("--slurm-nodes", type=int, default=1, help="nodes per run (a run of several tasks needs --distributed)")
    parser.add_argument("--slurm-tasks-per-node", type=int, default=1,
                        help="processes per node and run, joined by jax.distributed (e.g. one per GPU)")
    parser.add_argument("--slurm-cpus", type=int, default=8, help="CPUs per task")
    parser.add_argument("--slurm-time", type=int, default=24 * 60, help="minutes per task (then it checkpoints and requeues)")
    parser.add_argument("--slurm-array-parallelism", type=int, default=64, help="array tasks at once")
    return parser


class Stopped(SystemExit):
    """The launch was stopped by a signal (exit status 75, or 130 after a Ctrl-C); it said how to continue."""


def relaunch_command(argv):
    """The command that launched `argv` (python <this file as it was started, else relative to here> argv)."""
    started = sys.argv[0] if sys.argv and os.path.exists(sys.argv[0]) and os.path.samefile(sys.argv[0], __file__) else None
    here = os.path.relpath(__file__)
    return shlex.join(["python", started or (here if not here.startswith("..") else os.path.abspath(__file__)), *argv])


def main(argv=None, command=None):
    """One grid; `command`: what to run again after a stop (default: `python launch.py argv`)."""
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    opts = build_parser().parse_args(argv[:split])
    names = sorted(path.stem for path in SCRIPTS.glob("*.py"))
    if opts.script not in names:
        fail(f"--script must name one of cleanrl_scale/'s scripts, {', '.join(names)} (got {opts.script!r})")
    if opts.fixed_budget and (opts.total_timesteps or 0) <= 0:
        fail("--fixed-budget needs --total-timesteps > 0")
    if opts.fixed_budget and opts.iterations is not None:
        fail("--fixed-budget and --iterations exclude each other")
    if opts.total_timesteps is not None and not opts.fixed_budget:
        fail("--total-timesteps is every run's budget only with --fixed-budget (or give --total-timesteps after --)")
    for flag in ("workers", "gpus_per_run", "slurm_time", "slurm_array_parallelism", "slurm_nodes", "slurm_tasks_per_node",
                 "iterations"):
        if getattr(opts, flag) is not None and getattr(opts, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive (got {getattr(opts, flag)})")
    for flag in ("retries", "save_every", "seeds_per_process"):
        if getattr(opts, flag) < 0:
            fail(f"--{flag.replace('_', '-')} must be >= 0 (got {getattr(opts, flag)})")
    if not opts.seeds or any(not 0 <= s < 2**31 for s in opts.seeds):
        fail(f"--seeds must lie in [0, 2^31) (got {opts.seeds})")
    if opts.slurm and opts.slurm_cluster in (None, "slurm") and not (opts.dry_run or opts.print_checkpoints) \
            and shutil.which("sbatch") is None:  # else submitit's AutoExecutor would quietly run the runs here
        fail("--slurm: no Slurm here (no sbatch on PATH); --slurm-cluster local or debug runs the Slurm path on this "
             "machine, or leave out --slurm to run the runs here")
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if opts.gpus_per_run > 1 and opts.slurm:
        fail("--gpus-per-run: local runs only (on Slurm: --slurm-gpus, and --slurm-tasks-per-node for one process a GPU)")
    if opts.gpus_per_run > 1 and opts.gpus_per_run > len(gpus) and not opts.dry_run:
        fail(f"--gpus-per-run {opts.gpus_per_run}: CUDA_VISIBLE_DEVICES lists {len(gpus)} GPU(s)")
    if opts.slurm_nodes * opts.slurm_tasks_per_node > 1:
        if not opts.slurm:
            fail("--slurm-nodes/--slurm-tasks-per-node: a run of several processes is launched with --slurm")
        if "distributed" not in script_flags(script_module(opts.script)):
            fail(f"--slurm-nodes/--slurm-tasks-per-node: {opts.script}.py runs in one process (it has no --distributed)")
    opts.out_dir = os.path.abspath(opts.out_dir)
    opts.store = os.path.abspath(opts.store or os.path.join(opts.out_dir, "runs"))
    # the directories the launch writes (the grid's links and Slurm's logs under --out-dir), each a directory or one
    # this process can make under its nearest existing ancestor (a dangling link is not a directory)
    written = [("--out-dir", opts.out_dir), ("--out-dir", os.path.join(opts.out_dir, "runs")), ("--store", opts.store)]
    for flag, path in written + [("--out-dir", os.path.join(opts.out_dir, "slurm"))] * opts.slurm:
        if os.path.lexists(path) and not os.path.isdir(path):
            fail(f"{flag}: {path} is not a directory")
        existing = path
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            fail(f"{flag}: {path} lies under {existing}, which is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            fail(f"{flag}: cannot write {existing}, where {path} goes")
    runs = expand(opts, parse_grid(argv[split + 1:]))
    if len({run["id"] for run in runs}) < len(runs):
        fail("the grid names one run twice (a value repeated, or two values that resolve to one command)")
    if opts.dry_run:  # each run's own command; a pack's one process after its runs
        for job in packs(runs, opts):
            for run in members(job):
                print(f"(cd {run_dir(opts, run)} && python {SCRIPTS / run['script']}.py {' '.join(run['argv'])})")
            if "pack" in job:
                print(f"# seeds {job['seed']}..{members(job)[-1]['seed']} in one process: (cd {run_dir(opts, job)} && "
                      f"python {SCRIPTS / job['script']}.py {' '.join(job['argv'] + ['--num-seeds', str(len(members(job)))])})")
        return {"runs": len(runs)}
    if opts.print_checkpoints:
        for run in runs:
            checkpoint = newest_checkpoint(run_dir(opts, run))
            print(f"{checkpoint}\t{checkpoint_seeds(checkpoint)}" if checkpoint else "-\t0")
        return {"runs": len(runs)}
    register(opts, runs)
    todo = [run for run in runs if status(opts, run) != "done"]
    jobs = packs(todo, opts)
    print(f"{len(runs)} runs: {len(runs) - len(todo)} already done, {len(todo)} to run"
          + (f" in {len(jobs)} processes (seeds packed, --seeds-per-process)" if len(jobs) < len(todo) else ""), flush=True)
    if opts.slurm:
        return summary(runs, launch_slurm(jobs, opts), opts)
    with GridStop().installed() as stop:
        counts = summary(runs, launch_local(jobs, opts, stop), opts)
        if stop:
            stopped, unstarted = counts.get("preempted", 0), counts.get("unstarted", 0)
            how = f"stopped by {GridStop.NAMES[stop.signum]}" + (", then killed by a Ctrl-C" if stop.aborted else "")
            print(f"launch.py: {how}: {stopped} run{'s' * (stopped != 1)} stopped, {unstarted} not started; to "
                  f"continue, run the same command again (it skips the finished runs; the stopped ones resume from their "
                  f"newest checkpoint, or start over without one): {command or relaunch_command(argv)}",
                  file=sys.stderr, flush=True)
            raise Stopped(stop.exit_code)
    return counts


def main_each(folder):
    """`launch.py --each DIR`: each file of DIR, in name order, one launcher command (its arguments NUL-terminated,
    as bash's `printf '%s\\0'` writes them), run in turn in this one process, each script imported once (a runner's
    DRY_RUN checks all its grids this way). Every command runs whatever the others did; exit status 1 if one failed."""
    failed = False
    for path in sorted(Path(folder).iterdir()):
        argv = [os.fsdecode(arg) for arg in path.read_bytes().split(b"\0")[:-1]]
        try:
            failed |= bool(main(argv, command=relaunch_command(["--each", str(folder)])).get("failed"))
        except Stopped:  # a signal stops every grid: the same command again continues
            raise
        except SystemExit as e:  # fail() said why on stderr
            print(f"launch.py: grid `{shlex.join(argv)}` exited {e.code} (continuing)", file=sys.stderr)
            failed = True
        except Exception:  # a bug: its traceback, and the next grid
            traceback.print_exc()
            print(f"launch.py: grid `{shlex.join(argv)}` raised (continuing)", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--each"] and len(sys.argv) == 3:
        sys.exit(main_each(sys.argv[2]))
    counts = main()
    sys.exit(1 if counts.get("failed") else 0)
