"""benchmark/launch.py and benchmark/analyze.py on real grids of real runs: run identity, bad flags refused
before anything runs, locking under two launchers at once, retries that keep logs and resume from checkpoints
(after a kill, and after a Slurm-style preemption through submitit), the statistics against rliable and by hand,
missing runs, noisy_sgd's sub-runs, per-config curves, the runners' grids and a SMOKE runner end to end."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import psutil
import pytest
import scipy.stats
import submitit

from benchmark import analyze, configs, coverage_metric, events, launch, stats
from helpers import read_only
from helpers import shared_runs

ROOT = Path(__file__).resolve().parents[1]
# the JAX runs compile at XLA's optimisation level 0 (conftest.py), but those under a time limit (default_compile)
pytestmark = pytest.mark.usefixtures("fast_compile")
RUNNERS = ROOT / "benchmark" / "runners"
# enough steps per env for a few full games of Breakout
ATARI = ["--script", "ppo_atari_envpool", "--env-ids", "Breakout-v5", "--seeds", "1", "2", "--fixed-budget", "--total-timesteps", "4096"]
TINY = ["--num-steps", "16", "--num-minibatches", "2", "--dynamics-every", "4", "--dynamics-batch", "64"]
CARTPOLE = ["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--seeds", "1"]
CARTPOLE_FLAGS = ["--", "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2"]
LONG = ["--iterations", "300", "--save-every", "10"]  # long enough to be interrupted between two checkpoints
# a torch script that checkpoints when signalled, at CartPole's batch of 128 (4 envs x 32 steps)
BREAKOUT = ["--script", "ppo_atari_envpool", "--env-ids", "Breakout-v5", "--seeds", "1"]
BREAKOUT_FLAGS = ["--", "--num-envs", "4", "--num-steps", "32", "--update-epochs", "1", "--dynamics-every", "0"]
BREAKOUT_LONG = ["--iterations", "20", "--save-every", "4"]


def names(tmp_path, argv, capsys):
    """The run directories a dry run of `argv` prints, in order."""
    launch.main(argv + ["--out-dir", str(tmp_path), "--dry-run"] if "--" not in argv else
                argv[:argv.index("--")] + ["--out-dir", str(tmp_path), "--dry-run"] + argv[argv.index("--"):])
    return [line.split(" && ")[0].split("/")[-1] for line in capsys.readouterr().out.splitlines()]


def launch_cli(argv, **kwargs):
    return subprocess.run([sys.executable, str(ROOT / "benchmark" / "launch.py"), *argv], capture_output=True, text=True,
                          env=dict(os.environ, WANDB_MODE="offline"), **kwargs)


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------
def test_iqm_is_the_mean_of_the_middle_half():
    scores = np.arange(1.0, 9.0).reshape(4, 2)  # 4 seeds x 2 games: the middle half is 3, 4, 5, 6
    points, ci = stats.iqm_estimates(list(scores.T), reps=200)
    assert points[0] == pytest.approx(4.5) and points[1] == pytest.approx(4.5) and points[2] == pytest.approx(4.5)
    assert points[3] == pytest.approx(0.0)  # every score >= 1: no optimality gap
    assert 1 <= ci[0, 0] <= 4.5 <= ci[1, 0] <= 8


def test_stratified_bootstrap_ci_collapses_when_seeds_agree_within_each_game():
    scores = np.array([[0.2, 0.4, 0.9]] * 5)  # resampling seeds within a game changes nothing
    points, ci = stats.iqm_estimates(list(scores.T), reps=200)
    assert ci[0, 0] == pytest.approx(points[0]) == pytest.approx(ci[1, 0])
    assert points[3] == pytest.approx((0.8 + 0.6 + 0.1) / 3)  # mean of max(1 - x, 0)


def test_same_data_and_seed_give_the_same_cis_and_leave_numpy_alone():
    groups = list(np.random.default_rng(0).normal(size=(5, 3)).T)
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    a = stats.iqm_estimates(groups, reps=300, seed=7)
    b = stats.iqm_estimates(groups, reps=300, seed=7)
    c = stats.iqm_estimates(groups, reps=300, seed=8)
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # the global generator is restored
    ragged = [groups[0][:3], groups[1], groups[2]]
    np.testing.assert_array_equal(stats.iqm_estimates(ragged, 300, seed=7)[1], stats.iqm_estimates(ragged, 300, seed=7)[1])


def test_ragged_statistics_are_rliables_on_complete_data():
    x = np.random.default_rng(1).gamma(2.0, 0.5, size=(6, 4))
    np.testing.assert_allclose(stats._ragged_metrics(list(x.T)), stats._rliable_metrics(x), rtol=1e-12)
    # the CIs of the two resamplers estimate the same interval
    complete = stats.iqm_estimates(list(x.T), reps=3000, seed=0)[1]
    rng = np.random.default_rng(0)
    boot = np.array([stats._ragged_metrics([g[rng.integers(6, size=6)] for g in x.T]) for _ in range(3000)])
    np.testing.assert_allclose(np.percentile(boot, [2.5, 97.5], axis=0), complete, atol=0.05)


def test_a_missing_run_drops_nothing_else():
    """Pong seed 3 is missing: Breakout seed 3 still counts, and IQM is taken over the 5 runs that exist."""
    frame = pd.DataFrame({"env": ["Pong-v5"] * 2 + ["Breakout-v5"] * 3, "seed": [1, 2, 1, 2, 3],
                          "normalised": [0.1, 0.2, 0.5, 0.7, 0.9]})
    out = stats.estimate(frame, "normalised", "iqm", reps=200)
    assert out["iqm"] == pytest.approx(scipy.stats.trim_mean([0.1, 0.2, 0.5, 0.7, 0.9], 0.25))
    assert out["mean"] == pytest.approx((0.15 + 0.7) / 2)  # the mean of the per-game means, as rliable's
    assert out["median"] == pytest.approx((0.15 + 0.7) / 2)


def test_mean_statistic_is_the_student_t_interval_over_seeds():
    frame = pd.DataFrame({"env": ["locomotion"] * 4, "seed": [1, 2, 3, 4], "v": [0.2, 0.4, 0.5, 0.9]})
    out = stats.estimate(frame, "v", "mean", reps=0)
    half = scipy.stats.t.ppf(0.975, 3) * np.std([0.2, 0.4, 0.5, 0.9], ddof=1) / 2
    assert out["mean"] == pytest.approx(0.5) and out["mean_high"] - out["mean"] == pytest.approx(half)


@pytest.mark.parametrize("env, score, expected", [
    ("Breakout-v5", 30.5, 1.0), ("Breakout-v5", 1.7, 0.0), ("Pong-v5", -3.05, 0.5),
    ("Qbert-v5", 163.9 + 13291.1 * 2, 2.0), ("DoubleDunk-v5", -17.5, 0.5), ("CartPole-v1", 123.0, 123.0),
])
def test_human_normalisation(env, score, expected):
    assert stats.human_normalised(score, env) == pytest.approx(expected)


def test_downsample_keeps_few_steps_and_bins_many():
    x, y = events.downsample(np.array([0, 10, 10, 20]), np.array([1.0, 2.0, 4.0, 5.0]), points=5)
    np.testing.assert_array_equal(x, [0, 10, 20])
    np.testing.assert_array_equal(y, [1, 3, 5])
    steps = np.arange(1000)
    x, y = events.downsample(steps, steps * 2.0, points=10)
    assert len(x) == 10 and x[0] == pytest.approx(49.5) and y[-1] == pytest.approx(2 * 949.5)


def test_config_columns_are_the_fewest_that_tell_configs_apart():
    rows = [{"run": i, "env": "", "seed": 1, "num-envs": n, "num-steps": 1024 // n, "gamma": 0.99, "subrun": ""}
            for i, n in enumerate([1, 2, 4])]
    assert configs.config_columns(rows, ["num-envs", "num-steps"]) == ["num-envs"]  # num-steps follows from num-envs
    rows.append({**rows[0], "run": 9, "num-steps": 128})
    assert configs.config_columns(rows, ["num-envs", "num-steps"]) == ["num-envs", "num-steps"]


# ---------------------------------------------------------------------------------------------
# Run identity and bad input (dry runs)
# ---------------------------------------------------------------------------------------------
def test_run_identity_is_the_resolved_command(tmp_path, capsys):
    base = ["--script", "noisy_sgd", "--seeds", "1"]
    pilot, real = (names(tmp_path, base + ["--", "--num-steps", n], capsys) for n in ("100", "100000"))
    assert pilot != real  # the budget is part of the identity
    a = names(tmp_path, base + ["--", "--num-steps", "100", "--dim", "20"], capsys)
    b = names(tmp_path, base + ["--", "--dim", "20", "--num-steps", "100"], capsys)
    assert a == b  # the order of flags does not matter: one directory
    default = names(tmp_path, base + ["--", "--num-steps", "100"], capsys)
    given = names(tmp_path, base + ["--", "--num-steps", "100", "--dim", "50", "--noise-std", str(3 / 50 ** 0.5)], capsys)
    assert default == given  # 50 is the default dim, 3/sqrt(50) the noise resolve_args fills in
    # a run two runners share (Fig. 1's 8 x 128 and the epochs grid's, with explicit defaults) is one directory
    atari = ["--script", "ppo_atari_envpool", "--env-ids", "Pong-v5", "--fixed-budget", "--total-timesteps", "1000000"]
    assert names(tmp_path, atari + ["--", "--num-envs", "8", "--num-steps", "128"], capsys) == \
        names(tmp_path, atari + ["--", "--update-epochs", "4", "--num-steps", "128", "--num-envs=8", "--num-minibatches", "4"], capsys)
    assert names(tmp_path, base + ["--", "--num-steps=100"], capsys) == pilot  # --flag=value is a value
    long = names(tmp_path, base + ["--", "--num-steps", "100", "--exp-name", "x" * 128], capsys)
    # whole fields only: the longest --exp-name a script takes (128 bytes) fills the readable part, num-steps is left out
    assert len(long[0]) < 200 and re.fullmatch(r"noisy_sgd__exp-name=x{128}__etc__s1__[0-9a-f]{10}", long[0]), long[0]


def test_budgets_from_iterations_follow_the_scripts_own_batch(tmp_path, capsys):
    launch.main(["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--iterations", "3", "--out-dir", str(tmp_path),
                 "--dry-run", "--", "--num-envs", "32", "--num-steps", "16", "--base-num-envs", "16",
                 "--base-num-minibatches", "4", "--scaling-recipe", "more-minibatches"])
    assert "--total-timesteps 1536" in capsys.readouterr().out  # 3 x 32 x 16
    # the script's own default rollout: ppo_ewma_jax.py's 256 steps (Table 2), ppo_ewma_brax.py's 10 (PureJaxRL's)
    for script, env_id, total in (("ppo_ewma_jax", "CartPole-v1", "24576"), ("ppo_ewma_brax", "ant", "960")):
        launch.main(["--script", script, "--env-ids", env_id, "--iterations", "3", "--out-dir", str(tmp_path), "--dry-run",
                     "--", "--num-envs", "32"])
        lines = capsys.readouterr().out.splitlines()
        assert [line.split("--total-timesteps ")[1].split()[0].rstrip(")") for line in lines if line.startswith("(cd ")] == \
            [total]  # 3 x 32 x 256, 3 x 32 x 10
    launch.main(["--script", "noisy_sgd", "--iterations", "7", "--out-dir", str(tmp_path), "--dry-run"])
    assert "--num-steps 7" in capsys.readouterr().out  # noisy_sgd: gradient steps
    launch.main(["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--iterations", "1", "--out-dir", str(tmp_path),
                 "--dry-run", "--", "--anneal-lr", "True", "False"])
    lines = capsys.readouterr().out.splitlines()
    assert sum("--anneal-lr" in line for line in lines) == 1 and len(lines) == 2  # a switch's grid values


@pytest.mark.parametrize("grid, text", [
    (["--", "--num-stepz", "4"], "--num-stepz: noisy_sgd.py has no such flag"),
    (["--", "--num-steps", "four"], "--num-steps"),
    (["--", "--step-sizes", "2.0"], "--step-sizes must each lie in (0, 1)"),  # the script's own resolve_args
    (["--fixed-budget", "--total-timesteps", "5"], "noisy_sgd.py has no --total-timesteps"),
    (["--seeds", "2147483648"], "--seeds must lie in [0, 2^31)"),
    (["--", "--seed", "3"], "--seed after -- is set by the launcher's --seeds"),
    (["--iterations", "5", "--", "--num-steps", "3"], "--num-steps after -- is set by the launcher's --iterations"),
    (["--workers", "0"], "--workers must be positive"),
    (["--script", "../benchmark/common"], "--script must name one of cleanrl_scale/'s scripts, noisy_sgd, ppo_atari_envpool"),
    (["--", "--step-sizes", "0.1", "0.1"], "grid flag --step-sizes: the value 0.1 is given twice"),
    (["--iterations", "0"], "--iterations must be positive (got 0)"),  # not the script's default budget
    (["--iterations", "-2"], "--iterations must be positive (got -2)"),
    (["--total-timesteps", "0"], "--total-timesteps is every run's budget only with --fixed-budget"),
    # argparse's own errors: one line, not its usage block
    (["--workers", "two"], "argument --workers: invalid int value: 'two'"),
    (["--slurm", "--slurm-cluster", "nowhere"], "argument --slurm-cluster: invalid choice: 'nowhere'"),
])
def test_bad_flags_stop_the_launch_with_one_line(tmp_path, grid, text):
    split = grid.index("--") if "--" in grid else len(grid)
    result = launch_cli(["--script", "noisy_sgd", "--out-dir", str(tmp_path), *grid[:split], *grid[split:]])
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("launch.py: error:") and text in lines[0], result.stderr
    assert not any(tmp_path.iterdir())  # nothing registered, nothing run


def test_a_launch_without_script_is_refused_with_one_line(tmp_path):
    result = launch_cli(["--out-dir", str(tmp_path), "--seeds", "1"])
    assert result.returncode == 2 and result.stderr == "launch.py: error: the following arguments are required: --script\n", \
        result.stderr
    assert not any(tmp_path.iterdir())


def test_slurm_without_slurm_is_refused_unless_the_local_path_is_asked_for(tmp_path):
    """Without sbatch on PATH, --slurm would run the runs here through submitit's local executor (and say it submitted
    them): refused before anything is written. A dry run, and --slurm-cluster local or debug, need no Slurm."""
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(d, "sbatch")))
    argv = [sys.executable, str(ROOT / "benchmark" / "launch.py"), "--script", "noisy_sgd", "--out-dir", str(tmp_path / "out"),
            "--slurm", "--", "--num-steps", "10"]
    env = dict(os.environ, PATH=path, WANDB_MODE="offline")
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stdout + result.stderr
    assert result.stderr.startswith("launch.py: error: --slurm: no Slurm here (no sbatch on PATH)"), result.stderr
    assert not any(tmp_path.iterdir())
    dry = subprocess.run(argv[:-3] + ["--dry-run"] + argv[-3:], capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode == 0 and "noisy_sgd.py --num-steps 10" in dry.stdout, dry.stderr


@pytest.mark.parametrize("out_dir, store, text", [
    ("out", "notes", "--store: {tmp}/notes is not a directory"),
    ("dangling", None, "--out-dir: {tmp}/dangling is not a directory"),
    ("grid", "store", "--out-dir: {tmp}/grid/runs is not a directory"),
    ("notes/out", None, "--out-dir: {tmp}/notes/out lies under {tmp}/notes, which is not a directory"),
    ("out", "notes/a/store", "--store: {tmp}/notes/a/store lies under {tmp}/notes, which is not a directory"),
    ("locked/out", None, "--out-dir: cannot write {tmp}/locked, where {tmp}/locked/out goes"),
    ("out", "locked/store", "--store: cannot write {tmp}/locked, where {tmp}/locked/store goes"),
])
@pytest.mark.parametrize("dry_run", [False, True], ids=["launch", "dry-run"])
def test_an_out_dir_or_store_that_cannot_be_written_stops_the_launch_with_one_line(tmp_path, capsys, out_dir, store,
                                                                                   text, dry_run):
    """A file (or a dangling link) where the directory, one of its parents or the grid's runs/ should be, or an unwritable
    parent (a read-only mount for root): refused before anything is registered, a dry run too."""
    (tmp_path / "notes").write_text("notes")
    (tmp_path / "locked").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "grid").mkdir()
    (tmp_path / "grid" / "runs").write_text("notes")
    argv = ["--script", "noisy_sgd", "--out-dir", str(tmp_path / out_dir)] + (["--store", str(tmp_path / store)] if store else [])
    with read_only(tmp_path / "locked"), pytest.raises(SystemExit) as stopped:
        launch.main(argv + ["--dry-run"] * dry_run)
    assert stopped.value.code == 2 and capsys.readouterr().err == f"launch.py: error: {text.format(tmp=tmp_path)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "grid", "locked", "notes"]
    assert not any((tmp_path / "locked").iterdir()) and [p.name for p in (tmp_path / "grid").iterdir()] == ["runs"]


def test_speed_flags_are_not_part_of_a_run_s_identity_and_seeds_stay_one_a_run(tmp_path, capsys):
    """ppo_ewma_jax's --fuse-iterations, --unroll and --no-compile-cache change no number it learns: the same run;
    --num-seeds would put several seeds' runs in one run directory: refused, --seeds gives them."""
    base = ["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--iterations", "2"]
    plain = names(tmp_path / "a", base, capsys)
    assert names(tmp_path / "b", base + ["--", "--fuse-iterations", "2", "--unroll", "2", "--no-compile-cache"], capsys) == plain
    result = launch_cli(base + ["--out-dir", str(tmp_path / "c"), "--", "--num-seeds", "4"])
    assert result.returncode == 2 and "--num-seeds after --: give the seeds with --seeds" in result.stderr
    assert not (tmp_path / "c").exists()


def test_consecutive_seeds_of_small_batches_are_packed(tmp_path, capsys):
    """--seeds-per-process 0: the runs that differ only in consecutive seeds share a process while their batches fit
    262,144 transitions; every run keeps its own line and directory."""
    base = ["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--seeds", "1", "2", "3", "5", "--out-dir"]
    launch.main(base + [str(tmp_path / "a"), "--dry-run", "--", "--num-envs", "4", "--total-timesteps", "4096"])
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines if line.startswith("(cd ")]) == 4
    (pack,) = [line for line in lines if line.startswith("# seeds 1..3 in one process: (cd ")]
    assert pack.endswith("--num-seeds 3)") and "__s1__" in pack and "--seed " not in pack  # seed 5 runs alone
    for flags, packed in ((["--seeds-per-process", "2"], ["# seeds 1..2"]), (["--seeds-per-process", "1"], []),
                          ([], [])):  # ... and at Table 2's 2,048 x 256, no pack
        num_envs = "4" if flags else "2048"
        launch.main(base + [str(tmp_path / "b"), "--dry-run", *flags, "--", "--num-envs", num_envs])
        assert [line[:12] for line in capsys.readouterr().out.splitlines() if line.startswith("# ")] == packed


def test_a_pack_trains_each_seed_into_its_own_run(tmp_path):
    """Three seeds in one process: each run directory gets its seed's TensorBoard run and its status, the middle seed's
    numbers those of the same run launched alone; a pack's checkpoint is not resumed by a launch that packs otherwise."""
    grid = ["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--iterations", "3", "--save-every", "3"]
    flags = ["--", "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2", "--dynamics-every", "0"]
    assert launch.main([*grid, "--seeds", "1", "2", "3", "--out-dir", str(tmp_path / "pack"), *flags]) == \
        {"done": 3, "skipped": 0, "failed": 0}
    assert launch.main([*grid, "--seeds", "2", "--out-dir", str(tmp_path / "alone"), *flags]) == \
        {"done": 1, "skipped": 0, "failed": 0}
    dirs = sorted((tmp_path / "pack" / "runs").iterdir(), key=lambda p: json.loads((p / "command.json").read_text())["seed"])
    for seed, d in zip((1, 2, 3), dirs):
        (tb_run,) = (d / "runs").iterdir()
        assert tb_run.name.split("__")[2] == str(seed)
        done = json.loads((d / "done.json").read_text())
        assert done["pack"] == [p.name for p in dirs] and done["log"] == str(d / "stdout.log")
        assert (d / "stdout.log").read_text().startswith("$ python ppo_ewma_jax.py ")  # the pack's log, in every member
    assert list(dirs[0].glob("runs/*/checkpoints/iter_3.npz")) and not list(dirs[1].glob("runs/*/checkpoints/*"))
    (alone,) = (tmp_path / "alone" / "runs").iterdir()
    assert alone.name == dirs[1].name  # the same run
    tags = {"losses/value_loss", "charts/episodic_return"}
    packed, lone = (events.read_merged_scalars(d, tags)[0][""] for d in (dirs[1], alone))
    for tag in tags:
        np.testing.assert_allclose(packed[tag][1], lone[tag][1], rtol=2e-4, err_msg=tag)
    (dirs[0] / "done.json").unlink()  # the first seed to run again, alone: its checkpoint holds 3 seeds
    result = launch_cli([*grid, "--seeds", "1", "--out-dir", str(tmp_path / "pack"), *flags])
    assert "holds seeds 1..3, this launch trains 1 from it: relaunch with all of them among --seeds" in result.stdout
    assert list(dirs[0].glob("runs/*/checkpoints/iter_3.npz"))  # left where it was


def test_packs_form_around_checkpoints(tmp_path, capsys):
    """A run whose directory holds a checkpoint resumes it with the seeds it holds; no pack takes in a run that has
    one of its own (it would start it over)."""
    base = ["--script", "ppo_ewma_jax", "--env-ids", "CartPole-v1", "--seeds", "0", "1", "2", "3", "4", "--out-dir",
            str(tmp_path), "--", "--num-envs", "4", "--total-timesteps", "4096"]

    def packed():
        launch.main(base[:-5] + ["--dry-run"] + base[-5:])
        return [line.split(" in one")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("# ")]

    assert packed() == ["# seeds 0..4"]
    launch.main(base[:-5] + ["--dry-run"] + base[-5:])
    dirs = {int(line.split("__s")[-1].split("__")[0]): Path(line[4:].split(" && ")[0])
            for line in capsys.readouterr().out.splitlines() if line.startswith("(cd ")}

    def checkpoint(seed, seeds):  # the file ppo_ewma_jax.py writes: its metadata names --num-seeds
        path = dirs[seed] / "runs" / f"x__{seed}__1" / "checkpoints" / "iter_5.npz"
        path.parent.mkdir(parents=True)
        np.savez(path, meta=np.array(json.dumps({"args": {"num_seeds": seeds}})))

    checkpoint(1, 3)
    assert packed() == ["# seeds 1..3"]  # 0 and 4 alone: not consecutive with the pack's
    checkpoint(2, 1)
    assert packed() == ["# seeds 3..4"]  # 1 cannot take 2 in (resumed_argv says so at launch); 2 resumes alone


# ---------------------------------------------------------------------------------------------
# Real grids
# ---------------------------------------------------------------------------------------------
def test_noisy_sgd_step_sizes_are_four_curves_equal_to_the_scripts_csv(tmp_path):
    counts = launch.main(["--script", "noisy_sgd", "--out-dir", str(tmp_path), "--", "--num-steps", "40", "80", "--num-seeds", "3"])
    assert counts == {"done": 2, "skipped": 0, "failed": 0}
    analyze.main([str(tmp_path), "--points", "100", "--reps", "100"])
    curves = pd.read_csv(tmp_path / "analysis" / "curves.csv")
    assert curves.config.nunique() == 8  # 2 budgets x 4 step sizes, none merged
    for run in (tmp_path / "runs").iterdir():
        steps = json.loads((run / "command.json").read_text())["resolved"]["num_steps"]
        (csv_path,) = run.glob("runs/*/curves.csv")
        table = pd.read_csv(csv_path).groupby(["step_size", "step"]).neg_distance.mean()
        for eta in (0.001, 0.01, 0.1, 0.3):
            curve = curves[curves.config == f"num-steps={steps} subrun=eta_{eta:g}"]
            assert curve.x.max() == steps  # each config on its own steps
            np.testing.assert_allclose(curve["mean"], table.loc[eta].to_numpy(), rtol=1e-6)
    image = matplotlib.image.imread(tmp_path / "analysis" / "curves.png")
    assert image[..., :3].std() > 0.05


def test_two_launchers_at_once_run_each_run_once(tmp_path):
    argv = ["--script", "noisy_sgd", "--seeds", "1", "2", "3", "--out-dir", str(tmp_path), "--",
            "--num-steps", "3000", "--num-seeds", "20"]
    first, second = (subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "launch.py"), *argv], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True) for _ in range(2))
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    counts = [{state: int(n) for n, state in re.findall(r"(\d+) (\w+)", out.strip().splitlines()[-1])} for out in outputs]
    ran = sum(c["done"] for c in counts)
    assert ran == 3 and sum(c["done"] + c["skipped"] + c.get("busy", 0) for c in counts) == 6, outputs
    for run in (tmp_path / "runs").iterdir():
        assert len(list((run / "runs").iterdir())) == 1  # one TensorBoard run
        assert (run / "done.json").exists() and not (run / "failed.json").exists()
        assert not list(run.glob("stdout.log.*"))


def test_a_failed_run_is_retried_keeping_every_log_and_bad_input_is_not(tmp_path, monkeypatch):
    # a run that passes every flag rule and fails at run time (exit 1): its Python starts with a sitecustomize that
    # exits with 1 (the scripts now refuse before any compute the inputs that used to fail this way, e.g. a --dim too big)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import sys\nsys.exit('a failure at run time')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    counts = launch.main(["--script", "noisy_sgd", "--out-dir", str(tmp_path), "--retries", "1", "--", "--num-steps", "5"])
    monkeypatch.delenv("PYTHONPATH")
    assert counts["failed"] == 1
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "stdout.log").exists() and (run / "stdout.log.1").exists()
    assert "a failure at run time" in (run / "stdout.log.1").read_text()
    assert json.loads((run / "failed.json").read_text())["returncode"] == 1 and not (run / "runs").exists()
    # a run the script refuses (exit 2) is bad input: never retried
    record = {**json.loads((run / "command.json").read_text()), "name": "refused", "argv": ["--num-steps", "0"]}
    (tmp_path / "store" / "refused").mkdir(parents=True)
    assert launch.attempt_with_retries(record, tmp_path / "store", retries=3) == "failed"
    assert not list((tmp_path / "store" / "refused").glob("stdout.log.*"))
    assert json.loads((tmp_path / "store" / "refused" / "failed.json").read_text())["returncode"] == 2


def wait_for_checkpoint(run_dir, process, timeout=300):
    start = time.time()
    while not list(Path(run_dir).glob("runs/*/checkpoints/iter_*")):
        assert process.poll() is None and time.time() - start < timeout, "no checkpoint appeared"
        time.sleep(0.5)
    time.sleep(0.5)  # let a few more iterations be logged past it


def assert_resumed(run_dir, iterations=300):
    """Two TensorBoard runs (the killed attempt and the resumed one) that analyze merges into one clean curve."""
    done = json.loads((run_dir / "done.json").read_text())
    assert done["resumed_from"] and "checkpoints/iter_" in done["resumed_from"]
    assert len(list((run_dir / "runs").iterdir())) == 2 and (run_dir / "stdout.log.1").exists()
    merged, _ = events.read_merged_scalars(run_dir, {"charts/SPS"})
    steps = merged[""]["charts/SPS"][0]
    assert list(steps) == sorted(set(steps)) and steps[-1] == iterations * 128  # every iteration once, to the end


@pytest.mark.usefixtures("default_compile")  # a time limit on the whole run
def test_a_killed_run_resumes_from_its_checkpoint_on_retry(tmp_path):
    argv = [*CARTPOLE, *LONG, "--retries", "1", "--out-dir", str(tmp_path), *CARTPOLE_FLAGS]
    launcher = subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "launch.py"), *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    while not list(tmp_path.glob("runs/*/command.json")):
        time.sleep(0.2)
    (run_dir,) = (p.parent.resolve() for p in tmp_path.glob("runs/*/command.json"))
    wait_for_checkpoint(run_dir, launcher)
    (script,) = psutil.Process(launcher.pid).children()  # the launcher runs the script as its child
    script.kill()
    output = launcher.communicate(timeout=600)[0]
    assert launcher.returncode == 0 and "failed with exit status -9" in output, output
    assert_resumed(run_dir)
    aggregate = analyze.main([str(tmp_path), "--reps", "100", "--tag", "charts/episodic_return"])
    assert aggregate.runs.sum() == 1


def test_ctrl_c_at_the_launcher_stops_its_run_with_a_checkpoint_and_the_next_launch_resumes_it(tmp_path):
    """A terminal's Ctrl-C (to the launcher's process group; each run has a group of its own) reaches the launcher,
    which passes it on once: the run checkpoints and says so, the launcher waits for it and exits 130 with the run
    recorded as preempted, not failed; launched again, it resumes."""
    argv = [*BREAKOUT, *BREAKOUT_LONG, "--out-dir", str(tmp_path), *BREAKOUT_FLAGS]
    launcher = subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "launch.py"), *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    while not list(tmp_path.glob("runs/*/command.json")):
        time.sleep(0.2)
    (run_dir,) = (p.parent.resolve() for p in tmp_path.glob("runs/*/command.json"))
    wait_for_checkpoint(run_dir, launcher)
    os.killpg(launcher.pid, signal.SIGINT)
    output = launcher.communicate(timeout=300)[0]
    assert launcher.returncode == 130 and "Traceback" not in output, output
    assert (run_dir / "preempted.json").exists() and not (run_dir / "failed.json").exists()
    # at the iteration's end, or during it with the checkpoint of its start (an iteration longer than STOP_SECONDS)
    assert re.search(r"stopped by signal 2 (after|during) iteration \d+; resume with --resume", (run_dir / "stdout.log").read_text())
    again = launch_cli(argv, timeout=600)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1].startswith("1 done"), again.stdout + again.stderr
    assert_resumed(run_dir, int(BREAKOUT_LONG[1]))


def test_slurm_preemption_requeues_and_resumes_through_submitit(tmp_path):
    """The signal Slurm sends a task before a timeout or preemption (USR2, submitit's), sent to a real submitit task:
    it stops the run and requeues itself, and the requeued task resumes from the run's newest checkpoint (the script
    writes one when the task stops it with SIGTERM, and exits 75). A torch run; a JAX run's .npz checkpoints take the
    same path in the launcher, and test_a_killed_run_resumes_from_its_checkpoint_on_retry resumes one."""
    argv = [*BREAKOUT, *BREAKOUT_LONG, "--out-dir", str(tmp_path), "--dry-run", *BREAKOUT_FLAGS]
    opts = launch.build_parser().parse_args(argv[:argv.index("--")])
    opts.store = str(tmp_path / "runs")
    (run,) = launch.expand(opts, launch.parse_grid(argv[argv.index("--") + 1:]))
    launch.register(opts, [run])
    executor = submitit.AutoExecutor(folder=tmp_path / "slurm", cluster="local")
    executor.update_parameters(timeout_min=10)
    job = executor.submit(launch.SlurmTask(), run, opts.store, 0)
    run_dir = tmp_path / "runs" / run["name"]
    start = time.time()
    while not list(run_dir.glob("runs/*/checkpoints/iter_*")):
        assert time.time() - start < 300 and not job.done(), "no checkpoint appeared"
        time.sleep(0.5)
    time.sleep(0.5)
    (task,) = psutil.Process(job._process.pid).children()  # submitit's local controller runs the task as its child
    task.send_signal(signal.SIGUSR2)
    assert job.result() == "done"
    assert_resumed(run_dir, int(BREAKOUT_LONG[1]))
    # stopped by SIGTERM, it checkpointed (the iteration it was in, or the start of it) and said so
    assert re.search(r"stopped by signal 15 (after|during) iteration", (run_dir / "stdout.log.1").read_text())


@shared_runs(minutes=3)
def grid(tmp_path_factory):
    """2 configs x 2 seeds of tiny PPO runs with 2 workers, launched twice."""
    out = tmp_path_factory.mktemp("grid")
    first = launch.main(ATARI + ["--out-dir", str(out), "--workers", "2", "--", "--num-envs", "4", "8", *TINY])
    again = launch.main(ATARI + ["--out-dir", str(out), "--workers", "2", "--", "--num-envs", "4", "8", *TINY])
    return out, first, again


def resolved(run_dir):
    return json.loads((run_dir / "command.json").read_text())["resolved"]


def test_grid_runs_then_skips(grid):
    out, first, again = grid
    assert first == {"done": 4, "skipped": 0, "failed": 0}
    assert again == {"done": 0, "skipped": 4, "failed": 0}


def test_analysis_of_the_grid(grid):
    out = grid[0]
    aggregate = analyze.main([str(out), "--reps", "200", "--points", "4", "--x-flag", "num-envs", "--ddr"])
    assert list(aggregate.config) == ["num-envs=4", "num-envs=8"]
    scores = pd.read_csv(out / "analysis" / "scores.csv")
    assert {"run", "env", "seed", "num-envs", "final", "best", "ddr", "normalised"} <= set(scores.columns)
    assert scores.run.nunique() == 4
    # one game: the mean over seeds of the final scores, checked against the raw event files by hand
    for envs, row in zip([4, 8], aggregate.itertuples()):
        finals = []
        for run_dir in [d for d in (out / "runs").iterdir() if resolved(d)["num_envs"] == envs]:
            merged, _ = events.read_merged_scalars(run_dir, {"charts/episodic_return"})
            steps, values = merged[""]["charts/episodic_return"]
            finals.append(values[steps >= steps.max() - 0.1 * (steps.max() - steps.min())].mean())
        assert row.mean == pytest.approx(np.mean([stats.human_normalised(f, "Breakout-v5") for f in finals]))
    for name in ["curves.png", "final_vs_flag.png", "dynamics_Breakout-v5.png", "ddr.png"]:
        image = matplotlib.image.imread(out / "analysis" / name)
        assert image.shape[0] > 200 and image[..., :3].std() > 0.05, name  # drawn, not blank
    report = (out / "analysis" / "report.md").read_text()
    assert "| config | runs | envs | mean |" in report and "## Runs per config and env" in report
    assert "Missing and failed" not in report


def test_coverage_of_the_grid(grid, tmp_path):
    """analyze.py --coverage on real runs: each run's states of its measured iterations, one projection per game."""
    out = tmp_path / "a"
    analyze.main([str(grid[0]), "--coverage", "--coverage-grid", "8", "--reps", "200", "--points", "4", "--output", str(out)])
    coverage, points = pd.read_csv(out / "coverage.csv"), pd.read_csv(out / "coverage_points.csv")
    assert coverage.run.nunique() == 4
    for run, c in coverage.groupby("run"):
        run_dir = grid[0] / "runs" / run
        num_envs = resolved(run_dir)["num_envs"]
        # iteration 1 and every 4th (TINY's --dynamics-every; --coverage-every's ~20 saves round to it), the 64 states
        # of the dynamics/ sample each (--coverage-samples' default: the whole sample)
        iterations = [1] + list(range(4, 4096 // (num_envs * 16) + 1, 4))
        assert c.iteration.tolist() == iterations and c.x.tolist() == [i * num_envs * 16 for i in iterations]
        assert len(coverage_metric.read_coverage(run_dir)) == 64 * len(iterations) == (points.run == run).sum()
        assert np.all(np.diff(c.cvg) >= 0) and 0 < c.cvg.iloc[-1] <= 1
        # the last value by hand: the cells of the run's projected states in the game's bounding box
        here = points[points.env == c.env.iloc[0]]
        low, high = here[["u", "v"]].min().to_numpy(), here[["u", "v"]].max().to_numpy()
        cells = coverage_metric.grid_cells(points[points.run == run][["u", "v"]].to_numpy(), low, high, 8)
        assert c.cvg.iloc[-1] == pytest.approx(len(np.unique(cells)) / 64, abs=1e-6)
        # one batch alone: the cells of each saved iteration's states, at most the cumulative share
        first = cells[:64]  # the records of iteration 1 come first
        assert c.cvg_batch.iloc[0] == pytest.approx(len(np.unique(first)) / 64) == pytest.approx(c.cvg.iloc[0])
        assert np.all(c.cvg_batch <= c.cvg + 1e-12)
    table = pd.read_csv(out / "coverage_aggregate.csv")
    assert table.config.tolist() == ["num-envs=4", "num-envs=8"] and (table.runs == 2).all()
    finals = coverage.sort_values("iteration").groupby("run").cvg.last()
    for row in table.itertuples():
        runs = coverage[coverage.config == row.config].run.unique()
        assert row.mean == pytest.approx(finals[runs].mean())
        assert row.batch_mean == pytest.approx(coverage[coverage.run.isin(runs)].groupby("run").cvg_batch.mean().mean())
    runs_table = pd.read_csv(out / "runs.csv")
    assert (runs_table.tag == coverage_metric.COVERAGE).sum() == len(coverage)
    image = matplotlib.image.imread(out / "coverage_Breakout-v5.png")
    assert image.shape[0] > 300 and image[..., :3].std() > 0.05
    assert "## Coverage (App. B.7" in (out / "report.md").read_text()


def test_analysis_of_one_env_of_a_grid(grid, tmp_path, capsys):
    out = grid[0]
    one = analyze.main([str(out), "--reps", "200", "--points", "4", "--envs", "Breakout-v5", "--output", str(tmp_path / "a")])
    assert list(one.runs) == [2, 2] and (tmp_path / "a" / "curves.png").is_file()
    with pytest.raises(SystemExit) as exit_info:
        analyze.main([str(out), "--envs", "Pong-v5", "--output", str(tmp_path / "b")])
    assert exit_info.value.code == 2 and "--envs Pong-v5: no run of the grid has that env" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_fast_reader_equals_the_record_walk_on_real_event_files(grid, tmp_path):
    """The byte-level reader (tag bytes found in the whole file, each scalar read around them) returns exactly what
    parsing every record with TensorBoard's protobuf returns, and takes its fast path on what the scripts write
    (PPO with dynamics/, noisy_sgd's step 0)."""
    launch.main(["--script", "noisy_sgd", "--out-dir", str(tmp_path), "--", "--num-steps", "20", "--num-seeds", "1"])
    files = list(grid[0].glob("runs/*/runs/*/events.out.*")) + list(tmp_path.glob("runs/*/runs/*/*/events.out.*"))
    tags, prefixes = {"charts/episodic_return", "charts/ddr", "charts/neg_distance", "charts/SPS"}, ("dynamics/", "losses/")
    assert len(files) == 8
    for file in files:
        fast, _ = events.read_event_file(file, tags, prefixes)
        walked, _ = events.read_event_file(file, tags, prefixes, fast=False)
        assert fast.keys() == walked.keys() and len(fast) >= 1
        for tag in fast:
            np.testing.assert_array_equal(fast[tag][0], walked[tag][0])
            np.testing.assert_array_equal(fast[tag][1], walked[tag][1])
        data = file.read_bytes()
        assert events._find_scalars(data, [t.encode() for t in tags] + [p.encode() for p in prefixes], tags, prefixes) is not None
        truncated = tmp_path / "truncated"  # a killed run's last record, cut short, is dropped by both paths
        truncated.write_bytes(data[:-7])
        cut, _ = events.read_event_file(truncated, tags, prefixes)
        assert sum(len(s) for s, _ in cut.values()) in (sum(len(s) for s, _ in fast.values()) - 1, sum(len(s) for s, _ in fast.values()))


def test_best_of_keeps_the_best_value_of_a_flag(grid):
    out = grid[0]
    both = analyze.main([str(out), "--reps", "100", "--points", "4"])
    best = analyze.main([str(out), "--reps", "100", "--points", "4", "--best-of", "num-envs"])
    assert len(best) == 1 and best.runs[0] == 2 and best["mean"][0] == pytest.approx(both["mean"].max())
    assert f"--best-of num-envs (chosen on these runs): all runs: num-envs={both.set_index('mean')['num-envs'][both['mean'].max()]}" \
        in (out / "analysis" / "report.md").read_text()


def test_a_missing_run_is_listed_and_the_rest_aggregated(grid):
    out = grid[0]
    victim = next(d for d in (out / "runs").iterdir() if resolved(d)["num_envs"] == 8 and resolved(d)["seed"] == 2).resolve()
    (victim / "done.json").rename(victim / "done.json.bak")
    try:
        aggregate = analyze.main([str(out), "--reps", "100", "--points", "4"]).set_index("config")
        assert aggregate.loc["num-envs=8", "runs"] == 1 and aggregate.loc["num-envs=4", "runs"] == 2
        report = (out / "analysis" / "report.md").read_text()
        assert "## Missing and failed runs" in report and f"| {victim.name} | not finished |" in report
    finally:
        (victim / "done.json.bak").rename(victim / "done.json")


def test_grids_sharing_a_store_share_a_run(tmp_path):
    argv = ["--script", "noisy_sgd", "--seeds", "1", "--dry-run", "--store", str(tmp_path / "store"), "--", "--num-steps", "10"]
    for grid in ("a", "b", "b"):  # b twice: a relaunch finds its links in place
        opts = launch.build_parser().parse_args(argv[:argv.index("--")] + ["--out-dir", str(tmp_path / grid)])
        launch.register(opts, launch.expand(opts, launch.parse_grid(argv[argv.index("--") + 1:])))
    (run,) = (tmp_path / "store").iterdir()
    assert [p.resolve() for p in (tmp_path / "a" / "runs").iterdir()] == [p.resolve() for p in (tmp_path / "b" / "runs").iterdir()] == [run]


def test_slurm_path_through_submitit_debug_executor(tmp_path):
    counts = launch.main(["--script", "noisy_sgd", "--seeds", "1", "--out-dir", str(tmp_path), "--slurm",
                          "--slurm-cluster", "debug", "--", "--num-steps", "50", "100", "--num-seeds", "2"])
    assert counts == {"done": 2, "skipped": 0, "failed": 0}
    assert len(list((tmp_path / "runs").glob("*/runs/*/eta_*"))) == 8  # 2 runs x 4 step sizes
    with pytest.raises(SystemExit) as exit:  # noisy_sgd has no training clock to plot against
        analyze.main([str(tmp_path), "--x-unit", "seconds"])
    assert exit.value.code == 2


def slurm_is_up():
    try:
        return subprocess.run(["sinfo", "--noheader"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not slurm_is_up(), reason="no Slurm controller here (README: a one-node Slurm in two commands)")
def test_a_relaunch_leaves_queued_runs_to_their_slurm_job(tmp_path, capsys):
    """On a real Slurm: while the node is taken, a launch's runs wait in the queue; a second launch submits nothing
    and reports them queued (squeue); once they ran, a third finds them done."""
    cpus = subprocess.run(["sinfo", "--noheader", "--format", "%c"], capture_output=True, text=True).stdout.split()[0]
    blocker = subprocess.run(["sbatch", "--parsable", "--cpus-per-task", cpus.rstrip("+"),
                              "--output", str(tmp_path / "blocker.out"), "--wrap", "sleep 600"],
                             capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    argv = ["--script", "noisy_sgd", "--iterations", "100", "--out-dir", str(tmp_path), "--slurm", "--no-wait",
            "--slurm-gpus", "0", "--slurm-cpus", "1", "--slurm-time", "10", "--", "--dim", "10", "20"]
    try:
        assert launch.main(argv)["queued"] == 2
        assert "submitted 2 runs" in capsys.readouterr().out
        jobs = {json.loads(p.read_text())["job_id"] for p in tmp_path.glob("runs/*/slurm.json")}
        assert len(jobs) == 2
        assert launch.main(argv)["queued"] == 2  # still pending behind the blocker: not submitted again
        out = capsys.readouterr().out
        assert "submitted" not in out and all(f"queued ({job})" in out for job in jobs)
    finally:
        subprocess.run(["scancel", blocker], check=True)
    start = time.time()
    while len(list(tmp_path.glob("runs/*/done.json"))) < 2:
        assert time.time() - start < 300, "the queued runs did not finish"
        time.sleep(1)
    assert launch.main(argv) == {"done": 0, "skipped": 2, "failed": 0}


def run_runner(name, tmp_path, **env):
    return subprocess.run(["bash", str(RUNNERS / name)], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHON=sys.executable, OUT_DIR=str(tmp_path / "out"), WANDB_MODE="offline", **env))


RUNNER_GRIDS = {
    # atari10_nenvs: Fig. 1a's 7 fixed-batch configs + Fig. 1b's 7 N_envs and 3 rollout configs, 8 x 128 shared
    "atari10_nenvs.sh": 10 * 5 * (7 + 7 + 3) - 50, "atari10_epochs.sh": 10 * 5 * 3 * (3 + 2),
    "atari10_encoders.sh": 2 * 10 * 5 * 7, "pqn_nenvs.sh": 10 * 5 * (7 + 3), "rnd_nenvs.sh": 2 * 2 * 5 * 4,
    "lr_sensitivity.sh": 10 * 5 * (1 + 3 + 3), "gamma_sensitivity.sh": 10 * 5 * 3 * (3 + 2),
    "recipes.sh": 5 * (1 + 4 * 3 + 4), "com_eps.sh": 5 * 5 * 5, "stag_fig5b_eps.sh": 5 * 5,
    "stag_fig3a_resume.sh": 5 * 2, "stag_fig4_lr.sh": 5 * 3 * 3 * 2, "stag_fig6_epochs.sh": 5 * 4 * (4 + 3),
    "stag_fig7_minibatch.sh": 5 * 3 * (3 + 2), "ddr_budgets.sh": 5 * 3 * 3 * 3 * 3, "noisy_sgd.sh": 5 * (1 + 2),
    "sfl_scaling.sh": 2 * 3 * (3 + 1), "sfl_fig15_minibatches.sh": 3 * 3, "sfl_fig17_lr.sh": 3 * 3, "sfl_fig18_ewma.sh": 3 * (1 + 3),
    "sfl_fig19_filtering.sh": 3 * 3,
    "minatar_pilot.sh": 2 * 2,  # Asterix, Freeway x seeds 101, 102 (the same at every scale)
    # procgen_nenvs: 4 fixed-batch configs, 2 more N_envs and 2 longer rollouts than the shared 64 x 256
    "procgen_nenvs.sh": 2 * 5 * (4 + 2 + 2),
    "coverage_fig2.sh": 10 * 5 * 4,  # Atari-10 x 5 seeds x 4 fixed-batch configs
    # brax_nenvs: 3 tasks x 5 seeds x (4 fixed-batch configs, 2 more N_envs and 2 longer rollouts than the shared 2048 x 10)
    "brax_nenvs.sh": 3 * 5 * (4 + 2 + 2),
    "stag_fig10_brax.sh": 2 * 5 * 2 * 2,  # Ant, Humanoid x 5 seeds x 2 N_envs x minibatch 4 N_envs or 16,384
    # docs_results: both sides of CartPole (10 seeds), MinAtar and Brax (5), 4 CleanRL comparisons (3); SFL and DR x 3
    "docs_results.sh": 2 * (10 + 5 + 5 + 4 * 3) + 2 * 3,
}


@shared_runs(minutes=4)
def dry_runs(tmp_path_factory):
    """Every runner's DRY_RUN output, two runners at a time (each launch imports its script: seconds)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda r: run_runner(r, tmp_path_factory.mktemp(r.split(".")[0]), DRY_RUN="1"), RUNNER_GRIDS)
        return dict(zip(RUNNER_GRIDS, results))


def test_every_runner_is_tested():
    assert sorted(RUNNER_GRIDS) == sorted(p.name for p in RUNNERS.glob("*.sh") if p.name != "common.sh")


@pytest.mark.parametrize("runner", sorted(RUNNER_GRIDS))
def test_runners_expand_the_papers_grids(dry_runs, runner):
    result = dry_runs[runner]
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("(cd ")]
    assert len(set(lines)) == RUNNER_GRIDS[runner]
    assert all(len(Path(line.split(" && ")[0][4:]).name) < 255 for line in lines)


# flags without which a runner's grid measures something else: Brax restarts each env from its own first state, so the
# N_envs study's start-state diversity would grow with N_envs by construction
RUNNER_FLAGS = {"brax_nenvs.sh": "--brax-fresh-starts"}


@pytest.mark.parametrize("runner, flag", sorted(RUNNER_FLAGS.items()))
def test_runners_pass_the_flags_their_design_needs(dry_runs, runner, flag):
    lines = [line for line in dry_runs[runner].stdout.splitlines() if line.startswith("(cd ")]
    assert lines and all(f" {flag} " in line or line.endswith(f" {flag})") for line in lines)


# the runners with SCALE=small and gpu settings (benchmark/reproduce.md) and their unique runs: 2 games x 5 seeds (gpu: 10)
# for the data-collection claims, 5 seeds for the stagnation claims (stag_fig3a_resume's resumes need its plateau runs'
# checkpoints: a DRY_RUN lists the plateau runs only, both starting COMs); the task each scale's runs must name
SMALL_GRIDS = {"atari10_nenvs.sh": 5 * 7, "atari10_epochs.sh": 5 * 4,  # SpaceInvaders alone (minatar_pilot.sh)
               "noisy_sgd.sh": 10 * (1 + 2),
               "com_eps.sh": 2 * 5, "stag_fig5b_eps.sh": 2 * 5, "stag_fig3a_resume.sh": 2 * 5, "recipes.sh": 5 * (1 + 2),
               "ddr_budgets.sh": 2 * 3 * 5,
               # no SFL at small (GPU-sized); ppo_rnd's fallback on Qbert-v5 and ppo_procgen's on bigfish at small only
               # (at gpu Phoenix runs 10M steps, starpilot 25M)
               "docs_results.sh": 2 * (10 + 5 + 5 + 6 * 3)}
REDUCED_GRIDS = {"small": SMALL_GRIDS, "gpu": {**SMALL_GRIDS, "com_eps.sh": 3 * 5, "stag_fig5b_eps.sh": 3 * 5,  # COM 32, eps 0.1
                                                "coverage_fig2.sh": 2 * 3 * 3, "atari10_nenvs.sh": 2 * 10 * 7,
                                                "atari10_epochs.sh": 2 * 10 * 6,
                                                "docs_results.sh": 2 * (10 + 5 + 5 + 4 * 3) + 2 * 3}}
# the packs a scale's times assume (their number, and what each pack's header line matches)
PACKS = {("gpu", "com_eps.sh"): (3, r"# seeds 1\.\.5 in one process"),
         ("gpu", "atari10_nenvs.sh"): (2 * 7, r"# seeds 1\.\.10 in one process"),
         ("gpu", "recipes.sh"): (1, r"# seeds 1\.\.5 in one process"),  # the base; a scaled run is a process alone
         ("gpu", "ddr_budgets.sh"): (2 * 3, r"# seeds 1\.\.5 in one process"),
         ("small", "ddr_budgets.sh"): (2 * 3 * 2, r"# seeds (1\.\.3|4\.\.5) in one process"),  # 6 a budget: 2 workers balance
         ("small", "recipes.sh"): (3 * 2, r"# seeds (1\.\.3|4\.\.5) in one process"),  # the base's grid too
         ("small", "com_eps.sh"): (2 * 2, r"# seeds (11\.\.13|14\.\.15) in one process"),
         ("small", "stag_fig5b_eps.sh"): (2 * 2, r"# seeds (11\.\.13|14\.\.15) in one process")}
# each scale's script and task (the launcher leaves out flags at their defaults: locomotion is ppo_ewma_jax.py's)
MINATAR = r"ppo_ewma_jax\.py .*--env-id \S+-MinAtar"
REDUCED_TASK = {("small", "atari"): MINATAR, ("small", "stag"): MINATAR, ("gpu", "atari"): MINATAR,
                ("gpu", "coverage"): r"ppo_atari_envpool\.py .*--env-id (Phoenix|Qbert)-v5",
                ("gpu", "stag"): r"ppo_ewma_jax\.py (?!.*--env-id)"}


@pytest.mark.parametrize("scale, runner", [(scale, runner) for scale, grids in REDUCED_GRIDS.items() for runner in sorted(grids)])
def test_reduced_scale_grids(tmp_path, scale, runner):
    result = run_runner(runner, tmp_path, DRY_RUN="1", SCALE=scale)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {line for line in result.stdout.splitlines() if line.startswith("(cd ")}
    assert len(lines) == REDUCED_GRIDS[scale][runner]
    if (scale, runner) in PACKS:  # SCALE=gpu's sizes assume its packs: one process per config of 5 (10) seeds
        packs = {line for line in result.stdout.splitlines() if line.startswith("# seeds ")}
        assert len(packs) == PACKS[scale, runner][0] and all(re.match(PACKS[scale, runner][1], p) for p in packs), packs
    if runner == "docs_results.sh":  # each comparison's own task; the CleanRL ones at CleanRL's budgets on a GPU
        budgets = {int(b) for b in re.findall(r"--total-timesteps (\d+)", "\n".join(lines))}
        assert (9_999_360 in budgets) == (scale == "gpu") and (204_800 in budgets) == (scale == "small")
    elif runner != "noisy_sgd.sh":
        kind = "atari" if runner.startswith("atari10") else "coverage" if runner.startswith("coverage") else "stag"
        task = REDUCED_TASK.get((scale, kind), REDUCED_TASK[scale, "atari"])
        assert all(re.search(task, line) for line in lines)
    if runner.startswith("atari10"):  # the MLP's width: 128 units at small (2 cores), 256 at gpu (the script's default,
        widths = [re.search(r" --hidden-size (\d+)", line) for line in lines]  # which the launcher leaves out)
        assert {int(w.group(1)) if w else 256 for w in widths} == {128 if scale == "small" else 256}


@pytest.mark.parametrize("part, runs", [("fixed_batch", 5 * 3), ("grow", 5 * 5)])
def test_a_part_of_atari10_nenvs_launches_its_claims_grids_alone(tmp_path, part, runs):
    """PART=fixed_batch: claim 7's 3 configs; PART=grow: claims 8 and 10's 5 (8 x 128, shared, among them)."""
    result = run_runner("atari10_nenvs.sh", tmp_path, DRY_RUN="1", SCALE="small", PART=part)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len({line for line in result.stdout.splitlines() if line.startswith("(cd ")}) == runs


@pytest.mark.parametrize("part, starts", [("raise", ["8"]), ("lower", ["256"]), ("all", ["8", "256"])])
def test_a_part_of_stag_fig3a_resume_runs_one_arm(tmp_path, part, starts):
    """SCALE=small: PART=raise trains (or shares) the COM-8 plateau and resumes it with COM 8 and 256; PART=lower the
    COM-256 plateau, resumed with COM 8 alone (no COM-256 control: no condition reads it)."""
    result = run_runner("stag_fig3a_resume.sh", tmp_path, DRY_RUN="1", SCALE="small", PART=part)
    assert result.returncode == 0, result.stderr[-3000:]
    plateaus = {re.search(r"--ewma-com (\S+)", line).group(1) for line in result.stdout.splitlines() if line.startswith("(cd ")}
    resumes = {line.split("(after plateau_")[1].split(")")[0]: line.split("--ewma-com ")[1].split(" from")[0]
               for line in result.stdout.splitlines() if line.startswith("(after plateau_")}
    assert {float(com) for com in plateaus} == {float(start) for start in starts} and sorted(resumes) == sorted(starts)
    assert all(resumes[start] == ("8 256" if start == "8" else "8") for start in starts)


def test_part_lower_of_one_starting_com_is_refused(tmp_path):
    """SMOKE starts from one COM: there is nothing to lower from, and PART=lower says so rather than running nothing."""
    result = run_runner("stag_fig3a_resume.sh", tmp_path, DRY_RUN="1", SMOKE="1", PART="lower")
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip().splitlines()[-1] == "runner: PART=lower needs a second starting COM to lower from (SCALE=smoke has one: 1)"


@pytest.mark.parametrize("runner, message", [("atari10_nenvs.sh", "all, fixed_batch or grow"), ("stag_fig3a_resume.sh", "all, raise or lower")])
def test_an_unknown_part_is_refused_before_anything_runs(tmp_path, runner, message):
    result = run_runner(runner, tmp_path, DRY_RUN="1", SCALE="small", PART="grown")
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip().splitlines()[-1] == f"runner: PART must be {message} (got grown)"


@pytest.mark.parametrize("runner, scale", [("lr_sensitivity.sh", "small"), ("pqn_nenvs.sh", "gpu"), ("noisy_sgd.sh", "huge")])
def test_a_scale_a_runner_has_no_settings_for_is_refused(tmp_path, runner, scale):
    result = run_runner(runner, tmp_path, DRY_RUN="1", SCALE=scale)
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip().splitlines()[-1] in (
        f"runner: {runner} has no SCALE={scale} settings (it has: smoke paper)",
        f"runner: SCALE must be smoke, small, paper or gpu (got {scale})")


def fresh_launch(monkeypatch):
    """benchmark/launch.py as a module of its own, with JAX's memory variables unset."""
    spec = importlib.util.spec_from_file_location("launch", ROOT / "benchmark" / "launch.py")
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    for name in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    return launch


def test_local_runs_sharing_a_gpu_do_not_preallocate_its_memory(monkeypatch):
    """JAX takes 75% of a GPU's memory in its first process; --workers 4 on one GPU would leave the other runs out of
    memory. One GPU per worker, or the user's own setting, is left alone."""
    launch = fresh_launch(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert launch.worker_resources(1, 4)[0]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in launch.worker_resources(0, 1)[0]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # every GPU visible to every run: they may share one
    assert launch.worker_resources(1, 2)[0]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    env = launch.worker_resources(1, 4)[0]
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "XLA_PYTHON_CLIENT_PREALLOCATE" not in env
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.2")
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in launch.worker_resources(1, 4)[0]


def test_gpus_per_run_gives_each_local_run_its_own_consecutive_gpus(monkeypatch, tmp_path, capsys):
    """--gpus-per-run G (the runners' DEVICES): local worker k gets GPUs kG .. kG + G - 1 of CUDA_VISIBLE_DEVICES, and
    a run's flags are checked at G devices (ppo_ewma_jax.py: --shuffle auto resolved to per-env, --num-envs divided)."""
    launch = fresh_launch(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert [launch.worker_resources(slot, 2, 2)[0]["CUDA_VISIBLE_DEVICES"] for slot in (0, 1)] == ["0,1", "2,3"]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in launch.worker_resources(1, 2, 2)[0]
    assert launch.worker_resources(1, 4, 2)[0]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"  # 4 runs x 2 GPUs on 4
    grid = ["--script", "ppo_ewma_jax", "--out-dir", str(tmp_path / "out"), "--gpus-per-run", "2", "--dry-run", "--",
            "--env-id", "CartPole-v1", "--num-steps", "32", "--num-minibatches", "4", "--num-envs"]
    assert launch.main(grid + ["8"])["runs"] == 1
    assert "shuffle=per-env" in capsys.readouterr().out
    for argv, message in ((grid + ["7"], "--num-envs 7 must be divisible by the 2 devices"),
                          (grid[:4] + ["--gpus-per-run", "0"] + grid[6:] + ["8"], "--gpus-per-run must be positive (got 0)")):
        with pytest.raises(SystemExit) as stopped:
            launch.main(argv)
        assert stopped.value.code == 2 and message in capsys.readouterr().err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(SystemExit):
        launch.main([x for x in grid if x != "--dry-run"] + ["8"])
    assert "--gpus-per-run 2: CUDA_VISIBLE_DEVICES lists 1 GPU(s)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_runs_of_128_gpus_are_launched_on_slurm_only(tmp_path):
    result = run_runner("sfl_fig15_minibatches.sh", tmp_path)
    assert result.returncode == 2 and "span 128 GPUs" in result.stderr and not (tmp_path / "out").exists()
    result = run_runner("sfl_fig15_minibatches.sh", tmp_path, DRY_RUN="1", LAUNCH_FLAGS="--slurm")
    assert result.returncode == 0, result.stderr[-3000:]  # the launcher accepts the runs of 16 nodes x 8 tasks


def test_smoke_runner_runs_its_grid_and_analysis(tmp_path):
    result = run_runner("noisy_sgd.sh", tmp_path, SMOKE="1", PUBLISH=str(tmp_path / "pub"))
    assert result.returncode == 0, result.stderr[-3000:]
    for grid in ["step_sizes", "switch"]:
        assert "![learning curves (mean, 95% CI)](curves.png)" in (tmp_path / "out" / grid / "analysis" / "report.md").read_text()
    aggregate = pd.read_csv(tmp_path / "out" / "switch" / "analysis" / "aggregate.csv").set_index("config")
    assert len(aggregate) == 8 and (aggregate.runs == 5).all()  # 2 switch targets x 4 starting step sizes, 5 seeds
    assert (aggregate.mean_low < aggregate["mean"]).all()  # a CI over seeds
    # 100 steps after switching to 0.3, every step size's run sits on 0.3's plateau, ||x|| ~ sqrt(9 0.3 / (4 0.7))
    to_03 = aggregate[aggregate.index.str.contains("switch-step-size=0.3 ")]
    assert len(to_03) == 4 and ((-1.4 < to_03["mean"]) & (to_03["mean"] < -0.6)).all()
    # claim 1's verdict, written beside the grids and published with its figures, reads the numbers of those grids
    verdict = json.loads((tmp_path / "out" / "claim_1.json").read_text())
    scores = pd.read_csv(tmp_path / "out" / "step_sizes" / "analysis" / "scores.csv")
    distance = {eta: -scores[scores.subrun == f"eta_{eta}"].final.mean() for eta in ("0.01", "0.1")}
    assert verdict["conditions"][0]["numbers"] == f"eta 0.1 {distance['0.1']:.4g}, eta 0.01 {distance['0.01']:.4g}"
    assert verdict["conditions"][0]["estimate"] == pytest.approx(distance["0.1"] - distance["0.01"])
    assert verdict["verdict"] in ("reproduced", "contradicted", "mixed", "undecided")
    published = tmp_path / "pub" / "claim_1"
    pd.testing.assert_frame_equal(pd.read_csv(published / "step_sizes_scores.csv.gz"), scores, rtol=1e-5,
                                  check_dtype=False)  # 6 digits: 1.0 is written 1
    assert sorted(p.name for p in published.glob("*.png")) == [
        "step_sizes_curves.png", "step_sizes_update_norm_curves.png", "switch_curves.png"]
    # a failed launch does not stop a runner: it goes on and exits 1
    bad = run_runner("noisy_sgd.sh", tmp_path, SMOKE="1", LAUNCH_FLAGS="--workers 0")
    assert bad.returncode == 1 and bad.stderr.count("launch exited 2") == 2
    # nor in a DRY_RUN, whose grids one launcher process checks at the end (launch.py --each)
    bad = run_runner("noisy_sgd.sh", tmp_path, DRY_RUN="1", LAUNCH_FLAGS="--workers 0")
    assert bad.returncode == 1 and bad.stderr.count("exited 2 (continuing)") == 2, bad.stderr


def test_a_packed_plateau_is_resumed_as_one_pack(tmp_path, capsys):
    """stag_fig3a_resume.sh: the plateau's seeds train in one process, whose one checkpoint (in the first seed's run)
    holds them all; each new COM resumes them from it as one pack, every seed going on from its own last step."""
    result = run_runner("stag_fig3a_resume.sh", tmp_path, SMOKE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("4 runs: 0 already done, 4 to run in 2 processes") == 1  # 2 seeds x COM 1, 16
    runs = pd.read_csv(tmp_path / "out" / "resume_all" / "analysis" / "runs.csv")
    steps = runs.assign(grid=runs.run.str.split("/").str[0]).groupby(["grid", "seed"]).x.agg(["min", "max", "count"])
    assert set(steps.index) == {(g, s) for g in ("plateau_1", "resume_1") for s in (1, 2)}
    for seed in (1, 2):
        assert steps.loc[("resume_1", seed), "min"] > steps.loc[("plateau_1", seed), "max"]
    # a pack's checkpoint resumed by another number of seeds a process is refused before anything runs
    checkpoint = next((tmp_path / "store").glob("*__s1__*/runs/*/checkpoints/iter_3.npz"))
    with pytest.raises(SystemExit) as stopped:
        launch.main(["--script", "ppo_ewma_jax", "--seeds", "1", "2", "--out-dir", str(tmp_path / "again"), "--dry-run",
                     "--", "--env-id", "CartPole-v1", "--num-envs", "16", "--num-steps", "16", "--num-minibatches", "4",
                     "--total-timesteps", "1536", "--resume", str(checkpoint)])
    assert stopped.value.code == 2 and "holds 2 seeds (a pack's checkpoint)" in capsys.readouterr().err


def test_a_pack_resumed_from_a_user_checkpoint_runs_under_its_first_seed(tmp_path, capsys):
    """--resume after -- naming a pack's checkpoint (seeds 3..4): each run is checked as the pack runs, under the
    checkpoint's first seed (a resume continues its checkpoint's seed); a seed the checkpoint does not hold is refused."""
    from benchmark.common import load_script

    ewma = load_script("ppo_ewma_jax")
    flags = ["--env-id", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2",
             "--total-timesteps", "1024"]
    saved = vars(ewma.resolve_args(ewma.RunArgs(env_id="CartPole-v1", num_envs=4, num_steps=32, num_minibatches=2,
                                                total_timesteps=1024, seed=3, num_seeds=2)))
    checkpoint = tmp_path / "iter_2.npz"
    np.savez(checkpoint, meta=np.array(json.dumps({"num_leaves": 0, "iteration": 2, "global_step": 256, "args": saved,
                                                   "script": "ppo_ewma_jax.py"})))
    grid = ["--script", "ppo_ewma_jax", "--seeds-per-process", "2", "--out-dir", str(tmp_path / "out"), "--dry-run"]
    launch.main([*grid, "--seeds", "3", "4", "--", *flags, "--resume", str(checkpoint)])
    assert "# seeds 3..4 in one" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        launch.main([*grid, "--seeds", "4", "5", "--", *flags, "--resume", str(checkpoint)])
    assert stopped.value.code == 2 and f"--resume {checkpoint} holds seeds 3..4: seed 5 is none of them" in capsys.readouterr().err
    # a one-seed checkpoint: launched under another seed (the default's 1 among them), it is refused before any run
    saved["num_seeds"], saved["seed"] = 1, 5
    np.savez(checkpoint, meta=np.array(json.dumps({"num_leaves": 0, "iteration": 2, "global_step": 256, "args": saved,
                                                   "script": "ppo_ewma_jax.py"})))
    grid[3] = "1"
    launch.main([*grid, "--seeds", "5", "--", *flags, "--resume", str(checkpoint)])
    assert "__s5__" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        launch.main([*grid, "--seeds", "1", "--", *flags, "--resume", str(checkpoint)])
    assert stopped.value.code == 2 and f"--resume {checkpoint} holds seed 5: seed 1 is another" in capsys.readouterr().err


def test_grid_of_a_jax_script(tmp_path):
    counts = launch.main([*CARTPOLE, "--iterations", "3", "--workers", "2", "--out-dir", str(tmp_path), "--",
                          "--num-envs", "4", "8", "--num-steps", "32", "--num-minibatches", "2"])
    assert counts == {"done": 2, "skipped": 0, "failed": 0}
    aggregate = analyze.main([str(tmp_path), "--reps", "100", "--points", "3", "--tag", "charts/episodic_return",
                              "--x-unit", "iterations"])
    assert list(aggregate.config) == ["num-envs=4", "num-envs=8"] and (aggregate["mean"] > 5).all()  # CartPole returns
    curves = pd.read_csv(tmp_path / "analysis" / "curves.csv")
    assert curves.groupby("config").x.max().tolist() == [3.0, 3.0]  # iterations, not steps
    # stagnation Fig. 16b: against the training clock the runs log (charts/train_seconds)
    analyze.main([str(tmp_path), "--reps", "100", "--points", "3", "--tag", "charts/episodic_return", "--x-unit", "seconds",
                  "--output", str(tmp_path / "seconds")])
    runs = pd.read_csv(tmp_path / "seconds" / "runs.csv")
    for name, curve in runs[runs.tag == "charts/episodic_return"].groupby("run"):
        merged, _ = events.read_merged_scalars(tmp_path / "runs" / name, {"charts/train_seconds"})
        (steps, clock), = [found["charts/train_seconds"] for found in merged.values()]
        assert curve.x.tolist() == pytest.approx(clock.tolist()) and (np.diff(clock) > 0).all()  # 3 updates, 3 points


def test_analysis_streams_a_synthetic_grid(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "analysis_throughput.py"), "--scale", "0.0005",
                             "--games", "2", "--seeds", "2", "--nenvs", "4", "8", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout[result.stdout.index("{"):])["rows"]
    assert rows[0]["records"] > 10000 and rows[0]["records_per_s"] > 0  # and every record was read (checked inside)


@pytest.mark.parametrize("script", ["ppo_atari_envpool", "noisy_sgd"])
def test_a_run_of_several_processes_is_refused_for_a_script_of_one_process(script, tmp_path, capsys):
    """The JAX scripts' appendix holds the distributed flags (a script's UNUSED_RUN_FLAGS would be none of its flags):
    a multi-process launch of a script without them (the torch scripts, noisy_sgd.py) is refused up front."""
    with pytest.raises(SystemExit) as stopped:
        launch.main(["--script", script, "--out-dir", str(tmp_path / "out"), "--slurm", "--slurm-cluster", "local",
                     "--slurm-tasks-per-node", "2"])
    assert stopped.value.code == 2
    assert f"{script}.py runs in one process (it has no --distributed)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
