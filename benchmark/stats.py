"""The statistics of the analysis (benchmark/analyze.py): human-normalised Atari scores, rliable's IQM, mean, median
and optimality gap with stratified bootstrap CIs (complete or ragged data), the mean with a Student-t CI, per config
and along training."""
import numpy as np
import pandas as pd
import scipy.stats
from rliable import library as rly
from rliable import metrics

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
IQM_STATISTICS = ("iqm", "mean", "median", "optimality_gap")


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
