"""Atari-scale speed and memory of per-dqn in one run: env, replay at 1M, learner, whole loop.

Five sections, each printed as a markdown table as soon as it is measured:

1. **Environment.** Agent steps per second (after frame-skip 4) of
   ``per_dqn.envs.make.make_vector_env`` for ``--env-id`` with one env and uniformly random actions,
   with the env section of ``atari100k.yaml``; beside it, for reference, the raw ``AtariVectorEnv``
   exactly as ``benchmarks/atari_env.py`` builds it (its loop and rows are imported from there).
2. **Replay memory at Atari size.** Memories of ``--capacity`` (1,000,000) transitions filled with
   ``--fill`` real-sized transitions: uint8 ``(4, 84, 84)`` stacks whose frames are shared the
   way an env emits them (consecutive stacks share 3 frames, ``next_obs`` is ``obs`` shifted by
   one frame, an episode's first stack repeats its reset frame), in episodes of 100 to 599 steps.
   Every frame is distinct (an id is stamped into its first 8 bytes), so a returned stack can be
   checked against the truth bit for bit. Rows: ``per_dqn``'s ``uniform`` and ``proportional``
   (alpha 0.6) memories (``make_memory``) with ``dedup_frames=True``, and, when ``cpprb`` imports
   (the ``bench`` extra), cpprb 11's ``PrioritizedReplayBuffer`` with its frame-sharing options
   (``next_of="obs"``, ``stack_compress="obs"``, ``Nstep=False``), once with the channel-first
   ``(4, 84, 84)`` stacks every other row stores, and once with channel-last ``(84, 84, 4)``
   stacks, the layout ``stack_compress`` documents ("the last dimension is the stack dimension");
   and, when ``tianshou`` imports (also the ``bench`` extra), Tianshou 2's
   ``PrioritizedReplayBuffer`` as its Atari examples set it up (``stack_num=4``,
   ``ignore_obs_next=True``, ``save_only_last_obs=True``: it keeps each ``obs``'s newest frame
   only and rebuilds stacks along its episode links), added one ``Batch`` per transition with the
   channel-first stacks its Atari wrappers emit. Before timing, 256 sampled ``obs`` and
   ``next_obs`` stacks of each row are compared with the truth (Tianshou's row is also compared
   at every episode start and end, where it differs); a row whose stacks are wrong is still
   timed, and marked. Timed: the replay side of one DQN step (4 single ``add`` calls continuing
   the episode stream, ``sample(32)`` gathering the ``obs`` and ``next_obs`` stacks, and, for
   PER, ``update_priorities`` (Tianshou: ``update_weight``) of those 32 with random ``|delta|``)
   in steps per second, and ``sample(32)`` alone in microseconds. Memory: the
   process's resident set (``VmRSS``) before building and after filling each memory, freed
   memory given back to the OS (``malloc_trim``) before each reading; the memories are built one
   at a time and deleted before the next, so each delta is that memory's.
3. **Learner.** Milliseconds per ``DQNAgent.learn`` on a batch of 32 uint8 stacks (Nature CNN,
   dueling, Double DQN, 6 actions, Huber loss, no gradient clipping, fused Adam) with
   ``channels_last`` off and on, at torch threads 1 and 2, against the ``plain`` row of
   ``benchmarks/learner.py`` (imported: the textbook update on ready torch tensors). Each update
   is timed on its own; rows take turns in blocks of 5 updates, rotating. ``DQNAgent.learn``
   takes numpy batches, so its time includes moving them into torch.
4. **Whole loop.** ``per_dqn.training.run.Trainer`` on ``atari100k.yaml`` with ``env.id=--env-id``,
   ``train.total_env_steps=--train-steps``, ``train.learning_starts=1000``,
   ``replay.capacity=10000``, ``env.max_episode_steps=500``, ``train.eval_interval=0``,
   ``train.final_eval_episodes=1``, ``checkpoint.enabled=false``, ``run.device=cpu`` (and
   ``run.torch_threads=--train-threads`` when given); replay ``uniform`` vs ``proportional``.
   SPS is the summary's ``sps`` (env steps over the wall time of ``Trainer.run``, final
   evaluation included). Each run is a fresh process (``spawn``), so runs do not inherit each
   other's heap, and its peak resident set (``VmHWM``) is reported.
5. **Stable-Baselines3.** When ``stable_baselines3`` imports, SB3's ``DQN("CnnPolicy")`` in the
   same repeats as section 4, on the same env pipeline (``per_dqn.envs.make.make_eval_env``:
   ale-py's one-env ``AtariVectorEnv``; SB3's own ``AtariWrapper`` would need OpenCV) with the
   config's settings (buffer 10,000, batch 32, one update per env step from step 1,000, target copy
   every 2,000 steps, Adam lr 1e-4 eps 1.5e-4, gradient clip 10, epsilon 1 -> 0.01 over 5,000 steps,
   clipped rewards, but no terminal on life loss), timed over ``learn`` plus one evaluation
   episode. SB3's DQN has no dueling head, no Double-DQN target, no n-step return and no PER: it
   does less work per update.

Repeats are interleaved where the subjects can live side by side (sections 1, 3, 4 and 5), so
that load from other processes on a small shared machine hits every row alike, and the ratios
come with their per-repeat range. The memories of section 2 are too big to hold together: each
row is built, checked, timed and deleted in turn, so its ratios compare rows measured minutes
apart; the load average during each row is in the table.

    .venv/bin/python benchmarks/atari.py            # full run, 10-20 minutes on a quiet machine
    .venv/bin/python benchmarks/atari.py --quick    # fill 100k, short loops, short runs
    .venv/bin/python benchmarks/atari.py --smoke    # seconds: every path at tiny sizes, the
                                                    # training runs in this process
    .venv/bin/python benchmarks/atari.py --train-threads 1   # loops at 1 torch thread (see 3.)
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import cycle, islice
from typing import Any

import numpy as np
from _atari_learner import measure_learner
from _atari_training import load_atari_config, measure_training
from _common import (
    LoopFactory,
    add_mode_options,
    available_bytes,
    calibrate,
    command_line,
    fill_defaults,
    format_rate,
    format_us,
    gb,
    load_average,
    load_averages,
    machine_line,
    markdown_table,
    median,
    mode,
    package_versions,
    progress_log,
    relative_spread,
    require_at_least,
    rss_bytes,
    time_loop,
)
from atari_env import Subject, ale_subject, loop_factory, quiet_ale
from learner import NUM_ACTIONS

from per_dqn.envs.families.atari import atari_game
from per_dqn.envs.make import make_vector_env
from per_dqn.memory import Batch, make_memory, planned_nbytes

try:
    import cpprb
except ImportError:  # the `bench` extra is not installed: those rows are skipped with a note
    cpprb = None
try:
    import tianshou.data  # binds `tianshou`; its row is skipped with a note when missing
except ImportError:
    tianshou = None

SECTIONS = ("env", "replay", "learner", "train")

# Replay section.
STACK, SCREEN = 4, 84
FRAME_ITEMS = SCREEN * SCREEN
OBS_SHAPE = (STACK, SCREEN, SCREEN)
EPISODE_STEPS = (100, 600)  # episode lengths are drawn uniformly from [100, 600)
BASE_FRAMES = 1024  # random frames the stamped frames are made from
FILL_CHUNK = 512  # transitions per add_batch call while filling
LOOP_POOL_STEPS = 2048  # transitions (whole episodes) cycled by the timed add loop (smoke 512)
ALPHA = 0.6
BETA = 0.4
TRAIN_BATCH = 32
ADDS_PER_STEP = 4  # env steps per gradient step in the DQN papers; unrolled in the loop
TD_POOL = 32
CHECK_BATCHES = 8  # sample(32) calls whose stacks are checked against the truth
RSS_TARGET_BYTES = 7.5e9
MEMORY_HEADROOM_BYTES = 1 << 30  # left free for the other jobs on a shared machine
WARM_UP_STEPS = 2048  # smoke: 256
LOOP_RATIO_TARGET = 2.0


# --- process memory ----------------------------------------------------------------------------


_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


def settle_memory() -> None:
    """Collects garbage and hands freed heap pages back to the OS, so RSS shows what is held.

    glibc keeps freed blocks below its (adaptive, up to 32 MiB) mmap threshold in the heap, so
    the fill's temporary chunks could otherwise stay resident and be billed to the memory.
    """
    gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


# --- 1. environment ----------------------------------------------------------------------------


def measure_env(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Section 1: raw agent steps/s of ``make_vector_env`` and of atari_env.py's reference."""
    env_config = load_atari_config(args, ["env.num_envs=1"]).env
    vector = make_vector_env(env_config)
    vector.reset(seed=args.seed)
    subjects = [
        Subject(
            "per_dqn make_vector_env (atari100k env section)",
            1,
            vector.step,
            vector.close,
            int(vector.single_action_space.n),
        ),
        ale_subject(atari_game(args.env_id), 1, 0, args.seed),
    ]
    subjects[1].label = "AtariVectorEnv as benchmarks/atari_env.py builds it (sticky 0.25)"
    try:
        factories = [loop_factory(s, args.seed + i) for i, s in enumerate(subjects)]
        for subject, factory in zip(subjects, factories, strict=True):
            subject.calls = calibrate(factory, args.target_s)
        for r in range(args.repeats):
            shift = r % len(subjects)
            for i in [*range(shift, len(subjects)), *range(shift)]:
                per_call = time_loop(factories[i], subjects[i].calls).per_call
                subjects[i].rates.append(subjects[i].num_envs / per_call)
        log("env: timed")
    finally:
        for subject in subjects:
            subject.close()
    rows = [
        [s.label, format_rate(median(s.rates)), f"{relative_spread(s.rates):.0%}"] for s in subjects
    ]
    ratios = [a / b for a, b in zip(subjects[0].rates, subjects[1].rates, strict=True)]
    return "\n".join(
        [
            f"### 1. Raw environment throughput: {args.env_id}, 1 env, random actions",
            "",
            f"Agent steps/s (4 emulator frames each), episode resets included; sticky actions "
            f"{env_config.sticky_action_prob}, noop_max {env_config.noop_max}, "
            f"{env_config.frame_stack}-frame 84x84 grayscale stacks; median of {args.repeats} "
            f"interleaved loops of ~{args.target_s:g} s.",
            "",
            markdown_table(["env", "agent steps/s", "spread"], rows),
            "",
            f"- make_vector_env / reference: {median(ratios):.2f}x "
            f"(per-repeat {min(ratios):.2f}x to {max(ratios):.2f}x).",
        ]
    )


# --- 2. replay memory --------------------------------------------------------------------------


class FrameSource:
    """Distinct 84x84 uint8 frames made from integer ids, cheaply and reproducibly.

    Frame ``f`` is random base frame ``f % 1024`` with ``f`` written into its first 8 bytes, so
    any stack a memory returns names the frames it holds, and a few hundred MB of truth stand in
    for the 7 GB a million stored frames would take.
    """

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.base = rng.integers(0, 256, (BASE_FRAMES, FRAME_ITEMS), dtype=np.uint8)

    def frames(self, ids: np.ndarray) -> np.ndarray:
        """Frames ``(*ids.shape, 84, 84)`` for integer frame ids."""
        ids = np.asarray(ids, dtype=np.int64)
        out = self.base[ids % BASE_FRAMES]
        out[..., :8] = ids[..., None].astype("<i8").view(np.uint8)
        return out.reshape(*ids.shape, SCREEN, SCREEN)


@dataclass(frozen=True)
class EpisodeStream:
    """Transitions as an env emits them: frame ids of each ``obs`` stack and the next frame.

    ``ids[k]`` holds 5 frame ids: ``obs`` is frames ``ids[k, :4]``, ``next_obs`` is
    ``ids[k, 1:]``. An episode of ``L`` steps owns ``L + 1`` fresh frames (the reset frame and one
    per step); its first stacks repeat the reset frame where there is no earlier one (gymnasium's
    ``FrameStackObservation`` padding). Each episode's last transition is terminal; the stream
    ends on an episode's end.
    """

    ids: np.ndarray  # (n, 5) int64
    terminated: np.ndarray  # (n,) bool
    actions: np.ndarray  # (n,) int64
    rewards: np.ndarray  # (n,) float32
    next_frame_id: int  # first id the next stream may use

    @classmethod
    def make(cls, n: int, first_frame_id: int, rng: np.random.Generator) -> EpisodeStream:
        """``n`` transitions in episodes of random length; the last one is cut to end at ``n``."""
        ids = np.empty((n, STACK + 1), dtype=np.int64)
        terminated = np.zeros(n, dtype=np.bool_)
        window = np.arange(-(STACK - 1), 2)  # frame offsets of obs (first 4) and next_obs (last 4)
        frame, k = first_frame_id, 0
        while k < n:
            steps = min(int(rng.integers(*EPISODE_STEPS)), n - k)
            episode_frames = frame + np.arange(steps + 1)
            offsets = np.arange(steps)[:, None] + window
            ids[k : k + steps] = episode_frames[np.clip(offsets, 0, None)]
            terminated[k + steps - 1] = True
            frame += steps + 1
            k += steps
        return cls(
            ids=ids,
            terminated=terminated,
            actions=rng.integers(0, NUM_ACTIONS, n),
            rewards=rng.choice(np.array([0.0, 1.0], dtype=np.float32), n, p=[0.9, 0.1]),
            next_frame_id=frame,
        )

    def __len__(self) -> int:
        return self.ids.shape[0]

    def episodes(self) -> list[slice]:
        """One slice per episode."""
        ends = np.flatnonzero(self.terminated) + 1
        return [slice(int(a), int(b)) for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]

    def chunks(self, size: int) -> list[slice]:
        """Consecutive slices of at most ``size`` transitions."""
        n = len(self)
        return [slice(a, min(a + size, n)) for a in range(0, n, size)]


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


def step_loop(row: ReplayRow, transitions: Iterator[Any], td_pool: list[np.ndarray]) -> LoopFactory:
    """Loops of DQN steps: 4 adds continuing the episode stream, sample 32, update 32."""

    def factory(calls: int) -> Callable[[], None]:
        items = list(islice(transitions, ADDS_PER_STEP * calls))
        tds = list(islice(cycle(td_pool), calls))
        add, sample, update = row.add_one, row.sample, row.update

        def run() -> None:
            it = iter(items)
            for td_errors in tds:
                add(next(it))
                add(next(it))
                add(next(it))
                add(next(it))
                batch = sample()
                if update is not None:
                    update(batch, td_errors)

        return run

    return factory


def sample_loop(row: ReplayRow) -> LoopFactory:
    """Loops of ``sample(32)`` calls."""

    def factory(calls: int) -> Callable[[], None]:
        sample = row.sample

        def run() -> None:
            for _ in range(calls):
                sample()

        return run

    return factory


@dataclass
class ReplayResult:
    """What one replay row measured."""

    name: str
    stacks: str = "not measured"
    fill_s: float = 0.0
    rss_delta: int = 0
    rss_after: int = 0
    filled: int = 0
    nbytes: int | None = None
    planned: int | None = None
    step_s: list[float] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    load: str = ""
    skipped: str | None = None


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


def warm_up(
    spec: RowSpec, source: FrameSource, td_pool: list[np.ndarray], steps: int = WARM_UP_STEPS
) -> None:
    """Runs a small memory of the row's kind through every timed path, then frees it.

    The first memory of a kind loads numba's compiled kernels (and each library its lazily
    initialised state); doing that here keeps those bytes out of the measured RSS delta.
    """
    rng = np.random.default_rng(12345)
    stream = EpisodeStream.make(steps, 0, rng)
    row = spec.build(2 * steps)
    fill(row, spec, stream, source)
    if row.update is not None:
        randomise_priorities(row, len(stream), rng)
    check_stacks(row, stream, source)
    if row.extra_check is not None:
        row.extra_check(stream, source)
    transitions = cycle(loop_pool(spec, stream, source))
    time_loop(step_loop(row, transitions, td_pool), 16)
    time_loop(sample_loop(row), 16)
    del row, transitions
    settle_memory()


def measure_replay(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Section 2: each memory built, filled, checked, timed and deleted in turn."""
    rng = np.random.default_rng(args.seed)
    source = FrameSource(args.seed)
    stream = EpisodeStream.make(args.fill, 0, rng)
    # Ends on an episode's end, so the cycled loop stream restarts at an episode's start.
    smoke = mode(args) == "smoke"
    pool_stream = EpisodeStream.make(512 if smoke else LOOP_POOL_STEPS, stream.next_frame_id, rng)
    td_pool = [np.abs(rng.standard_normal(TRAIN_BATCH)) for _ in range(TD_POOL)]
    results: list[ReplayResult] = []
    for spec in replay_specs():
        name = spec.name
        result = ReplayResult(name)
        results.append(result)
        need = spec.need(args.capacity)
        available = available_bytes()
        # Other jobs share the machine: leave them room rather than risk the OOM killer.
        if available is not None and need * 1.1 + MEMORY_HEADROOM_BYTES > available:
            result.skipped = f"needs ~{gb(need)}, {gb(available)} available"
            log(f"{name}: skipped ({result.skipped})")
            continue
        warm_up(spec, source, td_pool, 256 if smoke else WARM_UP_STEPS)
        before = rss_bytes()
        start = time.perf_counter()
        row = spec.build(args.capacity)
        fill(row, spec, stream, source)
        result.fill_s = time.perf_counter() - start
        result.filled = row.stored()
        if result.filled != len(stream):
            raise AssertionError(f"{name}: {result.filled} stored after the fill, not {args.fill}")
        settle_memory()
        result.rss_after = rss_bytes()
        result.rss_delta = result.rss_after - before
        result.nbytes, result.planned = row.nbytes, row.planned
        log(f"{name}: filled {result.filled:,} in {result.fill_s:.1f} s, +{gb(result.rss_delta)}")
        if row.update is not None:
            randomise_priorities(row, result.filled, rng)
        result.stacks = check_stacks(row, stream, source)
        if row.extra_check is not None:
            result.stacks += "; " + row.extra_check(stream, source)
        log(f"{name}: stacks {result.stacks}")
        transitions = cycle(loop_pool(spec, pool_stream, source))
        loops = [step_loop(row, transitions, td_pool), sample_loop(row)]
        calls = [calibrate(loop, args.target_s) for loop in loops]
        for _ in range(args.repeats):
            result.step_s.append(time_loop(loops[0], calls[0]).per_call)
            result.sample_s.append(time_loop(loops[1], calls[1]).per_call)
        result.load = load_average()
        log(f"{name}: timed")
        del row, transitions, loops
        settle_memory()
    return render_replay(results, args)


def render_replay(results: list[ReplayResult], args: argparse.Namespace) -> str:
    """Section 2's table and verdicts."""
    by_name = {r.name: r for r in results}
    rows = []
    for r in results:
        if r.skipped is not None:
            rows.append([r.name, f"not measured: {r.skipped}", *[""] * 8])
            continue
        rows.append(
            [
                r.name,
                r.stacks,
                f"{r.fill_s:.0f}",
                gb(r.rss_delta),
                gb(r.rss_after),
                "n/a" if r.nbytes is None else gb(r.nbytes),
                "n/a" if r.nbytes is None else f"{r.nbytes / args.capacity:,.0f}",
                f"{r.rss_delta / r.filled:,.0f}",
                format_rate(1.0 / median(r.step_s)),
                format_us(median(r.sample_s)),
                r.load,
            ]
        )
    headers = [
        "implementation",
        "stacks vs truth",
        "fill s",
        "RSS delta",
        "process RSS",
        "nbytes",
        "nbytes / capacity",
        "RSS delta / filled",
        f"loop steps/s ({ADDS_PER_STEP} add + sample {TRAIN_BATCH} + update {TRAIN_BATCH})",
        "sample 32 (us)",
        "load",
    ]
    full = args.fill == args.capacity
    lines = [
        f"### 2. Replay memory at capacity {args.capacity:,}, uint8 {OBS_SHAPE} stacks",
        "",
        f"Filled with {args.fill:,} transitions"
        + ("" if full else f" (not the full capacity: `--fill {args.fill}`)")
        + f" in episodes of {EPISODE_STEPS[0]} to {EPISODE_STEPS[1] - 1} steps, consecutive "
        f"stacks sharing 3 frames; PER priorities then randomised; beta {BETA}. Each timing "
        f"cell is the median of {args.repeats} loops of ~{args.target_s:g} s; rows ran one "
        "after another (load = 1-minute load average while the row ran). RSS delta: resident "
        "bytes the memory added, read after the fill (pages a partial fill never touched are "
        "not resident); nbytes: the memory's own arrays at full capacity.",
        "",
        markdown_table(headers, rows),
        "",
    ]
    per = by_name.get(ROW_PER)
    if per is not None and per.skipped is None:
        if per.nbytes != per.planned:
            lines.append(f"- {ROW_PER}: nbytes {per.nbytes:,} != planned {per.planned:,}.")
        if full:
            verdict = "met" if per.rss_delta <= RSS_TARGET_BYTES else "NOT met"
            lines.append(
                f"- per_dqn PER at {args.capacity:,}: {gb(per.rss_delta)} resident for the memory "
                f"(process {gb(per.rss_after)}); target <= {gb(RSS_TARGET_BYTES)}: {verdict}."
            )
        else:
            lines.append(
                f"- per_dqn PER resident at {args.capacity:,} not judged (fill {args.fill:,}); "
                f"its arrays total {gb(per.nbytes or 0)}."
            )
        for name, note in ((ROW_CPPRB, "its stacks as asked"), (ROW_CPPRB_CL, "channel-last")):
            peer = by_name.get(name)
            if peer is None or peer.skipped is not None:
                continue
            ratio = median(peer.step_s) / median(per.step_s)
            verdict = "met" if ratio >= LOOP_RATIO_TARGET else "NOT met"
            lines.append(
                f"- loop steps/s, per_dqn PER / cpprb PER ({note}; cpprb stacks {peer.stacks}): "
                f"{ratio:.2f}x; target >= {LOOP_RATIO_TARGET:g}x: {verdict}."
            )
        peer = by_name.get(ROW_TIANSHOU)
        if peer is not None and peer.skipped is None:
            ratio = median(peer.step_s) / median(per.step_s)
            lines.append(
                f"- loop steps/s, per_dqn PER / Tianshou PER (Tianshou stacks {peer.stacks}): "
                f"{ratio:.2f}x."
            )
    tianshou_result = by_name.get(ROW_TIANSHOU)
    if tianshou_result is not None and tianshou_result.skipped is None:
        lines.append(
            "- Tianshou's stacks: besides the 256 random samples every row gets, its row is "
            "checked at every stored episode start and end. With `ignore_obs_next=True` the "
            "frame after an episode's last step is never stored and `next(index)` stays at "
            "`index` when `done`, so `obs_next` of a terminal step is that step's `obs` again, "
            "not the truth (DQN's target masks it with `done`). At episode starts Tianshou pads "
            "as the truth does, repeating the reset frame (`prev` stops at the episode's first "
            "slot; Tianshou's `FrameStack` and gymnasium's `FrameStackObservation` both pad so)."
        )
    if cpprb is None:
        lines.append("- cpprb not installed (the `bench` extra, `make bench`): no peer rows.")
    if tianshou is None:
        lines.append("- tianshou not installed (the `bench` extra, `make bench`): no Tianshou row.")
    return "\n".join(lines)


# --- driver --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shortens everything, ``--smoke`` shrinks everything."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="fill 100k, short loops, short runs")
    parser.add_argument("--env-id", default="ALE/Breakout-v5", help="an ALE/<Game>-v5 id")
    parser.add_argument("--capacity", type=int, help="replay capacity (1M, smoke 2048)")
    parser.add_argument(
        "--fill", type=int, help="transitions filled (default capacity, quick 100k)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed loops per cell, sections 1-2 (5, quick 3, smoke 1)"
    )
    parser.add_argument(
        "--target-s", type=float, help="seconds per timed loop (0.5, quick 0.1, smoke 0.02)"
    )
    parser.add_argument(
        "--updates", type=int, help="timed learner updates per row (40, quick 10, smoke 1)"
    )
    parser.add_argument(
        "--train-steps", type=int, help="env steps per run (3000, quick 1050, smoke 40)"
    )
    parser.add_argument("--learning-starts", type=int, help="env steps (1000, smoke 32)")
    parser.add_argument("--train-repeats", type=int, help="runs per kind (2, quick 1, smoke 1)")
    parser.add_argument(
        "--train-threads",
        type=int,
        default=0,
        help="torch threads of the training runs (default 0: the config's run.torch_threads)",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default all; train includes SB3)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fill_defaults(args, {"capacity": (1_000_000, 1_000_000, 2048)})
    fill_defaults(
        args,
        {
            "fill": (args.capacity, min(100_000, args.capacity), args.capacity),
            "repeats": (5, 3, 1),
            "target_s": (0.5, 0.1, 0.02),
            "updates": (40, 10, 1),
            "train_steps": (3000, 1050, 40),
            "learning_starts": (1000, 1000, TRAIN_BATCH),
            "train_repeats": (2, 1, 1),
        },
    )
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections must name some of {', '.join(SECTIONS)}, got {unknown}")
    if not CHECK_BATCHES * TRAIN_BATCH <= args.fill <= args.capacity:
        parser.error(
            f"--fill must be in [{CHECK_BATCHES * TRAIN_BATCH}, --capacity ({args.capacity:,})], "
            f"got {args.fill:,}"
        )
    require_at_least(parser, args, 1, "repeats", "updates", "train_repeats")
    require_at_least(parser, args, 0, "train_threads")
    if args.target_s <= 0:
        parser.error(f"--target-s must be > 0, got {args.target_s}")
    if args.learning_starts < TRAIN_BATCH:
        parser.error(f"--learning-starts must be >= {TRAIN_BATCH}, got {args.learning_starts}")
    if args.train_steps <= args.learning_starts:
        parser.error(
            f"--train-steps must be > --learning-starts ({args.learning_starts}), "
            f"got {args.train_steps}"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    """Runs the chosen sections in order, printing each one's tables as soon as it is done."""
    args = parse_args(argv)
    log = progress_log()

    quiet_ale()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    versions = package_versions(
        "numpy", "numba", "torch", "ale-py", "gymnasium", "cpprb", "tianshou", "stable-baselines3"
    )
    print(f"Machine: {machine_line(versions)}; {gb(total)} RAM", flush=True)
    print(f"Command: `{command_line()}`", flush=True)
    measures = {
        "env": measure_env,
        "replay": measure_replay,
        "learner": measure_learner,
        "train": measure_training,
    }
    for name in SECTIONS:
        if name in args.sections:
            print("\n" + measures[name](args, log), flush=True)
            log(f"{name} done; load average {load_average()}")
    print(f"\nLoad average at the end: {load_averages()}.")


if __name__ == "__main__":
    main()
