"""Learning curves of this project's scripts beside the scripts researchers would otherwise copy.

    python benchmark/docs_results.py ppo_cartpole --reference path/to/purejaxrl --out grids/docs_results
    python benchmark/docs_results.py ppo_cartpole --reference path/to/purejaxrl --out grids/docs_results \\
        --publish path/to/results

One comparison (COMPARISONS below) trains the anchor's own script (CleanRL's or PureJaxRL's, from the user's
checkout: nothing of either is in this repository) and this project's script at the same environment, budget,
seeds and hyper-parameters, one process per side and seed, the two sides taking turns. The copy of the anchor is
edited at run time with the few text edits today's envpool / gymnasium need (benchmark/speed/vs_reference.py's, each
with its reason; an edit that finds nothing stops the command before any run). PureJaxRL's ppo.py has no command
line and logs nothing: a driver calls its make_train(config) and writes, per iteration, the mean return of the
episodes that ended in it, as this project's JAX scripts log charts/episodic_return.

A finished run leaves done.json in its folder (its flags, the hashes of the files that trained it, its seconds and
the machine it trained on); running the command again runs only what is missing (a stopped run starts over). Run
folders trained on another machine (a GPU's, say) and copied into --out are reported with that machine's name.
Ctrl-C, SIGTERM or SIGUSR1 stop the runs in flight and name the command that resumes.

Read off each run: the final return, the mean of charts/episodic_return over the last 10% of its steps (as
benchmark/analyze.py reads a grid); per side, its mean over the seeds; the difference (this project minus the
anchor) with its 95% interval by Welch's t (benchmark/claims.py's) and the plain sentence: indistinguishable at
this budget, the difference within +-X (X the larger end of the interval), or not. Written to --out/<comparison>/:
final_returns.csv (side, seed, final return), curves.png (mean and 95% interval over the seeds, both sides),
summary.json and summary.md (settings, commands, machine, the table row and the sentence). --publish copies them
(with each run's curve as curves.csv.gz) to a folder; a result whose interval excludes zero is published only with
--why, the cause found, which summary.md then states. A published result is replaced only by the same runs read
again: other settings, runs still to train, other commands or final returns make a new result, published to another
folder (refused before any run where it can be told then).
"""
import argparse
import csv
import gzip
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for benchmark.*
from benchmark.common import SCRIPTS, describe_machine, read_tensorboard_run, run_dirs  # noqa: E402
from benchmark.events import final_score  # noqa: E402
from benchmark.speed import vs_reference  # noqa: E402

FINAL_FRACTION = 0.1  # benchmark/analyze.py's --final-fraction default
TAG = "charts/episodic_return"

# PureJaxRL's ppo.py run for its learning curve: vs_reference's config, and per iteration the mean return of the
# episodes that ended in it (ppo.py's own DEBUG callback prints each of them; this writes their mean, as the
# project's JAX scripts log charts/episodic_return)
PUREJAXRL_LEARNING_DRIVER = '''"""docs_results.py's driver for PureJaxRL's __MODULE__.py: its __main__ config, sizes from argv, DEBUG off."""
import csv
import json
import sys

import jax
import numpy as np

import __MODULE__ as ppo

config = __CONFIG__
config.update(json.loads(sys.argv[1]))
out = jax.jit(ppo.make_train(config))(jax.random.PRNGKey(int(sys.argv[2])))
info = jax.device_get(out["metrics"])
ended, returns = np.asarray(info["returned_episode"]), np.asarray(info["returned_episode_returns"])
batch = config["NUM_ENVS"] * config["NUM_STEPS"]
with open("returns.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["global_step", "episodic_return"])
    for i in range(ended.shape[0]):  # iteration i: ended[i] is (steps, envs)
        if ended[i].any():
            writer.writerow([(i + 1) * batch, float(returns[i][ended[i]].mean())])
'''


# PureJaxRL's ppo_continuous_action.py __main__ config, DEBUG off (its Brax tasks; hopper by default)
PUREJAXRL_CONTINUOUS_CONFIG = {"LR": 3e-4, "NUM_ENVS": 2048, "NUM_STEPS": 10, "TOTAL_TIMESTEPS": 5e7, "UPDATE_EPOCHS": 4,
                               "NUM_MINIBATCHES": 32, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.0,
                               "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "hopper",
                               "ANNEAL_LR": False, "NORMALIZE_ENV": True, "DEBUG": False}
# its wrappers.py imports navix at the top for a wrapper it does not use (not installed); Brax it keeps (its Brax wrapper)
PUREJAXRL_CONTINUOUS_WRAPPER_EDITS = [("import navix as nx\n", "", True)]
# ppo_ewma_brax.py's defaults are that config (lr 3e-4 constant, 4 epochs, clip 0.2, entropy 0, 256 x 2 tanh MLPs,
# observations and rewards normalised, Brax's positional backend, 1000-step episodes)
BRAX_BENCH = vs_reference.Bench("purejaxrl/ppo_continuous_action.py", "ppo_ewma_brax", "hopper", 2048, 10, 0,
                                num_minibatches=32)
# CleanRL's ppo_procgen.py (gym 0.23's procgen, CleanRL's defaults: 8 minibatches x 3 epochs) against
# ppo_procgen_envpool.py (envpool's procgen: the same games, levels and IMPALA network). It runs as CleanRL wrote it on
# gym 0.23.1 and procgen, which the project's environment does not have: --anchor-path names a folder that does,
# prepended to the anchor's PYTHONPATH (pip install --no-deps --target FOLDER gym==0.23.1 gym-notices gym3 cffi
# pycparser procgen-mirror==0.10.7: procgen's own wheels stop at Python 3.10)
PROCGEN_BENCH = vs_reference.Bench("cleanrl/ppo_procgen.py", "ppo_procgen_envpool", "StarpilotEasy-v0", 64, 256, 0,
                                   num_minibatches=8, update_epochs=3)
BENCHES = {**vs_reference.BENCHES, "ppo_continuous_brax": BRAX_BENCH, "ppo_procgen": PROCGEN_BENCH}


@dataclass
class Comparison:
    bench: str  # vs_reference.BENCHES' key: the anchor's file, its edits, the project's script and its flags
    anchor: str  # the anchor's name in the tables
    env_id: str
    num_envs: int
    num_steps: int
    total_timesteps: int
    seeds: list
    extra_project_flags: list = field(default_factory=list)
    note: str = ""  # a difference between the two sides that stays
    anchor_env_id: str = ""  # the anchor's name for the env, where it differs
    obs_norm_init: int = 1  # iterations of random steps before training (the RND scripts' observation statistics)
    anchor_needs: str = ""  # packages the anchor needs that the project's environment lacks: --anchor-path has them


# the differences between the two sides that stay, shared by a comparison and its fallback
RND_NOTE = ("CleanRL's RND script always ends an episode at a lost life for training (envpool's episodic_life=True, no "
            "flag), ppo_rnd.py never (Burda et al.'s setting); both report whole-game returns")
PUREJAXRL_LR_NOTE = "PureJaxRL anneals the learning rate once an iteration, ppo_ewma_jax.py after every minibatch step"
PROCGEN_NOTE = "CleanRL's side steps gym 0.23's procgen, ours envpool's port of the same games"
COMPARISONS = {
    # PureJaxRL's ppo.py __main__ (CartPole-v1, 4 envs x 128 steps, 4 x 4 minibatches, 5e5 steps as it trains them,
    # 64 x 2 tanh MLPs) against ppo_ewma_jax.py as plain PPO with those hyper-parameters; 10 seeds (a run is cheap)
    "ppo_cartpole": Comparison("ppo_cartpole_jax", "PureJaxRL ppo.py", "CartPole-v1", 4, 128, 499_712,
                               list(range(1, 11)),
                               note=PUREJAXRL_LR_NOTE),
    # PureJaxRL's ppo_continuous_action.py __main__ config against ppo_ewma_brax.py's defaults (the same) on Brax's
    # inverted_pendulum (cheap on a CPU; its return is the steps the pole stays up, at most 1000), 64 envs (for 2048)
    # x 10 steps, 4 epochs x 32 minibatches as PureJaxRL's, 199,680 steps (312 iterations), seeds 1-5
    "ppo_brax": Comparison("ppo_continuous_brax", "PureJaxRL ppo_continuous_action.py", "inverted_pendulum", 64, 10,
                           199_680, list(range(1, 6))),
    # CleanRL's ppo_atari_envpool.py at its defaults (Breakout-v5, 8 envs x 128 steps, 4 x 4 minibatches) against
    # ppo_atari_envpool.py at the same flags, 204,800 steps (200 iterations, 819,200 frames), seeds 1-3. The budget is
    # what fits about two hours of a 2-core CPU: CleanRL's side runs at about 132 steps/s on one thread of an Intel Xeon
    # (about 26 minutes a run, two runs at once)
    "ppo_atari": Comparison("ppo_atari", "CleanRL ppo_atari_envpool.py", "Breakout-v5", 8, 128, 204_800, [1, 2, 3]),
    # the same two scripts and hyper-parameters on a MinAtar game that leaves its floor within 1M steps here
    # (SpaceInvaders: Breakout-MinAtar sat at a floor in benchmark/reproduce.md's claims 7-10), 999,424 steps
    # (1,952 iterations of 512), seeds 1-5
    "ppo_minatar": Comparison("ppo_cartpole_jax", "PureJaxRL ppo.py", "SpaceInvaders-MinAtar", 4, 128, 999_424,
                              list(range(1, 6)),
                              note=PUREJAXRL_LR_NOTE),
    # The three below are fixed before any of their runs (pqn_atari's 6 runs then took 93 minutes on 2 cores, two at a
    # time, about 105 steps/s for CleanRL's side and 119 for this project's; ppo_rnd's 49-78 minutes a run, two at a
    # time beside other work). Where the runs
    # of both sides end below twice the game's random score (they did not leave the floor), the result is published as
    # found and saying so, and the fallback named is run as a new comparison beside it.
    # CleanRL's pqn_atari_envpool.py at its defaults (Breakout-v5, 8 x 128, 4 x 4 minibatches, lambda 0.65, epsilon
    # 1 -> 0.01 over the first 10% of the steps, RAdam) against pqn_atari.py with --optimizer radam (its default is
    # Adam), 204,800 steps, seeds 1-3, as ppo_atari. Fallback: Phoenix-v5
    "pqn_atari": Comparison("pqn_atari", "CleanRL pqn_atari_envpool.py", "Breakout-v5", 8, 128, 204_800, [1, 2, 3]),
    # CleanRL's ppo_rnd_envpool.py against ppo_rnd.py with --vf-coef 0.5 (its default is 1.0), on Phoenix-v5 (an
    # Atari-10 game with a dense reward: Montezuma's Revenge, CleanRL's default, scores 0 for millions of steps), 8 envs x
    # 128 steps (CleanRL's 128 envs is 16,384 steps an iteration), 5 iterations of random warm-up (CleanRL's 50 at 128
    # envs), 204,800 steps, seeds 1-3. Fallback: Qbert-v5
    "ppo_rnd": Comparison("ppo_rnd", "CleanRL ppo_rnd_envpool.py", "Phoenix-v5", 8, 128, 204_800, [1, 2, 3],
                          obs_norm_init=5,
                          note=RND_NOTE),
    # ppo_rnd's fallback, fixed before its runs (every run of ppo_rnd on Phoenix-v5 ended below twice Phoenix's random
    # score of 761.4: neither side left the floor): the same two scripts and settings on Qbert-v5 (random score 163.9)
    "ppo_rnd_qbert": Comparison("ppo_rnd", "CleanRL ppo_rnd_envpool.py", "Qbert-v5", 8, 128, 204_800, [1, 2, 3],
                                obs_norm_init=5,
                                note=RND_NOTE),
    # CleanRL's ppo_procgen.py at its defaults (starpilot, easy, all levels, lr 5e-4, gamma 0.999, 8 minibatches x 3
    # epochs) against ppo_procgen_envpool.py at the same flags, 16 envs x 256 steps (CleanRL's 64: four times the batch of
    # a CPU iteration), 163,840 steps (40 iterations), seeds 1-3. Fallback: BigfishEasy-v0 / bigfish
    "ppo_procgen": Comparison("ppo_procgen", "CleanRL ppo_procgen.py", "StarpilotEasy-v0", 16, 256, 163_840, [1, 2, 3],
                              anchor_env_id="starpilot", anchor_needs="gym 0.23.1 and procgen",
                              note=PROCGEN_NOTE),
    # ppo_procgen's fallback, fixed before its runs (every run of ppo_procgen on StarpilotEasy ended below twice
    # starpilot's easy-mode random score, the Procgen paper's R_min of 2.5: neither side left the floor): the same two
    # scripts and settings on bigfish (easy, R_min 1)
    "ppo_procgen_bigfish": Comparison("ppo_procgen", "CleanRL ppo_procgen.py", "BigfishEasy-v0", 16, 256, 163_840,
                                      [1, 2, 3], anchor_env_id="bigfish", anchor_needs="gym 0.23.1 and procgen",
                                      note=PROCGEN_NOTE),
}


def fail(message):
    """Bad input: one line, exit status 2, nothing run or written."""
    print(f"docs_results.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def final_return(steps, values, fraction=FINAL_FRACTION):
    """The mean of the values logged over the last `fraction` of the steps, as benchmark/analyze.py reads a grid."""
    return final_score(steps, values, fraction)


def read_curve(run_dir):
    """(steps, returns) a finished run logged: returns.csv (the PureJaxRL driver) or TensorBoard's charts/episodic_return."""
    run_dir = Path(run_dir)
    if (run_dir / "returns.csv").exists():
        with open(run_dir / "returns.csv", newline="") as f:
            rows = [(int(r["global_step"]), float(r["episodic_return"])) for r in csv.DictReader(f)]
    else:
        (tb,) = run_dirs(run_dir)
        rows = [(e.step, e.value) for e in read_tensorboard_run(tb)[0].get(TAG, [])]
    if not rows:
        raise ValueError(f"{run_dir}: no episode ended in the whole run (nothing logged as {TAG})")
    rows.sort(key=lambda r: r[0])
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("comparison", choices=sorted(COMPARISONS))
    parser.add_argument("--reference", type=Path, help="the checkout of CleanRL or PureJaxRL (not needed to re-read "
                        "finished runs with --report-only)")
    parser.add_argument("--out", type=Path, default=Path("grids/docs_results"), help="where the runs and the report go")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the comparison's")
    parser.add_argument("--total-timesteps", type=int, help="default: the comparison's")
    parser.add_argument("--num-envs", type=int, help="default: the comparison's (both sides)")
    parser.add_argument("--num-steps", type=int, help="default: the comparison's (both sides)")
    parser.add_argument("--anchor-path", type=Path, help="a folder prepended to the anchor's PYTHONPATH: the packages "
                        "it needs that this project's environment lacks (ppo_procgen and ppo_procgen_bigfish: gym "
                        "0.23.1 and procgen)")
    parser.add_argument("--dry-run", action="store_true", help="print the runs still to do, run nothing")
    parser.add_argument("--workers", type=int, default=1, help="runs at once")
    parser.add_argument("--report-only", action="store_true", help="read the finished runs, run nothing")
    parser.add_argument("--publish", type=Path, help="copy the report and every run's curve to this folder (a result "
                        "published there is replaced only by the same runs read again)")
    parser.add_argument("--why", help="with --publish: the cause found of a difference whose interval excludes zero")
    opts = parser.parse_args(argv)
    comp = COMPARISONS[opts.comparison]
    bench = BENCHES[comp.bench]
    opts.seeds = comp.seeds if opts.seeds is None else opts.seeds
    opts.total_timesteps = comp.total_timesteps if opts.total_timesteps is None else opts.total_timesteps
    for name in ("num_envs", "num_steps"):
        if getattr(opts, name) is None:
            setattr(opts, name, getattr(comp, name))
        elif not 1 <= getattr(opts, name) < 2**31:
            fail(f"--{name.replace('_', '-')} must lie in [1, 2**31), got {getattr(opts, name)}")
    if any(s < 0 or s >= 2**31 for s in opts.seeds):
        fail(f"--seeds must lie in [0, 2**31), got {opts.seeds}")
    if len(set(opts.seeds)) != len(opts.seeds):
        fail(f"--seeds must not repeat a seed, got {opts.seeds}")
    if len(opts.seeds) < 2:
        fail(f"--seeds must name at least 2 seeds (an interval over the seeds), got {opts.seeds}")
    batch = opts.num_envs * opts.num_steps
    if batch % bench.num_minibatches:
        fail(f"--num-envs x --num-steps = {batch} must divide into the comparison's {bench.num_minibatches} minibatches")
    if opts.total_timesteps < batch or opts.total_timesteps % batch or opts.total_timesteps >= 2**31:
        fail(f"--total-timesteps must be a positive multiple of num_envs x num_steps = {batch} below 2**31 (both "
             f"sides then train exactly that many steps), got {opts.total_timesteps}")
    if opts.workers < 1:
        fail(f"--workers must be at least 1, got {opts.workers}")
    if opts.why is not None and not opts.why.strip():
        fail("--why must state the cause found (got an empty string)")
    if opts.why is not None and opts.publish is None:
        fail("--why is read only with --publish")
    for flag, path in (("--out", opts.out), ("--publish", opts.publish)):
        if path is None:
            continue
        for place in [path / opts.comparison, path, *path.parents]:  # the first that exists must be a folder
            if place.exists():
                if not place.is_dir():
                    fail(f"{flag} {path}: {place} is a file, not a folder")
                break
    if opts.anchor_path is not None and not opts.anchor_path.is_dir():
        fail(f"--anchor-path {opts.anchor_path}: not a folder")
    opts.earlier = published(opts.publish / opts.comparison) if opts.publish is not None else None
    if opts.earlier is not None:
        asked = {"env_id": comp.env_id, "num_envs": opts.num_envs, "num_steps": opts.num_steps,
                 "total_timesteps": opts.total_timesteps, "seeds": opts.seeds}
        changed = [f"{k} {opts.earlier[k]} -> {v}" for k, v in asked.items() if opts.earlier[k] != v]
        if changed:
            fail(f"--publish {opts.publish}: {opts.comparison} is published there with other settings "
                 f"({', '.join(changed)}); a result at new settings is a new result: publish it to another folder, "
                 f"the earlier one stays")
        to_go = runs_to_go(opts, opts.out / opts.comparison)
        if to_go and not (opts.report_only or opts.dry_run):
            fail(f"--publish {opts.publish}: {opts.comparison} is published there, and runs still to train ("
                 f"{', '.join(f'{side} seed {seed}' for side, seed in to_go)}) make another result: publish it to "
                 f"another folder, the earlier one stays (--report-only re-reads the runs that made it)")
    if not opts.report_only and not opts.dry_run:
        if comp.anchor_needs and opts.anchor_path is None:
            fail(f"--anchor-path is needed by {opts.comparison}: {comp.anchor} needs {comp.anchor_needs}, which this "
                 f"environment lacks (the pip command: the comparison's comment in {Path(__file__).name})")
        if opts.reference is None:
            fail("--reference is needed to run (the anchor's checkout); --report-only reads finished runs")
        for needed in [bench.reference] + (["purejaxrl/wrappers.py"] if bench.reference.startswith("purejaxrl/") else []):
            if not (opts.reference / needed).is_file():
                fail(f"--reference {opts.reference} has no {needed} (the {opts.comparison} comparison needs it)")
    return opts, comp, bench


def published(folder):
    """The summary.json published in `folder`, or None where nothing is; a damaged one is named, never overwritten."""
    path = folder / "summary.json"
    if not path.exists():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"--publish: {path} is damaged ({type(e).__name__}: {e}); move it away to publish there")
    keys = ("env_id", "num_envs", "num_steps", "total_timesteps", "seeds", "commands", "finals")
    missing = [k for k in keys if k not in summary] if isinstance(summary, dict) else ["object"]
    if missing:
        fail(f"--publish: {path} is damaged (no {', '.join(missing)}); move it away to publish there")
    return summary


def runs_to_go(opts, root):
    """[(side, seed)] of the runs without a done.json, seed by seed."""
    return [(side, seed) for seed in opts.seeds for side in ("anchor", "project")
            if not (root / side / f"seed_{seed}" / "done.json").exists()]


def commands(opts, comp, bench, seed, reference_file):
    """{side: argv} of one seed: the anchor and the project at the same settings."""
    sizes = SimpleNamespace(env_id=comp.env_id, num_envs=opts.num_envs, num_steps=opts.num_steps, seed=seed,
                            total_timesteps=opts.total_timesteps, steady=False, obs_norm_init=comp.obs_norm_init)
    reference, project = vs_reference.commands(bench, sizes, reference_file)
    if comp.anchor_env_id:
        reference[reference.index("--env-id") + 1] = comp.anchor_env_id
    return {"anchor": reference, "project": project + comp.extra_project_flags}


def source_hashes(directory):
    """{file name: sha256} of the files a side runs (the script, and for PureJaxRL its wrappers and the driver)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(directory).iterdir()) if p.is_file()}


def run_one(side, seed, argv, source, folder, pythonpath, machine):
    """Train one side's seed in a fresh `folder` (a copy of `source`'s files); done.json when it ends, with the argv
    and the hashes of the files that trained it (a later command checks both before it reuses the run), its seconds
    and `machine` (describe_machine(), read once before the runs)."""
    if folder.exists():
        shutil.rmtree(folder)  # a stopped run starts over
    shutil.copytree(source, folder)
    env = dict(os.environ, PYTHONUNBUFFERED="1", WANDB_MODE="disabled")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    with open(folder / "stdout.log", "w") as log:
        process = subprocess.Popen([sys.executable, *argv], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # our signal handler stops it, not the terminal's Ctrl-C
        RUNNING.add(process)
        if STOPPED:  # a signal came while it was starting: the handler did not see it
            process.terminate()
        code = process.wait()
        RUNNING.discard(process)
    if code:
        raise RuntimeError(f"{side} seed {seed} (`python {' '.join(argv)}` in {folder}) exited {code}; its log: "
                           f"{folder / 'stdout.log'}")
    (folder / "done.json").write_text(json.dumps({"side": side, "seed": seed, "argv": argv, "sources":
                                                  source_hashes(source), "seconds": time.perf_counter() - start,
                                                  "machine": machine}))


RUNNING, STOPPED = set(), []  # the processes in flight; the signals received


def prepare_anchor(bench, reference, directory):
    """Write the anchor's edited copy into `directory`: the file to run. A CleanRL script is edited as
    vs_reference.py edits it; PureJaxRL's gets the learning driver beside it. ValueError: an edit found nothing."""
    if bench.reference == "purejaxrl/ppo_continuous_action.py":
        shutil.copy(reference / bench.reference, directory)
        wrappers = reference / "purejaxrl" / "wrappers.py"
        edited = vs_reference.apply_edits(wrappers.read_text(), PUREJAXRL_CONTINUOUS_WRAPPER_EDITS, wrappers)
        (directory / "wrappers.py").write_text(edited)
        module, config = "ppo_continuous_action", PUREJAXRL_CONTINUOUS_CONFIG
    else:
        vs_reference.prepare_reference(bench, reference, directory)  # PureJaxRL's ppo.py as ppo.py
        if not bench.reference.startswith("purejaxrl/"):
            return anchor_file(bench)
        module, config = "ppo", vs_reference.PUREJAXRL_CONFIG
    (directory / "docs_results_driver.py").write_text(
        PUREJAXRL_LEARNING_DRIVER.replace("__CONFIG__", repr(config)).replace("__MODULE__", module))
    return anchor_file(bench)


def anchor_file(bench):
    """The name of the file the anchor's side runs (its script, or the PureJaxRL driver)."""
    return "docs_results_driver.py" if bench.reference.startswith("purejaxrl/") else Path(bench.reference).name


def dry_run(opts, comp, bench, root):
    """Print the runs still to do, one `(cd FOLDER && python ARGV)` line each, and run nothing."""
    todo = runs_to_go(opts, root)
    print(f"{opts.comparison}: {len(todo)} runs to go of {2 * len(opts.seeds)}")
    for side, seed in todo:
        argv = commands(opts, comp, bench, seed, anchor_file(bench))[side]
        where = shlex.quote(str(opts.anchor_path)) if opts.anchor_path else "$ANCHOR_PATH"
        path = f"PYTHONPATH={where} " if side == "anchor" and comp.anchor_needs else ""
        print(f"(cd {shlex.quote(str(root / side / f'seed_{seed}'))} && {path}python {shlex.join(argv)})")


def run_all(opts, comp, bench, root):
    """Every missing run, the sides taking turns (anchor, project, then project, anchor: drift falls on both)."""
    sources = Path(tempfile.mkdtemp(prefix="docs_results_"))  # prepared first: a checkout that does not edit writes nothing
    (sources / "anchor").mkdir()
    try:
        reference_file = prepare_anchor(bench, opts.reference.resolve(), sources / "anchor")
    except ValueError as e:
        shutil.rmtree(sources)
        fail(str(e))
    (sources / "project").mkdir()
    shutil.copy(SCRIPTS / f"{bench.project}.py", sources / "project")
    root.mkdir(parents=True, exist_ok=True)
    if (root / "sources").exists():
        shutil.rmtree(root / "sources")
    sources = Path(shutil.move(sources, root / "sources"))
    hashes = {side: source_hashes(sources / side) for side in ("anchor", "project")}
    todo, machine = [], describe_machine()  # where these runs train, for their done.json
    for i, seed in enumerate(opts.seeds):
        argvs = commands(opts, comp, bench, seed, reference_file)
        for side in (("anchor", "project") if i % 2 == 0 else ("project", "anchor")):
            folder = root / side / f"seed_{seed}"
            if not (folder / "done.json").exists():
                todo.append((side, seed, argvs[side], sources / side, folder,
                             opts.anchor_path.resolve() if side == "anchor" and opts.anchor_path else None, machine))
                continue
            done = json.loads((folder / "done.json").read_text())
            if done["argv"] != argvs[side] or done.get("sources") != hashes[side]:
                what = "flags" if done["argv"] != argvs[side] else "script files"
                fail(f"--out {opts.out}: {side} seed {seed} was trained with other {what} than this command's; "
                     f"use another --out (or remove {folder})")
    print(f"{opts.comparison}: {len(todo)} runs to go of {2 * len(opts.seeds)}", flush=True)
    stopped = STOPPED

    def stop(signum, frame):
        if stopped:  # a second signal: abort now
            for process in list(RUNNING):
                process.kill()
            raise KeyboardInterrupt
        stopped.append(signal.Signals(signum).name)
        for process in list(RUNNING):
            process.terminate()

    names = ("SIGINT", "SIGTERM", "SIGUSR1")
    previous = {name: signal.signal(getattr(signal, name), stop) for name in names}
    from tqdm import tqdm

    try:
        with ThreadPoolExecutor(opts.workers) as pool, tqdm(total=len(todo), unit="run") as bar:
            futures = []
            for job in todo:
                futures.append(pool.submit(lambda job=job: None if stopped else run_one(*job)))
            errors = []
            for future, job in zip(futures, todo):
                try:
                    future.result()
                    if not stopped:
                        steps, values = read_curve(job[4])
                        bar.set_postfix(last=f"{job[0]} seed {job[1]}: {final_return(steps, values):.1f}")
                except (RuntimeError, OSError, ValueError) as e:  # the report names a run that logged nothing
                    if not stopped:
                        errors.append(str(e))
                if not stopped or (job[4] / "done.json").exists():  # a run a signal stopped is not counted as done
                    bar.update(1)
    finally:
        for name in names:  # the report after the runs is not stopped by a late signal's handler
            signal.signal(getattr(signal, name), previous[name])
    if stopped:
        print(f"docs_results.py: stopped by {stopped[0]}; finished runs are kept: run the same command again to "
              f"resume ({sum((root / s / f'seed_{seed}' / 'done.json').exists() for s in ('anchor', 'project') for seed in opts.seeds)} "
              f"of {2 * len(opts.seeds)} done)", file=sys.stderr)
        raise SystemExit(75)
    if errors:
        raise SystemExit("docs_results.py: " + "\n".join(errors))


def report(opts, comp, bench, root):
    """Final returns, curves, the difference and its sentence: (summary dict, {side: {seed: (steps, values)}})."""
    from benchmark.claims import t_stats

    curves, missing, machines, here = {}, [], [], None
    for side in ("anchor", "project"):
        for seed in opts.seeds:
            folder = root / side / f"seed_{seed}"
            if not (folder / "done.json").exists():
                missing.append(f"{side} seed {seed}")
                continue
            done = json.loads((folder / "done.json").read_text())
            argv = done["argv"]
            # where the run trained (a run folder copied from another machine keeps its own); runs from before
            # done.json named it trained where they are read
            if "machine" not in done:
                here = here or describe_machine()  # read once
            machine = done.get("machine") or here
            if machine not in machines:
                machines.append(machine)
            if argv != commands(opts, comp, bench, seed, argv[0])[side]:
                fail(f"--out {opts.out}: {side} seed {seed} was trained with other flags than this command's "
                     f"({' '.join(argv)})")
            curves.setdefault(side, {})[seed] = read_curve(folder)
    if missing:
        fail(f"--out {root}: runs not finished: {', '.join(missing)} (run without --report-only)")
    finals = {side: {seed: final_return(*c) for seed, c in runs.items()} for side, runs in curves.items()}
    s = t_stats(list(finals["project"].values()), list(finals["anchor"].values()), 0.95, paired=False)
    mean = {side: float(np.mean(list(v.values()))) for side, v in finals.items()}
    n = len(opts.seeds)
    if s.no_interval:  # no spread on either side: every seed of a side ended at one value (a ceiling, say)
        same = s.estimate == 0
        low = high = within = float(s.estimate)
        sentence = (f"{'Indistinguishable' if same else 'Not indistinguishable'} at this budget: every seed of each side "
                    f"ended at the same final return ({comp.anchor} {mean['anchor']:g}, this project "
                    f"{mean['project']:g}; {n} seeds a side), so there is no interval.")
        indistinguishable = bool(same)
    else:
        low, high, within = float(s.low), float(s.high), max(abs(s.low), abs(s.high))
        indistinguishable = bool(low <= 0 <= high)
    share = f"{100 * within / abs(mean['anchor']):.0f}% of {comp.anchor}'s mean; " if mean["anchor"] else ""
    if s.no_interval:
        pass
    elif indistinguishable:
        sentence = (f"Indistinguishable at this budget: this project's final return minus {comp.anchor}'s is "
                    f"{s.estimate:+.1f} [{low:+.1f}, {high:+.1f}], so a true difference, if any, lies within "
                    f"±{within:.1f} ({share}95%, {n} seeds a side).")
    else:
        sentence = (f"Not indistinguishable: this project's final return minus {comp.anchor}'s is {s.estimate:+.1f} "
                    f"[{low:+.1f}, {high:+.1f}] (95%, {n} seeds a side).")
    summary = {"comparison": opts.comparison, "anchor": comp.anchor, "project": f"{bench.project}.py",
               "env_id": comp.env_id, "num_envs": opts.num_envs, "num_steps": opts.num_steps,
               "total_timesteps": opts.total_timesteps, "seeds": opts.seeds, "final_fraction": FINAL_FRACTION,
               "mean": mean, "difference": float(s.estimate), "low": low, "high": high, "within": within,
               "indistinguishable": indistinguishable, "no_interval": bool(s.no_interval), "sentence": sentence,
               "note": comp.note,
               "finals": {side: {str(k): v for k, v in f.items()} for side, f in finals.items()},
               "commands": {side: json.loads((root / side / f"seed_{opts.seeds[0]}" / "done.json").read_text())["argv"]
                            for side in ("anchor", "project")},
               "seconds": {side: [json.loads((root / side / f"seed_{seed}" / "done.json").read_text())["seconds"]
                                  for seed in opts.seeds] for side in ("anchor", "project")},
               "machine": "; ".join(machines)}
    return summary, curves


def write_report(summary, curves, root):
    """final_returns.csv, curves.png, curves.csv.gz, summary.json and summary.md under `root`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import scipy.stats

    with open(root / "final_returns.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["side", "seed", "final_return"])
        for side, finals in summary["finals"].items():
            for seed, value in finals.items():
                writer.writerow([side, seed, f"{value:.6g}"])
    with gzip.open(root / "curves.csv.gz", "wt", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["side", "seed", "global_step", "episodic_return"])
        for side, runs in curves.items():
            for seed, (steps, values) in runs.items():
                writer.writerows([side, seed, int(x), f"{y:.6g}"] for x, y in zip(steps, values))
    labels = {"anchor": summary["anchor"], "project": summary["project"]}
    grid = np.linspace(0, summary["total_timesteps"], 101)[1:]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for side, color in (("anchor", "tab:gray"), ("project", "tab:blue")):
        # each seed's curve averaged in 100 equal bins of steps (a bin without an episode: interpolated)
        rows = []
        for steps, values in curves[side].values():
            bins = np.minimum((steps / summary["total_timesteps"] * 100).astype(int), 99)
            count = np.bincount(bins, minlength=100)
            binned = np.bincount(bins, values, minlength=100) / np.maximum(count, 1)
            rows.append(np.interp(grid, grid[count > 0], binned[count > 0]))
        rows = np.array(rows)
        mean = rows.mean(axis=0)
        half = scipy.stats.t.ppf(0.975, len(rows) - 1) * rows.std(axis=0, ddof=1) / np.sqrt(len(rows))
        ax.plot(grid, mean, color=color, label=f"{labels[side]} ({len(rows)} seeds)")
        ax.fill_between(grid, mean - half, mean + half, color=color, alpha=0.25, linewidth=0)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(f"{summary['env_id']}, {summary['num_envs']} envs x {summary['num_steps']} steps", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(root / "curves.png")
    plt.close(fig)
    (root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    m = summary["mean"]
    (root / "summary.md").write_text(
        f"# {summary['project']} beside {summary['anchor']}: {summary['env_id']}\n\n"
        f"{summary['num_envs']} envs x {summary['num_steps']} steps, {summary['total_timesteps']:,} steps a run, seeds "
        f"{', '.join(map(str, summary['seeds']))} on each side; final return: the mean episodic return over the last "
        f"{summary['final_fraction']:.0%} of the steps; the interval by Welch's t. Machine: {summary['machine']}.\n\n"
        f"| env | budget | seeds | {summary['anchor']} | {summary['project']} | difference [95% interval] |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {summary['env_id']} | {summary['total_timesteps']:,} | {len(summary['seeds'])} + {len(summary['seeds'])} | "
        f"{m['anchor']:.1f} | {m['project']:.1f} | {summary['difference']:+.1f} "
        + ("(no interval: no spread over the seeds)" if summary.get("no_interval") else
           f"[{summary['low']:+.1f}, {summary['high']:+.1f}]")
        + f" |\n\n{summary['sentence']}\n"
        + (f"\nThe cause found: {summary['why']}\n" if summary.get("why") else "")
        + (f"\nA difference that stays: {summary['note']}.\n" if summary["note"] else "")
        + "\nCommands (seed " + str(summary["seeds"][0]) + "):\n\n"
        + "".join(f"    python {shlex.join(summary['commands'][side])}\n" for side in ("anchor", "project")))


def main(argv=None):
    opts, comp, bench = parse(argv)
    root = opts.out / opts.comparison
    if opts.dry_run:
        return dry_run(opts, comp, bench, root)
    if not opts.report_only:
        run_all(opts, comp, bench, root)
    summary, curves = report(opts, comp, bench, root)
    if opts.why is not None and summary["indistinguishable"]:
        print(f"{summary['sentence']}\ndocs_results.py: not published: --why names the cause of a difference, and this "
              f"result shows none (publish without --why)", file=sys.stderr)
        raise SystemExit(1)
    if opts.publish is not None and not summary["indistinguishable"] and opts.why is None:
        print(f"{summary['sentence']}\ndocs_results.py: not published: find the cause of the difference first, then "
              f"publish with --why", file=sys.stderr)
        raise SystemExit(1)
    earlier = opts.earlier  # read before any run
    if earlier is not None and (earlier["commands"] != summary["commands"] or earlier["finals"] != summary["finals"]):
        print(f"{summary['sentence']}\ndocs_results.py: not published: {opts.publish / opts.comparison} holds a result "
              f"of other runs (other commands or final returns); publish this one to another folder, the earlier one "
              f"stays", file=sys.stderr)
        raise SystemExit(1)
    if opts.why:
        summary["why"] = opts.why
    write_report(summary, curves, root)
    print((root / "summary.md").read_text())
    if opts.publish is not None:
        target = opts.publish / opts.comparison
        target.mkdir(parents=True, exist_ok=True)
        for name in ("final_returns.csv", "curves.csv.gz", "curves.png", "summary.json", "summary.md"):
            shutil.copy(root / name, target / name)
        print(f"published to {target}")


if __name__ == "__main__":
    main()
