"""``per_dqn.train_many``: several runs (seeds by arms) trained in this process, in packs.

Each run is exactly the run ``per_dqn.train`` would give with the same config and seed: same
run dir contents, same ``model.pt`` (``per_dqn.packs`` says why). Packing only shares the work:
one forward pass for all members' actions and one batched update for their gradient steps.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from per_dqn.api import (
    ConfigError,
    ConfigLike,
    TrainResult,
    build_trainer,
    check_callbacks,
    load_any_config,
)
from per_dqn.policy import is_integer
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


def _json(key: str, value: Any, where: str) -> str:
    """``value`` as JSON, which YAML reads back as the same value (a numpy scalar as its Python
    value).

    Raises:
        ConfigError: one line naming ``where`` and the key, for a value no config holds.
    """
    try:
        return json.dumps(value, default=_plain)
    except (TypeError, ValueError):
        raise ConfigError([f"{where}: {key}: {value!r} is not a config value"]) from None


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value, for ``json.dumps``; anything else is refused."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


def _texts(overrides: Mapping[str, Any] | Iterable[str] | None, where: str) -> list[str]:
    """Overrides as ``key=value`` texts (a mapping's values written as JSON, which YAML reads
    back as the same value; a string as it is).

    Raises:
        ConfigError: one line naming ``where``: neither a mapping nor ``key=value`` texts.
    """
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={value if isinstance(value, str) else _json(key, value, where)}"
                for key, value in overrides.items()]  # fmt: skip
    if isinstance(overrides, str):
        return [overrides]
    texts = list(overrides) if isinstance(overrides, Iterable) else None  # once: a generator
    if texts is None or not all(isinstance(t, str) for t in texts):
        raise ConfigError(
            [f"{where}: expected a mapping or a list of 'key=value', got {overrides!r}"]
        )
    return texts


def _arms(arms: Mapping[str, Any] | Iterable[str] | None) -> dict[str, list[str]]:
    """``{name: ["key=value", ...]}``: a list names replay kinds (as ``ablate --replay``).

    Raises:
        ValueError: no arm, an arm whose name is no relative path inside ``out`` (empty,
            absolute, or with a ``.`` or ``..`` part: its runs would be written elsewhere), or
            two arms whose runs would share a dir (``a`` and ``a/``, ``a`` and ``a/s0``).
        ConfigError: an arm's overrides that are neither a mapping nor ``key=value`` texts, or
            hold a value no config holds.
    """
    if arms is None:
        return {"": []}
    if isinstance(arms, str) or not isinstance(arms, Iterable):
        raise ValueError(f"arms: expected replay kinds or {{name: overrides}}, got {arms!r}")
    named = (
        {str(name): _texts(overrides, f"arms: {name!r}") for name, overrides in arms.items()}
        if isinstance(arms, Mapping)
        else {str(kind): [f"replay.kind={kind}"] for kind in arms}
    )
    if not named:
        raise ValueError("arms: no arm given (None trains the config as it is)")
    paths: dict[tuple[str, ...], str] = {}
    for name in named:
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if not parts or name.startswith(("/", "\\")) or any(p in (".", "..") for p in parts):
            raise ValueError(
                f"arms: {name!r} cannot name a run dir inside out (<out>/<arm>/s<seed>)"
            )
        for other, other_name in paths.items():
            if _shared(parts, other) or _shared(other, parts):
                raise ValueError(
                    f"arms: {other_name!r} and {name!r} would put their runs in one dir"
                )
        paths[parts] = name
    return named


def _shared(parts: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether the arm at ``parts`` writes where the arm at ``other`` does: the same dir, or one
    of ``other``'s run dirs (``other/s<seed>``) or a dir inside one. (An arm inside another's
    dir beside its run dirs, ``a/lr3`` by ``a``, is fine, as ``ablate`` nests its arms.)"""
    if parts == other:
        return True
    n = len(other)
    return len(parts) > n and parts[:n] == other and re.fullmatch(r"s\d+", parts[n]) is not None


def _seeds(seeds: Any) -> list[int]:
    """The seeds as ints.

    Raises:
        ValueError: none, one that is not a non-negative integer, or one given twice (its runs
            would share a run dir).
    """
    if isinstance(seeds, str) or not isinstance(seeds, Iterable):
        raise ValueError(f"seeds: expected a list of non-negative integers, got {seeds!r}")
    out = []
    for seed in seeds:
        if not is_integer(seed) or seed < 0:
            raise ValueError(f"seeds: expected non-negative integers, got {seed!r}")
        if int(seed) in out:
            raise ValueError(f"seeds: {int(seed)} is given twice (its runs would share a run dir)")
        out.append(int(seed))
    if not out:
        raise ValueError("train_many needs at least one seed")
    return out


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
        ValueError: seeds that are not distinct non-negative integers, no arm, an arm name
            that leaves ``out`` or two that share a dir, a pack size that is not an integer >= 1,
            callbacks that are not a list, or an env, device or memory that cannot be had (each
            before anything is written).
    """
    from per_dqn.packs.grouping import group_into_packs
    from per_dqn.packs.lockstep import run_pack

    seeds = _seeds(seeds)
    if pack is not None:
        if not is_integer(pack) or pack < 1:
            raise ValueError(f"pack must be an integer >= 1, got {pack!r}")
        pack = int(pack)
    callbacks = check_callbacks(callbacks)
    base = _texts(overrides, "overrides")
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
