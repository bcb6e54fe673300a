"""The shape of a sweep's record (``sweep.json``), as strict models: a record read back from a
sweep dir is data from anywhere, and is validated before a field of it is used (issue 43, E10:
``"runs": [1]`` was a ``TypeError`` traceback in an ``ablate`` re-run, ``arm_settings`` as a
list one in ``report``).

``per_dqn.sweeps.plan`` writes the record (``plan_sweep``'s ``record``, grown by
``merge_records``); ``per_dqn.sweeps.runs.read_sweep`` reads it back through
``per_dqn.rundir.readback`` and these models. Fields that records written by earlier releases may
lack are optional; a field of the wrong type, or one no release writes, is refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SweepRun(_Strict):
    """One planned run (``plan._run_entry``). Only ``run_dir`` is needed: an entry of an older
    format, lacking a field, matches no run of a re-run and is reported by its run dir."""

    run_dir: str
    env_id: str | None = None
    arm: str | None = None
    kind: str | None = None
    seed: int | None = None
    settings: dict[str, Any] | None = None
    point: dict[str, Any] | None = None


class SweepRecord(_Strict):
    """A whole ``sweep.json``. Its runs are checked one by one (``SweepRun``): ``report`` skips
    a damaged entry and reports the rest, an ``ablate`` re-run refuses the record.

    A field may be missing (an older record), never null where the code reads a collection:
    ``FILLED``'s are filled with their empty defaults by ``runs.read_sweep``, the others are read
    with a default where absent.
    """

    runs: list[Any]
    format: int | None = None
    config: str | None = None
    config_name: str | None = None
    arms: list[str] = []
    arm_settings: dict[str, dict[str, Any]] = {}
    grid: dict[str, list[Any]] = {}
    seeds: list[int] = []
    envs: list[str] = []
    steps: int | None = None
    overrides: list[str] = []
    axes: list[str] = []
    resolved_config: dict[str, Any] | None = None
    provenance: dict[str, Any] = {}
    grown: list[dict[str, Any]] = []
    reused: list[dict[str, Any]] = []


# The collections the code indexes without a default: absent from a record, they read as empty.
FILLED = ("arms", "arm_settings", "grid", "seeds", "envs", "overrides")
