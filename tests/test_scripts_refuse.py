"""Every script, as a user runs a copy of it: a run name that would leave runs/, a runs/ that is a file, a working
directory that cannot be written and a computed field set as a flag are refused before any compute (exit 2, one line
naming the rule, nothing written). The rules are tested in this process (resolve_args, check_runs_directory); a copy
of each script run as a subprocess, with a file named runs, checks the exit-2 contract."""
import os
from pathlib import Path

import pytest
import tyro

from helpers import assert_bad_input, assert_refused, cli_args, load_script, read_only, refusal, run_copy

# the JAX scripts share these rules word for word (their appendix, one text in each: tests/test_appendix.py compares
# the copies), so ppo_ewma_jax stands for the three
SCRIPTS = ["ppo_atari_envpool", "pqn_atari", "ppo_rnd", "ppo_procgen_envpool", "ppo_ewma_jax", "noisy_sgd"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_name_with_a_slash_is_refused(script):
    assert_refused(load_script(script), ["--exp-name", "../../escape"], "--exp-name must be a plain name, without '/'")


# the exit-2 contract, end to end: one script of each family (the appendix is one text in every script of its family,
# tests/test_appendix.py), and noisy_sgd, which has none
@pytest.mark.parametrize("script", ["ppo_atari_envpool", "ppo_ewma_jax", "noisy_sgd"])
def test_a_file_named_runs_is_refused(script, tmp_path):
    (tmp_path / "runs").write_text("notes")
    result = run_copy(script, [], tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{script}.py: error: {Path(tmp_path, 'runs')} is not a directory" in lines[0], result.stderr[-3000:]
    assert (tmp_path / "runs").read_text() == "notes" and not (tmp_path / "wandb").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_name_longer_than_a_file_name_allows_is_refused(script):
    """A file name holds 255 bytes; the run's directory adds the env id, seed and time to --exp-name (it was an OSError
    once runs/ existed)."""
    module = load_script(script)
    with pytest.raises(module.BadFlag, match=r"--exp-name must be at most 128 bytes \(.*got 129\)"):
        module.resolve_args(cli_args(module)(exp_name="\u00e9" * 64 + "a"))  # 129 bytes in UTF-8, 65 characters


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "noisy_sgd"])
def test_a_budget_past_the_int64_step_count_is_refused(script):
    module = load_script(script)
    with pytest.raises(module.BadFlag, match=r"--total-timesteps must be below 2\^62 \(got 4611686018427387904\)"):
        module.resolve_args(cli_args(module)(total_timesteps=2**62))


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unwritable_working_directory_is_refused(script, tmp_path, monkeypatch):
    """A directory the user cannot write (a read-only mount for root, whom permissions do not stop): the check the
    script makes before any compute, in this process (the exit-2 subprocess: a file named runs, above)."""
    module = load_script(script)
    with read_only(tmp_path), monkeypatch.context() as inside:
        inside.chdir(tmp_path)  # and out again before the mount goes
        with pytest.raises(module.BadFlag) as refused:
            module.check_runs_directory()
    assert str(refused.value) == f"cannot write {tmp_path / 'runs'}: start the run from a directory you can write"


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "noisy_sgd"])
def test_a_computed_field_given_as_a_flag_is_refused(script):
    """--num-iterations is listed by --help (CleanRL's Args) but computed from the budget and the batch: setting it would
    be silently overwritten."""
    assert_refused(load_script(script), ["--num-iterations", "999"], "--num-iterations is computed from the other flags: do not set it (got 999)")


CHECKPOINTING = ["ppo_atari_envpool", "pqn_atari", "ppo_rnd", "ppo_procgen_envpool", "ppo_ewma_jax"]


def write_checkpoint(path, meta):
    """A checkpoint in the script's own format (torch's for the torch scripts, .npz for the JAX ones) holding `meta`."""
    if path.suffix == ".npz":
        import json

        import numpy as np

        np.savez(path, meta=np.array(json.dumps({"num_leaves": 0, "iteration": 1, "global_step": 8, **meta})))
    else:
        import torch

        keys = ("agent", "q_network", "rnd_model", "optimizer", "normalisers", "return_rms", "rng", "recent_returns")
        torch.save({**dict.fromkeys(keys, {}), "iteration": 1, "global_step": 8, **meta}, path)  # every script's keys


@pytest.mark.parametrize("script", CHECKPOINTING)
@pytest.mark.parametrize("written_by", ["named", "older"])
def test_resume_of_another_scripts_checkpoint_names_it(script, written_by, tmp_path):
    """A checkpoint names the script that wrote it; an older one without the name is known by a flag this script lacks
    (it used to be refused for the first structural flag that differed, as if it were this script's)."""
    other = "ppo_rnd" if script != "ppo_rnd" else "pqn_atari"
    path = tmp_path / ("ckpt.npz" if script == "ppo_ewma_jax" else "ckpt.pt")
    meta = {"args": {"a_flag_of_no_script_here": 1}} if written_by == "older" else {"args": {}, "script": f"{other}.py"}
    write_checkpoint(path, meta)
    name = "another script" if written_by == "older" else f"{other}.py"
    assert_refused(load_script(script), ["--resume", path], f"--resume {path} is a checkpoint of {name}, not of {script}.py")


def checkpoint_of_seed(script, path, seed):
    """A checkpoint of `script` at its defaults (CartPole for the JAX one) but for --seed `seed`; the flags that go
    with it."""
    module = load_script(script)
    flags = ["--env-id", "CartPole-v1"] if script == "ppo_ewma_jax" else []
    saved = vars(module.resolve_args(cli_args(module)(**({"env_id": "CartPole-v1"} if flags else {}))))
    write_checkpoint(path, {"args": {**saved, "seed": seed}, "script": f"{script}.py"})
    return module, flags


@pytest.mark.parametrize("script", CHECKPOINTING)
def test_a_resume_continues_its_checkpoints_seed(script, tmp_path):
    """A checkpoint holds its run's random state: a resume continues that run, under its seed. --seed left out takes
    the checkpoint's, the checkpoint's own is accepted, and another is refused (the run would continue seed 5 under the
    name and hyperparameters of seed 7)."""
    path = tmp_path / ("ckpt.npz" if script == "ppo_ewma_jax" else "ckpt.pt")
    module, flags = checkpoint_of_seed(script, path, 5)
    for seed in ([], ["--seed", "5"]):
        args = tyro.cli(cli_args(module), args=flags + seed + ["--resume", str(path)])
        assert module.resolve_args(args).seed == 5
    assert_refused(module, flags + ["--seed", "7", "--resume", path],
                   "--seed 7 does not match the checkpoint's seed 5: a resume continues its run's seed; drop --seed or pass 5")


@pytest.mark.parametrize("script", ["ppo_atari_envpool", "ppo_ewma_jax"])  # one of each family's appendix
@pytest.mark.parametrize("saved, given", [(1, 7), (5, 1)])  # --seed 1, the default's value, given on the command line
def test_a_resume_under_another_seed_exits_2_before_any_compute(script, saved, given, tmp_path):
    path = tmp_path / ("ckpt.npz" if script == "ppo_ewma_jax" else "ckpt.pt")
    _, flags = checkpoint_of_seed(script, path, saved)
    result = run_copy(script, flags + ["--seed", str(given), "--resume", str(path)], tmp_path / "run", timeout=300)
    assert_bad_input(result, tmp_path / "run", f"--seed {given} does not match the checkpoint's seed {saved}: a resume "
                                               f"continues its run's seed; drop --seed or pass {saved}")


@pytest.mark.parametrize("script, flags", [
    ("ppo_atari_envpool", ["--num-envs", "100000", "--num-steps", "100000"]),
    ("ppo_atari_envpool", ["--num-envs", "2147483648", "--num-steps", "1"]),  # envpool's int32 num_envs: a TypeError
    ("pqn_atari", ["--num-envs", "100000", "--num-steps", "100000"]),
    ("ppo_rnd", ["--num-envs", "100000", "--num-steps", "100000"]),
    ("ppo_procgen_envpool", ["--num-envs", "100000", "--num-steps", "100000"]),
])
def test_a_rollout_that_cannot_fit_in_memory_is_refused_with_its_size(script, flags):
    budget = int(flags[1]) * int(flags[3])
    said = refusal(load_script(script), flags + ["--total-timesteps", str(budget)])
    assert said is not None, "not refused"
    assert f"--num-envs {flags[1]} x --num-steps {flags[3]}: the rollout's storage alone takes" in said
    assert "GiB, more than this machine's" in said


def test_a_jax_batch_that_cannot_fit_in_memory_is_refused_with_its_size():
    envs, steps = 1_048_576, 2047  # just under 2^31 transitions: at least 48 GiB (24 bytes each)
    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > envs * steps * 24:
        pytest.skip("this machine's memory holds the smallest such batch")
    flags = ["--env-id", "CartPole-v1", "--num-envs", str(envs), "--num-steps", str(steps), "--num-minibatches", "1",
             "--total-timesteps", str(envs * steps)]
    assert_refused(load_script("ppo_ewma_jax"), flags, f"--num-envs {envs} x --num-steps {steps}: the batch alone takes 48.0 GiB or more")


def test_a_jax_batch_past_int32_is_refused():
    flags = ["--env-id", "CartPole-v1", "--num-envs", "2147483648", "--num-steps", "1", "--total-timesteps", str(2**31)]
    assert_refused(load_script("ppo_ewma_jax"), flags, "--num-envs x --num-steps x --num-seeds must be below 2^31")


@pytest.mark.parametrize("script", ["ppo_atari_envpool", "pqn_atari", "ppo_rnd", "ppo_procgen_envpool"])
def test_cuda_graphs_without_a_cuda_device_are_refused(script):
    module = load_script(script)
    with pytest.raises(module.BadFlag, match="--cudagraphs captures CUDA graphs: it needs a CUDA device and --cuda"):
        module.resolve_args(cli_args(module)(cudagraphs=True, cuda=False))


@pytest.mark.parametrize("argv, message", [
    (["--num-envs", "abc"], "--num-envs must be an integer (got 'abc')"),
    (["--learning-rate", "fast"], "--learning-rate must be a number (got 'fast')"),
    (["--num-steps"], "--num-steps needs a value; see --help"),
    (["--no-such-flag", "3"], "Unrecognized options: --no-such-flag, 3; see --help"),
])
def test_what_tyro_cannot_read_is_one_line_in_a_torch_script(argv, message, monkeypatch, capsys):
    """A malformed flag: a BadFlag naming it (tyro draws a box of several lines); ppo_ewma_jax's test covers the JAX
    appendix's copy of the same function."""
    module = load_script("ppo_atari_envpool")
    monkeypatch.setattr("sys.argv", ["ppo_atari_envpool.py", *argv])
    with pytest.raises(module.BadFlag) as refused:
        module.parse_command_line()
    assert str(refused.value) == message and capsys.readouterr().err == ""


def test_a_malformed_flag_exits_2_with_one_line(tmp_path):
    result = run_copy("ppo_atari_envpool", ["--num-envs", "1e10"], tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["ppo_atari_envpool.py: error: --num-envs must be an integer (got '1e10')"], result.stderr[-3000:]
    assert not (tmp_path / "runs").exists()


def test_resume_of_a_directory_says_so_and_names_a_checkpoint_in_it(tmp_path):
    module = load_script("ppo_atari_envpool")
    checkpoints = tmp_path / "runs" / "Breakout-v5__ppo_atari_envpool__1__1" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "iter_4.pt").write_bytes(b"")
    assert_refused(module, ["--resume", tmp_path], f"--resume {tmp_path} is a directory: name a checkpoint file, such as "
                                                     f"{checkpoints / 'iter_4.pt'}")
    assert_refused(module, ["--resume", checkpoints.parent.parent.parent / "elsewhere"], "elsewhere: no such file")
    (tmp_path / "empty").mkdir()
    assert_refused(module, ["--resume", tmp_path / "empty"], "is a directory: name a checkpoint file (none is in it)")
