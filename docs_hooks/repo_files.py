"""mkdocs hook: add the repository files outside docs/ that the pages link to.

The pages are written to be read on GitHub as well as on the site, so they link to the rest of the
repository by relative path: docs/benchmarks.md links `../benchmark/reproduce.md` and
`../benchmark/results/...`, and benchmark/reproduce.md (which benchmark/claims.py and the runners write
to, so it stays where it is) links `reproduce/claim_N/*.png` and `results/...` beside it.

This hook adds the paths in REPO_PATHS to the build under their place relative to docs/ (source URI
`../benchmark/...`), so mkdocs resolves those links unchanged and checks them as it checks links inside
docs/ (`mkdocs build --strict` fails on a missing one). They are written to the site under their
repository path (site/benchmark/reproduce/, site/benchmark/results/, ...): markdown files as pages,
everything else (figures, logs, .txt, .csv.gz, .sh) copied as is.
"""

from __future__ import annotations

import os

from mkdocs.structure.files import File, Files, InclusionLevel

# Paths relative to the repository root (the folder of mkdocs.yml); a folder brings all its files.
REPO_PATHS = (
    "benchmark/reproduce.md",
    "benchmark/reproduce",
    "benchmark/results",
    "benchmark/runners",
)


def _repo_files(root: str):
    for rel in REPO_PATHS:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            yield rel
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            for name in sorted(filenames):
                if not name.startswith("."):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def on_files(files: Files, config) -> Files:
    root = os.path.dirname(os.path.abspath(config.config_file_path))
    docs_dir = os.path.abspath(config.docs_dir)
    prefix = os.path.relpath(root, docs_dir).replace(os.sep, "/")  # "..": the root as seen from docs/
    for rel in _repo_files(root):
        # Where mkdocs would write the file if it were docs/<rel>: site/<rel>, or site/<rel minus .md>/index.html.
        dest_uri = File(rel, None, config.site_dir, config.use_directory_urls).dest_uri
        # Set, not left to mkdocs: its default exclusion of hidden paths ('.*') would match "../". The pages
        # under benchmark/reproduce/ (each claim's verdict.md) are reached by links, not by the nav.
        inclusion = InclusionLevel.INCLUDED if rel == "benchmark/reproduce.md" else InclusionLevel.NOT_IN_NAV
        files.append(
            File(f"{prefix}/{rel}", docs_dir, config.site_dir, config.use_directory_urls,
                 dest_uri=dest_uri, inclusion=inclusion)
        )
    return files
