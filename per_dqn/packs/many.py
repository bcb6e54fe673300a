"""``per_dqn.train_many``: several runs (seeds by arms) trained in this process, in packs.

Each run is exactly the run ``per_dqn.train`` would give with the same config and seed: same
run dir contents, same ``model.pt`` (``per_dqn.packs`` says why). Packing only shares the work:
one forward pass for all members' actions and one batched update for their gradient steps.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from per_dqn.api import ConfigLike, TrainResult, build_trainer, load_any_config
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import provenance
from per_dqn.rundir.dirs import lock_run_dir

__all__ = ["ManyResult", "train_many"]


@dataclass(frozen=True)
class ManyResult:
    """One run of ``train_many``.

    Attributes:
        arm: its arm's name.
        seed: its seed.
        run_dir: where it wrote.
        result: its ``TrainResult``; None when it failed.
        error: the exception that stopped it (a ``DivergedError``, a ``WriteError``...), else None.
    """

    arm: str
    seed: int
    run_dir: Path
    result: TrainResult | None
    error: BaseException | None = None

    @property
    def final_return(self) -> float | None:
        """The final evaluation's mean return (None for a run stopped or failed before it)."""
        return None if self.result is None else self.result.final_return


def _texts(overrides: Mapping[str, Any] | Iterable[str] | None) -> list[str]:
    """Overrides as ``key=value`` texts (a mapping's values written as JSON, which YAML reads
    back as the same value; a string as it is)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                for key, value in overrides.items()]  # fmt: skip
    if isinstance(overrides, str):
        return [overrides]
    return [str(text) for text in overrides]


def _arms(arms: Mapping[str, Any] | Iterable[str] | None) -> dict[str, list[str]]:
    """``{name: ["key=value", ...]}``: a list names replay kinds (as ``ablate --replay``)."""
    if arms is None:
        return {"": []}
    if isinstance(arms, Mapping):
        return {str(name): _texts(overrides) for name, overrides in arms.items()}
    return {str(kind): [f"replay.kind={kind}"] for kind in arms}


def train_many(
    config: ConfigLike,
    *,
    seeds: Iterable[int] = (0,),
    arms: Mapping[str, Any] | Iterable[str] | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    out: str | Path | None = None,
    pack: int | None = None,
    callbacks: Sequence[Any] = (),
) -> list[ManyResult]:
    """Trains every arm at every seed, in this process, packed.

    Args:
        config: as ``train``'s.
        seeds: the seeds (``run.seed``) of each arm.
        arms: replay kinds (``["uniform", "proportional"]``), or ``{name: overrides}`` with
            overrides as ``train`` takes them (``{"lr3": {"agent.learning_rate": 3e-4}}``);
            None: one arm, the config as it is.
        overrides: applied to every run before its arm's.
        out: the parent of the run dirs, ``<out>/<arm>/s<seed>`` (``<out>/s<seed>`` without
            arms); default ``<run.runs_root>/<env>__<config>__many__<time>``. Each run dir must
            be absent or empty.
        pack: runs per pack at most (None: every run that can share one, in one). Runs whose
            networks, batch size or env differ go to different packs (``packs.pack_key``).
        callbacks: given to every run (``train``'s); one that returns True stops that run.

    Returns:
        One ``ManyResult`` per run, arm by arm, seed by seed. A run that failed holds its error;
        the others went on.

    Raises:
        ConfigError: a bad config, override or arm (before anything is written).
        RunDirError: a run dir that is not empty or that another process writes.
        ValueError: a pack size below 1, or an env, device or memory that cannot be had.
    """
    from per_dqn.packs.grouping import group_into_packs
    from per_dqn.packs.lockstep import run_pack

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("train_many needs at least one seed")
    if pack is not None and pack < 1:
        raise ValueError(f"pack must be >= 1, got {pack}")
    base = _texts(overrides)
    plans = []  # (arm, seed, config, name)
    for arm, texts in _arms(arms).items():
        for seed in seeds:
            cfg, name = load_any_config(config, [*base, *texts, f"run.seed={seed}"])
            plans.append((arm, seed, cfg, name))
    if out is None:
        first = plans[0][2]
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(first.run.runs_root) / f"{first.env.id}__{plans[0][3]}__many__{stamp}"
    out = Path(out)
    run_dirs = [out / arm / f"s{seed}" if arm else out / f"s{seed}" for arm, seed, _, _ in plans]
    for run_dir in run_dirs:
        rundir.check_run_dir(run_dir)
    results: list[ManyResult | None] = [None] * len(plans)
    for members in group_into_packs([p[2] for p in plans], pack):
        trainers = []
        try:
            with contextlib.ExitStack() as held:
                for i in members:
                    trainers.append(build_trainer(plans[i][2], plans[i][3]))
                    lock = lock_run_dir(run_dirs[i], fresh=True)
                    assert lock is not None
                    held.enter_context(lock)
                # summary.json records this call, never the calling script's command line.
                held.enter_context(
                    provenance.called("per_dqn.train_many", config=config, overrides=overrides)
                )
                ended = run_pack(
                    trainers, [run_dirs[i] for i in members], callbacks=[callbacks] * len(members)
                )
        finally:
            for trainer in trainers:
                trainer.close()
        for i, member in zip(members, ended, strict=True):
            arm, seed = plans[i][0], plans[i][1]
            result = None if member.summary is None else TrainResult(member.summary, run_dirs[i])
            results[i] = ManyResult(arm, seed, run_dirs[i], result, member.error)
    return [r for r in results if r is not None]
