"""The sweep backends' one home: every module under per_dqn/sweeps/backends/ is registered in
``BACKENDS``, takes only ``Options`` fields, and builds an object with the ``Backend`` protocol's
methods; the CLI offers exactly the registered names."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.sweeps import backends

BACKENDS_DIR = Path(backends.__file__).parent
PROTOCOL_METHODS = ("check", "prepare", "describe", "run")


def unregistered(files: list[str], registry: dict[str, str]) -> list[str]:
    """The backend modules in ``files`` (names in the backends folder) that ``registry`` lacks."""
    registered = {module.rsplit(".", 1)[-1] for module in registry.values()}
    modules = {name.removesuffix(".py") for name in files if name.endswith(".py")}
    return sorted(modules - registered - {"__init__"})


def test_every_backend_module_is_registered():
    """A backend written but left out of ``BACKENDS`` would never be offered by ``--backend``."""
    files = [path.name for path in BACKENDS_DIR.iterdir()]
    assert unregistered(files, backends.BACKENDS) == []


def test_the_registration_check_sees_a_missing_entry():
    """Negative control for the test above: a module file with no entry is named."""
    files = ["__init__.py", "local.py", "ray.py", "slurm.py"]
    assert unregistered(files, backends.BACKENDS) == ["slurm"]


@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_each_backend_takes_only_options_fields_and_has_the_protocols_methods(name):
    module = importlib.import_module(backends.BACKENDS[name])
    fields = {field.name for field in dataclasses.fields(backends.Options)}
    assert module.OPTIONS <= fields, f"{name}: OPTIONS outside backends.Options"
    # Only the options it takes: a backend that takes none is built with none.
    given = {"workers": 1} if "workers" in module.OPTIONS else {}
    backend = backends.create(name, backends.Options(**given))
    for method in PROTOCOL_METHODS:
        expected = inspect.signature(getattr(backends.Backend, method))
        got = inspect.signature(getattr(backend, method))
        # The bound method drops ``self``; the parameter names must match the protocol's.
        assert list(got.parameters) == list(expected.parameters)[1:], f"{name}.{method}"


def test_the_cli_offers_exactly_the_registered_backends():
    result = CliRunner().invoke(app, ["ablate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    offered = re.search(r"--backend <([^>]+)>", result.output)
    assert offered, result.output
    assert offered[1].split("|") == list(backends.BACKENDS)
    bad = CliRunner().invoke(app, ["ablate", "-c", "cartpole.yaml", "--backend", "slurm"])
    assert bad.exit_code == 2
    choices = ", ".join(repr(name) for name in backends.BACKENDS)
    assert f"invalid value for '--backend': 'slurm' is not one of {choices}" in bad.stderr
