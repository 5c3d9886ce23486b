"""Launch a grid of runs of any cleanrl_scale script, locally or on Slurm, idempotently.

The grid is env ids x seeds x the cartesian product of the flag values given after `--` (a flag
with one value goes to every run):

    python benchmark/launch.py --script ppo_atari_envpool --env-ids Breakout-v5 Pong-v5 --seeds 1 2 3 \\
        --total-timesteps 10000000 --fixed-budget --workers 2 --out-dir grids/nenvs \\
        -- --num-envs 1 2 4 8 16 32 64 --num-steps 128

Every run gets its own directory `<out-dir>/runs/<run>/` (the script runs there, so its
TensorBoard files land in `<out-dir>/runs/<run>/runs/`), with `command.json` (the script, env,
seed and flags), `stdout.log` and, once it exits 0, `done.json`. A re-launch skips the runs that
have `done.json`; a failed run is retried up to --retries times and reported with its exit
status and log. A summary table ends every launch.

--fixed-budget gives every run --total-timesteps (data-collection §4.2: N_envs and rollout length
vary at a fixed budget); without it, every run gets --iterations x num-envs x num-steps steps, so
the budget grows with the batch.

Local runs (--workers K) each get a 1/K share of the CPUs (affinity and thread-count variables)
and, when CUDA_VISIBLE_DEVICES lists GPUs, one of them. --slurm submits the same runs as a Slurm
job array through submitit (--slurm-* flags); --slurm-cluster debug/local runs that path here.
"""
import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "cleanrl_scale"


def parse_grid(tokens):
    """['--num-envs', '1', '2', '--num-steps', '128'] -> {'--num-envs': ['1', '2'], '--num-steps': ['128']};
    a flag followed by no value is a switch, kept as is."""
    grid, flag = {}, None
    for token in tokens:
        if token.startswith("--") and not _is_number(token):
            flag = token
            grid[flag] = []
        elif flag is None:
            raise SystemExit(f"launch.py: error: grid value {token!r} comes before any flag")
        else:
            grid[flag].append(token)
    return grid


def _is_number(token):
    try:
        float(token)
        return True
    except ValueError:
        return False


def script_defaults(script):
    """The script's own default of every flag (its tyro dataclass), by flag name."""
    sys.path.insert(0, str(ROOT))
    from benchmark.common import load_script

    args = load_script(script).Args()
    return {f"--{k.replace('_', '-')}": v for k, v in vars(args).items()}


def expand(opts, grid):
    """Every run of the grid: a dict with its name, env, seed and full flag list."""
    defaults = script_defaults(opts.script) if not opts.fixed_budget and opts.iterations else {}
    switches = [f for f, values in grid.items() if not values]
    valued = {f: values for f, values in grid.items() if values}
    runs = []
    for env_id, seed, values in itertools.product(opts.env_ids or [None], opts.seeds, itertools.product(*valued.values())):
        flags = dict(zip(valued, values))
        argv = [x for f, v in flags.items() for x in (f, v)] + switches
        if opts.fixed_budget:
            argv += ["--total-timesteps", str(opts.total_timesteps)]
        elif opts.iterations:
            batch = int(flags.get("--num-envs", defaults.get("--num-envs"))) * int(flags.get("--num-steps", defaults.get("--num-steps")))
            argv += ["--total-timesteps", str(opts.iterations * batch)]
        if env_id is not None:
            argv = [opts.env_flag, env_id] + argv
        argv += ["--seed", str(seed)]
        recorded = {**flags, **{switch: "on" for switch in switches}}
        label = "__".join(f"{f.lstrip('-')}={v}" for f, v in recorded.items()) or "default"
        name = "__".join(x for x in (opts.script, env_id and env_id.replace("/", "-"), label, f"s{seed}") if x)
        runs.append({"name": name, "script": opts.script, "env": env_id, "seed": seed, "flags": recorded, "argv": argv})
    return runs


def run_dir(out_dir, run):
    return Path(out_dir) / "runs" / run["name"]


def status(out_dir, run):
    d = run_dir(out_dir, run)
    if (d / "done.json").exists():
        return "done"
    return "failed" if (d / "failed.json").exists() else "new"


def execute(run, out_dir, env=None, cpus=None):
    """Run one grid point to its end in its own directory; True when it exited 0."""
    d = run_dir(out_dir, run)
    for stale in ("runs", "wandb"):  # a retry starts clean: no half-written logs remain
        shutil.rmtree(d / stale, ignore_errors=True)
    (d / "failed.json").unlink(missing_ok=True)
    d.mkdir(parents=True, exist_ok=True)
    (d / "command.json").write_text(json.dumps(run, indent=1))
    shutil.copy(SCRIPTS / f"{run['script']}.py", d / f"{run['script']}.py")
    start = time.time()
    with open(d / "stdout.log", "w") as log:
        process = subprocess.run(
            [sys.executable, f"{run['script']}.py", *run["argv"]], cwd=d, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, **(env or {})), preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    record = {"returncode": process.returncode, "seconds": round(time.time() - start, 1), "log": str(d / "stdout.log")}
    if process.returncode:  # keep the log, drop what a failed run half-wrote
        for partial in ("runs", "wandb"):
            shutil.rmtree(d / partial, ignore_errors=True)
    (d / ("done.json" if process.returncode == 0 else "failed.json")).write_text(json.dumps(record))
    return process.returncode == 0


def execute_with_retries(run, out_dir, retries, env=None, cpus=None):
    for attempt in range(1 + retries):
        if execute(run, out_dir, env, cpus):
            return True
        print(f"failed (attempt {attempt + 1} of {1 + retries}): {run['name']}", flush=True)
    return False


def worker_resources(slot, workers):
    """CPU share, thread variables and GPU of local worker `slot`."""
    cpus = sorted(os.sched_getaffinity(0))
    share = cpus[slot::workers] or cpus
    threads = str(len(share))
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    return env, set(share)


def launch_local(todo, opts):
    slots, lock = list(range(opts.workers)), threading.Lock()

    def one(run):
        with lock:
            slot = slots.pop()
        try:
            execute_with_retries(run, opts.out_dir, opts.retries, *worker_resources(slot, opts.workers))
        finally:
            with lock:
                slots.append(slot)

    with ThreadPoolExecutor(opts.workers) as pool:
        list(pool.map(one, todo))


def launch_slurm(todo, opts):
    import submitit

    executor = submitit.AutoExecutor(folder=Path(opts.out_dir) / "slurm", cluster=opts.slurm_cluster)
    executor.update_parameters(timeout_min=opts.slurm_time, name=f"grid-{opts.script}")
    if executor.cluster == "slurm":
        executor.update_parameters(cpus_per_task=opts.slurm_cpus, gpus_per_node=opts.slurm_gpus,
                                   slurm_partition=opts.slurm_partition, slurm_array_parallelism=opts.slurm_array_parallelism)
    jobs = executor.map_array(partial(execute_with_retries, out_dir=opts.out_dir, retries=opts.retries), todo)
    print(f"submitted {len(jobs)} runs as {jobs[0].job_id.split('_')[0] if jobs else '-'}; waiting", flush=True)
    for job in jobs:
        job.result()


def summary(runs, skipped, out_dir):
    rows = [(run["name"], "skipped" if run["name"] in skipped else status(out_dir, run)) for run in runs]
    counts = {s: sum(1 for _, x in rows if x == s) for s in ("done", "skipped", "failed")}
    print("\n| run | status | exit | log |\n|---|---|---|---|")
    for (name, state), run in zip(rows, runs):
        record = {}
        for file in ("done.json", "failed.json"):
            if (run_dir(out_dir, run) / file).exists():
                record = json.loads((run_dir(out_dir, run) / file).read_text())
        print(f"| {name} | {state} | {record.get('returncode', '-')} | {record.get('log', '-') if state == 'failed' else ''} |")
    print(f"\n{counts['done']} done, {counts['skipped']} skipped, {counts['failed']} failed (of {len(runs)})")
    return counts


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", required=True, help="a script of cleanrl_scale/, without .py")
    parser.add_argument("--env-ids", nargs="*", default=[], help="values of --env-flag (none: the script's default)")
    parser.add_argument("--env-flag", default="--env-id", help="the script's flag that takes an env id")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--total-timesteps", type=int, default=0, help="with --fixed-budget: every run's budget")
    parser.add_argument("--fixed-budget", action="store_true", help="every run gets --total-timesteps")
    parser.add_argument("--iterations", type=int, default=0, help="without --fixed-budget: budget = iterations x batch")
    parser.add_argument("--out-dir", default=os.environ.get("OUT_DIR", "grids"), help="where the runs go (env OUT_DIR)")
    parser.add_argument("--workers", type=int, default=1, help="local runs at once")
    parser.add_argument("--retries", type=int, default=0, help="re-runs of a failed run")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--slurm", action="store_true", help="submit as a Slurm job array through submitit")
    parser.add_argument("--slurm-cluster", default=None, help="submitit cluster: slurm (default), local or debug")
    parser.add_argument("--slurm-partition", default=None)
    parser.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per task")
    parser.add_argument("--slurm-cpus", type=int, default=8, help="CPUs per task")
    parser.add_argument("--slurm-time", type=int, default=24 * 60, help="minutes per task")
    parser.add_argument("--slurm-array-parallelism", type=int, default=64, help="array tasks at once")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser()
    opts = parser.parse_args(argv[:split])
    grid = parse_grid(argv[split + 1:])
    if not (SCRIPTS / f"{opts.script}.py").exists():
        parser.error(f"--script {opts.script}: no cleanrl_scale/{opts.script}.py")
    if opts.fixed_budget and opts.total_timesteps <= 0:
        parser.error("--fixed-budget needs --total-timesteps > 0")
    if opts.workers <= 0 or opts.retries < 0:
        parser.error("--workers must be positive and --retries >= 0")
    runs = expand(opts, grid)
    if opts.dry_run:
        for run in runs:
            print(f"(cd {run_dir(opts.out_dir, run)} && python {SCRIPTS / run['script']}.py {' '.join(run['argv'])})")
        return {"runs": len(runs)}
    skipped = {run["name"] for run in runs if status(opts.out_dir, run) == "done"}
    todo = [run for run in runs if run["name"] not in skipped]
    print(f"{len(runs)} runs: {len(skipped)} already done, {len(todo)} to run", flush=True)
    (launch_slurm if opts.slurm else launch_local)(todo, opts)
    return summary(runs, skipped, opts.out_dir)


if __name__ == "__main__":
    counts = main()
    sys.exit(1 if counts.get("failed") else 0)
