"""This project's scripts side by side with the ones researchers would otherwise copy, in one run on one machine.

    python benchmark/speed/vs_reference.py --reference path/to/cleanrl --bench ppo_atari --num-envs 8
    python benchmark/speed/vs_reference.py --reference path/to/cleanrl --bench ppo_atari --num-envs 64
    python benchmark/speed/vs_reference.py --reference path/to/cleanrl --bench pqn_atari
    python benchmark/speed/vs_reference.py --reference path/to/cleanrl --bench ppo_rnd
    python benchmark/speed/vs_reference.py --reference path/to/purejaxrl --bench ppo_cartpole_jax
    python benchmark/speed/vs_reference.py --reference path/to/purejaxrl --bench ppo_minatar_jax --num-envs 65536 --steady

--reference is the user's checkout of CleanRL (github.com/vwxyzjn/cleanrl) or PureJaxRL
(github.com/luchris429/purejaxrl); nothing of either is in this repository. A copy of the reference
script is edited at run time with the few text edits today's envpool 1.2 / gymnasium 1.x need (EDITS
below, each with its reason; each must match the checkout or the command stops before any run), and
reference and project train the same configuration alternately (reference, project, reference, ... :
--pairs >= 3), each a whole process (imports, compilation, environment setup and every log write
included) started from a fresh temporary directory; which side goes first alternates from pair to pair.
Reported per pair: both wall times and their ratio
(reference seconds / project seconds: above 1 means this project is faster); then the median of the
per-pair ratios and the machine. Steps/s is the steps both processes train (--total-timesteps, a
multiple of num_envs x num_steps so that both train exactly that many) over the whole-process time.

On the CleanRL benches, where both sides log a TensorBoard point charts/SPS at the end of every iteration, each pair
also reports in-run rates: a run's steps in the second half of its iterations (the last n - n // 2 of n, 4 at least)
over their wall time, from the points' wall times (start-up, compilation and capture left out), and the project's
in-run rate over the reference's (above 1: the project is faster; with --variant the variant's, with --against the
project's over the revision's), with their medians.
--steady adds steady-state rates that do not depend on when either side logs or how long it compiles: each side
also trains 3 x --total-timesteps in its own process, and its steady rate is the 2 x --total-timesteps extra steps
over the extra seconds; both sides then share one persistent compilation cache, filled by a cold run of each side
and budget before the pairs (those cold whole-process times are reported too). A pair where a side took no longer at
3 x the budget (its extra steps within the spread of a process start) says so, keeps its whole-process ratios and
is left out of the steady medians.
Known at CleanRL fe8d8a0 and PureJaxRL 31756b1. CleanRL's RND script steps its environments
--obs-norm-init iterations with random actions before training (uncounted by its own SPS); the
project's ppo_rnd.py does the same, and both processes are timed whole, so the warm-up is in both.
For PureJaxRL, whose first result is its whole process (it returns when training ends), each pair also reports the
seconds from the project's launch to its first logged iteration and their difference (at a budget of one iteration,
e.g. --total-timesteps 512 for CartPole, both sides do the same work before their first result).
--against REV adds a third side, the project's script as it was at git revision REV with the same flags, to
every pair (the three take turns going first), and reports the median of (REV seconds / project seconds) too.
--variant FLAGS adds another side, the project's script with FLAGS added (e.g. --variant="--compile"), and reports
its ratios to the reference and to the project's plain side (with --against as well, --pairs is at least 4, so that
each of the four sides goes first once). torch.compile's cache (TorchInductor's) is fresh for
every run, as JAX's is off, unless --steady shares one between all runs (then compilation cancels).
PureJaxRL's ppo.py has no command line: a driver of this harness imports it, calls make_train(config)
(the config of its __main__ with the sizes given here and DEBUG off) and waits for the result.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import SCRIPTS, describe_machine, read_tensorboard_run, run_dirs, script_at  # noqa: E402

# Text edits a CleanRL envpool script needs on envpool 1.2.5 + gymnasium 1.4 (gym is not installed; envpool's
# gymnasium API returns (obs, info) from reset and a 5-tuple from step; gymnasium 1.x wrappers no longer forward
# unknown attributes; envpool 1.2's num_envs / single_*_space are read-only properties). (old, new, required):
# an edit marked required must match at least once.
CLEANRL_EDITS = [
    ("import gym\n", "import gymnasium as gym\n", True),
    ('        self.num_envs = getattr(env, "num_envs", 1)\n',
     '        self.num_envs = getattr(env, "num_envs", 1)\n'
     "        self.single_action_space = env.single_action_space\n"
     "        self.single_observation_space = env.single_observation_space\n", True),
    ("        observations = super().reset(**kwargs)\n", "        observations, _ = super().reset(**kwargs)\n", True),
    ("        observations, rewards, dones, infos = super().step(action)\n",
     "        observations, rewards, terminated, truncated, infos = super().step(action)\n"
     "        dones = np.logical_or(terminated, truncated)\n", True),
    ('        env_type="gym",\n', '        env_type="gymnasium",\n', True),
    ("    envs.num_envs = args.num_envs\n", "", True),
    ("    envs.single_action_space = envs.action_space\n", "", True),
    ("    envs.single_observation_space = envs.observation_space\n", "", True),
]
# the RND script also takes its running mean/std from gym's wrappers (gymnasium keeps it in wrappers.utils)
RND_EDITS = [("from gym.wrappers.normalize import RunningMeanStd\n",
              "from gymnasium.wrappers.utils import RunningMeanStd\n", True)]
# PureJaxRL's wrappers.py imports brax and navix at the top for wrappers ppo.py does not use; neither is installed
PUREJAXRL_WRAPPER_EDITS = [("from brax import envs\n", "", True),
                           ("from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper\n", "", True),
                           ("import navix as nx\n", "", True)]

# PureJaxRL ppo.py's __main__ config, DEBUG off
PUREJAXRL_CONFIG = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
                    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
                    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
                    "ANNEAL_LR": True, "DEBUG": False}
PUREJAXRL_DRIVER = '''"""vs_reference.py's driver for PureJaxRL's ppo.py: its __main__ config, sizes from argv, DEBUG off."""
import json
import sys

import jax

import ppo

config = __CONFIG__
config.update(json.loads(sys.argv[1]))
out = jax.jit(ppo.make_train(config))(jax.random.PRNGKey(int(sys.argv[2])))
jax.block_until_ready(out)
'''


@dataclass
class Bench:
    reference: str  # the script's path inside the checkout
    project: str  # cleanrl_scale/<project>.py
    env_id: str
    num_envs: int
    num_steps: int
    total_timesteps: int
    edits: list = field(default_factory=list)
    project_flags: list = field(default_factory=list)  # flags for the project's script only (same algorithm)
    obs_norm_init: bool = False  # both scripts take --num-iterations-obs-norm-init
    num_minibatches: int = 4
    update_epochs: int = 4


# PureJaxRL's ppo.py hyper-parameters for the project's PPO-EWMA script as plain PPO (no --ewma-com); its instrumentation
# (dynamics/, exact KL) stays at its defaults. --no-compile-cache: PureJaxRL has no persistent cache, so
# both sides compile cold (--steady shares one cache between both sides instead)
PUREJAXRL_FLAGS = ["--learning-rate", "2.5e-4", "--anneal-lr", "--gamma", "0.99", "--gae-lambda", "0.95", "--clip-coef",
                   "0.2", "--hidden-size", "64", "--num-layers", "2", "--no-compile-cache"]
BENCHES = {
    # CleanRL's defaults (Breakout-v5, 8 envs x 128 steps, 4 minibatches x 4 epochs), 32 iterations
    "ppo_atari": Bench("cleanrl/ppo_atari_envpool.py", "ppo_atari_envpool", "Breakout-v5", 8, 128, 32_768,
                       CLEANRL_EDITS),
    # CleanRL's PQN optimises with RAdam; the project's default is Adam
    "pqn_atari": Bench("cleanrl/pqn_atari_envpool.py", "pqn_atari", "Breakout-v5", 8, 128, 32_768, CLEANRL_EDITS,
                       ["--optimizer", "radam"]),
    # CleanRL's defaults are 128 envs x 128 steps (16,384 steps an iteration) after 50 iterations of random
    # warm-up: 2 iterations after 1 warm-up iteration here. CleanRL's value coefficient is 0.5 (the project's 1.0).
    # One difference stays: CleanRL's RND ends an episode at each life lost (episodic_life), the project's at the
    # game's end, as the RND paper does (the speed of a step is the same)
    "ppo_rnd": Bench("cleanrl/ppo_rnd_envpool.py", "ppo_rnd", "MontezumaRevenge-v5", 128, 128, 32_768,
                     CLEANRL_EDITS + RND_EDITS, ["--vf-coef", "0.5"], obs_norm_init=True),
    # PureJaxRL's __main__: CartPole-v1, 4 envs x 128 steps, 4 x 4 minibatches, 500k steps, 64x2 tanh MLPs; the
    # project's PPO-EWMA script as plain PPO (no --ewma-com) with PureJaxRL's hyper-parameters. One difference stays:
    # PureJaxRL anneals the learning rate once an iteration, the project after every minibatch step
    "ppo_cartpole_jax": Bench("purejaxrl/ppo.py", "ppo_ewma_jax", "CartPole-v1", 4, 128, 499_712, [], PUREJAXRL_FLAGS),
    # the stagnation paper's regime: thousands of envs, short rollouts (the configuration of the GPU comparison:
    # SpaceInvaders-MinAtar, 16 steps, 4 epochs x 8 minibatches); 5 iterations at the default 4,096 envs
    "ppo_minatar_jax": Bench("purejaxrl/ppo.py", "ppo_ewma_jax", "SpaceInvaders-MinAtar", 4096, 16, 327_680, [],
                             PUREJAXRL_FLAGS, num_minibatches=8),
}


def fail(message):
    """Bad input: one line, exit status 2, nothing run."""
    print(f"vs_reference.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def apply_edits(text, edits, where):
    """`text` with every edit applied; a required edit that finds nothing is a ValueError."""
    for old, new, required in edits:
        if required and old not in text:
            raise ValueError(f"--reference: {where} has no line {old.strip()!r}, which this harness edits (it knows "
                             f"CleanRL fe8d8a0 and PureJaxRL 31756b1)")
        text = text.replace(old, new)
    return text


def prepare_reference(bench, reference, directory):
    """Write the edited reference into `directory`: (file to run, its extra argv before the shared flags)."""
    source = reference / bench.reference
    if bench.reference.startswith("purejaxrl/"):
        shutil.copy(source, directory / "ppo.py")
        wrappers = source.parent / "wrappers.py"
        (directory / "wrappers.py").write_text(apply_edits(wrappers.read_text(), PUREJAXRL_WRAPPER_EDITS, wrappers))
        (directory / "vs_reference_driver.py").write_text(PUREJAXRL_DRIVER.replace("__CONFIG__", repr(PUREJAXRL_CONFIG)))
        return "vs_reference_driver.py"
    (directory / source.name).write_text(apply_edits(source.read_text(), bench.edits, source))
    return source.name


def commands(bench, opts, reference_file, total_timesteps=None):
    """(reference argv, project argv) for one configuration (--total-timesteps unless total_timesteps)."""
    total_timesteps = total_timesteps or opts.total_timesteps
    shared = ["--env-id", opts.env_id, "--num-envs", str(opts.num_envs), "--num-steps", str(opts.num_steps),
              "--total-timesteps", str(total_timesteps), "--seed", str(opts.seed), "--num-minibatches",
              str(bench.num_minibatches), "--update-epochs", str(bench.update_epochs)]
    if bench.obs_norm_init:
        shared += ["--num-iterations-obs-norm-init", str(opts.obs_norm_init)]
    if bench.reference.startswith("purejaxrl/"):
        config = {"ENV_NAME": opts.env_id, "NUM_ENVS": opts.num_envs, "NUM_STEPS": opts.num_steps,
                  "TOTAL_TIMESTEPS": total_timesteps, "NUM_MINIBATCHES": bench.num_minibatches,
                  "UPDATE_EPOCHS": bench.update_epochs}
        reference = [reference_file, json.dumps(config), str(opts.seed)]
    else:
        reference = [reference_file, *shared]
    project_flags = [flag for flag in bench.project_flags if not (opts.steady and flag == "--no-compile-cache")]
    return reference, [f"{bench.project}.py", *shared, *project_flags]


def in_run_rate(workdir):
    """Steps/s over the second half of a run's iterations (the last n - n // 2 of n), from the wall times of its
    TensorBoard charts/SPS points, one at the end of every iteration (the torch scripts, CleanRL's too): from the point
    that ends iteration n // 2 to the last; None without a run, with under 4 points, or with no time between the two."""
    runs = run_dirs(workdir)
    points = sorted(read_tensorboard_run(runs[0])[0].get("charts/SPS", []), key=lambda e: e.step) if runs else []
    if len(points) < 4:
        return None
    start, last = points[len(points) // 2 - 1], points[-1]
    return (last.step - start.step) / (last.wall_time - start.wall_time) if last.wall_time > start.wall_time else None


def timed_run(argv, workdir, copy_from, cache=None, first=False, purejaxrl=False):
    """Run `python argv` in a fresh copy of `copy_from`'s files under `workdir`: (whole-process wall seconds, if
    `first` the seconds from launch to its first logged iteration, else None, its in-run rate, None on a PureJaxRL
    bench: the reference logs nothing, and the JAX script logs a fused call's iterations together). JAX's persistent
    compilation cache is off unless `cache` names its directory (then on for either side)."""
    shutil.copytree(copy_from, workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    # torch.compile's cache: the run's own (cold), or --steady's shared one
    env.update(PYTHONUNBUFFERED="1", WANDB_MODE="disabled", TORCHINDUCTOR_CACHE_DIR=str(Path(cache or workdir) / "inductor"))
    if cache:  # the project's script caches what compiles in 0.5 s or more: so does the reference here
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")
    launched, start = time.time(), time.perf_counter()
    result = subprocess.run([sys.executable, *argv], cwd=workdir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"vs_reference.py: `python {' '.join(argv)}` in {workdir} exited {result.returncode}:\n"
                         f"{result.stderr[-3000:]}")
    if first:
        (run,) = run_dirs(workdir)
        first = read_tensorboard_run(run)[0]["charts/SPS"][0].wall_time - launched
    return seconds, first or None, None if purejaxrl else in_run_rate(workdir)


def steady_rates(seconds, budgets):
    """{side: steps/s} from {side: {budget: whole-process seconds}} at two budgets: the extra steps over the extra
    seconds (start-up and compilation, the same in both runs, cancel); None for a side that took no longer (its extra
    steps lost in the spread of a process start: unresolved at this --total-timesteps)."""
    extra = {side: times[budgets[1]] - times[budgets[0]] for side, times in seconds.items()}
    return {side: (budgets[1] - budgets[0]) / t if t > 0 else None for side, t in extra.items()}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, type=Path, help="the checkout of CleanRL or PureJaxRL")
    parser.add_argument("--bench", required=True, choices=sorted(BENCHES))
    parser.add_argument("--env-id", help="default: the bench's (Breakout-v5, MontezumaRevenge-v5, CartPole-v1)")
    parser.add_argument("--num-envs", type=int, help="default: the reference's default")
    parser.add_argument("--num-steps", type=int, help="default: the reference's default")
    parser.add_argument("--total-timesteps", type=int, help="default: 32,768 (Atari), 499,712 (CartPole: PureJaxRL's 5e5 as it trains it)")
    parser.add_argument("--obs-norm-init", type=int, default=1, help="ppo_rnd: random warm-up iterations, both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3, help="reference/project pairs, alternating (at least 3)")
    parser.add_argument("--json", type=Path, help="also write every pair and the median to this file")
    parser.add_argument("--steady", action="store_true", help="steady-state rates as well: each side also trains 3 x "
                        "--total-timesteps, and its rate is the 2 x --total-timesteps more steps over the seconds they "
                        "add (start-up and compilation cancel). Both sides then share one fresh persistent compilation "
                        "cache, filled by an uncounted cold run of each side and budget first (their times reported)")
    parser.add_argument("--against", metavar="REV", help="also time the project's script as it was at this git "
                        "revision, in every pair (a before/after of the project's own change, beside the reference)")
    parser.add_argument("--variant", metavar="FLAGS", help="also time the project's script with these flags added, in "
                        "every pair (e.g. --variant=--compile)")
    opts = parser.parse_args(argv)
    bench = BENCHES[opts.bench]
    for name in ("env_id", "num_envs", "num_steps", "total_timesteps"):
        if getattr(opts, name) is None:
            setattr(opts, name, getattr(bench, name))
    for name in ("num_envs", "num_steps", "total_timesteps", "obs_norm_init"):
        if getattr(opts, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(opts, name)}")
    try:
        opts.variant_flags = shlex.split(opts.variant or "")
    except ValueError as e:
        fail(f"--variant {opts.variant!r}: {e}")
    if opts.variant is not None and not opts.variant_flags:
        fail("--variant must name flags (got an empty string)")
    if opts.pairs < 3:
        fail(f"--pairs must be at least 3 (a median of per-pair ratios), got {opts.pairs}")
    if opts.against is not None and opts.variant is not None and opts.pairs < 4:
        fail(f"--pairs must be at least 4 with --against and --variant (each of the 4 sides goes first once), "
             f"got {opts.pairs}")
    batch = opts.num_envs * opts.num_steps
    if opts.total_timesteps % batch:
        fail(f"--total-timesteps must be a multiple of num_envs x num_steps = {batch} (both scripts then "
                     f"train exactly that many steps), got {opts.total_timesteps}")
    if batch % bench.num_minibatches:
        fail(f"num_envs x num_steps = {batch} must split into the {bench.num_minibatches} minibatches both scripts use")
    if opts.total_timesteps * (3 if opts.steady else 1) >= 2**31:
        fail(f"--total-timesteps{' x 3 (--steady)' if opts.steady else ''} must be below 2**31, got {opts.total_timesteps}")
    for needed in [bench.reference] + (["purejaxrl/wrappers.py"] if bench.reference.startswith("purejaxrl/") else []):
        if not (opts.reference / needed).is_file():
            fail(f"--reference {opts.reference} has no {needed} (the --bench {opts.bench} script needs it)")
    if opts.json is not None and not opts.json.parent.is_dir():
        fail(f"--json {opts.json}: no directory {opts.json.parent} to write it in")
    if opts.against is not None:
        if not opts.against.strip():
            fail("--against must name a git revision (got an empty string)")
        try:
            opts.against_script = script_at(bench.project, opts.against, tempfile.mkdtemp(prefix="vs_reference_against_"))
        except subprocess.CalledProcessError:
            fail(f"--against {opts.against}: no cleanrl_scale/{bench.project}.py at that git revision")
    if bench.reference.startswith("purejaxrl/"):
        import gymnax

        known = gymnax.registered_envs
    else:
        import envpool

        known = envpool.list_all_envs()
    if opts.env_id not in known:
        fail(f"--env-id {opts.env_id} is not an environment of the --bench {opts.bench} scripts "
             f"({'gymnax' if bench.reference.startswith('purejaxrl/') else 'envpool'})")
    return opts, bench


def main(argv=None):
    opts, bench = parse(argv)
    root = Path(tempfile.mkdtemp(prefix="vs_reference_"))
    try:
        (root / "reference").mkdir()
        try:
            reference_file = prepare_reference(bench, opts.reference.resolve(), root / "reference")
        except ValueError as e:  # before any run: the checkout is not one this harness knows how to edit
            fail(str(e))
        (root / "project").mkdir()
        shutil.copy(SCRIPTS / f"{bench.project}.py", root / "project")
        sides = ["reference", "project"]
        if opts.against:
            (root / "against").mkdir()
            shutil.copy(opts.against_script, root / "against" / f"{bench.project}.py")
            shutil.rmtree(Path(opts.against_script).parent, ignore_errors=True)
            sides.append("against")
        if opts.variant_flags:
            shutil.copytree(root / "project", root / "variant")
            sides.append("variant")
        budgets = [opts.total_timesteps, 3 * opts.total_timesteps] if opts.steady else [opts.total_timesteps]
        argvs = {}  # (side, budget) -> argv
        for budget in budgets:
            reference_argv, project_argv = commands(bench, opts, reference_file, budget)
            # a revision from before --compile-cache would refuse the flag (JAX itself keeps it cold, or uses --steady's cache)
            knows = opts.against and "compile_cache" in Path(root / "against" / f"{bench.project}.py").read_text()
            argvs.update({("reference", budget): reference_argv, ("project", budget): project_argv,
                          ("against", budget): [flag for flag in project_argv if knows or flag != "--no-compile-cache"],
                          ("variant", budget): project_argv + opts.variant_flags})
        machine = describe_machine()
        print(f"{opts.bench}: {opts.env_id}, {opts.num_envs} envs x {opts.num_steps} steps, "
              f"{' and '.join(f'{b:,}' for b in budgets)} steps a run; {machine}\n"
              f"  reference: python {' '.join(argvs['reference', budgets[-1]])}\n"
              f"  project:   python {' '.join(argvs['project', budgets[-1]])}"
              + (f"\n  against:   the project's script at {opts.against}, the same flags" if opts.against else "")
              + (f"\n  variant:   python {' '.join(argvs['variant', budgets[-1]])}" if opts.variant_flags else ""), flush=True)
        cache = root / "jax_cache" if opts.steady else None

        firsts, in_run = {}, {}  # side -> seconds from launch to the first logged iteration, in-run steps/s (last run)

        def run(side, budget, name):
            purejaxrl = bench.reference.startswith("purejaxrl/")
            seconds, firsts[side], in_run[side] = timed_run(argvs[side, budget], root / f"{name}_{side}_{budget}",
                                                            root / side, cache, side == "project" and purejaxrl, purejaxrl)
            return seconds

        report = {"bench": opts.bench, "machine": machine, "reference": argvs["reference", budgets[-1]],
                  "project": argvs["project", budgets[-1]], "options": {k: str(v) for k, v in vars(opts).items()}}
        if opts.steady:  # cold runs that fill the shared cache; their times are the cold whole-process figures
            cold = {side: {budget: run(side, budget, "cold") for budget in budgets} for side in sides}
            report["cold"] = cold
            line = ", ".join(f"{side} {cold[side][budgets[-1]]:.1f} s" for side in sides)
            print(f"cold (filling the cache, {budgets[-1]:,} steps): {line}; ratio "
                  f"x{cold['reference'][budgets[-1]] / cold['project'][budgets[-1]]:.3f}", flush=True)
        pairs = []
        for i in range(opts.pairs):
            # the order rotates (reference first in pairs 1, 3, ...; the project in 2, 4, ...; with --against each
            # side goes first in turn), so that the first run's cold caches and any drift fall on every side
            order = sides[i % len(sides):] + sides[: i % len(sides)]
            seconds = {side: {budget: run(side, budget, f"run{i}") for budget in budgets} for side in order}
            ref_s, ours_s = seconds["reference"][budgets[-1]], seconds["project"][budgets[-1]]
            pair = {"first": order[0], "reference_s": ref_s, "project_s": ours_s, "ratio": ref_s / ours_s}
            line = (f"pair {i + 1}: reference {ref_s:.1f} s ({budgets[-1] / ref_s:,.0f} steps/s), project "
                    f"{ours_s:.1f} s ({budgets[-1] / ours_s:,.0f} steps/s), ratio x{ref_s / ours_s:.3f}")
            if in_run["reference"] and in_run["project"]:  # the runs' own rates, start-up and compilation left out
                pair.update({f"{side}_in_run_sps": in_run[side] for side in order if in_run[side]})
                pair["in_run_ratio"] = in_run["project"] / in_run["reference"]
                line += (f"; in-run reference {in_run['reference']:,.0f} steps/s, project {in_run['project']:,.0f} "
                         f"steps/s, ratio x{pair['in_run_ratio']:.3f}")
                if opts.against and in_run["against"]:
                    pair["against_in_run_ratio"] = in_run["project"] / in_run["against"]
                    line += f", at {opts.against} {in_run['against']:,.0f} steps/s (x{pair['against_in_run_ratio']:.3f})"
                if opts.variant_flags and in_run["variant"]:
                    pair["variant_in_run_ratio"] = in_run["variant"] / in_run["reference"]
                    line += f", variant {in_run['variant']:,.0f} steps/s, x{pair['variant_in_run_ratio']:.3f}"
            if bench.reference.startswith("purejaxrl/"):  # PureJaxRL's first result is its whole process (it logs at the end)
                pair.update(project_first_s=firsts["project"], first_margin_s=firsts["project"] - ref_s)
                line += f"; project's first iteration logged at {firsts['project']:.1f} s ({pair['first_margin_s']:+.1f} s)"
            rates = steady_rates(seconds, budgets) if opts.steady else {}
            unresolved = [side for side, rate in rates.items() if rate is None]
            if unresolved:  # the pair's whole-process ratios stand; its steady ones are left out of the medians
                pair["steady_unresolved"] = unresolved
                line += (f"; steady unresolved: {', '.join(unresolved)} trained {budgets[1] - budgets[0]:,} more steps "
                         f"in no more time (raise --total-timesteps)")
                rates = {}
            elif rates:
                pair.update({f"{side}_steady_sps": rates[side] for side in order})
                pair["steady_ratio"] = rates["project"] / rates["reference"]
                line += (f"; steady reference {rates['reference']:,.0f} steps/s, project {rates['project']:,.0f} "
                         f"steps/s, ratio x{pair['steady_ratio']:.3f}")
            if opts.against:
                pair.update(against_s=seconds["against"][budgets[-1]], against_ratio=seconds["against"][budgets[-1]] / ours_s)
                line += f"; at {opts.against} {pair['against_s']:.1f} s, ratio x{pair['against_ratio']:.3f}"
                if rates:
                    pair["against_steady_ratio"] = rates["project"] / rates["against"]
                    line += f" (steady x{pair['against_steady_ratio']:.3f})"
            if opts.variant_flags:
                var_s = seconds["variant"][budgets[-1]]
                pair.update(variant_s=var_s, variant_ratio=ref_s / var_s, variant_vs_project=ours_s / var_s)
                line += f"; variant {var_s:.1f} s, ratio x{ref_s / var_s:.3f} (x{ours_s / var_s:.3f} the project's)"
                if rates:
                    pair.update(variant_steady_ratio=rates["variant"] / rates["reference"],
                                variant_steady_vs_project=rates["variant"] / rates["project"])
                    line += (f" (steady {rates['variant']:,.0f} steps/s, x{pair['variant_steady_ratio']:.3f}, "
                             f"x{pair['variant_steady_vs_project']:.3f} the project's)")
            pairs.append(pair)
            print(line, flush=True)
            if opts.json:  # after every pair: a run cut short keeps what it measured
                opts.json.write_text(json.dumps({**report, "pairs": pairs}, indent=2))
        report["pairs"] = pairs
        for key, what in (("ratio", "reference s / project s"), ("steady_ratio", "project steady steps/s / reference's"),
                          ("in_run_ratio", "project in-run steps/s / reference's"),
                          ("against_in_run_ratio", f"project in-run steps/s / at {opts.against}"),
                          ("variant_in_run_ratio", "variant in-run steps/s / reference's"),
                          ("first_margin_s", "seconds to the project's first logged iteration - the reference's whole process"),
                          ("against_ratio", f"project at {opts.against} s / project s"),
                          ("against_steady_ratio", f"project steady steps/s / at {opts.against}"),
                          ("variant_ratio", "reference s / variant s"), ("variant_vs_project", "project s / variant s"),
                          ("variant_steady_ratio", "variant steady steps/s / reference's"),
                          ("variant_steady_vs_project", "variant steady steps/s / project's")):
            values = [p[key] for p in pairs if key in p]
            if values:
                report[f"median_{key}"] = statistics.median(values)
                shown = [f"{v:+.1f} s" if key.endswith("_s") else f"x{v:.3f}" for v in (report[f"median_{key}"], min(values), max(values))]
                name = key[:-2].replace("_", " ") + "s" if key.endswith("_s") else key.replace("_", " ") + "s"
                left_out = f" ({opts.pairs - len(values)} unresolved left out)" if len(values) < opts.pairs else ""
                print(f"median of {len(values)} per-pair {name}{left_out} ({what}): {shown[0]}  "
                      f"[{shown[1]}, {shown[2]}]; {machine}")
        if opts.json:
            opts.json.write_text(json.dumps(report, indent=2))
        return report["median_ratio"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
