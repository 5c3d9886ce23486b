"""The stagnation advisor: reads a run's logs and says, stretch by stretch, whether it was improving, plateaued with
large updates (the stagnation paper's plateau), collapsed or levelling off with small updates, and for a stagnated run
what the paper would change, as flags. It never changes a run.

    python benchmark/advise.py grids/com_eps                     # every run of a grid (a launcher's grid or store)
    python benchmark/advise.py runs/CartPole-v1__ppo_ewma_jax__1__1764321234 --json advice.json   # a script's run
    python benchmark/advise.py grids/com_eps/runs/<run> --follow 60   # re-read every minute; a line when the phase changes
    python benchmark/advise.py --tables benchmark/reproduce/claim_2/com_eps_runs.csv.gz ...   # analyze.py's runs.csv
    python benchmark/advise.py --simulate                        # the false-alarm rates of the rule below

The rule (stagnation §3-5; every threshold is a flag, its default justified in docs/advise.md). A run's iterations
are the steps of its per-iteration step-size tag: the KL of the update (`losses/approx_kl`; pqn_atari, noisy_sgd:
the update norm). Its score (`--tag`, else analyze.py's tag for the script) is averaged per iteration. The
iterations are cut into windows of `--window` (the last window ends at the last iteration; wider where the score is
logged less often than every `--window` / 5 iterations, as an evaluation every --eval-every iterations is: 5 scores
a window), and each window is labelled:
- **collapsed**: the policy's entropy below `--collapse-entropy` of the start's and the step below `--collapse-step`
  of the start's (the larger of the first two windows'; a deterministic policy that no longer moves; not the paper's
  plateau);
- **improving** / **declining**: the score's slope, least squares over the window with its interval at `--level`
  widened for the residuals' lag-1 autocorrelation, lies above / below zero;
- otherwise the slope's interval holds zero (flat).
A window's trend changes the run's only when the next `--patience` - 1 windows agree (chance makes one window in 20
look improving or declining at the 5% level); a collapse holds at once, and a run leaving one is flat until a trend
agrees. The first window counts as improving where it rose early: the mean score of each of the next `--patience`
windows above the mean of its first 5 scores (the paper's premature plateau: a rise within the first 20 iterations,
then flat windows, which cannot confirm it). A flat window is then **not improving yet** before the run improved;
**stagnated** (the paper's plateau: the
score stalls while the policy keeps moving) when its step is at least `--large-step` of the median step of the
windows that improved; else **levelling off** (the updates shrank with the score: converged at these settings, or
too strongly regularised). A flat or declining window of a categorical policy whose median entropy is below
`--entropy-floor` nats and whose median KL is at least that entropy is **thrashing** (near deterministic, still taking
large steps). Consecutive windows of a label make a phase. The advice reads the last phase: improving says more steps
should pay only where the slope over the last `--patience` windows lies above zero; thrashing gives a smaller outer
step (`--ewma-com` x `--scale`, or half `--clip-coef`) from the newest checkpoint, never a larger one; stagnated
(or declining with large steps) gives the paper's remedies (§4.4-5): `--num-envs` x `--scale` under
`--scaling-recipe more-minibatches` from the run's own minibatches and learning rate (hybrid where the minibatches
would outnumber the envs) for as many iterations, the DDR that reaches at most, and a smaller outer step from the
newest checkpoint (`--ewma-com` x `--scale`, or half `--clip-coef`; a packed seed's resume is its pack's; for half
`--clip-coef`, the DDR about x4 it gives); noisy_sgd, its step size switched to 1 / `--scale` of it where it first
stagnated (Fig. 3b); levelling off gives the opposite direction; a collapse, a larger `--ent-coef` from the
checkpoint before it. Windows widen where the score is logged less often than a window can fit a slope on (5 scores
each). `--follow` prints each phase change with its remedies.

A script's TensorBoard run named by its path is that run with its own attempts: the run it resumed and the one that
resumed it, as their `hyperparameters` text says (--resume naming a checkpoint of the other, the same flags but the
budget), never another run of the same env, experiment and seed beside it. Every event file's records are checked
as they are read (benchmark/events.py says what counts as damage): a damaged file is named, with what was read of
it, on stderr and in its run's report, which reads its records before the damage; `--on-damage error` exits 1
instead, before any report.
"""
import argparse
import ast
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.signal
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmark.analyze import DEFAULT_TAG  # noqa: E402
from benchmark.common import NON_IDENTITY, SCRIPTS, OneLineParser, cli_args  # noqa: E402
from benchmark.events import read_merged_scalars, read_texts  # noqa: E402
from benchmark.launch import CHECKPOINT, checkpoint_seeds, script_module  # noqa: E402

STEP_TAGS = ("losses/approx_kl", "charts/update_norm_actor", "charts/update_norm")  # the first a run logs
SCORE_TAGS = ("charts/solve_rate", "eval/solve_rate_sampled", "charts/episodic_return", "charts/neg_distance")
EVIDENCE = {"ddr": "charts/ddr", "entropy": "losses/entropy", "update_norm_actor": "charts/update_norm_actor"}
FLAT = ("not improving yet", "stagnated", "levelling off")  # a window whose score's slope interval holds zero
DISCRETE_POLICY = ("ppo_ewma_jax", "ppo_atari_envpool", "ppo_procgen_envpool", "ppo_rnd")  # a categorical policy's entropy


def fail(message):
    print(f"advise.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------
# The rule: windows, their slopes, their labels, the phases
# ---------------------------------------------------------------------------------------------
def slope_interval(y, level):
    """(slope per iteration, low, high) of least squares over a window's per-iteration scores (NaN: no score that
    iteration); the interval's standard error is widened by sqrt((1 + r) / (1 - r)) and its degrees of freedom cut to
    n (1 - r) / (1 + r) - 2 for the residuals' lag-1 autocorrelation r (clipped to [0, 0.9]): a return curve's
    iterations are not independent. None with fewer than 5 scores."""
    x = np.flatnonzero(np.isfinite(y)).astype(np.float64)
    y = y[np.isfinite(y)]
    if len(y) < 5:
        return None
    xc = x - x.mean()
    b = float(xc @ (y - y.mean()) / (xc @ xc))
    e = y - y.mean() - b * xc
    r = float(np.clip(np.corrcoef(e[:-1], e[1:])[0, 1], 0.0, 0.9)) if e[:-1].std() > 0 and e[1:].std() > 0 else 0.0
    se = math.sqrt(e @ e / (len(y) - 2) / (xc @ xc)) * math.sqrt((1 + r) / (1 - r))
    dof = max(2.0, len(y) * (1 - r) / (1 + r) - 2)
    q = float(scipy.stats.t.ppf(0.5 + level / 2, dof))
    return b, b - q * se, b + q * se


@dataclass
class Window:
    start: int  # iteration indices [start, stop)
    stop: int
    slope: tuple  # slope_interval's, or None
    step: float  # median step size (KL of the update)
    entropy: float  # median entropy
    scores: np.ndarray = None  # the window's per-iteration scores
    label: str = ""


def window_edges(n, size):
    """Windows of `size` iterations over n, the last ending at the last iteration (the first takes the rest)."""
    count = max(1, n // size)
    return [0] + [n - size * i for i in range(count - 1, 0, -1)] + [n]


def window_of(run, opts):
    """opts.window iterations, or the fewest more for which every window holds 5 scores, the fewest a window's slope
    is fitted on, where the score is logged less often (an evaluation every --eval-every iterations; episodes that
    outlast iterations). The whole run where no size does."""
    scored, n = np.concatenate([[0], np.cumsum(np.isfinite(run["score"]))]), len(run["score"])
    for size in range(opts.window, n + 1):
        counts = np.diff(scored[window_edges(n, size)])
        if counts.min() >= 5:
            return size
    return max(opts.window, n)


def windows_of(run, opts):
    """The run's windows of window_of's iterations, the last ending at its last iteration (the first takes the rest)."""
    edges = window_edges(len(run["step"]), window_of(run, opts))
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        entropy = run["entropy"][a:b] if run["entropy"] is not None else np.array([np.nan])
        out.append(Window(a, b, slope_interval(run["score"][a:b], opts.level), float(np.nanmedian(run["step"][a:b])),
                          float(np.nanmedian(entropy)) if np.isfinite(entropy).any() else np.nan, run["score"][a:b]))
    return out


def trend_holds(scores, trend, opts):
    """A new trend the windows agree on must hold over their scores together too (two windows that rise each and
    fall between them are no improvement)."""
    if trend not in ("improving", "declining"):
        return True
    s = slope_interval(scores, opts.level)
    return s is not None and (s[1] > 0 if trend == "improving" else s[2] < 0)


def label_windows(windows, opts, discrete=False):
    """Each window's label, in order (the rule in this file's docstring). First each window's own trend: collapsed,
    improving, declining or flat. A change of trend holds only where the next `--patience` - 1 windows agree (one window
    of a new trend at the 5% level is what chance gives a run once in 20 windows) and the slope over them together
    agrees, the run's first trend included; a collapse, read from entropy and step thresholds against the larger of the
    first two windows', not a test, holds at once, and a window out of it is flat until a trend is agreed. The first
    window is improving too where it rose early (rose_early: the paper's premature plateau). Then a flat window is not
    improving yet before any window improved, else stagnated or levelling off by its step; a flat or declining window
    of a near-deterministic policy taking large steps is thrashing (`discrete`: where the step is a categorical
    policy's KL)."""
    entropy0 = max((w.entropy for w in windows[:2]), default=np.nan)  # the start: the larger of the first two windows'
    step0 = max(w.step for w in windows[:2])
    raw = []
    for w in windows:
        if (np.isfinite(w.entropy) and np.isfinite(entropy0) and w.entropy < opts.collapse_entropy * entropy0
                and w.step < opts.collapse_step * step0):
            raw.append("collapsed")
        elif w.slope is None:
            raw.append("no score")
        else:
            raw.append("improving" if w.slope[1] > 0 else "declining" if w.slope[2] < 0 else "flat")
    current, improved_steps = "flat", []  # a run starts flat: its first trend needs confirming like any other
    for i, w in enumerate(windows):
        ahead = raw[i:i + opts.patience]
        agreed = len(ahead) == opts.patience and len(set(ahead)) == 1 and \
            trend_holds(np.concatenate([v.scores for v in windows[i:i + opts.patience]]), raw[i], opts)
        if raw[i] != current and (raw[i] == "collapsed" or agreed):
            current = raw[i]
        elif current == "collapsed" and raw[i] != "collapsed":  # out of a collapse, a new trend needs its patience too
            current = "flat"
        if i == 0 and current == "flat" and raw[0] not in ("collapsed", "no score") and rose_early(windows, opts):
            current = "improving"  # the paper's premature plateau begins so: a rise the flat windows after cannot confirm
        if current == "improving":
            improved_steps.append(w.step)
        if current != "flat":
            w.label = current
        elif not improved_steps:
            w.label = "not improving yet"
        else:
            w.label = "stagnated" if w.step >= opts.large_step * float(np.median(improved_steps)) else "levelling off"
        if discrete and w.label in FLAT + ("declining",) and thrashing(w, opts):
            w.label = "thrashing"
    return windows


def rose_early(windows, opts):
    """The stagnation paper's premature plateau begins so: a rise within the first window (its first 20 iterations or
    fewer), then flat windows, which cannot confirm it as `--patience` asks. The first window rose early when the mean
    score of each of the next `--patience` windows lies above the mean of its first 5 scores (the run's start) at
    `--level` (one-sided; the standard error from that window's residuals about its line, widened for their lag-1
    autocorrelation as a slope's is)."""
    start = windows[0].scores[np.isfinite(windows[0].scores)][:5]
    after = windows[1:1 + opts.patience]
    if len(start) < 5 or len(after) < opts.patience:
        return False
    for w in after:
        y = w.scores[np.isfinite(w.scores)]
        if len(y) < 5:
            return False
        x = np.arange(len(y)) - (len(y) - 1) / 2
        e = y - y.mean() - (x @ (y - y.mean()) / (x @ x)) * x
        r = float(np.clip(np.corrcoef(e[:-1], e[1:])[0, 1], 0.0, 0.9)) if e[:-1].std() > 0 and e[1:].std() > 0 else 0.0
        se = math.sqrt(e @ e / (len(y) - 2)) * math.sqrt((1 + r) / (1 - r)) * math.sqrt(1 / len(start) + 1 / len(y))
        q = float(scipy.stats.t.ppf(0.5 + opts.level / 2, max(2.0, len(y) * (1 - r) / (1 + r) - 2)))
        if not y.mean() - start.mean() > q * se:
            return False
    return True


def thrashing(w, opts):
    """A near-deterministic policy still taking large steps: the window's median entropy below `--entropy-floor`
    nats and its median KL at least that entropy (each update moves the policy by more than all its uncertainty)."""
    return np.isfinite(w.entropy) and w.entropy < opts.entropy_floor and np.isfinite(w.step) and w.step >= w.entropy


def read_run(run, opts):
    """(the run's labelled windows, its phases). Thrashing is read where the step is a KL and the policy discrete (a
    Gaussian policy's entropy is differential, negative where its SD is small: no floor in nats holds for it)."""
    discrete = run["step_tag"] == "losses/approx_kl" and run["script"] in DISCRETE_POLICY
    windows = label_windows(windows_of(run, opts), opts, discrete)
    return windows, phases_of(run, windows, opts)


@dataclass
class Phase:
    label: str
    iterations: tuple  # first and last iteration (1-based)
    steps: tuple  # environment steps (or gradient steps) at them
    slope_per_million: tuple  # the phase's score slope per 1M steps and its interval (None: too few scores)
    evidence: dict = field(default_factory=dict)  # medians of the step size, DDR, actor update norm; mean entropy


def phases_of(run, windows, opts):
    """Consecutive windows of one label as phases, each with its slope refitted over the phase and its evidence. A
    flat phase (stagnated, levelling off, not improving yet) whose refitted slope (more scores, a narrower interval)
    lies above zero improved after all, too slowly for its windows to show (docs/advise.md: a rise of 2 noise SDs a window reads as flat half
    the time), and merges with its improving neighbours. A phase not improving yet after such a phase is read as a flat
    window after an improving one is: stagnated or levelling off by its step against the improving phases'."""
    spans, i = [], 0
    while i < len(windows):
        j = i
        while j + 1 < len(windows) and windows[j + 1].label == windows[i].label:
            j += 1
        a, b, label = windows[i].start, windows[j].stop, windows[i].label
        s = slope_interval(run["score"][a:b], opts.level)
        if s and label in FLAT and s[1] > 0:  # a rise too slow for its windows
            label = "improving"
        improved = [run["step"][x:y] for x, y, earlier in spans if earlier == "improving"]
        if label == "not improving yet" and improved:  # it improved before all: a rise only the refit above found
            big = np.nanmedian(run["step"][a:b]) >= opts.large_step * np.nanmedian(np.concatenate(improved))
            label = "stagnated" if big else "levelling off"
        if spans and spans[-1][2] == label:
            spans[-1] = (spans[-1][0], b, label)
        else:
            spans.append((a, b, label))
        i = j + 1
    out = []
    for a, b, label in spans:
        s = slope_interval(run["score"][a:b], opts.level)
        per = 1e6 / run["batch"] if run["batch"] else float("nan")
        evidence = {run["step_tag"]: float(np.nanmedian(run["step"][a:b]))}
        for name, values in run["evidence"].items():
            if values is not None and np.isfinite(values[a:b]).any():
                evidence[EVIDENCE[name]] = float(np.nanmean(values[a:b]) if name == "entropy" else np.nanmedian(values[a:b]))
        out.append(Phase(label, (a + 1, b), (int(run["steps"][a]), int(run["steps"][b - 1])),
                         tuple(v * per for v in s) if s else None, evidence))
    return out


# ---------------------------------------------------------------------------------------------
# The advice: the paper's remedies as flags
# ---------------------------------------------------------------------------------------------
def advise(run, windows, phases, opts):
    """(what the last phase means, [remedies: {what, flags, new_run, command}]). "The end" of an improving phase is
    its last `--patience` windows: a phase's refit over all its iterations can lie above zero from an early rise alone."""
    last, k, flags = phases[-1], opts.scale, run["flags"]
    if last.label == "improving":
        a = windows[-min(opts.patience, len(windows))].start
        end = slope_interval(run["score"][a:], opts.level)
        if end is not None and end[1] > 0:
            return "still improving at the end: more steps should pay", []
        per = 1e6 / run["batch"] if run["batch"] else float("nan")
        shown = f"[{end[1] * per:+.3g}, {end[2] * per:+.3g}] per 1M steps" if end else "no slope"
        unit = "points" if run["points"] else "iterations"  # a downsampled table's phases are in its points
        return (f"improving over {unit} {last.iterations[0]}-{last.iterations[1]} as a whole, but not over its last "
                f"windows ({unit} {a + 1}-{len(run['step'])}: slope {shown}): more steps are not shown to pay; "
                "nothing to advise"), []
    if last.label in ("not improving yet", "no score"):
        return f"{last.label}: nothing to advise", []
    com, clip, ent = flags.get("ewma_com"), flags.get("clip_coef"), flags.get("ent_coef")
    ewma = isinstance(com, (int, float)) and com > 0
    improved = improving_step(phases)
    if last.label == "collapsed":
        before = [c for c in run["checkpoints"] if c[0] < script_iteration(run, last.iterations[0])]
        remedies = [{"what": "a larger entropy bonus from the newest checkpoint before the collapse",
                     "flags": {"--ent-coef": 2 * ent if ent else 0.01}, "new_run": False,
                     "checkpoint": before[-1] if before else None}]
        return ("collapsed: the policy is near deterministic and no longer moves (entropy and KL near zero). Not the "
                "stagnation paper's plateau (it sets collapse aside, §1): more envs do not address it, and a larger outer "
                "step pushes further into it (claim 3's collapses came at the weakest regularisation, COM 8)"), \
            with_commands(run, remedies)
    if last.label == "thrashing":
        entropy = last.evidence.get("losses/entropy", float("nan"))
        newest = run["checkpoints"][-1] if run["checkpoints"] else None
        remedies = [smaller_step(run, last, opts, newest)] if ewma or isinstance(clip, float) else []
        return (f"thrashing: the policy is near deterministic (entropy {entropy:.3g} nats) yet each update moves it by a "
                f"KL of {last.evidence[run['step_tag']]:.3g}, more than its entropy: the step is too large for it. A "
                "smaller outer step (a higher COM, a smaller clip) is the remedy, never a larger one; more envs under "
                "more-minibatches take more minibatch steps and move it further"), with_commands(run, remedies)
    if last.label == "declining" and improved is None:
        return "declining, and never improved: nothing the outer step explains; check the environment and the flags", []
    big = last.label == "stagnated" or (last.label == "declining" and last.evidence[run["step_tag"]] >= opts.large_step * improved)
    remedies, newest = [], run["checkpoints"][-1] if run["checkpoints"] else None
    if big:
        meaning = ("stagnated: the score stalls while each update moves the policy as far as while it improved (the "
                   "stagnation paper's plateau: the outer step is too large for the noise of its batch)")
        n, m = flags.get("num_envs"), flags.get("num_minibatches")
        mb, steps = flags.get("minibatch_size"), flags.get("num_steps")
        if m is None and all(isinstance(v, int) and v > 0 for v in (n, mb, steps)) and n * steps % mb == 0:
            m = n * steps // mb  # a run named by its minibatch size (analyze.py's tables: the flags its name shows)
        if isinstance(n, int) and isinstance(m, int) and n > 0 and m > 0:
            # from the run as it trained (its resolved envs, minibatches and learning rate): its inner loop, kept
            scaled = {"--num-envs": n * k, "--base-num-envs": n, "--base-num-minibatches": m}
            if m > n:  # more minibatches than envs: hybrid (App. D, a * b = k), b-times bigger minibatches: the
                # smallest divisor b of k (k / b x M0 minibatches, a whole number) with no more minibatches than envs
                b = next((d for d in range(1, k + 1) if k % d == 0 and d >= m / n), k)
                scaled.update({"--scaling-recipe": "hybrid", "--hybrid-minibatch-factor": b})
            else:
                scaled["--scaling-recipe"] = "more-minibatches"
            if isinstance(flags.get("learning_rate"), float):
                scaled["--learning-rate"] = flags["learning_rate"]
            if isinstance(flags.get("total_timesteps"), int):  # the run's iterations, each with k times the data
                scaled["--total-timesteps"] = flags["total_timesteps"] * k
            ddr = last.evidence.get("charts/ddr")
            remedies.append({"what": f"{k}x the envs, the inner loop kept (stagnation §5), as many iterations"
                                     + (f": DDR up to about {ddr * k:,.0f} (now {ddr:,.0f}; as much only if the KL of an "
                                        "update stays where the clip or COM holds it)" if ddr else ""),
                             "flags": scaled, "new_run": True})
        if run["script"] == "noisy_sgd":  # its step size (a sub-run eta_<x>) switched to x / k where it first stalled
            remedies += switched_step_size(run, phases, last, k)
        if ewma or isinstance(clip, float):
            remedies.append(smaller_step(run, last, opts, newest))
    else:
        meaning = ("levelling off: the updates shrank with the score (converged at these settings, or too strongly "
                   "regularised: a high DDR learns slowly, stagnation §4.4)")
        if run["annealed"]:
            return meaning + ("; but the learning rate was annealed to under half its start, which shrinks the updates "
                              "too: the two cannot be told apart here"), []
        if ewma:  # a COM not below 1; PPO: a clip below 0.5 doubled
            step = {"--ewma-com": com / k} if com / k >= 1 else None
        else:
            step = {"--clip-coef": clip * 2} if isinstance(clip, float) and clip < 0.5 else None
        if step:
            remedies.append({"what": "if the score is below what you expect: a larger outer step from the newest checkpoint",
                             "flags": step, "new_run": False, "checkpoint": newest})
    return meaning, with_commands(run, remedies)


def smaller_step(run, last, opts, newest):
    """The paper's smaller outer step from the newest checkpoint (§3, Fig. 3a): `--ewma-com` x `--scale` (PPO-EWMA),
    else half `--clip-coef`, with the DDR it should give. An update's KL held at the clip grows about as epsilon
    squared (half of it cut the KL 3.6-4.9x on the epsilon grid, docs/advise.md); a COM's KL is not predicted so
    (claim 4: COM x32 cut it ~13x)."""
    com, clip, k = run["flags"].get("ewma_com"), run["flags"].get("clip_coef"), opts.scale
    ewma = isinstance(com, (int, float)) and com > 0
    ddr = last.evidence.get("charts/ddr")
    if ewma:
        expected = ((f": DDR above {ddr:,.0f}, by how much not predicted" if ddr else ": DDR not predicted")
                    + " (a COM's KL has no formula: claim 4's COM 8 -> 256 cut it about 13x)")
    elif ddr:
        expected = (f": DDR about {4 * ddr:,.0f} (now {ddr:,.0f}; an update's KL at the clip grows about as "
                    "epsilon squared: measured at epsilon 0.8 -> 0.4, 3.6-4.9x)")
    else:
        expected = ""
    return {"what": "a smaller outer step from the newest checkpoint (stagnation §3, Fig. 3a)" + expected,
            "flags": {"--ewma-com": com * k} if ewma else {"--clip-coef": clip / 2}, "new_run": False, "checkpoint": newest}


def switched_step_size(run, phases, last, k):
    """noisy_sgd's remedy (stagnation Fig. 3b: a curve moves to the new step size's plateau): a new run of the
    sub-run's step size (its name, eta_<x>) switched to x / k at the gradient step where it first stagnated."""
    label = run["name"].rsplit("/eta_", 1)[-1] if "/eta_" in run["name"] else ""
    try:
        eta = float(label)
    except ValueError:  # eta_<a>_to_<b>: switched once already (the script switches once), or a name of another kind
        return [{"what": "a smaller step size", "flags": {}, "new_run": True,
                 "note": f"{run['name']} is no run of one step size (eta_<x>): the script switches a run's step size once"}]
    stalled = next((p for p in phases if p.label == "stagnated"), last)
    return [{"what": "a smaller step size from where it first stagnated (stagnation Fig. 3b: the curve moves to the "
                     "new step size's plateau), a new run of this step size",
             "flags": {"--step-sizes": eta, "--switch-step": stalled.steps[0], "--switch-step-size": eta / k},
             "new_run": True}]


def script_iteration(run, i):
    """The script's own count (a checkpoint's iter_<n>) of the run's i-th logged iteration (from 1): a run resumed from
    another run's checkpoint logs its iterations from there on (its steps go on from the checkpoint's)."""
    return int(round(run["steps"][i - 1] / run["batch"])) if run["batch"] else i


def improving_step(phases):
    steps = [p.evidence[next(iter(p.evidence))] for p in phases if p.label == "improving"]
    return float(np.median(steps)) if steps else None


# what a recipe sets (the scripts refuse them beside --scaling-recipe) and what a remedy's run replaces
SET_BY_RECIPE = ("--num-minibatches", "--minibatch-size", "--hybrid-minibatch-factor", "--learning-rate", "--resume",
                 "--total-timesteps")


def with_commands(run, remedies):
    """Each remedy's command line: the run's own flags (the launcher's command.json, else command_of_hyperparameters')
    with the remedy's, quoted for a shell; a new run drops what its recipe sets; a resume names its checkpoint and, where that is the run's last
    iteration, twice the run's steps (a finished run's checkpoint resumes only with steps left); a packed run's resume is
    its pack's (the first run's flags, --num-seeds: its checkpoint holds every seed of the pack). None where the run's
    flags are unknown, or a resume has no checkpoint (then `note` says so)."""
    for remedy in remedies:
        checkpoint, remedy["command"] = remedy.pop("checkpoint", None), None  # (iteration, path)
        if not remedy["new_run"] and checkpoint is None:
            remedy["note"] = "no checkpoint to resume: rerun with --save-every to have one"
        packed = run["pack"] is not None and not remedy["new_run"]
        own = run["pack"][1] if packed else run["argv"]
        if packed and own is None and not remedy.get("note"):
            remedy["note"] = f"its checkpoint is its pack's, whose first run ({run['pack'][0]}) has no readable command"
        if own is None or remedy.get("note"):
            continue
        finished = not remedy["new_run"] and checkpoint[0] >= script_iteration(run, len(run["step"]))
        drop = set(remedy["flags"]) | (set(SET_BY_RECIPE) if remedy["new_run"] else  # a pack's --num-seeds: below
                                       {"--resume"} | ({"--num-seeds"} if packed else set()) |
                                       ({"--total-timesteps"} if finished else set()))
        argv, i = [], 0
        while i < len(own):
            flag = own[i]
            values = 1
            while i + values < len(own) and not own[i + values].startswith("--"):
                values += 1
            if flag not in drop:
                argv += own[i:i + values]
            i += values
        argv += [x for flag, value in remedy["flags"].items() for x in (flag, flag_value(value))]
        if packed:
            first, _, size = run["pack"]
            argv += ["--num-seeds", str(size)]
            remedy["note"] = (f"its checkpoint is its pack's ({size} seeds trained in one process, the first {first}): "
                              f"the resume takes all {size} back to it and continues them with the new flag")
        if not remedy["new_run"]:
            argv += ["--resume", str(checkpoint[1])]
            if finished:
                argv += ["--total-timesteps", str(2 * int(run["steps"][-1]))]
        remedy["command"] = shlex.join(["python", f"cleanrl_scale/{run['script']}.py", *argv])
    return remedies


# ---------------------------------------------------------------------------------------------
# Reading runs: a launcher's run directories, a script's TensorBoard runs, analyze.py's runs.csv
# ---------------------------------------------------------------------------------------------
def per_iteration(grid, steps, values):
    """The mean of the values logged in each iteration (step in (grid[i-1], grid[i]]); NaN where none was."""
    at = np.searchsorted(grid, steps, side="left")
    keep = at < len(grid)
    sums = np.bincount(at[keep], values[keep], len(grid))
    counts = np.bincount(at[keep], minlength=len(grid))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def make_run(name, script, series, flags, argv, checkpoints, tag, pack=None):
    """A run as the rule reads it, from {tag: (steps, values)}; a string saying why not, if it cannot be read.
    `checkpoints`: [(iteration, path)], oldest first; `pack`: (its pack's first run, its argv, the pack's size) where
    one process trained its seed with others (the checkpoints are then the pack's)."""
    step_tag = next((t for t in STEP_TAGS if t in series and len(series[t][0]) >= 2), None)
    if step_tag is None:
        return f"{name}: logs none of {', '.join(STEP_TAGS)} (the size of each update) at two iterations or more"
    if len(np.unique(series[step_tag][0])) != len(series[step_tag][0]):
        return f"{name}: logs {step_tag} twice at one step (two runs in one directory, or a restarted one): read apart"
    if tag is None:  # analyze.py's tag for the script where the run logs it, else the first score tag it logs
        default = DEFAULT_TAG.get(script)
        tag = default if default in series else next((t for t in SCORE_TAGS if t in series), None)
    if tag is None or tag not in series:
        return f"{name}: logs no score tag ({tag or ', '.join(SCORE_TAGS)})"
    order = np.argsort(series[step_tag][0], kind="stable")
    grid, step = series[step_tag][0][order].astype(np.int64), series[step_tag][1][order]
    lr = series.get("charts/learning_rate")
    annealed = lr is not None and len(lr[1]) > 1 and lr[1][np.argmax(lr[0])] < 0.5 * lr[1][np.argmin(lr[0])]
    return {"name": name, "script": script, "tag": tag, "step_tag": step_tag, "steps": grid, "step": step, "annealed": annealed,
            "batch": float(np.median(np.diff(grid))) if len(grid) > 1 else 0.0,
            "score": per_iteration(grid, *series[tag]),
            "entropy": per_iteration(grid, *series["losses/entropy"]) if "losses/entropy" in series else None,
            "evidence": {name_: per_iteration(grid, *series[t]) if t in series else None for name_, t in EVIDENCE.items()},
            "flags": flags, "argv": argv, "checkpoints": checkpoints, "pack": pack, "damaged": [],
            "iterations": len(step), "points": None}  # points: a downsampled table's (--tables), one an iteration here


def parse_hyperparameters(texts):
    """The flags a script logged as its `hyperparameters` text (a |param|value| table of its Args; TensorBoard's reader
    names it hyperparameters/text_summary, the text plugin's tag), numbers as numbers."""
    text = texts.get("hyperparameters") or texts.get("hyperparameters/text_summary") or [""]
    flags = {}
    for key, value in (c for c in (line.strip().strip("|").split("|") for line in text[-1].splitlines()[2:]) if len(c) == 2):
        for parse in (int, float):
            try:
                flags[key] = parse(value)
                break
            except ValueError:
                flags[key] = {"True": True, "False": False, "None": None}.get(value, value)
    return flags


# a script's Args fields it fills in itself (it refuses them set), and those whose default lets the device choose (a
# resume may run on another one)
COMPUTED, BY_DEVICE = ("batch_size", "num_iterations", "num_devices"), ("fuse_iterations", "unroll")


def command_of_hyperparameters(texts, script):
    """A script's own run's flags as a command line, from its `hyperparameters` text (its Args after its flag checks):
    every field whose value differs from the script's default (its Args()), as tyro takes it (--x / --no-x for a bool,
    a tuple's items in turn); not the fields the script fills in or the device chooses; under a scaling recipe the base
    learning rate (the logged one is scaled) and not the minibatches the recipe sets. None without the text."""
    flags = parse_hyperparameters(texts)
    if not flags or not (SCRIPTS / f"{script}.py").exists():
        return None
    defaults = vars(cli_args(script_module(script))())
    recipe = flags.get("scaling_recipe", "none")
    skip = set(COMPUTED) | set(BY_DEVICE) | ({"num_minibatches", "minibatch_size"} if recipe != "none" else set())
    if recipe != "none" and isinstance(flags.get("learning_rate"), float):  # resolve_recipe's lr0 x factor, undone
        k = flags["num_envs"] / flags["base_num_envs"]
        factor = {"bigger-minibatch-sqrt-lr": k ** 0.5, "hybrid": flags.get("hybrid_minibatch_factor", 1) ** 0.5}
        flags["learning_rate"] = float(f"{flags['learning_rate'] / factor.get(recipe, 1.0):.12g}")
    argv = []
    for key, value in flags.items():
        if isinstance(defaults.get(key), tuple) and isinstance(value, str):  # a tuple logged as "(0.01, 0.2)"
            value = tuple(ast.literal_eval(value))
        if key in skip or value is None or key in defaults and value == defaults[key]:
            continue
        name = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(name if value else f"--no-{key.replace('_', '-')}")
        else:
            argv += [name, *(flag_value(v) for v in (value if isinstance(value, tuple) else (value,)))]
    return argv


def wanted_tags(tag):
    return set(STEP_TAGS) | set(SCORE_TAGS) | set(EVIDENCE.values()) | {"losses/entropy", "charts/learning_rate"} | \
        ({tag} if tag else set())


def checkpoints_in(directory):
    """[(iteration, path)] of the checkpoints under a directory, oldest first (launch.py's names: no partial file)."""
    found = [(int(m[1]), p) for p in directory.glob("**/checkpoints/*") if (m := CHECKPOINT.fullmatch(p.name))]
    return sorted(found)


def read_launched(run_dir, tag, damaged):
    """The runs of one launcher run directory (command.json): one per sub-run (noisy_sgd's step sizes). `damaged`:
    a list that receives the Damage of its damaged event files (events.read_merged_scalars), each also named in the
    run of its sub-run."""
    run_dir = run_dir.resolve()  # a grid's runs/<name> link: its pack's other runs lie beside it in the store
    try:
        command = json.loads((run_dir / "command.json").read_text())
        script, flags, argv = command["script"], command.get("resolved", {}), command.get("argv")
    except (ValueError, KeyError, TypeError) as e:
        return [f"{run_dir}: its command.json cannot be read ({type(e).__name__}: {e})"]
    # while a pack trains, every seed's TensorBoard run lies in its first run's directory: this run's seed's alone
    by_seed = {}
    for d in (run_dir / "runs").glob("*__*__*"):
        by_seed.setdefault(d.name.rsplit("__", 2)[1], set()).add(d.name)
    own = by_seed.get(str(command.get("seed"))) if len(by_seed) > 1 else None
    found = []
    merged, _ = read_merged_scalars(run_dir, wanted_tags(tag), only=own, damaged=found)
    checkpoints, pack = pack_of(run_dir, argv)
    damaged += found
    return with_damage({sub: make_run(run_dir.name + (f"/{sub}" if sub else ""), script, series, flags, argv, checkpoints,
                                      tag, pack) for sub, series in sorted(merged.items())}, found)


def with_damage(runs, found):
    """The runs ({sub-run: run}) as a list, each run naming the damaged event files of its sub-run (and those of a
    sub-run no run was read from: they are its run's too)."""
    for sub, run in runs.items():
        if isinstance(run, dict):
            run["damaged"] = [str(d) for d in found if d.subrun == sub or d.subrun not in runs]
    return list(runs.values())


def pack_of(run_dir, argv):
    """(checkpoints, pack) of a launched run: where one process trained its seed with others (launch.py's pack,
    --num-seeds) the checkpoints are the pack's, in its first run, and pack is (that run's name, its argv, the seeds
    a checkpoint holds); else its own checkpoints and None. The seeds are read from the newest checkpoint (what the
    script checks on resume), else from the record the launcher leaves when the pack ends."""
    members = None
    for name in ("done.json", "preempted.json", "failed.json"):
        try:
            members = members or json.loads((run_dir / name).read_text()).get("pack")
        except (OSError, ValueError, AttributeError):
            pass
    first, first_argv = run_dir, argv
    if members and members[0] != run_dir.name:
        first = run_dir.parent / members[0]
        try:
            first_argv = json.loads((first / "command.json").read_text()).get("argv")
        except (OSError, ValueError, AttributeError):
            first_argv = None
    checkpoints = checkpoints_in(first) if first.is_dir() else []
    try:
        held = checkpoint_seeds(checkpoints[-1][1]) if checkpoints else 1
    except Exception:  # unreadable (truncated, a zip or pickle error, being written): the launcher's record says
        held = len(members) if members else 1
    return checkpoints, ((first.name, first_argv, held) if held > 1 else None)


# what a resume may change and still continue the run it resumes: its budget, and what changes nothing it learns
RESUME_MAY_CHANGE = {"resume", "total_timesteps"}


def stem_of(name):
    """A script's TensorBoard run's name without its time stamp (`<env>__<exp>__<seed>__<time>`: a resume writes a
    new one), or the name."""
    head, _, stamp = name.rpartition("__")
    return head if head and stamp.isdigit() else name


def hyperparameters_of(tb_run):
    """{tag: [text]} of the `hyperparameters` text a script's TensorBoard run logs (parse_hyperparameters reads it)."""
    texts = {}
    for file in sorted(tb_run.rglob("events.out.tfevents.*")):
        for tag, found in read_texts(file, ("hyperparameters", "hyperparameters/text_summary")).items():
            texts.setdefault(tag, []).extend(found)
    return texts


def resume_links(tb_run):
    """{each TensorBoard run beside tb_run of its env, experiment and seed: the one of them it continues, or None}.
    B continues A when B's `hyperparameters` text says B resumed (--resume) a checkpoint of A (runs/A/checkpoints/;
    a pack's checkpoint lies in its first seed's run: A is then the run of B's seed with that run's time stamp) and
    B ran with A's flags but for those a resume may change (its budget, and NON_IDENTITY's, which change nothing it
    learns). Runs that only share the name's stem (one command run twice) do not continue each other, nor does a run
    resumed from another's checkpoint with other flags (claim 4's arms): each is a run of its own."""
    stem = stem_of(tb_run.name)
    same = [d for d in tb_run.parent.iterdir() if d.is_dir() and stem_of(d.name) == stem]
    if len(same) < 2:
        return {tb_run: None}
    flags = {d: parse_hyperparameters(hyperparameters_of(d)) for d in same}
    free = RESUME_MAY_CHANGE | set(NON_IDENTITY) | set(COMPUTED)
    links = {}
    for d in same:
        links[d], resume = None, flags[d].get("resume")
        if not isinstance(resume, str) or not resume:
            continue
        checkpoint = Path(resume) if Path(resume).is_absolute() else tb_run.parent.parent / resume  # the script's cwd
        origin = checkpoint.parent.parent
        if checkpoint.parent.name != "checkpoints" or origin.parent.resolve() != tb_run.parent.resolve():
            continue  # a checkpoint of no run beside it
        head, _, stamp = origin.name.rpartition("__")
        parent = tb_run.parent / f"{stem}__{stamp}"
        if head.rpartition("__")[0] != stem.rpartition("__")[0] or parent not in flags or parent == d:
            continue  # (head and stem without their seeds: the same env and experiment)
        if flags[parent] and any(flags[d].get(k) != flags[parent].get(k) for k in set(flags[d]) | set(flags[parent])
                                 if k not in free):
            continue
        links[d] = parent
    return links


def attempts_of(tb_run):
    """The TensorBoard runs of the run `tb_run` is an attempt of, oldest first: back through the runs it continues
    and forward through the one that continues it (resume_links), where one alone does (two resumed from one attempt
    are two runs, each read with the attempts before it)."""
    links, chain = resume_links(tb_run), [tb_run]
    while links.get(chain[0]) is not None and links[chain[0]] not in chain:
        chain.insert(0, links[chain[0]])
    while len(after := [d for d, parent in links.items() if parent == chain[-1] and d not in chain]) == 1:
        chain.append(after[0])
    return chain


def read_tensorboard(tb_run, tag, damaged):
    """The runs of one of a script's TensorBoard runs (runs/<name>) and its attempts (attempts_of), merged as a
    launched run's are: its flags from its newest attempt's hyperparameters text. `damaged`: as read_launched's."""
    attempts = attempts_of(tb_run)
    tb_run = attempts[-1]
    found = []
    merged, _ = read_merged_scalars(tb_run.parent.parent, wanted_tags(tag), only={d.name for d in attempts}, damaged=found)
    damaged += found
    texts = hyperparameters_of(tb_run)
    flags = parse_hyperparameters(texts)
    # the script: its exp_name (the scripts' default), else the part of the run's name that names one
    names = [str(flags.get("exp_name") or "")] + tb_run.name.split("__")
    script = next((n for n in names if (SCRIPTS / f"{n}.py").exists()), "")
    checkpoints = sorted(c for d in attempts for c in checkpoints_in(d))
    argv = command_of_hyperparameters(texts, script) if script else None
    return with_damage({sub: make_run(tb_run.name + (f"/{sub}" if sub else ""), script, series, flags, argv, checkpoints,
                                      tag) for sub, series in sorted(merged.items())}, found)


def read_paths(paths, tag, damaged):
    """Every run under the paths: a launcher's run directory, a grid or store (runs/*/command.json), a script's
    TensorBoard run (runs/<name>, its event files inside: that run and its attempts, attempts_of), or a working
    directory holding such runs/. `damaged`: a list that receives the Damage of every damaged event file read."""
    runs = []
    for path in paths:
        if (path / "command.json").exists():
            runs += read_launched(path, tag, damaged)
        elif list((path / "runs").glob("*/command.json")):
            for d in sorted(p.parent for p in (path / "runs").glob("*/command.json")):
                runs += read_launched(d.resolve(), tag, damaged)
        elif path.parent.name == "runs" and list(path.rglob("events.out.tfevents.*")):
            runs += read_tensorboard(path, tag, damaged)
        elif (path / "runs").is_dir() and list((path / "runs").rglob("events.out.tfevents.*")):
            chains = {tuple(attempts_of(d)) for d in (path / "runs").iterdir() if d.is_dir()}
            # each run once, with its attempts: an attempt that two runs resumed is read with each, not alone
            for chain in sorted((c for c in chains if not any(len(o) > len(c) and o[:len(c)] == c for o in chains)),
                                key=lambda c: c[-1].name):
                runs += read_tensorboard(chain[-1], tag, damaged)
        else:
            runs.append(f"{path}: no run (no command.json, no runs/ with event files)")
    return runs


def read_tables(files, tag):
    """The runs of analyze.py runs.csv tables (its downsampled curves; several files of one grid merge by run)."""
    frames = []
    for f in files:
        try:
            frame = pd.read_csv(f)
        except (ValueError, OSError, UnicodeDecodeError) as e:  # pandas' parser errors are ValueErrors
            fail(f"--tables {f}: not a CSV table ({type(e).__name__}: {e})")
        missing = {"run", "subrun", "tag", "x", "value"} - set(frame.columns)
        if missing:
            fail(f"--tables {f}: not analyze.py's runs.csv (no column {', '.join(sorted(missing))})")
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    frame["subrun"] = frame["subrun"].fillna("")
    runs = []
    for (run, sub), rows in frame.groupby(["run", "subrun"], sort=True):
        series = {t: (r["x"].to_numpy(np.int64), r["value"].to_numpy(np.float64)) for t, r in rows.groupby("tag")}
        # the flags the run's name shows, read as the hyperparameters text is
        table = "\n".join(["", ""] + [f"|{k.replace('-', '_')}|{v}|" for k, v in
                                       (part.split("=", 1) for part in str(run).split("__") if "=" in part)])
        flags = parse_hyperparameters({"hyperparameters": [table]})
        read = make_run(str(run) + (f"/{sub}" if sub else ""), str(run).split("/")[-1].split("__")[0], series, flags,
                        None, [], tag)
        if isinstance(read, dict):  # its curves' points, not its iterations: the run's own count where its name shows it
            read["points"], read["iterations"] = len(read["step"]), iterations_of(flags)
        runs.append(read)
    return runs


def iterations_of(flags):
    """A run's iterations from the flags its name shows (--total-timesteps // (--num-envs x --num-steps)); None where
    it shows none of them, or a resume (its --total-timesteps counts the training before it too)."""
    total, envs, steps = (flags.get(k) for k in ("total_timesteps", "num_envs", "num_steps"))
    if "resume" in flags or not all(isinstance(v, int) and v > 0 for v in (total, envs, steps)):
        return None
    return total // (envs * steps)


# ---------------------------------------------------------------------------------------------
# The report, --follow, --simulate
# ---------------------------------------------------------------------------------------------
def analyse(run, opts):
    windows, phases = read_run(run, opts)
    meaning, remedies = advise(run, windows, phases, opts)
    return {"run": run["name"], "script": run["script"], "score": run["tag"], "step_size": run["step_tag"],
            "iterations": run["iterations"], "points": run["points"], "window": window_of(run, opts),
            "asked_window": opts.window,
            "phases": [asdict(p) for p in phases],
            "verdict": meaning, "remedies": remedies, "damaged": run["damaged"]}


def describe(report):
    unit = "points" if report["points"] else "iterations"  # a downsampled table's phases are in its points
    size = (f"{report['points']} points of " + (f"{report['iterations']} iterations" if report["iterations"] else
                                                "a downsampled curve, its iterations not in its name")
            if report["points"] else f"{report['iterations']} iterations")
    lines = [f"{report['run']} ({report['script']}, {size}, score {report['score']}, windows of {report['window']}"
             + (f" {unit}" if report["points"] else "")
             + (" to hold 5 scores each" if report["window"] > report["asked_window"] else "") + "):"]
    lines += [f"  damaged event file, read up to its damage: {d}" for d in report.get("damaged", ())]
    for p in report["phases"]:
        slope = p["slope_per_million"]
        shown = f"{slope[0]:+.3g} per 1M steps [{slope[1]:+.3g}, {slope[2]:+.3g}]" if slope else "no slope"
        evidence = ", ".join(f"{k.split('/')[-1]} {v:.3g}" for k, v in p["evidence"].items())
        lines.append(f"  {p['label']:>17}: {unit} {p['iterations'][0]}-{p['iterations'][1]} (steps "
                     f"{p['steps'][0]:,}-{p['steps'][1]:,}); score {shown}; {evidence}")
    lines.append(f"  -> {report['verdict']}")
    for r in report["remedies"]:
        lines.append(f"     {r['what']}: {flags_text(r['flags'])}")
        if r["command"]:
            lines.append(f"       {r['command']}")
        if r.get("note"):
            lines.append(f"       ({r['note']})")
    return "\n".join(lines)


def flag_value(value):
    """A flag's value as a command line takes it: a float at full precision (repr: 0.00025, 1e-05, not rounded to 6
    digits), a whole one without its ".0" (32)."""
    if not isinstance(value, float):
        return str(value)
    return repr(value)[:-2] if repr(value).endswith(".0") else repr(value)


def flags_text(flags):
    return " ".join(f"{f} {flag_value(v)}" for f, v in flags.items())


def follow(opts):
    """Re-read the runs every opts.follow seconds; print a line when a run's last phase (as its report gives it)
    changes its label, and below it the remedies the report gives for it (a command, or why none)."""
    seen, unread, said, polls = {}, set(), set(), 0
    while True:
        damaged = []
        try:
            runs = gather(opts, damaged)
        except Exception as e:  # a file caught while it is written: read again at the next poll
            runs = [f"cannot read the runs yet ({type(e).__name__}: {e}); reading again in {opts.follow:g} s"]
        said.update(say_damage(damaged, opts, said))  # each damaged file once, not every poll
        for run in runs:
            if isinstance(run, str):  # why a path holds no run it can read (yet): said once, not every poll
                if run not in unread:
                    print(f"{time.strftime('%H:%M:%S')} {run}", flush=True)
                unread.add(run)
                continue
            windows, phases = read_run(run, opts)
            last = phases[-1]
            if seen.get(run["name"]) != last.label:
                slope = last.slope_per_million
                shown = f"{slope[0]:+.3g} per 1M steps [{slope[1]:+.3g}, {slope[2]:+.3g}]" if slope else "no slope"
                print(f"{time.strftime('%H:%M:%S')} {run['name']}: {last.label} at iteration {last.iterations[1]} "
                      f"(since iteration {last.iterations[0]}; score {shown}; {run['step_tag'].split('/')[-1]} "
                      f"{last.evidence[run['step_tag']]:.3g})", flush=True)
                for remedy in advise(run, windows, phases, opts)[1]:  # what to do about it, as the report gives it
                    print(f"  {remedy['what']}: {remedy['command'] or flags_text(remedy['flags'])}"
                          + (f" ({remedy['note']})" if remedy.get("note") else ""), flush=True)
            seen[run["name"]] = last.label
        polls += 1
        if opts.polls and polls >= opts.polls:
            return
        time.sleep(opts.follow)


def simulate(opts, slopes=(0.0, 0.05, 0.1, 0.2, 0.5), trials=1000, seed=0, early_slopes=(0.05, 0.1, 0.2)):
    """How often the rule calls a stagnation, on runs of 9 windows whose score is a line under AR(1) noise (lag-1
    correlation 0.5, unit SD), the step size constant; per row, the share of the windows after the run's rise called
    stagnated and the share of runs with any (the phases, as the report gives them). Rows:
    - improved, then rising: two windows that improve beyond doubt (20 noise SDs), then 7 rising by `slope` noise SDs
      an iteration; at slope 0 the run has stagnated, and the shares are the rule's power;
    - early rise, then flat: the paper's premature plateau, a rise of 10 noise SDs (as much a window as the row above)
      over the first 5-20 iterations (drawn uniformly), then flat: the power on that shape;
    - early rise, then rising: the same rise, then rising by `early_slopes` an iteration: false alarms;
    - never improved: 9 windows of noise from the start: every stagnation called there is a false alarm."""
    rng = np.random.default_rng(seed)
    n, w, rows = opts.window * 9, opts.window, []

    def noise():
        return scipy.signal.lfilter([math.sqrt(1 - 0.25)], [1, -0.5], rng.standard_normal((trials, n)), axis=1)

    def row(run, rise, scores, after):
        labels = [phase_labels({"step": np.ones(n), "score": score, "entropy": None, "steps": np.arange(n), "batch": 1,
                                "step_tag": "step", "script": "", "evidence": {}}, opts)[-after:] for score in scores]
        rows.append({"run": run, "rise_per_window_sd": rise,
                     "windows_called_stagnated": sum(l.count("stagnated") for l in labels) / (after * trials),
                     "runs_called_stagnated": sum("stagnated" in l for l in labels) / trials})

    for slope in slopes:
        scores = slope * np.arange(n) + noise()
        scores[:, :2 * w] += np.linspace(-20, 0, 2 * w)  # two windows improve beyond doubt
        row("improved, then rising", slope * w, scores, 7)
    for slope in (0.0,) + tuple(early_slopes):
        scores = slope * np.arange(n) + noise()
        for score, length in zip(scores, rng.integers(5, min(20, w) + 1, trials)):  # the rise: its first 5-20 iterations
            score[:length] += np.linspace(-10, 0, length)
        row("early rise, then flat" if slope == 0 else "early rise, then rising", slope * w, scores, 8)
    row("never improved", 0.0, noise(), 9)  # flat and noisy from its start (learning has not begun)
    return pd.DataFrame(rows)


def phase_labels(run, opts):
    """The label of each window of a run as its report's phases give it."""
    windows, phases = read_run(run, opts)
    return [next(p.label for p in phases if p.iterations[0] <= w.start + 1 <= p.iterations[1]) for w in windows]


def gather(opts, damaged):
    """The runs to read (a run, or a string saying why a path holds none); `damaged` receives the Damage of every
    damaged event file read."""
    return read_tables(opts.tables, opts.tag) if opts.tables else read_paths(opts.paths, opts.tag, damaged)


def say_damage(damaged, opts, said=()):
    """Each damaged event file not in `said`, one stderr line naming it and what was read of it: a warning, or under
    --on-damage error an error, then a line naming the flag, and exit status 1 before any report."""
    new = list(dict.fromkeys(str(d) for d in damaged if str(d) not in said))  # (an attempt two runs resumed: read twice)
    kind = "error" if opts.on_damage == "error" else "warning"
    for line in new:
        print(f"advise.py: {kind}: {line}", file=sys.stderr, flush=True)
    if new and opts.on_damage == "error":
        print(f"advise.py: error: {len(new)} damaged event file{'s' if len(new) > 1 else ''}: no advice; --on-damage warn "
              "advises on what was read of them and names them in each run's report", file=sys.stderr)
        raise SystemExit(1)
    return new


def build_parser():
    p = OneLineParser(prog="advise.py", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", type=Path, help="run directories, grids, stores or TensorBoard runs")
    p.add_argument("--tables", nargs="+", type=Path, help="analyze.py runs.csv(.gz) files to read instead of runs")
    p.add_argument("--tag", help="the score (default: analyze.py's tag for the script, else the first of "
                                 + ", ".join(SCORE_TAGS) + " the run logs)")
    p.add_argument("--window", type=int, default=20, help="iterations a window holds (default 20)")
    p.add_argument("--level", type=float, default=0.95, help="the slope intervals' confidence level (default 0.95)")
    p.add_argument("--large-step", type=float, default=0.5,
                   help="a flat window's median step (KL) at least this share of the improving windows' is large (0.5)")
    p.add_argument("--patience", type=int, default=2, help="windows in a row a new label needs to change the run's (2)")
    p.add_argument("--collapse-entropy", type=float, default=0.05,
                   help="entropy below this share of the start's (the larger of the first two windows'), with a small step, "
                        "is a collapse (0.05)")
    p.add_argument("--collapse-step", type=float, default=0.1,
                   help="a step (KL) below this share of the start's (the larger of the first two windows'), with a small "
                        "entropy, is a collapse (0.1)")
    p.add_argument("--entropy-floor", type=float, default=0.15,
                   help="a discrete policy's entropy (nats) below this, with a KL at least as large, is thrashing: near "
                        "deterministic, still taking large steps (0.15)")
    p.add_argument("--scale", type=int, default=4, help="the factor of the advised N_envs and COM (default 4)")
    p.add_argument("--json", type=Path, help="also write the reports to this file")
    p.add_argument("--follow", type=float, default=0.0, help="re-read every this many seconds, print phase changes")
    p.add_argument("--polls", type=int, default=0, help="with --follow: stop after this many reads (0: until Ctrl-C)")
    p.add_argument("--simulate", action="store_true", help="print the rule's stagnation calls on simulated runs")
    p.add_argument("--trials", type=int, default=1000, help="with --simulate: simulated runs a row (default 1000)")
    p.add_argument("--on-damage", choices=["error", "warn"], default="warn",
                   help="a damaged event file (a record failing its checksum, a file cut short, an empty one of a run "
                        "that is over): warn advises on what was read of it and names it on stderr and in its run's "
                        "report; error stops with exit status 1 before any report (default: warn: a live run's files "
                        "are read as they are written, and an incomplete last record is not damage)")
    return p


def check(opts):
    """Bad input: one line naming the flag and its rule, exit 2, before anything is read."""
    for flag, value, ok, rule in (("--window", opts.window, opts.window >= 5, "at least 5 (a slope needs 5 scores)"),
                                  ("--level", opts.level, 0 < opts.level < 1, "in (0, 1)"),
                                  ("--large-step", opts.large_step, math.isfinite(opts.large_step) and opts.large_step > 0, "positive"),
                                  ("--patience", opts.patience, opts.patience >= 1, "at least 1"),
                                  ("--collapse-entropy", opts.collapse_entropy, 0 < opts.collapse_entropy < 1, "in (0, 1)"),
                                  ("--collapse-step", opts.collapse_step, 0 < opts.collapse_step < 1, "in (0, 1)"),
                                  ("--entropy-floor", opts.entropy_floor, math.isfinite(opts.entropy_floor) and opts.entropy_floor > 0, "positive"),
                                  ("--scale", opts.scale, 2 <= opts.scale <= 1024, "in [2, 1024]"),
                                  ("--follow", opts.follow, math.isfinite(opts.follow) and opts.follow >= 0, ">= 0 seconds"),
                                  ("--polls", opts.polls, opts.polls >= 0, ">= 0"),
                                  ("--trials", opts.trials, opts.trials >= 1, "at least 1")):
        if not ok:
            fail(f"{flag} must be {rule} (got {value})")
    if opts.simulate:
        if opts.paths or opts.tables or opts.follow:
            fail("--simulate reads no runs (no paths, --tables or --follow with it)")
        return
    if bool(opts.paths) == bool(opts.tables):
        fail("name run directories or --tables (one of the two)")
    for path in opts.paths or opts.tables:
        if not path.exists():
            fail(f"{path}: no such file or directory")
    if opts.json and not opts.json.parent.is_dir():
        fail(f"--json {opts.json}: no directory {opts.json.parent}")
    if opts.json and opts.json.is_dir():
        fail(f"--json {opts.json} is a directory, not a file")
    if opts.json and opts.follow:
        fail("--json writes a report; --follow prints phase changes (one of the two)")
    if opts.tables and opts.follow:
        fail("--follow reads runs, not --tables")


def main(argv=None):
    opts = build_parser().parse_args(argv)
    check(opts)
    if opts.simulate:
        table = simulate(opts, trials=opts.trials)
        print(f"stagnation called on simulated runs (window {opts.window}, patience {opts.patience}, level "
              f"{opts.level}; {opts.trials:,} runs a row of 9 windows each, AR(1) noise of lag-1 correlation 0.5; "
              "windows: those after the rise):")
        print(table.to_string(index=False))
        return table
    if opts.follow:
        try:
            follow(opts)
        except KeyboardInterrupt:
            pass
        return None
    reports, damaged = [], []
    runs = gather(opts, damaged)
    say_damage(damaged, opts)
    for run in runs:
        if isinstance(run, str):
            print(f"advise.py: {run}", file=sys.stderr)
            continue
        report = analyse(run, opts)
        print(describe(report))
        reports.append(report)
    if not reports:
        fail("no run could be read")
    if opts.json:
        opts.json.write_text(json.dumps(reports, indent=1, default=str))
    return reports


if __name__ == "__main__":
    main()
