"""The docs site (Sphinx with MyST markdown and the Furo theme): ``make docs`` builds it into
``build/site``; ``tests/test_site.py`` builds it with warnings as errors (a broken link, a
missing page or a page in no table of contents fails) and checks the commands it shows.

Sphinx rather than MkDocs: its configuration lives here, inside ``docs/`` (MkDocs wants its
``mkdocs.yml`` beside the docs folder, at the top level the project keeps fixed), and its
``-W`` makes every broken cross-reference an error. The reference pages are generated from the
code before the sources are read (``_ext/reference.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import reference  # noqa: E402

from per_dqn import __version__  # noqa: E402

reference.write(HERE / "reference")

project = "per-dqn"
author = "the per-dqn authors"
# Furo prints it under every page ("Copyright ©" and nothing, without it).
copyright = "the per-dqn authors; MIT license"
release = __version__
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
# Headings get GitHub's anchors (`page.md#some-heading`), down to ####.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# Every warning is an error under -W; these name the kinds the site must never have.
nitpicky = True
html_theme = "furo"
html_title = f"per-dqn {release}"
html_static_path: list[str] = []
