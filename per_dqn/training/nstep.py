"""n-step transitions built from a vector env's step stream, one window per sub-env.

For a window starting at ``t`` of ``k <= n`` steps the emitted transition is::

    (obs_t, a_t, R = sum_{j<k} gamma**j r_{t+j}, obs_{t+k}, terminated_{t+k}, k)

A full window (``k = n``) is emitted as soon as its last step is seen. When an episode ends, every
window still open is emitted with the steps it has (``k = n, n-1, ..., 1``), so no transition is
lost and no window ever spans two episodes. ``terminated`` is True only for windows that end on a
termination: after a truncation the windows bootstrap from the true last observation with
``gamma ** k`` (Pardo et al., 2018, "Time limits in reinforcement learning"). Numpy only.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np


class Transition(NamedTuple):
    """One n-step transition, in the argument order of ``memory.add``."""

    obs: np.ndarray
    action: int
    reward: float
    next_obs: np.ndarray
    terminated: bool
    n_steps: int


class Transitions(NamedTuple):
    """Several transitions stacked for ``memory.add_batch``; one entry per transition."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    n_steps: np.ndarray


def stack(transitions: list[Transition]) -> Transitions:
    """Stacks transitions field by field."""
    obs, actions, rewards, next_obs, terminated, n_steps = zip(*transitions, strict=True)
    return Transitions(
        obs=np.stack(obs),
        actions=np.asarray(actions, dtype=np.int64),
        rewards=np.asarray(rewards, dtype=np.float32),
        next_obs=np.stack(next_obs),
        terminated=np.asarray(terminated, dtype=np.bool_),
        n_steps=np.asarray(n_steps, dtype=np.uint8),
    )


class NStepAccumulator:
    """Keeps the last ``n_step`` (obs, action, reward) of each sub-env and emits n-step windows.

    Args:
        num_envs: sub-envs in the vector env.
        n_step: window length ``n`` (1 gives ordinary one-step transitions).
        gamma: discount per env step.
    """

    def __init__(self, num_envs: int, n_step: int, gamma: float) -> None:
        if n_step < 1:
            raise ValueError(f"`n_step` must be >= 1, got {n_step}")
        self.n_step = n_step
        self.gamma = gamma
        self._windows: list[deque[tuple[np.ndarray, int, float]]] = [
            deque() for _ in range(num_envs)
        ]

    def step(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        active: np.ndarray,
    ) -> list[Transition]:
        """Takes one vector-env step; returns the transitions it completes, oldest first.

        Args:
            obs: ``(N, *obs_shape)`` observations the actions were taken in.
            actions: ``(N,)`` actions.
            rewards: ``(N,)`` rewards.
            next_obs: ``(N, *obs_shape)`` observations returned by the step.
            terminated: ``(N,)`` episode ended in a terminal state.
            truncated: ``(N,)`` episode cut short (time limit).
            active: ``(N,)`` False where the step only reset the sub-env (gymnasium's next-step
                autoreset): such a step is not a transition and is ignored.
        """
        out: list[Transition] = []
        n, gamma = self.n_step, self.gamma
        for i in np.flatnonzero(active):
            window = self._windows[i]
            window.append((obs[i], int(actions[i]), float(rewards[i])))
            ended_terminal = bool(terminated[i])
            done = ended_terminal or bool(truncated[i])
            if not done and len(window) < n:
                continue
            # Oldest-first emission: the full window if the episode goes on, every open window
            # (longest first) if it ended here.
            while window:
                ret = 0.0
                for j, (_, _, reward) in enumerate(window):
                    ret += gamma**j * reward
                start_obs, action, _ = window.popleft()
                out.append(
                    Transition(start_obs, action, ret, next_obs[i], ended_terminal, len(window) + 1)
                )
                if not done:
                    break
        return out

    def state_dict(self) -> dict[str, Any]:
        """The open windows of every sub-env, oldest step first, for a checkpoint."""
        return {"windows": [list(window) for window in self._windows]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: the state is for another number of sub-envs or longer windows.
        """
        windows = state["windows"]
        if len(windows) != len(self._windows):
            raise ValueError(
                f"n-step state has {len(windows)} sub-envs, expected {len(self._windows)}"
            )
        if any(len(window) >= self.n_step for window in windows):
            raise ValueError(f"n-step state has a window of {self.n_step} or more steps")
        self._windows = [deque(window) for window in windows]
