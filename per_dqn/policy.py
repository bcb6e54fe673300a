"""A trained policy, read back from a run: ``load`` and ``Policy`` (act, evaluate), and
``evaluate_run``, what ``per-dqn eval`` calls. Part of the Python API; import these from
``per_dqn`` or ``per_dqn.api``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn.config import MAX_EVAL_EPISODES, Config, refuse_untrusted_code
from per_dqn.config.messages import one_line
from per_dqn.rundir.dirs import check_name_lengths
from per_dqn.rundir.fileio import WriteError

__all__ = ["Policy", "check_run_code", "evaluate_run", "load"]

# A Q-network factory, or its "package.module:factory" name.
NetworkLike = str | Callable[..., Any]


class Policy:
    """A trained Q-network, greedy or epsilon-greedy, from ``load``.

    Attributes:
        config: the run's config.
        env_steps: the env step the weights were saved at (None when unknown).
        source: the file the weights came from.
        agent: the ``DQNAgent`` (its ``online`` network holds the weights).
    """

    def __init__(self, source: Any, agent: Any, seed: int | None) -> None:
        self.config: Config = source.config
        self.env_steps: int | None = source.env_steps
        self.source: Path = source.weights_file
        self.agent = agent
        self._rng = np.random.default_rng(seed)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q-values ``(B, num_actions)`` for a batch of observations ``(B, *obs_shape)``.

        Raises:
            ValueError: observations of another shape than the run's env gives.
        """
        return self.agent.q_values(self._batch(obs))

    def _batch(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` as an array, refused unless it is a batch of the run's observations."""
        obs = np.asarray(obs)
        shape = tuple(self.agent.obs_shape)
        if obs.shape[1:] != shape:
            raise ValueError(
                f"obs: expected a batch of shape (B, {', '.join(map(str, shape))}), got {obs.shape}"
            )
        return obs

    def act(self, obs: np.ndarray, epsilon: float = 0.0) -> np.ndarray:
        """Actions for a batch of observations ``(B, *obs_shape)``: greedy, or uniformly random
        with probability ``epsilon`` (drawn from the policy's own generator, seeded by ``load``).

        Raises:
            ValueError: observations of another shape than the run's env gives, or ``epsilon``
                outside [0, 1].
        """
        obs = self._batch(obs)
        if epsilon is None:  # act has no run's epsilon to fall back on
            raise ValueError("epsilon: must be in [0, 1], got None")
        check_play(epsilon=epsilon)
        actions = self.agent.greedy_actions(obs)
        if epsilon > 0:
            explore = self._rng.random(len(obs)) < epsilon
            actions[explore] = self._rng.integers(self.agent.num_actions, size=int(explore.sum()))
        return actions

    def evaluate(
        self,
        env_id: str | None = None,
        episodes: int = 10,
        *,
        epsilon: float | None = None,
        seed: int | None = None,
    ) -> Any:
        """Plays ``episodes`` episodes on the run's evaluation env (or ``env_id``, made with the
        run's env settings), as ``per-dqn eval`` does.

        Args:
            env_id: another env id with the same spaces (default: the run's).
            episodes: how many.
            epsilon: default the run's ``train.eval_epsilon``.
            seed: the run seed whose evaluation episodes are played (default: the run's own,
                as ``per-dqn eval``).

        Returns:
            ``evaluate.Episodes``: ``returns`` and ``lengths`` arrays.

        Raises:
            ValueError: ``episodes``, ``epsilon`` or ``seed`` out of range (``check_play``), or
                an env that cannot be made or whose spaces differ from the run's.
        """
        from per_dqn.envs.make import describe, make_eval_env
        from per_dqn.training import evaluate

        check_play(episodes, epsilon, seed)
        env_config = self.config.env
        if env_id is not None:
            env_config = env_config.model_copy(update={"id": env_id})
        env = make_eval_env(env_config)
        try:
            spec = describe(env)
            if spec.obs_shape != tuple(self.agent.obs_shape) or (
                spec.num_actions != self.agent.num_actions
            ):
                raise ValueError(
                    f"env_id: {env_config.id} has observations {spec.obs_shape} and "
                    f"{spec.num_actions} actions; this policy takes {tuple(self.agent.obs_shape)} "
                    f"and {self.agent.num_actions}"
                )
            epsilon = self.config.train.eval_epsilon if epsilon is None else epsilon
            seed = self.config.run.seed if seed is None else seed
            return evaluate.play(self.agent, env, episodes, epsilon, seed)
        finally:
            env.close()


def check_run_code(
    config: Config,
    label: str,
    *,
    trust_code: bool = False,
    network: NetworkLike | None = None,
    trains: bool = False,
    track: str | None = None,
) -> None:
    """Refuses a config read back from a run dir or checkpoint (``label``, its file) that names
    code (``per_dqn.config.code_keys``: a network factory, a ``module:EnvName`` id), or, with
    ``trains`` (the caller trains the run: ``resume``), that turns on a tracker (``run.track``,
    issue 43), unless the user allows it for this call: ``trust_code`` allows every key;
    ``network``, the factory the config names (the callable or its name), allows
    ``agent.network`` alone, since passing it is the user's own say-so; so does ``track``, the
    tracker the config names (``train --resume --track wandb``), for ``run.track`` alone.

    Raises:
        UntrustedCodeError: one line per refused key (a ``ConfigError``, a ``ValueError``).
        ValueError: ``network`` is not the network the config names, or cannot be found by
            name; ``track`` is not the tracker it names.
    """
    allowed: tuple[str, ...] = ()
    if track is not None:
        if track != config.run.track:
            raise ValueError(
                f"--track: {track!r} is not the tracker {label} names "
                f"(run.track: {config.run.track!r}); a resume keeps its run's tracker"
            )
        allowed = ("run.track",)
    if network is not None:
        from per_dqn.agent.networks import network_name

        name = network_name(network)
        if name != config.agent.network:
            raise ValueError(
                f"network: {name!r} is not the network {label} names "
                f"(agent.network: {config.agent.network!r})"
            )
        allowed = (*allowed, "agent.network")
    refuse_untrusted_code(config, label, trust_code=trust_code, allowed=allowed, trains=trains)


def is_integer(value: Any) -> bool:
    """An integer, a numpy one too, and not a bool: what an argument that counts takes."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_play(episodes: Any = 1, epsilon: Any = None, seed: Any = None) -> None:
    """Refuses, one line each, what no evaluation can play: ``episodes`` that is not an integer
    in [1, ``MAX_EVAL_EPISODES``] (the config's bound on its own evaluations), an ``epsilon``
    that is not a number in [0, 1] (None: the run's), or a ``seed`` that is not a non-negative
    integer (None: the run's).

    Raises:
        ValueError: the first such argument, named, with its value.
    """
    if not is_integer(episodes) or not 1 <= episodes <= MAX_EVAL_EPISODES:
        raise ValueError(
            f"episodes: must be an integer in [1, {MAX_EVAL_EPISODES:,}], got {episodes!r}"
        )
    if epsilon is not None and (
        not isinstance(epsilon, int | float | np.integer | np.floating)
        or isinstance(epsilon, bool | np.bool_)
        or not 0.0 <= epsilon <= 1.0  # NaN fails it too
    ):
        raise ValueError(f"epsilon: must be in [0, 1], got {epsilon!r}")
    if seed is not None and (not is_integer(seed) or seed < 0):
        raise ValueError(f"seed: must be a non-negative integer, got {seed!r}")


def _config_file(source: Any) -> Path:
    """The ``config.yaml`` a ``Source``'s config was read from: beside its weights (a
    checkpoint's ``agent.pt``, a run dir's ``model.pt``)."""
    return source.weights_file.parent / "config.yaml"


def load(
    target: str | Path,
    *,
    device: str = "auto",
    seed: int | None = None,
    network: NetworkLike | None = None,
    trust_code: bool = False,
) -> Policy:
    """The policy in a run dir (its newest usable checkpoint, else its ``model.pt``) or in a
    checkpoint dir, built exactly as training built it.

    A run dir is data: a config that names code (a network factory, a ``module:EnvName`` env
    id) is refused before anything is imported, unless allowed (``check_run_code``).

    A damaged newer checkpoint passed over for an older one (or for ``model.pt``) is named in a
    ``RuntimeWarning``, the line ``per-dqn eval`` prints after ``warning:``.

    Args:
        target: a run dir or ``RUN_DIR/checkpoints/step_*``.
        device: ``auto``, ``cpu`` or ``cuda``.
        seed: seed of ``act``'s exploration draws.
        network: the Q-network factory the run was trained with (the callable or its
            ``"package.module:factory"`` name), when its config names one: passing it allows
            that import.
        trust_code: allow every import the run's config names (``per-dqn eval --trust-code``);
            only for a run dir whose origin you trust.

    Raises:
        UntrustedCodeError: the config names code that was not allowed (one line per key).
        ValueError: a ``seed`` that is not a non-negative integer; not a run or checkpoint dir,
            weights that fail their checks or do not fit, a checkpoint of another run than its
            run dir's, or a path that leaves the run dir.
    """
    from per_dqn.envs.make import describe, make_eval_env
    from per_dqn.training import evaluate
    from per_dqn.training.build import make_agent, resolve_device

    check_play(seed=seed)
    check_name_lengths(Path(target))  # before any stat of it: one line, not an OSError
    source = evaluate.resolve_source(Path(target))
    for line in source.warnings:
        warnings.warn(line, RuntimeWarning, stacklevel=2)
    check_run_code(source.config, str(_config_file(source)), trust_code=trust_code, network=network)
    env = make_eval_env(source.config.env)
    try:
        spec = describe(env)
    finally:
        env.close()
    agent = make_agent(source.config, spec, resolve_device(device))
    try:
        agent.online.load_state_dict(source.weights)
    except (RuntimeError, TypeError, AttributeError) as exc:
        reason = one_line(exc)[:300]
        raise ValueError(f"{source.weights_file}: does not fit the network ({reason})") from None
    evaluate.check_finite(agent.online, source.weights_file)
    agent.online.eval()
    return Policy(source, agent, seed)


def evaluate_run(
    target: str | Path,
    *,
    episodes: int = 10,
    epsilon: float | None = None,
    seed: int | None = None,
    video: bool = False,
    video_view: str = "game",
    warn: Callable[[str], None] | None = None,
    network: NetworkLike | None = None,
    trust_code: bool = False,
    on_start: Callable[[str], None] | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
    on_episode: Callable[[float, int], None] | None = None,
) -> Any:
    """Plays the weights in a run dir or checkpoint dir on the run's evaluation env, within its
    evaluation caps, as ``per-dqn eval`` does (``Policy.evaluate`` plays without a report).

    Args:
        target: a run dir (its newest usable checkpoint, else its ``model.pt``) or
            ``RUN_DIR/checkpoints/step_*``.
        episodes: how many.
        epsilon: default the run's ``train.eval_epsilon``.
        seed: the run seed whose evaluation episodes are played (default: the run's own, so the
            episodes are those training evaluated on).
        video: film the first episode into ``RUN_DIR/videos/eval-step<N>.gif``.
        video_view: ``game`` films the game's own frames (Atari: the emulator's RGB screen),
            ``agent`` the agent's 84x84 grayscale view (Atari only).
        warn: called with each warning (a damaged newer checkpoint skipped) before the episodes
            are played; default a ``RuntimeWarning`` each.
        network: as ``load``'s.
        trust_code: as ``load``'s (``per-dqn eval --trust-code``).
        on_start: called with one line saying what is about to be played, before the first
            episode.
        on_progress: called with (episodes finished, episodes asked for, agent steps so far) at
            the start, after each episode and every 1,000 agent steps.
        on_episode: called with (return, length) as each episode ends.

    Returns:
        ``evaluate.EvalReport``: ``episodes`` (returns, lengths; ``cap_warning()`` names an
        evaluation cap that was reached) and ``lines()``, the report ``per-dqn eval`` prints.

    Raises:
        UntrustedCodeError: the config names code that was not allowed (one line per key).
        ValueError: ``episodes``, ``epsilon`` or ``seed`` out of range (``check_play``); not a
            run or checkpoint dir, weights that fail their checks or do not fit, or an env that
            cannot be made or rendered (one line).
        WriteError: the video could not be written (names the file).
    """
    from per_dqn.training import evaluate
    from per_dqn.training.build import make_agent

    check_play(episodes, epsilon, seed)
    check_name_lengths(Path(target))  # before any stat of it: one line, not an OSError
    source = evaluate.resolve_source(Path(target))
    for line in source.warnings:
        if warn is None:
            warnings.warn(line, RuntimeWarning, stacklevel=2)
        else:
            warn(line)
    check_run_code(source.config, str(_config_file(source)), trust_code=trust_code, network=network)
    try:
        return evaluate.evaluate_source(
            source, make_agent, episodes=episodes, epsilon=epsilon, seed=seed, video=video,
            video_view=video_view, on_start=on_start, on_progress=on_progress,
            on_episode=on_episode,
        )  # fmt: skip
    except WriteError:
        raise
    except OSError as exc:
        # Every write names its file; one that did not (an encoder's own error) is named by
        # where the videos go.
        where = exc.filename or source.run_dir / evaluate.VIDEO_DIR
        raise WriteError(exc.errno, exc.strerror or str(exc), str(where)) from exc
