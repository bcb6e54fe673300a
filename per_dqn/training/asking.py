"""What a run asks of its agent, and the one way to answer it alone.

A run's work that needs the network is a generator of requests (``Loop.steps`` for training,
``evaluate.episode_requests`` for evaluation episodes): it yields ``(ACT, obs)`` for the greedy
actions of a batch of observations (answer: the actions) and ``(LEARN, batch)`` for a gradient
step (answer: its ``LearnResult``). ``serve`` answers them with one agent; a pack
(``per_dqn.packs``) answers several runs' requests in one batched call.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

__all__ = ["ACT", "LEARN", "Request", "serve"]

T = TypeVar("T")

ACT = "act"
LEARN = "learn"
Request = tuple[str, Any]


def serve(steps: Generator[Request, Any, T], agent: Any) -> T:
    """Runs a generator of requests to its end, answering each with ``agent`` alone
    (``greedy_actions`` for ``ACT``, ``learn`` for ``LEARN``); returns what the generator
    returns. What the agent raises (a ``KeyboardInterrupt`` included) is raised in the
    generator, at the request."""
    try:
        kind, payload = next(steps)
        while True:
            try:
                answer = agent.greedy_actions(payload) if kind == ACT else agent.learn(payload)
            except BaseException as exc:
                kind, payload = steps.throw(exc)
                continue
            kind, payload = steps.send(answer)
    except StopIteration as end:
        return end.value
