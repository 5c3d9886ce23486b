"""The docs site (mkdocs.yml): `mkdocs build --strict` passes, benchmark/reproduce.md is built with its figures, and a
broken link fails the build, naming it. Each build takes about 2 s."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(config, site_dir):
    """`mkdocs build --strict` of `config` into `site_dir`: the finished process (its output in .stdout)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's notice about MkDocs 2, not a warning of ours
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], cwd=config.parent, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


def test_strict_build_has_the_reproduction_page_and_its_figures(tmp_path):
    site = (tmp_path / "site").resolve()
    result = build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, result.stdout[-5000:]
    for page in ["index.html", "ppo_atari_envpool/index.html", "grids/index.html", "benchmarks/index.html"]:
        assert (site / page).is_file(), page
    page = site / "benchmark" / "reproduce" / "index.html"
    sources = re.findall(r'<img [^>]*src="([^"]+)"', page.read_text())
    figures = [(page.parent / src).resolve() for src in sources]
    assert figures, "the built reproduce page shows no figure"
    for src, figure in zip(sources, figures):  # each one is in the site, a copy of the repository's figure
        assert figure.is_file(), src
        assert figure.read_bytes() == (ROOT / "benchmark" / figure.relative_to(site / "benchmark")).read_bytes(), src
    assert any(figure.parent.parent == site / "benchmark" / "reproduce" for figure in figures)  # claim_N/*.png
    # the raw output it links to is in the site too
    logs = [(page.parent / href).resolve() for href in re.findall(r'href="([^"#]*results/[^"#]+)"', page.read_text())]
    assert logs and all(log.is_file() for log in logs), logs


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """A copy of the site's sources with a link to a missing page and to a missing heading in docs/, and to a missing
    figure in benchmark/reproduce.md: the strict build fails and names all three."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "docs_hooks", tmp_path / "docs_hooks")
    (tmp_path / "benchmark").mkdir()
    for folder in ["reproduce", "results", "runners"]:
        (tmp_path / "benchmark" / folder).symlink_to(ROOT / "benchmark" / folder, target_is_directory=True)
    reproduce = (ROOT / "benchmark" / "reproduce.md").read_text()
    (tmp_path / "benchmark" / "reproduce.md").write_text(reproduce + "\n![gone](reproduce/claim_1/no_such_figure.png)\n")
    with open(tmp_path / "docs" / "index.md", "a") as index:
        index.write("\n[gone](no_such_page.md) and [gone](grids.md#no-such-heading)\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0, result.stdout[-5000:]
    for broken in ["no_such_page.md", "#no-such-heading", "no_such_figure.png"]:
        assert broken in result.stdout, (broken, result.stdout[-5000:])
