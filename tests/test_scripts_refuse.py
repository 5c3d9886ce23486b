"""Every script, as a user runs a copy of it: a run name that would leave runs/, a runs/ that is a file and a computed field
set as a flag are refused before any compute (exit 2, one line naming the rule, nothing written)."""
from pathlib import Path

import pytest

from conftest import assert_bad_input, run_copy

SCRIPTS = ["ppo_atari_envpool", "pqn_atari", "ppo_rnd", "ppo_procgen_envpool", "ppo_ewma_jax", "ppo_kinetix_sfl", "noisy_sgd"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_name_with_a_slash_is_refused(script, tmp_path):
    workdir = tmp_path / "a" / "b"  # ../../escape would have been tmp_path/escape
    result = run_copy(script, ["--exp-name", "../../escape"], workdir, timeout=300)
    assert_bad_input(result, workdir, "--exp-name must be a plain name, without '/'")
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_file_named_runs_is_refused(script, tmp_path):
    (tmp_path / "runs").write_text("notes")
    result = run_copy(script, [], tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{Path(tmp_path, 'runs')} is not a directory" in lines[0], result.stderr[-3000:]
    assert (tmp_path / "runs").read_text() == "notes" and not (tmp_path / "wandb").exists()


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "noisy_sgd"])
def test_a_computed_field_given_as_a_flag_is_refused(script, tmp_path):
    """--num-iterations is listed by --help (CleanRL's Args) but computed from the budget and the batch: setting it would
    be silently overwritten."""
    result = run_copy(script, ["--num-iterations", "999"], tmp_path, timeout=300)
    assert_bad_input(result, tmp_path, "--num-iterations is computed from the other flags: do not set it (got 999)")
