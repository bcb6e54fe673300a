"""The mutant list of `make mutants` stays applicable: each mutant's text occurs exactly once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "mutants", Path(__file__).parent / "mutants" / "mutants.py"
)
assert _SPEC is not None and _SPEC.loader is not None
mutants = importlib.util.module_from_spec(_SPEC)
sys.modules["mutants"] = mutants  # dataclasses look their module up there
_SPEC.loader.exec_module(mutants)


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_mutant_still_applies(mutant):
    """A refactor that moves a mutated line must move its mutant too (else it tests nothing); a
    test named by its pytest node id (``file::name``) must still exist in its file."""
    mutants.check(mutant)
    assert mutant.old != mutant.new
    for test in mutant.tests:
        path, _, name = test.partition("::")
        assert (mutants.ROOT / path).exists(), test
        if name:
            assert f"def {name}(" in (mutants.ROOT / path).read_text(), test


def test_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(set(names)) == len(names)
