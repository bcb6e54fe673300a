"""The config's models: strict, frozen pydantic sections and the ``Config`` that checks them
against each other.

One model per section of a config file (``env``, ``agent``, ``replay``, ``train``, ``run``,
``checkpoint``); each field's docstring entry says what it means and its ``Field`` its bounds.
Reading files and wording errors are ``loading``'s and ``messages``' concerns.

One module though past 500 lines: the config's sections and their cross-field checks are one schema,
validated as one.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from per_dqn.agent.objectives import objective as _objective
from per_dqn.agent.signals import SIGNALS
from per_dqn.config.messages import CrossFieldError, CrossProblem, got
from per_dqn.envs import families
from per_dqn.memory import KINDS
from per_dqn.memory.kinds import DEFAULT_ARMS
from per_dqn.memory.kinds import REPLAY_KINDS as _KIND_ENTRIES

# The values `replay.kind` takes: the memory's registry, in its order (the CLI's --replay choices).
REPLAY_KINDS = KINDS
# The kinds `per-dqn ablate` compares when --replay is not given (the registry marks them).
ABLATE_DEFAULT_ARMS = DEFAULT_ARMS
# The values `replay.priority_from` takes: the learner's priority signals, in registry order.
PRIORITY_FROM = SIGNALS
# The largest value an int key may take: the loop's counters, the memory's indices and the
# checkpoints hold int64, and a larger number would overflow one of them far from the config.
INT64_MAX = 2**63 - 1
# Threads beyond this are no machine's core count, and they are not harmless: torch segfaults
# at `set_num_threads(10**6)` and ale-py refuses (with a traceback) a count past 2**31 - 1.
MAX_THREADS = 1024
# Actors of one distributed run: Ape-X's largest setup had 360; each is a process of its own.
MAX_ACTORS = 4096
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
                    f"[{', '.join(got(v) for v in value)}]"
                    if isinstance(value, tuple)
                    else got(item)
                )
                raise ValueError(f"must be <= {INT64_MAX} (a 64-bit integer), got {shown}")
        return value


class EnvConfig(_Section):
    """Environment selection. ``envs.py`` is the only place that turns this into wrappers.

    An ``ALE/<Game>-v5`` id is an Atari game run by ale-py's native vector env with the standard
    protocol (Machado et al., 2018; Mnih et al., 2015): up to ``noop_max`` no-op starts, frame
    skip with max-pooling of the last two frames, 84x84 grayscale, ``frame_stack`` frames per
    observation. The ``atari``-only keys below are ignored by other envs (``config show`` marks
    them, and a ``--set`` of one is refused: ``families.ignored_env_keys``).

    Attributes:
        id: gymnasium id with its version, e.g. ``CartPole-v1`` or ``ALE/Pong-v5`` (``CartPole``
            alone is refused, naming the versioned id: runs of one env name it one way).
        num_envs: copies stepped together by one vector env; each step adds ``num_envs`` env steps.
        max_episode_steps: override of the id's registered time limit in env (agent) steps (None
            keeps it; Atari: 27,000, i.e. 108,000 frames).
        clip_rewards: learn from ``sign``-like rewards clipped to [-1, 1]; ``episode/return`` and
            evaluation always report the raw score.
        terminal_on_life_loss: (Atari, and a gymnasium id whose info reports lives) a lost life
            ends the learning transition (no bootstrap) while the game plays on; returns stay
            full-game scores.
        sticky_action_prob: (Atari) probability that the emulator repeats the previous action.
        noop_max: (Atari) up to this many no-op actions after each reset.
        frame_skip: (Atari) emulator frames per agent step; left out, the env family's
            (``Family.frame_skip``).
        frame_stack: (Atari) frames per observation.
        full_action_space: (Atari, MinAtar) every action of the console or of MinAtar's
            common set (Atari 18, MinAtar 6) instead of the game's minimal set. Off, an id keeps
            its registered set (MinAtar's ``-v0`` ids have the full one, ``-v1`` the minimal).
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
    frame_skip: int = Field(families.named("atari").frame_skip, ge=1, le=100)
    frame_stack: int = Field(4, ge=1, le=32)
    full_action_space: bool = False
    env_threads: int = Field(0, ge=0, le=MAX_THREADS)


class AgentConfig(_Section):
    """Q-network and learning rule.

    Attributes:
        hidden_sizes: widths of the MLP torso's hidden layers, or the CNN's one fully connected
            layer; ``[]``: none (the head on the observation or on the convolutions, as
            Dopamine's MinAtar network has it).
        dueling: dueling head, ``Q = V + A - mean(A)`` (Wang et al., 2016); else a linear head.
        double: Double-DQN target (van Hasselt et al., 2016); else the max over the target net.
        n_step: length of the multi-step return (1: one-step TD).
        gamma: discount per env step.
        learning_rate: the optimiser's step size.
        learning_rate_end: None keeps ``learning_rate`` for the whole run; a value anneals the
            step size linearly from ``learning_rate`` at ``train.learning_starts`` to this at the
            last env step (as Stable-Baselines3's linear schedules do), which keeps a late
            update from undoing a learnt policy.
        optimizer: ``adam`` (torch's fused kernel) or ``rmsprop`` (``torch.optim.RMSprop``'s
            update: ``v <- alpha v + (1 - alpha) g^2``, centred by the mean gradient when
            ``rmsprop_centered``, step ``lr g / (sqrt(v - m^2) + eps)``; the MinAtar paper's
            optimiser).
        adam_eps: Adam's epsilon (denominator guard), not exploration (adam only).
        rmsprop_alpha: RMSprop's decay of the squared-gradient average (rmsprop only).
        rmsprop_eps: RMSprop's denominator guard, added outside the square root (rmsprop only).
        rmsprop_centered: subtract the squared mean gradient from RMSprop's average (rmsprop
            only).
        loss: ``huber`` (delta 1) or ``mse``, each weighted per sample by the IS weights.
        grad_clip_norm: clip the global gradient norm to this (None: no clipping).
        target_update_interval: gradient steps between target-network updates.
        tau: weight of the online net in a target update; 1.0 is a hard copy.
        init: the networks' initial weights: ``torch`` (PyTorch's layer defaults, Kaiming
            uniform) or ``xavier_uniform`` (Glorot uniform weights and zero biases, Flax's
            ``xavier_uniform`` as Dopamine's MinAtar network uses it).
        conv_padding: the MinAtar CNN's convolution padding: ``valid`` (the MinAtar paper's
            PyTorch network: 10x10 layers give 8x8 maps) or ``same`` (Dopamine's Flax network:
            10x10 maps); other networks take ``valid`` only.
        network: ``auto`` (the env family's default: the Nature CNN for Atari, the MinAtar
            CNN for MinAtar; elsewhere the Nature CNN for image stacks and an MLP otherwise),
            ``mlp``, ``nature_cnn`` or ``minatar_cnn``, whose fully connected width is
            ``hidden_sizes``; or a user's network as ``"package.module:factory"``, called as
            ``factory(obs_shape, num_actions)`` and returning a ``torch.nn.Module`` from float32
            observations to Q-values (checked when the run is built; see docs/api.md).
        channels_last: NHWC activations in the CNN (faster on CPU, same values).
        precision: ``fp32`` (the default) or ``bf16``: the networks' forward passes under
            bfloat16 autocast (weights, optimiser, loss and targets stay float32). Faster where
            the hardware has bf16 matrix units (CPUs with AMX or AVX512-BF16, CUDA Ampere and
            later) and slower elsewhere; Q-values and TD errors (hence priorities) carry about
            three significant digits. docs/guides/atari.md, "Mixed precision", shows its effect on
            learning.
    """

    hidden_sizes: tuple[int, ...] = (128, 128)
    dueling: bool = True
    double: bool = True
    n_step: int = Field(1, ge=1, le=255)  # stored as uint8 in the memory
    gamma: float = Field(0.99, gt=0, le=1)
    learning_rate: float = Field(1e-3, gt=0)
    learning_rate_end: float | None = Field(None, ge=0)
    optimizer: Literal["adam", "rmsprop"] = "adam"
    adam_eps: float = Field(1e-8, gt=0)
    rmsprop_alpha: float = Field(0.95, ge=0, lt=1)
    rmsprop_eps: float = Field(0.01, gt=0)
    rmsprop_centered: bool = True
    loss: Literal["huber", "mse"] = "huber"
    grad_clip_norm: float | None = Field(10.0, gt=0)
    target_update_interval: int = Field(500, ge=1)
    tau: float = Field(1.0, gt=0, le=1)
    init: Literal["torch", "xavier_uniform"] = "torch"
    conv_padding: Literal["valid", "same"] = "valid"
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
        names = (families.AUTO_NETWORK, *families.NETWORK_NAMES)
        if value in names or _FACTORY.fullmatch(value):
            return value
        listed = ", ".join(repr(name) for name in names)
        raise ValueError(f"must be {listed} or 'package.module:factory', got {value!r}")

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for width in value:
            if width < 1:
                raise ValueError(f"every width must be >= 1, got {list(value)}")
        return value


class ReplayConfig(_Section):
    """Replay memory (see ``per_dqn.memory`` for the formulas). A kind reads its own settings
    (``per_dqn.memory.REPLAY_KINDS``) and no other kind's.

    Attributes:
        kind: the replay kind, one of the registry's (``per_dqn.memory.KINDS``).
        capacity: transitions kept.
        alpha: prioritisation exponent.
        beta0: initial importance-sampling exponent, annealed linearly to ``beta_end`` over the
            run (or over ``beta_anneal_steps``).
        beta_end: the importance-sampling exponent at the end of the anneal, the run's last step
            unless ``beta_anneal_steps`` says otherwise (the paper's 1.0); equal to ``beta0``,
            beta is fixed (Dopamine's PER: 0.5).
        beta_anneal_steps: env steps, from step 0, over which beta moves from ``beta0`` to
            ``beta_end`` (null: the whole run, ``train.total_env_steps``, the paper's). A run
            shorter than that stops part-way along the schedule, so that a short run follows the
            first steps of a longer published one (reducible-loss anneals over its 5M frames:
            at 1M, beta is 0.52, not 1).
        priority_from: what a transition's priority is made of: ``td_error`` (the paper's
            ``|delta|``) or ``loss`` (its per-sample loss, Huber or squared as ``agent.loss``
            says; Dopamine's PER, whose priority ``sqrt(loss + 1e-10)`` is ``alpha`` 0.5 and
            ``priority_eps`` 1e-10 here). ``td_error_clip`` then clips the loss.
        priority_eps: added to ``|delta|`` before the exponent.
        td_error_clip: clip ``|delta|`` before prioritising (None: no clip).
        uniform_mix: share of each batch drawn uniformly.
        weight_normalization: how proportional PER scales its IS weights: ``global`` (the
            paper's max over the memory; over the batch's shard, with ``run.shards``) or
            ``batch`` (the max over the batch). Rank-based PER
            has no such choice to make: every batch holds one draw from the segment with the
            most ranks, whose weight is the largest any rank can get, so its batch maximum is
            always the global one.
        sort_interval: priority updates between full re-sorts of the rank heap.
        min_priority: LAP's and PAL's ``k``: the floor of ``|delta|`` in LAP's priority
            ``max(|delta|, k)^alpha`` and the threshold of their losses (the paper's 1;
            sfujim/LAP-PAL's Atari setting 0.01).
        large_batch: LaBER's ``m``: each step draws ``m`` times ``train.batch_size`` transitions
            uniformly and learns from ``train.batch_size`` of them (the authors' Atari agent: 4).
        initial_priority: how a new transition enters a memory that keeps priorities: ``max``
            (the paper's: at the largest priority so far, so that it is seen at least once) or
            ``actor`` (a distributed run's, Ape-X's: at the priority of its ``|delta|`` under the
            weights its actor played with); null: ``actor`` in a distributed run of a kind that
            prioritises by ``|delta|``, ``max`` otherwise. With ``max`` a distributed run's
            actors compute no priorities.
        dedup_frames: keep stacked uint8 image observations one distinct frame at a time
            (about 7 KB a transition for Atari instead of 56 KB); vector observations are always
            stored whole.
        frame_slack: with ``dedup_frames``, spare frames for episode starts, as a fraction of
            ``capacity``.
    """

    kind: Literal[REPLAY_KINDS] = "proportional"  # type: ignore[valid-type]
    capacity: int = Field(100_000, ge=1)
    # The PER paper's range: 0 is uniform, 1 full prioritization (past 1, priorities of a few
    # powers of ten over- and underflow: a run stopped by OverflowError, or IS weights of 0).
    alpha: float = Field(0.6, ge=0, le=1)
    beta0: float = Field(0.4, ge=0, le=1)
    beta_end: float = Field(1.0, ge=0, le=1)
    beta_anneal_steps: int | None = Field(None, ge=1)
    priority_from: Literal[PRIORITY_FROM] = "td_error"  # type: ignore[valid-type]
    priority_eps: float = Field(1e-6, gt=0, le=1)
    td_error_clip: float | None = Field(None, gt=0)
    uniform_mix: float = Field(0.0, ge=0, lt=1)
    weight_normalization: Literal["global", "batch"] = "global"
    sort_interval: int = Field(1000, ge=1)
    # LAP's and PAL's floor; its square must stay inside float32 in their losses.
    min_priority: float = Field(1.0, gt=0, le=1e6)
    # LaBER's m: the learner scores m x batch_size transitions an update.
    large_batch: int = Field(4, ge=1, le=1024)
    initial_priority: Literal["max", "actor"] | None = None
    dedup_frames: bool = True
    frame_slack: float = Field(0.02, gt=0, le=1)


# Keys every replay kind reads (what storage holds its transitions, and how many).
_EVERY_KIND_READS = ("kind", "capacity", "dedup_frames", "frame_slack")
# The importance-sampling schedule, read by a kind whose weights depend on beta.
_BETA_KEYS = ("beta0", "beta_end", "beta_anneal_steps")


def kind_ignores(kind: str) -> frozenset[str]:
    """The dotted keys a run of replay ``kind`` does not read: each ``replay.*`` key that is not
    its sampler's or its objective's setting, its beta schedule (a weighted kind) or
    ``priority_from`` (a kind whose signal the config chooses), and ``agent.loss`` where its
    objective has a loss of its own (LAP, PAL). Setting one of them with the kind is refused
    (``loading.config_from_data``). Nothing for an unknown ``kind`` (validation names it)."""
    entry = _KIND_ENTRIES.get(kind)
    if entry is None:
        return frozenset()
    learner = _objective(entry.objective)
    reads = {*_EVERY_KIND_READS, *entry.settings, *learner.settings}
    if entry.weighted:
        reads.update(_BETA_KEYS)
    if entry.signal is None:
        reads.add("priority_from")
    if entry.keeps_priorities:
        reads.add("initial_priority")
    ignored = {f"replay.{key}" for key in ReplayConfig.model_fields if key not in reads}
    if not learner.reads_loss:
        ignored.add("agent.loss")
    return frozenset(ignored)


def env_ignores(env_id: str) -> frozenset[str]:
    """The dotted ``env.*`` keys ``env_id``'s family does not read (``families.ignored_env_keys``):
    setting one with ``--set`` is refused (``loading.config_from_data``)."""
    return frozenset(f"env.{key}" for key in families.ignored_env_keys(env_id))


# The agent keys only one optimiser reads (``agent.optim.make_optimizer``).
OPTIMIZER_KEYS = {
    "adam": ("adam_eps",),
    "rmsprop": ("rmsprop_alpha", "rmsprop_eps", "rmsprop_centered"),
}


def optimizer_ignores(optimizer: str) -> frozenset[str]:
    """The dotted ``agent.*`` keys a run under ``optimizer`` does not read: the other
    optimisers' own settings (``OPTIMIZER_KEYS``); setting one with ``--set`` is refused
    (``loading.config_from_data``). ``agent.adam_eps`` beside ``rmsprop`` changed nothing."""
    return frozenset(
        f"agent.{key}" for name, keys in OPTIMIZER_KEYS.items() if name != optimizer for key in keys
    )


def unread_keys(config: Config) -> dict[str, str]:
    """Each dotted key a run of ``config`` does not read, mapped to what does not read it: its
    replay kind (``kind_ignores``: "replay kind 'laber'"), its env's family (``env_ignores``:
    "CartPole-like envs") or its optimiser (``optimizer_ignores``: "optimizer 'rmsprop'"). The
    three sets hold different keys. The family is named, not the env id: an id may hold any
    character, and the name goes into one-line errors and ``config show``'s YAML comments."""
    kind = f"replay kind {config.replay.kind!r}"
    unread = dict.fromkeys(kind_ignores(config.replay.kind), kind)
    family = f"{families.of(config.env.id).title} envs"
    unread.update((key, family) for key in env_ignores(config.env.id))
    optimizer = f"optimizer {config.agent.optimizer!r}"
    unread.update((key, optimizer) for key in optimizer_ignores(config.agent.optimizer))
    return unread


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
        epsilon_decay_from: where the decay starts: ``start`` (env step 0) or
            ``learning_starts`` (after the warm-up, as Dopamine and the MinAtar paper do; epsilon
            stays at ``epsilon_start`` until then).
        eval_interval: env steps between evaluations (0: only the final one).
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
    # Per replay period; a stop is honoured between env steps, so a huge count could not stop.
    gradient_steps: int = Field(1, ge=1, le=1000)
    epsilon_start: float = Field(1.0, ge=0, le=1)
    epsilon_end: float = Field(0.05, ge=0, le=1)
    epsilon_decay_steps: int = Field(10_000, ge=0)
    epsilon_decay_from: Literal["start", "learning_starts"] = "start"
    eval_interval: int = Field(10_000, ge=0)
    eval_episodes: int = Field(5, ge=1, le=MAX_EVAL_EPISODES)
    final_eval_episodes: int = Field(20, ge=1, le=MAX_EVAL_EPISODES)
    eval_epsilon: float = Field(0.0, ge=0, le=1)
    eval_max_episode_steps: int | None = Field(None, ge=1)
    eval_max_total_steps: int | None = Field(None, ge=1)
    log_interval: int = Field(1_000, ge=1)

    @property
    def evaluations(self) -> int:
        """The points of the run's evaluation curve: a periodic evaluation at each multiple of
        ``eval_interval`` below the budget, and the final one at its end."""
        if self.eval_interval == 0:
            return 1
        return -(-self.total_env_steps // self.eval_interval)

    def schedule_warning(self) -> str | None:
        """One line when the budget gives fewer than 2 evaluations, so that a report's curves
        are single points and its AUC is the final score (None when it gives more)."""
        points = self.evaluations
        if points >= 2:
            return None
        suggest = -(-self.total_env_steps // 10)  # ceil: at most 10 points
        then = self.model_copy(update={"eval_interval": suggest}).evaluations
        advice = f" (train.eval_interval={suggest} gives {then})" if then >= 2 else ""
        return (
            f"train.total_env_steps {self.total_env_steps:,} with train.eval_interval "
            f"{self.eval_interval:,} gives {points} evaluation: the curves are one point and "
            f"the AUC is the final score{advice}"
        )


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
            Biases as well (the optional ``wandb`` extra; see ``per_dqn.logs.tracking``).
            TensorBoard is always written.
        actors: None (the default) for a run in one process; N >= 1 for an Ape-X run
            (``per_dqn.distributed``, ``train --actors N``): N actor processes on a Ray cluster
            (the optional ``ray`` extra) feed this process's learner and replay memory.
        shards: None (the default): a distributed run's replay memory lives in its learner's
            process; K >= 1 (``train --shards K``, with actors, K at most their number): in K
            Ray actor processes, each holding ``replay.capacity / K`` transitions, fed by the
            actors directly (actor ``i`` by shard ``i % K``) and sampled ahead by the learner.
        actor_epsilon: the top of a distributed run's epsilon ladder, where actor ``i`` of ``N``
            explores at ``actor_epsilon ** (1 + actor_epsilon_alpha * i / (N - 1))``; None (the
            default): Ape-X's 0.4 (Horgan et al., 2018). With actors only.
        actor_epsilon_alpha: the ladder's exponent; None (the default): Ape-X's 7, which with
            two actors leaves only the ladder's ends, 0.4 and 0.4 ** 8. With actors only.
    """

    seed: int = Field(0, ge=0, le=2**32 - 1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    torch_threads: int = Field(1, ge=1, le=MAX_THREADS)
    runs_root: str = "runs"
    track: Literal["none", "wandb"] = "none"
    actors: int | None = Field(None, ge=1, le=MAX_ACTORS)
    shards: int | None = Field(None, ge=1, le=MAX_ACTORS)
    actor_epsilon: float | None = Field(None, gt=0.0, le=1.0)
    actor_epsilon_alpha: float | None = Field(None, ge=0.0, le=100.0)


class CheckpointConfig(_Section):
    """Resumable checkpoints in ``RUN_DIR/checkpoints`` (see ``per_dqn.rundir.checkpoint``).

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
        """Fills the frame skip and the evaluation caps a file leaves out with its env family's
        defaults (its caps in emulator frames over the frame skip; see
        ``per_dqn.envs.families``), so the resolved config (``config show``, the run dir's
        ``config.yaml``) states them."""
        if not isinstance(data, dict):
            return data
        env, train = data.get("env", {}), data.get("train", {})
        if not isinstance(env, dict) or not isinstance(train, dict):
            return data  # a wrong type: validation names it
        env_id = env.get("id", EnvConfig().id)
        if not isinstance(env_id, str):
            return data
        family = families.of(env_id)
        if family.frame_skip is not None and "frame_skip" not in env:
            # A family's own frame skip when the file leaves it out (the field's default is
            # Atari's, which the families that step once per agent step ignore).
            env = {**env, "frame_skip": family.frame_skip}
            data = {**data, "env": env}
        caps = {
            "eval_max_episode_steps": family.eval_episode_frames,
            "eval_max_total_steps": family.eval_total_frames,
        }
        if all(frames is None for frames in caps.values()):
            return data
        frame_skip = env.get("frame_skip", family.frame_skip)
        if not isinstance(frame_skip, int) or isinstance(frame_skip, bool) or frame_skip < 1:
            return data
        defaults = {key: frames // frame_skip for key, frames in caps.items() if frames is not None}
        return {**data, "train": {**defaults, **train}}

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        problems = []
        train = self.train
        batch, starts, budget = train.batch_size, train.learning_starts, train.total_env_steps
        if starts < batch:
            problems.append(
                CrossProblem(
                    "train.learning_starts",
                    f"must be >= train.batch_size ({batch}), got {starts}",
                    ("train.batch_size",),
                )
            )
        if starts >= budget:
            # The first update comes at env step learning_starts at the earliest: such a run
            # would spend its whole budget collecting and exit 0 with an untrained network.
            problems.append(
                CrossProblem(
                    "train.learning_starts",
                    f"must be < train.total_env_steps ({budget}), got {starts}: the run would "
                    "end before its first update; lower train.learning_starts or raise "
                    "train.total_env_steps",
                    ("train.total_env_steps",),
                )
            )
        vector_steps = -(-budget // self.env.num_envs)  # the loop steps all envs at once
        if vector_steps <= self.agent.n_step:
            # No n-step window fills before the budget ends (only an episode that ends sooner
            # stores anything): such a run exits 0 with an untrained network.
            problems.append(
                CrossProblem(
                    "train.total_env_steps",
                    f"must give each of env.num_envs ({self.env.num_envs}) envs more than "
                    f"agent.n_step ({self.agent.n_step}) steps, got {budget} "
                    f"({vector_steps} each): no n-step window would fill; raise "
                    "train.total_env_steps or lower env.num_envs",
                    ("env.num_envs", "agent.n_step"),
                )
            )
        if self.replay.capacity < batch:
            problems.append(
                CrossProblem(
                    "replay.capacity",
                    f"must be >= train.batch_size ({batch}), got {self.replay.capacity}",
                    ("train.batch_size",),
                )
            )
        network = self.agent.network
        if network == families.AUTO_NETWORK:
            network = families.of(self.env.id).default_network
        if self.agent.conv_padding != "valid" and network != "minatar_cnn":
            problems.append(
                CrossProblem(
                    "agent.conv_padding",
                    f"must be 'valid' for network {network!r} (only 'minatar_cnn' takes "
                    f"'same'), got {self.agent.conv_padding!r}",
                    ("agent.network", "env.id"),
                )
            )
        if self.agent.init != "torch" and ":" in self.agent.network:
            problems.append(
                CrossProblem(
                    "agent.init",
                    f"must be 'torch' for a network from {self.agent.network!r} (it initialises "
                    f"its own weights), got {self.agent.init!r}",
                    ("agent.network",),
                )
            )
        for key in ("actor_epsilon", "actor_epsilon_alpha"):
            value = getattr(self.run, key)
            if value is not None and self.run.actors is None:
                problems.append(
                    CrossProblem(
                        f"run.{key}",
                        f"must be null without actors (the epsilon ladder of a distributed run: "
                        f"run.actors, train --actors N), got {value}",
                        ("run.actors",),
                    )
                )
        shards = self.run.shards
        if shards is not None:
            if self.run.actors is None:
                problems.append(
                    CrossProblem(
                        "run.shards",
                        f"must be null without actors (the replay shards of a distributed run: "
                        f"run.actors, train --actors N), got {shards}",
                        ("run.actors",),
                    )
                )
            elif shards > self.run.actors:
                problems.append(
                    CrossProblem(
                        "run.shards",
                        f"must be at most run.actors ({self.run.actors}): more shards than "
                        f"actors leaves a shard that no actor feeds, got {shards}",
                        ("run.actors",),
                    )
                )
            if self.replay.capacity % shards:
                problems.append(
                    CrossProblem(
                        "run.shards",
                        f"must divide replay.capacity ({self.replay.capacity:,}) evenly: each "
                        f"shard holds an equal part, got {shards}",
                        ("replay.capacity",),
                    )
                )
            elif self.replay.capacity // shards < self.train.batch_size:
                problems.append(
                    CrossProblem(
                        "run.shards",
                        f"must leave each shard a batch: replay.capacity "
                        f"({self.replay.capacity:,}) / {shards} holds fewer than "
                        f"train.batch_size ({self.train.batch_size}), and each batch comes "
                        f"from one shard, got {shards}",
                        ("replay.capacity", "train.batch_size"),
                    )
                )
        if self.replay.initial_priority == "actor":
            signal = self.priority_signal()
            if self.run.actors is None:
                problems.append(
                    CrossProblem(
                        "replay.initial_priority",
                        "must not be 'actor' without actors to compute the priorities (a "
                        "distributed run: run.actors, train --actors N), got 'actor'",
                        ("run.actors",),
                    )
                )
            elif signal != "td_error":
                problems.append(
                    CrossProblem(
                        "replay.initial_priority",
                        f"must not be 'actor' for replay.kind {self.replay.kind!r}, which "
                        f"prioritises by {signal} (the actors compute |delta|), got 'actor'",
                        ("replay.kind", "replay.priority_from"),
                    )
                )
        if problems:
            raise CrossFieldError(problems)
        return self

    def priority_signal(self) -> str:
        """The priority signal the learner hands back to the memory (a name in
        ``per_dqn.agent.signals.PRIORITY_SIGNALS``): the kind's own, or
        ``replay.priority_from`` where the kind lets the config choose."""
        return _KIND_ENTRIES[self.replay.kind].signal or self.replay.priority_from

    def actor_priorities(self) -> bool:
        """Whether, in a distributed run, the transitions enter the memory at their actors'
        ``|delta|`` (``replay.initial_priority`` resolved): a kind that keeps priorities, one
        that prioritises by ``|delta|``, and not ``max``."""
        return (
            self.replay.initial_priority != "max"
            and _KIND_ENTRIES[self.replay.kind].keeps_priorities
            and self.priority_signal() == "td_error"
        )

    def to_yaml(self) -> str:
        """The resolved config as YAML, loadable again by ``load_config``."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
