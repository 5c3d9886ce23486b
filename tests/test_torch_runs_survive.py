"""The four torch scripts (ppo_atari_envpool, pqn_atari, ppo_rnd on real envpool Atari, ppo_procgen_envpool on real
envpool Procgen, evaluating on held-out levels every other iteration): the gradient kurtosis is
the raw gradient's, the same seed logs the same values, a run resumed from a checkpoint continues exactly (but for
its fresh episodes), SIGTERM checkpoints and exits 75, and a loss that is not finite stops the run."""
import signal
import time

import numpy as np
import pytest
import torch

from benchmark.coverage_metric import read_coverage
from helpers import (assert_refused, checkpoint_change, finish, load_script, read_tensorboard_run, read_values, run_copy,
                     run_dirs, shared_runs, start_copy, wait_for_file)

SMALL = ["--num-envs", "4", "--num-steps", "32", "--dynamics-batch", "64"]
SCRIPTS = {
    "ppo_atari_envpool": SMALL,
    "pqn_atari": SMALL,
    "ppo_rnd": SMALL + ["--num-iterations-obs-norm-init", "1"],
    "ppo_procgen_envpool": SMALL + ["--eval-every", "2", "--eval-episodes", "2", "--num-levels", "20"],
}
# a flag a checkpoint must agree on, besides --num-envs
MUST_MATCH = {"ppo_atari_envpool": (["--separate-encoders"], "--separate-encoders False, not True"),
              "pqn_atari": (["--optimizer", "radam"], "--optimizer adam, not radam"),
              "ppo_rnd": (["--env-id", "Venture-v5"], "--env-id MontezumaRevenge-v5, not Venture-v5"),
              "ppo_procgen_envpool": (["--env-id", "BigfishEasy-v0"], "--env-id StarpilotEasy-v0, not BigfishEasy-v0")}
RESUMABLE = ["--total-timesteps", "640", "--dynamics-every", "2", "--save-every", "2"]  # 5 iterations
# The scripts with --compile. A compiled run and the eager one part as any two runs whose float rounding differs do:
# a ReLU whose input sits at 0 (a conv bias crossing 0 over a game's black frames) flips at another update, and Adam
# turns rounding-size gradients into update-size steps (PQN's eps is 1e-8). Measured over 2 iterations of one epoch:
# entries up to 1.1e-4 apart (ppo_procgen_envpool; 6e-8 ppo_atari_envpool, 4.5e-5 pqn_atari), one unit more or less
# at the dormant threshold (ppo_rnd), the losses within 1e-5. So the parameters are compared as a whole network,
# against the size of one iteration's update, and the unit counts within a unit or two.
COMPILED = ["ppo_atari_envpool", "pqn_atari", "ppo_rnd", "ppo_procgen_envpool"]
# atol (beside rtol 1e-4) of the metrics that count units: half a percentage point (1-9 units of the scripts'
# 200-1,760) and 2 ranks; and of PPO's policy loss, a mean of terms of both signs near 0: eager Adam's fused kernel and
# the compiled step round apart, 1.4e-6 at -5e-4 in ppo_procgen_envpool's second iteration, as much as eager fused and
# eager unfused Adam do (1.1e-6, measured); every other tag 1e-6
ATOL = {"dynamics/dormant_pct": 0.5, "dynamics/dormant_pct_critic": 0.5, "dynamics/feature_rank": 2,
        "dynamics/feature_rank_critic": 2, "losses/policy_loss": 1e-5}
# rtol (beside 1e-4) of the whole gradient's norm: at the second iteration it is taken at parameters already apart as
# above, and a norm sums every entry's difference: pqn_atari's was 20.5609 eager, 20.5585 compiled (1.2e-4; CI, an
# Intel Xeon), its first iteration's 3.4e-6 apart
RTOL = {"losses/grad_norm": 1e-3, "charts/update_norm": 1e-3, "charts/update_norm_actor": 1e-3}  # the update's norms alike
NETWORKS = {"ppo_atari_envpool": ["agent"], "pqn_atari": ["q_network"], "ppo_rnd": ["agent", "rnd_model"],
            "ppo_procgen_envpool": ["agent"]}  # the networks' keys in a checkpoint
TIMINGS = ("charts/SPS", "charts/first_iteration_seconds")  # wall times: never the same twice
# B.4's gradient kurtosis is of log(|g| + 1e-8): the gradient's tiniest entries weigh most, sums that cancel to 1e-8
# and below, whose rounding follows the order in which the convolution's backward pass reduces over threads. On CI (an
# Intel Xeon) a resumed pqn_atari run logged 1.3763452 at iteration 4 where the run it continues logged 1.3763442
# (7e-7 apart), every loss and norm of both runs equal to the last bit
KURTOSIS_RTOL = 1e-5


def run_tiny(script, flags, workdir, extra_env=None):
    """A copy of `script` at its tiny settings (SCRIPTS) plus `flags`, which must succeed: (result, scalars)."""
    result = run_copy(script, SCRIPTS[script] + flags, workdir, timeout=600, extra_env=extra_env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, read_values(run_dirs(workdir)[0])[0]


def logged(run_dir, after=-1):
    """{tag: [(step, value)]} of a run's events after global step `after` (the timings left out)."""
    scalars, _ = read_tensorboard_run(run_dir)
    pairs = {tag: [(e.step, e.value) for e in events if e.step > after] for tag, events in scalars.items() if tag not in TIMINGS}
    return {tag: p for tag, p in pairs.items() if p}


def assert_same_events(got, expected):
    """Two logged() reads: the same tags at the same steps, every value equal to the last bit but the gradient
    kurtosis, within KURTOSIS_RTOL."""
    kurtosis = "dynamics/grad_kurtosis"
    assert {t: [s for s, _ in p] for t, p in got.items()} == {t: [s for s, _ in p] for t, p in expected.items()}
    assert {t: p for t, p in got.items() if t != kurtosis} == {t: p for t, p in expected.items() if t != kurtosis}
    if kurtosis in expected:
        np.testing.assert_allclose([v for _, v in got[kurtosis]], [v for _, v in expected[kurtosis]], rtol=KURTOSIS_RTOL)


@pytest.mark.parametrize("script", SCRIPTS)
def test_gradient_kurtosis_is_of_the_raw_gradient_whatever_the_clip(script, tmp_path):
    """B.4 is read before clip_grad_norm_ rescales the gradient: a clip 10^7 times tighter logs the same kurtosis
    (log(|g| + 1e-8) is not scale-invariant: read after clipping, it moved with the clip factor)."""
    kurtosis = {}
    for clip in ("1000", "0.0001"):
        _, scalars = run_tiny(script, ["--total-timesteps", "128", "--max-grad-norm", clip], tmp_path / clip)
        kurtosis[clip] = scalars["dynamics/grad_kurtosis"]
        assert scalars["losses/grad_norm"][0] > 0.0001  # the tight clip is active
    assert kurtosis["1000"] == kurtosis["0.0001"] and len(kurtosis["1000"]) == 1


@shared_runs(minutes=2, params=list(SCRIPTS))
def uninterrupted(request, tmp_path_factory):
    """5 iterations that restart their envs after iteration 2, as a run resumed from iteration 2 does; run twice, the
    second time without saving the coverage states (--coverage-samples 0)."""
    runs = []
    for name, flags in (("first", []), ("second", ["--coverage-samples", "0"])):
        workdir = tmp_path_factory.mktemp(f"{request.param}_{name}")
        _, scalars = run_tiny(request.param, RESUMABLE + ["--reset-envs-at", "2"] + flags, workdir)
        runs.append((run_dirs(workdir)[0], scalars))
    return request.param, runs


def test_same_seed_and_flags_log_the_same_values_on_cpu_and_the_coverage_states_change_none(uninterrupted):
    """Two runs of one seed, one saving the coverage states and one not: every tag the same to the last bit; the
    states (iterations 1, 2, 4, the 64 of the dynamics/ sample) only in the first."""
    _, ((first_dir, _), (second_dir, _)) = uninterrupted
    assert logged(first_dir) == logged(second_dir)
    assert read_coverage(first_dir.parent.parent)["iteration"].tolist() == [1] * 64 + [2] * 64 + [4] * 64
    assert read_coverage(second_dir.parent.parent) is None


def test_the_update_norms_are_how_far_an_iteration_moved_the_parameters(uninterrupted):
    """charts/update_norm, the outer step's size (stagnation §3; benchmark/advise.py's step for PQN, which has no KL),
    and for PPO charts/update_norm_actor, the policy's parameters alone (encoder and actor head): the L2 norms of
    iteration 5's change, against the checkpoints of iterations 4 and 5 (the agent's; RND's predictor not counted)."""
    script, ((run_dir, scalars), _) = uninterrupted
    change = checkpoint_change(run_dir, NETWORKS[script][0], 4, 5)
    norms = {"charts/update_norm": torch.cat(list(change.values())).norm().item()}
    if script != "pqn_atari":
        norms["charts/update_norm_actor"] = torch.cat([v for k, v in change.items() if k.startswith(("network.", "actor."))]).norm().item()
        assert 0 < norms["charts/update_norm_actor"] < norms["charts/update_norm"]
    for tag, norm in norms.items():
        assert len(scalars[tag]) == 5 and scalars[tag][-1] == pytest.approx(norm, rel=1e-4)  # float32 sums


def test_a_resumed_run_continues_exactly(uninterrupted, tmp_path):
    """Every event after the checkpoint (iteration 2, step 256), at the same steps, every tag: the same values (the
    gradient kurtosis within KURTOSIS_RTOL). The checkpoint's Adam moments are made contiguous first, as a CUDA run
    saves them: the CPU run's conv weights are channels_last, and Adam's fused CPU kernel reads a moment by the memory
    order of its parameter."""
    script, ((run_dir, _), _) = uninterrupted
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_2.pt", "iter_4.pt", "iter_5.pt"]
    saved = torch.load(run_dir / "checkpoints" / "iter_2.pt", weights_only=False)
    moments = [v for state in saved["optimizer"]["state"].values() for k, v in state.items() if k != "step"]
    assert any(not v.is_contiguous() for v in moments)  # channels_last, as the run left them
    saved["optimizer"]["state"] = {i: {k: v.contiguous() for k, v in state.items()}
                                   for i, state in saved["optimizer"]["state"].items()}
    torch.save(saved, tmp_path / "iter_2.pt")
    result, _ = run_tiny(script, RESUMABLE + ["--resume", tmp_path / "iter_2.pt"], tmp_path)
    assert "resuming" in result.stdout and "fresh episodes" in result.stdout and "flags changed" not in result.stdout
    resumed = logged(run_dirs(tmp_path)[0])
    assert [step for step, _ in resumed["losses/grad_norm"]] == [384, 512, 640]  # iterations 3, 4, 5
    assert_same_events(resumed, logged(run_dir, after=256))
    after = read_coverage(run_dir.parent.parent)
    assert read_coverage(tmp_path).tobytes() == after[after["iteration"] > 2].tobytes()  # iteration 4's states


@pytest.mark.parametrize("script", COMPILED)
def test_compiled_and_eager_agree_and_a_compiled_resume_continues_exactly(script, tmp_path):
    """--compile (torch.compile, as LeanRL): over 2 iterations of one epoch the compiled run logs what the eager run
    logs (rtol RTOL's or 1e-4, atol ATOL's or 1e-6) and ends within 5% of one iteration's update of the eager
    run's parameters (each network's whole norm); resumed from its iteration-2 checkpoint, compiled again, it
    continues exactly. TorchInductor compiled every function the script hands it: its cache (this test's own) holds
    a graph for each, and the eager run wrote none."""
    flags = ["--total-timesteps", "384", "--update-epochs", "1", "--dynamics-every", "1", "--save-every", "1",
             "--reset-envs-at", "2"]  # 3 iterations
    cache = tmp_path / "inductor"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    _, eager = run_tiny(script, flags, tmp_path / "eager", env)
    assert not (cache / "fxgraph").exists()
    _, compiled = run_tiny(script, flags + ["--compile"], tmp_path / "compiled", env)
    # policy (and RND's curiosity) step, GAE / Q(lambda) targets, minibatch gradient (forward and backward), step
    graphs = list((cache / "fxgraph").iterdir())
    assert len(graphs) >= (6 if script == "ppo_rnd" else 5), graphs
    assert set(compiled) == set(eager) and len(compiled["charts/first_iteration_seconds"]) == 1
    # charts/ddr = batch / losses/approx_kl: a KL near 0 (1e-5 to 1e-12 here) makes it ill-conditioned, and the KL
    # itself, that small, is within atol 1e-6 whatever it is: neither says much at 2 iterations
    apart = [tag for tag in sorted(set(eager) - set(TIMINGS) - {"charts/ddr"})
             if not np.allclose(compiled[tag][:2], eager[tag][:2], rtol=RTOL.get(tag, 1e-4), atol=ATOL.get(tag, 1e-6),
                         equal_nan=True)]
    assert not apart, {tag: (eager[tag][:2], compiled[tag][:2]) for tag in apart}
    runs = {name: run_dirs(tmp_path / name)[0] for name in ("eager", "compiled")}
    saved = {(name, i): torch.load(run / "checkpoints" / f"iter_{i}.pt", weights_only=False)
             for name, run in runs.items() for i in (1, 2)}
    for network in NETWORKS[script]:
        def flat(name, i):
            return torch.cat([p.flatten() for p in saved[name, i][network].values()])
        step = (flat("eager", 2) - flat("eager", 1)).norm()  # what iteration 2 changed
        assert (flat("compiled", 2) - flat("eager", 2)).norm() <= 0.05 * step, network
    # the resumed runs read the compiled run's kernels from its cache (what a rerun on one machine does)
    resumed, _ = run_tiny(script, flags + ["--compile", "--resume", runs["compiled"] / "checkpoints" / "iter_2.pt"],
                        tmp_path / "resumed", env)
    assert "resuming" in resumed.stdout
    assert_same_events(logged(run_dirs(tmp_path / "resumed")[0]), logged(runs["compiled"], after=256))  # iteration 3
    # and an eager run's checkpoint resumes compiled (the learning rate becomes a tensor, the optimiser's state is kept)
    crossed, logs = run_tiny(script, flags + ["--compile", "--resume", runs["eager"] / "checkpoints" / "iter_2.pt"],
                           tmp_path / "crossed", env)
    assert "resuming" in crossed.stdout and len(logs["charts/learning_rate"]) == 1
    assert logs["charts/learning_rate"][0] == pytest.approx(eager["charts/learning_rate"][2], rel=1e-6)
    # each steps with its own kernels whatever the checkpoint says: eager fused (Adam), compiled the compiled step
    def fused(name, i):
        saved = torch.load(run_dirs(tmp_path / name)[0] / "checkpoints" / f"iter_{i}.pt", weights_only=False)
        return bool(saved["optimizer"]["param_groups"][0]["fused"])
    assert fused("eager", 1) and not fused("compiled", 1) and not fused("crossed", 3)


@pytest.mark.parametrize("script", ["ppo_atari_envpool", "ppo_rnd"])
def test_kl_sample_of_the_whole_batch_is_the_exact_kl(script, tmp_path):
    kl = [run_tiny(script, ["--total-timesteps", "128", "--dynamics-every", "0", *flags], tmp_path / str(i))[1]["losses/approx_kl"]
          for i, flags in enumerate([[], ["--kl-sample", "128"]])]
    assert kl[0] == pytest.approx(kl[1], rel=1e-5) and kl[0][0] > 0


def test_resume_refuses_another_network_or_a_finished_run(uninterrupted):
    """The flag checks read the checkpoint (in this process: tests/test_scripts_refuse.py runs a refusal of --resume
    as the exit-2 subprocess)."""
    script, ((run_dir, _), _) = uninterrupted
    checkpoint = run_dir / "checkpoints" / "iter_2.pt"
    module = load_script(script)
    for argv, text in [(["--num-envs", "8", "--total-timesteps", "1280"], "--num-envs 4, not 8"),
                       (MUST_MATCH[script][0] + ["--total-timesteps", "640"], MUST_MATCH[script][1]),
                       (["--total-timesteps", "256"], "is at iteration 2, not before the last (2)")]:
        assert_refused(module, SCRIPTS[script] + argv + ["--resume", checkpoint], text)


# the appendix's contract, on one script (the appendix is one text in every torch script: tests/test_appendix.py; each
# script's own checkpoint resumes in test_a_resumed_run_continues_exactly)
@pytest.mark.parametrize("script, signum", [("ppo_atari_envpool", signal.SIGTERM), ("ppo_atari_envpool", signal.SIGUSR1),
                                            ("ppo_atari_envpool", signal.SIGINT)])
def test_a_signal_checkpoints_at_the_end_of_the_iteration_and_exits_75_or_130(script, signum, tmp_path):
    """The signal a launcher (SIGTERM) or Slurm before a timeout (SIGUSR1) sends, or a first Ctrl-C, sent to a real
    run: it writes a checkpoint, says so, exits 75 (Ctrl-C: 130, no traceback); the checkpoint resumes the run (a
    Ctrl-C's is the same save_checkpoint call as the SIGTERM's of the same script, whose run resumes it)."""
    flags = ["--total-timesteps", "12800", "--dynamics-every", "0", "--save-every", "1", "--keep-checkpoints", "2"]
    process = start_copy(script, SCRIPTS[script] + flags, tmp_path / "run")
    wait_for_file(process, tmp_path / "run", "runs/*/checkpoints/iter_2.pt", timeout=120)
    process.send_signal(signum)
    result = finish(process, 300)
    assert result.returncode == (130 if signum == signal.SIGINT else 75), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    # a checkpoint every iteration, the newest 2 kept: the iteration it stopped after and the one before
    checkpoints = sorted((run_dirs(tmp_path / "run")[0] / "checkpoints").iterdir(), key=lambda p: int(p.stem[5:]))
    iteration = int(checkpoints[-1].stem[5:])
    assert [p.name for p in checkpoints] == [f"iter_{iteration - 1}.pt", f"iter_{iteration}.pt"]
    assert 2 < iteration < 100 and f"stopped by signal {int(signum)} after iteration {iteration}; resume with --resume {checkpoints[-1].relative_to(tmp_path / 'run')}" in result.stdout
    # said as it arrived: iterations of well under a second end before STOP_SECONDS
    assert f"{signal.Signals(signum).name} received: stopping at the end of iteration {iteration} (in about" in result.stderr
    if signum != signal.SIGINT:
        flags = ["--total-timesteps", str(128 * (iteration + 1)), "--dynamics-every", "0", "--resume", checkpoints[-1]]
        _, resumed = run_tiny(script, flags, tmp_path / "resumed")
        assert len(resumed["losses/grad_norm"]) == 1


def same(a, b):
    """Whether two checkpoints' entries hold the same values (tensors, arrays, RNG states, nested)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


# long iterations (8 envs x 1024 steps of Breakout, one epoch): about twice STOP_SECONDS on 2 cores (at 512 steps an
# iteration once took under STOP_SECONDS, and the stop waited for iteration 2's end); the coverage states end
# iteration 1 with a file
LONG_ITERATIONS = ["--num-envs", "8", "--num-steps", "1024", "--update-epochs", "1", "--num-minibatches", "4",
                   "--dynamics-every", "1", "--dynamics-batch", "64", "--coverage-samples", "8", "--coverage-every", "1"]


def test_a_signal_in_a_long_iteration_stops_at_once_with_the_checkpoint_of_its_start(tmp_path):
    """SIGTERM early in iteration 2 of iterations longer than STOP_SECONDS: exit 75 within seconds, not at the
    iteration's end. Its checkpoint is iteration 1's, kept in memory when iteration 2 began (no --save-every: nothing
    was on disk), and holds what a run saving iteration 1 writes: the networks, Adam, the counters and every RNG."""
    process = start_copy("ppo_atari_envpool", LONG_ITERATIONS + ["--total-timesteps", str(8192 * 10)], tmp_path / "run")
    wait_for_file(process, tmp_path / "run", "runs/*/coverage.bin", timeout=600)
    sent = time.time()
    process.send_signal(signal.SIGTERM)
    result = finish(process, 120)
    took = time.time() - sent
    assert result.returncode == 75, result.stderr[-3000:]
    assert took < 15, f"stopped {took:.0f} s after the signal"
    checkpoint = run_dirs(tmp_path / "run")[0] / "checkpoints" / "iter_1.pt"
    assert f"stopped by signal 15 during iteration 2; resume with --resume {checkpoint.relative_to(tmp_path / 'run')}" in result.stdout
    assert "SIGTERM received: stopping now, with the checkpoint of iteration 1 (iteration 2 is trained again on resume)" in result.stderr
    assert [p.name for p in checkpoint.parent.iterdir()] == ["iter_1.pt"]
    run_copy("ppo_atari_envpool", LONG_ITERATIONS + ["--total-timesteps", "8192", "--save-every", "1"], tmp_path / "saved")
    expected = torch.load(run_dirs(tmp_path / "saved")[0] / "checkpoints" / "iter_1.pt", weights_only=False)
    got = torch.load(checkpoint, weights_only=False)
    for key in ("agent", "optimizer", "iteration", "global_step", "recent_returns", "rng"):
        assert same(got[key], expected[key]), key


@pytest.mark.parametrize("signals, aborts_at", [
    ([signal.SIGTERM, signal.SIGINT], 1), ([signal.SIGINT, signal.SIGTERM], 1), ([signal.SIGINT, signal.SIGINT], 1),
    ([signal.SIGUSR1, signal.SIGINT], 1), ([signal.SIGUSR1, signal.SIGTERM, signal.SIGTERM], None), ([signal.SIGINT], None),
])
def test_the_torch_signal_rules(signals, aborts_at, capfd):
    """The torch scripts' handler (their appendix's, one text in each): a second signal with a Ctrl-C among the two
    aborts (raises KeyboardInterrupt, which the entry point turns into a flushed log, a line and exit 130); a
    scheduler's signals alone never do. Each signal that does not abort says at once when the run will stop: at the
    iteration's end if that is within STOP_SECONDS (by the iteration before), else now."""
    module = load_script("ppo_atari_envpool")
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    try:
        for seconds, said in ((2.0, "at the end of iteration 7 (in about 2 s), with a checkpoint"),
                              (60.0, "now, with the checkpoint of iteration 6 (iteration 7 is trained again on resume)")):
            run = module.Run.__new__(module.Run)
            run.signals, run.last_checkpoint, run.boundary, run.signalled = [], "runs/x/checkpoints/iter_6.pt", None, None
            run.iteration, run.iteration_started, run.iteration_seconds = 7, time.time(), seconds
            for i, signum in enumerate(signals):
                if i == aborts_at:
                    with pytest.raises(KeyboardInterrupt):
                        run.on_signal(signum, None)
                else:
                    run.on_signal(signum, None)
            err = capfd.readouterr().err
            assert f"{signal.Signals(signals[0]).name} received: stopping {said}; a Ctrl-C aborts at once" in err
            assert run.now == (seconds > module.STOP_SECONDS)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_a_second_signal_with_a_ctrl_c_aborts(tmp_path):
    """A SIGTERM, then a Ctrl-C 0.2 s later, in an iteration of seconds (ended within STOP_SECONDS, so the SIGTERM
    alone would wait for it): exit 130 within seconds, no traceback, the line naming the last checkpoint on disk."""
    flags = ["--num-envs", "4", "--num-steps", "256", "--update-epochs", "1", "--dynamics-every", "0",
             "--total-timesteps", str(1024 * 50), "--save-every", "2"]
    process = start_copy("ppo_atari_envpool", flags, tmp_path)
    first = wait_for_file(process, tmp_path, "runs/*/checkpoints/iter_2.pt", timeout=300)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    sent = time.time()
    result = finish(process, 120)
    assert result.returncode == 130, result.stderr[-3000:]
    assert time.time() - sent < 10, "the Ctrl-C did not abort at once"
    assert "Traceback" not in result.stderr
    named = result.stdout.strip().splitlines()[-1].split("--resume ")[-1]
    assert (tmp_path / named).is_file() and named.startswith(str(first.parent.relative_to(tmp_path)))


def test_a_loss_that_is_not_finite_stops_the_run_naming_the_last_good_checkpoint(uninterrupted, tmp_path):
    """Resumed from iteration 2 at lr 1e30: one Adam step sends the weights to ~1e30, the next forward passes
    overflow to inf and nan in iteration 3; from the start the same happens in iteration 1, with no checkpoint yet."""
    script, ((run_dir, _), _) = uninterrupted
    checkpoint = run_dir / "checkpoints" / "iter_2.pt"
    flags = SCRIPTS[script] + RESUMABLE + ["--learning-rate", "1e30", "--no-anneal-lr", "--save-every", "1"]
    for workdir, resume, iteration, last in [(tmp_path / "resumed", ["--resume", checkpoint], 3, str(checkpoint)),
                                             (tmp_path / "fresh", [], 1, "none")]:
        result = run_copy(script, flags + resume, workdir, timeout=600)
        assert result.returncode == 1, result.stderr[-3000:]
        line = [l for l in result.stderr.splitlines() if "not finite" in l]
        assert line == [f"{script}.py: error: iteration {iteration}: the loss or the parameters are not finite (nan or inf); "
                        f"last good checkpoint: {last}"]
        assert not list(workdir.glob("runs/*/checkpoints/*.pt"))
