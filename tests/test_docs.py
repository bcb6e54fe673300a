"""docs/api.md's examples, run as the reader would: in order, as one script, in a fresh directory
and a fresh interpreter. A block whose first line is ``# file: NAME`` is written to NAME instead
(a module the next blocks import)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_FILE = re.compile(r"# file: (\S+)\n")


def blocks(text: str) -> list[str]:
    return _BLOCK.findall(text)


def test_the_doc_has_its_examples():
    """Guards against a vacuous pass: the parser finds the blocks the doc holds."""
    found = blocks(API_DOC.read_text())
    assert len(found) >= 8
    assert any(_FILE.match(block) for block in found)


@pytest.mark.slow
def test_api_doc_examples_run(tmp_path):
    script = []
    for block in blocks(API_DOC.read_text()):
        named = _FILE.match(block)
        if named:
            (tmp_path / named.group(1)).write_text(block[named.end() :])
        else:
            script.append(block)
    (tmp_path / "examples.py").write_text("\n".join(script))
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "examples.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "cartpole: replay.alpha: must be >= 0, got -1 (set by overrides)" in out
    assert "my_networks:small_mlp" in out
    assert "agent.network: 'my_networks:small_mlp' names code to import" in out
    assert "agent.network: cannot import 'my_networks:no_such_factory'" in out
    assert not (tmp_path / "runs" / "never-made").exists()


def test_every_picture_on_a_page_links_to_its_full_size_and_no_figure_is_a_strip():
    """Pins unreadable figures (issue 45): the MinAtar page's headline figure drew five game
    panels in about 735 px with no way to see it larger. Every picture in the README and the
    docs is now a link to its own file at full size, and no report figure is wider than 3
    panels to a row (an aspect of at most 3 x 6.4 to 4.6 inches, legend aside)."""
    import re

    from PIL import Image

    pages = [ROOT / "README.md"] + [
        p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts
    ]
    image = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.(?:png|svg|gif|jpg))\)")
    seen = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in image.finditer(text):
            target = match.group(1)
            seen += 1
            linked = text[max(match.start() - 1, 0)] == "[" and text[match.end() :].startswith(
                f"]({target})"
            )
            assert linked, f"{page.relative_to(ROOT)}: {target} is not a link to its full size"
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.relative_to(ROOT)}: {target} does not exist"
            if path.suffix == ".png" and "tensorboard" not in path.name:
                with Image.open(path) as picture:
                    width, height = picture.size
                assert width / height <= 3 * 6.4 / 4.6 + 0.1, f"{target}: {width}x{height}"
    assert seen >= 18
