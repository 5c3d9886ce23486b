"""The coverage metric of the data-collection paper (App. B.7, Fig. 2) from the states the scripts save
(`runs/<run>/coverage.bin`): one UMAP projection, a uniform grid over it, each run's share of cells visited."""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.stats import estimate

COVERAGE = "coverage/cvg"


def read_coverage(run_dir):
    """The states a run saved for the coverage metric (a structured array: iteration, global_step, obs, features),
    or None. Attempts (a resumed run writes a new TensorBoard run) are merged as events.read_merged_scalars merges
    scalars: in the order they started, each replacing the earlier ones' records from its first iteration on (an
    attempt that saved nothing, e.g. resumed with --coverage-samples 0, replaces nothing). A record cut short by a kill
    is dropped."""
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


def coverage_aggregate(coverage, order, statistic, reps, seed=0):
    """Per config, in `order`: `statistic` over its runs of the cumulative coverage at the end of training, and
    (batch_*) of one batch's coverage averaged over the run's saved iterations."""
    # per run: the cumulative coverage at its end, and one batch's coverage averaged over its saved iterations
    final = coverage.sort_values("iteration").groupby("run").tail(1).rename(columns={"cvg": "coverage"})
    final = final.join(coverage.groupby("run").cvg_batch.mean().rename("batch_coverage"), on="run")
    table = pd.DataFrame([{"config": config, "runs": len(g), "envs": g.env.nunique(),
                           **estimate(g, "coverage", statistic, reps, seed, only=True),
                           **{f"batch_{k}": v for k, v in estimate(g, "batch_coverage", statistic, reps, seed, only=True).items()}}
                          for config, g in final.groupby("config", sort=False)])
    return table.set_index("config").reindex([c for c in order if c in set(final.config)]).reset_index()
