"""Independent random streams derived from one run seed.

A run has one user-facing seed, ``run.seed``. Each consumer of randomness gets its own stream,
derived with ``numpy.random.SeedSequence(run.seed).spawn``, so that no two of them draw the same
numbers (seeding the replay sampler and the exploration policy both with ``default_rng(seed)``
made them read one stream twice) and so that a change in how often one consumer draws never
shifts another's numbers:

==============  ===========================================================================
stream          drives
==============  ===========================================================================
``env``         the training envs' first reset (sub-env ``i`` is reset with ``env + i``)
``eval_env``    the evaluation env's first reset (periodic and final evaluations share it)
``explore``     epsilon-greedy exploration during training
``eval_explore``  epsilon draws of the evaluations (``train.eval_epsilon``)
``replay``      the replay memory's sampler (strata, uniform mixture, rank segments)
``network``     ``torch.manual_seed``: the networks' initialisation
==============  ===========================================================================

The derivation is fixed: the same ``run.seed`` gives the same streams on every machine, and the
arms of an ablation that share a seed share the envs' seeds and the initial network (the paired
design). Stream states are checkpointed by their owners, so a resumed run continues every stream
where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

# Env seeds stay below 2**30: gymnasium gives sub-env i the seed ``seed + i``, and emulators
# take 32-bit signed seeds.
_ENV_SEED_LIMIT = 2**30
# The first spawn-key word of a distributed run's actors' sequences: past the run's own streams'
# keys (0 to 5), never reused.
ACTOR_SPAWN_KEY = 1_000
# The first spawn-key word of its replay shards' sampling streams.
SHARD_SPAWN_KEY = 1_001


@dataclass(frozen=True)
class RunSeeds:
    """One seed per stream (see the module docstring); fields in spawn order, never reordered.

    Attributes:
        env: first reset of the training envs.
        eval_env: first reset of the evaluation env.
        explore: the exploration policy's generator.
        eval_explore: the evaluations' epsilon draws.
        replay: the replay memory's generator.
        network: the torch seed the networks are initialised under.
    """

    env: int
    eval_env: int
    explore: int
    eval_explore: int
    replay: int
    network: int

    @classmethod
    def from_seed(cls, seed: int) -> RunSeeds:
        """The streams of ``run.seed = seed``.

        Raises:
            ValueError: a negative seed.
        """
        if seed < 0:
            raise ValueError(f"`seed` must be >= 0, got {seed}")
        return cls._spawned(np.random.SeedSequence(seed))

    @classmethod
    def for_actor(cls, seed: int, actor: int, incarnation: int = 0) -> RunSeeds:
        """The streams of actor ``actor`` of a distributed run of ``run.seed = seed`` (issue 47):
        spawned as ``from_seed``'s are, from the run seed's sequence with the spawn key
        ``(ACTOR_SPAWN_KEY, actor)``, so no actor shares a stream with another or with the
        learner's (``from_seed(seed)``, spawn keys ``(0,)`` to ``(5,)``); an actor restarted
        after its process died (``incarnation`` 1, 2, ...) gets new ones, keyed
        ``(ACTOR_SPAWN_KEY, actor, incarnation)``.

        Raises:
            ValueError: a negative seed, actor or incarnation.
        """
        if seed < 0 or actor < 0 or incarnation < 0:
            raise ValueError(
                f"`seed`, `actor` and `incarnation` must be >= 0, got {seed}, {actor} and "
                f"{incarnation}"
            )
        key = (ACTOR_SPAWN_KEY, actor) + ((incarnation,) if incarnation else ())
        return cls._spawned(np.random.SeedSequence(seed, spawn_key=key))

    @staticmethod
    def for_shard(seed: int, shard: int) -> int:
        """The sampling seed of replay shard ``shard`` of a distributed run of ``run.seed =
        seed`` (``run.shards``), spawn key ``(SHARD_SPAWN_KEY, shard)``: no shard shares its
        stream with another, an actor or the learner.

        Raises:
            ValueError: a negative seed or shard.
        """
        if seed < 0 or shard < 0:
            raise ValueError(f"`seed` and `shard` must be >= 0, got {seed} and {shard}")
        sequence = np.random.SeedSequence(seed, spawn_key=(SHARD_SPAWN_KEY, shard))
        return int(sequence.generate_state(1, np.uint64)[0])

    @classmethod
    def _spawned(cls, sequence: np.random.SeedSequence) -> RunSeeds:
        names = [f.name for f in fields(cls)]
        children = sequence.spawn(len(names))
        values = {}
        for name, child in zip(names, children, strict=True):
            value = int(child.generate_state(1, np.uint64)[0])
            values[name] = value % _ENV_SEED_LIMIT if name in ("env", "eval_env") else value
        return cls(**values)


def restart_seed(seed: int, env_steps: int) -> int:
    """The reset seed of envs that could not be checkpointed (ale-py's emulators), when a run
    resumes at ``env_steps``: fresh episodes, reproducible for the same checkpoint."""
    sequence = np.random.SeedSequence(seed, spawn_key=(len(fields(RunSeeds)), env_steps))
    return int(sequence.generate_state(1, np.uint64)[0]) % _ENV_SEED_LIMIT
