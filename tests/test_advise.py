"""benchmark/advise.py, the stagnation advisor: its phases on runs written as real TensorBoard event files (improving
then stalled with large updates, levelling off with shrinking ones, collapsed, never improving), its remedies as
flags and commands, --follow, a real noisy_sgd run, the labelled runs of claims 2-3 (analyze.py's committed tables),
its false-alarm rates, and bad input."""
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.signal
import tyro
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from benchmark import advise
from benchmark.common import ROOT
from helpers import assert_bad_input, load_script, refusal, run_copy

BATCH = 1024  # 16 envs x 64 steps
FLAGS = {"num_envs": 16, "num_steps": 64, "num_minibatches": 8, "ewma_com": 8.0, "clip_coef": 0.2, "scaling_recipe": "none",
         "learning_rate": 0.0003, "ent_coef": 0.01, "total_timesteps": 204800}  # command.json's "resolved"
ARGV = ["--env-id", "CartPole-v1", "--num-envs", "16", "--num-steps", "64", "--num-minibatches", "8", "--ewma-com", "8.0",
        "--total-timesteps", "204800"]


def curves(kind, n=200, seed=0):
    """Per-iteration (score, KL, entropy) of a run of `kind`: the first half improves in every kind but 'never'."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    half = n // 2
    rise = np.where(t < half, 50 * t / half, 50.0)
    noise = rng.normal(0, 1.0, n)
    kl, entropy = np.full(n, 0.02) * rng.uniform(0.9, 1.1, n), np.full(n, 1.0)
    if kind == "stagnated":
        score = rise + noise
    elif kind == "levelling":
        score, kl[half:] = rise + noise, 0.002 * rng.uniform(0.9, 1.1, n - half)
    elif kind == "collapsed":
        score, kl[half:], entropy[half:] = rise + noise, 1e-6, 0.01
    elif kind == "recovered":  # collapsed at iterations 100-159, then a window that rises and one that falls back
        score, kl[100:160], entropy[100:160] = rise + noise, 1e-6, 0.01
        score[160:180] += np.linspace(-5, 5, 20)
        score[180:] -= 5
    elif kind == "early rise":  # the stagnation paper's premature plateau: a rise over 12 iterations, then flat
        score = np.minimum(10 * t / 12, 10.0) + noise
    elif kind == "thrashing":  # near deterministic in the second half, its KL down from its improving stretch's but large
        score, kl, entropy[half:] = rise + noise, np.where(t < half, 2.0, 0.8) * rng.uniform(0.9, 1.1, n), 0.04
    elif kind == "improving":
        score = 50 * t / half + noise
    elif kind == "declining":
        score = 50 - 50 * t / half + noise
    else:  # never: flat and noisy from the start
        score = 10 + 5 * noise
    return score, kl, entropy


def write_run(run_dir, kind, script="ppo_ewma_jax", upto=None, checkpoint=True, start=0, stamp=1764300000, seed=1,
              every=1, argv=ARGV, resolved=FLAGS, step_tag="losses/approx_kl", hyperparameters=None):
    """A launcher run directory (command.json: `argv` and --seed, its `resolved` flags) whose TensorBoard run logs the
    curves of `kind` as the scripts do: every iteration its KL, DDR and entropy (another `step_tag`: that tag alone, as
    pqn_atari logs its update norm); its episodes' returns (three an iteration) inside the iteration, or in every
    `every`-th iteration only (an evaluation's cadence). `start`, `upto`: the iterations it logs; `stamp`: its name's
    time stamp (a resumed run writes a new one); `hyperparameters`: {flag: value} logged first as the scripts' text."""
    score, kl, entropy = curves(kind)
    tb = run_dir / "runs" / f"CartPole-v1__{script}__{seed}__{stamp}"
    tb.mkdir(parents=True, exist_ok=True)
    (run_dir / "command.json").write_text(json.dumps({"name": run_dir.name, "script": script, "seed": seed,
                                                      "argv": argv + ["--seed", str(seed)], "resolved": resolved, "flags": {}}))
    writer = EventFileWriter(str(tb))
    if hyperparameters is not None:
        writer.add_event(text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in
                                                                                  hyperparameters.items())))
    for i in range(start, len(score) if upto is None else upto):
        step = (i + 1) * BATCH
        for offset, value in ((-700, score[i] - 1), (-400, score[i] + 1), (-100, score[i])) if (i + 1) % every == 0 else ():
            writer.add_event(scalar("charts/episodic_return", value, step + offset))
        policy = (("charts/ddr", BATCH / kl[i]), ("losses/entropy", entropy[i])) if step_tag == "losses/approx_kl" else ()
        for tag, value in ((step_tag, kl[i]), *policy):
            writer.add_event(scalar(tag, value, step))
    writer.close()
    if checkpoint:
        (tb / "checkpoints").mkdir(exist_ok=True)
        for i in (40, 160):
            (tb / "checkpoints" / f"iter_{i}.npz").write_bytes(b"")
    return tb


def scalar(tag, value, step):
    return Event(wall_time=time.time(), step=int(step), summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))]))


def text(tag, value):
    """A text summary as the scripts' writers log one (the text plugin's string tensor, tag <tag>/text_summary)."""
    tensor = TensorProto(dtype="DT_STRING", string_val=[value.encode()], tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    return Event(wall_time=time.time(), step=0, summary=Summary(value=[Summary.Value(tag=f"{tag}/text_summary", metadata=metadata,
                                                                                     tensor=tensor)]))


def report_of(tmp_path, kind, *flags):
    write_run(tmp_path / kind, kind)
    (report,) = advise.main([str(tmp_path / kind), *flags])
    return report


def test_a_run_that_stalls_with_large_updates_is_stagnated_and_gets_the_papers_remedies(tmp_path):
    report = report_of(tmp_path, "stagnated")
    labels = [p["label"] for p in report["phases"]]
    assert labels == ["improving", "stagnated"], report["phases"]
    improving, stagnated = report["phases"]
    assert stagnated["iterations"][0] in (101, 121) and stagnated["iterations"][1] == 200  # windows of 20 from the end
    assert stagnated["slope_per_million"][1] < 0 < stagnated["slope_per_million"][2]
    assert improving["slope_per_million"][1] > 0
    assert stagnated["evidence"]["charts/ddr"] == pytest.approx(BATCH / 0.02, rel=0.1)
    assert report["verdict"].startswith("stagnated")
    scale, step = report["remedies"]
    # 4x the envs under more-minibatches (the inner loop kept: the run's minibatches and learning rate as the base),
    # as many iterations as the run (4x its steps), the DDR that reaches at the plateau's KL if the KL holds
    assert scale["flags"] == {"--num-envs": 64, "--base-num-envs": 16, "--base-num-minibatches": 8,
                              "--scaling-recipe": "more-minibatches", "--learning-rate": 0.0003,
                              "--total-timesteps": 4 * 204800}
    assert f"DDR up to about {4 * stagnated['evidence']['charts/ddr']:,.0f}" in scale["what"] and scale["new_run"]
    argv = shlex.split(scale["command"])
    assert argv[:2] == ["python", "cleanrl_scale/ppo_ewma_jax.py"] and "--num-minibatches" not in argv
    assert argv[argv.index("--num-envs") + 1] == "64" and argv.count("--num-envs") == 1 and "--resume" not in argv
    assert argv[argv.index("--total-timesteps") + 1] == str(4 * 204800) and argv.count("--total-timesteps") == 1
    # the script's own flag checks take the new run's flags (its recipe sets the minibatches: they are dropped)
    assert refusal(load_script("ppo_ewma_jax"), argv[2:]) is None
    # and a 4x older proximal policy, resumed from the newest checkpoint (iteration 160, not 40; the run has 200)
    assert step["flags"] == {"--ewma-com": 32.0}
    argv = shlex.split(step["command"])
    assert argv[argv.index("--ewma-com") + 1] == "32" and argv.count("--ewma-com") == 1  # 32.0 as 32
    assert argv[argv.index("--resume") + 1] == str(tmp_path / "stagnated" / "runs" / "CartPole-v1__ppo_ewma_jax__1__1764300000"
                                                   / "checkpoints" / "iter_160.npz")
    assert argv[argv.index("--total-timesteps") + 1] == "204800"  # the run's own: its checkpoint has steps left


def test_a_stagnated_ppo_run_gets_half_its_clip_with_the_ddr_that_quarters_its_kl(tmp_path):
    """Plain PPO (no --ewma-com): the smaller outer step is half --clip-coef, resumed, with DDR x4 (an update's KL at
    the clip grows about as epsilon squared; the epsilon grid's halving cut it 3.6-4.9x)."""
    at = ARGV.index("--ewma-com")
    write_run(tmp_path / "run", "stagnated", argv=ARGV[:at] + ARGV[at + 2:], resolved={**FLAGS, "ewma_com": None})
    (report,) = advise.main([str(tmp_path / "run")])
    step = report["remedies"][1]
    ddr = report["phases"][-1]["evidence"]["charts/ddr"]
    assert step["flags"] == {"--clip-coef": 0.1} and f"DDR about {4 * ddr:,.0f} (now {ddr:,.0f}" in step["what"]
    argv = shlex.split(step["command"])
    assert argv[argv.index("--clip-coef") + 1] == "0.1" and "--ewma-com" not in argv and "--resume" in argv
    assert refusal(load_script("ppo_ewma_jax"), [a for a in argv[2:argv.index("--resume")]]) is None


def test_a_torch_ppo_run_gets_commands_its_script_accepts(tmp_path):
    """ppo_atari_envpool.py (.pt checkpoints, plain PPO, 8 envs x 128 steps): the new run at 4x the envs and half its
    clip from its newest checkpoint, each command passing the script's own flag checks."""
    tb = write_run(tmp_path / "run", "stagnated", script="ppo_atari_envpool",
                   argv=["--env-id", "Breakout-v5", "--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4",
                         "--total-timesteps", "204800"],
                   resolved={"num_envs": 8, "num_steps": 128, "num_minibatches": 4, "clip_coef": 0.1, "learning_rate": 0.00025,
                             "ent_coef": 0.01, "total_timesteps": 204800, "scaling_recipe": "none"})
    for checkpoint in list((tb / "checkpoints").iterdir()):
        checkpoint.rename(checkpoint.with_suffix(".pt"))
    (report,) = advise.main([str(tmp_path / "run")])
    scale, step = report["remedies"]
    assert step["flags"] == {"--clip-coef": 0.05} and scale["flags"]["--num-envs"] == 32
    module = load_script("ppo_atari_envpool")
    new = shlex.split(scale["command"])
    assert new[1] == "cleanrl_scale/ppo_atari_envpool.py" and refusal(module, new[2:]) is None
    resume = shlex.split(step["command"])
    at = resume.index("--resume")
    assert resume[at + 1] == str(tb / "checkpoints" / "iter_160.pt")
    assert refusal(module, resume[2:at] + resume[at + 2:]) is None  # (the empty checkpoint file aside)


def test_an_sfl_run_gets_commands_its_script_accepts(tmp_path):
    """ppo_kinetix_sfl.py (.npz checkpoints, 256 envs x 64 steps, 32 minibatches): the new run at 4x the envs with more
    minibatches, and half its clip from its newest checkpoint, each passing the script's own flag checks."""
    write_run(tmp_path / "run", "stagnated", script="ppo_kinetix_sfl",
              argv=["--env-size", "s", "--model", "mlp", "--num-envs", "256", "--num-steps", "64", "--num-minibatches", "32",
                    "--total-timesteps", "3276800"],
              resolved={"num_envs": 256, "num_steps": 64, "num_minibatches": 32, "clip_coef": 0.2, "learning_rate": 0.0001,
                        "ent_coef": 0.01, "total_timesteps": 3276800, "scaling_recipe": "none"})
    (report,) = advise.main([str(tmp_path / "run")])
    scale, step = report["remedies"]
    assert scale["flags"]["--num-envs"] == 1024 and scale["flags"]["--scaling-recipe"] == "more-minibatches"
    assert step["flags"] == {"--clip-coef": 0.1} and step["command"].endswith("/checkpoints/iter_160.npz")
    module = load_script("ppo_kinetix_sfl")
    for command in (scale["command"], step["command"]):
        argv = shlex.split(command)
        assert argv[1] == "cleanrl_scale/ppo_kinetix_sfl.py"
        at = argv.index("--resume") if "--resume" in argv else len(argv)
        assert refusal(module, argv[2:at] + argv[at + 2:], num_devices=1) is None  # (the empty checkpoint file aside)


def test_a_pqn_run_is_read_by_its_update_norm_and_gets_4x_the_envs_its_script_accepts(tmp_path):
    """pqn_atari.py logs no KL: its step is charts/update_norm. Stagnated, it gets the new run at 4x the envs (no clip
    or COM: no smaller outer step), a command that passes the script's own flag checks."""
    write_run(tmp_path / "run", "stagnated", script="pqn_atari", step_tag="charts/update_norm",
              argv=["--env-id", "Breakout-v5", "--num-envs", "8", "--num-steps", "128", "--num-minibatches", "4",
                    "--total-timesteps", "204800"],
              resolved={"num_envs": 8, "num_steps": 128, "num_minibatches": 4, "learning_rate": 0.00025,
                        "total_timesteps": 204800, "scaling_recipe": "none"})
    (report,) = advise.main([str(tmp_path / "run")])
    assert report["step_size"] == "charts/update_norm" and report["phases"][-1]["label"] == "stagnated"
    (scale,) = report["remedies"]
    assert scale["flags"]["--num-envs"] == 32 and scale["flags"]["--scaling-recipe"] == "more-minibatches"
    new = shlex.split(scale["command"])
    assert new[1] == "cleanrl_scale/pqn_atari.py" and refusal(load_script("pqn_atari"), new[2:]) is None


def test_more_minibatches_than_envs_scale_by_the_hybrid_recipe(tmp_path):
    write_run(tmp_path / "run", "stagnated", resolved={**FLAGS, "num_envs": 8, "num_minibatches": 32})
    (report,) = advise.main([str(tmp_path / "run")])
    assert report["remedies"][0]["flags"] == {"--num-envs": 32, "--base-num-envs": 8, "--base-num-minibatches": 32,
                                              "--scaling-recipe": "hybrid", "--hybrid-minibatch-factor": 4,
                                              "--learning-rate": 0.0003, "--total-timesteps": 4 * 204800}
    assert refusal(load_script("ppo_ewma_jax"), shlex.split(report["remedies"][0]["command"])[2:]) is None  # accepted


def test_a_scale_that_is_not_a_power_of_2_gives_a_hybrid_recipe_the_script_accepts(tmp_path):
    """--scale 3 from 2 envs and 3 minibatches: b must divide the scale (3 / b x 3 minibatches, a whole number), and be
    at least minibatches / envs (no more minibatches than envs): b = 3, not 2 (which gave 4.5 minibatches)."""
    argv = ["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "48", "--num-minibatches", "3", "--ewma-com", "8.0",
            "--total-timesteps", "19200"]
    write_run(tmp_path / "run", "stagnated", argv=argv,
              resolved={**FLAGS, "num_envs": 2, "num_steps": 48, "num_minibatches": 3, "total_timesteps": 19200})
    (report,) = advise.main([str(tmp_path / "run"), "--scale", "3"])
    scale, step = report["remedies"]
    assert scale["flags"] == {"--num-envs": 6, "--base-num-envs": 2, "--base-num-minibatches": 3, "--scaling-recipe": "hybrid",
                              "--hybrid-minibatch-factor": 3, "--learning-rate": 0.0003, "--total-timesteps": 3 * 19200}
    assert refusal(load_script("ppo_ewma_jax"), shlex.split(scale["command"])[2:]) is None
    assert step["flags"] == {"--ewma-com": 24.0} and "by how much not predicted" in step["what"]  # a COM's DDR


def test_floats_in_a_command_keep_their_precision(tmp_path):
    """A remedy's values as the command passes them: 0.000123456789 whole (not 0.000123457, `:g`'s 6 digits), 32.0 as 32."""
    write_run(tmp_path / "run", "stagnated", resolved={**FLAGS, "learning_rate": 0.000123456789})
    (report,) = advise.main([str(tmp_path / "run")])
    argv = shlex.split(report["remedies"][0]["command"])
    assert argv[argv.index("--learning-rate") + 1] == "0.000123456789"
    assert advise.flags_text({"--ewma-com": 32.0, "--clip-coef": 1e-05}) == "--ewma-com 32 --clip-coef 1e-05"


def test_updates_that_shrink_with_the_score_are_levelling_off_with_the_opposite_advice(tmp_path):
    report = report_of(tmp_path, "levelling")
    assert [p["label"] for p in report["phases"]] == ["improving", "levelling off"]
    assert report["verdict"].startswith("levelling off")
    (remedy,) = report["remedies"]
    assert remedy["flags"] == {"--ewma-com": 2.0} and "--resume" in remedy["command"]


@pytest.mark.parametrize("com, clip, flags", [(2.0, 0.2, None), (None, 0.2, {"--clip-coef": 0.4}), (None, 0.5, None)])
def test_the_opposite_advice_keeps_a_com_of_at_least_1_and_a_clip_below_1(tmp_path, com, clip, flags):
    """Levelling off: a COM divided by the scale only where it stays >= 1 (COM 2 gets nothing, not the clip's remedy as
    a COM of 0.5), a PPO clip doubled only below 0.5."""
    write_run(tmp_path / "run", "levelling", resolved={**FLAGS, "ewma_com": com, "clip_coef": clip})
    (report,) = advise.main([str(tmp_path / "run")])
    assert report["verdict"].startswith("levelling off")
    assert [r["flags"] for r in report["remedies"]] == ([flags] if flags else [])


def test_a_collapsed_policy_is_not_called_a_plateau(tmp_path):
    report = report_of(tmp_path, "collapsed")
    assert [p["label"] for p in report["phases"]] == ["improving", "collapsed"]
    assert report["verdict"].startswith("collapsed")
    assert report["phases"][1]["evidence"]["losses/entropy"] == pytest.approx(0.01)
    # a larger entropy bonus from the newest checkpoint before the collapse (iteration 40 of the run's 40 and 160)
    (remedy,) = report["remedies"]
    assert remedy["flags"] == {"--ent-coef": 0.02} and remedy["command"].split("--resume ")[1].endswith("iter_40.npz")


def test_a_run_leaving_a_collapse_needs_two_windows_to_read_improving(tmp_path):
    """Out of a collapse, a window's rise is a new trend like any other: one window that the next does not confirm
    leaves the run flat (here stagnated: its KL is back to its improving stretch's), not improving."""
    report = report_of(tmp_path, "recovered")
    assert [p["label"] for p in report["phases"]] == ["improving", "collapsed", "stagnated"]
    assert tuple(report["phases"][-1]["iterations"]) == (161, 200)


def test_a_run_resumed_from_another_runs_checkpoint_reads_its_checkpoints_in_the_scripts_count(tmp_path):
    """A run resumed at iteration 50 of another (claim 4's arms): its own events start there, its checkpoints keep the
    script's count. Stagnated: iter_160 lies before its end (200), so the smaller step resumes from it with the run's
    budget, not as from a finished run. Collapsed: iter_60 lies before the collapse (from about iteration 101), though
    after the run's 50th logged iteration."""
    tb = write_run(tmp_path / "stagnated", "stagnated", start=50)
    (report,) = advise.main([str(tmp_path / "stagnated")])
    assert report["iterations"] == 150 and report["verdict"].startswith("stagnated")
    argv = shlex.split(report["remedies"][-1]["command"])
    assert argv[argv.index("--resume") + 1] == str(tb / "checkpoints" / "iter_160.npz")
    assert argv[argv.index("--total-timesteps") + 1] == "204800" and argv.count("--total-timesteps") == 1
    tb = write_run(tmp_path / "collapsed", "collapsed", start=50)
    (tb / "checkpoints" / "iter_60.npz").write_bytes(b"")
    (report,) = advise.main([str(tmp_path / "collapsed")])
    assert report["verdict"].startswith("collapsed")
    assert report["remedies"][0]["command"].split("--resume ")[1] == str(tb / "checkpoints" / "iter_60.npz")


def test_a_score_logged_every_tenth_iteration_is_read_in_windows_that_hold_five(tmp_path):
    """An evaluation's cadence (ppo_kinetix_sfl.py's default score, every --eval-every 10 iterations): windows of 20
    would hold 2 scores each and read "no score" throughout; they widen to 47 (the fewest for which every window, the
    first taking the rest, holds 5 of the 20 scores) and find the plateau."""
    write_run(tmp_path / "run", "stagnated", every=10)
    (report,) = advise.main([str(tmp_path / "run")])
    assert report["window"] == 47 and report["asked_window"] == 20
    assert [p["label"] for p in report["phases"]] == ["improving", "stagnated"], report["phases"]
    assert "windows of 47 to hold 5 scores each" in advise.describe(report)


def test_windows_widen_until_every_one_holds_five_scores():
    """A score every iteration at first, then every 15th (episodes that outlast iterations): the fewest iterations a
    window for which each window holds 5, not the average cadence's."""
    score = np.full(400, np.nan)
    score[:100], score[100::15] = 1.0, 1.0
    opts = advise.build_parser().parse_args(["x"])
    size = advise.window_of({"score": score}, opts)
    edges = advise.window_edges(400, size)
    assert all(np.isfinite(score[a:b]).sum() >= 5 for a, b in zip(edges[:-1], edges[1:]))
    smaller = advise.window_edges(400, size - 1)
    assert any(np.isfinite(score[a:b]).sum() < 5 for a, b in zip(smaller[:-1], smaller[1:]))
    assert advise.window_of({"score": np.ones(400)}, opts) == 20


def test_a_run_declining_from_its_start_gets_no_step_advice(tmp_path):
    report = report_of(tmp_path, "declining")
    assert [p["label"] for p in report["phases"]] == ["declining"]
    assert report["verdict"].startswith("declining, and never improved") and report["remedies"] == []


def test_a_finished_runs_checkpoint_resumes_with_steps_left_and_no_checkpoint_gives_no_command(tmp_path):
    tb = write_run(tmp_path / "run", "stagnated")
    (tb / "checkpoints" / "iter_200.npz").write_bytes(b"")  # the last iteration's
    (tb / "checkpoints" / "iter_201.npz.tmp.npz").write_bytes(b"")  # a partial write is no checkpoint
    (report,) = advise.main([str(tmp_path / "run")])
    argv = shlex.split(report["remedies"][1]["command"])
    assert argv[argv.index("--resume") + 1].endswith("iter_200.npz")
    assert argv[argv.index("--total-timesteps") + 1] == str(2 * 200 * BATCH)
    write_run(tmp_path / "bare", "stagnated", checkpoint=False)
    (report,) = advise.main([str(tmp_path / "bare")])
    scale, step = report["remedies"]
    assert scale["command"] is not None  # a new run needs no checkpoint
    assert step["command"] is None and step["note"] == "no checkpoint to resume: rerun with --save-every to have one"


def write_pack_checkpoint(tb, seeds, iteration=160):
    """A checkpoint of `seeds` seeds as ppo_ewma_jax.py's metadata gives them (what the launcher and the script read)."""
    (tb / "checkpoints").mkdir(exist_ok=True)
    np.savez(tb / "checkpoints" / f"iter_{iteration}.npz", meta=json.dumps({"args": {"num_seeds": seeds}}))


def assert_resumes_as_the_pack(step, first_dir, seeds, first):
    argv = shlex.split(step["command"])
    assert argv[argv.index("--seed") + 1] == "1" and argv[argv.index("--num-seeds") + 1] == str(seeds)
    assert argv.count("--num-seeds") == 1
    assert argv[argv.index("--resume") + 1] == str(first_dir / "runs" / "CartPole-v1__ppo_ewma_jax__1__1764300000"
                                                   / "checkpoints" / "iter_160.npz")
    assert step["note"] == (f"its checkpoint is its pack's ({seeds} seeds trained in one process, the first {first}): "
                            f"the resume takes all {seeds} back to it and continues them with the new flag")


def test_a_packed_run_resumes_as_its_pack_from_the_first_runs_checkpoint(tmp_path):
    """Seeds 1 and 2 trained in one process (launch.py's pack, --num-seeds 2), read through a grid's links: the
    checkpoint, of both, is in seed 1's run; each seed's smaller outer step resumes the pack (seed 1's flags,
    --num-seeds 2) and says that both go back to it. A new run is the seed's own."""
    store, grid = tmp_path / "store", tmp_path / "grid" / "runs"
    names = ["ppo_ewma_jax__s1__aaaa", "ppo_ewma_jax__s2__bbbb"]
    grid.mkdir(parents=True)
    for seed, name in enumerate(names, 1):
        tb = write_run(store / name, "stagnated", checkpoint=False, seed=seed)
        if seed == 1:
            write_pack_checkpoint(tb, 2)
        (store / name / "done.json").write_text(json.dumps({"returncode": 0, "pack": names}))
        (grid / name).symlink_to(store / name)
    for seed, name in enumerate(names, 1):
        (report,) = advise.main([str(grid / name)])
        scale, step = report["remedies"]
        new = shlex.split(scale["command"])
        assert new[new.index("--seed") + 1] == str(seed) and "--num-seeds" not in new
        assert_resumes_as_the_pack(step, store / names[0], 2, names[0])


def test_a_pack_still_training_is_read_seed_by_seed(tmp_path):
    """Before its process ends a pack leaves no record, and every seed's TensorBoard run lies in its first run's
    directory: that run reads its own seed's curve (seed 1 stalls, seed 2 keeps improving), and its checkpoint's
    seeds make its resume the pack's."""
    first = tmp_path / "ppo_ewma_jax__s1__aaaa"
    tb = write_run(first, "stagnated", checkpoint=False, seed=1)
    write_run(first, "improving", checkpoint=False, seed=2)
    (first / "command.json").write_text(json.dumps({**json.loads((first / "command.json").read_text()), "seed": 1,
                                                     "argv": ARGV + ["--seed", "1"]}))
    write_pack_checkpoint(tb, 2)
    (report,) = advise.main([str(first)])
    assert [p["label"] for p in report["phases"]] == ["improving", "stagnated"]
    assert_resumes_as_the_pack(report["remedies"][1], first, 2, first.name)


def test_a_run_still_improving_at_the_end_gets_no_remedy(tmp_path):
    report = report_of(tmp_path, "improving")
    assert [p["label"] for p in report["phases"]] == ["improving"]
    assert report["verdict"].startswith("still improving") and report["remedies"] == []


def test_a_noisy_flat_run_that_never_improved_is_not_called_stagnated(tmp_path):
    """Stagnation needs an improvement before it: a run flat from its start (learning has not begun) is not one."""
    report = report_of(tmp_path, "never")
    assert {p["label"] for p in report["phases"]} <= {"not improving yet", "improving", "declining"}
    assert "stagnated" not in json.dumps(report)


def test_json_holds_the_reports_and_a_scripts_own_run_directory_reads_alike(tmp_path):
    tb = write_run(tmp_path / "launched", "stagnated", checkpoint=False)
    (from_launcher,) = advise.main([str(tmp_path / "launched"), "--json", str(tmp_path / "advice.json")])
    assert json.loads((tmp_path / "advice.json").read_text())[0]["phases"] == json.loads(json.dumps(from_launcher["phases"]))
    (from_tensorboard,) = advise.main([str(tb)])  # runs/<name>: the flags from its hyperparameters text (none here)
    assert from_tensorboard["phases"] == from_launcher["phases"] and from_tensorboard["script"] == "ppo_ewma_jax"
    assert all(r["command"] is None for r in from_tensorboard["remedies"])  # no command.json: no command line


def test_a_scripts_own_run_gets_command_lines_from_its_hyperparameters_text(tmp_path):
    """A run started by hand (no launcher, no command.json): its flags come from the `hyperparameters` text the script
    logs, so its remedies are command lines too, which the script's own flag checks take."""
    module = load_script("ppo_ewma_jax")
    args = module.resolve_args(tyro.cli(module.RunArgs, args=ARGV + ["--num-seeds", "2"]))  # seeds in one program
    tb = write_run(tmp_path / "work", "stagnated")
    writer = module.SummaryWriter(str(tb))  # the script's own writer, its own table
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    writer.close()
    (report,) = advise.main([str(tb)])
    more, step = report["remedies"]
    assert more["flags"]["--num-envs"] == 64 and step["flags"] == {"--ewma-com": 32.0}
    for remedy in (more, step):
        argv = shlex.split(remedy["command"])
        assert argv[:2] == ["python", "cleanrl_scale/ppo_ewma_jax.py"] and "--env-id" in argv
        given = argv[2:argv.index("--resume")] if "--resume" in argv else argv[2:]  # the checkpoint here is no real one
        assert refusal(module, given) is None, given
    resume = shlex.split(step["command"])
    assert resume[-1].endswith("checkpoints/iter_160.npz")
    assert resume[resume.index("--num-seeds") + 1] == "2"  # its checkpoint holds both seeds: the resume takes both


def test_a_scripts_own_resumed_run_is_read_as_one(tmp_path):
    """A resumed run writes a new TensorBoard run (a new time stamp): the attempts of one run (the later one's --resume
    names the earlier one's checkpoint, as its hyperparameters text says) are merged as a launched run's are,
    whichever of them is named, and the newest checkpoint is the resumed attempt's."""
    flags = {"env_id": "CartPole-v1", "exp_name": "ppo_ewma_jax", "seed": 1, "ewma_com": 8.0, "resume": None}
    first = write_run(tmp_path / "work", "stagnated", upto=120, checkpoint=False, hyperparameters=flags)
    resumed = write_run(tmp_path / "work", "stagnated", start=120, stamp=1764309999, hyperparameters={
        **flags, "resume": f"runs/{first.name}/checkpoints/iter_120.npz", "total_timesteps": 409600})
    (tmp_path / "work" / "command.json").unlink()  # a script's working directory: its runs/ and nothing else
    (whole,) = advise.main([str(tmp_path / "work")])
    assert whole["iterations"] == 200 and [p["label"] for p in whole["phases"]] == ["improving", "stagnated"]
    (named,) = advise.main([str(first)])
    assert named["run"] == resumed.name and named["phases"] == whole["phases"]
    (named,) = advise.main([str(resumed)])
    assert named["run"] == resumed.name and named["phases"] == whole["phases"]


@pytest.mark.parametrize("second", ["the same command again", "resumed with another COM"])
def test_a_run_named_by_its_path_is_that_run_not_a_neighbour_of_its_env_experiment_and_seed(tmp_path, second):
    """Two TensorBoard runs side by side whose names differ only in their time stamps (`<env>__<exp>__<seed>__<time>`)
    are two runs unless the later one's --resume names the earlier one's checkpoint with its flags (its
    hyperparameters text): the same command run twice, or an arm resumed from the first run's checkpoint with another
    COM (claim 4), is a run of its own. Named by path, each is read alone; the working directory holds two runs."""
    flags = {"env_id": "CartPole-v1", "exp_name": "ppo_ewma_jax", "seed": 1, "ewma_com": 8.0, "resume": None}
    a = write_run(tmp_path / "work", "stagnated", hyperparameters=flags)
    later = {**flags, "ewma_com": 256.0, "resume": f"runs/{a.name}/checkpoints/iter_160.npz"} \
        if second == "resumed with another COM" else flags
    b = write_run(tmp_path / "work", "improving", start=100, stamp=1764309999, hyperparameters=later)
    (tmp_path / "work" / "command.json").unlink()  # a script's working directory: its runs/ and nothing else
    (report_a,) = advise.main([str(a)])
    assert report_a["run"] == a.name and report_a["iterations"] == 200
    assert [p["label"] for p in report_a["phases"]] == ["improving", "stagnated"]
    resume = shlex.split(report_a["remedies"][-1]["command"])  # from its own newest checkpoint, not b's
    assert resume[resume.index("--resume") + 1] == str(a / "checkpoints" / "iter_160.npz")
    (report_b,) = advise.main([str(b)])
    assert report_b["run"] == b.name and report_b["iterations"] == 100 and report_b["phases"][0]["iterations"][0] == 1
    both = advise.main([str(tmp_path / "work")])
    assert sorted((r["run"], r["iterations"]) for r in both) == [(a.name, 200), (b.name, 100)]


def test_follow_prints_a_line_when_the_phase_changes(tmp_path):
    """--follow re-reads a run that is still writing: a line for its first phase, none while it holds, one when the
    stall starts, with its remedies."""
    write_run(tmp_path / "run", "stagnated", upto=90, checkpoint=False)
    process = subprocess.Popen([sys.executable, str(ROOT / "benchmark" / "advise.py"), str(tmp_path / "run"), "--follow",
                                "1", "--polls", "12"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    assert " run: improving at iteration 90 " in first, first
    # the rest of the run, a new event file moved in whole (a poll never reads half of it)
    staged = write_run(tmp_path / "staging", "stagnated", checkpoint=False)
    (event_file,) = staged.glob("events.out.tfevents.*")
    os.replace(event_file, tmp_path / "run" / "runs" / staged.name / event_file.name)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.count(": stagnated at iteration 200") == 1 and "improving" not in out, out
    # and what to do about it: the new run's command; no checkpoint to resume from
    assert "  4x the envs" in out and "python cleanrl_scale/ppo_ewma_jax.py" in out and "no checkpoint to resume" in out, out


def test_follow_says_once_why_a_path_holds_no_run_yet(tmp_path, capsys):
    """A path with no run (a mistyped one, or a run not started yet): one line saying so, not silence, not a line a
    poll; a checkpoint caught half-written does not end the watch (pack_of reads the launcher's record instead)."""
    (tmp_path / "empty").mkdir()
    write_run(tmp_path / "run", "stagnated", checkpoint=False)
    tb = next((tmp_path / "run" / "runs").iterdir())
    (tb / "checkpoints").mkdir()
    (tb / "checkpoints" / "iter_160.npz").write_bytes(b"PK\x03\x04 half a zip")
    advise.main([str(tmp_path / "empty"), str(tmp_path / "run"), "--follow", "0.01", "--polls", "3"])
    out = capsys.readouterr().out
    assert out.count("empty: no run (no command.json, no runs/ with event files)") == 1, out
    assert out.count(" run: stagnated at iteration 200") == 1, out


def test_follow_reads_again_after_a_poll_that_fails(tmp_path, capsys, monkeypatch):
    """A poll whose reading raises (an event file caught while it is written) says so and the watch goes on: the next
    poll reads the run."""
    write_run(tmp_path / "run", "stagnated", checkpoint=False)
    gather, calls = advise.gather, []

    def first_fails(opts, damaged):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("an event file being written")
        return gather(opts, damaged)

    monkeypatch.setattr(advise, "gather", first_fails)
    advise.main([str(tmp_path / "run"), "--follow", "0.01", "--polls", "2"])
    out = capsys.readouterr().out
    assert "cannot read the runs yet (OSError: an event file being written)" in out and len(calls) == 2
    assert out.count(" run: stagnated at iteration 200") == 1, out


def test_a_real_noisy_sgd_run_stagnates_at_a_large_step_and_improves_at_a_small_one(tmp_path):
    """The stochastic-optimisation analogue (stagnation App. A), a copy of the script: at step size 0.1 the distance
    stops falling after about 20 steps while each update keeps its size; at 0.001 it is still falling at step 400."""
    result = run_copy("noisy_sgd", ["--step-sizes", "0.001", "0.1", "--num-steps", "400"], tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    reports = {r["run"].split("/")[-1]: r for r in advise.main([str(tmp_path), "--window", "5"])}
    assert [p["label"] for p in reports["eta_0.001"]["phases"]] == ["improving"]
    large = reports["eta_0.1"]
    labels = [p["label"] for p in large["phases"]]
    assert "improving" in labels and labels.index("improving") < labels.index("stagnated") and labels[-1] == "stagnated"
    stalled = sum(p["iterations"][1] - p["iterations"][0] + 1 for p in large["phases"] if p["label"] == "stagnated")
    assert stalled > 0.8 * 401 and large["step_size"] == "charts/update_norm" and large["script"] == "noisy_sgd"
    # Fig. 3b's remedy: this step size switched to a quarter of it where it first stagnated (its gradient step)
    (remedy,) = large["remedies"]
    first = next(p for p in large["phases"] if p["label"] == "stagnated")
    assert remedy["flags"] == {"--step-sizes": 0.1, "--switch-step": first["steps"][0], "--switch-step-size": 0.025}
    assert 0 < first["steps"][0] < 100
    flags = ["--num-steps", "400"] + [x for f, v in remedy["flags"].items() for x in (f, v)]
    assert refusal(load_script("noisy_sgd"), flags) is None


def test_claim_2_and_3_runs_read_as_their_docs_describe_them():
    """analyze.py's committed tables of the COM grid (claims 2-3, 5 seeds, 1M steps, curves in 50 points): every COM
    256 seed improves throughout; COM 8's seeds 7 and 9 collapsed mid-run (entropy under 0.01 nats, KL near 0,
    benchmark/reproduce.md) and the advisor finds each collapse, and no other seed's."""
    tables = [ROOT / "benchmark" / "reproduce" / f for f in ("claim_2/seeds_6-10/com_eps_runs.csv.gz", "claim_2/seeds_6-10/com_eps_entropy_runs.csv.gz",
                                                             "claim_3/seeds_6-10/com_eps_approx_kl_runs.csv.gz")]
    reports = advise.main(["--tables", *map(str, tables), "--window", "8"])
    by = {(r["run"].split("ewma-com=")[1].split("__")[0], int(r["run"].split("__s")[1].split("__")[0])): r for r in reports}
    assert len(by) == 15
    assert all([p["label"] for p in by["256.0", s]["phases"]] == ["improving"] for s in range(6, 11))
    collapsed = {key for key, r in by.items() if any(p["label"] == "collapsed" for p in r["phases"])}
    assert collapsed == {("8.0", 7), ("8.0", 9)}
    for seed in (7, 9):
        (phase,) = [p for p in by["8.0", seed]["phases"] if p["label"] == "collapsed"]
        assert phase["evidence"]["losses/entropy"] < 0.01 and phase["evidence"]["losses/approx_kl"] < 1e-6
    # "not improving yet" is a run's start only (or a run's after a collapse, which it never improved before)
    for report in reports:
        labels = [p["label"] for p in report["phases"]]
        if "improving" in labels:
            assert "not improving yet" not in labels[labels.index("improving"):], report["run"]
    # COM 8 is near deterministic (entropy 0.07-0.18 nats) with a KL of 1.4-2.3: thrashing in every seed, in no other
    thrashing = {key for key, r in by.items() if any(p["label"] == "thrashing" for p in r["phases"])}
    assert thrashing == {("8.0", s) for s in range(6, 11)}
    assert [p["label"] for p in by["8.0", 9]["phases"]] == ["thrashing", "collapsed", "not improving yet"]
    # thrashing's remedy, as flags (a table's run has no command): a smaller outer step, 4x the COM, never a larger one
    (remedy,) = by["8.0", 6]["remedies"]
    assert remedy["flags"] == {"--ewma-com": 32.0} and remedy["command"] is None
    assert (by["8.0", 6]["iterations"], by["8.0", 6]["points"]) == (122, 50)


def test_false_alarm_rates_fall_with_the_rise_per_window_and_flat_runs_are_found():
    opts = advise.build_parser().parse_args(["--simulate"])
    table = advise.simulate(opts, slopes=(0.0, 0.05, 0.2, 0.5), trials=200, early_slopes=(0.05, 0.2))
    never = table[table["run"] == "never improved"].iloc[0]
    early = table[table["run"].str.startswith("early rise")].set_index("rise_per_window_sd")
    table = table[table["run"] == "improved, then rising"].set_index("rise_per_window_sd")
    # the paper's premature plateau (a rise within the first window, then flat): found in most runs; an early rise
    # that goes on rising is rarely called stagnated (docs/advise.md: 95.9%, 2.8% at 1 noise SD a window, 1,000 runs)
    assert early.loc[0.0, "runs_called_stagnated"] > 0.85
    assert early.loc[1.0, "runs_called_stagnated"] < 0.08 and early.loc[4.0, "runs_called_stagnated"] < 0.02
    assert table.loc[0.0, "windows_called_stagnated"] > 0.75  # a stalled run: found in most windows
    # docs/advise.md's rates (1,000 runs): 1.1% of windows rising 1 noise SD, 0 at 4 SDs, 0.5% of runs never improved
    assert table.loc[1.0, "windows_called_stagnated"] < 0.03 and table.loc[1.0, "runs_called_stagnated"] < 0.08
    assert table.loc[4.0, "windows_called_stagnated"] < 0.01  # rising 4 noise SDs a window: rarely called stalled
    assert table.loc[10.0, "runs_called_stagnated"] < 0.02
    assert never["runs_called_stagnated"] < 0.05  # a flat run that never improved: 2.5% (docs/advise.md)


@pytest.mark.parametrize("flags, text", [
    (["--window", "4"], "--window must be at least 5"),
    (["--level", "1"], "--level must be in (0, 1)"),
    (["--large-step", "nan"], "--large-step must be positive"),
    (["--patience", "0"], "--patience must be at least 1"),
    (["--collapse-entropy", "0"], "--collapse-entropy must be in (0, 1)"),
    (["--collapse-step", "1.5"], "--collapse-step must be in (0, 1)"),
    (["--scale", "1"], "--scale must be in [2, 1024]"),
    (["--scale", "2.5"], "argument --scale: invalid int value: '2.5'"),
    (["--follow", "-1"], "--follow must be >= 0 seconds"),
    (["--follow", "inf"], "--follow must be >= 0 seconds"),
    (["--polls", "-2"], "--polls must be >= 0"),
    ([], "name run directories or --tables"),
    (["/nonexistent/run"], "/nonexistent/run: no such file or directory"),
    (["--json", "/nonexistent/a.json", "."], "--json /nonexistent/a.json: no directory /nonexistent"),
])
def test_bad_input_is_refused_before_anything_is_read(flags, text, capsys):
    with pytest.raises(SystemExit) as stop:
        advise.main(flags)
    assert stop.value.code == 2 and text in capsys.readouterr().err


def test_bad_input_exits_2_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmark" / "advise.py"), str(tmp_path), "--window", "0"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert_bad_input(result, tmp_path, "--window must be at least 5")


def synthetic_run(score, step=None, n=None):
    """A run as make_run returns one, of per-iteration scores (a constant KL of 0.02 unless `step`), no entropy."""
    n = len(score)
    return {"name": "synthetic", "script": "ppo_ewma_jax", "tag": "charts/episodic_return", "step_tag": "losses/approx_kl",
            "steps": (np.arange(n) + 1) * BATCH, "step": np.full(n, 0.02) if step is None else step, "score": score,
            "entropy": None, "batch": float(BATCH), "evidence": {}, "flags": FLAGS, "argv": None, "checkpoints": [],
            "pack": None, "damaged": [], "annealed": False, "iterations": n, "points": None}


def test_a_run_whose_last_windows_show_no_rise_is_not_told_more_steps_pay():
    """Every window reads "not improving yet" and the slope over the last two windows holds zero; the refit over the
    whole run, which a slow early rise lifts above zero, labels its one phase improving. "The end" is the last
    windows: no "more steps should pay"."""
    rng = np.random.default_rng(0)
    noise = scipy.signal.lfilter([np.sqrt(0.75)], [1, -0.5], rng.standard_normal(160))
    run = synthetic_run(0.02 * np.minimum(np.arange(160), 100) + noise)  # 0.4 noise SDs a window, then flat
    opts = advise.build_parser().parse_args(["--simulate"])
    assert {w.label for w in advise.label_windows(advise.windows_of(run, opts), opts)} == {"not improving yet"}
    low, high = advise.slope_interval(run["score"][120:], opts.level)[1:]
    assert low < 0 < high
    report = advise.analyse(run, opts)
    assert [p["label"] for p in report["phases"]] == ["improving"]  # the whole run's refit lies above zero
    assert "more steps should pay" not in report["verdict"] and report["remedies"] == []
    assert "not over its last windows (iterations 121-160" in report["verdict"]


def test_an_early_rise_then_flat_is_the_papers_premature_plateau_with_its_remedies(tmp_path):
    """A rise over the first 12 iterations (inside the first window), then flat at the same KL: the paper's premature
    plateau. No window after it can confirm the rise; the first window is read as the run's improving stretch and the
    flat windows after it as stagnated, with the paper's remedies (4x the envs, 4x the COM)."""
    report = report_of(tmp_path, "early rise")
    assert [p["label"] for p in report["phases"]] == ["improving", "stagnated"]
    assert tuple(report["phases"][0]["iterations"]) == (1, 20)
    assert report["verdict"].startswith("stagnated")
    more, com = report["remedies"]
    assert more["flags"]["--num-envs"] == 64 and com["flags"] == {"--ewma-com": 32.0}


def test_a_near_deterministic_policy_taking_large_steps_is_thrashing_and_gets_a_smaller_step(tmp_path):
    """Entropy 0.04 nats with a KL of 0.8 an update, down from 2.0 while it improved (claim 2's COM-4 runs: entropy
    0.04-0.12, KL 0.7-3.3): not levelling off (whose advice is a larger step) nor collapsed (the KL is far from 0):
    thrashing, whose remedy is a smaller outer step, never a larger one."""
    report = report_of(tmp_path, "thrashing")
    assert [p["label"] for p in report["phases"]] == ["improving", "thrashing"]
    assert report["verdict"].startswith("thrashing")
    (remedy,) = report["remedies"]
    assert remedy["flags"] == {"--ewma-com": 32.0} and "--resume" in remedy["command"]


def test_a_gaussian_policys_low_entropy_is_not_thrashing(tmp_path):
    """A Gaussian policy's entropy is differential (negative where its SD is small): no floor in nats reads it."""
    write_run(tmp_path / "brax", "thrashing", script="ppo_ewma_brax")
    (report,) = advise.main([str(tmp_path / "brax")])
    assert "thrashing" not in [p["label"] for p in report["phases"]]


def write_table(path, run, points=50, iterations=122, batch=8192):
    """analyze.py's runs.csv of one run: its return and KL downsampled to `points` of its `iterations`."""
    x = np.linspace(2 * batch, (iterations - 1) * batch, points).astype(np.int64)
    rows = [(run, "", tag, int(v), y) for tag, ys in (("charts/episodic_return", np.linspace(0, 50, points)),
                                                      ("losses/approx_kl", np.full(points, 0.02))) for v, y in zip(x, ys)]
    path.write_text("run,subrun,tag,x,value\n" + "".join(f"{r},{s},{t},{v},{y}\n" for r, s, t, v, y in rows))
    return path


def test_a_downsampled_table_reports_its_points_and_its_runs_iterations(tmp_path, capsys):
    """A table's curve of 50 points of a run of 122 iterations (64 envs x 128 steps, 999,424 steps) is not a run of 50
    iterations: the report says both; a resumed run's name holds no count of its own (its --total-timesteps counts the
    training before the resume too)."""
    name = "ppo_ewma_jax__num-envs=64__num-steps=128__total-timesteps=999424__s1__abc"
    (report,) = advise.main(["--tables", str(write_table(tmp_path / "runs.csv", name)), "--window", "8"])
    assert (report["iterations"], report["points"]) == (122, 50)
    out = capsys.readouterr().out
    assert "50 points of 122 iterations" in out and "windows of 8 points" in out and " points 1-50 " in out
    resumed = "ppo_ewma_jax__ewma-com=8.0__num-envs=64__num-steps=128__resume=-x-etc__s1__abc"
    (report,) = advise.main(["--tables", str(write_table(tmp_path / "resumed.csv", resumed)), "--window", "8"])
    assert (report["iterations"], report["points"]) == (None, 50)
    assert "50 points of a downsampled curve, its iterations not in its name" in capsys.readouterr().out
