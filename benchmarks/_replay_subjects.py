"""What ``benchmarks/replay.py`` times, and on what: each implementation as the calls its timed
loops make (``Subject``), the loops of the table's columns (``METRICS``), and every row's memory
filled to its capacity with CartPole-sized transitions, priorities randomised
(``build_subjects``).

Not a benchmark on its own: ``replay.py`` runs these loops and prints their table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import cycle, islice, repeat
from operator import attrgetter, itemgetter
from time import perf_counter
from typing import Any

import numpy as np
from _common import LoopFactory
from _replay_baselines import NumpyReplay, PurePythonReplay

from per_dqn.memory import KINDS, ReplayMemory, make_memory

try:
    import cpprb
except ImportError:  # the `bench` extra is not installed: those rows are skipped with a note
    cpprb = None

OBS_SHAPE = (4,)
BETA = 0.4  # cpprb's default; the value does not change the cost
TRAIN_BATCH = 32  # batch size of the loop step
ADDS_PER_STEP = 4  # env steps per gradient step in the DQN papers; unrolled in step_loop
FILL_CHUNK = 1 << 16
TD_POOL = 32  # |delta| arrays cycled by the update and step loops


# --- what is timed ---------------------------------------------------------------------------


@dataclass
class Subject:
    """One implementation, as the calls the timed loops make.

    ``add(**add_kwargs)`` stores one transition, ``sample(B, **sample_kwargs)`` draws a batch whose
    ``indices_of`` are fed to ``update(indices, |delta|)``; ``update`` is None without priorities.
    """

    name: str
    add: Callable[..., object]
    add_kwargs: dict[str, Any]
    sample: Callable[..., object]
    sample_kwargs: dict[str, float]
    indices_of: Callable[[Any], np.ndarray]
    update: Callable[[np.ndarray, np.ndarray], object] | None
    update_period: int = 1  # updates per periodic re-sort; such loops make multiples of it
    memory: object = field(default=None, repr=False)  # the object behind the bound methods


@dataclass(frozen=True)
class Metric:
    """One column: how to build its timed loop for a subject, and how to print it."""

    header: str
    loop: Callable[[Subject, np.random.Generator], LoopFactory | None]
    is_rate: bool = False  # printed as calls per second instead of microseconds per call
    periodic: bool = False  # includes priority updates: calls rounded to the update period


def add_loop(subject: Subject, rng: np.random.Generator) -> LoopFactory:
    add, kwargs = subject.add, subject.add_kwargs

    def factory(calls: int) -> Callable[[], None]:
        def run() -> None:
            for _ in repeat(None, calls):
                add(**kwargs)

        return run

    return factory


def sample_loop(batch_size: int) -> Callable[[Subject, np.random.Generator], LoopFactory]:
    def build(subject: Subject, rng: np.random.Generator) -> LoopFactory:
        sample, kwargs = subject.sample, subject.sample_kwargs

        def factory(calls: int) -> Callable[[], None]:
            def run() -> None:
                for _ in repeat(None, calls):
                    sample(batch_size, **kwargs)

            return run

        return factory

    return build


def update_loop(batch_size: int) -> Callable[[Subject, np.random.Generator], LoopFactory | None]:
    def build(subject: Subject, rng: np.random.Generator) -> LoopFactory | None:
        sample, kwargs = subject.sample, subject.sample_kwargs
        indices_of, update = subject.indices_of, subject.update
        if update is None:
            return None

        def factory(calls: int) -> Callable[[], float]:
            # One error per sampled row: a kind may draw more rows than the batch (LaBER).
            rows = len(indices_of(sample(batch_size, **kwargs)))
            pool = [np.abs(rng.standard_normal(rows)) for _ in range(TD_POOL)]

            def run() -> float:
                timed = 0.0
                for td_errors in islice(cycle(pool), calls):
                    indices = indices_of(sample(batch_size, **kwargs))  # not timed
                    start = perf_counter()
                    update(indices, td_errors)
                    timed += perf_counter() - start
                return timed

            return run

        return factory

    return build


def step_loop(subject: Subject, rng: np.random.Generator) -> LoopFactory:
    add, add_kwargs = subject.add, subject.add_kwargs
    sample, sample_kwargs = subject.sample, subject.sample_kwargs
    indices_of, update = subject.indices_of, subject.update

    def factory(calls: int) -> Callable[[], None]:
        # One error per sampled row: a kind may draw more rows than the batch (LaBER). A memory
        # without priorities (cpprb's ReplayBuffer) gives no indices and takes no update.
        rows = (
            TRAIN_BATCH if update is None else len(indices_of(sample(TRAIN_BATCH, **sample_kwargs)))
        )
        pool = [np.abs(rng.standard_normal(rows)) for _ in range(TD_POOL)]

        def run() -> None:
            for td_errors in islice(cycle(pool), calls):
                add(**add_kwargs)
                add(**add_kwargs)
                add(**add_kwargs)
                add(**add_kwargs)
                batch = sample(TRAIN_BATCH, **sample_kwargs)
                if update is not None:
                    update(indices_of(batch), td_errors)

        return run

    return factory


STEP_HEADER = f"loop steps/s ({ADDS_PER_STEP} add + sample {TRAIN_BATCH} + update {TRAIN_BATCH})"
METRICS = {
    "add": Metric("add/s", add_loop, is_rate=True),
    "sample32": Metric("sample 32 (us)", sample_loop(32)),
    "sample256": Metric("sample 256 (us)", sample_loop(256)),
    "update32": Metric("update 32 (us)", update_loop(32), periodic=True),
    "update256": Metric("update 256 (us)", update_loop(256), periodic=True),
    "step": Metric(STEP_HEADER, step_loop, is_rate=True, periodic=True),
}


# --- building the filled memories ------------------------------------------------------------


@dataclass(frozen=True)
class FillData:
    """``capacity`` CartPole-like transitions and a random ``|delta|`` for each."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    td_errors: np.ndarray

    @classmethod
    def make(cls, capacity: int, seed: int = 0) -> FillData:
        rng = np.random.default_rng(seed)
        obs = rng.standard_normal((capacity, *OBS_SHAPE)).astype(np.float32)
        return cls(
            obs=obs,
            actions=rng.integers(0, 2, capacity),
            rewards=np.ones(capacity, dtype=np.float32),
            next_obs=obs + np.float32(0.01),
            terminated=rng.random(capacity) < 0.05,
            td_errors=np.abs(rng.standard_normal(capacity)),
        )

    def chunks(self) -> list[slice]:
        n = self.obs.shape[0]
        return [slice(start, min(start + FILL_CHUNK, n)) for start in range(0, n, FILL_CHUNK)]


def per_dqn_subject(name: str, memory: ReplayMemory, data: FillData) -> Subject:
    """Fills a ``per_dqn``-style memory with ``add_batch`` and randomises its priorities."""
    for part in data.chunks():
        memory.add_batch(
            data.obs[part], data.actions[part], data.rewards[part], data.next_obs[part],
            data.terminated[part],
        )  # fmt: skip
    for part in data.chunks():
        memory.update_priorities(np.arange(part.start, part.stop), data.td_errors[part])
    if len(memory) != memory.capacity:
        raise AssertionError(f"{name}: {len(memory)} stored after the fill, not {memory.capacity}")
    return Subject(
        name=name,
        add=memory.add,
        add_kwargs=dict(
            obs=data.obs[0], action=1, reward=1.0, next_obs=data.next_obs[0], terminated=False
        ),
        sample=memory.sample,
        sample_kwargs={"beta": BETA},
        indices_of=attrgetter("indices"),
        update=memory.update_priorities,
        update_period=getattr(memory.sampler, "sort_interval", 1),
        memory=memory,
    )


def cpprb_subject(name: str, buffer: Any, data: FillData, prioritized: bool) -> Subject:
    """Fills a cpprb buffer with batched ``add`` calls and randomises its priorities."""
    for part in data.chunks():
        buffer.add(
            obs=data.obs[part], act=data.actions[part], rew=data.rewards[part],
            next_obs=data.next_obs[part], done=data.terminated[part],
        )  # fmt: skip
    capacity = data.obs.shape[0]
    # Plain buffers (no Nstep / compression) write straight into the main buffer: check it.
    if buffer.get_stored_size() != capacity:
        raise AssertionError(f"{name}: {buffer.get_stored_size()} stored, not {capacity}")
    batch = buffer.sample(64, beta=BETA) if prioritized else buffer.sample(64)
    # Exactly as FillData wrote them, in float32 (a tolerance on the difference, as this check
    # once had, fails at random for |obs| > 2, where a float32 ulp exceeds it).
    if not np.array_equal(batch["next_obs"], batch["obs"] + np.float32(0.01)):
        raise AssertionError(f"{name}: sampled transitions are not the ones written")
    if prioritized:
        if not np.array_equal(batch["obs"], data.obs[batch["indexes"]]):
            raise AssertionError(f"{name}: sampled observations are not at their indexes")
        for part in data.chunks():
            buffer.update_priorities(np.arange(part.start, part.stop), data.td_errors[part])
    return Subject(
        name=name,
        add=buffer.add,
        add_kwargs=dict(obs=data.obs[0], act=1, rew=1.0, next_obs=data.next_obs[0], done=False),
        sample=buffer.sample,
        sample_kwargs={"beta": BETA} if prioritized else {},
        indices_of=itemgetter("indexes"),
        update=buffer.update_priorities if prioritized else None,
        memory=buffer,
    )


def cpprb_env_dict() -> dict[str, dict[str, Any]]:
    shape = OBS_SHAPE[0]
    return {"obs": {"shape": shape}, "act": {}, "rew": {}, "next_obs": {"shape": shape}, "done": {}}


def per_dqn_row(kind: str) -> str:
    """The row of per_dqn's memory of ``kind`` at its default settings, e.g. ``per_dqn rank
    (alpha 0.7)``: the kind's name, and its ``alpha`` where it has one."""
    sampler = make_memory(kind, capacity=1, obs_shape=OBS_SHAPE).sampler
    alpha = getattr(sampler, "alpha", None)
    return f"per_dqn {kind}" + ("" if alpha is None else f" (alpha {alpha:g})")


ROW_CPPRB_UNIFORM = "cpprb ReplayBuffer"
ROW_PROPORTIONAL = per_dqn_row("proportional")
ROW_NUMPY = "vectorised-numpy sum tree (alpha 0.6)"
ROW_PYTHON = "pure-Python sum tree (alpha 0.6)"
ROW_CPPRB = "cpprb PrioritizedReplayBuffer (alpha 0.6)"


def build_subjects(capacity: int, data: FillData, log: Callable[[str], None]) -> list[Subject]:
    """Every implementation, filled, in table order: per_dqn's memory of each kind in ``KINDS``,
    each followed by the baselines of that kind; cpprb rows only when cpprb imports."""
    base: dict[str, Any] = dict(capacity=capacity, obs_shape=OBS_SHAPE, obs_dtype=np.float32)
    env_dict = cpprb_env_dict()
    # the baselines of a kind, timed right after per_dqn's memory of it
    baselines: dict[str, dict[str, Callable[[int], Subject]]] = {
        "uniform": {
            ROW_CPPRB_UNIFORM: lambda seed: cpprb_subject(
                ROW_CPPRB_UNIFORM, cpprb.ReplayBuffer(capacity, env_dict), data, prioritized=False
            ),
        },
        "proportional": {
            ROW_NUMPY: lambda seed: per_dqn_subject(
                ROW_NUMPY, NumpyReplay(alpha=0.6, **base, seed=seed), data
            ),
            ROW_PYTHON: lambda seed: per_dqn_subject(
                ROW_PYTHON, PurePythonReplay(alpha=0.6, **base, seed=seed), data
            ),
            ROW_CPPRB: lambda seed: cpprb_subject(
                ROW_CPPRB,
                cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6),
                data,
                prioritized=True,
            ),
        },
    }
    builders: dict[str, Callable[[int], Subject]] = {}
    for kind in KINDS:
        row = per_dqn_row(kind)
        builders[row] = lambda seed, kind=kind, row=row: per_dqn_subject(
            row, make_memory(kind, **base, seed=seed), data
        )
        builders.update(baselines.get(kind, {}))
    subjects = []
    for seed, (name, build) in enumerate(builders.items()):
        if cpprb is None and name in (ROW_CPPRB_UNIFORM, ROW_CPPRB):
            continue
        start = time.perf_counter()
        subjects.append(build(seed))
        log(f"filled {name} in {time.perf_counter() - start:.1f} s")
    return subjects
