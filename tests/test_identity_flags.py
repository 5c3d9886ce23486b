"""The Args fields that cannot change what a run learns: one list, benchmark/common.py's NON_IDENTITY, which the launcher
leaves out of a run's identity and the analysis out of its configs, held against what each script of cleanrl_scale/
itself counts as not changing learning: its NOT_LEARNING and RUN_FLAGS (the torch scripts: the flags a --resume may change without
reporting them) and the fields its Args and RunArgs group under "# Speed" and "# Checkpoints"."""
import ast
import dataclasses
import functools

import pytest

from benchmark import configs, launch
from benchmark.common import NON_IDENTITY, SCRIPTS, cli_args, load_script

NAMES = sorted(path.stem for path in SCRIPTS.glob("*.py"))
NOT_LEARNING_SECTIONS = ("Speed", "Checkpoints")  # the first word of an Args heading
# flags a script counts as not changing what it learns that a run's identity keeps, and why
KEPT = {
    "reset_envs_at": "restarts every env on fresh episodes (to check a resume): other episodes, other numbers",
    "save_model": "writes the trained model (the Atari scripts evaluate it too): a store holding the run without it "
                  "would skip the run and never write it",
    "eval_episodes": "other evaluations: other logged eval/ numbers",
    "eval_every": "other evaluations: other logged eval/ numbers",
    "torch_threads": "torch's CPU threads (speed, and the rounding of threaded reductions); leaving it out would rename "
                     "every run of the torch scripts in the stores",
    "num_seeds": "the launcher's own: it packs seeds with it and refuses it after --, so a run's identity has 1",
}


@functools.lru_cache(maxsize=None)
def script(name):
    return load_script(name)  # torch, JAX, envpool: each script imported once


def fields(name):
    return {f.name for f in dataclasses.fields(cli_args(script(name)))}


@functools.lru_cache(maxsize=None)
def headings(name):
    """{field of the script's Args: the `# ...` comment line above it (None before the first)}, from its source."""
    source = (SCRIPTS / f"{name}.py").read_text()
    lines = source.splitlines()
    found = {}
    for args in [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name in ("Args", "RunArgs")]:
        heading, after = None, args.lineno  # Args (the algorithm's flags), then RunArgs (the run's, in the appendix)
        for node in args.body:  # fields and their docstrings; comments only between them
            for line in lines[after:node.lineno - 1]:
                if line.strip().startswith("# "):
                    heading = line.strip()[2:]
            if isinstance(node, ast.AnnAssign):
                found[node.target.id] = heading
            after = node.end_lineno
    return found


def not_learning(name):
    """The flags the script itself counts as not changing what a run learns."""
    sections = {f for f, heading in headings(name).items() if heading and heading.split()[0] in NOT_LEARNING_SECTIONS}
    return set(getattr(script(name), "NOT_LEARNING", ())) | set(getattr(script(name), "RUN_FLAGS", ())) | sections


def test_the_launcher_and_the_analysis_use_the_one_list():
    assert launch.NON_IDENTITY is NON_IDENTITY
    assert configs.NOT_CONFIG == set(NON_IDENTITY) | set(configs.RUN_OWN)
    assert len(set(NON_IDENTITY)) == len(NON_IDENTITY) and not set(NON_IDENTITY) & set(configs.RUN_OWN)


def test_every_listed_flag_is_a_field_of_a_script():
    known = set().union(*(fields(name) for name in NAMES))
    assert not (set(NON_IDENTITY) | set(configs.RUN_OWN)) - known


@pytest.mark.parametrize("name", NAMES)
def test_what_a_script_counts_as_not_learning_is_listed(name):
    assert set(headings(name)) == fields(name)  # the headings were read off the Args fields
    missing = not_learning(name) - set(NON_IDENTITY) - set(configs.RUN_OWN) - set(KEPT)
    assert not missing, (f"{name}.py counts {sorted(missing)} as not changing what a run learns: add them to "
                         "benchmark/common.py's NON_IDENTITY, or to KEPT here with the reason a run's identity keeps them")


def test_every_kept_flag_is_one_a_script_counts_as_not_learning():
    marked = set().union(*(not_learning(name) for name in NAMES))
    assert set(KEPT) <= marked - set(NON_IDENTITY)


# each script's flags as a run might give them (non-default values of every kind: bool, tuple, recipe); the recipes'
# learning rate is logged scaled, and benchmark/advise.py must give back the base one
RUN_FLAGS = {
    "ppo_ewma_jax": ["--env-id", "CartPole-v1", "--num-envs", "64", "--num-steps", "32", "--ewma-com", "8", "--anneal-lr",
                     "--no-clip-vloss", "--scaling-recipe", "hybrid", "--base-num-envs", "16", "--base-num-minibatches", "8",
                     "--hybrid-minibatch-factor", "2", "--learning-rate", "0.0007"],
    "ppo_ewma_brax": ["--env-id", "ant", "--num-envs", "32", "--num-steps", "8", "--scaling-recipe",
                      "bigger-minibatch-sqrt-lr", "--base-num-envs", "8", "--base-num-minibatches", "4"],
    "ppo_kinetix_sfl": ["--model", "mlp", "--env-size", "s", "--num-envs", "8", "--num-steps", "16", "--num-minibatches",
                        "32", "--no-filter-levels"],
    "ppo_atari_envpool": ["--num-envs", "32", "--scaling-recipe", "more-minibatches", "--base-num-envs", "8", "--save-every", "5"],
    "ppo_procgen_envpool": ["--num-envs", "16", "--num-minibatches", "4", "--no-norm-adv"],
    "ppo_rnd": ["--num-envs", "8", "--update-epochs", "2"],
    "pqn_atari": ["--num-envs", "16", "--total-timesteps", "65536"],
    "noisy_sgd": ["--step-sizes", "0.01", "0.2", "--switch-step", "100", "--switch-step-size", "0.05"],
}


@pytest.mark.parametrize("name", NAMES)
def test_a_runs_hyperparameters_text_gives_back_its_flags(name):
    """benchmark/advise.py builds a script's own run's command line from the `hyperparameters` text the script logs (its
    Args after resolve_args): those flags, checked again by the script, resolve to the same Args."""
    from benchmark import advise
    import tyro

    module, checks = script(name), {"num_devices": 1} if name == "ppo_kinetix_sfl" else {}
    logged = tyro.cli(cli_args(module), args=RUN_FLAGS[name])
    module.resolve_args(logged, **checks)
    table = "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in vars(logged).items())
    argv = advise.command_of_hyperparameters({"hyperparameters": [table]}, name)
    again = tyro.cli(cli_args(module), args=argv)
    module.resolve_args(again, **checks)
    assert vars(again) == vars(logged), argv
    assert not {"--batch-size", "--num-iterations", "--fuse-iterations", "--unroll"} & set(argv)
