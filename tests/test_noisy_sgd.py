"""noisy_sgd.py: the three facts of stagnation Fig. 1b / 2a / 3b, checked numerically, and its outputs."""
import csv

import numpy as np
import pytest

from helpers import assert_bad_input, load_script, read_values, run_copy, run_dirs

SCRIPT = "noisy_sgd"


@pytest.fixture(scope="module")
def sgd():
    return load_script(SCRIPT)


def curves(sgd, **flags):
    args = sgd.resolve_args(sgd.Args(num_seeds=20, **flags))
    return args, sgd.run(args)


def tail(x, steps=400):
    return x[..., -steps:].mean(axis=(-2, -1))


def test_each_step_size_plateaus_at_its_closed_form_distance_and_larger_steps_plateau_higher(sgd):
    args, (neg_distance, update_norm) = curves(sgd, step_sizes=(0.01, 0.1, 0.3))
    plateaus = tail(neg_distance)
    expected = [-sgd.plateau_distance(eta, args.noise_std, args.dim) for eta in args.step_sizes]
    np.testing.assert_allclose(plateaus, expected, rtol=0.05)
    assert plateaus[0] > plateaus[1] > plateaus[2]  # larger steps stop further from x*
    updates = tail(update_norm[..., :-1])
    assert updates[0] < updates[1] < updates[2]  # ... with larger updates


def test_small_steps_converge_slowly(sgd):
    args, (neg_distance, _) = curves(sgd, step_sizes=(0.001, 0.1))
    early = neg_distance[:, :, 100].mean(axis=1)
    assert early[0] < early[1]  # after 100 steps the small step is still far behind
    # steps until the seed-mean comes within 2x of its own plateau
    for curve, eta in zip(neg_distance.mean(axis=1), args.step_sizes):
        reached = np.argmax(curve >= -2 * sgd.plateau_distance(eta, args.noise_std, args.dim))
        if eta == 0.1:
            assert 0 < reached < 50
        else:
            assert reached == 0 and curve[-1] < -2 * sgd.plateau_distance(eta, args.noise_std, args.dim)  # not within 2000 steps


def test_switching_the_step_size_moves_the_curve_to_the_new_plateau(sgd):
    args, (neg_distance, _) = curves(sgd, step_sizes=(0.3,), switch_step=1000, switch_step_size=0.01)
    before = neg_distance[..., 800:1000].mean()
    after = neg_distance[..., -400:].mean()
    np.testing.assert_allclose(before, -sgd.plateau_distance(0.3, args.noise_std, args.dim), rtol=0.05)
    np.testing.assert_allclose(after, -sgd.plateau_distance(0.01, args.noise_std, args.dim), rtol=0.05)


def test_copy_writes_csv_of_every_seed_and_tensorboard_seed_means(tmp_path):
    result = run_copy(SCRIPT, ["--step-sizes", "0.05", "0.2", "--num-steps", "50", "--num-seeds", "3"], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    run = run_dirs(tmp_path)[0]
    with open(run / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 3 * 51
    at_10 = [float(r["neg_distance"]) for r in rows if r["step_size"] == "0.2" and r["step"] == "10"]
    scalars, _ = read_values(run / "eta_0.2")
    np.testing.assert_allclose(scalars["charts/neg_distance"][10], np.mean(at_10), rtol=1e-5)
    assert scalars["charts/neg_distance"][0] == pytest.approx(-np.sqrt(50))  # x_0 = 1-vector


@pytest.mark.parametrize("flags, message", [
    (["--step-sizes", "1.5"], "--step-sizes must each lie in (0, 1)"),
    (["--switch-step", "10"], "--switch-step-size must lie in (0, 1)"),
    (["--switch-step", "5000", "--switch-step-size", "0.1"], "--switch-step must lie in [0, --num-steps)"),
    (["--num-seeds", "0"], "--num-seeds must be positive"),
    (["--seed", "-1"], "--seed must lie in [0, 2**31 - --num-seeds] = [0, 2147483643] (got -1)"),
    # the seeds --seed.. of its --num-seeds runs, within the int32 seeds of every other script
    (["--seed", str(2**31)], "--seed must lie in [0, 2**31 - --num-seeds] = [0, 2147483643] (got 2147483648)"),
    (["--seed", str(2**64), "--num-seeds", "1"], "--seed must lie in [0, 2**31 - --num-seeds] = [0, 2147483647] (got 18446744073709551616)"),
    (["--seed", str(2**31 - 2), "--num-seeds", "3"], "--seed must lie in [0, 2**31 - --num-seeds] = [0, 2147483645]"),
    (["--num-steps", "2000000000"], "needs 596.0 GiB for the curves, more than half of this machine's"),
    (["--init", "nan"], "--init must be a finite number"),
    (["--noise-std", "inf"], "--noise-std must be a finite number"),
    (["--init", "1e300"], "--init and --noise-std must be at most 1e150 / sqrt(--dim)"),
    (["--step-sizes", "0.1", "0.1000001"], "--step-sizes must differ in their first 6 significant digits"),
    (["--switch-step-size", "0.1"], "--switch-step-size applies only with --switch-step"),
    (["--dim", "10000000000"], "--dim 10000000000 x --num-seeds 5 x 4 step sizes needs 8940.7 GiB for the iterates"),
    (["--exp-name", "a" * 129], "--exp-name must be at most 128 bytes (it names a directory under runs/; got 129)"),
])
def test_bad_flags(tmp_path, flags, message):
    assert_bad_input(run_copy(SCRIPT, flags, tmp_path, timeout=120), tmp_path, message)


@pytest.mark.parametrize("argv, message", [
    (["--dim", "1e10"], "Error parsing --dim: invalid literal for int() with base 10: '1e10'; see --help"),
    (["--no-such-flag"], "Unrecognized options: --no-such-flag; see --help"),
])
def test_what_tyro_cannot_read_is_one_line(argv, message, monkeypatch, capsys):
    """A malformed flag is a BadFlag naming it (tyro itself draws a box of several lines); exit 2 and the one line, as
    the other refusals (test_bad_flags)."""
    module = load_script("noisy_sgd")
    monkeypatch.setattr("sys.argv", ["noisy_sgd.py", *argv])
    with pytest.raises(module.BadFlag) as refused:
        module.parse_command_line()
    assert str(refused.value) == message and capsys.readouterr().err == ""


def test_a_malformed_flag_exits_2_with_one_line(tmp_path):
    assert_bad_input(run_copy("noisy_sgd", ["--num-steps", "many"], tmp_path, timeout=120), tmp_path,
                     "Error parsing --num-steps: invalid literal for int() with base 10: 'many'")
