"""The README's claims about the code, checked against the code: the TensorBoard tag table and
the number of mutants `make mutants` applies."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from per_dqn import tags

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading of any level."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    following = re.search(r"^#+ ", text[start:], re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def table_tags(markdown: str) -> list[str]:
    """Every backticked name in the first cell of each row of the section's table (one row may
    name several tags), header and rule rows aside."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(rows) > 2, "no table under the heading"
    found = []
    for row in rows[2:]:
        first_cell = re.split(r"(?<!\\)\|", row)[1]
        found += re.findall(r"`([^`]+)`", first_cell)
    return found


def test_the_readme_tag_table_lists_exactly_the_logged_tags():
    """Pins drift between the README's "TensorBoard tags" table and ``tags.SCALAR_TAGS`` (the
    catalogue a run logs from): a tag added, renamed or dropped in one and not the other."""
    listed = table_tags(section(README.read_text(), "### TensorBoard tags"))
    assert len(listed) == len(set(listed)), "a tag listed twice"
    unlisted = sorted(set(tags.SCALAR_TAGS) - set(listed))
    unknown = sorted(set(listed) - set(tags.SCALAR_TAGS))
    assert not unlisted, f"README's tag table has no row for {unlisted}: add one with its meaning"
    assert not unknown, f"README's tag table lists {unknown}, which tags.SCALAR_TAGS does not log"


def load_mutants():
    """tests/mutants/mutants.py as the module ``mutants`` (test_mutants.py may have loaded it)."""
    if "mutants" in sys.modules:
        return sys.modules["mutants"]
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tests/mutants/mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_readme_mutant_count_is_the_mutant_list_s():
    """Pins drift between the README's `make mutants` paragraph ("it applies each of N one-line
    bugs ... all N caught") and ``MUTANTS`` in tests/mutants/mutants.py: a mutant added or
    removed without the paragraph following."""
    text = " ".join(README.read_text().split())  # the paragraph is wrapped
    applied = re.search(r"`make mutants` .*?applies each of (\d+) one-line bugs", text)
    caught = re.search(r"all (\d+) caught", text)
    assert applied and caught, "the README's `make mutants` paragraph changed shape"
    count = len(load_mutants().MUTANTS)
    assert int(applied.group(1)) == int(caught.group(1)) == count
