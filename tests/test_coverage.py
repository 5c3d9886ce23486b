"""The coverage metric of the data-collection paper (App. B.7): what the scripts save, and the analysis's arithmetic
(benchmark/coverage_metric.py)."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from benchmark.coverage_metric import (batch_coverage, coverage_tables, cumulative_coverage, grid_cells, project,
                                       read_coverage)
from helpers import load_script


def test_grid_cells_by_hand():
    low, high = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    points = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.49], [0.999, 0.0], [0.49, 0.51]])
    # G = 2: (i, j) = floor(2 x), floor(2 y), the upper edge in the last cell; index i * 2 + j
    assert grid_cells(points, low, high, 2).tolist() == [0, 3, 2, 2, 1]
    # G = 4 over a box that is not the unit square
    box = grid_cells(np.array([[-2.0, 10.0], [2.0, 30.0], [-1.0, 19.0]]), np.array([-2.0, 10.0]), np.array([2.0, 30.0]), 4)
    assert box.tolist() == [0, 15, 1 * 4 + 1]
    # an axis of zero width is one cell wide: every point in its first cell
    flat = grid_cells(np.array([[0.0, 5.0], [1.0, 5.0], [0.6, 5.0]]), np.array([0.0, 5.0]), np.array([1.0, 5.0]), 3)
    assert flat.tolist() == [0, 2 * 3, 1 * 3]


def test_cumulative_coverage_by_hand_and_against_the_definition():
    at, cvg = cumulative_coverage(np.array([0, 0, 1, 5, 1, 7]), np.array([1, 1, 2, 2, 3, 5]), 3)
    assert at.tolist() == [1, 2, 3, 5] and cvg.tolist() == pytest.approx([1 / 9, 3 / 9, 3 / 9, 4 / 9])
    rng = np.random.default_rng(0)
    for grid, n in [(4, 50), (8, 500), (2, 1)]:  # one state alone too
        cells, iterations = rng.integers(0, grid * grid, n), rng.integers(1, 20, n)  # unsorted, as runs append
        at, cvg = cumulative_coverage(cells, iterations, grid)
        # the definition: |cells occupied by the states of iterations <= i| / G^2
        expected = [len(set(cells[iterations <= i].tolist())) / grid**2 for i in sorted(set(iterations.tolist()))]
        assert at.tolist() == sorted(set(iterations.tolist())) and cvg.tolist() == pytest.approx(expected)
        assert np.all(np.diff(cvg) >= 0) and 0 < cvg[-1] <= 1


def test_batch_coverage_by_hand_and_against_the_definition():
    at, cvg = batch_coverage(np.array([0, 0, 1, 5, 1, 7]), np.array([1, 1, 2, 2, 3, 5]), 3)
    assert at.tolist() == [1, 2, 3, 5] and cvg.tolist() == pytest.approx([1 / 9, 2 / 9, 1 / 9, 1 / 9])
    rng = np.random.default_rng(1)
    cells, iterations = rng.integers(0, 64, 300), rng.integers(1, 30, 300)
    at, cvg = batch_coverage(cells, iterations, 8)
    assert cvg.tolist() == pytest.approx([len(set(cells[iterations == i].tolist())) / 64 for i in at])


def test_uniform_states_cover_more_cells_than_clustered_ones_after_one_projection():
    rng = np.random.default_rng(0)
    uniform = rng.random((300, 32))
    centres = rng.random((3, 32))
    clustered = centres[rng.integers(0, 3, 300)] + 0.01 * rng.standard_normal((300, 32))
    xy = project(np.concatenate([uniform, clustered]), seed=0, fit_points=20000)
    low, high = xy.min(axis=0), xy.max(axis=0)
    share = [len(np.unique(grid_cells(part, low, high, 16))) / 16**2 for part in (xy[:300], xy[300:])]
    assert share[0] > share[1], share  # measured: 0.20 against 0.11 of the 16 x 16 cells


def write_attempt(ppo_atari, directory, started, iterations, cut=False):
    """A TensorBoard run directory as the script leaves it: an event file named by its start time and the states."""
    directory.mkdir(parents=True)
    (directory / f"events.out.tfevents.{started}.host.1.0").write_bytes(b"")
    records = np.zeros(len(iterations), ppo_atari.coverage_dtype(8))
    records["iteration"], records["global_step"] = iterations, np.asarray(iterations) * 64
    records["features"] = started + np.asarray(iterations)[:, None]  # which attempt wrote it
    ppo_atari.append_coverage(str(directory), records)
    if cut:  # a kill during the write leaves part of a record
        with open(directory / "coverage.bin", "ab") as f:
            f.write(records[:1].tobytes()[:100])


def test_resumed_attempts_merge_and_a_cut_record_is_dropped(ppo_atari, tmp_path):
    write_attempt(ppo_atari, tmp_path / "runs" / "b_first", 100, [1, 2, 3, 4, 5, 6], cut=True)  # killed after 6
    write_attempt(ppo_atari, tmp_path / "runs" / "a_resumed", 200, [5, 6, 7, 8])  # resumed from iteration 4's checkpoint
    merged = read_coverage(tmp_path)
    assert merged["iteration"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert merged["features"][:, 0].tolist() == [101, 102, 103, 104, 205, 206, 207, 208]  # the resumed run's 5 and 6
    assert json.loads((tmp_path / "runs" / "a_resumed" / "coverage.json").read_text())["paper"] == "data-collection App. B.7"
    assert read_coverage(tmp_path / "nothing") is None


# per script: its network, the frames it sees, the thumbnail the test expects (numpy, from the uint8 frames) and the
# penultimate features it documents, computed here from the network's own layers
SAVERS = {
    "ppo_atari_envpool": (lambda m: m.Agent(4, separate_encoders=True), (4, 84, 84),
                          lambda o: o[:, -1].reshape(-1, 21, 4, 21, 4).mean(axis=(2, 4)), lambda net, x: net.network(x)),
    "pqn_atari": (lambda m: m.QNetwork(4), (4, 84, 84),
                  lambda o: o[:, -1].reshape(-1, 21, 4, 21, 4).mean(axis=(2, 4)), lambda net, x: net.network(x)),
    "ppo_rnd": (lambda m: m.Agent(18), (4, 84, 84), lambda o: o[:, -1].reshape(-1, 21, 4, 21, 4).mean(axis=(2, 4)),
                lambda net, x: net.actor[1](net.actor[0](net.network(x)))),  # the actor's hidden layer (448)
    "ppo_procgen_envpool": (lambda m: m.Agent(15, separate_encoders=True), (3, 64, 64),
                            lambda o: o.reshape(-1, 3, 16, 4, 16, 4).mean(axis=(3, 5)), lambda net, x: net.network(x)),
}


@pytest.mark.parametrize("script", sorted(SAVERS))
def test_saved_states_are_block_means_of_the_frame_and_the_penultimate_features(script):
    make, shape, thumbnail, penultimate = SAVERS[script]
    module = load_script(script)
    torch.manual_seed(0)
    net = make(module)
    obs = torch.randint(0, 256, (5, *shape), dtype=torch.uint8)
    records = module.coverage_records(net, obs, iteration=7, global_step=896)
    assert records["iteration"].tolist() == [7] * 5 and records["global_step"].tolist() == [896] * 5
    expected = np.round(thumbnail(obs.numpy().astype(np.float64)))
    assert records["obs"].shape == expected.shape
    assert np.abs(records["obs"].astype(np.float64) - expected).max() <= 1  # float32 rounding at .5 may differ
    with torch.no_grad():
        features = penultimate(net, obs.float() / 255.0).numpy()
    assert records["features"].dtype == np.float16 and records["features"].shape == features.shape
    np.testing.assert_allclose(records["features"].astype(np.float32), features, rtol=2e-3, atol=1e-3)


def write_run(ppo_atari, run_dir, features):
    """A run directory holding one attempt's saved states with these features (iterations 1, 2, ... in equal parts)."""
    attempt = run_dir / "runs" / "attempt"
    attempt.mkdir(parents=True)
    (attempt / "events.out.tfevents.100.host.1.0").write_bytes(b"")
    records = np.zeros(len(features), ppo_atari.coverage_dtype(features.shape[1]))
    records["iteration"] = 1 + np.arange(len(features)) * 4 // len(features)
    records["global_step"], records["features"] = records["iteration"] * 64, features
    ppo_atari.append_coverage(str(attempt), records)


def test_feature_coverage_of_a_run_does_not_depend_on_the_runs_beside_it(ppo_atari, tmp_path):
    """Each network's features live in its own space: a run projected alone and beside another gets one coverage
    (projected together, a second run's far-away features squeezed the first into a few cells)."""
    rng = np.random.default_rng(0)
    write_run(ppo_atari, tmp_path / "a", rng.random((120, 8)))
    write_run(ppo_atari, tmp_path / "b", 100 + 0.01 * rng.standard_normal((120, 8)))  # another network's scale
    command = {"env": "Breakout-v5"}
    tables = {names: coverage_tables([(n, tmp_path / n, command) for n in names], "features", 8, 0, 20000, "iterations")[0]
              for names in (("a",), ("a", "b"))}
    alone, beside = (t[t.run == "a"].reset_index(drop=True) for t in tables.values())
    assert len(alone) == 4 and alone.cvg.iloc[-1] > 0.1
    pd.testing.assert_frame_equal(alone, beside)
