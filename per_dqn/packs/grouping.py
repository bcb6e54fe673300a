"""Which runs may share a pack (``per_dqn.packs``), from their configs alone: no torch here, so
that planning a sweep (``per_dqn.sweeps.job.pack_jobs``) loads none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from per_dqn.agent.objectives import objective
from per_dqn.memory.kinds import REPLAY_KINDS

__all__ = ["MEMBER_AGENT_KEYS", "group_into_packs", "objective_key", "pack_key", "packable"]


# Agent keys that may differ inside a pack: each member applies its own (the learning rate and
# the optimiser's settings per call of its kernel, the discount and the n-step return on the
# host, the target update per member, the initial weights before they are stacked). Every other
# agent key shapes the tensors or the update (the optimiser's kind among them).
MEMBER_AGENT_KEYS = frozenset(
    {"learning_rate", "learning_rate_end", "adam_eps", "rmsprop_alpha", "rmsprop_eps",
     "rmsprop_centered", "n_step", "gamma", "tau", "target_update_interval", "init"}
)  # fmt: skip


def objective_key(config: Any) -> tuple:
    """What the replay kind makes the update compute (``per_dqn.agent.objectives``): its
    objective with the settings that objective reads, and the rows of a batch (LaBER learns
    from ``large_batch`` times the batch size)."""
    kind = REPLAY_KINDS[config.replay.kind]
    entry = objective(kind.objective)
    settings = tuple(repr(getattr(config.replay, key)) for key in entry.settings)
    rows = config.replay.large_batch if entry.subsamples else 1
    return (entry.name, settings, rows)


def pack_key(config: Any) -> tuple:
    """What runs must share to share a pack, from their configs: the env (its id and sub-env
    count: the observations' and the actions' shapes), the batch size, the device and torch's
    threads, every agent key but ``MEMBER_AGENT_KEYS``, and what the replay kind makes the update
    compute (``objective_key``: uniform, proportional, rank and ReLo share one; LAP, PAL and
    LaBER each have their own). Anything else may differ: the seed, the priorities and every
    other ``replay.*`` key, the exploration schedule, the budget."""
    agent = config.agent.model_dump(mode="json")
    return (
        config.env.id,
        config.env.num_envs,
        config.train.batch_size,
        config.run.device,
        config.run.torch_threads,
        tuple(sorted((k, repr(v)) for k, v in agent.items() if k not in MEMBER_AGENT_KEYS)),
        objective_key(config),
    )


def packable(config: Any) -> bool:
    """Whether a run can share a pack: a built-in network (``agent.network`` ``auto`` or a name);
    a user's ``package.module:factory`` network is an opaque module whose layers cannot be
    stacked, so its runs each make a pack of one."""
    return ":" not in config.agent.network


def group_into_packs(configs: Sequence[Any], size: int | None) -> list[list[int]]:
    """Indices of ``configs`` grouped into packs: runs that share a ``pack_key``, in their
    order, at most ``size`` to a pack (None: no limit); a run that is not ``packable`` alone."""
    if size is not None and size < 1:
        raise ValueError(f"the pack size must be >= 1, got {size}")
    groups: dict[tuple | int, list[int]] = {}
    for i, config in enumerate(configs):
        if not packable(config):
            # A user's network computes alone: a group keyed by its index, which no pack key
            # (a tuple) equals.
            groups[i] = [i]
            continue
        groups.setdefault(pack_key(config), []).append(i)
    packs = []
    for members in groups.values():
        step = len(members) if size is None else size
        packs.extend(members[i : i + step] for i in range(0, len(members), step))
    return packs
