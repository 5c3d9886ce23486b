"""benchmark/speed/profile_torch.py: a real profiled run of ppo_atari_envpool.py, its parts add up to cProfile's total."""
import json
import subprocess
import sys

from pathlib import Path

import pytest

from helpers import assert_bad_input

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmark" / "speed"))
import profile_torch  # noqa: E402

TOOL = ROOT / "benchmark" / "speed" / "profile_torch.py"


def test_parts_of_a_real_run_add_up(tmp_path):
    out = tmp_path / "prof.json"
    result = subprocess.run([sys.executable, TOOL, "--json", out, "--", "--num-envs", "4", "--num-steps", "16",
                             "--total-timesteps", "128", "--num-minibatches", "2", "--update-epochs", "1"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    profile = json.loads(out.read_text())
    parts, seconds = profile["seconds"], profile["functions"]
    assert parts == pytest.approx({part: sum(f.values()) for part, f in seconds.items()})
    for part in ("backward pass (autograd)", "convolutions, forward", "environment (envpool: creation, steps)",
                 "optimiser step, gradient clipping", "frame conversion (uint8 -> float, layout)", "dynamics/ metrics",
                 "imports and start-up", "training loop (the script's other lines)"):
        assert parts.get(part, 0) > 0, part
    assert seconds["backward pass (autograd)"].get("<method 'run_backward' of 'torch._C._EngineBase' objects>", 0) > 0
    conversion = seconds["frame conversion (uint8 -> float, layout)"]
    assert any(name.startswith("ppo_atari_envpool.py:") and name.endswith("(preprocess)") for name in conversion)
    assert conversion.get("<method 'to' of 'torch._C.TensorBase' objects>", 0) > 0  # a kernel, where preprocess calls it
    assert " cores, " in result.stdout.splitlines()[0]  # the machine is named


def test_a_builtin_is_split_over_its_callers_parts():
    """Hand-made cProfile table: torch.sqrt called from Adam (3 s) and from the script's preprocess (1 s), a Python
    helper of no part called only from main; every second lands in exactly one part."""
    adam = ("/x/site-packages/torch/optim/adam.py", 1, "_single_tensor_adam")
    pre = ("/tmp/t/ppo_atari_envpool.py", 417, "preprocess")
    main = ("/tmp/t/ppo_atari_envpool.py", 502, "main")
    helper = ("/x/site-packages/numpy/lib/helper.py", 5, "helper")
    sqrt = ("~", 0, "<method 'sqrt' of 'torch._C.TensorBase' objects>")
    stats = type("S", (), {})()
    stats.stats = {
        main: (1, 1, 2.0, 10.0, {}),
        adam: (1, 1, 0.5, 3.5, {main: (1, 1, 0.5, 3.5)}),
        pre: (1, 1, 0.25, 1.25, {main: (1, 1, 0.25, 1.25)}),
        sqrt: (2, 2, 4.0, 4.0, {adam: (1, 1, 3.0, 3.0), pre: (1, 1, 1.0, 1.0)}),
        helper: (1, 1, 0.75, 0.75, {main: (1, 1, 0.75, 0.75)}),
    }
    parts = {part: sum(f.values()) for part, f in profile_torch.parts(stats, "ppo_atari_envpool.py").items()}
    assert parts == pytest.approx({"optimiser step, gradient clipping": 3.5,
                                   "frame conversion (uint8 -> float, layout)": 1.25,
                                   "training loop (the script's other lines)": 2.75})


def test_a_cycle_of_functions_without_a_part_takes_its_callers_parts():
    """torch's module calls recurse (_call_impl -> Sequential.forward -> _call_impl): a cycle of functions no rule
    places, entered from the script's main only, is the training loop's whichever order the table lists it in."""
    main = ("/tmp/t/ppo_atari_envpool.py", 502, "main")
    call = ("/x/site-packages/torch/nn/modules/module.py", 1782, "_call_impl")
    forward = ("/x/site-packages/torch/nn/modules/container.py", 248, "forward")
    flatten = ("~", 0, "<method 'flatten' of 'torch._C.TensorBase' objects>")
    rows = {
        main: (1, 1, 1.0, 10.0, {}),
        call: (4, 8, 2.0, 9.0, {main: (4, 4, 1.0, 9.0), forward: (0, 4, 1.0, 4.0)}),
        forward: (4, 4, 0.5, 8.0, {call: (4, 4, 0.5, 8.0)}),
        flatten: (4, 4, 0.5, 0.5, {forward: (4, 4, 0.5, 0.5)}),
    }
    for order in (list(rows), list(rows)[::-1]):
        stats = type("S", (), {})()
        stats.stats = {key: rows[key] for key in order}
        parts = {part: sum(f.values()) for part, f in profile_torch.parts(stats, "ppo_atari_envpool.py").items()}
        assert parts == pytest.approx({"training loop (the script's other lines)": 4.0})


@pytest.mark.parametrize("argv, message", [
    (["--script", "nope"], "--script nope: no cleanrl_scale/nope.py"),
    (["--top", "-1"], "--top must be >= 0"),
    (["--json", "/no/such/dir/p.json"], "--json /no/such/dir/p.json: its directory does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    result = subprocess.run([sys.executable, TOOL, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert_bad_input(result, tmp_path, message)
