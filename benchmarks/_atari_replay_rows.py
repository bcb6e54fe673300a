"""The rows of ``benchmarks/atari.py``'s replay section (2): ``per_dqn``'s memories and, where
they import (the ``bench`` extra), cpprb's and Tianshou's prioritized buffers, behind one interface
(``ReplayRow``); each filled the way its library takes batches, and its sampled stacks checked
against the truth of ``_atari_stream.py``.

Not a benchmark on its own: ``_atari_replay.py`` builds, times and reports these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from _atari_stream import FRAME_ITEMS, OBS_SHAPE, SCREEN, STACK, EpisodeStream, FrameSource

from per_dqn.memory import Batch, make_memory, planned_nbytes

try:
    import cpprb
except ImportError:  # the `bench` extra is not installed: those rows are skipped with a note
    cpprb = None
try:
    import tianshou.data  # binds `tianshou`; its row is skipped with a note when missing
except ImportError:
    tianshou = None

FILL_CHUNK = 512  # transitions per add_batch call while filling
ALPHA = 0.6
BETA = 0.4
TRAIN_BATCH = 32
CHECK_BATCHES = 8  # sample(32) calls whose stacks are checked against the truth


def to_layout(stacks: np.ndarray, channels_last: bool) -> np.ndarray:
    """``(..., 4, 84, 84)`` stacks in the row's layout (a view)."""
    return np.moveaxis(stacks, -3, -1) if channels_last else stacks


@dataclass
class ReplayRow:
    """One replay implementation: how to fill, sample, update and read back its stacks."""

    name: str
    memory: Any
    add_one: Callable[[Any], None]  # one transition of the row's loop pool
    sample: Callable[[], Any]  # sample(32), stacks gathered
    indices_of: Callable[[Any], np.ndarray]
    stacks_of: Callable[[Any], tuple[np.ndarray, np.ndarray]]  # channel-first obs, next_obs
    update: Callable[[Any, np.ndarray], None] | None  # None: no priorities
    stored: Callable[[], int]
    nbytes: int | None = None
    planned: int | None = None
    # Priorities by slot index (randomise_priorities); None: the memory's update_priorities.
    prioritise: Callable[[np.ndarray, np.ndarray], None] | None = None
    # A check beyond check_stacks' random samples, appended to its verdict in the stacks column.
    extra_check: Callable[[EpisodeStream, FrameSource], str] | None = None


def per_dqn_row(name: str, memory: Any) -> ReplayRow:
    """A ``per_dqn`` memory behind the row interface (priorities updated where it is weighted)."""

    def add_one(t: tuple) -> None:
        memory.add(*t)

    def update(batch: Batch, td_errors: np.ndarray) -> None:
        memory.update_priorities(batch.indices, td_errors)

    return ReplayRow(
        name=name,
        memory=memory,
        add_one=add_one,
        sample=lambda: memory.sample(TRAIN_BATCH, beta=BETA),
        indices_of=lambda batch: batch.indices,
        stacks_of=lambda batch: (batch.obs, batch.next_obs),
        update=update if memory.weighted else None,
        stored=lambda: len(memory),
        nbytes=memory.nbytes,
        planned=planned_nbytes(
            memory.kind, memory.capacity, OBS_SHAPE, np.uint8, dedup_frames=True
        )["total"],
    )


def cpprb_row(name: str, capacity: int, channels_last: bool) -> ReplayRow:
    """cpprb's ``PrioritizedReplayBuffer`` with ``next_of`` and ``stack_compress`` on ``obs``."""
    shape = (SCREEN, SCREEN, STACK) if channels_last else OBS_SHAPE
    buffer = cpprb.PrioritizedReplayBuffer(
        capacity,
        {
            "obs": {"shape": shape, "dtype": np.uint8},
            "act": {"dtype": np.int64},
            "rew": {},
            "done": {},
        },
        alpha=ALPHA,
        next_of="obs",
        stack_compress="obs",
        Nstep=False,
    )

    def add_one(t: tuple[dict[str, Any], bool]) -> None:
        buffer.add(**t[0])
        if t[1]:
            buffer.on_episode_end()  # required by next_of / stack_compress at every episode end

    def update(batch: dict[str, np.ndarray], td_errors: np.ndarray) -> None:
        buffer.update_priorities(batch["indexes"], td_errors)

    def stacks_of(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if channels_last:
            return np.moveaxis(batch["obs"], -1, -3), np.moveaxis(batch["next_obs"], -1, -3)
        return batch["obs"], batch["next_obs"]

    return ReplayRow(
        name=name,
        memory=buffer,
        add_one=add_one,
        sample=lambda: buffer.sample(TRAIN_BATCH, beta=BETA),
        indices_of=lambda batch: batch["indexes"].astype(np.int64),
        stacks_of=stacks_of,
        update=update,
        stored=buffer.get_stored_size,
    )


def tianshou_row(name: str, capacity: int) -> ReplayRow:
    """Tianshou's ``PrioritizedReplayBuffer`` set up as its Atari examples set it up.

    ``stack_num=4, ignore_obs_next=True, save_only_last_obs=True``: it is given the (4, 84, 84)
    channel-first stacks its Atari wrappers emit, stores only the newest frame of each ``obs``
    (and no ``obs_next``), and rebuilds a stack by walking ``prev`` back 3 slots, stopping at an
    episode's first slot (so it repeats the reset frame there, as ``EpisodeStream`` does, and as
    Tianshou's own ``FrameStack`` wrapper pads). A sampled ``obs_next`` is the stack at
    ``next(index)``, which stays at ``index`` when ``done[index]``: for an episode's last
    transition Tianshou returns its ``obs`` again, since the frame after it is never stored.
    ``check_stacks`` counts that as a wrong ``next_obs``, like any other row's; DQN's target
    masks that ``next_obs`` with ``done``, so it does not change what is learned.
    """
    buffer = tianshou.data.PrioritizedReplayBuffer(
        size=capacity, alpha=ALPHA, beta=BETA, stack_num=STACK,
        ignore_obs_next=True, save_only_last_obs=True,
    )  # fmt: skip

    def update(sampled: tuple[Any, np.ndarray], td_errors: np.ndarray) -> None:
        buffer.update_weight(sampled[1], td_errors)

    def boundaries(stream: EpisodeStream, source: FrameSource) -> str:
        """``check_stacks``' comparison at every stored episode start and end.

        The slots where padding and ``next`` / ``prev`` stopping matter are ~4 in 350, so the
        256 random samples miss a wrong episode end about half the time: Tianshou's row would
        read bit-exact by luck. Starts: the 3 steps whose ``obs`` repeats the reset frame.
        """
        ids = stream.ids
        verdicts = []
        for what, slots in (
            ("episode-start steps", np.flatnonzero(ids[:, 0] == ids[:, 1])),
            ("episode ends", np.flatnonzero(stream.terminated)),
        ):
            wrong_obs = wrong_next = 0
            for part in np.array_split(slots, -(-len(slots) // 256)):
                batch = buffer[part]  # the gather sample() does: stacked obs and obs_next
                truth = source.frames(ids[part])
                wrong_obs += int((batch.obs != truth[:, :STACK]).any(axis=(1, 2, 3)).sum())
                wrong_next += int((batch.obs_next != truth[:, 1:]).any(axis=(1, 2, 3)).sum())
            n = len(slots)
            verdicts.append(
                f"all {n:,} {what} bit-exact"
                if wrong_obs == wrong_next == 0
                else f"all {n:,} {what} WRONG ({wrong_obs}/{n} obs, {wrong_next}/{n} next_obs)"
            )
        return "; ".join(verdicts)

    return ReplayRow(
        name=name,
        memory=buffer,
        add_one=buffer.add,  # one prebuilt tianshou Batch per transition, as its Collector adds
        sample=lambda: buffer.sample(TRAIN_BATCH),  # (batch, indices); beta set at construction
        indices_of=lambda sampled: sampled[1],
        stacks_of=lambda sampled: (sampled[0].obs, sampled[0].obs_next),
        update=update,
        stored=lambda: len(buffer),
        prioritise=buffer.update_weight,
        extra_check=boundaries,
    )


def tianshou_nbytes(buffer: Any) -> int:
    """Bytes of a Tianshou buffer's arrays (allocated, and zero-filled, at its first ``add``)."""
    keys = ("obs", "act", "rew", "terminated", "truncated", "done")
    # The segment tree's array is private (``_value``): Tianshou has no public way to its size.
    return sum(getattr(buffer, key).nbytes for key in keys) + buffer.weight._value.nbytes


def tianshou_batch(frames: np.ndarray, stream: EpisodeStream, k: int) -> Any:
    """Transition ``k`` (``frames``: its 5 frames) as the ``Batch`` Tianshou's Collector adds:
    (4, 84, 84) ``obs`` and ``obs_next`` stacks; the buffer keeps ``obs[-1]`` only."""
    return tianshou.data.Batch(
        obs=frames[:STACK], act=int(stream.actions[k]), rew=float(stream.rewards[k]),
        terminated=bool(stream.terminated[k]), truncated=False, obs_next=frames[1:],
    )  # fmt: skip


def fill_per_dqn(row: ReplayRow, stream: EpisodeStream, source: FrameSource) -> None:
    """``add_batch`` in chunks of 512 transitions."""
    for part in stream.chunks(FILL_CHUNK):
        frames = source.frames(stream.ids[part])
        row.memory.add_batch(
            frames[:, :STACK], stream.actions[part], stream.rewards[part], frames[:, 1:],
            stream.terminated[part],
        )  # fmt: skip


def fill_cpprb(row: ReplayRow, stream: EpisodeStream, source: FrameSource, cl: bool) -> None:
    """One batched ``add`` per episode, then ``on_episode_end()``, as cpprb's docs ask."""
    for part in stream.episodes():
        frames = source.frames(stream.ids[part])
        row.memory.add(
            obs=to_layout(frames[:, :STACK], cl), next_obs=to_layout(frames[:, 1:], cl),
            act=stream.actions[part], rew=stream.rewards[part], done=stream.terminated[part],
        )  # fmt: skip
        row.memory.on_episode_end()


def fill_tianshou(row: ReplayRow, stream: EpisodeStream, source: FrameSource) -> None:
    """One ``add`` per transition: Tianshou's ``ReplayBuffer.add`` takes one step (its batched
    adds go across the sub-buffers of a ``VectorReplayBuffer``, one transition per env)."""
    for part in stream.chunks(FILL_CHUNK):
        frames = source.frames(stream.ids[part])
        for k in range(part.start, part.stop):
            row.memory.add(tianshou_batch(frames[k - part.start], stream, k))
    row.nbytes = tianshou_nbytes(row.memory)


def randomise_priorities(row: ReplayRow, n: int, rng: np.random.Generator) -> None:
    """Random ``|delta|`` for every stored transition, so the trees are not all-equal."""
    # per_dqn's and cpprb's update_priorities, Tianshou's update_weight: (indices, |delta|).
    update = row.prioritise or row.memory.update_priorities
    for start in range(0, n, 1 << 16):
        stop = min(start + (1 << 16), n)
        update(np.arange(start, stop), np.abs(rng.standard_normal(stop - start)))


def check_stacks(row: ReplayRow, stream: EpisodeStream, source: FrameSource) -> str:
    """Compares sampled ``obs`` / ``next_obs`` stacks with the truth; a one-cell verdict.

    The memories are filled to at most their capacity, so slot ``i`` holds transition ``i``.
    """
    wrong_obs = wrong_next = total = 0
    for _ in range(CHECK_BATCHES):
        batch = row.sample()
        indices = row.indices_of(batch)
        obs, next_obs = row.stacks_of(batch)
        truth = source.frames(stream.ids[indices])
        wrong_obs += int((obs != truth[:, :STACK]).any(axis=(1, 2, 3)).sum())
        wrong_next += int((next_obs != truth[:, 1:]).any(axis=(1, 2, 3)).sum())
        total += len(indices)
    if wrong_obs == wrong_next == 0:
        return "bit-exact"
    return f"WRONG ({wrong_obs}/{total} obs, {wrong_next}/{total} next_obs)"


def loop_pool(spec: RowSpec, stream: EpisodeStream, source: FrameSource) -> list[Any]:
    """The transitions the timed add loop cycles through, in the row's own calling form.

    Positional ``add`` arguments for ``per_dqn``, a tianshou ``Batch`` for Tianshou, and
    ``add`` keywords in the row's layout (plus whether the episode ends) for cpprb.
    """
    frames = source.frames(stream.ids)
    pool: list[Any] = []
    if spec.library == "per_dqn":
        for k in range(len(stream)):
            pool.append(
                (frames[k, :STACK], int(stream.actions[k]), float(stream.rewards[k]),
                 frames[k, 1:], bool(stream.terminated[k]))
            )  # fmt: skip
        return pool
    if spec.library == "tianshou":
        return [tianshou_batch(frames[k], stream, k) for k in range(len(stream))]
    cl = spec.channels_last
    obs = np.ascontiguousarray(to_layout(frames[:, :STACK], cl))
    next_obs = np.ascontiguousarray(to_layout(frames[:, 1:], cl))
    for k in range(len(stream)):
        kwargs = dict(
            obs=obs[k], act=int(stream.actions[k]), rew=float(stream.rewards[k]),
            next_obs=next_obs[k], done=bool(stream.terminated[k]),
        )  # fmt: skip
        pool.append((kwargs, bool(stream.terminated[k])))
    return pool


ROW_UNIFORM = "per_dqn uniform (dedup_frames)"
ROW_PER = "per_dqn proportional (dedup_frames, alpha 0.6)"
ROW_CPPRB = "cpprb PrioritizedReplayBuffer (4, 84, 84), next_of + stack_compress"
ROW_CPPRB_CL = "cpprb PrioritizedReplayBuffer (84, 84, 4), next_of + stack_compress"
ROW_TIANSHOU = "Tianshou PrioritizedReplayBuffer (4, 84, 84), stack_num 4 + save_only_last_obs"


@dataclass(frozen=True)
class RowSpec:
    """How to build one replay row at any capacity, and how many bytes it takes at 1M-ish."""

    name: str
    build: Callable[[int], ReplayRow]
    library: str  # "per_dqn", "cpprb" or "tianshou": how it is filled and how its adds look
    need: Callable[[int], int]  # bytes the filled memory holds at a capacity, about
    channels_last: bool = False  # cpprb only: (84, 84, 4) stacks


def replay_specs() -> list[RowSpec]:
    """Every row, in table order; the cpprb rows only when cpprb imports."""

    def per_dqn_spec(name: str, kind: str, seed: int, **settings: Any) -> RowSpec:
        def build(capacity: int) -> ReplayRow:
            base: dict[str, Any] = dict(
                capacity=capacity, obs_shape=OBS_SHAPE, obs_dtype=np.uint8, dedup_frames=True
            )
            return per_dqn_row(name, make_memory(kind, **base, seed=seed, **settings))

        def need(capacity: int) -> int:
            return planned_nbytes(kind, capacity, OBS_SHAPE, np.uint8, dedup_frames=True)["total"]

        return RowSpec(name, build, "per_dqn", need)

    specs = [
        per_dqn_spec(ROW_UNIFORM, "uniform", 0),
        per_dqn_spec(ROW_PER, "proportional", 1, alpha=ALPHA),
    ]
    if cpprb is not None:
        # Measured with this script's data (cpprb 11, capacity 1M, fills of 50k to 150k): with
        # channel-first stacks ~0.39 GB up front plus ~13.2 KB per transition filled (13.6 GB
        # full); with channel-last ones ~7.15 GB, all of it up front. The bounds are a bit above.
        specs += [
            RowSpec(
                ROW_CPPRB,
                lambda capacity: cpprb_row(ROW_CPPRB, capacity, False),
                "cpprb",
                lambda capacity: capacity * 14_000,
            ),
            RowSpec(
                ROW_CPPRB_CL,
                lambda capacity: cpprb_row(ROW_CPPRB_CL, capacity, True),
                "cpprb",
                lambda capacity: capacity * (FRAME_ITEMS + 512),
                channels_last=True,
            ),
        ]
    if tianshou is not None:
        # Tianshou allocates every array at the first add, with np.full(..., 0), which writes
        # (so makes resident) all of it: measured with this script's data (tianshou 2.0.1,
        # capacities 50k to 200k, fills 20k to 50k) the RSS delta is its nbytes whatever the
        # fill, 7,096 B per slot (84x84 frame, int64 act, float64 rew, 3 bools, the float64
        # segment tree over the next power of 2): 7.1 GB at 1M. The bound is a bit above.
        specs.append(
            RowSpec(
                ROW_TIANSHOU,
                lambda capacity: tianshou_row(ROW_TIANSHOU, capacity),
                "tianshou",
                lambda capacity: capacity * 7_200,
            )
        )
    return specs


def fill(row: ReplayRow, spec: RowSpec, stream: EpisodeStream, source: FrameSource) -> None:
    """Fills ``row`` with ``stream`` the way its implementation takes batches."""
    if spec.library == "per_dqn":
        fill_per_dqn(row, stream, source)
    elif spec.library == "tianshou":
        fill_tianshou(row, stream, source)
    else:
        fill_cpprb(row, stream, source, spec.channels_last)
