"""The Python entry points: ``train``, ``resume`` and ``load`` (docs/api.md shows them at work).

::

    import per_dqn

    result = per_dqn.train("cartpole", overrides={"train.total_env_steps": 20_000})
    print(result.summary["final_eval_return_mean"], result.run_dir)

    policy = per_dqn.load(result.run_dir)
    actions = policy.act(observations)            # a batch of observations -> greedy actions
    episodes = policy.evaluate(episodes=10)       # returns and lengths

Every failure a user can cause is raised as a ``ValueError`` whose message is one line naming the
key, the path or the value (``ConfigError`` for configs, ``RunDirError`` for run dirs,
``CheckpointError`` for checkpoints); a run dir another process is writing is refused, and a
refused call leaves nothing on disk. The command line calls the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    config_from_data,
    load_config,
    parse_override,
    resolve_config_path,
)

__all__ = ["Policy", "Resumption", "TrainResult", "load", "prepare_resume", "resume", "train"]

ConfigLike = str | Path | Mapping[str, Any] | Config


@dataclass(frozen=True)
class TrainResult:
    """What ``train`` and ``resume`` return.

    Attributes:
        summary: the run's ``summary.json`` (final evaluation, steps, wall time, whether a stop
            or callback ``interrupted`` it).
        run_dir: where the run wrote its config, events, checkpoints, model and summary.
    """

    summary: dict[str, Any]
    run_dir: Path

    @property
    def final_return(self) -> float | None:
        """The final evaluation's mean return (None for a run stopped before it)."""
        return self.summary["final_eval_return_mean"]


def _overrides(overrides: Mapping[str, Any] | Iterable[str] | None) -> list[Override]:
    """``{"replay.alpha": 0.5}`` or ``["replay.alpha=0.5"]`` as ``Override``s."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [Override(str(key), value, "overrides") for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError(
            [f"overrides: expected a mapping or a list of 'key=value', got {overrides!r}"]
        )
    out = []
    for text in overrides:
        override = parse_override(text)
        out.append(Override(override.path, override.value, "overrides"))
    return out


def network_name(network: str | Callable[..., Any]) -> str:
    """A Q-network factory as the ``"package.module:factory"`` string a config records.

    A callable must be importable by that name (a module-level function or class), so that
    ``load`` and ``--resume`` can build the network again from the run's ``config.yaml``.

    Raises:
        ValueError: a lambda, a nested function or anything else that cannot be found by name.
    """
    if isinstance(network, str):
        return network
    module = getattr(network, "__module__", None)
    qualname = getattr(network, "__qualname__", None)
    if not callable(network) or not module or not qualname or "<" in qualname:
        raise ValueError(
            f"network: {network!r} cannot be found again by name; pass a module-level function "
            "or class (or its 'package.module:factory' string)"
        )
    from per_dqn.agent.networks import resolve_factory

    name = f"{module}:{qualname}"
    if resolve_factory(name) is not network:
        raise ValueError(f"network: {name} does not name {network!r} when imported")
    return name


def load_any_config(
    config: ConfigLike,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    network: str | Callable[..., Any] | None = None,
) -> tuple[Config, str]:
    """A validated config and its name from a path, a shipped config's name, a dict or a
    ``Config``, with ``overrides`` (and ``network``, as ``agent.network``) applied and validated
    like the rest.

    Raises:
        ConfigError: one line per problem, naming the key and the value.
        ValueError: a ``network`` callable that cannot be found again by name.
    """
    changes = _overrides(overrides)
    if network is not None:
        changes.append(Override("agent.network", network_name(network), "network"))
    if isinstance(config, Config):
        return config_from_data(config.model_dump(mode="json"), "config", changes), "config"
    if isinstance(config, Mapping):
        return config_from_data(dict(config), "config", changes), "config"
    path = resolve_config_path(str(config))
    return load_config(path, changes, display_name=str(config)), path.stem


def train(
    config: ConfigLike,
    *,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    network: str | Callable[..., Any] | None = None,
    progress: bool = False,
) -> TrainResult:
    """Trains one run and returns its summary and run dir.

    Args:
        config: a YAML path, a shipped config's name (``"cartpole"``), a dict of sections, or a
            ``Config``.
        overrides: ``{"section.key": value}`` or ``["section.key=value", ...]``, validated like
            the config's own values.
        run_dir: where to write (absent or empty); default
            ``<run.runs_root>/<env>__<config>__<replay>__s<seed>__<time>``.
        callbacks: objects with any of ``on_log(env_steps, values)``, ``on_eval(env_steps,
            returns)``, ``on_checkpoint(env_steps, path)``; one that returns True stops the run
            (see ``run.Callback``), which stays resumable with ``resume``.
        network: a Q-network factory ``factory(obs_shape, num_actions) -> nn.Module`` or its
            ``"package.module:factory"`` name; sets ``agent.network``.
        progress: draw the progress display on stderr.

    Raises:
        ConfigError: a bad config or override.
        RunDirError: ``run_dir`` is not empty, cannot be created, or another process writes it.
        ValueError: an env, device, network or replay memory the config asks for cannot be had.
        DivergedError: the loss or the weights diverged (the run stops; see ``loop``).
        WriteError: a file could not be written.
    """
    from per_dqn import rundir

    cfg, name = load_any_config(config, overrides, network)
    if run_dir is None:
        run_name = rundir.default_run_name(
            cfg.env.id, name, cfg.replay.kind, cfg.run.seed, datetime.now()
        )
        run_dir = rundir.fresh_run_dir(Path(cfg.run.runs_root), run_name)
    run_dir = Path(run_dir)
    rundir.check_run_dir(run_dir)
    trainer = build_trainer(cfg, name)
    try:
        lock = rundir.lock_run_dir(run_dir, fresh=True)
        assert lock is not None
        with lock:
            return _run(trainer, run_dir, callbacks, progress)
    finally:
        trainer.close()


def check_memory_fits(config: Config) -> None:
    """Refuses a replay memory that cannot fit in the available RAM, before it is allocated.

    Raises:
        ValueError: one line naming ``replay.capacity`` and the sizes.
    """
    from per_dqn.plan import memory_plan

    plan = memory_plan(config)
    if not plan.fits:
        raise ValueError(plan.refusal())


def build_trainer(config: Config, name: str) -> Any:
    """The run's ``Trainer``, once its replay memory is known to fit.

    Raises:
        ValueError: an env, device or network that cannot be had, or memory that cannot be
            allocated (one line).
    """
    from per_dqn.plan import allocation_failure
    from per_dqn.run import Trainer

    check_memory_fits(config)
    try:
        return Trainer(config, name)
    except (MemoryError, RuntimeError) as exc:
        line = allocation_failure(exc, config, None)
        if line is None:
            raise
        raise ValueError(line) from None


def _run(trainer: Any, run_dir: Path, callbacks: Sequence[Any], progress: bool) -> TrainResult:
    from per_dqn import console

    total = trainer.config.train.total_env_steps
    with console.ConsoleProgress(total, enabled=progress) as bar:
        summary = trainer.run(run_dir, bar, callbacks=callbacks)
    return TrainResult(summary, run_dir)


@dataclass
class Resumption:
    """A run dir's training, loaded from its newest usable checkpoint and ready to ``run``.

    Attributes:
        trainer: the ``Trainer``, every part loaded.
        checkpoint: the checkpoint dir it continues.
        env_steps: the checkpoint's env step.
        notes: one-line notes on what is not exact.
        warnings: one-line warnings (damaged newer checkpoints that were skipped).
    """

    trainer: Any
    checkpoint: Path
    env_steps: int
    notes: list[str]
    warnings: list[str]


def prepare_resume(
    run_dir: Path, steps: int | None = None, warn: Callable[[str], None] | None = None
) -> Resumption:
    """Loads ``run_dir``'s newest checkpoint that passes its checks into a new ``Trainer``.

    Args:
        run_dir: a run dir written by ``train``.
        steps: a new ``train.total_env_steps`` (to extend a finished run).
        warn: called with each warning as it is found (damaged newer checkpoints skipped), so
            that they are shown even when the call then fails.

    Raises:
        ValueError (``ConfigError``, ``CheckpointError``): not a run dir, no usable checkpoint,
            a run already complete, or a checkpoint that does not fit; one line.
    """
    from per_dqn import checkpoint as ckpt

    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise ValueError(f"{run_dir}: not a run dir (no config.yaml)")
    found = ckpt.find_latest(ckpt.checkpoints_dir(run_dir))
    for line in found.warnings if warn is not None else ():
        warn(line)
    if found.path is None:
        why = (
            f"none of its {found.candidates} checkpoints passes its checks"
            if found.candidates
            else "it has no checkpoint"
        )
        raise ValueError(f"{run_dir}: nothing to resume from: {why}")
    at = found.manifest["env_steps"]
    overrides = [] if steps is None else [Override("train.total_env_steps", steps, "--steps")]
    cfg = load_config(config_path, overrides, display_name=str(config_path))
    total = cfg.train.total_env_steps
    if total <= at:
        if steps is None:
            raise ValueError(
                f"{run_dir}: the run is complete ({at:,} of {total:,} env steps); pass "
                "--steps N to extend it"
            )
        raise ValueError(
            f"--steps must be more than the checkpoint's {at:,} env steps, got {steps}"
        )
    name = str(found.manifest.get("config_name", config_path.stem))
    try:
        trainer = build_trainer(cfg, name)
    except ValueError as exc:
        raise ValueError(f"{config_path}: {exc}") from None
    try:
        notes = trainer.load_checkpoint(found.path)
    except BaseException:
        trainer.close()
        raise
    return Resumption(trainer, found.path, at, notes, list(found.warnings))


def resume(
    run_dir: str | Path,
    *,
    steps: int | None = None,
    callbacks: Sequence[Any] = (),
    progress: bool = False,
) -> TrainResult:
    """Continues a stopped (or, with ``steps``, a finished) run from its newest usable
    checkpoint, exactly where it stopped; see ``train`` for the rest.

    Raises:
        ValueError: as ``prepare_resume``; ``RunDirInUse`` when another process writes it.
    """
    from per_dqn import rundir

    run_dir = Path(run_dir)
    lock = rundir.lock_run_dir(run_dir, create=False) if run_dir.is_dir() else None
    try:
        resumption = prepare_resume(run_dir, steps)
        try:
            if lock is None:
                lock = rundir.lock_run_dir(run_dir)
            return _run(resumption.trainer, run_dir, callbacks, progress)
        finally:
            resumption.trainer.close()
    finally:
        if lock is not None:
            lock.release()


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
        """Q-values ``(B, num_actions)`` for a batch of observations ``(B, *obs_shape)``."""
        return self.agent.q_values(np.asarray(obs))

    def act(self, obs: np.ndarray, epsilon: float = 0.0) -> np.ndarray:
        """Actions for a batch of observations ``(B, *obs_shape)``: greedy, or uniformly random
        with probability ``epsilon`` (drawn from the policy's own generator, seeded by ``load``).

        Raises:
            ValueError: observations of another shape than the run's env gives, or ``epsilon``
                outside [0, 1].
        """
        obs = np.asarray(obs)
        shape = tuple(self.agent.obs_shape)
        if obs.shape[1:] != shape:
            raise ValueError(
                f"obs: expected a batch of shape (B, {', '.join(map(str, shape))}), got {obs.shape}"
            )
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon: must be in [0, 1], got {epsilon}")
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
            ValueError: an env that cannot be made or whose spaces differ from the run's.
        """
        from per_dqn import evaluate
        from per_dqn.envs import describe, make_eval_env

        if episodes < 1:
            raise ValueError(f"episodes: must be >= 1, got {episodes}")
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


def load(target: str | Path, *, device: str = "auto", seed: int | None = None) -> Policy:
    """The policy in a run dir (its newest usable checkpoint, else its ``model.pt``) or in a
    checkpoint dir, built exactly as training built it.

    Args:
        target: a run dir or ``RUN_DIR/checkpoints/step_*``.
        device: ``auto``, ``cpu`` or ``cuda``.
        seed: seed of ``act``'s exploration draws.

    Raises:
        ValueError: not a run or checkpoint dir, weights that fail their checks or do not fit.
    """
    from per_dqn import evaluate
    from per_dqn.build import make_agent, resolve_device
    from per_dqn.envs import describe, make_eval_env

    source = evaluate.resolve_source(Path(target))
    env = make_eval_env(source.config.env)
    try:
        spec = describe(env)
    finally:
        env.close()
    agent = make_agent(source.config, spec, resolve_device(device))
    try:
        agent.online.load_state_dict(source.weights)
    except (RuntimeError, TypeError, AttributeError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise ValueError(f"{source.weights_file}: does not fit the network ({reason})") from None
    agent.online.eval()
    return Policy(source, agent, seed)
