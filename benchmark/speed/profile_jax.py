"""Where ppo_ewma_jax.py's device time goes: its training iteration timed on the device beside PureJaxRL's, and a
jax.profiler trace of each summed by kernel.

In this one process: (1) the script's jitted call of its default --fuse-iterations iterations (the program the script
runs), compiled once and, after a warm-up call, timed over --calls calls without the dynamics/ metrics (the median),
then twice with them; (2) with --reference, PureJaxRL's ppo.py `make_train` at 2 and 2 + --calls iterations, each
compiled ahead and warmed up, then run in turn --repeats times: its seconds an iteration are the median of the
differences over --calls (its start-up cancels; a median of 0 or less stops the command); (3) one more call of each
under `jax.profiler.trace` (a perfetto trace), whose device events are summed by name: the top --top kernels of each
side, with their share of the side's device time. Host loop, logging and compilation are not in these figures
(vs_reference.py --steady measures whole processes).

    python benchmark/speed/profile_jax.py --reference path/to/purejaxrl --num-envs 65536 --json out.json
    python benchmark/speed/profile_jax.py --num-envs 256 --calls 10 --against 426989b     (a change, side by side)

--against REV times the script as it was at a git revision the same way, in the same process (both programs compiled,
then their calls timed in turn, the first of each round rotating); so do --variant FLAG=VALUE (the script with that
flag) and --xla-variant OPTION=VALUE[;OPTION=VALUE] (its program compiled with those XLA options, e.g.
xla_gpu_enable_command_buffer=FUSION,CUBLAS,WHILE; boolean values are True/False).
"""
import argparse
import ast
import glob
import gzip
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import jax_machine, load_script, on_one_device, script_at  # noqa: E402
from vs_reference import BENCHES, PUREJAXRL_CONFIG, prepare_reference


def kernel_totals(trace_dir):
    """{event name: total microseconds} of a perfetto trace's device events (every event where no device is traced)."""
    path = glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True)[0]
    events = json.load(gzip.open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in names.items() if "GPU" in name or "TPU" in name}
    totals = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and (not device or e["pid"] in device):
            totals[e["name"]] += e.get("dur", 0.0)
    return dict(totals)


def profiled(fn, label, opts):
    """fn() under the profiler: the top kernels, their microseconds and share."""
    trace_dir = tempfile.mkdtemp(prefix=f"profile_jax_{label}_")
    try:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            jax.block_until_ready(fn())
        totals = kernel_totals(trace_dir)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    whole = sum(totals.values()) or 1.0
    top = sorted(totals.items(), key=lambda kv: -kv[1])[: opts.top]
    return {"device_us": whole, "top": [{"name": n[:120], "us": us, "share": us / whole} for n, us in top]}


def load_at(revision):
    """ppo_ewma_jax.py as it was at git `revision`, imported under another name."""
    path = script_at("ppo_ewma_jax", revision, tempfile.mkdtemp(prefix="profile_jax_against_"))
    spec = importlib.util.spec_from_file_location(f"ppo_ewma_jax_at_{revision}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def project_program(opts, ewma, overrides, xla):
    """(call(measure) -> metrics, iterations a call, the no-dynamics and the dynamics masks) of the script's jitted
    call at these sizes (and these flags of --variant), compiled (with the XLA options of --xla-variant) and run once."""
    flags = dict(env_id=opts.env_id, num_envs=opts.num_envs, num_steps=opts.num_steps, num_minibatches=opts.num_minibatches,
                 update_epochs=4, learning_rate=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                 hidden_size=64, num_layers=2, total_timesteps=opts.num_envs * opts.num_steps * 1000)
    flags.update(overrides)
    flags_of = getattr(ewma, "RunArgs", ewma.Args)  # earlier revisions: Args held the run's flags too
    # one device (this process times the program of one): a revision that splits its envs over the devices is told so
    one = {"num_devices": 1} if hasattr(ewma, "env_ids") else {}
    args = ewma.resolve_args(flags_of(**{k: v for k, v in flags.items() if k in flags_of.__dataclass_fields__}), **one)
    if hasattr(ewma, "resolve_fuse_iterations"):  # earlier revisions resolve it with the other flags
        ewma.resolve_fuse_iterations(args)
    env = ewma.make_env(args)
    init, update, _, _ = ewma.make_train(args, env)
    if hasattr(ewma, "env_ids"):  # a revision whose update runs on one device's share of the envs (jax.shard_map)
        init, update = on_one_device(init), on_one_device(update)
    levels = env.sample_levels(jax.random.PRNGKey(0))
    runner = jax.jit(init)(jax.random.PRNGKey(1), levels)
    plain = jnp.zeros(args.fuse_iterations, bool)  # no dynamics/ metrics; a call with them is timed apart
    active = jnp.ones(args.fuse_iterations, bool)
    # the float flags as traced arguments, as the script runs them (revisions before hyperparameters(): constants)
    hyper = (ewma.hyperparameters(args),) if hasattr(ewma, "hyperparameters") else ()
    compiled = jax.jit(update, donate_argnums=0).lower(runner, levels, plain, active, *hyper).compile(xla or None)
    state = {"runner": runner}

    def call(measure=plain):
        state["runner"], metrics = compiled(state["runner"], levels, measure, active, *hyper)
        return metrics

    jax.block_until_ready(call())
    return call, args.fuse_iterations, plain, plain.at[0].set(True)


def seconds_an_iteration(program, measure):
    call, iterations = program[:2]
    start = time.perf_counter()
    jax.block_until_ready(call(measure))
    return (time.perf_counter() - start) / iterations


def project_sides(opts, modules):
    """{side: figures} for the script (at --against, with each --variant), their calls timed in turn; a side that fails
    to compile or run is reported with its error (XLA:GPU has failed on some sizes' variants) and left out."""
    programs, failed = {}, {}
    for side, (module, overrides, xla) in modules.items():
        try:
            programs[side] = project_program(opts, module, overrides, xla)
        except Exception as e:  # noqa: BLE001 -- the other sides are still measured
            failed[side] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            print(f"{side}: failed: {failed[side]['error']}", flush=True)
    if "project" not in programs:
        raise SystemExit(f"profile_jax.py: the script's own program failed: {failed['project']['error']}")
    seconds = {side: [] for side in programs}
    for i in range(opts.calls):
        for side in list(programs)[i % len(programs):] + list(programs)[: i % len(programs)]:  # the first rotates
            seconds[side].append(seconds_an_iteration(programs[side], programs[side][2]))
    report = dict(failed)
    for side, program in programs.items():
        with_dynamics = [seconds_an_iteration(program, program[3]) for _ in range(2)]
        report[side] = {"fuse_iterations": program[1], "iteration_s": statistics.median(seconds[side]),
                        "calls_s": seconds[side], "measured_call_s_per_iteration": with_dynamics,
                        "profile": profiled(program[0], side, opts), "profiled_iterations": program[1]}
    return report


def reference_side(opts):
    """PureJaxRL's seconds an iteration: the median over --repeats of (run of 2 + --calls iterations - run of 2) /
    --calls, the two compiled ahead and run in turn."""
    bench = BENCHES["ppo_minatar_jax"]
    directory = Path(tempfile.mkdtemp(prefix="profile_jax_reference_"))
    prepare_reference(bench, opts.reference.resolve(), directory)
    sys.path.insert(0, str(directory))
    import ppo  # PureJaxRL's, from the checkout

    config = dict(PUREJAXRL_CONFIG)
    batch = opts.num_envs * opts.num_steps
    config.update(ENV_NAME=opts.env_id, NUM_ENVS=opts.num_envs, NUM_STEPS=opts.num_steps, NUM_MINIBATCHES=opts.num_minibatches,
                  UPDATE_EPOCHS=4, DEBUG=False)
    trains = {}
    for iterations in (2, 2 + opts.calls):
        trains[iterations] = jax.jit(ppo.make_train(dict(config, TOTAL_TIMESTEPS=batch * iterations))).lower(
            jax.random.PRNGKey(1)).compile()
        jax.block_until_ready(trains[iterations](jax.random.PRNGKey(1)))
    differences = []
    for repeat in range(opts.repeats):
        seconds = {}
        for iterations in sorted(trains, reverse=bool(repeat % 2)):
            start = time.perf_counter()
            jax.block_until_ready(trains[iterations](jax.random.PRNGKey(2 + repeat)))
            seconds[iterations] = time.perf_counter() - start
        differences.append((seconds[2 + opts.calls] - seconds[2]) / opts.calls)
    shutil.rmtree(directory, ignore_errors=True)
    if statistics.median(differences) <= 0:
        raise SystemExit(f"profile_jax.py: PureJaxRL's {opts.calls} extra iterations took no time ({differences}); "
                         "raise --calls")
    return {"iteration_s": statistics.median(differences), "differences_s": differences, "profiled_iterations": 2,
            "profile": profiled(lambda: trains[2](jax.random.PRNGKey(3)), "reference", opts)}


def variant(text):
    """--variant flag=value: a flag of ppo_ewma_jax.py's Args (underscores) and its value, parsed as Python."""
    name, _, value = text.partition("=")
    if not name or not value:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected flag=value, e.g. unroll=16")
    return name.replace("-", "_"), ast.literal_eval(value)


def xla_variant(text):
    """--xla-variant option=value[;option=value]: XLA compile options (jax's `.compile(compiler_options)`)."""
    pairs = [item.partition("=") for item in text.split(";")]
    if not all(name.startswith("xla_") and value for name, _, value in pairs):
        raise argparse.ArgumentTypeError(f"--xla-variant {text!r}: expected xla_option=value[;xla_option=value]")
    return text, {name: value for name, _, value in pairs}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, help="a PureJaxRL checkout (its purejaxrl/ppo.py and wrappers.py)")
    parser.add_argument("--env-id", default="SpaceInvaders-MinAtar")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--num-steps", type=int, default=16)
    parser.add_argument("--num-minibatches", type=int, default=8, help="both sides' (4 epochs each)")
    parser.add_argument("--calls", type=int, default=5, help="timed calls (the reference: extra iterations)")
    parser.add_argument("--repeats", type=int, default=3, help="the reference's timed pairs of runs")
    parser.add_argument("--top", type=int, default=15, help="kernels listed per side")
    parser.add_argument("--against", metavar="REV", help="also time the script as it was at this git revision")
    parser.add_argument("--variant", type=variant, action="append", default=[], metavar="FLAG=VALUE",
                        help="also time the script with this flag (repeatable: one program each), e.g. unroll=16")
    parser.add_argument("--xla-variant", type=xla_variant, action="append", default=[], metavar="OPTION=VALUE[;...]",
                        help="also time the script's program compiled with these XLA options (repeatable), e.g. "
                             "xla_gpu_enable_command_buffer=FUSION,CUBLAS,WHILE")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    if min(opts.num_envs, opts.num_steps, opts.num_minibatches, opts.calls, opts.repeats) < 1:
        raise SystemExit("profile_jax.py: error: --num-envs, --num-steps, --num-minibatches, --calls and --repeats must be >= 1")
    if (opts.num_envs * opts.num_steps) % opts.num_minibatches:
        raise SystemExit("profile_jax.py: error: --num-minibatches must divide --num-envs x --num-steps")
    report = {"machine": jax_machine(), "options": {k: str(v) for k, v in vars(opts).items()}}
    project = load_script("ppo_ewma_jax")
    unknown = [name for name, _ in opts.variant if name not in project.RunArgs.__dataclass_fields__]
    if unknown:
        raise SystemExit(f"profile_jax.py: error: --variant {unknown[0]}: not a flag of ppo_ewma_jax.py")
    modules = {"project": (project, {}, {})}
    if opts.against:
        modules[f"project at {opts.against}"] = (load_at(opts.against), {}, {})
    for name, value in opts.variant:
        modules[f"{name}={value}"] = (project, {name: value}, {})
    for text, options in opts.xla_variant:
        modules[f"xla {text}"] = (project, {}, options)
    report.update(project_sides(opts, modules))
    if opts.reference:
        report["reference"] = reference_side(opts)
    batch = opts.num_envs * opts.num_steps
    measured = [side for side in report if "iteration_s" in report.get(side, {})]
    for side in measured:
        r = report[side]
        profile = r["profile"]
        print(f"{side}: {r['iteration_s'] * 1e3:.2f} ms an iteration ({batch / r['iteration_s']:,.0f} steps/s); "
              f"profiled: {profile['device_us'] / 1e3:.1f} ms over {r['profiled_iterations']} iterations"
              + (", with initialisation" if side == "reference" else "") + "; top:")
        for k in profile["top"]:
            print(f"  {k['us'] / 1e3:9.2f} ms {100 * k['share']:5.1f}%  {k['name']}")
    for side in measured:
        if side not in ("project", "reference"):
            print(f"ratio (project s / {side} s an iteration): "
                  f"x{report['project']['iteration_s'] / report[side]['iteration_s']:.3f}")
    if "reference" in report:
        for side in (s for s in measured if s != "reference"):
            print(f"ratio (reference s / {side} s an iteration): "
                  f"x{report['reference']['iteration_s'] / report[side]['iteration_s']:.3f}")
        print(report["machine"])
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
