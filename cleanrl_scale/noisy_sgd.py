"""The stochastic-optimisation analogue of PPO's outer loop (stagnation paper §3, App. A).

Minimise f(x) = x^T x, x in R^50, by gradient descent whose gradients carry Gaussian noise of
std 3 / sqrt(50); plot -||x - x*|| (x* = 0) against steps for several step sizes. Large steps
plateau early and high, with large updates (Fig. 1b, 2a); small steps converge slowly; switching the
step size mid-run moves a curve to the new step size's plateau (Fig. 3b, --switch-step).

At a fixed step size eta the iterate settles where E||x||^2 = dim * eta * sigma^2 / (4 (1 - eta)),
i.e. 9 eta / (4 (1 - eta)) with the paper's noise; the tests check the curves against it.

Writes runs/{run_name}/curves.csv (every step size, seed and step) and one TensorBoard run per step
size under runs/{run_name}/eta_{eta}/ with the seed-mean of `charts/neg_distance` and
`charts/update_norm`.
"""
import contextlib
import csv
import io
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import tyro
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer import event_file_writer


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    step_sizes: Tuple[float, ...] = (0.001, 0.01, 0.1, 0.3)
    """the step sizes eta to compare (each in (0, 1))"""
    num_steps: int = 2000
    """gradient steps per run"""
    num_seeds: int = 5
    """independent runs per step size"""
    dim: int = 50
    """dimension of x"""
    noise_std: Optional[float] = None
    """std of the gradient noise per coordinate (default 3 / sqrt(dim), App. A)"""
    init: float = 1.0
    """every coordinate of x_0 (so ||x_0|| = init * sqrt(dim))"""
    switch_step: int = 0
    """from this step on every run uses --switch-step-size (0 = no switch; Fig. 3b)"""
    switch_step_size: float = 0.0
    """the step size after --switch-step"""


def plateau_distance(eta, noise_std, dim):
    """sqrt(E||x||^2) of the stationary iterate at step size eta: x' = (1 - 2 eta) x - eta * noise."""
    return np.sqrt(dim * eta * noise_std**2 / (4.0 * (1.0 - eta)))


def run(args):
    """Curves of shape (step sizes, seeds, steps + 1): -||x_t - x*|| and ||x_{t+1} - x_t|| (0 at the last t)."""
    rng = np.random.default_rng(args.seed)
    etas = np.asarray(args.step_sizes)[:, None, None]
    x = np.full((len(args.step_sizes), args.num_seeds, args.dim), args.init)
    neg_distance = np.zeros((len(args.step_sizes), args.num_seeds, args.num_steps + 1))
    update_norm = np.zeros_like(neg_distance)
    neg_distance[..., 0] = -np.linalg.norm(x, axis=-1)
    for t in range(args.num_steps):
        eta = args.switch_step_size if args.switch_step and t >= args.switch_step else etas
        grad = 2.0 * x + args.noise_std * rng.standard_normal(x.shape)  # grad of x^T x, plus noise
        update = -eta * grad
        x = x + update
        update_norm[..., t] = np.linalg.norm(update, axis=-1)
        neg_distance[..., t + 1] = -np.linalg.norm(x, axis=-1)
    return neg_distance, update_norm


def main(args):
    run_name = f"{args.exp_name}__{args.seed}__{int(time.time())}"
    neg_distance, update_norm = run(args)
    os.makedirs(f"runs/{run_name}", exist_ok=True)
    with open(f"runs/{run_name}/curves.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step_size", "seed", "step", "neg_distance", "update_norm"])
        for i, eta in enumerate(args.step_sizes):
            for s in range(args.num_seeds):
                for t in range(args.num_steps + 1):
                    out.writerow([eta, args.seed + s, t, neg_distance[i, s, t], update_norm[i, s, t]])
    for i, eta in enumerate(args.step_sizes):
        label = f"eta_{eta:g}" + (f"_to_{args.switch_step_size:g}" if args.switch_step else "")
        writer = SummaryWriter(f"runs/{run_name}/{label}")
        for t in range(args.num_steps + 1):
            writer.add_scalar("charts/neg_distance", neg_distance[i, :, t].mean(), t)
            writer.add_scalar("charts/update_norm", update_norm[i, :, t].mean(), t)
        writer.close()
        tail = neg_distance[i, :, -max(1, args.num_steps // 5):].mean()
        final_eta = args.switch_step_size if args.switch_step else eta
        print(f"{label}: final -||x - x*|| {neg_distance[i, :, -1].mean():.4f}, mean over the last 20% {tail:.4f} "
              f"(plateau at eta {final_eta:g}: {-plateau_distance(final_eta, args.noise_std, args.dim):.4f})")
    print(f"curves written to runs/{run_name}/curves.csv")


# ==== Plumbing: logging, flag checks ====
class SummaryWriter:
    """The scalar events torch.utils.tensorboard.SummaryWriter writes, through the tensorboard package's own
    EventFileWriter (no torch import for them)."""

    def __init__(self, logdir):
        self.file = event_file_writer.EventFileWriter(logdir)

    def add_scalar(self, tag, value, step):
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self.file.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def close(self):
        self.file.close()


class BadFlag(ValueError):
    """A flag value that breaks a rule; reported as one line, exit status 2."""


def check_runs_directory():
    """runs/ in the working directory must be a directory this process can write: checked before any compute."""
    if os.path.lexists("runs") and not os.path.isdir("runs"):
        raise BadFlag(f"{os.path.abspath('runs')} is not a directory: the runs are written under it")
    if not os.access("runs" if os.path.isdir("runs") else ".", os.W_OK | os.X_OK):
        raise BadFlag(f"cannot write {os.path.abspath('runs')}: start the run from a directory you can write")


def resolve_args(args):
    if args.exp_name in ("", ".", "..") or "/" in args.exp_name or os.sep in args.exp_name or "\0" in args.exp_name:
        raise BadFlag(f"--exp-name must be a plain name, without '/' (it names a directory under runs/; got {args.exp_name!r})")
    if len(os.fsencode(args.exp_name)) > 128:  # a file name holds 255 bytes: the run's adds the env id, seed and time
        raise BadFlag(f"--exp-name must be at most 128 bytes (it names a directory under runs/; got {len(os.fsencode(args.exp_name))})")
    for flag in ("num_steps", "num_seeds", "dim"):
        if getattr(args, flag) <= 0:
            raise BadFlag(f"--{flag.replace('_', '-')} must be positive (got {getattr(args, flag)})")
    if not 0 <= args.seed <= 2**31 - args.num_seeds:  # every script's rule: its runs take seeds --seed, --seed + 1, ...
        raise BadFlag(f"--seed must lie in [0, 2**31 - --num-seeds] = [0, {2**31 - args.num_seeds}] (got {args.seed})")
    for flag in ("init", "noise_std", "switch_step_size"):
        value = getattr(args, flag)
        if value is not None and not math.isfinite(value):
            raise BadFlag(f"--{flag.replace('_', '-')} must be a finite number (got {value})")
    curves = 2 * 8 * len(args.step_sizes) * args.num_seeds * (args.num_steps + 1)  # two float64 arrays
    iterates = 6 * 8 * len(args.step_sizes) * args.num_seeds * args.dim  # x and a step's temporaries, float64
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if curves > memory / 2:
        raise BadFlag(f"--num-steps {args.num_steps} x --num-seeds {args.num_seeds} x {len(args.step_sizes)} step sizes "
                      f"needs {curves / 2**30:.1f} GiB for the curves, more than half of this machine's {memory / 2**30:.0f} GiB")
    if curves + iterates > memory / 2:
        raise BadFlag(f"--dim {args.dim} x --num-seeds {args.num_seeds} x {len(args.step_sizes)} step sizes needs "
                      f"{(curves + iterates) / 2**30:.1f} GiB for the iterates and the curves, more than half of this "
                      f"machine's {memory / 2**30:.0f} GiB")
    if not args.step_sizes or not all(0.0 < eta < 1.0 for eta in args.step_sizes):
        raise BadFlag(f"--step-sizes must each lie in (0, 1), where gradient descent on x^T x converges (got {args.step_sizes})")
    labels = [f"{eta:g}" for eta in args.step_sizes]  # each names a TensorBoard run, eta_<label>
    if len(set(labels)) != len(labels):
        raise BadFlag(f"--step-sizes must differ in their first 6 significant digits, which name their runs (got {args.step_sizes})")
    if args.noise_std is None:
        args.noise_std = 3.0 / np.sqrt(args.dim)
    if args.noise_std < 0:
        raise BadFlag(f"--noise-std must be >= 0 (got {args.noise_std})")
    if max(abs(args.init), args.noise_std) * math.sqrt(args.dim) > 1e150:  # ||x||^2 must not overflow float64
        raise BadFlag(f"--init and --noise-std must be at most 1e150 / sqrt(--dim) (got {args.init:g}, {args.noise_std:g})")
    if not 0 <= args.switch_step < args.num_steps:
        raise BadFlag(f"--switch-step must lie in [0, --num-steps) (got {args.switch_step})")
    if args.switch_step and not 0.0 < args.switch_step_size < 1.0:
        raise BadFlag(f"--switch-step-size must lie in (0, 1) when --switch-step is set (got {args.switch_step_size})")
    if args.switch_step_size and not args.switch_step:
        raise BadFlag("--switch-step-size applies only with --switch-step (the step from which it is used)")
    return args


def parse_command_line():
    """Args from the command line. What tyro cannot read (an unknown flag, a value not of its type) is a BadFlag too,
    one line naming it: tyro draws a box of several lines, whose second row (UTF-8 or ASCII) is its message."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return tyro.cli(Args)
    except SystemExit as e:
        if e.code != 2:  # --help
            raise
        rows = [line.strip(" │") for line in said.getvalue().splitlines() if line.strip(" │-─╭╮╰╯")]
        raise BadFlag(f"{rows[1] if len(rows) > 1 else said.getvalue().strip()}; see --help") from None


if __name__ == "__main__":
    try:
        args = parse_command_line()
        resolve_args(args)
        check_runs_directory()
    except BadFlag as e:
        print(f"{os.path.basename(__file__)}: error: {e}", file=sys.stderr)
        sys.exit(2)
    main(args)
