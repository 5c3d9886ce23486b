"""Turn the TensorBoard logs of a grid (benchmark/launch.py's --out-dir) into tables, figures and a report.

    python benchmark/analyze.py grids/nenvs                      # writes grids/nenvs/analysis/
    python benchmark/analyze.py grids/nenvs --tag charts/episodic_return --final-fraction 0.1

- `runs.csv`: one tidy table of every logged scalar (run, script, env, seed, every grid flag,
  subrun, step, tag, value), read with TensorBoard's own event reader;
- `aggregate.csv`: per config (the grid flags), the final score of every run (mean of --tag over
  the last --final-fraction of its steps), human-normalised for Atari games (standard random and
  human reference scores, SPEC.md), aggregated over envs x seeds with rliable: IQM, mean, median
  and optimality gap, with 95% stratified bootstrap confidence intervals;
- `curves.csv`: the same IQM and CI per config along training (steps binned into --points);
- figures (PNG): aggregate learning curves with CI bands, final IQM against --x-flag, every
  `dynamics/` tag over training, the --heatmap of two flags, charts/ddr against the best solve rate,
  and noisy_sgd's curves; `report.md` puts the tables and figures on one page.
"""
import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from rliable import library as rly  # noqa: E402
from rliable import metrics  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

# (random, human) scores of Atari games (the DQN / Agent57 tables); Atari-10 first
ATARI_REFERENCE = {
    "Amidar": (5.8, 1719.5), "Bowling": (23.1, 160.7), "Frostbite": (65.2, 4334.7),
    "KungFuMaster": (258.5, 22736.3), "Riverraid": (1338.5, 17118.0), "BattleZone": (2360.0, 37187.5),
    "DoubleDunk": (-18.6, -16.4), "NameThisGame": (2292.3, 8049.0), "Phoenix": (761.4, 7242.6),
    "Qbert": (163.9, 13455.0),
    "Breakout": (1.7, 30.5), "Pong": (-20.7, 14.6), "MontezumaRevenge": (0.0, 4753.3), "Venture": (0.0, 1187.5),
    "PrivateEye": (24.9, 69571.3), "Gravitar": (173.0, 3351.4), "Pitfall": (-229.4, 6463.7),
    "Solaris": (1236.3, 12326.7), "SpaceInvaders": (148.0, 1668.7), "Seaquest": (68.4, 42054.7),
    "BeamRider": (363.9, 16926.5), "Enduro": (0.0, 860.5), "Asterix": (210.0, 7127.7), "MsPacman": (307.3, 6951.6),
}
DEFAULT_TAG = {
    "ppo_atari_envpool": "charts/episodic_return", "pqn_atari": "charts/episodic_return", "ppo_rnd": "charts/episodic_return",
    "ppo_ewma_jax": "charts/solve_rate", "ppo_kinetix_sfl": "eval/solve_rate_sampled", "noisy_sgd": "charts/neg_distance",
}
STATISTICS = ("iqm", "mean", "median", "optimality_gap")


def game(env_id):
    """'Breakout-v5' -> 'Breakout' (None when it is not an Atari game with reference scores)."""
    name = str(env_id).split("-v")[0].split("/")[-1]
    return name if name in ATARI_REFERENCE else None


def human_normalised(score, env_id):
    """(score - random) / (human - random) for Atari games; other scores unchanged."""
    if game(env_id) is None:
        return score
    random, human = ATARI_REFERENCE[game(env_id)]
    return (score - random) / (human - random)


def load_grid(out_dir):
    """Every scalar of every finished run of the grid, as one tidy DataFrame."""
    frames = []
    for command in sorted(Path(out_dir).glob("runs/*/command.json")):
        run_dir = command.parent
        if not (run_dir / "done.json").exists():
            continue
        run = json.loads(command.read_text())
        for events in sorted({p.parent for p in (run_dir / "runs").rglob("events.out.tfevents.*")}):
            ea = EventAccumulator(str(events), size_guidance={"scalars": 0})
            ea.Reload()
            subrun = str(events.relative_to(run_dir / "runs").parent) if events.parent != run_dir / "runs" else ""
            for tag in ea.Tags()["scalars"]:
                rows = [(e.step, e.value) for e in ea.Scalars(tag)]
                frame = pd.DataFrame(rows, columns=["step", "value"])
                frame["tag"], frame["subrun"] = tag, "/".join(Path(subrun).parts[1:])
                frame["run"], frame["script"], frame["env"], frame["seed"] = run["name"], run["script"], run["env"] or "", run["seed"]
                for flag, value in run["flags"].items():
                    frame[flag.lstrip("-")] = value
                frames.append(frame)
    if not frames:
        raise SystemExit(f"analyze.py: error: no finished run with TensorBoard logs under {out_dir}/runs")
    df = pd.concat(frames, ignore_index=True)
    flags = [c for c in df.columns if c not in {"step", "value", "tag", "subrun", "run", "script", "env", "seed"}]
    df[flags] = df[flags].fillna("default")  # a flag a run was not given: the script's default
    return df


def config_columns(df):
    """The script and every grid flag that takes more than one value: what tells configs apart."""
    fixed = {"step", "value", "tag", "subrun", "run", "script", "env", "seed"}
    return ["script"] + [c for c in df.columns if c not in fixed and df[c].nunique(dropna=False) > 1]


def config_name(key, columns):
    key = key if isinstance(key, tuple) else (key,)
    return " ".join(f"{c}={v}" for c, v in zip(columns, key) if c != "script") or str(key[0])


def final_scores(df, tag, fraction):
    """Per run: the mean of `tag` over the last `fraction` of its logged steps, human-normalised for Atari."""
    rows = df[df.tag == tag]
    if rows.empty:
        raise SystemExit(f"analyze.py: error: no run logged {tag!r}; pick one with --tag")
    columns = config_columns(df)

    def last(group):
        cut = group.step.max() - fraction * (group.step.max() - group.step.min())
        return group[group.step >= cut].value.mean()

    scores = rows.groupby(columns + ["env", "seed", "subrun"], dropna=False).apply(last, include_groups=False).rename("score").reset_index()
    scores["normalised"] = [human_normalised(s, e) for s, e in zip(scores.score, scores.env)]
    return scores


def score_matrices(scores, columns):
    """{config: (seeds, envs) matrix of normalised final scores}; rliable's task axis is the env."""
    out = {}
    for key, group in scores.groupby(columns, dropna=False):
        table = group.pivot_table(index="seed", columns=["env", "subrun"], values="normalised", dropna=False)
        out[config_name(key, columns)] = table.dropna().to_numpy()
    return out


def interval_estimates(matrices, reps, seed=0):
    """rliable's IQM, mean, median and optimality gap with 95% stratified bootstrap CIs, per config."""
    func = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x), metrics.aggregate_median(x),
                               metrics.aggregate_optimality_gap(x)])
    points, cis = rly.get_interval_estimates(matrices, func, reps=reps, random_state=np.random.RandomState(seed))
    rows = []
    for name in matrices:
        row = {"config": name, "runs": matrices[name].size}
        for i, stat in enumerate(STATISTICS):
            row[stat], row[f"{stat}_low"], row[f"{stat}_high"] = points[name][i], cis[name][0, i], cis[name][1, i]
        rows.append(row)
    return pd.DataFrame(rows)


def learning_curves(df, tag, points, reps):
    """IQM (and CI) per config at `points` evenly spaced fractions of training."""
    rows = df[df.tag == tag].copy()
    columns = config_columns(df)
    span = rows.groupby("run").step.transform(lambda s: (s - s.min()) / max(s.max() - s.min(), 1))
    rows["bin"] = np.minimum((span * points).astype(int), points - 1)
    rows["normalised"] = [human_normalised(v, e) for v, e in zip(rows.value, rows.env)]
    binned = rows.groupby(columns + ["env", "seed", "subrun", "bin"], dropna=False).agg(
        normalised=("normalised", "mean"), step=("step", "mean")).reset_index()
    out = []
    for b in range(points):
        at = binned[binned.bin == b]
        if at.empty:
            continue
        estimates = interval_estimates(score_matrices(at, columns), reps)
        estimates["bin"], estimates["step"] = b, at.step.median()
        out.append(estimates)
    return pd.concat(out, ignore_index=True)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def plot_curves(curves, ylabel, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, c in curves.groupby("config", sort=False):
        ax.plot(c.step, c.iqm, label=name)
        ax.fill_between(c.step, c.iqm_low, c.iqm_high, alpha=0.2)
    ax.set(xlabel="environment steps", ylabel=f"IQM {ylabel}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_against_flag(scores, columns, x_flag, reps, ylabel, path):
    """Final IQM (and CI) against one grid flag, one line per combination of the other flags."""
    others = [c for c in columns if c != x_flag]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, group in scores.groupby(others, dropna=False):
        estimates = interval_estimates(score_matrices(group, [x_flag]), reps)
        x = [float(str(n).split("=")[-1]) for n in estimates.config]
        order = np.argsort(x)
        ax.errorbar(np.array(x)[order], estimates.iqm.to_numpy()[order], fmt="o-", capsize=3,
                    yerr=[(estimates.iqm - estimates.iqm_low).to_numpy()[order], (estimates.iqm_high - estimates.iqm).to_numpy()[order]],
                    label=config_name(key, others))
    ax.set_xscale("log", base=2)
    ax.set(xlabel=x_flag, ylabel=f"final IQM {ylabel}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_dynamics(df, path):
    tags = sorted(t for t in df.tag.unique() if t.startswith("dynamics/"))
    columns = config_columns(df)
    fig, axes = plt.subplots(1, len(tags), figsize=(3.5 * len(tags), 3.2), squeeze=False)
    for ax, tag in zip(axes[0], tags):
        for key, group in df[df.tag == tag].groupby(columns, dropna=False):
            mean = group.groupby("step").value.mean()
            ax.plot(mean.index, mean.values, label=config_name(key, columns))
        ax.set(title=tag, xlabel="steps")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_heatmap(scores, rows_flag, cols_flag, ylabel, path):
    table = scores.pivot_table(index=rows_flag, columns=cols_flag, values="normalised", aggfunc="mean")
    table = table.sort_index(key=lambda s: s.astype(float)).sort_index(axis=1, key=lambda s: s.astype(float))
    fig, ax = plt.subplots(figsize=(1.2 * table.shape[1] + 2, 0.8 * table.shape[0] + 1.5))
    image = ax.imshow(table.to_numpy(), cmap="viridis", aspect="auto")
    ax.set(xticks=range(table.shape[1]), xticklabels=table.columns, yticks=range(table.shape[0]), yticklabels=table.index,
           xlabel=cols_flag, ylabel=rows_flag, title=f"mean final {ylabel}")
    for (i, j), v in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_ddr(df, tag, path):
    """Each run's median Data-to-Divergence Ratio against its best value of `tag` (stagnation Fig. 8)."""
    ddr = df[df.tag == "charts/ddr"].groupby("run").value.median()
    best = df[df.tag == tag].groupby("run").value.max()
    both = pd.concat([ddr.rename("ddr"), best.rename("best")], axis=1).dropna()
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(both.ddr, both.best)
    ax.set_xscale("log")
    ax.set(xlabel="median DDR (batch / KL)", ylabel=f"max {tag}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_noisy_sgd(df, path):
    rows = df[(df.script == "noisy_sgd") & (df.tag == "charts/neg_distance")]
    fig, ax = plt.subplots(figsize=(6, 4))
    for subrun, group in rows.groupby("subrun"):
        mean = group.groupby("step").value.mean()
        ax.plot(mean.index, mean.values, label=subrun)
    ax.set(xlabel="gradient steps", ylabel="-||x - x*||")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown_table(frame):
    header = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    fmt = lambda v: f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)
    return header + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in frame.itertuples(index=False))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="a grid's --out-dir")
    parser.add_argument("--tag", help="the score (default: the script's: episodic return, solve rate, ...)")
    parser.add_argument("--final-fraction", type=float, default=0.1, help="last share of training averaged as the final score")
    parser.add_argument("--points", type=int, default=20, help="points along the learning curves")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--x-flag", default="num-envs", help="grid flag on the x axis of the final-score plot")
    parser.add_argument("--heatmap", nargs=2, metavar=("ROWS", "COLS"), default=["ewma-com", "clip-coef"])
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv", help="of the tidy table")
    opts = parser.parse_args(argv)
    if not 0 < opts.final_fraction <= 1:
        parser.error("--final-fraction must lie in (0, 1]")
    df = load_grid(opts.out_dir)
    out = Path(opts.out_dir) / "analysis"
    out.mkdir(exist_ok=True)
    df.to_csv(out / "runs.csv", index=False) if opts.format == "csv" else df.to_parquet(out / "runs.parquet")
    tag = opts.tag or DEFAULT_TAG.get(df.script.iloc[0], "charts/episodic_return")
    ylabel = "human-normalised score" if df.env.map(game).notna().any() and "return" in tag else tag
    columns = config_columns(df)
    scores = final_scores(df, tag, opts.final_fraction)
    aggregate = interval_estimates(score_matrices(scores, columns), opts.reps)
    aggregate.to_csv(out / "aggregate.csv", index=False)
    curves = learning_curves(df, tag, opts.points, max(opts.reps // 10, 100))
    curves.to_csv(out / "curves.csv", index=False)

    figures = {"learning curves (IQM, 95% CI)": "curves.png"}
    plot_curves(curves, ylabel, out / "curves.png")
    if opts.x_flag in columns and scores[opts.x_flag].nunique() > 1:
        plot_against_flag(scores, columns, opts.x_flag, opts.reps, ylabel, out / "final_vs_flag.png")
        figures[f"final IQM against {opts.x_flag}"] = "final_vs_flag.png"
    if any(df.tag.str.startswith("dynamics/")):
        plot_dynamics(df, out / "dynamics.png")
        figures["learning dynamics"] = "dynamics.png"
    if all(f in columns for f in opts.heatmap):
        plot_heatmap(scores, *opts.heatmap, ylabel, out / "heatmap.png")
        figures[f"{opts.heatmap[0]} x {opts.heatmap[1]}"] = "heatmap.png"
    if "charts/ddr" in set(df.tag):
        plot_ddr(df, tag, out / "ddr.png")
        figures["DDR against the best score"] = "ddr.png"
    if "noisy_sgd" in set(df.script):
        plot_noisy_sgd(df, out / "noisy_sgd.png")
        figures["noisy SGD"] = "noisy_sgd.png"

    shown = aggregate[["config", "runs"] + [c for s in STATISTICS for c in (s, f"{s}_low", f"{s}_high")]]
    report = [f"# {Path(opts.out_dir).resolve().name}\n",
              f"{df.run.nunique()} finished runs; final score = mean of `{tag}` over the last "
              f"{opts.final_fraction:.0%} of training ({ylabel}); 95% stratified bootstrap CIs, {opts.reps} resamples.\n",
              markdown_table(shown)]
    report += [f"\n## {title}\n\n![{title}]({file})\n" for title, file in figures.items()]
    (out / "report.md").write_text("\n".join(report))
    print(f"wrote {out}/report.md, aggregate.csv, curves.csv, runs.{opts.format} and {len(figures)} figures")
    return aggregate


if __name__ == "__main__":
    main()
