"""Weights & Biases tracking (``run.track: wandb``, ``per-dqn train --track wandb``): the same
scalars as TensorBoard at the same env steps, the resolved config and the summary, from the
optional ``wandb`` extra.

wandb's run files live in ``RUN_DIR/wandb/`` (``wandb.init(dir=RUN_DIR)``). Its settings, cache
and data dirs are the user's own, as for any wandb script (``~/.config/wandb``,
``~/.cache/wandb``, ``~/.local/share/wandb``, or ``WANDB_CONFIG_DIR``, ``WANDB_CACHE_DIR`` and
``WANDB_DATA_DIR``), never the run dir's: nothing from a run dir configures wandb (issue 43, E2).
A run dir may come from anyone, and a ``settings`` file in it read as wandb's would name the host
that receives ``WANDB_API_KEY``; a file in a cache or data dir there could steer wandb too. The
wandb run's id is kept in ``RUN_DIR/wandb/per-dqn-run-id``, so ``train --resume`` continues the
same wandb run. A ``run.track`` read back from a run dir is refused without the user's opt-in
(``per_dqn.config.trust``).

wandb stores the process's command line (``sys.argv``) with the run; it is shown only
``provenance.shareable_argv()`` (secrets redacted; the program name alone for an API call), so a
script's ``--hf-token=...`` reaches neither ``RUN_DIR/wandb/`` nor wandb's servers (issue 23). No
environment variable is passed to wandb: it reads its own ``WANDB_*`` settings.

Points are logged with ``env_steps`` as their step metric rather than as wandb's own ``step``:
wandb drops a point whose step is below one it has seen, and a run resumed from a checkpoint
older than where it stopped logs those steps again (TensorBoard purges the old ones; wandb keeps
both).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import shutil
import string
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from per_dqn.config.messages import one_line
from per_dqn.rundir import provenance, readback
from per_dqn.rundir.fileio import inside, write_text_atomic, writing

# How to get the extra, for the one-line refusal.
INSTALL_HINT = (
    "pip install 'per-dqn[wandb]' (in a checkout: .venv/bin/python -m pip install -e '.[wandb]')"
)
RUN_ID_FILE = "per-dqn-run-id"
_ID_ALPHABET = string.ascii_lowercase + string.digits
# The step metric every logged value is plotted against.
STEP_METRIC = "env_steps"


class TrackingError(ValueError):
    """The tracker could not start the run (one line); ``Trainer.run`` raises it before it
    writes anything else."""


def check_available(track: str) -> None:
    """Refuses a tracker whose package is not installed, before anything is written.

    Raises:
        ValueError: ``run.track: 'wandb' needs the optional wandb extra...``, one line.
    """
    if track != "wandb":
        return
    try:
        importlib.import_module("wandb")
    except ImportError:
        raise ValueError(
            f"run.track: 'wandb' needs the optional `wandb` extra, which is not installed; "
            f"install it with: {INSTALL_HINT}"
        ) from None


def _new_run_id() -> str:
    """A wandb-style run id: 8 lowercase letters and digits."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


@contextlib.contextmanager
def _argv_as(argv: list[str]) -> Iterator[None]:
    """``sys.argv`` is ``argv`` while wandb starts (it reads the command line then)."""
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def _recorded_run_id(root: Path) -> str | None:
    """The wandb run id a run dir records (``RUN_ID_FILE``), read back through ``readback``
    (a FIFO or a link out is no id); None where there is none or it is not one."""
    try:
        text = readback.read_text(root, RUN_ID_FILE, readback.KINDS["run"]).strip()
    except readback.ReadBackError:
        return None
    return text if text and all(c in _ID_ALPHABET for c in text) else None


class WandbTracker:
    """One per-dqn run as one wandb run (offline too: ``WANDB_MODE=offline``).

    Args:
        run_dir: the run's dir; wandb writes into ``run_dir / "wandb"``.
        config: the resolved config, as JSON values (``Config.model_dump(mode="json")``).
        name: the wandb run's display name (the run dir's name).
        resume: continue the wandb run whose id ``run_dir`` records (a new one if none).

    Raises:
        ValueError: wandb is not installed.
        TrackingError: wandb could not start the run (no login, say), or ``run_dir/wandb`` is a
            link that leaves the run dir; one line.
    """

    def __init__(self, run_dir: Path, config: Mapping[str, Any], name: str, resume: bool) -> None:
        check_available("wandb")
        import wandb

        root = inside(run_dir, "wandb", TrackingError)  # a link out of the run dir is refused
        made = not root.exists()
        id_path = root / RUN_ID_FILE
        run_id = _recorded_run_id(root) if resume else None
        with writing(id_path):
            root.mkdir(parents=True, exist_ok=True)
            if run_id is None:
                run_id = _new_run_id()
                write_text_atomic(id_path, run_id + "\n")
        try:
            # wandb's settings, cache and data dirs are left as the user has them: pointed
            # into the run dir, a planted settings file chose where the API key goes.
            with _argv_as(provenance.shareable_argv()):
                self._run = wandb.init(
                    project=os.environ.get("WANDB_PROJECT", "per-dqn"),
                    dir=str(run_dir),
                    id=run_id,
                    resume="allow",
                    name=name,
                    config=dict(config),
                    # Console capture would fight the progress display; per-dqn prints its own.
                    settings=wandb.Settings(console="off"),
                )
        except Exception as exc:  # wandb raises its own error types (no login, bad settings...)
            if made:  # a run that never started leaves nothing of wandb's behind
                shutil.rmtree(root, ignore_errors=True)
            reason = one_line(exc)[:300] or type(exc).__name__
            raise TrackingError(f"run.track: wandb could not start a run: {reason}") from None
        self.run_id = run_id
        self._run.define_metric(STEP_METRIC)
        self._run.define_metric("*", step_metric=STEP_METRIC)

    def log(self, values: Mapping[str, float], step: int) -> None:
        """One point per tag at env step ``step``."""
        self._run.log({**values, STEP_METRIC: step})

    def finish(self, summary: Mapping[str, Any] | None, exit_code: int) -> None:
        """Records ``summary``'s final values (when the run produced one) and closes the run;
        a non-zero ``exit_code`` marks it failed or stopped."""
        if summary is not None:
            keys = ("final_eval_return_mean", "auc", "is_weight_mean", "interrupted")
            self._run.summary.update({key: summary[key] for key in keys if key in summary})
        self._run.finish(exit_code=exit_code)
