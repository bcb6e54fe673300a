"""The docs site (docs/conf.py) and the README, checked against the code: the site builds with
warnings as errors (and a broken link does fail it), its generated reference pages list every
command, option, config key and tag, and every ``per-dqn`` command the README and the site show
parses as written (its options exist and take the values shown, its config is shipped).

docs/api.md's Python blocks are run by tests/test_docs.py."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from per_dqn.cli import app
from per_dqn.config.loading import shipped_config_names
from per_dqn.config.models import Config
from per_dqn.logs import tags
from per_dqn.memory import KINDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SPHINX = Path(sys.executable).with_name("sphinx-build")


def load_reference():
    """docs/_ext/reference.py, the reference pages' generator, as a module."""
    spec = importlib.util.spec_from_file_location("reference", DOCS / "_ext" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SPHINX), "-W", "--keep-going", "-q", "-b", "html", str(source), str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


# --- the build ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """`make docs`' build: no warning (a broken link or cross-reference, a page in no table of
    contents, a missing page), and every page of the home page's tables of contents is there,
    the generated reference among them."""
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("reference"))
    done = build(source, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    pages = re.findall(r"^([\w/]+)$", (DOCS / "index.md").read_text(), re.MULTILINE)
    assert len(pages) >= 15 and "reference/config" in pages
    for page in pages:
        assert (tmp_path / "site" / f"{page}.html").is_file(), page
    config = (tmp_path / "site" / "reference" / "config.html").read_text()
    assert "replay.beta_end" not in config and "beta_end" in config


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path):
    """Negative control for the strict build: a link to a page that does not exist, or to a
    heading a page does not have, fails it, naming the file."""
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("reference"))
    with (source / "index.md").open("a") as index:
        index.write("\nSee [nowhere](no-such-page.md) and [there](api.md#no-such-heading).\n")
    done = build(source, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page" in done.stderr and "no-such-heading" in done.stderr


# --- the generated reference ----------------------------------------------------------------------


def test_the_config_reference_has_every_key_with_its_default_and_meaning():
    """Every key of every section, in a row with its default as a config file writes it, its
    range from the model's bounds, and a meaning from the section's docstring."""
    reference = load_reference()
    page = reference.config_page()
    defaults = Config()
    rows = {row[0]: row for row in reference.config_keys()}
    for section, field in Config.model_fields.items():
        for key in field.annotation.model_fields:
            dotted = f"{section}.{key}"
            assert dotted in rows, dotted
            _, _, default, _, meaning = rows[dotted]
            assert meaning.strip(), dotted
            assert f"| `{key}`" in page
            value = getattr(getattr(defaults, section), key)
            if isinstance(value, bool):
                assert default == str(value).lower()
            elif value is None:
                assert default == "null"
    assert rows["train.batch_size"][2:4] == ("64", ">= 1")
    assert rows["env.num_envs"][3] == ">= 1, <= 1024"
    assert rows["replay.kind"][1] == " \\| ".join(f"`{kind}`" for kind in KINDS)
    assert "| `frame_skip` *(Atari)* |" in page
    assert "| `full_action_space` *(Atari, MinAtar)* |" in page
    assert "| `num_envs` |" in page  # read by every family: no mark


def test_a_key_without_a_meaning_fails_the_reference():
    """A key added to a model without a line in its ``Attributes:`` docstring is an error, not a
    row with an empty meaning."""
    reference = load_reference()
    from pydantic import BaseModel

    class Section(BaseModel):
        """A section.

        Attributes:
            documented: has a meaning,
                over two lines.
        """

        documented: int = 1
        undocumented: int = 2

    assert reference._attributes(Section) == {"documented": "has a meaning, over two lines."}


def test_the_cli_reference_has_every_command_and_option():
    """Every command and sub-command, and every option of each, as ``--help`` names them."""
    reference = load_reference()
    page = reference.cli_page()
    root = typer.main.get_command(app)
    for path, command in reference._commands(root, "per-dqn"):
        assert f"## `{path}`" in page
        for param in getattr(command, "params", []):
            for opt in param.opts:
                if opt.startswith("-"):
                    assert opt in page, (path, opt)
    assert "## `per-dqn config validate`" in page
    assert "`--pack <int>`" in page and "`-q, --quiet`" in page


def test_the_tags_reference_has_every_tag_and_the_tabs():
    reference = load_reference()
    page = reference.tags_page()
    for tag in tags.SCALAR_TAGS:
        assert f"| `{tag}` |" in page
    for _, name in tags.HPARAMS_METRICS:
        assert f"| {name} |" in page
    assert "| PER | priority of the sampled batches | `per/sampled_priority` |" in page


# --- the commands shown ---------------------------------------------------------------------------

_BLOCK = re.compile(r"```(?:bash|text|console|sh)\n(.*?)```", re.DOTALL)
_PROMPT = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?(per-dqn .*)$")


def shown_commands(failing: bool = False) -> list:
    """Every ``per-dqn`` command in a code block of the README or a site page, as (file,
    command): a line ending in ``\\`` joined with the lines that continue it, environment
    variables before the command (``PYTHONPATH=... per-dqn``) and the trailing comment dropped,
    and commands with a placeholder (``<...>``, ``...``) left out. ``failing``: instead, the
    commands shown failing (the block's next lines are ``error:`` lines), as (file, command,
    those error lines). Pins continued commands going unchecked (the README's ablation example
    among them), which the first version skipped."""
    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if "reference" in path.relative_to(ROOT).parts[:2]:
            continue
        for block in _BLOCK.findall(path.read_text()):
            lines = block.splitlines()
            for i, line in enumerate(lines):
                match = _PROMPT.match(line.strip())
                if not match:
                    continue
                command = re.sub(r"\s+#.*$", "", match.group(1))
                last = i  # the command's last line
                while command.endswith("\\") and last + 1 < len(lines):
                    last += 1
                    command = command[:-1] + re.sub(r"\s+#.*$", "", lines[last].strip())
                if "<" in command or "..." in command or command.endswith("\\"):
                    continue
                errors = []
                for after in lines[last + 1 :]:
                    if not after.startswith("error: "):
                        break
                    errors.append(after)
                where = str(path.relative_to(ROOT))
                if failing and errors:
                    found.append((where, command, errors))
                elif not failing and not errors:
                    found.append((where, command))
    return found


def test_the_docs_show_many_commands():
    """Guards against a vacuous pass: the README and the site show dozens of commands."""
    commands = shown_commands()
    assert len(commands) >= 30
    assert any(command.startswith("per-dqn ablate ") for _, command in commands)


@pytest.mark.parametrize(("where", "command"), shown_commands())
def test_a_shown_command_parses(where, command):
    """Each ``per-dqn`` command shown parses as written: the command exists, its options exist
    and take the values shown (a choice among its choices, an int where an int goes), and a
    ``--config`` name without a slash is a shipped config. Pins drift between the docs and the
    CLI, e.g. an option renamed in the code and not in the README."""
    args = shlex.split(command)[1:]
    group = typer.main.get_command(app)
    ctx = group.make_context("per-dqn", list(args), resilient_parsing=True)
    command_obj, rest = group, list(args)
    while hasattr(command_obj, "commands") and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        assert name in command_obj.commands, f"{where}: no command {name!r} in {command!r}"
        command_obj = command_obj.commands[name]
    if "--help" in rest or "--version" in rest:
        return
    ctx = command_obj.make_context(command_obj.name, rest)
    config = ctx.params.get("config")
    if isinstance(config, str) and "/" not in config and not Path(config).exists():
        assert config in shipped_config_names(), f"{where}: {config!r} is not a shipped config"


@pytest.mark.parametrize(("where", "command", "errors"), shown_commands(failing=True))
def test_a_command_shown_failing_fails_with_the_lines_shown(tmp_path, where, command, errors):
    """Each command the docs show failing, run as shown: exit 2, every ``error:`` line shown
    printed as shown (the README's examples of bad input stay true), nothing created."""
    assert shown_commands(failing=True), "the docs show no failing command"
    # As the docs show it: `per-dqn` on PATH (an activated venv).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(
        shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    for line in errors:
        assert line in done.stderr.splitlines(), (where, line, done.stderr)
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_config_list_names_every_shipped_config():
    """Pins the shipped-config list omitting ``minatar.yaml`` (issue 26): where the docs list
    the configs ``--config`` takes by name, every top-level shipped config is there, and the
    published setups' folder."""
    top = [name for name in shipped_config_names() if "/" not in name]
    assert "minatar.yaml" in top
    for page in ("quickstart.md", "guides/training.md"):
        text = " ".join((DOCS / page).read_text().split())
        listed = text.split("the name of a shipped config (", 1)[1].split(")", 1)[0]
        for name in top:
            assert f"`{name}`" in listed, (page, name)
        assert "`literature/<name>.yaml`" in listed


SCREENSHOTS = {
    "guides/tensorboard-custom-scalars.png", "guides/tensorboard-hparams.png",
    "guides/tensorboard-arms.png",
}  # fmt: skip


def test_every_figure_in_the_docs_is_drawn_at_200_dpi_or_more():
    """Pins figures committed at 100 dpi (issue 26: every figure at least 200 dpi): each PNG
    under docs/ says 200 dpi or more in its header and is at least 1,000 pixels wide, except the
    TensorBoard screenshots (a browser's pixels, with no dpi), which are named and must exist."""
    from PIL import Image

    figures = sorted(DOCS.rglob("*.png"))
    names = {str(path.relative_to(DOCS)) for path in figures}
    assert SCREENSHOTS <= names and len(names - SCREENSHOTS) >= 10
    for path in figures:
        name = str(path.relative_to(DOCS))
        with Image.open(path) as image:
            dpi, width = image.info.get("dpi"), image.size[0]
        assert width >= 1000, (name, width)
        if name in SCREENSHOTS:
            assert dpi is None, name
        else:
            assert dpi is not None and min(dpi) >= 199.5, (name, dpi)


# --- the Python blocks ----------------------------------------------------------------------------

_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def python_blocks() -> list[tuple[str, str]]:
    """Every ```python block of the README and the site's pages, as (file, code)."""
    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for block in _PYTHON.findall(path.read_text()):
            found.append((str(path.relative_to(ROOT)), block))
    return found


def test_the_replay_guide_s_example_runs(tmp_path):
    """The replay guide's stand-alone use of ``per_dqn.memory``, run as a reader would paste it
    (docs/api.md's blocks are run by tests/test_docs.py)."""
    ((_, code),) = [b for b in python_blocks() if b[0] == "docs/guides/replay.md"]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True {'mean_priority': ")


@pytest.mark.parametrize(("where", "code"), python_blocks())
def test_a_python_block_compiles_and_its_imports_resolve(where, code):
    """Every Python block shown compiles, and each name it imports exists. The results pages'
    blocks read sweeps of hours of training, which are not run here; this keeps them true to
    the package's API (a module or function renamed in the code and not in the docs)."""
    import ast
    import importlib

    tree = ast.parse(code, filename=where)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in ("per_dqn", "numpy", "torch"):
                continue  # a block's own module (docs/api.md's my_networks)
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"
                ), f"{where}: {node.module} has no {alias.name}"
