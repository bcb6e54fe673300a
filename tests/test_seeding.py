"""Independent random streams: one per consumer, derived from run.seed."""

from __future__ import annotations

from dataclasses import astuple, fields

import numpy as np
import pytest
import torch

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.training.run import Trainer
from per_dqn.training.seeding import RunSeeds, restart_seed


def first_draws(seed: int, n: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**63, n)


def test_streams_are_deterministic_distinct_and_differ_across_seeds():
    seeds = RunSeeds.from_seed(7)
    assert seeds == RunSeeds.from_seed(7)
    draws = [first_draws(s).tolist() for s in astuple(seeds)]
    assert len({tuple(d) for d in draws}) == len(fields(RunSeeds))
    # No stream shares even one of its first 64 numbers with another.
    flat = np.concatenate(draws)
    assert np.unique(flat).size == flat.size
    other = RunSeeds.from_seed(8)
    assert all(a != b for a, b in zip(astuple(seeds), astuple(other), strict=True))
    assert 0 <= seeds.env < 2**30 and 0 <= seeds.eval_env < 2**30


def test_restart_seed_is_reproducible_and_differs_by_step():
    assert restart_seed(3, 1000) == restart_seed(3, 1000)
    assert (
        len({restart_seed(3, s) for s in (0, 1000, 2000)} | set(astuple(RunSeeds.from_seed(3))))
        == 9
    )


def test_negative_seed_is_refused():
    with pytest.raises(ValueError, match="`seed` must be >= 0, got -1"):
        RunSeeds.from_seed(-1)


def trainer(seed: int, kind: str) -> Trainer:
    overrides = [Override("run.seed", seed), Override("replay.kind", kind)]
    return Trainer(load_config(resolve_config_path("cartpole.yaml"), overrides), "cartpole")


def test_replay_sampler_and_exploration_draw_different_streams():
    """Pins the bug where the memory's sampler and the exploration policy were both seeded with
    ``default_rng(run.seed)`` and so drew the same numbers."""
    t = trainer(0, "proportional")
    try:
        memory_rng = t.memory.state_dict()["rng"]
        assert memory_rng == np.random.default_rng(t.seeds.replay).bit_generator.state
        assert memory_rng != np.random.default_rng(t.seeds.explore).bit_generator.state
        assert memory_rng != np.random.default_rng(0).bit_generator.state
    finally:
        t.close()


def test_arms_of_one_seed_share_network_init_and_env_seeds():
    """The paired design: only replay.kind differs between arms of one seed."""
    runs = [trainer(5, "uniform"), trainer(5, "rank"), trainer(6, "uniform")]
    try:
        weights = [torch.cat([p.flatten() for p in r.agent.online.parameters()]) for r in runs]
        first_obs = [r.envs.reset(seed=r.seeds.env)[0] for r in runs]
        assert torch.equal(weights[0], weights[1])
        assert not torch.equal(weights[0], weights[2])
        np.testing.assert_array_equal(first_obs[0], first_obs[1])
        assert not np.array_equal(first_obs[0], first_obs[2])
    finally:
        for r in runs:
            r.close()


def first_words(sequences) -> list[int]:
    """The first 64-bit word of each ``SeedSequence``: numpy's own derivation, computed here."""
    return [int(s.generate_state(1, np.uint64)[0]) for s in sequences]


@pytest.mark.parametrize("seed", [0, 7, 2**40])
def test_the_streams_are_the_documented_derivation(seed):
    """Pins the derivation the module docstring fixes, so that one ``run.seed`` gives the same
    streams on every machine and in every version: stream ``i`` (in field order) is the first
    64-bit word of child ``i`` of ``SeedSequence(run.seed).spawn(6)``; the two env streams are
    reduced mod 2**30 (gymnasium adds the sub-env index, emulators take 32-bit seeds) and the
    others keep all 64 bits."""
    words = first_words(np.random.SeedSequence(seed).spawn(len(fields(RunSeeds))))
    expected = RunSeeds(words[0] % 2**30, words[1] % 2**30, *words[2:])
    assert RunSeeds.from_seed(seed) == expected
    assert all(type(value) is int for value in astuple(RunSeeds.from_seed(seed)))


def test_the_non_env_streams_keep_their_64_bits():
    """Pins that only the env streams are reduced: over a few seeds, some exploration, replay or
    network stream exceeds 2**30 (reducing all six would shrink their seed space to 30 bits)."""
    others = [v for s in range(4) for v in astuple(RunSeeds.from_seed(s))[2:]]
    assert max(others) >= 2**32


@pytest.mark.parametrize(("seed", "env_steps"), [(0, 0), (3, 1000), (11, 123_456)])
def test_restart_seed_is_the_documented_derivation(seed, env_steps):
    """Pins ``restart_seed``: the first 64-bit word of ``SeedSequence(seed, spawn_key=(6,
    env_steps))`` (a key past the six streams' children, so it never repeats one of them), mod
    2**30, as an int: a resumed Atari run restarts from the same episodes on every machine."""
    sequence = np.random.SeedSequence(seed, spawn_key=(len(fields(RunSeeds)), env_steps))
    value = restart_seed(seed, env_steps)
    assert type(value) is int and value == first_words([sequence])[0] % 2**30
