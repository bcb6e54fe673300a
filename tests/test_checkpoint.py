"""Checkpoint files on disk: the manifest's sizes and SHA-256 against hashlib, atomic writes that a
failure mid-way leaves unseen, keep-last-K, and the fallback past a truncated, corrupted or
half-written checkpoint. Also the pieces of state a checkpoint carries: the replay memory's
arrays and RNG, a CartPole vector env mid-episode, the n-step windows and the health panel."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from per_dqn import checkpoint as ckpt
from per_dqn.memory import PrioritizedReplay, RankBasedReplay
from per_dqn.metrics import ReplayHealth
from per_dqn.nstep import NStepAccumulator


def write_bytes(files: dict[str, bytes]):
    def write(directory: Path) -> None:
        for name, data in files.items():
            (directory / name).write_bytes(data)

    return write


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    path = ckpt.write_checkpoint(
        tmp_path, 1200, write_bytes({"a.bin": b"abc", "b.bin": b""}), keep_last=2,
        meta={"final": True},
    )  # fmt: skip
    assert path == tmp_path / "step_000001200"
    assert names(tmp_path) == ["step_000001200"]  # no temp dir left behind
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest == {
        "format": 1,
        "env_steps": 1200,
        "final": True,
        "files": {
            # hashlib's digests of the literal bytes, computed independently of the module.
            "a.bin": {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
            "b.bin": {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()},
        },
    }
    assert ckpt.verify_checkpoint(path) == manifest


def test_keeps_the_last_k(tmp_path):
    for step in (100, 200, 300, 400):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": b"1"}), keep_last=2)
    assert names(tmp_path) == ["step_000000300", "step_000000400"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == names(tmp_path)


def test_a_write_that_fails_midway_leaves_no_checkpoint_and_the_old_ones_intact(tmp_path):
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"good"}), keep_last=1)

    def crash(directory: Path) -> None:
        (directory / "x").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.write_checkpoint(tmp_path, 200, crash, keep_last=1)
    assert names(tmp_path) == ["step_000000100"]
    assert (tmp_path / "step_000000100" / "x").read_bytes() == b"good"


def test_a_killed_writer_is_never_read_and_its_leftovers_go(tmp_path):
    """A process killed mid-write leaves a temp dir (no final name); readers ignore it and the
    next write removes it."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"good"}), keep_last=3)
    leftover = tmp_path / ".tmp-step_000000200-99999"
    leftover.mkdir()
    (leftover / "x").write_bytes(b"partial")
    found = ckpt.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000100" and found.warnings == []
    ckpt.write_checkpoint(tmp_path, 300, write_bytes({"x": b"new"}), keep_last=3)
    assert names(tmp_path) == ["step_000000100", "step_000000300"]


def damage_truncate(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)


def damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (damage_truncate, "x has 3,000 bytes, its manifest says 6,000"),
        (damage_flip, "x fails its SHA-256 check"),
        (lambda path: path.unlink(), "x is missing"),
        (lambda path: (path.parent / "manifest.json").unlink(), "no manifest.json"),
        (lambda path: (path.parent / "manifest.json").write_text("{"), "unreadable manifest"),
    ],
    ids=["truncated", "flipped-byte", "missing-file", "no-manifest", "bad-manifest"],
)
def test_a_damaged_checkpoint_is_skipped_with_one_warning(tmp_path, damage, problem):
    for step in (100, 200):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": bytes(6000)}), keep_last=3)
    newest = tmp_path / "step_000000200"
    damage(newest / "x")
    found = ckpt.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000100"
    (warning,) = found.warnings
    assert warning.startswith(f"checkpoint {newest}: {problem}")
    assert warning.endswith("; using the previous one, step_000000100")
    with pytest.raises(ckpt.CheckpointError, match=problem.split(" (")[0]):
        ckpt.verify_checkpoint(newest)


def test_no_usable_checkpoint(tmp_path):
    assert ckpt.find_latest(tmp_path / "absent") == ckpt.Found(None, {}, [], 0)
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"abc"}), keep_last=1)
    damage_flip(tmp_path / "step_000000100" / "x")
    found = ckpt.find_latest(tmp_path)
    assert found.path is None and found.candidates == 1
    assert found.warnings == [
        f"checkpoint {tmp_path / 'step_000000100'}: x fails its SHA-256 check; no earlier "
        "checkpoint is usable"
    ]


def test_checking_only_some_files(tmp_path):
    """Evaluation reads only agent.pt and config.yaml: damage elsewhere does not stop it."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"1", "m": b"22"}), keep_last=1)
    damage_flip(tmp_path / "step_000000100" / "m")
    assert ckpt.find_latest(tmp_path, ["a"]).path == tmp_path / "step_000000100"
    assert ckpt.find_latest(tmp_path).path is None


def test_a_damaged_newer_checkpoint_is_replaced_and_never_crowds_out_a_good_one(tmp_path):
    """After a fallback from a damaged step 300 to step 200, the resumed run writes 250 and then
    300 again: with keep_last=1, the good 250 must not be deleted in favour of the damaged 300."""
    for step in (200, 300):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": b"v1"}), keep_last=2)
    damage_flip(tmp_path / "step_000000300" / "x")
    ckpt.write_checkpoint(tmp_path, 250, write_bytes({"x": b"v2"}), keep_last=1)
    assert names(tmp_path) == ["step_000000250"]
    (tmp_path / "step_000000300").mkdir()  # a damaged dir of the same step as the next write
    ckpt.write_checkpoint(tmp_path, 300, write_bytes({"x": b"v3"}), keep_last=1)
    assert names(tmp_path) == ["step_000000300"]
    assert ckpt.verify_checkpoint(tmp_path / "step_000000300")["env_steps"] == 300


def test_write_text_atomic_replaces_whole(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("old")
    ckpt.write_text_atomic(path, "new")
    assert path.read_text() == "new" and names(tmp_path) == ["config.yaml"]


# --- the state a checkpoint carries ---------------------------------------------------------------


@pytest.mark.parametrize("kind", [PrioritizedReplay, RankBasedReplay])
def test_memory_round_trip_continues_identically(tmp_path, kind):
    """Arrays, priorities and the 128-bit PCG64 state survive npz + JSON: the restored memory
    draws the same batches as the original."""
    rng = np.random.default_rng(0)
    memory = kind(capacity=64, obs_shape=(3,), seed=7)
    for _ in range(100):  # wraps around
        memory.add(
            rng.normal(size=3), int(rng.integers(2)), rng.normal(), rng.normal(size=3), False
        )
    batch = memory.sample(8, 0.5)
    memory.update_priorities(batch.indices, rng.random(8) * 5)
    ckpt.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict())
    restored = kind(capacity=64, obs_shape=(3,), seed=123)
    restored.load_state_dict(ckpt.load_tree(tmp_path / "m.npz", tmp_path / "m.json"))
    for _ in range(3):
        a, b = memory.sample(16, 0.7), restored.sample(16, 0.7)
        for field_a, field_b in zip(a, b, strict=True):
            np.testing.assert_array_equal(field_a, field_b)


def test_frame_memory_round_trip(tmp_path):
    """The deduplicated-frame storage Atari uses: its frame ring and links survive too."""
    memory = PrioritizedReplay(
        capacity=16, obs_shape=(4, 8, 8), obs_dtype=np.uint8, seed=1, dedup_frames=True
    )
    frames = np.random.default_rng(1).integers(0, 255, size=(40, 8, 8), dtype=np.uint8)
    for t in range(30):
        memory.add(frames[t : t + 4], t % 3, 1.0, frames[t + 1 : t + 5], t % 9 == 8)
    ckpt.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict())
    restored = PrioritizedReplay(
        capacity=16, obs_shape=(4, 8, 8), obs_dtype=np.uint8, seed=5, dedup_frames=True
    )
    restored.load_state_dict(ckpt.load_tree(tmp_path / "m.npz", tmp_path / "m.json"))
    a, b = memory.sample(8, 1.0), restored.sample(8, 1.0)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)


def cartpole_vector(num_envs: int) -> SyncVectorEnv:
    envs = [gym.make("CartPole-v1", disable_env_checker=True) for _ in range(num_envs)]
    return SyncVectorEnv([lambda e=e: e for e in envs], autoreset_mode=AutoresetMode.NEXT_STEP)


def test_vector_env_state_continues_identically_through_an_autoreset():
    """A copy taken right after an episode ended (the next step only resets that sub-env) steps
    exactly like the original: physics, RNG, time limit and the autoreset flag all restored."""
    envs = cartpole_vector(2)
    envs.reset(seed=3)
    while True:
        _, _, terminated, truncated, _ = envs.step(np.zeros(2, dtype=np.int64))
        if (terminated | truncated).any():
            break
    state = ckpt.vector_env_state(envs)
    assert state is not None and state["autoreset"].any()
    copy = cartpole_vector(2)
    copy.reset(seed=99)
    ckpt.load_vector_env_state(copy, state)
    actions = np.random.default_rng(0).integers(2, size=(300, 2))
    for a in actions:
        for x, y in zip(envs.step(a)[:4], copy.step(a)[:4], strict=True):
            np.testing.assert_array_equal(x, y)


def test_single_env_state_is_restored_in_place():
    env = gym.make("CartPole-v1", disable_env_checker=True)
    env.reset(seed=1)
    env.step(0)
    blob = ckpt.env_state(env)
    other = gym.make("CartPole-v1", disable_env_checker=True)
    other.reset(seed=2)
    same_object = other
    ckpt.load_env_state(other, blob)
    assert other is same_object
    for _ in range(5):
        np.testing.assert_array_equal(env.step(1)[0], other.step(1)[0])
    np.testing.assert_array_equal(env.reset()[0], other.reset()[0])  # the RNG continues too


def test_an_unpicklable_env_has_no_state():
    class Handle(gym.Env):
        def __init__(self) -> None:
            self.lock = __import__("threading").Lock()  # stands in for a C++ emulator handle

    assert ckpt.env_state(Handle()) is None


def test_nstep_and_health_state_round_trip():
    acc = NStepAccumulator(num_envs=2, n_step=3, gamma=0.5)
    obs = np.arange(4, dtype=np.float32).reshape(2, 2)
    no = np.zeros(2, dtype=np.bool_)
    acc.step(obs, np.array([0, 1]), np.array([1.0, 2.0]), obs + 1, no, no, ~no)
    other = NStepAccumulator(num_envs=2, n_step=3, gamma=0.5)
    other.load_state_dict(acc.state_dict())
    # Both sub-envs truncate on the second step: every open window is emitted, by hand
    # R = r0 + 0.5 r1 for the 2-step window and r1 for the 1-step one.
    out = other.step(obs + 1, np.array([1, 0]), np.array([3.0, 4.0]), obs + 2, no, ~no, ~no)
    expected = [(0, 0, 1 + 0.5 * 3, 2), (0, 1, 3.0, 1), (1, 1, 2 + 0.5 * 4, 2), (1, 0, 4.0, 1)]
    assert len(out) == len(expected)
    for t, (env, action, ret, n) in zip(out, expected, strict=True):
        assert (t.action, t.reward, t.terminated, t.n_steps) == (action, ret, False, n)
        np.testing.assert_array_equal(t.next_obs, obs[env] + 2)
    np.testing.assert_array_equal(out[0].obs, obs[0])  # the window saved before the checkpoint
    with pytest.raises(ValueError, match="3 sub-envs, expected 2"):
        other.load_state_dict({"windows": [[], [], []]})

    health = ReplayHealth(4)
    health.record_add(np.array([0, 1]), 10)
    health.record_sample(np.array([1, 1]), np.array([0.5, 1.0]), 12)
    copy = ReplayHealth(4)
    copy.load_state_dict(health.state_dict())
    assert copy.pop_means() == health.pop_means()
    np.testing.assert_array_equal(copy.replay_count, [0, 1, 0, 0])  # a repeat counts once
    with pytest.raises(ValueError, match="shape"):
        ReplayHealth(5).load_state_dict(health.state_dict())


def test_checkpoint_names_sort_by_step(tmp_path):
    for step in (5, 1_000_000, 40_000):
        os.mkdir(tmp_path / ckpt.checkpoint_name(step))
    (tmp_path / "notes").mkdir()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "step_000000005", "step_000040000", "step_001000000",
    ]  # fmt: skip
    shutil.rmtree(tmp_path / "notes")
