"""benchmark/speed/vs_reference.py, the side-by-side harness, on stand-in reference checkouts of this project's own
(tests/reference_stand_in: the lines the harness edits, against the old gym/envpool API, so that an unedited copy
fails): the edits make them run, reference and project alternate, the ratio is the median of per-pair ratios, and
bad input stops before any run."""
import json
import statistics
import subprocess
import sys

import pytest

from benchmark.common import ROOT
from helpers import assert_bad_input

sys.path.insert(0, str(ROOT / "benchmark" / "speed"))
import vs_reference  # noqa: E402

STAND_IN = ROOT / "tests" / "reference_stand_in"
TINY = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "128"]  # 4 iterations: in-run rates over the last 2


def harness(*args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "benchmark" / "speed" / "vs_reference.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


def test_pairs_alternate_each_side_first_in_turn_and_ratios_are_medians_of_pairs(tmp_path):
    """Four sides: the reference, the project, --against HEAD (the project's script at a revision) and --variant (the
    project's script with flags added); each goes first in turn, every ratio is per pair and reported as the median."""
    out = tmp_path / "result.json"
    result = harness("--reference", STAND_IN, "--bench", "ppo_atari", *TINY, "--pairs", "4", "--against", "HEAD",
                     "--variant=--kl-sample 16", "--json", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    pairs = report["pairs"]
    assert [p["first"] for p in pairs] == ["reference", "project", "against", "variant"]
    for pair in pairs:
        assert pair["reference_s"] > 0 and pair["project_s"] > 0
        assert pair["ratio"] == pytest.approx(pair["reference_s"] / pair["project_s"])
        assert pair["against_s"] > 0 and pair["against_ratio"] == pytest.approx(pair["against_s"] / pair["project_s"])
        assert pair["variant_ratio"] == pytest.approx(pair["reference_s"] / pair["variant_s"])
        assert pair["variant_vs_project"] == pytest.approx(pair["project_s"] / pair["variant_s"])
    assert report["median_ratio"] == pytest.approx(statistics.median(p["ratio"] for p in pairs))
    assert report["median_against_ratio"] == pytest.approx(statistics.median(p["against_ratio"] for p in pairs))
    assert report["median_variant_vs_project"] == pytest.approx(statistics.median(p["variant_vs_project"] for p in pairs))
    # the in-run rates, from each run's own charts/SPS points (the stand-in logs one an iteration, as CleanRL does)
    for pair in pairs:
        assert min(pair[f"{side}_in_run_sps"] for side in ("reference", "project", "against", "variant")) > 0
        assert pair["in_run_ratio"] == pytest.approx(pair["project_in_run_sps"] / pair["reference_in_run_sps"])
        assert pair["variant_in_run_ratio"] == pytest.approx(pair["variant_in_run_sps"] / pair["reference_in_run_sps"])
        assert pair["against_in_run_ratio"] == pytest.approx(pair["project_in_run_sps"] / pair["against_in_run_sps"])
    for key in ("in_run_ratio", "variant_in_run_ratio", "against_in_run_ratio"):
        assert report[f"median_{key}"] == pytest.approx(statistics.median(p[key] for p in pairs))
    # the printed lines: a line per pair, in order, the commands, then the medians with the machine
    lines = result.stdout.splitlines()
    assert sum("; in-run reference " in line for line in lines) == 4
    assert any(line.startswith("median of 4 per-pair in run ratios") for line in lines)
    assert [line.split(":")[0] for line in lines if line.startswith("pair ")] == ["pair 1", "pair 2", "pair 3", "pair 4"]
    assert "variant:   python ppo_atari_envpool.py" in result.stdout and "--kl-sample 16" in result.stdout
    assert f"x{report['median_variant_vs_project']:.3f}" in lines[-1]
    assert any(f"x{report['median_ratio']:.3f}" in line and "cores" in line and report["machine"] in line for line in lines)
    # both sides train the same configuration: the shared flags are the same
    shared = report["reference"][1:]
    assert report["project"][1:len(shared) + 1] == shared and report["project"][0] == "ppo_atari_envpool.py"
    assert not (tmp_path / "runs").exists()  # every run happened in a temporary directory, removed after


def test_edits_make_the_stand_in_run_and_an_unedited_copy_fails(tmp_path):
    bench = vs_reference.BENCHES["ppo_atari"]
    name = vs_reference.prepare_reference(bench, STAND_IN, tmp_path)
    edited = (tmp_path / name).read_text()
    assert "import gymnasium as gym" in edited and "envs.num_envs = args.num_envs" not in edited
    argv = ["--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "4", "--total-timesteps", "8"]
    ran = subprocess.run([sys.executable, name, *argv], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0 and "stand-in: 8 steps" in ran.stdout, ran.stderr[-3000:]
    original = subprocess.run([sys.executable, str(STAND_IN / bench.reference), *argv], cwd=tmp_path,
                              capture_output=True, text=True)
    assert original.returncode != 0  # without the edits it cannot run on today's libraries


def test_purejaxrl_driver_passes_the_sizes_and_drops_brax(tmp_path):
    bench = vs_reference.BENCHES["ppo_cartpole_jax"]
    name = vs_reference.prepare_reference(bench, STAND_IN, tmp_path)
    wrappers = (tmp_path / "wrappers.py").read_text()
    assert "import brax" not in wrappers and "from brax" not in wrappers and "import navix" not in wrappers
    opts, _ = vs_reference.parse(["--reference", str(STAND_IN), "--bench", "ppo_cartpole_jax", "--num-envs", "8",
                                  "--num-steps", "16", "--total-timesteps", "512"])
    reference_argv, project_argv = vs_reference.commands(bench, opts, name)
    ran = subprocess.run([sys.executable, *reference_argv], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    config = json.loads((tmp_path / "stand_in_config.json").read_text())
    assert (config["NUM_ENVS"], config["NUM_STEPS"], config["TOTAL_TIMESTEPS"]) == (8, 16, 512)
    assert config["DEBUG"] is False and config["ENV_NAME"] == "CartPole-v1" and config["LR"] == 2.5e-4
    # the project trains PureJaxRL's configuration: its hyper-parameters, as plain PPO
    value = lambda flag: project_argv[project_argv.index(flag) + 1]
    assert "--ewma-com" not in project_argv and "--anneal-lr" in project_argv
    assert (value("--num-envs"), value("--hidden-size"), value("--num-layers"), value("--clip-coef")) == ("8", "64", "2", "0.2")


@pytest.mark.parametrize("args, text", [
    (["--pairs", "2"], "--pairs must be at least 3"),
    (["--total-timesteps", "33"], "--total-timesteps must be a multiple of num_envs x num_steps = 32"),
    (["--num-envs", "0"], "--num-envs must be at least 1"),
    (["--num-steps", "-4"], "--num-steps must be at least 1"),
    (["--num-envs", "1", "--num-steps", "2", "--total-timesteps", "2"], "must split into the 4 minibatches"),
    (["--bench", "ppo_minatar_jax", "--num-envs", "6", "--num-steps", "2", "--total-timesteps", "12"],
     "must split into the 8 minibatches"),
    (["--num-envs", "8", "--num-steps", "128", "--total-timesteps", str(2**31)], "--total-timesteps must be below"),
    (["--reference", "/nonexistent"], "has no cleanrl/ppo_atari_envpool.py"),
    (["--env-id", "Breakout-v6"], "--env-id Breakout-v6 is not an environment of the --bench ppo_atari scripts"),
    (["--json", "/nonexistent/r.json"], "--json /nonexistent/r.json: no directory /nonexistent"),
    (["--bench", "ppo_cartpole_jax", "--reference", str(STAND_IN / "cleanrl")], "has no purejaxrl/ppo.py"),
    (["--against", "no-such-revision"], "--against no-such-revision: no cleanrl_scale/ppo_atari_envpool.py at that"),
    (["--variant", ""], "--variant must name flags"),
    (["--variant", "--kl-sample '16"], "--variant \"--kl-sample '16\": No closing quotation"),
    (["--against", ""], "--against must name a git revision"),
    (["--against", "HEAD", "--variant", "--kl-sample 16"], "--pairs must be at least 4 with --against and --variant"),
])
def test_bad_input_stops_before_any_run(tmp_path, args, text):
    base = {"--reference": str(STAND_IN), "--bench": "ppo_atari", **dict(zip(TINY[::2], TINY[1::2]))}
    base.update(dict(zip(args[::2], args[1::2])))
    base.setdefault("--json", str(tmp_path / "r.json"))
    result = harness(*[x for kv in base.items() for x in kv], cwd=tmp_path)
    assert_bad_input(result, tmp_path, text)
    assert not (tmp_path / "r.json").exists()


def test_a_purejaxrl_checkout_without_wrappers_is_refused(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "purejaxrl").mkdir(parents=True)
    (checkout / "purejaxrl" / "ppo.py").write_text((STAND_IN / "purejaxrl" / "ppo.py").read_text())
    result = harness("--reference", checkout, "--bench", "ppo_cartpole_jax", cwd=tmp_path)
    assert_bad_input(result, tmp_path, "has no purejaxrl/wrappers.py")


def test_a_checkout_the_edits_do_not_match_stops_with_the_line(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "cleanrl").mkdir(parents=True)
    text = (STAND_IN / "cleanrl" / "ppo_atari_envpool.py").read_text().replace('env_type="gym"', 'env_type="gymnasium"')
    (checkout / "cleanrl" / "ppo_atari_envpool.py").write_text(text)
    result = harness("--reference", checkout, "--bench", "ppo_atari", *TINY, cwd=tmp_path)
    assert_bad_input(result, tmp_path, "has no line 'env_type=\"gym\",'")


def test_steady_rates_are_the_extra_steps_over_the_extra_seconds():
    rates = vs_reference.steady_rates({"reference": {100: 10.0, 300: 14.0}, "project": {100: 12.0, 300: 14.5}}, [100, 300])
    assert rates == pytest.approx({"reference": 200 / 4.0, "project": 200 / 2.5})
    unresolved = vs_reference.steady_rates({"reference": {100: 10.0, 300: 9.9}, "project": {100: 1.0, 300: 2.0}}, [100, 300])
    assert unresolved == {"reference": None, "project": pytest.approx(200.0)}


def test_an_in_run_rate_is_the_steps_over_the_seconds_of_the_second_half_of_the_iterations(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    walls = [100.0, 103.0, 104.0, 105.5, 106.0, 108.0]  # the ends of 6 iterations of 32 steps
    writer = SummaryWriter(str(tmp_path / "runs" / "run"))
    for i, wall in enumerate(walls):
        writer.add_scalar("charts/SPS", 1.0, 32 * (i + 1), walltime=wall)
    writer.close()
    assert vs_reference.in_run_rate(tmp_path) == pytest.approx(3 * 32 / (108.0 - 104.0))  # iterations 4 to 6
    assert vs_reference.in_run_rate(tmp_path / "nowhere") is None
    short = SummaryWriter(str(tmp_path / "short" / "runs" / "run"))
    for i in range(3):
        short.add_scalar("charts/SPS", 1.0, 32 * (i + 1), walltime=100.0 + i)
    short.close()
    assert vs_reference.in_run_rate(tmp_path / "short") is None  # under 4 points
    still = SummaryWriter(str(tmp_path / "still" / "runs" / "run"))
    for i in range(4):
        still.add_scalar("charts/SPS", 1.0, 32 * (i + 1), walltime=100.0)
    still.close()
    assert vs_reference.in_run_rate(tmp_path / "still") is None  # no time between the window's two points


def test_steady_runs_both_budgets_cold_first(tmp_path):
    """--steady on the stand-in, whose 192 random steps take hardly longer than 64: the cold runs (each side at both
    budgets) come first; a pair where a side took no longer says so and keeps its whole-process ratio, and the steady
    median is over the resolved pairs alone."""
    out = tmp_path / "result.json"
    result = harness("--reference", STAND_IN, "--bench", "ppo_atari", "--num-envs", "2", "--num-steps", "16",
                     "--total-timesteps", "64", "--pairs", "3", "--steady", "--json", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    cold = [i for i, line in enumerate(lines) if line.startswith("cold (filling the cache, 192 steps): reference")]
    assert "64 and 192 steps a run" in lines[0] and len(cold) == 1
    assert not any(line.startswith("pair ") for line in lines[: cold[0]])  # the cold runs before any pair
    report = json.loads(out.read_text())
    assert len(report["pairs"]) == 3 and all("ratio" in pair for pair in report["pairs"])
    resolved = sorted(p["steady_ratio"] for p in report["pairs"] if "steady_unresolved" not in p)
    for pair, line in zip(report["pairs"], [line for line in lines if line.startswith("pair ")]):
        assert ("steady unresolved" in line) == ("steady_unresolved" in pair) != ("steady_ratio" in pair)
    if resolved:
        assert report["median_steady_ratio"] == pytest.approx(statistics.median(resolved))
    else:
        assert "median_steady_ratio" not in report


def test_the_minatar_bench_trains_purejaxrl_s_minibatches_and_epochs():
    bench = vs_reference.BENCHES["ppo_minatar_jax"]
    opts, _ = vs_reference.parse(["--reference", str(STAND_IN), "--bench", "ppo_minatar_jax", "--num-envs", "64",
                                  "--total-timesteps", "4096"])
    reference_argv, project_argv = vs_reference.commands(bench, opts, "driver.py")
    config = json.loads(reference_argv[1])
    assert (config["ENV_NAME"], config["NUM_ENVS"], config["NUM_STEPS"]) == ("SpaceInvaders-MinAtar", 64, 16)
    assert (config["NUM_MINIBATCHES"], config["UPDATE_EPOCHS"]) == (8, 4)
    value = lambda flag: project_argv[project_argv.index(flag) + 1]
    assert (value("--num-minibatches"), value("--update-epochs"), value("--hidden-size")) == ("8", "4", "64")
    assert "--no-compile-cache" in project_argv  # both sides cold, unless --steady shares a cache
