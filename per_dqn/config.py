"""Experiment configuration: strict, frozen pydantic models and the only YAML reader.

A config file has six sections, each optional (every key has a default)::

    env:    which environment and how many copies step together
    agent:  the Q-network and the learning rule (Double/Dueling DQN, n-step, loss, optimiser)
    replay: the memory (uniform, proportional or rank-based PER) and its PER parameters
    train:  the loop's budget and periods (env steps, updates, exploration, evaluation, logging)
    run:    seed, device and where run directories go
    checkpoint: how often the run saves a resumable checkpoint, how many it keeps, what it holds

``load_config`` reads a file, applies ``section.key=value`` overrides, validates, and on failure
raises ``ConfigError`` whose ``problems`` are one line each, naming the file and the dotted path
of the offending key, ready for the CLI to print.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from per_dqn.memory import KINDS

SHIPPED_CONFIG_PACKAGE = "per_dqn"
SHIPPED_CONFIG_DIR = "configs"

# The largest value an int key may take: the loop's counters, the memory's indices and the
# checkpoints hold int64, and a larger number would overflow one of them far from the config.
INT64_MAX = 2**63 - 1
# Threads beyond this are no machine's core count, and they are not harmless: torch segfaults
# at `set_num_threads(10**6)` and ale-py refuses (with a traceback) a count past 2**31 - 1.
MAX_THREADS = 1024
# Atari ids (``envs.ATARI_NAMESPACE``; the config may not import envs, which imports gymnasium).
ATARI_NAMESPACE = "ALE/"
# Atari evaluation caps in emulator frames: an episode's standard time limit, 30 minutes of play
# at 60 Hz (Machado et al., 2018), and Dopamine's evaluation phase (125,000 agent steps).
ATARI_EVAL_EPISODE_FRAMES = 108_000
ATARI_EVAL_TOTAL_FRAMES = 500_000
# Episodes in one evaluation: their returns are allocated up front, and a million episodes
# already outlast any training run.
MAX_EVAL_EPISODES = 1_000_000
# A user's Q-network factory: ``package.module:callable`` (the callable may be dotted).
_FACTORY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class _Section(BaseModel):
    # strict: a YAML `1.0` is not an int and `"true"` is not a bool; frozen: a run cannot mutate
    # the config it recorded in its run dir; allow_inf_nan=False: no float key has a use for
    # .inf or .nan, which would pass most bounds (`nan > 0` is False but so is `nan <= 0`) and
    # only show up hours later as a NaN loss or a loop that never ends.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _ints_fit_int64(cls, value: Any) -> Any:
        # Every int key, a future one included, without a bound of its own in each Field.
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool) and abs(item) > INT64_MAX:
                shown = (
                    f"[{', '.join(_got(v) for v in value)}]"
                    if isinstance(value, tuple)
                    else _got(item)
                )
                raise ValueError(f"must be <= {INT64_MAX} (a 64-bit integer), got {shown}")
        return value


class EnvConfig(_Section):
    """Environment selection. ``envs.py`` is the only place that turns this into wrappers.

    An ``ALE/<Game>-v5`` id is an Atari game run by ale-py's native vector env with the standard
    protocol (Machado et al., 2018; Mnih et al., 2015): up to ``noop_max`` no-op starts, frame
    skip with max-pooling of the last two frames, 84x84 grayscale, ``frame_stack`` frames per
    observation. The ``atari``-only keys below are ignored by other envs.

    Attributes:
        id: gymnasium id, e.g. ``CartPole-v1`` or ``ALE/Pong-v5``.
        num_envs: copies stepped together by one vector env; each step adds ``num_envs`` env steps.
        max_episode_steps: override of the id's registered time limit in env (agent) steps (None
            keeps it; Atari: 27,000, i.e. 108,000 frames).
        clip_rewards: learn from ``sign``-like rewards clipped to [-1, 1]; ``episode/return`` and
            evaluation always report the raw score.
        terminal_on_life_loss: (Atari) a lost life ends the learning transition (no bootstrap)
            while the game plays on; returns stay full-game scores.
        sticky_action_prob: (Atari) probability that the emulator repeats the previous action.
        noop_max: (Atari) up to this many no-op actions after each reset.
        frame_skip: (Atari) emulator frames per agent step.
        frame_stack: (Atari) frames per observation.
        full_action_space: (Atari) all 18 actions instead of the game's minimal set.
        env_threads: (Atari) ale-py's worker threads (0: one per env, capped by the cores);
            at most ``MAX_THREADS``, like ``num_envs``.
    """

    id: str = "CartPole-v1"
    num_envs: int = Field(1, ge=1, le=1024)
    # ale-py counts an episode's frames, max_episode_steps * frame_skip, in a 32-bit int: these
    # two caps keep the product below 2**31 - 1 (a larger one is a TypeError inside ale-py).
    max_episode_steps: int | None = Field(None, ge=1, le=10_000_000)
    clip_rewards: bool = False
    terminal_on_life_loss: bool = False
    sticky_action_prob: float = Field(0.25, ge=0, le=1)
    # No-ops run at every reset: past the default Atari time limit (27,000 agent steps) they would
    # end most episodes before the agent acts, and ale-py spins for minutes at 2**31 - 1.
    noop_max: int = Field(30, ge=0, le=27_000)
    # 1 to 8 in the literature; past 100 frames (1.7 s of play at 60 Hz) an action cannot steer
    # any Atari game.
    frame_skip: int = Field(4, ge=1, le=100)
    frame_stack: int = Field(4, ge=1, le=32)
    full_action_space: bool = False
    env_threads: int = Field(0, ge=0, le=MAX_THREADS)


class AgentConfig(_Section):
    """Q-network and learning rule.

    Attributes:
        hidden_sizes: widths of the MLP torso's hidden layers.
        dueling: dueling head, ``Q = V + A - mean(A)`` (Wang et al., 2016); else a linear head.
        double: Double-DQN target (van Hasselt et al., 2016); else the max over the target net.
        n_step: length of the multi-step return (1: one-step TD).
        gamma: discount per env step.
        learning_rate: Adam step size.
        learning_rate_end: None keeps ``learning_rate`` for the whole run; a value anneals the
            step size linearly from ``learning_rate`` at ``train.learning_starts`` to this at the
            last env step (as Stable-Baselines3's linear schedules do), which keeps a late
            update from undoing a learnt policy.
        adam_eps: Adam's epsilon (denominator guard), not exploration.
        loss: ``huber`` (delta 1) or ``mse``, each weighted per sample by the IS weights.
        grad_clip_norm: clip the global gradient norm to this (None: no clipping).
        target_update_interval: gradient steps between target-network updates.
        tau: weight of the online net in a target update; 1.0 is a hard copy.
        network: ``auto`` (Nature CNN for image stacks, MLP otherwise), ``mlp`` or
            ``nature_cnn``, whose fully connected width is ``hidden_sizes``; or a user's network
            as ``"package.module:factory"``, called as ``factory(obs_shape, num_actions)`` and
            returning a ``torch.nn.Module`` from float32 observations to Q-values (checked when
            the run is built; see docs/api.md).
        channels_last: NHWC activations in the CNN (faster on CPU, same values).
        precision: ``fp32`` (the default) or ``bf16``: the networks' forward passes under
            bfloat16 autocast (weights, optimiser, loss and targets stay float32). Faster where
            the hardware has bf16 matrix units (CPUs with AMX or AVX512-BF16, CUDA Ampere and
            later) and slower elsewhere; Q-values and TD errors (hence priorities) carry about
            three significant digits. README "Mixed precision" shows its effect on learning.
    """

    hidden_sizes: tuple[int, ...] = (128, 128)
    dueling: bool = True
    double: bool = True
    n_step: int = Field(1, ge=1, le=255)  # stored as uint8 in the memory
    gamma: float = Field(0.99, gt=0, le=1)
    learning_rate: float = Field(1e-3, gt=0)
    learning_rate_end: float | None = Field(None, ge=0)
    adam_eps: float = Field(1e-8, gt=0)
    loss: Literal["huber", "mse"] = "huber"
    grad_clip_norm: float | None = Field(10.0, gt=0)
    target_update_interval: int = Field(500, ge=1)
    tau: float = Field(1.0, gt=0, le=1)
    network: str = "auto"
    channels_last: bool = False
    precision: Literal["fp32", "bf16"] = "fp32"

    @field_validator("hidden_sizes", mode="before")
    @classmethod
    def _list_to_tuple(cls, value: Any) -> Any:
        # YAML has no tuple; strict mode would otherwise reject every list.
        return tuple(value) if isinstance(value, list) else value

    @field_validator("network")
    @classmethod
    def _network_name(cls, value: str) -> str:
        if value in ("auto", "mlp", "nature_cnn", "minatar_cnn") or _FACTORY.fullmatch(value):
            return value
        raise ValueError(
            "must be 'auto', 'mlp', 'nature_cnn', 'minatar_cnn' or 'package.module:factory', "
            f"got {value!r}"
        )

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("must list at least one hidden layer width")
        for width in value:
            if width < 1:
                raise ValueError(f"every width must be >= 1, got {list(value)}")
        return value


class ReplayConfig(_Section):
    """Replay memory (see ``per_dqn.memory`` for the formulas).

    Attributes:
        kind: ``uniform``, ``proportional`` (sum tree) or ``rank`` (rank-based heap).
        capacity: transitions kept.
        alpha: prioritisation exponent (proportional and rank; ignored by uniform).
        beta0: initial importance-sampling exponent, annealed linearly to 1.0 over the run.
        priority_eps: added to ``|delta|`` before the exponent (proportional only).
        td_error_clip: clip ``|delta|`` before prioritising (None: no clip).
        uniform_mix: share of each batch drawn uniformly (proportional only).
        weight_normalization: how proportional PER scales its IS weights: ``global`` (the
            paper's max over the memory) or ``batch`` (the max over the batch). Rank-based PER
            has no such choice to make: every batch holds one draw from the segment with the
            most ranks, whose weight is the largest any rank can get, so its batch maximum is
            always the global one.
        sort_interval: priority updates between full re-sorts of the rank heap (rank only).
        dedup_frames: keep stacked uint8 image observations one distinct frame at a time
            (about 7 KB a transition for Atari instead of 56 KB); vector observations are always
            stored whole.
        frame_slack: with ``dedup_frames``, spare frames for episode starts, as a fraction of
            ``capacity``.
    """

    kind: Literal[KINDS] = "proportional"  # type: ignore[valid-type]
    capacity: int = Field(100_000, ge=1)
    alpha: float = Field(0.6, ge=0)
    beta0: float = Field(0.4, ge=0, le=1)
    priority_eps: float = Field(1e-6, gt=0)
    td_error_clip: float | None = Field(None, gt=0)
    uniform_mix: float = Field(0.0, ge=0, lt=1)
    weight_normalization: Literal["global", "batch"] = "global"
    sort_interval: int = Field(1000, ge=1)
    dedup_frames: bool = True
    frame_slack: float = Field(0.02, gt=0, le=1)


class TrainConfig(_Section):
    """The loop's budget and periods; every ``*_steps`` and ``*_interval`` counts env steps
    unless its name says otherwise.

    Attributes:
        total_env_steps: env steps to train for (reset-only steps of the vector env not counted).
        learning_starts: env steps of pure collection before the first update; less than
            ``total_env_steps``, else the run would end without one.
        batch_size: transitions per gradient step.
        replay_period: env steps between updates (the paper's K).
        gradient_steps: gradient steps per update.
        epsilon_start: exploration epsilon at step 0.
        epsilon_end: exploration epsilon after the decay.
        epsilon_decay_steps: env steps of the linear decay.
        eval_interval: env steps between greedy evaluations (0: only the final one).
        eval_episodes: episodes per periodic evaluation.
        final_eval_episodes: episodes of the final evaluation.
        eval_epsilon: exploration epsilon during evaluation (0: greedy).
        eval_max_episode_steps: agent steps after which an evaluation episode is cut and counts
            as truncated (null: the env's own time limit only). Left out, it follows the env:
            Atari's standard 108,000 frames (27,000 agent steps at frame skip 4), none elsewhere
            (CartPole's time limit already ends an episode at 500).
        eval_max_total_steps: agent steps one evaluation may take in all; the episode underway
            is cut and no other starts (null: no budget). Left out: Atari 500,000 frames
            (125,000 agent steps at frame skip 4, Dopamine's evaluation phase), none elsewhere.
            An untrained agent that never serves in Breakout plays every episode to the time
            limit: without it, 30 such episodes took 17 minutes.
        log_interval: env steps between TensorBoard scalar writes.
    """

    total_env_steps: int = Field(50_000, ge=1)
    learning_starts: int = Field(1_000, ge=0)
    batch_size: int = Field(64, ge=1)
    replay_period: int = Field(4, ge=1)
    gradient_steps: int = Field(1, ge=1)
    epsilon_start: float = Field(1.0, ge=0, le=1)
    epsilon_end: float = Field(0.05, ge=0, le=1)
    epsilon_decay_steps: int = Field(10_000, ge=0)
    eval_interval: int = Field(10_000, ge=0)
    eval_episodes: int = Field(5, ge=1, le=MAX_EVAL_EPISODES)
    final_eval_episodes: int = Field(20, ge=1, le=MAX_EVAL_EPISODES)
    eval_epsilon: float = Field(0.0, ge=0, le=1)
    eval_max_episode_steps: int | None = Field(None, ge=1)
    eval_max_total_steps: int | None = Field(None, ge=1)
    log_interval: int = Field(1_000, ge=1)


class RunConfig(_Section):
    """Where and how a run executes.

    Attributes:
        seed: seeds torch, numpy, the envs and the memory; same seed, same config and CPU give
            the same curves.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        torch_threads: intra-op threads for torch on CPU; small MLPs are fastest on one. At
            most ``MAX_THREADS``.
        runs_root: parent of the default run directories.
        track: ``none``, or ``wandb`` to send the run's scalars, config and summary to Weights &
            Biases as well (the optional ``wandb`` extra; see ``per_dqn.tracking``). TensorBoard
            is always written.
    """

    seed: int = Field(0, ge=0, le=2**32 - 1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    torch_threads: int = Field(1, ge=1, le=MAX_THREADS)
    runs_root: str = "runs"
    track: Literal["none", "wandb"] = "none"


class CheckpointConfig(_Section):
    """Resumable checkpoints in ``RUN_DIR/checkpoints`` (see ``per_dqn.checkpoint``).

    Attributes:
        enabled: write checkpoints (off: only ``model.pt`` at the end, and no ``--resume``).
        interval_steps: env steps between checkpoints; one is always written at the end of the
            run (0: only that one). The default, 10,000, gives every shipped config several
            within its budget (CartPole's whole run is 50,000), so a Ctrl-C loses minutes, not
            the run; Atari's config sets its own (a checkpoint of a 1M memory is 7.3 GB).
        keep_last: checkpoints kept; older ones are deleted once a newer one is complete on disk.
        replay: include the replay memory with its priorities (about 7 KB per transition for
            deduplicated Atari frames); without it a resumed run refills an empty memory and is
            no longer the run it continues.
    """

    enabled: bool = True
    interval_steps: int = Field(10_000, ge=0)
    keep_last: int = Field(2, ge=1)
    replay: bool = True


@dataclass(frozen=True)
class _CrossProblem:
    """One cross-field problem: the key to blame, the message, and the other keys it involves
    (so that an override of one of those is named too)."""

    path: str
    message: str
    involves: tuple[str, ...] = ()


class _CrossFieldError(ValueError):
    """Several cross-section problems, each with its own dotted path."""

    def __init__(self, problems: list[_CrossProblem]) -> None:
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in problems))
        self.problems = problems


class Config(_Section):
    """A whole experiment: the six sections, checked against each other."""

    env: EnvConfig = EnvConfig()
    agent: AgentConfig = AgentConfig()
    replay: ReplayConfig = ReplayConfig()
    train: TrainConfig = TrainConfig()
    run: RunConfig = RunConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()

    @model_validator(mode="before")
    @classmethod
    def _eval_caps_follow_the_env(cls, data: Any) -> Any:
        """Fills the evaluation caps a file leaves out with its env family's defaults, so the
        resolved config (``config show``, the run dir's ``config.yaml``) states them."""
        if not isinstance(data, dict):
            return data
        env, train = data.get("env", {}), data.get("train", {})
        if not isinstance(env, dict) or not isinstance(train, dict):
            return data  # a wrong type: validation names it
        env_id, frame_skip = env.get("id", EnvConfig().id), env.get("frame_skip", 4)
        if not (isinstance(env_id, str) and env_id.startswith(ATARI_NAMESPACE)):
            return data
        if not isinstance(frame_skip, int) or isinstance(frame_skip, bool) or frame_skip < 1:
            return data
        defaults = {
            "eval_max_episode_steps": ATARI_EVAL_EPISODE_FRAMES // frame_skip,
            "eval_max_total_steps": ATARI_EVAL_TOTAL_FRAMES // frame_skip,
        }
        return {**data, "train": {**defaults, **train}}

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        problems = []
        train = self.train
        batch, starts, budget = train.batch_size, train.learning_starts, train.total_env_steps
        if starts < batch:
            problems.append(
                _CrossProblem(
                    "train.learning_starts",
                    f"must be >= train.batch_size ({batch}), got {starts}",
                    ("train.batch_size",),
                )
            )
        if starts >= budget:
            # The first update comes at env step learning_starts at the earliest: such a run
            # would spend its whole budget collecting and exit 0 with an untrained network.
            problems.append(
                _CrossProblem(
                    "train.learning_starts",
                    f"must be < train.total_env_steps ({budget}), got {starts}: the run would "
                    "end before its first update; lower train.learning_starts or raise "
                    "train.total_env_steps",
                    ("train.total_env_steps",),
                )
            )
        if self.replay.capacity < batch:
            problems.append(
                _CrossProblem(
                    "replay.capacity",
                    f"must be >= train.batch_size ({batch}), got {self.replay.capacity}",
                    ("train.batch_size",),
                )
            )
        if problems:
            raise _CrossFieldError(problems)
        return self

    def to_yaml(self) -> str:
        """The resolved config as YAML, loadable again by ``load_config``."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


# --- reading --------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A config that cannot be used; ``problems`` holds one printable line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Override:
    """One ``section.key=value`` change applied before validation.

    Attributes:
        path: dotted path, e.g. ``replay.alpha``.
        value: the already typed value.
        source: how the user gave it, for error messages (``--set``, ``--seed``, ...).
    """

    path: str
    value: Any
    source: str = "--set"


def parse_override(text: str) -> Override:
    """Parses ``section.key=value``; the value is read as YAML (``3`` int, ``1e-3`` float, ...).

    Raises:
        ConfigError: no ``=``, an empty key, or a value that is not valid YAML.
    """
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or any(not part for part in path.split(".")):
        raise ConfigError([f"--set {text!r}: expected section.key=value"])
    try:
        value = yaml.load(raw, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([f"--set {text!r}: value is not valid YAML ({_one_line(exc)})"]) from None
    return Override(path, value)


def shipped_config_names() -> list[str]:
    """File names of the configs that ship with the package, sorted."""
    root = resources.files(SHIPPED_CONFIG_PACKAGE) / SHIPPED_CONFIG_DIR
    return sorted(p.name for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def resolve_config_path(name_or_path: str) -> Path:
    """Finds a config: an existing file as given, else a bare name among the shipped configs.

    ``cartpole.yaml`` and ``cartpole`` both name the shipped ``cartpole.yaml`` when no such file
    exists in the working directory, so ``per-dqn train --config cartpole.yaml`` works from any
    directory after install.

    Raises:
        ConfigError: neither a file nor a shipped config; the message lists the shipped names.
    """
    given = Path(name_or_path)
    if given.is_file():
        return given
    if given.name == name_or_path:  # a bare name, not a path
        root = resources.files(SHIPPED_CONFIG_PACKAGE) / SHIPPED_CONFIG_DIR
        for candidate in (name_or_path, f"{name_or_path}.yaml"):
            shipped = root / candidate
            if shipped.is_file():
                return Path(str(shipped))
    shipped_names = ", ".join(shipped_config_names()) or "none"
    raise ConfigError(
        [f"{name_or_path}: no such config file (the shipped configs are: {shipped_names})"]
    )


def load_config(
    path: str | Path, overrides: Iterable[Override] = (), display_name: str | None = None
) -> Config:
    """Reads, overrides and validates a config file.

    Args:
        path: the YAML file (see ``resolve_config_path`` for bare names).
        overrides: changes applied to the parsed YAML before validation, so they are validated
            exactly like the file's own values.
        display_name: how to name the file in error messages (defaults to ``path``).

    Raises:
        ConfigError: unreadable file, YAML syntax, unknown keys, wrong types, out-of-range or
            inconsistent values; one problem per line, ``<file>: <dotted.path>: <what is wrong>``.
    """
    path = Path(path)
    label = display_name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{label}: no such config file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{label}: cannot read ({_one_line(exc)})"]) from None
    return config_from_data(parse_yaml(text, label), label, overrides)


def config_from_data(
    data: dict[str, Any], label: str, overrides: Iterable[Override] = ()
) -> Config:
    """Applies ``overrides`` to parsed sections (a dict, changed in place) and validates the
    result, exactly as ``load_config`` does a file's; ``label`` names it in errors.

    Raises:
        ConfigError: see ``load_config``.
    """
    overrides = list(overrides)
    problems = [f"{label}: {msg}" for msg in _apply_overrides(data, overrides)]
    if problems:
        raise ConfigError(problems)
    return validate_config(data, label, overrides)


def parse_yaml(text: str, label: str) -> dict[str, Any]:
    """Parses config YAML into a dict (an empty file is an empty dict).

    Raises:
        ConfigError: a syntax error, a duplicate key, or a top level that is not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: {_yaml_error_line(exc)}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{label}: the top level must be a mapping of sections, got {type(data).__name__}"]
        )
    return data


def validate_config(data: dict[str, Any], label: str, overrides: Sequence[Override] = ()) -> Config:
    """Validates parsed YAML; see ``load_config`` for the error format."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            for path, msg, involves in _describe(error):
                source = _override_source(path, overrides)
                if source:
                    msg += f" (set by {source})"
                for other in involves:
                    other_source = _override_source(other, overrides)
                    if other_source and other_source != source:
                        msg += f" ({other} set by {other_source})"
                problems.append(f"{label}: {path}: {msg}" if path else f"{label}: {msg}")
        raise ConfigError(problems) from None


def _override_source(path: str, overrides: Sequence[Override]) -> str | None:
    """The flag of the last override that wrote at, above or below ``path``, if any."""
    for override in reversed(overrides):
        shorter, longer = sorted((path, override.path), key=len)
        if longer == shorter or longer.startswith((shorter + ".", shorter + "[")):
            return override.source
    return None


# --- YAML details ---------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and reads ``1e-3`` as a float.

    PyYAML follows YAML 1.1, where a float needs a dot, so ``learning_rate: 1e-3`` would arrive as
    the string "1e-3" and fail the strict float check; YAML 1.2 (and every user) reads a float.
    """


_StrictLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


class _NonFiniteFloat(float):
    """A YAML float that is inf or nan, with the text it was read from.

    ``1e400`` overflows to inf in Python; keeping ``text`` lets the error line show what the user
    wrote rather than an ``inf`` they never typed. The models refuse every non-finite float, so
    an instance never reaches a validated config.
    """

    text: str

    def __new__(cls, value: float, text: str) -> _NonFiniteFloat:
        self = super().__new__(cls, value)
        self.text = text
        return self


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    value = loader.construct_yaml_float(node)
    if math.isfinite(value):
        return value
    return _NonFiniteFloat(value, str(node.value))


_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _construct_mapping_no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_no_duplicates
)


def _yaml_error_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}invalid YAML: {_one_line(problem)}"


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


def _apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> list[str]:
    """Writes each override into ``data`` in place; returns a message per override that clashes."""
    problems = []
    for override in overrides:
        *parents, leaf = override.path.split(".")
        node = data
        for depth, key in enumerate(parents):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: depth + 1])
                problems.append(
                    f"{where}: is not a section, cannot set {override.path} "
                    f"(set by {override.source})"
                )
                break
            node = child
        else:
            node[leaf] = override.value
    return problems


# --- turning pydantic errors into one line each -----------------------------------------------


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _num(value: Any) -> str:
    """A bound as written in the model (``0`` rather than ``0.0``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _got(value: Any) -> str:
    """``value`` as the user typed it in YAML (``true``, ``null``, ``'abc'``, ``1e400``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, _NonFiniteFloat):
        return value.text
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    if _is_int(value) and len(str(value)) > _MAX_SHOWN_DIGITS:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, str | int | float):
        return repr(value)
    return f"a {type(value).__name__}"


# Longer ints are summarised: a 400-digit echo would bury the rest of the line.
_MAX_SHOWN_DIGITS = 30


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}

_TYPE_NAMES = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "tuple_type": "a list",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "dict_type": "a mapping of keys",
}


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model class whose field ``loc[-1]`` would be, or None if ``loc`` leaves the models."""
    model: type[BaseModel] = Config
    for key in loc[:-1]:
        field = model.model_fields.get(key) if isinstance(key, str) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _describe(error: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(dotted path, message, other keys involved)`` for one pydantic error (a cross check may
    give several)."""
    ctx = error.get("ctx") or {}
    if error["type"] == "value_error" and isinstance(ctx.get("error"), _CrossFieldError):
        return [(p.path, p.message, p.involves) for p in ctx["error"].problems]
    return [(*problem, ()) for problem in _describe_field(error)]


def _describe_field(error: dict[str, Any]) -> list[tuple[str, str]]:
    """``(dotted path, message)`` for a pydantic error about one key."""
    kind, loc, value = error["type"], tuple(error["loc"]), error.get("input")
    ctx = error.get("ctx") or {}
    path = _dotted(loc)
    if kind == "extra_forbidden":
        model = _model_at(loc)
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`?" if close else f"valid keys: {', '.join(valid)}"
        return [(path, f"unknown key; {hint}")]
    if kind == "missing":
        return [(path, "required key is missing")]
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return [(path, f"must be {op} {_num(ctx[key])}, got {_got(value)}")]
    if kind == "literal_error":
        return [(path, f"must be one of {ctx['expected']}, got {_got(value)}")]
    if kind == "finite_number" or (kind == "float_type" and _is_int(value)):
        # An int too large for a float (YAML `1` followed by 400 zeros) is as unusable as 1e400.
        return [(path, f"must be a finite number, got {_got(value)}")]
    if kind in _TYPE_NAMES:
        return [(path, f"must be {_TYPE_NAMES[kind]}, got {_got(value)}")]
    if kind == "value_error":
        return [(path, str(ctx.get("error", error["msg"])))]
    return [(path, f"{error['msg'][0].lower()}{error['msg'][1:]}, got {_got(value)}")]
