"""Every script is a page on top and an appendix below a line that starts with "# ==== appendix": the appendix is one
text, byte for byte, in every script of its family (torch, JAX), names no file of this repository, and the pages
keep their functions readable."""
import ast
import re

import pytest

from helpers import load_script
from benchmark.common import SCRIPTS

FAMILIES = {
    "torch": ["ppo_atari_envpool", "ppo_procgen_envpool", "ppo_rnd", "pqn_atari"],
    "jax": ["ppo_ewma_jax", "ppo_ewma_brax", "ppo_kinetix_sfl"],
}
# the appendix starts at the first comment at column 0 that names it (its marked line: "# ==== appendix ...")
MARKER = re.compile(r"^#.*\bappendix\b", re.M)
LONGEST_FUNCTION = 220  # lines of a top part's longest function (PureJaxRL's make_train is 212, CleanRL's loop 193)
# what a copied script's new owner does not have: this repository's folders and the other scripts
REPOSITORY_FILES = re.compile(r"\b(docs|benchmark|tests|cleanrl_scale)/|\b(" + "|".join(
    path.stem for path in SCRIPTS.glob("*.py")) + r")\.py\b")


def parts(name):
    """(top part, appendix) of cleanrl_scale/<name>.py."""
    source = (SCRIPTS / f"{name}.py").read_text()
    found = list(MARKER.finditer(source))
    assert len(found) == 1, f"{name}.py has {len(found)} appendix lines"
    return source[: found[0].start()], source[found[0].start():]



def ported(family):
    """The scripts of a family that have an appendix (a family is ported whole)."""
    return [name for name in FAMILIES[family] if MARKER.search((SCRIPTS / f"{name}.py").read_text())]


@pytest.mark.parametrize("family", [family for family in FAMILIES if ported(family)])
def test_the_appendix_is_one_text_in_every_script_of_a_family(family):
    assert ported(family) == FAMILIES[family], f"a {family} script without its appendix"
    texts = {name: parts(name)[1] for name in FAMILIES[family]}
    first = FAMILIES[family][0]
    for name, text in texts.items():
        assert text == texts[first], (f"{name}.py's appendix differs from {first}.py's: the appendix is one text, "
                                      "changed in every script of its family")


@pytest.mark.parametrize("name", [name for family in FAMILIES for name in ported(family)])
def test_a_script_names_no_file_of_this_repository(name):
    """A copied script points at nothing its new owner lacks (its own name excepted)."""
    top, appendix = parts(name)
    for part, text in (("top", top), ("appendix", appendix)):
        named = [line.strip() for line in text.splitlines()
                 if REPOSITORY_FILES.search(line.replace(f"{name}.py", ""))]
        assert not named, f"{name}.py's {part} names files of this repository: {named}"


@pytest.mark.parametrize("name", [name for family in FAMILIES for name in ported(family)])
def test_a_pages_functions_stay_readable_and_its_cli_is_the_appendixs(name):
    top, _ = parts(name)
    lengths = {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(ast.parse(top))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert max(lengths.values()) <= LONGEST_FUNCTION, {k: v for k, v in lengths.items() if v > LONGEST_FUNCTION}
    module = load_script(name)
    assert issubclass(module.RunArgs, module.Args)  # --help lists the algorithm's flags (Args) first
    algorithm = [f for f in module.Args.__dataclass_fields__]
    assert list(module.RunArgs.__dataclass_fields__)[: len(algorithm)] == algorithm
