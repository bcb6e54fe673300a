"""Every replay kind trains where a kind trains: on the real ALE (Breakout, uint8 frame stacks in
the frame storage) and on MinAtar (bit-packed boards, the MinAtar CNN), through the Python API,
packed as ``pack_key`` groups them. ``KINDS`` is read here, so a new kind is taken without a
line; CartPole, resume and packs bit for bit are ``tests/test_packs.py``, ``tests/test_resume.py``
and ``tests/test_train.py``."""

from __future__ import annotations

import json

import pytest

import per_dqn
from per_dqn.memory import KINDS

SHORT = {
    "train.total_env_steps": 300, "train.learning_starts": 100, "replay.capacity": 500,
    "train.final_eval_episodes": 1, "train.eval_interval": 0, "train.log_interval": 100,
    "train.replay_period": 2, "agent.target_update_interval": 50, "train.batch_size": 8,
}  # fmt: skip
ENVS = {
    "atari": ("atari100k.yaml", {"env.id": "ALE/Breakout-v5", "env.max_episode_steps": 150}),
    "minatar": ("minatar.yaml", {"env.id": "MinAtar/Breakout-v1", "agent.hidden_sizes": [32]}),
}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(ENVS))
def test_every_kind_trains_on_atari_and_minatar(workdir, family):
    if family == "minatar":
        pytest.importorskip("minatar")
    config, env = ENVS[family]
    runs = per_dqn.train_many(
        config, seeds=[0], arms=list(KINDS), overrides={**SHORT, **env}, out="runs/every",
        pack=len(KINDS),
    )  # fmt: skip
    assert [(r.arm, r.error) for r in runs] == [(kind, None) for kind in KINDS]
    for r in runs:
        summary = json.loads((r.run_dir / "summary.json").read_text())
        assert summary["replay"] == r.arm and summary["env_steps"] == 300
        assert summary["update_steps"] > 50
