"""Env families: the package ``per_dqn.envs.families``, one module per family, that the config,
``envs``, ``build`` and the networks ask. Each test is parametrised over ``families.FAMILIES``, and
nothing here lists the families by hand, so a family module added alone is checked here under its
own name: its fields, its construction, its network, its shipped config."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

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
from per_dqn.envs import common, families
from per_dqn.envs import make as envs
from per_dqn.envs.families import atari, classic, minatar
from per_dqn.training.build import make_agent

FAMILIES = pytest.mark.parametrize("family", families.FAMILIES, ids=lambda f: f.name)

# The family each shipped config trains on, read from the configs.
SHIPPED = {
    name: families.of(load_config(resolve_config_path(name)).env.id).name
    for name in shipped_config_names()
}
# The families of the configs users know by name (a check of the reading above).
KNOWN = {"cartpole.yaml": "classic", "atari.yaml": "atari", "minatar.yaml": "minatar",
         "literature/dopamine_minatar_dqn.yaml": "minatar"}  # fmt: skip
# The Q-network class each network name builds; ``auto``: an MLP for vectors, else the Nature CNN.
BUILDS = {"mlp": QNetwork, "nature_cnn": NatureCNN, "minatar_cnn": MinAtarCNN}


def shipped_config(family: families.Family) -> str:
    """The first shipped config (by name) that trains on ``family``."""
    return min(name for name, owner in SHIPPED.items() if owner == family.name)


def test_the_shipped_configs_are_read_to_their_families():
    assert KNOWN.items() <= SHIPPED.items()
    assert families.FAMILIES[0] is classic.FAMILY is families.FALLBACK
    assert {atari.FAMILY, minatar.FAMILY} <= set(families.FAMILIES)


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("CartPole-v1", classic.FAMILY),
        ("Acrobot-v1", classic.FAMILY),
        ("my_package.envs:Maze-v0", classic.FAMILY),  # gymnasium's module:id form
        ("ale/Pong-v5", classic.FAMILY),  # namespaces are case-sensitive, as gymnasium's are
        ("ALE/Pong-v5", atari.FAMILY),
        ("ALE/MsPacman-v5", atari.FAMILY),
        ("MinAtar/Breakout-v1", minatar.FAMILY),
        ("MinAtar/SpaceInvaders-v1", minatar.FAMILY),
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
    assert callable(family.make_vector) and callable(family.make_eval)
    # Saved state needs its env classes named; a game state is one of their fields.
    assert family.saves_state == bool(family.physics_fields), family.name
    if family.game_state is not None:
        assert any(family.game_state.field in f for f in family.physics_fields.values())


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
    """A family is added with a shipped config of its own."""
    without = {f.name for f in families.FAMILIES} - set(SHIPPED.values())
    assert not without, f"families {sorted(without)}: ship a config in per_dqn/configs/"


@FAMILIES
def test_every_family_builds_its_training_and_evaluation_envs(family):
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
    config = load_config(
        resolve_config_path(shipped_config(family)), [Override("agent.network", "auto")]
    )
    single = envs.make_eval_env(config.env)
    try:
        spec = envs.describe(single)
        agent = make_agent(config, spec, torch.device("cpu"))
    finally:
        single.close()
    network = family.default_network
    if network == families.AUTO_NETWORK:
        network = "mlp" if len(spec.obs_shape) == 1 else "nature_cnn"
    assert type(agent.online) is BUILDS[network]


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
    assert EnvConfig().frame_skip == atari.FAMILY.frame_skip == 4


FAMILY_MODULE = """
from per_dqn.envs.families.classic import FAMILY as CLASSIC
import dataclasses
FAMILY = dataclasses.replace(CLASSIC, name={name!r}, namespace={namespace!r},
                             physics_fields={fields!r}, saves_state={saves!r})
"""


def family_module(name: str, namespace: str | None, fields: dict | None = None) -> str:
    """A family module's text: classic's family under another name and namespace, declaring the
    state of ``fields`` (none by default)."""
    return FAMILY_MODULE.format(name=name, namespace=namespace, fields=fields or {},
                                saves=bool(fields))  # fmt: skip


def _package(tmp_path, monkeypatch, modules: dict[str, str]) -> str:
    """A throwaway package of family modules on ``sys.path``; returns its name."""
    root = tmp_path / "fams"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, code in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "fams" or m.startswith("fams.")]:
        monkeypatch.delitem(sys.modules, name)  # another test's package of the same name
    return "fams"


def test_discovery_finds_each_module_s_family_fallback_first(tmp_path, monkeypatch):
    package = _package(tmp_path, monkeypatch, {
        "zed": family_module("zed", "Zed/"),
        "base": family_module("base", None),
        "abc": family_module("abc", "Abc/"),
        "family": "raise AssertionError('family.py is the dataclass, not a family')",
    })  # fmt: skip
    found = families.discover(package, [str(tmp_path / "fams")])
    assert [f.name for f in found] == ["base", "abc", "zed"]


@pytest.mark.parametrize(
    ("modules", "error", "match"),
    [
        ({"odd": "X = 1"}, TypeError, r"fams\.odd: an env family's module needs FAMILY"),
        ({"odd": family_module("other", "O/")}, TypeError, "name='odd'"),
        (
            {
                "a": family_module("a", None),
                "b": family_module("b", None),
            },
            ValueError,
            r"\['a', 'b'\]",
        ),
        (
            {
                "a": family_module("a", None),
                "b": family_module("b", "Game/"),
                "c": family_module("c", "Game/Sub"),
            },
            ValueError,
            "'Game/' would shadow 'Game/Sub'",
        ),
        ({"b": family_module("b", "B/")}, ValueError, "exactly one"),
        # Both declare CartPole's state: envs.state could not tell whose CartPoleEnv it is.
        (
            {
                "a": family_module("a", None, {"CartPoleEnv": ("state",)}),
                "b": family_module("b", "B/", {"CartPoleEnv": ("state",)}),
            },
            ValueError,
            "'a' and 'b' both declare the state of 'CartPoleEnv'",
        ),
    ],
    ids=["no-FAMILY", "misnamed", "two-fallbacks", "shadowing", "no-fallback", "same-class"],
)
def test_discovery_refuses_a_module_it_cannot_use_naming_it(
    tmp_path, monkeypatch, modules, error, match
):
    """Negative controls: a module of the families package without its ``FAMILY``, or families
    that ``of`` could not tell apart, are refused at import with a line naming them."""
    package = _package(tmp_path, monkeypatch, modules)
    with pytest.raises(error, match=match):
        families.discover(package, [str(tmp_path / "fams")])


def test_a_family_s_own_frame_skip_and_time_limit_reach_the_config_and_its_envs(monkeypatch):
    """Issue 46: ``Family.frame_skip`` was documented as the default ``env.frame_skip`` while the
    field was Atari's 4 whatever the family, so a family with a skip of 2 ran at 4 while its
    evaluation caps were computed for 2; and only the Atari builder applied
    ``max_episode_frames``. A throwaway family of CartPole-like envs (``Skip2/``, a skip of 2,
    1,000 frames an episode and an evaluation cap of 600 frames): a config that leaves the skip
    out resolves it to 2 and the caps to 300 steps; one that sets it keeps its own; and the episode
    cap ``common.episode_steps`` gives a ``gym.make`` builder of the family (every builder's,
    ``common.make_gym``) is 500 agent steps (333 at a skip of 3)."""
    throwaway = dataclasses.replace(
        classic.FAMILY, name="skip2", title="Skip2", namespace="Skip2/",
        example_id="Skip2/CartPole-v1", frame_skip=2, max_episode_frames=1000,
        eval_episode_frames=600, eval_total_frames=None, env_keys=frozenset({"frame_skip"}),
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
    assert common.episode_steps(config.env, throwaway) == 500
    assert common.episode_steps(own.env, throwaway) == 333
    unset = load_config(resolve_config_path("cartpole.yaml"))
    assert common.episode_steps(unset.env, classic.FAMILY) is None  # its registered limit
    assert unset.env.frame_skip == 4  # the field's default, which CartPole-like envs ignore
