"""Turn the TensorBoard logs of a grid (benchmark/launch.py's --out-dir) into tables, figures and a report.

    python benchmark/analyze.py grids/nenvs                      # writes grids/nenvs/analysis/
    python benchmark/analyze.py grids/nenvs --tag charts/episodic_return --final-fraction 0.1

The analysis streams: it reads only the tags it reports (the score, `dynamics/*`, and `charts/ddr`
with --ddr), run by run (--jobs processes), straight from the event files' bytes, and keeps per
run only its final and best score, its median DDR and its curves downsampled to --points. A run
resumed from a checkpoint has several TensorBoard runs: each later one replaces the earlier ones'
values from its first logged step on. A script's TensorBoard sub-runs (noisy_sgd's step sizes) are
kept apart: each is its own config.

Every record's checksums are checked as it is read. A damaged event file (benchmark/events.py says what counts: a
record whose length or data fails its checksum, a file cut short in its middle, a finished run's file cut short at
its end, an empty file; not an earlier attempt's incomplete last record, what a writer killed before a resume
leaves) stops the analysis before it writes anything: exit status 1, one stderr line per damaged file naming it and
what was read of it, then one naming --on-damage. With `--on-damage warn` the analysis goes on with what was read of
each (its records before the damage) and lists them in `report.md`. Exit status 2 is for a command refused before
anything is read (a bad flag, an --output that cannot be written).

- `scores.csv`: per run (and sub-run) its config, env, seed, final score (the mean of --tag over the
  last --final-fraction of its steps; human-normalised for Atari games with the standard random and
  human scores of the DQN / Agent57 tables, benchmark/stats.py's ATARI_REFERENCE), best score (the highest logged value) and median DDR;
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
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmark.configs import NOT_CONFIG, config_columns, config_label, flag_name, run_key, value_key  # noqa: E402
from benchmark.coverage_metric import COVERAGE, coverage_aggregate, coverage_tables  # noqa: E402
from benchmark.common import OneLineParser  # noqa: E402
from benchmark.events import DYNAMICS, TRAIN_SECONDS, summarise_run  # noqa: E402
from benchmark.figures import plot_against_flag, plot_coverage, plot_curves, plot_ddr, plot_dynamics, plot_heatmap  # noqa: E402
from benchmark.stats import aggregate, config_curves, game, human_normalised  # noqa: E402

DEFAULT_TAG = {
    "ppo_atari_envpool": "charts/episodic_return", "pqn_atari": "charts/episodic_return", "ppo_rnd": "charts/episodic_return",
    "ppo_procgen_envpool": "charts/episodic_return",
    "ppo_ewma_jax": "charts/solve_rate", "ppo_ewma_brax": "charts/episodic_return", "ppo_kinetix_sfl": "eval/solve_rate_sampled",
    "noisy_sgd": "charts/neg_distance",
}
STEP_UNIT = {"noisy_sgd": "gradient steps"}  # what a script's logged step counts (default: environment steps)


def fail(message):
    print(f"analyze.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None):
    opts = parse_args(argv)
    started = time.time()  # the grids, then their runs' event files, read
    registered, done = read_grids(opts)
    out = Path(opts.output) if opts.output else Path(opts.out_dirs[0]) / "analysis"
    check_output(out, opts.output)
    scripts = {c["script"] for _, c in done}
    tag = opts.tag or DEFAULT_TAG.get(sorted(scripts)[0], "charts/episodic_return")
    check_x_unit_and_coverage(opts, done)
    normalise = "episodic_return" in tag  # human normalisation is for Atari returns only
    summaries, nbytes, wanted, damaged = read_runs(done, tag, opts)
    read_seconds = time.time() - started

    # the configs and their runs' scores and curves
    scores, columns, curve_rows, silent = score_table(done, summaries, tag, normalise)
    scores, columns, chosen = keep_best_of(scores, columns, opts.best_of)
    combos = sorted(scores[columns].drop_duplicates().to_dict("records"), key=lambda r: tuple(value_key(r[c]) for c in columns))
    order = [config_label(r, columns) for r in combos]
    scores["config"] = [config_label(r, columns) for r in scores.to_dict("records")]
    statistic = choose_statistic(scores, opts.statistic)
    runs_frame = runs_table(scores, curve_rows, tag, normalise)
    coverage, coverage_points = pd.DataFrame(), None
    if opts.coverage:
        coverage, coverage_points, runs_frame = coverage_of(done, scores, runs_frame, opts)

    # tables
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
    coverage_table = None
    if not coverage.empty:
        write(coverage, "coverage")
        coverage_table = coverage_aggregate(coverage, order, statistic, opts.reps, opts.seed)
        coverage_table.to_csv(out / "coverage_aggregate.csv", index=False)
        coverage_points.to_csv(out / "coverage_points.csv", index=False)

    # figures and report
    unit = {"iterations": "iterations (policy updates)", "seconds": "training wall-clock time (seconds)"}.get(
        opts.x_unit, STEP_UNIT.get(sorted(scripts)[0], "environment steps"))
    ylabel = "human-normalised score" if normalise and any(game(e) for e in scores.env) else tag
    figures = draw_figures(out, opts, scores, runs_frame, curves, columns, order, statistic, tag, ylabel, unit,
                           coverage, coverage_points)
    write_report(out, opts, registered, done, scores, table, columns, order, statistic, tag, ylabel, chosen, silent,
                 coverage, coverage_table, figures, damaged)
    unfinished = [c for _, c, state in registered if state != "done"]
    print(f"read {wanted} values from {nbytes / 2**20:.1f} MiB of event files of {len(done)} runs in {read_seconds:.3f} s; "
          f"wrote {out}/report.md, aggregate.csv, curves.csv, scores and runs tables and {len(figures)} figures"
          + (f"; {len(unfinished)} runs not finished (listed in report.md)" if unfinished else "")
          + (f"; {len(damaged)} damaged event files, read up to their damage (listed in report.md)" if damaged else ""))
    return table


# ---------------------------------------------------------------------------------------------
# The command line and the grids
# ---------------------------------------------------------------------------------------------
def build_parser():
    parser = OneLineParser(prog="analyze.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    parser.add_argument("--on-damage", choices=["error", "warn"], default="error",
                        help="a damaged event file (a record failing its checksum, a file cut short or empty): error "
                             "stops before anything is written (exit 1), warn analyses what was read of it and lists it "
                             "in report.md (default: error)")
    return parser



def parse_args(argv):
    opts = build_parser().parse_args(argv)
    if not 0 < opts.final_fraction <= 1:
        fail(f"--final-fraction must lie in (0, 1] (got {opts.final_fraction})")
    for flag in ("points", "reps", "jobs", "coverage_grid", "coverage_fit"):
        if getattr(opts, flag) <= 0:
            fail(f"--{flag} must be positive (got {getattr(opts, flag)})")
    return opts


def read_grids(opts):
    """(every run the grids registered, [(run directory, command)] of the finished ones), of --envs' envs."""
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
    return registered, done


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


def check_output(out, given):
    """The analysis's folder must be one it can write, checked before anything is read: an existing directory that
    can be written, or a path whose nearest existing part is such a directory."""
    flag = f"--output {out}" if given else f"--output {out} (the default, <out_dir>/analysis)"
    if out.exists() and not out.is_dir():
        fail(f"{flag}: {out} is a file, not a directory")
    parent = out
    while not parent.exists():  # the nearest part of the path that exists: where the folders would be made
        parent = parent.parent
    if not parent.is_dir():
        fail(f"{flag}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):  # (a read-only file system refuses root too: EROFS)
        fail(f"{flag}: {parent} cannot be written")


def check_x_unit_and_coverage(opts, done):
    if opts.coverage and opts.x_unit == "seconds":
        fail("--coverage draws against steps or iterations, not --x-unit seconds")
    if opts.coverage and importlib.util.find_spec("umap") is None:
        fail("--coverage needs umap-learn (pip install -r requirements/requirements.txt)")
    if opts.x_unit == "iterations" and any("batch_size" not in c for _, c in done):
        fail("--x-unit iterations needs runs whose script has a batch (num-envs x num-steps)")


def read_runs(done, tag, opts):
    """(each finished run's summary (events.summarise_run), bytes read, values of the wanted tags read, [Damage of the
    damaged event files]), run by run in --jobs processes. Damage, under --on-damage error, stops here: nothing has
    been written yet."""
    reading = {"ddr": opts.ddr, "dynamics": not opts.no_dynamics, "final_fraction": opts.final_fraction,
               "points": opts.points, "x_unit": opts.x_unit}
    tasks = [(d, tag, reading) for d, _ in done]
    if opts.jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(opts.jobs) as pool:
            summaries = list(pool.map(summarise_run, tasks, chunksize=1))
    else:
        summaries = [summarise_run(t) for t in tasks]
    damaged = [damage for s in summaries for damage in s[5]]
    if damaged:
        said = "error" if opts.on_damage == "error" else "warning"
        for damage in damaged:
            print(f"analyze.py: {said}: {damage}", file=sys.stderr)
        if opts.on_damage == "error":
            print(f"analyze.py: error: {len(damaged)} damaged event file{'s' if len(damaged) > 1 else ''}: nothing written; "
                  "--on-damage warn analyses what was read of them and lists them in report.md", file=sys.stderr)
            raise SystemExit(1)
    unreadable = [(c["name"], s[4]) for (_, c), s in zip(done, summaries) if s[4]]
    if unreadable:
        fail(f"--x-unit {opts.x_unit}: {len(unreadable)} runs {unreadable[0][1]}, e.g. {unreadable[0][0]}")
    nbytes, wanted = (sum(s[3][i] for s in summaries) for i in (0, 1))
    return summaries, nbytes, wanted, damaged


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def score_table(done, summaries, tag, normalise):
    """(one row per run (and sub-run): identity, every resolved flag that varies, scores; the config columns; every
    run's downsampled curves [(run, subrun, tag, x, y)]; the finished runs that logged no `tag`)."""
    rows, curve_rows, silent = [], [], []
    for (_, command), (_, _, subruns, _, _, _) in zip(done, summaries):
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
    return scores, columns, curve_rows, silent


def keep_best_of(scores, columns, best_of):
    """--best-of: (the runs of the best value of that flag per config, the other columns, the choice in words)."""
    if not best_of:
        return scores, columns, ""
    if best_of not in columns:
        fail(f"--best-of {best_of}: not a flag that tells this grid's configs apart ({', '.join(columns) or 'none'})")
    columns = [c for c in columns if c != best_of]
    means = scores.groupby(columns + [best_of]).normalised.mean().reset_index() if columns else \
        scores.groupby(best_of).normalised.mean().reset_index()
    best = means.loc[means.groupby(columns).normalised.idxmax()] if columns else means.loc[[means.normalised.idxmax()]]
    scores = scores.merge(best[columns + [best_of]], on=columns + [best_of])
    chosen = "; ".join(f"{config_label(r, columns)}: {best_of}={r[best_of]}" for r in best.to_dict("records"))
    return scores, columns, chosen


def choose_statistic(scores, statistic):
    statistic = statistic if statistic != "auto" else ("iqm" if scores.env.nunique() > 1 else "mean")
    if statistic == "mean" and scores.env.nunique() > 1:
        seeds = scores.groupby(["config", "env"]).seed.apply(frozenset).groupby("config").nunique()
        if (seeds > 1).any():
            fail(f"--statistic mean over several envs needs the same seeds in every env (config {seeds.idxmax()!r} has "
                 "a run missing); use --statistic iqm, which aggregates the runs that exist")
    return statistic


def runs_table(scores, curve_rows, tag, normalise):
    """Every kept run's downsampled curves, a row per point, with its config, env and seed (the score normalised)."""
    meta = scores.set_index(["run", "subrun"])[["config", "env", "seed"]]
    runs_frame = pd.DataFrame(
        [{"run": r, "subrun": s, "tag": t, "x": xi, "value": yi} for r, s, t, x, y in curve_rows for xi, yi in zip(x, y)])
    runs_frame = runs_frame.join(meta, on=["run", "subrun"], how="inner")
    runs_frame["normalised"] = runs_frame.value
    for env, at in runs_frame[runs_frame.tag == tag].groupby("env"):
        runs_frame.loc[at.index, "normalised"] = human_normalised(at.value.to_numpy(), env) if normalise else at.value
    return runs_frame


def coverage_of(done, scores, runs_frame, opts):
    """--coverage: (per run and saved iteration, per projected state, runs_frame with the coverage curves added)."""
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
    by_run = scores.drop_duplicates("run").set_index("run")[["config", "seed"]]
    coverage = coverage.join(by_run, on="run", how="inner")
    coverage_points = coverage_points.join(by_run, on="run", how="inner")
    runs_frame = pd.concat([runs_frame, pd.DataFrame({
        "run": coverage.run, "subrun": "", "tag": COVERAGE, "x": coverage.x, "value": coverage.cvg,
        "config": coverage.config, "env": coverage.env, "seed": coverage.seed, "normalised": coverage.cvg})],
        ignore_index=True)
    return coverage, coverage_points, runs_frame


# ---------------------------------------------------------------------------------------------
# Figures and report
# ---------------------------------------------------------------------------------------------
def draw_figures(out, opts, scores, runs_frame, curves, columns, order, statistic, tag, ylabel, unit, coverage,
                 coverage_points):
    """Every figure the analysis draws: {title: file name under `out`}, in the report's order."""
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
    for env in sorted(coverage.env.unique()) if not coverage.empty else ():
        name = f"coverage_{re.sub(r'[^A-Za-z0-9.-]', '-', env or 'default')}.png"
        plot_coverage(coverage_points, runs_frame, env, order, unit, opts.coverage_grid, out / name, seed=opts.seed)
        figures[f"coverage, {env or 'default env'} (App. B.7, Fig. 2; {opts.coverage_space}, {opts.coverage_grid} x "
                f"{opts.coverage_grid} grid)"] = name
    return figures


def write_report(out, opts, registered, done, scores, table, columns, order, statistic, tag, ylabel, chosen, silent,
                 coverage, coverage_table, figures, damaged):
    """report.md: the aggregate table, the runs per config and env, the missing and failed runs, the damaged event
    files (--on-damage warn) and what was read of each, the coverage table and the figures."""
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
    if damaged:
        report += [f"\n## Damaged event files\n\n{len(damaged)} event files are damaged (--on-damage warn): each run's "
                   "scores and curves hold what was read of them, their records before the damage.\n\n"
                   + "".join(f"- `{d.path}`: {d.detail}\n" for d in damaged)]
    if coverage_table is not None:
        without = sorted(set(scores.run) - set(coverage.run))
        report += [f"\n## Coverage (App. B.7: share of {opts.coverage_grid} x {opts.coverage_grid} cells of one UMAP per env "
                   f"of the {opts.coverage_space} states; {how})\n\n`{statistic}`: cumulative, at the end of training; "
                   f"`batch_{statistic}`: one saved batch's states alone, averaged over the saved iterations.\n",
                   markdown_table(coverage_table)]
        report += [f"\n{len(without)} finished runs saved no states for it (e.g. {without[0]}): left out.\n"] if without else []
    report += [f"\n## {title}\n\n![{title}]({file})\n" for title, file in figures.items()]
    (out / "report.md").write_text("\n".join(report))


def markdown_table(frame):
    header = "| " + " | ".join(map(str, frame.columns)) + " |\n|" + "---|" * len(frame.columns) + "\n"
    fmt = lambda v: f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)
    return header + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in frame.itertuples(index=False))


if __name__ == "__main__":
    main()
