"""benchmark/launch.py and benchmark/analyze.py: a real grid of tiny runs launched with 2 workers,
re-launched (all skipped), a failing config reported, the Slurm path through submitit's debug
executor; IQM, its bootstrap CI and human normalisation against hand computations; the analysis
of the grid into CSV, IQM and figures."""
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from benchmark import analyze, launch

# enough steps per env for a few full games of Breakout
ATARI = ["--script", "ppo_atari_envpool", "--env-ids", "Breakout-v5", "--seeds", "1", "2", "--fixed-budget", "--total-timesteps", "4096"]
TINY = ["--num-steps", "16", "--num-minibatches", "2", "--dynamics-every", "4", "--dynamics-batch", "64"]


def test_iqm_is_the_mean_of_the_middle_half():
    scores = np.arange(1.0, 9.0).reshape(4, 2)  # 4 seeds x 2 games: the middle half is 3, 4, 5, 6
    estimates = analyze.interval_estimates({"a": scores}, reps=200)
    assert estimates.iqm[0] == pytest.approx(4.5)
    assert estimates["mean"][0] == pytest.approx(4.5) and estimates["median"][0] == pytest.approx(4.5)
    assert estimates.optimality_gap[0] == pytest.approx(0.0)  # every score >= 1
    assert 1 <= estimates.iqm_low[0] <= 4.5 <= estimates.iqm_high[0] <= 8


def test_stratified_bootstrap_ci_collapses_when_seeds_agree_within_each_game():
    scores = np.array([[0.2, 0.4, 0.9]] * 5)  # resampling seeds within a game changes nothing
    estimates = analyze.interval_estimates({"a": scores}, reps=200)
    assert estimates.iqm_low[0] == pytest.approx(estimates.iqm[0]) == pytest.approx(estimates.iqm_high[0])
    assert estimates.optimality_gap[0] == pytest.approx((0.8 + 0.6 + 0.1) / 3)  # mean of max(1 - x, 0)


@pytest.mark.parametrize("env, score, expected", [
    ("Breakout-v5", 30.5, 1.0), ("Breakout-v5", 1.7, 0.0), ("Pong-v5", -3.05, 0.5),
    ("Qbert-v5", 163.9 + 13291.1 * 2, 2.0), ("DoubleDunk-v5", -17.5, 0.5), ("CartPole-v1", 123.0, 123.0),
])
def test_human_normalisation(env, score, expected):
    assert analyze.human_normalised(score, env) == pytest.approx(expected)


def test_dry_run_and_budgets(capsys, tmp_path):
    argv = ["--script", "ppo_atari_envpool", "--env-ids", "Pong-v5", "Breakout-v5", "--seeds", "1", "2", "3",
            "--out-dir", str(tmp_path), "--dry-run", "--"]
    assert launch.main(argv[:-1] + ["--fixed-budget", "--total-timesteps", "1000", "--", "--num-envs", "1", "2", "--num-steps", "128"])["runs"] == 12
    fixed = capsys.readouterr().out.splitlines()
    assert len(fixed) == 12 and all("--total-timesteps 1000" in line for line in fixed)
    launch.main(argv[:-1] + ["--iterations", "3", "--", "--num-envs", "1", "2"])  # num-steps: the script's 128
    scaled = capsys.readouterr().out.splitlines()
    assert sum("--num-envs 2 --total-timesteps 768 " in line for line in scaled) == 6
    assert sum("--num-envs 1 --total-timesteps 384 " in line for line in scaled) == 6
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """2 configs x 2 seeds of tiny PPO runs, plus one config whose flags the script refuses."""
    out = tmp_path_factory.mktemp("grid")
    first = launch.main(ATARI + ["--out-dir", str(out), "--workers", "2", "--", "--num-envs", "4", "8", *TINY])
    failed = launch.main(ATARI + ["--out-dir", str(out), "--retries", "1", "--", "--num-envs", "3", *TINY[:3], "5", *TINY[4:]])
    again = launch.main(ATARI + ["--out-dir", str(out), "--workers", "2", "--", "--num-envs", "4", "8", *TINY])
    return out, first, failed, again


def test_grid_runs_then_skips_and_reports_failures(grid):
    out, first, failed, again = grid
    assert first == {"done": 4, "skipped": 0, "failed": 0}
    assert again == {"done": 0, "skipped": 4, "failed": 0}
    assert failed == {"done": 0, "skipped": 0, "failed": 2}
    record = json.loads(next((out / "runs").glob("*num-envs=3*/failed.json")).read_text())
    assert record["returncode"] == 2 and "--num-minibatches" in open(record["log"]).read()
    assert not list((out / "runs").glob("*num-envs=3*/runs"))  # nothing half-written


def test_analysis_of_the_grid(grid):
    out = grid[0]
    aggregate = analyze.main([str(out), "--reps", "200", "--points", "4", "--x-flag", "num-envs"])
    assert sorted(aggregate.config) == ["num-envs=4", "num-envs=8"]
    runs = pd.read_csv(out / "analysis" / "runs.csv")
    assert {"run", "script", "env", "seed", "num-envs", "step", "tag", "value"} <= set(runs.columns)
    assert runs.run.nunique() == 4  # the failed config has no logs
    # the IQM of two seeds of one game is their mean; check it against the table by hand
    returns = runs[runs.tag == "charts/episodic_return"]
    for envs, row in zip([4, 8], aggregate.sort_values("config").itertuples()):
        finals = []
        for _, r in returns[returns["num-envs"] == envs].groupby("run"):
            finals.append(r[r.step >= r.step.max() - 0.1 * (r.step.max() - r.step.min())].value.mean())
        assert row.iqm == pytest.approx(np.mean([analyze.human_normalised(f, "Breakout-v5") for f in finals]))
    for name in ["curves.png", "final_vs_flag.png", "dynamics.png", "ddr.png"]:
        image = matplotlib.image.imread(out / "analysis" / name)
        assert image.shape[0] > 200 and image[..., :3].std() > 0.05, name  # drawn, not blank
    report = (out / "analysis" / "report.md").read_text()
    assert "| config | runs | iqm |" in report and "![learning dynamics](dynamics.png)" in report


def test_slurm_path_through_submitit_debug_executor(tmp_path):
    counts = launch.main(["--script", "noisy_sgd", "--seeds", "1", "--out-dir", str(tmp_path), "--slurm",
                          "--slurm-cluster", "debug", "--", "--num-steps", "50", "100", "--num-seeds", "2"])
    assert counts == {"done": 2, "skipped": 0, "failed": 0}
    assert len(list((tmp_path / "runs").glob("*/runs/*/eta_*"))) == 8  # 2 runs x 4 step sizes


RUNNERS = Path(__file__).resolve().parents[1] / "benchmark" / "runners"


def run_runner(name, tmp_path, **env):
    return subprocess.run(["bash", str(RUNNERS / name)], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHON=sys.executable, OUT_DIR=str(tmp_path), WANDB_MODE="offline", **env))


@pytest.mark.parametrize("runner, commands", [
    ("atari10_nenvs.sh", 2 * 10 * 5 * 7), ("atari10_epochs.sh", 10 * 5 * 9), ("atari10_encoders.sh", 2 * 10 * 5 * 7),
    ("pqn_nenvs.sh", 10 * 5 * 7), ("rnd_nenvs.sh", 2 * 5 * 4), ("recipes.sh", 5 * (5 * 3 + 4)),
    ("com_eps.sh", 3 * 5 * 5), ("ddr_budgets.sh", 3 * 3 * 3 * 3), ("noisy_sgd.sh", 1 + 2), ("sfl_scaling.sh", 3 * 3),
])
def test_runners_expand_the_papers_grids(tmp_path, runner, commands):
    result = run_runner(runner, tmp_path, DRY_RUN="1")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("(cd ")]
    assert len(lines) == commands and len(set(lines)) == commands


def test_smoke_runner_runs_its_grid_and_analysis(tmp_path):
    result = run_runner("noisy_sgd.sh", tmp_path, SMOKE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    for grid in ["step_sizes", "switch"]:
        report = (tmp_path / grid / "analysis" / "report.md").read_text()
        assert "![noisy SGD](noisy_sgd.png)" in report
    aggregate = pd.read_csv(tmp_path / "switch" / "analysis" / "aggregate.csv").set_index("config")
    assert sorted(aggregate.index) == ["switch-step-size=0.001", "switch-step-size=0.3"]
    # 100 steps after switching to 0.3, every step size's run sits on 0.3's plateau, ||x|| ~ sqrt(9 0.3 / (4 0.7))
    assert -1.4 < aggregate.loc["switch-step-size=0.3", "iqm"] < -0.6


def test_grid_of_a_jax_script(tmp_path):
    counts = launch.main(["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--seeds", "1", "--iterations", "3",
                          "--workers", "2", "--out-dir", str(tmp_path), "--", "--num-envs", "4", "8", "--num-steps", "32",
                          "--num-minibatches", "2"])
    assert counts == {"done": 2, "skipped": 0, "failed": 0}
    aggregate = analyze.main([str(tmp_path), "--reps", "100", "--points", "3", "--tag", "charts/episodic_return"])
    assert sorted(aggregate.config) == ["num-envs=4", "num-envs=8"] and (aggregate.iqm > 5).all()  # CartPole returns
