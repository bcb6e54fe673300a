"""The ``per-dqn`` command line: parse, load the config, call into the package, map errors to exits.

One module per command group, each a Typer app added here to the root one (``main``): ``train``
(and ``train --resume``), ``evaluate`` (``eval``), ``plan``, ``config`` (``show``, ``validate``),
``ablate``, ``report`` and ``archive`` (``archive``, ``unarchive``); ``common`` holds what they
share. They reach the package only through ``per_dqn.api``, ``per_dqn.config``,
``per_dqn.sweeps``, ``per_dqn.training.stopping``, the env families' table and the memory plan
(tests/test_architecture.py).

Exit codes: 0 done; 2 bad input (a bad option value, an unknown or missing option, config file,
``--set``, unusable env or device, a replay memory or networks that cannot be allocated, a run dir
that is not empty, cannot be created or written, or is in use by another per-dqn process), one
``error: ...`` line per problem on stderr and nothing created on disk; 130 stopped by Ctrl-C
(SIGINT) and 143 by SIGTERM (``docker stop``, Slurm, systemd): the run stops between two env steps,
checkpoints, marks its summary ``interrupted`` and prints the command that resumes it; 1 a file
could not be written (disk full, read-only filesystem, I/O error: one line naming it; the
checkpoints written before it are intact, so ``train --resume`` finishes the run once the cause is
gone), or (``ablate``) a run failed; 3 the loss became NaN or infinite, or the weights diverged (the
run stops; its last checkpoint is left as it was).
"""

from per_dqn.cli import ablate, archive, config, evaluate, plan, report, train
from per_dqn.cli.main import app

__all__ = ["app"]

# In this order in `per-dqn --help`.
app.add_typer(train.app)
app.add_typer(evaluate.app)
app.add_typer(plan.app)
app.add_typer(ablate.app)
app.add_typer(report.app)
app.add_typer(archive.app)
app.add_typer(config.app, name="config")
