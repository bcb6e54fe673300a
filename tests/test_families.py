"""Env families: one table (``per_dqn.envs.families``) that the config, ``envs``, ``build`` and the
networks ask. Each test is parametrised over ``families.FAMILIES``, so a family added to the table
without its construction, its network or its shipped config fails here under its own name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from per_dqn.agent.networks import BUILTIN_NETWORKS, NETWORKS, MinAtarCNN, NatureCNN, QNetwork
from per_dqn.config import (
    Config,
    EnvConfig,
    Override,
    load_config,
    resolve_config_path,
    shipped_config_names,
)
from per_dqn.envs import families
from per_dqn.envs import make as envs
from per_dqn.training.build import make_agent

FAMILIES = pytest.mark.parametrize("family", families.FAMILIES, ids=lambda f: f.name)

# The family each shipped config trains on.
SHIPPED = {
    "cartpole.yaml": "classic",
    "atari.yaml": "atari",
    "atari100k.yaml": "atari",
    "minatar.yaml": "minatar",
    "literature/dopamine_minatar_dqn.yaml": "minatar",
    "literature/dopamine_minatar_dqn_per.yaml": "minatar",
    "literature/minatar_paper_dqn.yaml": "minatar",
    "literature/reducible_loss_minatar_per.yaml": "minatar",
    "literature/reducible_loss_minatar_relo.yaml": "minatar",
}
# The Q-network class `agent.network: auto` builds on each family's example id.
AUTO_BUILDS = {"classic": QNetwork, "atari": NatureCNN, "minatar": MinAtarCNN}


def test_each_shipped_config_s_env_id_is_in_its_family():
    assert set(shipped_config_names()) == set(SHIPPED), "add the new shipped config to SHIPPED"
    for name, expected in SHIPPED.items():
        env_id = load_config(resolve_config_path(name)).env.id
        assert families.of(env_id).name == expected, f"{name}: {env_id}"


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("CartPole-v1", families.CLASSIC),
        ("Acrobot-v1", families.CLASSIC),
        ("my_package.envs:Maze-v0", families.CLASSIC),  # gymnasium's module:id form
        ("ale/Pong-v5", families.CLASSIC),  # namespaces are case-sensitive, as gymnasium's are
        ("ALE/Pong-v5", families.ATARI),
        ("ALE/MsPacman-v5", families.ATARI),
        ("MinAtar/Breakout-v1", families.MINATAR),
        ("MinAtar/SpaceInvaders-v1", families.MINATAR),
    ],
)
def test_an_id_s_namespace_picks_its_family_and_any_other_id_is_the_fallback_s(env_id, expected):
    assert families.of(env_id) is expected


@FAMILIES
def test_every_family_states_every_field(family):
    """No field has a default, so a family states each; each is set to a usable value."""
    fields = dataclasses.fields(families.Family)
    assert all(f.default is dataclasses.MISSING for f in fields), "a Family field has a default"
    assert family.name and family.description
    assert families.of(family.example_id) is family, (
        f"{family.name}: example_id {family.example_id!r}"
    )
    assert family.default_network in BUILTIN_NETWORKS, f"{family.name}: {family.default_network!r}"
    assert family.frame_skip is None or family.frame_skip >= 1
    for frames in (family.max_episode_frames, family.eval_episode_frames, family.eval_total_frames):
        assert frames is None or frames >= 1
    if family.eval_episode_frames is not None or family.eval_total_frames is not None:
        # The caps are in emulator frames; the config divides them by the frame skip.
        assert family.frame_skip is not None, (
            f"{family.name}: eval caps in frames need a frame skip"
        )


def test_families_are_told_apart_by_name_and_namespace():
    names = [f.name for f in families.FAMILIES]
    namespaces = [f.namespace for f in families.FAMILIES if f.namespace is not None]
    assert len(set(names)) == len(names)
    assert len(set(namespaces)) == len(namespaces)
    # One fallback, which no namespace claims; a prefix of another namespace would shadow it.
    assert [f for f in families.FAMILIES if f.namespace is None] == [families.FALLBACK]
    for a in namespaces:
        assert not any(b != a and b.startswith(a) for b in namespaces)


def test_every_family_has_a_shipped_config():
    """A family is added with a shipped config of its own (and its entry in ``SHIPPED`` here)."""
    without = {f.name for f in families.FAMILIES} - set(SHIPPED.values())
    assert not without, f"families {sorted(without)}: ship a config and add it to SHIPPED"
    assert set(SHIPPED.values()) <= {f.name for f in families.FAMILIES}


def test_every_construction_belongs_to_a_family():
    """An ``envs.ENV_MAKERS`` entry whose key names no family is never used: a family renamed in
    ``families.py`` but not in ``envs.py``, or a construction added without its family."""
    names = {f.name for f in families.FAMILIES}
    assert set(envs.ENV_MAKERS) <= names, sorted(set(envs.ENV_MAKERS) - names)


@FAMILIES
def test_every_family_builds_its_training_and_evaluation_envs(family):
    assert family.name in envs.ENV_MAKERS, f"family {family.name!r} has no envs.ENV_MAKERS entry"
    config = EnvConfig(id=family.example_id, num_envs=2)
    vector = envs.make_vector_env(config)
    single = envs.make_eval_env(config)
    try:
        assert vector.num_envs == 2
        assert envs.describe(single) == envs.describe(vector)
    finally:
        vector.close()
        single.close()


@FAMILIES
def test_every_family_s_default_network_is_built(family):
    """``agent.network: auto`` builds the family's default network (``build.make_agent``)."""
    assert family.name in AUTO_BUILDS, f"family {family.name!r}: add its network to AUTO_BUILDS"
    name = next(n for n, f in SHIPPED.items() if f == family.name)
    config = load_config(resolve_config_path(name), [Override("agent.network", "auto")])
    single = envs.make_eval_env(config.env)
    try:
        agent = make_agent(config, envs.describe(single), torch.device("cpu"))
    finally:
        single.close()
    assert type(agent.online) is AUTO_BUILDS[family.name]


def test_every_network_name_has_a_builder():
    assert set(NETWORKS) == set(families.NETWORK_NAMES)
    assert BUILTIN_NETWORKS == (families.AUTO_NETWORK, *families.NETWORK_NAMES)


@FAMILIES
def test_every_family_s_eval_caps_fill_the_config(family):
    """A config that leaves the evaluation caps out gets its family's, in agent steps."""
    train = Config.model_validate({"env": {"id": family.example_id}}).train
    skip = family.frame_skip
    expected = (
        None if family.eval_episode_frames is None else family.eval_episode_frames // skip,
        None if family.eval_total_frames is None else family.eval_total_frames // skip,
    )
    assert (train.eval_max_episode_steps, train.eval_max_total_steps) == expected


def test_atari_s_eval_caps_follow_the_frame_skip():
    """Machado et al.'s 108,000 frames and Dopamine's 500,000, at 5 frames a step."""
    train = Config.model_validate({"env": {"id": "ALE/Pong-v5", "frame_skip": 5}}).train
    assert (train.eval_max_episode_steps, train.eval_max_total_steps) == (21_600, 100_000)
    assert EnvConfig().frame_skip == families.ATARI.frame_skip == 4


def test_a_family_without_construction_is_named(monkeypatch):
    """Negative control for the construction test: a family added to the table alone is refused
    by ``envs`` with its name, not built as another family's env."""
    fake = dataclasses.replace(
        families.MINATAR, name="fake", namespace="Fake/", example_id="Fake/Game-v0"
    )
    monkeypatch.setattr(families, "FAMILIES", (*families.FAMILIES, fake))
    assert families.of("Fake/Game-v0") is fake
    with pytest.raises(LookupError, match=r"env family 'fake' \(of 'Fake/Game-v0'\)"):
        envs.make_vector_env(EnvConfig(id="Fake/Game-v0"))
    with pytest.raises(LookupError, match="'fake'"):
        envs.make_eval_env(EnvConfig(id="Fake/Game-v0"))


def test_a_family_s_own_frame_skip_and_time_limit_reach_the_config_and_its_envs(monkeypatch):
    """Issue 46: ``Family.frame_skip`` was documented as the default ``env.frame_skip`` while the
    field was Atari's 4 whatever the family, so a family with a skip of 2 ran at 4 while its
    evaluation caps were computed for 2; and only the Atari builder applied
    ``max_episode_frames``. A throwaway family of CartPole-like envs (``Skip2/``, a skip of 2,
    1,000 frames an episode and an evaluation cap of 600 frames): a config that leaves the skip
    out resolves it to 2 and the caps to 300 steps; one that sets it keeps its own; and the episode
    cap every ``gym.make`` builder applies under it is 500 agent steps (333 at a skip of 3)."""
    throwaway = dataclasses.replace(
        families.CLASSIC, name="skip2", title="Skip2", namespace="Skip2/",
        example_id="Skip2/CartPole-v1", frame_skip=2, max_episode_frames=1000,
        eval_episode_frames=600, eval_total_frames=None,
    )  # fmt: skip
    monkeypatch.setattr(families, "FAMILIES", (*families.FAMILIES, throwaway))
    config = load_config(resolve_config_path("cartpole.yaml"), [Override("env.id", "Skip2/X")])
    assert config.env.frame_skip == 2
    assert config.train.eval_max_episode_steps == 300
    own = load_config(
        resolve_config_path("cartpole.yaml"),
        [Override("env.id", "Skip2/X"), Override("env.frame_skip", 3)],
    )
    assert (own.env.frame_skip, own.train.eval_max_episode_steps) == (3, 200)
    assert envs.episode_steps(config.env) == 500
    assert envs.episode_steps(own.env) == 333
    unset = load_config(resolve_config_path("cartpole.yaml"))
    assert envs.episode_steps(unset.env) is None  # CartPole keeps its registered limit
    assert unset.env.frame_skip == 4  # the field's default, which CartPole-like envs ignore
