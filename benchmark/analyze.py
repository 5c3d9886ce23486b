"""Turn the TensorBoard logs of a grid (benchmark/launch.py's --out-dir) into tables, figures and a report.

    python benchmark/analyze.py grids/nenvs                      # writes grids/nenvs/analysis/
    python benchmark/analyze.py grids/nenvs --tag charts/episodic_return --final-fraction 0.1

The analysis streams: it reads only the tags it reports (the score, `dynamics/*`, and `charts/ddr`
with --ddr), run by run (--jobs processes), straight from the event files' bytes, and keeps per
run only its final and best score, its median DDR and its curves downsampled to --points. A run
resumed from a checkpoint has several TensorBoard runs: each later one replaces the earlier ones'
values from its first logged step on. A script's TensorBoard sub-runs (noisy_sgd's step sizes) are
kept apart: each is its own config.

- `scores.csv`: per run (and sub-run) its config, env, seed, final score (the mean of --tag over the
  last --final-fraction of its steps; human-normalised for Atari games with the standard random and
  human scores of the DQN / Agent57 tables, ATARI_REFERENCE below), best score (the highest logged value) and median DDR;
- `aggregate.csv`: per config (the flags that tell the grid's runs apart), over what exists:
  `--statistic iqm` (the default for several envs): rliable's IQM, mean, median and optimality gap
  with 95% stratified bootstrap CIs (the data-collection paper's Atari aggregates); `--statistic
  mean` (the default for one env): the mean over seeds with a 95% Student-t CI (the stagnation
  paper's single-task figures); a config missing a run is aggregated over the runs it has;
- `curves.csv` and `runs.csv`: the same statistic per config along training, each config on its own
  steps (its runs' curves interpolated onto one grid inside that config's range), and every run's
  downsampled curves (a tidy table);
- figures (PNG): learning curves with CI bands, the final statistic against --x-flag, the
  `dynamics/` tags per env (mean and 95% CI over seeds), the --heatmap of two flags, DDR against the
  best and the final score coloured by config, all with legends in order of value; `report.md` puts the tables,
  the number of runs per config and env, the missing and failed runs and the figures on one page;
- with --coverage, the coverage metric of the data-collection paper (App. B.7, Fig. 2) from the states the
  scripts save every --coverage-every iterations (`runs/<run>/coverage.bin`, --coverage-samples): per env, one
  UMAP (umap-learn) projects the observations of every run compared to 2-D, so that they share one projection
  (--coverage-space features: each run's features alone, in its own projection); a
  uniform --coverage-grid x --coverage-grid grid over the projection's bounding box; each run's share of
  cells visited by its states so far, at each saved iteration (`coverage/cvg`), and by that iteration's states
  alone (`cvg_batch`) (in `runs.csv`, `coverage.csv` per run and iteration, `coverage_aggregate.csv` per config), and
  Fig. 2 per env (`coverage_<env>.png`: the projection per config coloured by training progress, and the
  coverage over training, mean and 95% CI over seeds).
"""
import argparse
import importlib.util
import json
import mmap
import os
import re
import struct
import sys
import time
from array import array
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.stats  # noqa: E402
from rliable import library as rly  # noqa: E402
from rliable import metrics  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402

# (random, human) scores of Atari games (the DQN / Agent57 tables); Atari-10 first
ATARI_REFERENCE = {
    "Amidar": (5.8, 1719.5), "Bowling": (23.1, 160.7), "Frostbite": (65.2, 4334.7),
    "KungFuMaster": (258.5, 22736.3), "Riverraid": (1338.5, 17118.0), "BattleZone": (2360.0, 37187.5),
    "DoubleDunk": (-18.6, -16.4), "NameThisGame": (2292.3, 8049.0), "Phoenix": (761.4, 7242.6),
    "Qbert": (163.9, 13455.0),
    "Breakout": (1.7, 30.5), "Pong": (-20.7, 14.6), "MontezumaRevenge": (0.0, 4753.3), "Venture": (0.0, 1187.5),
    "PrivateEye": (24.9, 69571.3), "Gravitar": (173.0, 3351.4), "Pitfall": (-229.4, 6463.7),
    "Solaris": (1236.3, 12326.7), "SpaceInvaders": (148.0, 1668.7), "Seaquest": (68.4, 42054.7),
    "BeamRider": (363.9, 16926.5), "Enduro": (0.0, 860.5), "Asterix": (210.0, 8503.3), "MsPacman": (307.3, 6951.6),
}
DEFAULT_TAG = {
    "ppo_atari_envpool": "charts/episodic_return", "pqn_atari": "charts/episodic_return", "ppo_rnd": "charts/episodic_return",
    "ppo_procgen_envpool": "charts/episodic_return",
    "ppo_ewma_jax": "charts/solve_rate", "ppo_kinetix_sfl": "eval/solve_rate_sampled", "noisy_sgd": "charts/neg_distance",
}
STEP_UNIT = {"noisy_sgd": "gradient steps"}  # what a script's logged step counts (default: environment steps)
TRAIN_SECONDS = "charts/train_seconds"  # the training clock the JAX scripts log, carried over resumptions
IQM_STATISTICS = ("iqm", "mean", "median", "optimality_gap")
# Args fields never part of a config: the run's env and seed, and what cannot change results (launch.NON_IDENTITY)
NOT_CONFIG = {"seed", "exp_name", "save_every", "track", "wandb_project_name", "wandb_entity", "resume", "coverage_samples",
              "coverage_every", "fuse_iterations", "unroll", "compile_cache", "compile", "cudagraphs"}
DYNAMICS = "dynamics/"
COVERAGE = "coverage/cvg"


def fail(message):
    print(f"analyze.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def game(env_id):
    """'Breakout-v5' -> 'Breakout' (None when it is not an Atari game with reference scores)."""
    name = str(env_id).split("-v")[0].split("/")[-1]
    return name if name in ATARI_REFERENCE else None


def human_normalised(score, env_id):
    """(score - random) / (human - random) for Atari games; other scores unchanged."""
    if game(env_id) is None:
        return score
    random, human = ATARI_REFERENCE[game(env_id)]
    return (np.asarray(score) - random) / (human - random)


# ---------------------------------------------------------------------------------------------
# Reading: event files record by record, only the wanted tags
# ---------------------------------------------------------------------------------------------
LENGTH, FLOAT = struct.Struct("<Q"), struct.Struct("<f")


def read_event_file(path, tags, prefixes=(), fast=True):
    """({tag: (steps int64 array, values float64 array)}, bytes read) of the wanted scalars of one event file.

    An event file is a sequence of records (8-byte length, 4-byte CRC, an Event proto, 4-byte CRC). The fast path
    finds the wanted tags' bytes in the whole file and reads each scalar event around them (`_scalar_at`); if any
    occurrence is not exactly a one-value `simple_value` event framed as a record, the file is read record by
    record instead, parsing (with TensorBoard's protobuf) only the records that contain a wanted tag's bytes. CRCs
    are not checked (TensorBoard's own reader checks them, in pure Python); a truncated last record (a
    killed run) is dropped."""
    keys = [t.encode() for t in tags] + [p.encode() for p in prefixes]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return {}, 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            found = _find_scalars(buf, keys, tags, prefixes) if fast else None
            if found is None:
                found = _walk_records(buf, keys, tags, prefixes)
    return {tag: (np.frombuffer(s, np.int64), np.frombuffer(v, np.float64)) for tag, (s, v) in found.items()}, size


def _walk_records(buf, keys, tags, prefixes):
    found, size, pos, parse, find = {}, len(buf), 0, event_pb2.Event.FromString, buf.find
    while pos + 12 <= size:
        (n,) = LENGTH.unpack_from(buf, pos)
        start, pos = pos + 12, pos + 16 + n
        if pos > size:
            break
        for key in keys:
            if find(key, start, start + n) != -1:
                break
        else:
            continue
        event = parse(buf[start:start + n])
        for value in event.summary.value:
            if value.tag in tags or value.tag.startswith(prefixes):
                number = value.simple_value if value.HasField("simple_value") else _tensor_value(value.tensor)
                steps, values = found.setdefault(value.tag, (array("q"), array("d")))
                steps.append(event.step)
                values.append(number)
    return found


def _find_scalars(buf, keys, tags, prefixes):
    """The wanted scalars located by their tag bytes, or None when an occurrence is not a plain scalar record."""
    hits = set()
    for key in keys:
        p = buf.find(key)
        while p != -1:
            hits.add(p)
            p = buf.find(key, p + 1)
    found = {}
    for p in sorted(hits):
        scalar = _scalar_at(buf, p)
        if scalar is None:
            return None
        tag, step, value = scalar
        if tag in tags or tag.startswith(prefixes):  # (the key may be the start of a longer tag: not wanted)
            steps, values = found.setdefault(tag, (array("q"), array("d")))
            steps.append(step)
            values.append(value)
    return found


def _scalar_at(buf, p):
    """(tag, step, value) of the record whose scalar tag starts at byte p, or None unless the bytes around p are
    exactly one record [length][crc] Event{1: wall_time, 2: step, 5: Summary{1: Value{1: tag, 2: simple_value}}}
    with one-byte lengths, as TensorBoard's writers serialise a scalar: the record's own length field, 12 bytes
    before the event, must equal the event's length."""
    if p < 30:
        return None
    taglen = buf[p - 1]
    end = p + taglen + 5  # the tag, then 0x15 and a float32
    if (taglen > 112 or end > len(buf) or buf[p + taglen] != 0x15 or buf[p - 2] != 0x0A or buf[p - 3] != taglen + 7
            or buf[p - 4] != 0x0A or buf[p - 5] != taglen + 9 or buf[p - 6] != 0x2A):
        return None
    start = p - 15  # step 0 is not written (protobuf leaves out default values): 0x09 and the wall time, then 0x2A
    if start >= 12 and buf[start] == 0x09 and LENGTH.unpack_from(buf, start - 12)[0] == end - start:
        return buf[p:p + taglen].decode(), 0, FLOAT.unpack_from(buf, p + taglen + 1)[0]
    if buf[p - 7] & 0x80:  # else 0x09, the wall time, 0x10 and the step's varint: its last byte is at p - 7
        return None
    k = p - 8  # (its other bytes have the high bit set)
    while k > p - 17 and buf[k] & 0x80:
        k -= 1
    start = k - 9
    if buf[k] != 0x10 or start < 12 or buf[start] != 0x09 or LENGTH.unpack_from(buf, start - 12)[0] != end - start:
        return None
    step, shift = 0, 0
    for byte in buf[k + 1:p - 6]:
        step |= (byte & 0x7F) << shift
        shift += 7
    if step >= 1 << 63:  # int64 varints of negative steps
        step -= 1 << 64
    return buf[p:p + taglen].decode(), step, FLOAT.unpack_from(buf, p + taglen + 1)[0]


def _tensor_value(tensor):
    for field in ("float_val", "double_val", "int_val", "int64_val"):
        if getattr(tensor, field):
            return float(getattr(tensor, field)[0])
    return float("nan")


def read_run(run_dir, tags, prefixes=()):
    """({subrun: {tag: (steps, values)}}, bytes read) of a run's TensorBoard runs; attempts (a run resumed from a
    checkpoint writes a new TensorBoard run) are merged in the order they started: each replaces the earlier
    ones' values from its first logged step on. The sub-run is the event file's directory below its TensorBoard run."""
    attempts = {}
    for file in Path(run_dir, "runs").rglob("events.out.tfevents.*"):
        tb_run = file.relative_to(Path(run_dir, "runs")).parts[0]
        started = int(file.name.split(".")[3]) if file.name.split(".")[3].isdigit() else 0
        attempts.setdefault(tb_run, []).append((started, file))
    merged, nbytes = {}, 0
    for tb_run in sorted(attempts, key=lambda r: (min(s for s, _ in attempts[r]), r)):
        for _, file in sorted(attempts[tb_run]):
            subrun = "/".join(file.parent.relative_to(Path(run_dir, "runs", tb_run)).parts)
            found, n = read_event_file(file, tags, prefixes)
            nbytes += n
            if not found:
                continue
            first = min(int(steps[0]) for steps, _ in found.values())
            into = merged.setdefault(subrun, {})
            for tag in set(into) | set(found):
                old_steps, old_values = into.get(tag, (np.zeros(0, np.int64), np.zeros(0)))
                keep = old_steps < first
                new_steps, new_values = found.get(tag, (np.zeros(0, np.int64), np.zeros(0)))
                into[tag] = (np.concatenate([old_steps[keep], new_steps]), np.concatenate([old_values[keep], new_values]))
    return merged, nbytes


def downsample(steps, values, points):
    """A curve of at most `points` points: the values themselves (mean per step) when there are few
    steps, else the mean step and value of `points` equal-width bins of the step range."""
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order].astype(np.float64), values[order]
    unique, index = np.unique(steps, return_inverse=True)
    if len(unique) <= points:
        return unique, np.bincount(index, values) / np.bincount(index)
    edges = np.linspace(steps[0], steps[-1], points + 1)
    bins = np.minimum(np.searchsorted(edges, steps, side="right") - 1, points - 1)
    count = np.bincount(bins, minlength=points)
    used = count > 0
    return (np.bincount(bins, steps, points)[used] / count[used], np.bincount(bins, values, points)[used] / count[used])


def summarise_run(task):
    """Everything the report needs of one run (a worker's job): per sub-run, final and best score, median DDR
    and downsampled curves; also the bytes read and the number of values of the wanted tags."""
    run_dir, tag, opts = task
    command = json.loads(Path(run_dir, "command.json").read_text())
    tags = {tag} | ({"charts/ddr"} if opts["ddr"] else set()) | ({TRAIN_SECONDS} if opts["x_unit"] == "seconds" else set())
    data, nbytes = read_run(run_dir, tags, (DYNAMICS,) if opts["dynamics"] else ())
    wanted = sum(len(steps) for found in data.values() for steps, _ in found.values())
    out = {}
    for subrun, found in data.items():
        if tag not in found or not len(found[tag][0]):
            continue
        clock = found.pop(TRAIN_SECONDS, None) if opts["x_unit"] == "seconds" else None
        if opts["x_unit"] == "seconds" and clock is None:
            return str(run_dir), command, {}, (nbytes, wanted), f"logs no {TRAIN_SECONDS}"
        if clock is not None:
            at = np.argsort(clock[0], kind="stable")
            clock = (clock[0][at], clock[1][at])
        steps, values = found[tag]
        cut = steps.max() - opts["final_fraction"] * (steps.max() - steps.min())
        entry = {"final": float(values[steps >= cut].mean()), "best": float(values.max()),
                 "ddr": float(np.median(found["charts/ddr"][1])) if "charts/ddr" in found else np.nan,
                 "last_step": int(steps.max()), "curves": {}}
        for name, (s, v) in found.items():
            if name == "charts/ddr":
                continue
            x, y = downsample(s, v, opts["points"])
            if opts["x_unit"] == "iterations":
                x = x / command["batch_size"]
            elif clock is not None:  # the training clock at each point's step
                x = np.interp(x, clock[0], clock[1])
            entry["curves"][name] = (x, y)
        out[subrun] = entry
    return str(run_dir), command, out, (nbytes, wanted), None


# ---------------------------------------------------------------------------------------------
# Coverage (data-collection App. B.7, Fig. 2)
# ---------------------------------------------------------------------------------------------
def read_coverage(run_dir):
    """The states a run saved for the coverage metric (a structured array: iteration, global_step, obs, features),
    or None. Attempts (a resumed run writes a new TensorBoard run) are merged as read_run merges scalars: in the
    order they started, each replacing the earlier ones' records from its first iteration on (an attempt that saved
    nothing, e.g. resumed with --coverage-samples 0, replaces nothing). A record cut short by a kill is dropped."""
    attempts = []
    for header in Path(run_dir, "runs").glob("*/coverage.json"):
        spec = json.loads(header.read_text())
        dtype = np.dtype([(name, base, tuple(shape)) for name, base, shape in spec["dtype"]])
        path = header.with_name("coverage.bin")
        raw = path.read_bytes() if path.exists() else b""
        records = np.frombuffer(raw, dtype, count=len(raw) // dtype.itemsize)
        starts = [int(f.name.split(".")[3]) for f in header.parent.glob("events.out.tfevents.*") if f.name.split(".")[3].isdigit()]
        attempts.append((min(starts, default=0), header.parent.name, records))
    merged = None
    for _, _, records in sorted(attempts, key=lambda a: a[:2]):
        if len(records):
            merged = records if merged is None else np.concatenate([merged[merged["iteration"] < records["iteration"].min()], records])
    return merged


def grid_cells(points, low, high, grid):
    """App. B.7: the cell of each 2-D point in a uniform grid x grid over the box [low, high], as one index
    i * grid + j; a point on the upper edge falls in the last cell, and a zero-width axis is one cell wide."""
    span = np.where(high > low, high - low, 1.0)
    ij = np.clip(np.floor((points - low) / span * grid).astype(np.int64), 0, grid - 1)
    return ij[:, 0] * grid + ij[:, 1]


def batch_coverage(cells, iterations, grid):
    """(iterations, coverage): the share of cells the states of each iteration alone occupy (one batch's spread)."""
    at, index = np.unique(iterations, return_inverse=True)
    occupied = np.unique(index * grid**2 + cells)  # distinct (iteration, cell) pairs
    return at, np.bincount(occupied // grid**2, minlength=len(at)) / grid**2


def cumulative_coverage(cells, iterations, grid):
    """(iterations, coverage): at each iteration with states, the share of the grid x grid cells that the states
    of that iteration and all before it occupy (App. B.7's Cvg, cumulative over iterations)."""
    order = np.argsort(iterations, kind="stable")
    iterations, cells = iterations[order], cells[order]
    _, first_of_cell = np.unique(cells, return_index=True)  # where each cell is first visited
    firsts = np.sort(first_of_cell)
    at, ends = np.unique(iterations, return_index=True)
    ends = np.append(ends[1:], len(iterations))  # one past the last state of each iteration
    return at, np.searchsorted(firsts, ends, side="left") / grid**2


def project(samples, seed, fit_points):
    """2-D UMAP of `samples` (rows); fitted on at most fit_points of them (drawn with `seed`), the rest transformed."""
    import umap  # umap-learn; imported here: its numba start-up is paid only with --coverage

    x = samples.reshape(len(samples), -1).astype(np.float32)
    reducer = umap.UMAP(n_components=2, random_state=seed)
    if len(x) <= fit_points:
        return reducer.fit_transform(x)
    fit = np.random.default_rng(seed).choice(len(x), fit_points, replace=False)
    reducer.fit(x[fit])
    return reducer.transform(x)


def coverage_tables(runs, space, grid, seed, fit_points, x_unit):
    """(per run and iteration: run, env, iteration, x, cvg (cumulative), cvg_batch (that iteration's states alone);
    per state: run, env, progress, u, v) of runs [(key, run directory, command)]. Observations: one projection per env
    over the states of every run of that env (one space, so runs compare in it). Features: one projection per run
    (App. B.7 embeds each network's own representations: features of different networks share no space, and a run's
    coverage must not depend on which other runs are analysed beside it)."""
    found = [(key, command, read_coverage(d)) for key, d, command in runs]
    found = [(key, command, r) for key, command, r in found if r is not None and len(r)]
    curves, points = [], []
    for env in sorted({command["env"] for _, command, _ in found}):
        runs = [(key, r) for key, command, r in found if command["env"] == env]
        for group in ([runs] if space == "obs" else [[run] for run in runs]):
            # uint8 frames (the torch scripts' thumbnails) to [0, 1]; the JAX scripts' float16 observations as they are
            samples = np.concatenate([r[space] / 255.0 if r[space].dtype == np.uint8 else r[space].astype(np.float32)
                                      for _, r in group])
            embedded = project(samples, seed, fit_points)
            low, high = embedded.min(axis=0), embedded.max(axis=0)
            start = 0
            for key, r in group:
                xy, start = embedded[start:start + len(r)], start + len(r)
                curve, state_points = run_coverage(key, env, r, grid_cells(xy, low, high, grid), xy, grid, x_unit)
                curves.append(curve)
                points.append(state_points)
    if not curves:
        return pd.DataFrame(), pd.DataFrame()
    return pd.concat(curves, ignore_index=True), pd.concat(points, ignore_index=True)


def run_coverage(key, env, r, cells, xy, grid, x_unit):
    """(the run's coverage curve by iteration, its states' 2-D points) of one run's states `r` and their cells."""
    at, cvg = cumulative_coverage(cells, r["iteration"], grid)
    order = np.argsort(r["iteration"], kind="stable")
    steps = r["global_step"][order][np.unique(r["iteration"][order], return_index=True)[1]]
    curve = pd.DataFrame({"run": key, "env": env, "iteration": at, "x": (at if x_unit == "iterations" else steps).astype(float),
                          "cvg": cvg, "cvg_batch": batch_coverage(cells, r["iteration"], grid)[1]})
    state_points = pd.DataFrame({"run": key, "env": env, "progress": r["iteration"] / r["iteration"].max(),
                                 "u": xy[:, 0], "v": xy[:, 1]})
    return curve, state_points


# ---------------------------------------------------------------------------------------------
# The grid: its runs, their states and configs
# ---------------------------------------------------------------------------------------------
def grid_runs(out_dirs):
    """[(run directory, command, state)] of every run the grids' launches registered; with several grids each
    command gets the grid's name (a run two grids share appears once in each)."""
    found = []
    for out_dir in out_dirs:
        commands = sorted(Path(out_dir).glob("runs/*/command.json"))
        if not commands:
            fail(f"no run registered under {out_dir}/runs (launch the grid with benchmark/launch.py first)")
        for command in commands:
            d = command.parent
            state = next((s for s in ("done", "failed", "preempted") if (d / f"{s}.json").exists()), "not finished")
            record = json.loads(command.read_text())
            if len(out_dirs) > 1:
                record["grid"] = Path(out_dir).resolve().name
            found.append((d, record, state))
    return found


def run_key(command):
    """A run's name in the tables; with several grids, prefixed by the grid's (a run two grids share, once per grid)."""
    return f"{command['grid']}/{command['name']}" if "grid" in command else command["name"]


def value_key(value):
    """Sort key that puts 4 before 16 and numbers before text."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def flag_name(field):
    return field.replace("_", "-")


def config_columns(rows, grid_flags):
    """The fewest columns that tell the configs apart: the grid's own flags first, then any other resolved
    flag that varies, then the sub-run; a column that adds no distinction to those kept is left out."""
    frame = pd.DataFrame(rows)
    varying = [c for c in frame.columns if c not in {"run", "env", "seed"} and frame[c].astype(str).nunique() > 1]
    first = [c for c in ("grid", "script") if c in varying] + [c for c in grid_flags if c in varying]
    ordered = first + sorted(c for c in varying if c not in first and c != "subrun")
    ordered += ["subrun"] if "subrun" in varying else []
    kept, distinct = [], 1
    for column in ordered:
        n = len(frame[kept + [column]].astype(str).drop_duplicates())
        if n > distinct:
            kept, distinct = kept + [column], n
    return kept


def config_label(row, columns):
    return " ".join(f"{c}={row[c]}" for c in columns) or "all runs"


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------
def _ragged_metrics(groups, count=4):
    """rliable's IQM, mean, median and optimality gap (gamma = 1) over tasks with unequal numbers of runs."""
    flat = np.concatenate(groups)
    if count == 1:
        return np.array([scipy.stats.trim_mean(flat, 0.25)])
    task_means = np.array([g.mean() for g in groups])
    return np.array([scipy.stats.trim_mean(flat, 0.25), task_means.mean(), np.median(task_means), 1.0 - np.minimum(flat, 1.0).mean()])


def _rliable_metrics(x):
    return np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x), metrics.aggregate_median(x),
                     metrics.aggregate_optimality_gap(x)])


def _rliable_iqm(x):
    return np.array([metrics.aggregate_iqm(x)])


def iqm_estimates(groups, reps, seed=0, count=4):
    """(point estimates, 2 x 4 CI) of IQM, mean, median and optimality gap over `groups` (one array of run
    scores per task) with 95% stratified bootstrap CIs (runs resampled within each task).

    Complete data (every task with the same number of runs) goes through rliable itself; its resampling
    draws from NumPy's global generator, which is seeded here and restored after, so the same data and seed
    give the same CIs. Ragged data (a missing run) is resampled the same way here, on the runs each task has.
    count=1: the IQM alone (the learning curves)."""
    groups = [np.asarray(g, np.float64) for g in groups if len(g)]
    if len({len(g) for g in groups}) == 1:
        saved = np.random.get_state()
        np.random.seed(seed)
        try:
            func = _rliable_metrics if count == 4 else _rliable_iqm
            points, cis = rly.get_interval_estimates({"x": np.stack(groups, axis=1)}, func, reps=reps)
        finally:
            np.random.set_state(saved)
        return points["x"], cis["x"]
    rng = np.random.default_rng(seed)
    boot = np.array([_ragged_metrics([g[rng.integers(len(g), size=len(g))] for g in groups], count) for _ in range(reps)])
    return _ragged_metrics(groups, count), np.percentile(boot, [2.5, 97.5], axis=0)


def mean_estimate(values):
    """(mean, low, high): the mean with a 95% Student-t CI (NaN bounds for one value)."""
    values = np.asarray(values, np.float64)
    mean = values.mean()
    if len(values) < 2:
        return mean, np.nan, np.nan
    half = scipy.stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return mean, mean - half, mean + half


def estimate(frame, value, statistic, reps, seed=0, only=False):
    """{column: number} of `statistic` over the runs in `frame` (columns env, seed and `value`); only=True: the
    IQM alone, without the mean, median and optimality gap."""
    if statistic == "iqm":
        groups = [g[value].to_numpy() for _, g in frame.groupby("env", sort=True)]
        points, cis = iqm_estimates(groups, reps, seed, count=1 if only else 4)
        out = {}
        for i, name in enumerate(IQM_STATISTICS[:len(points)]):
            out[name], out[f"{name}_low"], out[f"{name}_high"] = points[i], cis[0, i], cis[1, i]
        return out
    per_seed = frame.groupby("seed")[value].mean()  # one env: the seeds' scores; several: each seed's mean over envs
    mean, low, high = mean_estimate(per_seed.to_numpy())
    return {"mean": mean, "mean_low": low, "mean_high": high}


def aggregate(scores, columns, statistic, reps, seed=0):
    rows = []
    for key, group in scores.groupby("config", sort=False):
        row = {"config": key, **{c: group[c].iloc[0] for c in columns}, "runs": len(group), "envs": group.env.nunique()}
        rows.append({**row, **estimate(group, "normalised", statistic, reps, seed)})
    return pd.DataFrame(rows)


def config_curves(runs_frame, tag, statistic, points, reps, seed=0):
    """The statistic per config along training: each run's curve interpolated onto one grid of `points` inside
    the config's range (the runs' own steps when they all share them)."""
    out = []
    for config, group in runs_frame[runs_frame.tag == tag].groupby("config", sort=False):
        curves = [c for _, c in group.groupby(["run", "subrun"])]
        xs = [c.x.to_numpy() for c in curves]
        if all(len(x) == len(xs[0]) and np.array_equal(x, xs[0]) for x in xs):
            grid = xs[0]
        else:
            grid = np.linspace(max(x.min() for x in xs), min(x.max() for x in xs), points)
        values = np.stack([np.interp(grid, c.x.to_numpy(), c.normalised.to_numpy()) for c in curves])  # runs x points
        envs, seeds = np.array([c.env.iloc[0] for c in curves]), np.array([c.seed.iloc[0] for c in curves])
        if statistic == "mean":  # each seed's mean over envs, then mean and Student-t CI over seeds (vectorised)
            per_seed = np.stack([values[seeds == s].mean(axis=0) for s in np.unique(seeds)])
            mean, n = per_seed.mean(axis=0), len(per_seed)
            half = scipy.stats.t.ppf(0.975, n - 1) * per_seed.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.full_like(mean, np.nan)
            out += [{"config": config, "x": x, "mean": m, "mean_low": m - h, "mean_high": m + h} for x, m, h in zip(grid, mean, half)]
        else:
            for i, x in enumerate(grid):
                point, ci = iqm_estimates([values[envs == e, i] for e in np.unique(envs)], reps, seed, count=1)
                out.append({"config": config, "x": x, "iqm": point[0], "iqm_low": ci[0, 0], "iqm_high": ci[1, 0]})
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")  # a legend outside the axes stays in the picture
    plt.close(fig)


def plot_curves(curves, order, statistic, ylabel, xlabel, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for config in order:
        c = curves[curves.config == config]
        if c.empty:
            continue
        ax.plot(c.x, c[statistic], label=config)
        ax.fill_between(c.x, c[f"{statistic}_low"], c[f"{statistic}_high"], alpha=0.2)
    ax.set(xlabel=xlabel, ylabel=f"{statistic.upper() if statistic == 'iqm' else statistic} {ylabel}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    save(fig, path)


def plot_against_flag(scores, columns, x_flag, statistic, reps, ylabel, path, seed=0):
    """The final statistic (and CI) against one grid flag, one line per combination of the other columns."""
    others = [c for c in columns if c != x_flag]
    labels = sorted(scores[x_flag].unique(), key=value_key)
    numeric = all(value_key(v)[0] == 0 for v in labels)
    fig, ax = plt.subplots(figsize=(6, 4))
    groups = scores.groupby(others, sort=False) if others else [((), scores)]
    for key, group in sorted(groups, key=lambda kv: tuple(map(value_key, kv[0] if isinstance(kv[0], tuple) else (kv[0],)))):
        points = sorted(((x, estimate(g, "normalised", statistic, reps, seed)) for x, g in group.groupby(x_flag)), key=lambda p: value_key(p[0]))
        x = [value_key(p[0])[1] if numeric else labels.index(p[0]) for p in points]
        y = np.array([p[1][statistic] for p in points])
        err = np.array([[p[1][statistic] - p[1][f"{statistic}_low"], p[1][f"{statistic}_high"] - p[1][statistic]] for p in points]).T
        key = key if isinstance(key, tuple) else (key,)
        ax.errorbar(x, y, yerr=np.nan_to_num(err), fmt="o-", capsize=3, label=" ".join(f"{c}={v}" for c, v in zip(others, key)) or None)
    if numeric and all(value_key(v)[1] > 0 for v in labels):
        ax.set_xscale("log", base=2)
    elif not numeric:
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7)
    ax.set(xlabel=x_flag, ylabel=f"final {statistic} {ylabel}")
    if others:
        ax.legend(fontsize=7)
    save(fig, path)


def plot_dynamics(runs_frame, env, order, xlabel, path):
    """Every dynamics/ tag of one env over training: mean and 95% CI over seeds, per config."""
    rows = runs_frame[(runs_frame.env == env) & runs_frame.tag.str.startswith(DYNAMICS)]
    tags = sorted(rows.tag.unique())
    columns = min(len(tags), 4)  # at most 4 panels a row, so the figure stays readable at page width
    grid = (len(tags) + columns - 1) // columns
    fig, axes = plt.subplots(grid, columns, figsize=(3.6 * columns, 3.0 * grid), squeeze=False)
    for ax in axes.flat[len(tags):]:
        ax.axis("off")
    for ax, tag in zip(axes.flat, tags):
        curves = config_curves(rows, tag, "mean", 20, 0)
        for config in order:
            c = curves[curves.config == config] if not curves.empty else curves
            if c.empty:
                continue
            ax.plot(c.x, c["mean"], label=config)
            ax.fill_between(c.x, c.mean_low, c.mean_high, alpha=0.2)
        ax.set(title=tag, xlabel=xlabel)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=6)
    fig.suptitle(env or "default env")
    save(fig, path)


def plot_coverage(points, runs_frame, env, order, xlabel, grid, path, shown=4000, seed=0):
    """Fig. 2 for one env: per config the projected states of its runs (at most `shown`, drawn with `seed`)
    coloured by training progress, and below the coverage over training (mean and 95% CI over seeds)."""
    here = points[points.env == env]
    configs = [c for c in order if (here.config == c).any()]
    fig = plt.figure(figsize=(3.2 * max(len(configs), 2), 6.4))
    spec = fig.add_gridspec(2, max(len(configs), 2))
    for i, config in enumerate(configs):
        ax = fig.add_subplot(spec[0, i])
        p = here[here.config == config]
        p = p.sample(min(len(p), shown), random_state=seed)
        image = ax.scatter(p.u, p.v, c=p.progress, cmap="viridis", s=3, vmin=0, vmax=1)
        pad_u, pad_v = 0.02 * (here.u.max() - here.u.min()), 0.02 * (here.v.max() - here.v.min())  # edge points whole
        ax.set(title=config, xticks=[], yticks=[], xlim=(here.u.min() - pad_u, here.u.max() + pad_u),
               ylim=(here.v.min() - pad_v, here.v.max() + pad_v))
    fig.colorbar(image, ax=fig.axes, label="share of training", shrink=0.45, location="right")
    ax = fig.add_subplot(spec[1, :])
    curves = config_curves(runs_frame[runs_frame.env == env], COVERAGE, "mean", 50, 0)
    for config in configs:
        c = curves[curves.config == config]
        ax.plot(c.x, c["mean"], label=config)
        ax.fill_between(c.x, c.mean_low, c.mean_high, alpha=0.2)
    ax.set(xlabel=xlabel, ylabel=f"coverage ({grid} x {grid} cells)")
    ax.legend(fontsize=7)
    fig.suptitle(f"{env or 'default env'}: states of the saved iterations, one UMAP")
    fig.savefig(path, dpi=100, bbox_inches="tight")  # not save(): tight_layout cannot place the shared colour bar
    plt.close(fig)


def plot_heatmap(scores, rows_flag, cols_flag, ylabel, path):
    table = scores.pivot_table(index=rows_flag, columns=cols_flag, values="normalised", aggfunc="mean")
    table = table.sort_index(key=lambda s: s.map(value_key)).sort_index(axis=1, key=lambda s: s.map(value_key))
    fig, ax = plt.subplots(figsize=(1.2 * table.shape[1] + 2, 0.8 * table.shape[0] + 1.5))
    image = ax.imshow(table.to_numpy(), cmap="viridis", aspect="auto")
    ax.set(xticks=range(table.shape[1]), xticklabels=table.columns, yticks=range(table.shape[0]), yticklabels=table.index,
           xlabel=cols_flag, ylabel=rows_flag, title=f"mean final {ylabel}")
    for (i, j), v in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image)
    save(fig, path)


def plot_ddr(scores, order, tag, path):
    """Each run's median Data-to-Divergence Ratio against its best value of `tag` (stagnation Fig. 8) and against
    its final value (what benchmark/claims.py's claim 6 reads), coloured by config."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharex=True)
    colours = plt.cm.tab20(np.arange(len(order)) % 20) if len(order) > 10 else [None] * len(order)  # 10 repeat
    for ax, score in zip(axes, ("best", "final")):
        for config, colour in zip(order, colours):
            s = scores[(scores.config == config) & scores.ddr.notna()]
            if len(s):
                ax.scatter(s.ddr, s[score], label=config, s=18, color=colour)
        ax.set_xscale("log")
        ax.set(xlabel="median DDR (transitions per unit KL)", ylabel=f"{score} {tag}")
    axes[-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points, never over them
    save(fig, path)


def markdown_table(frame):
    header = "| " + " | ".join(map(str, frame.columns)) + " |\n|" + "---|" * len(frame.columns) + "\n"
    fmt = lambda v: f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)
    return header + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in frame.itertuples(index=False))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dirs", nargs="+", metavar="out_dir",
                        help="a grid's --out-dir; several grids are compared in one analysis (their name becomes a config column)")
    parser.add_argument("--output", help="where the analysis goes (default: <out_dir>/analysis; required for several grids)")
    parser.add_argument("--tag", help="the score (default: the script's: episodic return, solve rate, ...)")
    parser.add_argument("--statistic", choices=["auto", "iqm", "mean"], default="auto",
                        help="iqm: rliable IQM with stratified bootstrap CIs; mean: mean and Student-t CI over seeds; auto: iqm for several envs, else mean")
    parser.add_argument("--final-fraction", type=float, default=0.1, help="last share of training averaged as the final score")
    parser.add_argument("--points", type=int, default=50, help="points along the learning curves")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (curves use a tenth, at least 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--x-flag", default="num-envs", help="grid flag on the x axis of the final-score plot")
    parser.add_argument("--x-unit", choices=["steps", "iterations", "seconds"], default="steps",
                        help="x of the curves: logged steps, iterations (policy updates: steps / batch), or seconds "
                             f"of training, {TRAIN_SECONDS} (stagnation Fig. 16b)")
    parser.add_argument("--heatmap", nargs=2, metavar=("ROWS", "COLS"), default=["ewma-com", "clip-coef"])
    parser.add_argument("--best-of", metavar="FLAG", help="per config, keep only the value of FLAG with the best mean final "
                        "score (stagnation Fig. 4: the better of annealing on/off per learning rate; chosen on the same runs)")
    parser.add_argument("--ddr", action="store_true", help="read charts/ddr and plot the median DDR against the best and the final score")
    parser.add_argument("--no-dynamics", action="store_true", help="skip the dynamics/ tags")
    parser.add_argument("--coverage", action="store_true", help="the coverage metric and Fig. 2 (App. B.7) from the "
                        "states the runs saved (their --coverage-samples)")
    parser.add_argument("--coverage-grid", type=int, default=32, help="G of the G x G grid over the projection (the "
                        "paper's value did not survive in its text)")
    parser.add_argument("--coverage-space", choices=["obs", "features"], default="obs", help="what UMAP projects: the "
                        "saved observation thumbnails (comparable across runs) or each run's penultimate features "
                        "(each network's own feature space: each run projected alone, App. B.7)")
    parser.add_argument("--coverage-fit", type=int, default=20000, help="states UMAP is fitted on, per projection (the "
                        "others are transformed)")
    parser.add_argument("--envs", nargs="+", metavar="ENV", help="analyse only these envs' runs (e.g. one game of several "
                        "whose returns have no common scale)")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8), help="processes reading runs")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv", help="of the tidy tables")
    return parser


def main(argv=None):
    parser = build_parser()
    opts = parser.parse_args(argv)
    if not 0 < opts.final_fraction <= 1:
        fail(f"--final-fraction must lie in (0, 1] (got {opts.final_fraction})")
    for flag in ("points", "reps", "jobs", "coverage_grid", "coverage_fit"):
        if getattr(opts, flag) <= 0:
            fail(f"--{flag} must be positive (got {getattr(opts, flag)})")
    started = time.time()
    if len(opts.out_dirs) > 1 and not opts.output:
        fail("several grids need --output DIR")
    registered = grid_runs(opts.out_dirs)
    if opts.envs:
        unknown = sorted(set(opts.envs) - {c["env"] for _, c, _ in registered})
        if unknown:
            fail(f"--envs {' '.join(unknown)}: no run of the grid has that env")
        registered = [(d, c, state) for d, c, state in registered if c["env"] in opts.envs]
    done = [(d, c) for d, c, state in registered if state == "done"]
    if not done:
        fail(f"no finished run under {', '.join(opts.out_dirs)} ({len(registered)} registered)")
    scripts = {c["script"] for _, c in done}
    tag = opts.tag or DEFAULT_TAG.get(sorted(scripts)[0], "charts/episodic_return")
    if opts.coverage and opts.x_unit == "seconds":
        fail("--coverage draws against steps or iterations, not --x-unit seconds")
    if opts.coverage and importlib.util.find_spec("umap") is None:
        fail("--coverage needs umap-learn (pip install -r requirements/requirements.txt)")
    if opts.x_unit == "iterations" and any("batch_size" not in c for _, c in done):
        fail("--x-unit iterations needs runs whose script has a batch (num-envs x num-steps)")
    reading = {"ddr": opts.ddr, "dynamics": not opts.no_dynamics, "final_fraction": opts.final_fraction,
               "points": opts.points, "x_unit": opts.x_unit}
    tasks = [(d, tag, reading) for d, _ in done]
    normalise = "episodic_return" in tag  # human normalisation is for Atari returns only
    if opts.jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(opts.jobs) as pool:
            summaries = list(pool.map(summarise_run, tasks, chunksize=1))
    else:
        summaries = [summarise_run(t) for t in tasks]
    unreadable = [(c["name"], s[4]) for (_, c), s in zip(done, summaries) if s[4]]
    if unreadable:
        fail(f"--x-unit {opts.x_unit}: {len(unreadable)} runs {unreadable[0][1]}, e.g. {unreadable[0][0]}")
    nbytes, wanted = (sum(s[3][i] for s in summaries) for i in (0, 1))
    read_seconds = time.time() - started

    # one row per run (and sub-run): identity, every resolved flag that varies, scores
    rows, curve_rows, silent = [], [], []
    for (_, command), (_, _, subruns, _, _) in zip(done, summaries):
        key = run_key(command)
        if not subruns:
            silent.append(key)
        for subrun, entry in subruns.items():
            flags = {flag_name(k): json.dumps(v) if isinstance(v, (list, dict)) else v
                     for k, v in command["resolved"].items() if k not in NOT_CONFIG and k != command["env_field"]}
            flags.update({"script": command["script"], "subrun": subrun, "grid": command.get("grid", "")})
            rows.append({"run": key, "env": command["env"], "seed": command["seed"], **flags,
                         "final": entry["final"], "best": entry["best"], "ddr": entry["ddr"]})
            for name, (x, y) in entry["curves"].items():
                curve_rows.append((key, subrun, name, x, y))
    if not rows:
        fail(f"no finished run logged {tag!r}; pick one with --tag")
    scores = pd.DataFrame(rows)
    grid_flags = [flag_name(f.lstrip("-")) for _, c in done for f in c.get("flags", {})]
    columns = config_columns(scores.drop(columns=["final", "best", "ddr"]), list(dict.fromkeys(grid_flags)))
    for c in columns:
        scores[c] = scores[c].astype(str)
    scores["normalised"] = [float(human_normalised(s, e)) if normalise else s for s, e in zip(scores.final, scores.env)]
    chosen = ""
    if opts.best_of:
        if opts.best_of not in columns:
            fail(f"--best-of {opts.best_of}: not a flag that tells this grid's configs apart ({', '.join(columns) or 'none'})")
        columns = [c for c in columns if c != opts.best_of]
        means = scores.groupby(columns + [opts.best_of]).normalised.mean().reset_index() if columns else \
            scores.groupby(opts.best_of).normalised.mean().reset_index()
        best = means.loc[means.groupby(columns).normalised.idxmax()] if columns else means.loc[[means.normalised.idxmax()]]
        scores = scores.merge(best[columns + [opts.best_of]], on=columns + [opts.best_of])
        chosen = "; ".join(f"{config_label(r, columns)}: {opts.best_of}={r[opts.best_of]}" for r in best.to_dict("records"))
    combos = sorted(scores[columns].drop_duplicates().to_dict("records"), key=lambda r: tuple(value_key(r[c]) for c in columns))
    order = [config_label(r, columns) for r in combos]
    scores["config"] = [config_label(r, columns) for r in scores.to_dict("records")]
    statistic = opts.statistic if opts.statistic != "auto" else ("iqm" if scores.env.nunique() > 1 else "mean")
    if statistic == "mean" and scores.env.nunique() > 1:
        seeds = scores.groupby(["config", "env"]).seed.apply(frozenset).groupby("config").nunique()
        if (seeds > 1).any():
            fail(f"--statistic mean over several envs needs the same seeds in every env (config {seeds.idxmax()!r} has "
                 "a run missing); use --statistic iqm, which aggregates the runs that exist")

    meta = scores.set_index(["run", "subrun"])[["config", "env", "seed"]]
    runs_frame = pd.DataFrame(
        [{"run": r, "subrun": s, "tag": t, "x": xi, "value": yi} for r, s, t, x, y in curve_rows for xi, yi in zip(x, y)])
    runs_frame = runs_frame.join(meta, on=["run", "subrun"], how="inner")
    runs_frame["normalised"] = runs_frame.value
    for env, at in runs_frame[runs_frame.tag == tag].groupby("env"):
        runs_frame.loc[at.index, "normalised"] = human_normalised(at.value.to_numpy(), env) if normalise else at.value
    coverage = pd.DataFrame()
    if opts.coverage:
        # the runs the tables keep (after --best-of), each directory once (a run two grids share is projected once and
        # reported under the first grid's name)
        kept, seen = [], set()
        for d, c in done:
            if run_key(c) in set(scores.run) and Path(d).resolve() not in seen:
                kept.append((run_key(c), d, c))
                seen.add(Path(d).resolve())
        coverage, coverage_points = coverage_tables(kept, opts.coverage_space, opts.coverage_grid, opts.seed,
                                                    opts.coverage_fit, opts.x_unit)
        if coverage.empty:
            fail("--coverage: no finished run saved states for it (runs/<run>/coverage.bin; the scripts' --coverage-samples)")
        by_run = meta.reset_index().drop_duplicates("run").set_index("run")[["config", "seed"]]
        coverage = coverage.join(by_run, on="run", how="inner")
        coverage_points = coverage_points.join(by_run, on="run", how="inner")
        runs_frame = pd.concat([runs_frame, pd.DataFrame({
            "run": coverage.run, "subrun": "", "tag": COVERAGE, "x": coverage.x, "value": coverage.cvg,
            "config": coverage.config, "env": coverage.env, "seed": coverage.seed, "normalised": coverage.cvg})],
            ignore_index=True)

    out = Path(opts.output) if opts.output else Path(opts.out_dirs[0]) / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    write = (lambda f, name: f.to_csv(out / f"{name}.csv", index=False)) if opts.format == "csv" else (lambda f, name: f.to_parquet(out / f"{name}.parquet"))
    write(scores, "scores")
    write(runs_frame, "runs")
    table = aggregate(scores, columns, statistic, opts.reps, opts.seed)
    table["order"] = table.config.map({c: i for i, c in enumerate(order)})
    table = table.sort_values("order").drop(columns="order")
    table.to_csv(out / "aggregate.csv", index=False)
    curves = config_curves(runs_frame, tag, statistic, opts.points, max(opts.reps // 10, 100), opts.seed)
    curves.to_csv(out / "curves.csv", index=False)

    unit = {"iterations": "iterations (policy updates)", "seconds": "training wall-clock time (seconds)"}.get(
        opts.x_unit, STEP_UNIT.get(sorted(scripts)[0], "environment steps"))
    normalised = normalise and any(game(e) for e in scores.env)
    ylabel = "human-normalised score" if normalised else tag
    figures = {f"learning curves ({statistic}, 95% CI)": "curves.png"}
    plot_curves(curves, order, statistic, ylabel, unit, out / "curves.png")
    if opts.x_flag in columns:
        plot_against_flag(scores, columns, opts.x_flag, statistic, opts.reps, ylabel, out / "final_vs_flag.png", opts.seed)
        figures[f"final {statistic} against {opts.x_flag}"] = "final_vs_flag.png"
    if runs_frame.tag.str.startswith(DYNAMICS).any():
        for env in sorted(runs_frame[runs_frame.tag.str.startswith(DYNAMICS)].env.unique()):
            name = f"dynamics_{re.sub(r'[^A-Za-z0-9.-]', '-', env or 'default')}.png"
            plot_dynamics(runs_frame, env, order, unit, out / name)
            figures[f"learning dynamics, {env or 'default env'} (mean, 95% CI over seeds)"] = name
    if all(f in scores.columns and scores[f].astype(str).nunique() > 1 for f in opts.heatmap):
        plot_heatmap(scores, *opts.heatmap, ylabel, out / "heatmap.png")
        figures[f"{opts.heatmap[0]} x {opts.heatmap[1]}"] = "heatmap.png"
    if opts.ddr and scores.ddr.notna().any():
        plot_ddr(scores, order, tag, out / "ddr.png")
        figures["DDR against the best and the final score"] = "ddr.png"
    coverage_table = None
    if not coverage.empty:
        write(coverage, "coverage")
        # per run: the cumulative coverage at its end, and one batch's coverage averaged over its saved iterations
        final = coverage.sort_values("iteration").groupby("run").tail(1).rename(columns={"cvg": "coverage"})
        final = final.join(coverage.groupby("run").cvg_batch.mean().rename("batch_coverage"), on="run")
        coverage_table = pd.DataFrame([{"config": config, "runs": len(g), "envs": g.env.nunique(),
                                        **estimate(g, "coverage", statistic, opts.reps, opts.seed, only=True),
                                        **{f"batch_{k}": v for k, v in
                                           estimate(g, "batch_coverage", statistic, opts.reps, opts.seed, only=True).items()}}
                                       for config, g in final.groupby("config", sort=False)])
        coverage_table = coverage_table.set_index("config").reindex([c for c in order if c in set(final.config)]).reset_index()
        coverage_table.to_csv(out / "coverage_aggregate.csv", index=False)
        coverage_points.to_csv(out / "coverage_points.csv", index=False)
        for env in sorted(coverage.env.unique()):
            name = f"coverage_{re.sub(r'[^A-Za-z0-9.-]', '-', env or 'default')}.png"
            plot_coverage(coverage_points, runs_frame, env, order, unit, opts.coverage_grid, out / name, seed=opts.seed)
            figures[f"coverage, {env or 'default env'} (App. B.7, Fig. 2; {opts.coverage_space}, {opts.coverage_grid} x "
                    f"{opts.coverage_grid} grid)"] = name

    counts = scores.pivot_table(index="config", columns="env", values="seed", aggfunc="count", fill_value=0)
    counts = counts.reindex([c for c in order if c in counts.index]).reset_index()
    unfinished = [(c["name"], state, (d / "stdout.log")) for d, c, state in registered if state != "done"]
    how = ("rliable IQM, mean, median and optimality gap over envs x seeds, 95% stratified bootstrap CIs"
           if statistic == "iqm" else "mean over seeds, 95% Student-t CI")
    shown = table.drop(columns=[c for c in columns], errors="ignore")
    report = [f"# {' + '.join(Path(d).resolve().name for d in opts.out_dirs)}\n",
              f"{len(done)} finished runs of {len(registered)} registered; final score = mean of `{tag}` over the last "
              f"{opts.final_fraction:.0%} of training ({ylabel}); {how}" + (f", {opts.reps} resamples, seed {opts.seed}.\n" if statistic == "iqm" else ".\n"),
              markdown_table(shown)] + ([f"\n--best-of {opts.best_of} (chosen on these runs): {chosen}.\n"] if chosen else []) + [
              "\n## Runs per config and env\n", markdown_table(counts)]
    if unfinished or silent:
        report += ["\n## Missing and failed runs\n", "| run | state | log |\n|---|---|---|\n"
                   + "".join(f"| {n} | {s} | {log} |\n" for n, s, log in unfinished)
                   + "".join(f"| {n} | finished without logging `{tag}` | |\n" for n in silent)]
    if coverage_table is not None:
        without = sorted(set(scores.run) - set(coverage.run))
        report += [f"\n## Coverage (App. B.7: share of {opts.coverage_grid} x {opts.coverage_grid} cells of one UMAP per env "
                   f"of the {opts.coverage_space} states; {how})\n\n`{statistic}`: cumulative, at the end of training; "
                   f"`batch_{statistic}`: one saved batch's states alone, averaged over the saved iterations.\n",
                   markdown_table(coverage_table)]
        report += [f"\n{len(without)} finished runs saved no states for it (e.g. {without[0]}): left out.\n"] if without else []
    report += [f"\n## {title}\n\n![{title}]({file})\n" for title, file in figures.items()]
    (out / "report.md").write_text("\n".join(report))
    print(f"read {wanted} values from {nbytes / 2**20:.1f} MiB of event files of {len(done)} runs in {read_seconds:.3f} s; "
          f"wrote {out}/report.md, aggregate.csv, curves.csv, scores and runs tables and {len(figures)} figures"
          + (f"; {len(unfinished)} runs not finished (listed in report.md)" if unfinished else ""))
    return table


if __name__ == "__main__":
    main()
