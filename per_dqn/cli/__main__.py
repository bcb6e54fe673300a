"""``python -m per_dqn.cli``: the ``per-dqn`` command."""

from per_dqn.cli import app

app()
