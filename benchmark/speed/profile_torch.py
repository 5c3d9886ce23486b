"""Where a torch Atari script's time goes: one training run under cProfile, its time summed into parts.

    python benchmark/speed/profile_torch.py --script ppo_atari_envpool -- --total-timesteps 32768
    python benchmark/speed/profile_torch.py --script pqn_atari --json prof.json -- --num-envs 64

A copy of the script runs from a temporary directory (as every benchmark here runs it) under
`python -m cProfile`, with the flags after `--`. Every function's own time (cProfile's tottime) goes to
one part: a built-in (a torch kernel, envpool's C++ step) to the part of the Python function that called
it, in proportion to the calls' times, so that the float conversion inside `preprocess` counts as frame
conversion and `torch.sqrt` inside Adam as the optimiser. The parts add up to the profiled total.
cProfile slows Python-heavy code more than kernels, so read the shares, not the seconds, and compare
two profiles only side by side on one machine.
"""
import argparse
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmark.common
from benchmark.common import SCRIPTS, describe_machine, run_copy  # noqa: E402

# the script's own functions, by name, and the part each belongs to (the rest of the script: "training loop")
SCRIPT_PARTS = {
    "preprocess": "frame conversion (uint8 -> float, layout)",
    "normalise_frame": "frame conversion (uint8 -> float, layout)",
    "compute_gae": "returns (GAE / Q(lambda))",
    "compute_lambda_returns": "returns (GAE / Q(lambda))",
}
DYNAMICS = ("dynamics_metrics", "feature_rank", "dormant_percentage", "weight_norm", "grad_kurtosis", "ess_percentage",
            "policy_variance", "hidden_activations")
OTHER = "other (called from no part above)"
# (part, test on a function's file and name) in order, the first that matches wins; a built-in's file is "~" and
# its name e.g. "<built-in method torch.conv2d>"
RULES = [
    ("backward pass (autograd)", lambda file, name: "run_backward" in name),
    ("environment (envpool: creation, steps)", lambda file, name: "envpool" in file or "envpool" in name),
    ("optimiser step, gradient clipping", lambda file, name: "/torch/optim/" in file or "clip_grad" in file),
    ("convolutions, forward", lambda file, name: file.endswith("torch/nn/modules/conv.py") or "conv2d" in name),
    ("other layers, forward (linear, ReLU)",
     lambda file, name: file.endswith(("torch/nn/modules/linear.py", "torch/nn/modules/activation.py",
                                       "torch/nn/modules/flatten.py"))
     or name.endswith(("linear>", "relu>"))),
    ("torch.distributions (sampling, log-probs)", lambda file, name: "/torch/distributions/" in file),
    ("TensorBoard writing", lambda file, name: "tensorboard" in file),
    ("progress bar", lambda file, name: "/tqdm/" in file),
    ("flag parsing (tyro)", lambda file, name: "/tyro/" in file),
    ("imports and start-up", lambda file, name: "<frozen" in file or name == "<module>"
     or name in ("<built-in method marshal.loads>", "<built-in method _imp.create_dynamic>")),
]


def own_part(key, script_file):
    """The part of a function by itself; None for one that matches no rule (its callers decide)."""
    file, _, name = key
    if Path(file).name == script_file and name != "<module>":
        if name in DYNAMICS:
            return "dynamics/ metrics"
        return SCRIPT_PARTS.get(name, "training loop (the script's other lines)")
    return next((part for part, test in RULES if test(file, name)), None)


def parts(stats, script_file):  # script_file: the script's file name
    """{part: {function: seconds of own time}}: every function's tottime, that of a function no rule places split over
    its callers' parts in proportion to the time of its calls from each (up the chain), so torch's Python layers
    count where the script called them. The shares solve x = W x + b (W: a part-less function's caller weights, b:
    the parts of the functions a rule places), iterated to convergence, so cycles of part-less functions (torch's
    `_call_impl` -> `Sequential.forward` -> `_call_impl`) take their callers' parts too; what cycles without
    reaching any part is "other"."""
    table = stats.stats  # key -> (primitive calls, calls, tottime, cumtime, {caller: (pc, calls, tottime, cumtime)})
    keys = list(table)
    index = {key: i for i, key in enumerate(keys)}
    names = sorted({part for part, _ in RULES} | {OTHER, "dynamics/ metrics", "training loop (the script's other lines)"}
                   | set(SCRIPT_PARTS.values()))
    column = {name: j for j, name in enumerate(names)}
    b = np.zeros((len(keys), len(names)))
    rows, cols, values = [], [], []
    for i, key in enumerate(keys):
        part = own_part(key, script_file)
        callers = {caller: c for caller, c in table[key][4].items() if caller in index}
        weights = {caller: c[2] for caller, c in callers.items()}
        if not sum(weights.values()):
            weights = {caller: c[1] for caller, c in callers.items()}
        total = sum(weights.values())
        if part is not None or not total:
            b[i, column[part or OTHER]] = 1.0
            continue
        for caller, weight in weights.items():
            rows.append(i), cols.append(index[caller]), values.append(weight / total)
    w = scipy.sparse.csr_matrix((values, (rows, cols)), shape=(len(keys), len(keys)))
    x = b.copy()
    for _ in range(10_000):  # x_{k+1} = W x_k + b converges: W's rows sum to 1 only inside part-less cycles
        following = w @ x + b
        if np.abs(following - x).max() < 1e-12:
            break
        x = following
    leftover = 1.0 - x.sum(axis=1)  # mass that only cycles among part-less functions (beyond the iteration's error)
    x[:, column[OTHER]] += np.where(leftover > 1e-9, leftover, 0.0)
    seconds = {}  # part -> {function: seconds}
    for i, key in enumerate(keys):
        name = key[2] if key[0] == "~" else f"{Path(key[0]).name}:{key[1]}({key[2]})"
        for j in np.flatnonzero(x[i] > 1e-15):
            functions = seconds.setdefault(names[j], {})
            functions[name] = functions.get(name, 0.0) + table[key][2] * x[i, j]
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_atari_envpool", help="a torch script of cleanrl_scale/")
    parser.add_argument("--json", help="also write the parts (seconds) to this file")
    parser.add_argument("--top", type=int, default=0, help="also list each part's N functions with the most time")
    parser.add_argument("flags", nargs="*", help="the script's flags, after --")
    opts = parser.parse_args(argv)
    if not (SCRIPTS / f"{opts.script}.py").is_file():
        parser.exit(2, f"profile_torch.py: error: --script {opts.script}: no cleanrl_scale/{opts.script}.py\n")
    if opts.top < 0:
        parser.exit(2, f"profile_torch.py: error: --top must be >= 0 (got {opts.top})\n")
    if opts.json and not Path(opts.json).resolve().parent.is_dir():
        parser.exit(2, f"profile_torch.py: error: --json {opts.json}: its directory does not exist\n")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_copy(opts.script, opts.flags, tmp, python_flags=("-m", "cProfile", "-o", "profile.out"))
        wall = time.perf_counter() - start
        if result.returncode:
            sys.exit(f"{opts.script} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
        stats = pstats.Stats(str(Path(tmp) / "profile.out"))
        functions = parts(stats, f"{opts.script}.py")
    seconds = {part: sum(f.values()) for part, f in functions.items()}
    total = sum(seconds.values())
    print(f"{opts.script} {' '.join(opts.flags)}: {wall:.1f} s wall under cProfile, {total:.1f} s profiled "
          f"({describe_machine()})")
    for part, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {part:45s} {s:8.2f} s  {100 * s / total:5.1f} %")
        for name, t in sorted(functions[part].items(), key=lambda kv: -kv[1])[: opts.top]:
            print(f"      {name[:70]:70s} {t:8.2f} s")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"script": opts.script, "flags": opts.flags, "wall_seconds": wall,
                                               "machine": describe_machine(), "seconds": seconds,
                                               "functions": functions}, indent=1))


if __name__ == "__main__":
    main()
