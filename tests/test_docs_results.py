"""benchmark/docs_results.py, a script's learning curve beside its anchor's: on the stand-in PureJaxRL checkout
(tests/reference_stand_in, known returns) and the real ppo_ewma_jax.py, the driver's per-iteration means, the final
returns as benchmark/analyze.py reads them, Welch's interval and its sentence, resume, publishing only with a cause
when the interval excludes zero, and bad input before any run."""
import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.stats

from benchmark import docs_results
from benchmark.common import ROOT
from helpers import assert_bad_input

STAND_IN = ROOT / "tests" / "reference_stand_in"
TINY = ["--seeds", "1", "2", "--total-timesteps", "2048"]  # CartPole, 4 envs x 128 steps: 4 iterations


def docs_results_cli(*args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "benchmark" / "docs_results.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


@pytest.mark.parametrize("fraction", [0.1, 0.25, 1.0])
def test_final_return_is_analyzes(fraction):
    """The mean over the points at or after max - fraction x (max - min) of the steps, as benchmark/events.py's."""
    steps = np.array([512, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120, 5632])
    values = np.arange(len(steps), dtype=float) ** 2
    cut = steps.max() - fraction * (steps.max() - steps.min())
    assert docs_results.final_return(steps, values, fraction) == pytest.approx(values[steps >= cut].mean())
    assert docs_results.final_return(steps, values, 0.1) == pytest.approx(values[-2:].mean())  # 5120, 5632


def test_runs_both_sides_reads_and_publishes_only_with_a_cause(tmp_path, fast_compile):
    out, pub = tmp_path / "out", tmp_path / "pub"
    root = out / "ppo_cartpole"
    # a SIGTERM while the project's first run trains: it stops, the finished anchor run is kept, one line says resume
    argv = [sys.executable, str(ROOT / "benchmark" / "docs_results.py"), "ppo_cartpole", "--reference", str(STAND_IN),
            "--out", str(out), *TINY]
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (root / "project" / "seed_1" / "stdout.log").exists() and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    stopped = time.time()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 75 and "stopped by SIGTERM" in err and "run the same command again" in err, err[-3000:]
    assert "1/4" in err and "4/4" not in err, err[-3000:]  # the progress bar counts the finished run, not the stopped ones
    assert time.time() - stopped < 30
    assert (root / "anchor" / "seed_1" / "done.json").exists() and not (root / "project" / "seed_1" / "done.json").exists()
    result = docs_results_cli("ppo_cartpole", "--reference", STAND_IN, "--out", out, *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 runs to go of 4" in result.stdout
    # the driver: per iteration, the mean return of the episodes that ended in it, at the iteration's last step
    for seed in (1, 2):
        with open(root / "anchor" / f"seed_{seed}" / "returns.csv") as f:
            rows = list(csv.DictReader(f))
        count = np.arange(4 * 128 * 4).reshape(4, 128, 4)
        assert [int(r["global_step"]) for r in rows] == [512, 1024, 1536, 2048]
        for i, row in enumerate(rows):
            ended = count[i] % 7 == 3
            offset = float(row["episodic_return"]) - count[i][ended].mean()
            assert 0 <= offset < 1  # + the seed's uniform draw, the same at every point of a seed
        config = json.loads((root / "anchor" / f"seed_{seed}" / "stand_in_config.json").read_text())
        assert (config["NUM_ENVS"], config["NUM_STEPS"], config["TOTAL_TIMESTEPS"]) == (4, 128, 2048)
        assert (root / "project" / f"seed_{seed}" / "done.json").exists()
    summary = json.loads((root / "summary.json").read_text())
    finals = {side: [summary["finals"][side][s] for s in ("1", "2")] for side in ("anchor", "project")}
    assert finals["anchor"][0] == pytest.approx(np.mean(count[3][count[3] % 7 == 3]), abs=1)  # the last 10%: one point
    ci = scipy.stats.ttest_ind(finals["project"], finals["anchor"], equal_var=False).confidence_interval(0.95)
    assert (summary["low"], summary["high"]) == pytest.approx((ci.low, ci.high))
    # the stand-in's returns are in the thousands: the interval excludes zero, and nothing is published without a cause
    assert not summary["indistinguishable"] and summary["sentence"].startswith("Not indistinguishable")
    again = docs_results_cli("ppo_cartpole", "--out", out, *TINY, "--report-only", "--publish", pub, cwd=tmp_path)
    assert again.returncode == 1 and "not published" in again.stderr and not pub.exists()
    # run again: nothing to run (done.json), and published with the cause, which the summary states
    again = docs_results_cli("ppo_cartpole", "--reference", STAND_IN, "--out", out, *TINY, "--publish", pub, "--why",
                             "the stand-in's returns are made up", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 runs to go of 4" in again.stdout
    assert sorted(p.name for p in (pub / "ppo_cartpole").iterdir()) == sorted(
        ["curves.csv.gz", "curves.png", "final_returns.csv", "summary.json", "summary.md"])
    assert "The cause found: the stand-in's returns are made up" in (pub / "ppo_cartpole" / "summary.md").read_text()


@pytest.mark.parametrize("flags, text", [
    (["--seeds", "1"], "--seeds must name at least 2 seeds"),
    (["--seeds", "1", "1"], "--seeds must not repeat"),
    (["--seeds", "-1", "2"], "--seeds must lie in"),
    (["--total-timesteps", "1000"], "--total-timesteps must be a positive multiple of num_envs x num_steps = 512"),
    (["--total-timesteps", "0"], "--total-timesteps must be a positive multiple"),
    (["--total-timesteps", str(2**31)], "below 2**31"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--why", "because"], "--why is read only with --publish"),
    (["--publish", "p", "--why", " "], "--why must state the cause"),
    (["--reference", "nowhere"], "--reference nowhere has no purejaxrl/ppo.py"),
    (["--publish", "afile/pub"], "afile is a file, not a folder"),
    ([], "--reference is needed to run"),
    (["--num-envs", "0"], "--num-envs must lie in [1, 2**31), got 0"),
    (["--num-steps", "-128"], "--num-steps must lie in [1, 2**31), got -128"),
    (["--num-envs", "3", "--num-steps", "1", "--total-timesteps", "3"],
     "--num-envs x --num-steps = 3 must divide into the comparison's 4 minibatches"),
    (["--num-envs", str(2**16), "--num-steps", str(2**16)], "below 2**31"),
    (["--anchor-path", "afile"], "--anchor-path afile: not a folder"),
])
def test_bad_input_stops_before_any_run(tmp_path, flags, text):
    (tmp_path / "afile").write_text("")
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path / "out", *flags, cwd=tmp_path)
    assert_bad_input(result, tmp_path, text)
    assert not (tmp_path / "out").exists()


def test_report_only_names_the_missing_runs(tmp_path):
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path, "--report-only", *TINY, cwd=tmp_path)
    assert_bad_input(result, tmp_path, "runs not finished: anchor seed 1, anchor seed 2, project seed 1")


def test_the_continuous_anchor_keeps_brax_and_runs_its_own_config(tmp_path):
    """PureJaxRL's ppo_continuous_action.py: its wrappers keep Brax (its Brax wrapper) and lose navix; the driver runs
    it with its own __main__ config, the sizes given, and writes the per-iteration means of the ended episodes."""
    bench = docs_results.BENCHES["ppo_continuous_brax"]
    name = docs_results.prepare_anchor(bench, STAND_IN, tmp_path)
    wrappers = (tmp_path / "wrappers.py").read_text()
    assert "import navix" not in wrappers and "from brax import envs\n" in wrappers
    sizes = {"ENV_NAME": "inverted_pendulum", "NUM_ENVS": 4, "NUM_STEPS": 10, "TOTAL_TIMESTEPS": 120,
             "NUM_MINIBATCHES": 4, "UPDATE_EPOCHS": 4}
    result = subprocess.run([sys.executable, name, json.dumps(sizes), "3"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((tmp_path / "stand_in_config.json").read_text())
    assert {k: config[k] for k in sizes} == sizes
    assert (config["LR"], config["ENT_COEF"], config["NORMALIZE_ENV"], config["ANNEAL_LR"], config["DEBUG"]) == \
        (3e-4, 0.0, True, False, False)
    with open(tmp_path / "returns.csv") as f:
        rows = list(csv.DictReader(f))
    count = np.arange(3 * 10 * 4).reshape(3, 10, 4)
    assert [int(r["global_step"]) for r in rows] == [40, 80, 120]
    for i, row in enumerate(rows):
        assert 0 <= float(row["episodic_return"]) - count[i][count[i] % 5 == 1].mean() < 1


def fabricated(root, comp, finals, seeds=(1, 2, 3)):
    """Finished runs of both sides at `comp`'s settings whose curves end at the given per-seed final returns (a
    returns.csv each, as the PureJaxRL driver writes), for the report's arithmetic."""
    c, bench = docs_results.COMPARISONS[comp], docs_results.BENCHES[docs_results.COMPARISONS[comp].bench]
    opts = type("Opts", (), {"total_timesteps": c.total_timesteps, "num_envs": c.num_envs, "num_steps": c.num_steps})()
    for side, values in finals.items():
        for seed, value in zip(seeds, values):
            folder = root / comp / side / f"seed_{seed}"
            folder.mkdir(parents=True)
            first = "docs_results_driver.py" if side == "anchor" else "ppo_ewma_jax.py"
            argv = docs_results.commands(opts, c, bench, seed, first)[side]
            (folder / "done.json").write_text(json.dumps({"argv": argv, "seconds": 1.0}))
            (folder / "returns.csv").write_text(f"global_step,episodic_return\n512,0\n{opts.total_timesteps},{value}\n")


@pytest.mark.parametrize("finals, word", [
    ({"anchor": [500, 500, 500], "project": [500, 500, 500]}, "Indistinguishable at this budget: every seed"),
    ({"anchor": [500, 500, 500], "project": [499, 499, 499]}, "Not indistinguishable at this budget: every seed"),
    ({"anchor": [0, 0, 0], "project": [-1, 0, 1]}, "Indistinguishable at this budget: this project's final return"),
])
def test_no_spread_and_a_zero_mean_give_a_true_sentence(tmp_path, finals, word):
    fabricated(tmp_path, "ppo_cartpole", finals)
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path, "--report-only", "--seeds", "1", "2", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "ppo_cartpole" / "summary.json").read_text())  # valid JSON: no NaN
    assert summary["sentence"].startswith(word)
    assert summary["indistinguishable"] == word.startswith("Indistinguishable")
    row = (tmp_path / "ppo_cartpole" / "summary.md").read_text()
    assert ("(no interval: no spread over the seeds)" in row) == ("every seed" in word)  # no zero-width interval shown


def test_a_cause_for_no_difference_and_other_settings_are_refused(tmp_path):
    fabricated(tmp_path, "ppo_cartpole", {"anchor": [490, 495, 500], "project": [492, 497, 499]})
    seeds = ["--seeds", "1", "2", "3"]
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path, "--report-only", *seeds, "--publish", tmp_path / "pub",
                              "--why", "none", cwd=tmp_path)
    assert result.returncode == 1 and "shows none" in result.stderr and not (tmp_path / "pub").exists()
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path, "--report-only", *seeds, "--total-timesteps", "51200",
                              cwd=tmp_path)
    assert result.returncode == 2 and "was trained with other flags than this command's" in result.stderr


def test_a_published_result_is_replaced_only_by_the_same_runs(tmp_path):
    """Publishing again over a published result: the same runs read again replace it; other settings and runs still to
    train are refused before any run (exit 2), other runs at the same settings after the report (exit 1, nothing
    written), a damaged summary.json is named; in every refusal the published files stay as they were."""
    fabricated(tmp_path, "ppo_cartpole", {"anchor": [490, 495, 500], "project": [492, 497, 499]})
    pub = tmp_path / "pub"
    args = ["ppo_cartpole", "--out", tmp_path, "--report-only", "--seeds", "1", "2", "3", "--publish", pub]
    assert docs_results_cli(*args, cwd=tmp_path).returncode == 0
    published = pub / "ppo_cartpole" / "summary.json"
    before = published.read_bytes()
    assert docs_results_cli(*args, cwd=tmp_path).returncode == 0 and published.read_bytes() == before  # re-read: same
    result = docs_results_cli(*args[:-4], "--seeds", "1", "2", "--publish", pub, cwd=tmp_path)
    assert result.returncode == 2 and "seeds [1, 2, 3] -> [1, 2]" in result.stderr and "another folder" in result.stderr
    assert result.stderr.count("\n") == 1 and published.read_bytes() == before
    done, curve = (tmp_path / "ppo_cartpole" / "project" / "seed_3" / name for name in ("done.json", "returns.csv"))
    kept, trained = done.read_text(), curve.read_text()
    done.unlink()  # a run still to train: its result cannot be the published one
    result = docs_results_cli(*[a for a in args if a != "--report-only"], "--reference", STAND_IN, cwd=tmp_path)
    assert result.returncode == 2 and "runs still to train (project seed 3)" in result.stderr
    assert result.stderr.count("\n") == 1 and published.read_bytes() == before
    assert curve.read_text() == trained  # not run: a run starts in a fresh folder
    done.write_text(kept)
    (tmp_path / "ppo_cartpole" / "project" / "seed_3" / "returns.csv").write_text(
        "global_step,episodic_return\n512,0\n499712,400\n")  # other runs, the same settings
    report = (tmp_path / "ppo_cartpole" / "summary.json").read_bytes()
    result = docs_results_cli(*args, cwd=tmp_path)
    assert result.returncode == 1 and "holds a result of other runs" in result.stderr
    assert published.read_bytes() == before and (tmp_path / "ppo_cartpole" / "summary.json").read_bytes() == report
    published.write_text('{"env_id": "CartPole-v1"')
    result = docs_results_cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and f"{published} is damaged" in result.stderr


def test_the_report_names_the_machine_the_runs_trained_on(tmp_path):
    """Run folders trained elsewhere (a GPU machine's, copied here) are reported with the machine each done.json names,
    not the one that reads them; folders from before done.json named one count as this machine's."""
    fabricated(tmp_path, "ppo_cartpole", {"anchor": [490, 495, 500], "project": [492, 497, 499]})
    for side in ("anchor", "project"):
        for seed in (1, 2, 3):
            done = tmp_path / "ppo_cartpole" / side / f"seed_{seed}" / "done.json"
            done.write_text(json.dumps({**json.loads(done.read_text()), "machine": "A CPU, 16 cores, GPU: NVIDIA H200"}))
    args = ["ppo_cartpole", "--out", tmp_path, "--report-only", "--seeds", "1", "2", "3"]
    assert docs_results_cli(*args, cwd=tmp_path).returncode == 0
    summary = json.loads((tmp_path / "ppo_cartpole" / "summary.json").read_text())
    assert summary["machine"] == "A CPU, 16 cores, GPU: NVIDIA H200"
    assert "Machine: A CPU, 16 cores, GPU: NVIDIA H200." in (tmp_path / "ppo_cartpole" / "summary.md").read_text()
    done = tmp_path / "ppo_cartpole" / "project" / "seed_3" / "done.json"
    done.write_text(json.dumps({k: v for k, v in json.loads(done.read_text()).items() if k != "machine"}))
    assert docs_results_cli(*args, cwd=tmp_path).returncode == 0
    here = docs_results.describe_machine()
    assert json.loads((tmp_path / "ppo_cartpole" / "summary.json").read_text())["machine"] == \
        f"A CPU, 16 cores, GPU: NVIDIA H200; {here}"


def test_a_cleanrl_anchor_runs_edited_and_is_read_from_its_event_files(tmp_path):
    """CleanRL's side (the stand-in, edited as vs_reference.py edits it) and ppo_atari_envpool.py, 2 iterations of
    8 x 128 on Breakout: both sides' charts/episodic_return read from their TensorBoard files, at the same flags."""
    out = tmp_path / "out"
    result = docs_results_cli("ppo_atari", "--reference", STAND_IN, "--out", out, "--seeds", "1", "2",
                              "--total-timesteps", "2048", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "ppo_atari" / "summary.json").read_text())
    assert summary["commands"]["anchor"][0] == "ppo_atari_envpool.py"
    assert summary["commands"]["anchor"][1:] == summary["commands"]["project"][1:]  # the same flags on both sides
    assert summary["machine"] == docs_results.describe_machine()  # each done.json names where its run trained
    for side in ("anchor", "project"):
        done = json.loads((out / "ppo_atari" / side / "seed_1" / "done.json").read_text())
        assert done["machine"] == docs_results.describe_machine()
    for side in ("anchor", "project"):
        for seed in (1, 2):
            steps, values = docs_results.read_curve(out / "ppo_atari" / side / f"seed_{seed}")
            assert len(steps) >= 1 and steps.max() <= 2048 and np.all(values >= 0)


def test_procgen_needs_its_anchor_path_before_any_run(tmp_path):
    """CleanRL's ppo_procgen.py needs gym 0.23.1 and procgen, which the project's environment lacks: without
    --anchor-path the command says so and runs nothing."""
    result = docs_results_cli("ppo_procgen", "--reference", STAND_IN, "--out", tmp_path / "out", cwd=tmp_path)
    assert_bad_input(result, tmp_path, "--anchor-path is needed by ppo_procgen: CleanRL ppo_procgen.py needs gym 0.23.1 "
                                       "and procgen")
    assert not (tmp_path / "out").exists()


def test_a_dry_run_lists_the_runs_to_go_with_each_sides_flags(tmp_path):
    """--dry-run prints one `(cd FOLDER && python ARGV)` line per run still to do (a finished one is left out), the
    anchor's env under its own name and with --anchor-path on its PYTHONPATH, and writes nothing."""
    fabricated(tmp_path, "ppo_cartpole", {"anchor": [490], "project": [492]}, seeds=(1,))
    result = docs_results_cli("ppo_cartpole", "--out", tmp_path, "--dry-run", "--seeds", "1", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("(cd ")]
    assert "ppo_cartpole: 2 runs to go of 4" in result.stdout and len(lines) == 2
    assert all("/seed_2 && python " in line for line in lines)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    result = docs_results_cli("ppo_procgen", "--out", tmp_path / "out", "--dry-run", "--anchor-path", overlay,
                              "--num-envs", "64", "--total-timesteps", str(64 * 256), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    anchor, project = [line for line in result.stdout.splitlines() if "/seed_1 && " in line]
    assert f"PYTHONPATH={overlay} python ppo_procgen.py --env-id starpilot --num-envs 64 " in anchor
    assert "python ppo_procgen_envpool.py --env-id StarpilotEasy-v0 --num-envs 64 " in project
    assert anchor.split("--num-envs")[1] == project.split("--num-envs")[1]  # the same flags after the env's name
    assert not (tmp_path / "out").exists()


def test_the_anchor_path_leads_the_anchors_pythonpath(tmp_path):
    """run_one puts --anchor-path first on the process's PYTHONPATH (the packages found there win over the project's)."""
    source, overlay = tmp_path / "source", tmp_path / "overlay"
    source.mkdir(), overlay.mkdir()
    (overlay / "json.py").write_text("OVERLAID = True\n")  # shadows the standard library's json in that process
    (source / "probe.py").write_text("import json, sys\nopen('probe.txt', 'w').write(str(getattr(json, 'OVERLAID', False)))\n")
    docs_results.run_one("anchor", 1, ["probe.py"], source, tmp_path / "run", pythonpath=overlay, machine="M")
    assert (tmp_path / "run" / "probe.txt").read_text() == "True"
    docs_results.run_one("project", 1, ["probe.py"], source, tmp_path / "run2", pythonpath=None, machine="M")
    assert (tmp_path / "run2" / "probe.txt").read_text() == "False"
    assert json.loads((tmp_path / "run2" / "done.json").read_text())["machine"] == "M"
