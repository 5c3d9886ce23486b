"""The analysis's figures (benchmark/analyze.py), as PNG: learning curves, the final statistic against a flag, the
dynamics/ tags, the coverage (Fig. 2), a heatmap of two flags, DDR against the scores."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from benchmark.configs import value_key  # noqa: E402
from benchmark.coverage_metric import COVERAGE  # noqa: E402
from benchmark.events import DYNAMICS  # noqa: E402
from benchmark.stats import config_curves, estimate  # noqa: E402


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
