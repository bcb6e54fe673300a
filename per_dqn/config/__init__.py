"""Experiment configuration: strict, frozen pydantic models and the only YAML reader.

A config file has six sections, each optional (every key has a default)::

    env:    which environment and how many copies step together
    agent:  the Q-network and the learning rule (Double/Dueling DQN, n-step, loss, optimiser)
    replay: the memory (a kind of the replay registry) and its PER parameters
    train:  the loop's budget and periods (env steps, updates, exploration, evaluation, logging)
    run:    seed, device and where run directories go
    checkpoint: how often the run saves a resumable checkpoint, how many it keeps, what it holds

``load_config`` reads a file, applies ``section.key=value`` overrides, validates, and on failure
raises ``ConfigError`` whose ``problems`` are one line each, naming the file and the dotted path
of the offending key, ready for the CLI to print.

This package's public surface is what it exports here; import from ``per_dqn.config``. Inside:
``models`` (the sections and ``Config``), ``loading`` (files, overrides, validation; the only
YAML reader), ``messages`` (``ConfigError`` and the one-line wording of every problem) and
``trust`` (the keys that name code, refused in a config read back from a run dir unless allowed).
"""

from per_dqn.config.loading import (
    SHIPPED_CONFIG_DIR,
    SHIPPED_CONFIG_PACKAGE,
    Override,
    config_from_data,
    load_config,
    parse_override,
    parse_yaml,
    resolve_config_path,
    shipped_config_names,
    validate_config,
)
from per_dqn.config.messages import ConfigError
from per_dqn.config.models import (
    ABLATE_DEFAULT_ARMS,
    INT64_MAX,
    MAX_EVAL_EPISODES,
    MAX_THREADS,
    REPLAY_KINDS,
    AgentConfig,
    CheckpointConfig,
    Config,
    EnvConfig,
    ReplayConfig,
    RunConfig,
    TrainConfig,
    env_ignores,
    kind_ignores,
    optimizer_ignores,
    unread_keys,
)
from per_dqn.config.trust import (
    CODE_KEYS,
    UntrustedCodeError,
    code_keys,
    refuse_untrusted_code,
)

__all__ = [
    "ABLATE_DEFAULT_ARMS",
    "CODE_KEYS",
    "INT64_MAX",
    "MAX_EVAL_EPISODES",
    "MAX_THREADS",
    "REPLAY_KINDS",
    "SHIPPED_CONFIG_DIR",
    "SHIPPED_CONFIG_PACKAGE",
    "AgentConfig",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "Override",
    "ReplayConfig",
    "RunConfig",
    "TrainConfig",
    "UntrustedCodeError",
    "code_keys",
    "config_from_data",
    "env_ignores",
    "kind_ignores",
    "load_config",
    "optimizer_ignores",
    "parse_override",
    "parse_yaml",
    "refuse_untrusted_code",
    "resolve_config_path",
    "shipped_config_names",
    "unread_keys",
    "validate_config",
]
