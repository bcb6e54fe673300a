"""Several runs in one process, in lock-step, sharing one batched learner: a pack (issue 24).

``run_pack`` takes trainers built as for single runs (each from its own config and seed, each
resumed from its own checkpoint or fresh) and runs them together. Each run is the generator its
``Trainer.run`` would drive alone (``_Session.play``, around ``Loop.steps``): it asks for greedy
actions and for gradient steps instead of computing them. The pack answers:

- every run that asks to act, in one forward pass of the pack (``Pack.greedy_actions``) per
  shape of observation batch: training acts on a batch of one observation per sub-env, an
  evaluation on one observation. Runs of one config evaluate at the same env steps, so their
  evaluations share passes (and share them with training's where the shapes match; a greedy
  step asks, an exploring one does not);
- once every run still going asks to learn, every one of them in one batched update
  (``Pack.learn``). A run that is due to learn waits for the others, which keep stepping until
  they are due too: none of its own numbers depends on when it waits.

Because a pack computes each member's slices as that member alone would (``agent/pack.py``), a
run's event file, checkpoints, ``model.pt`` and summary are those it writes alone, bit for bit.
Each run keeps its own run dir, envs, replay memory, random streams, logger and checkpoint
cadence. A run that fails (a diverged loss, a write error) stops alone with its error; the others
go on, in a pack rebuilt without it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from per_dqn.agent.pack import Pack
from per_dqn.rundir import provenance
from per_dqn.training.asking import ACT

__all__ = ["MemberResult", "run_pack"]


@dataclass
class MemberResult:
    """How one run of a pack ended: its summary, or the exception that stopped it."""

    run_dir: Path
    summary: dict[str, Any] | None = None
    error: BaseException | None = None


@dataclass
class _Member:
    trainer: Any
    opened: Any  # the context manager of ``Trainer.session``
    session: Any
    play: Any
    result: MemberResult
    request: tuple[str, Any] | None = None
    ctrl_c: bool = False  # it ended on a KeyboardInterrupt of its own


def run_pack(
    trainers: Sequence[Any],
    run_dirs: Sequence[Path],
    should_stop: Callable[[], bool] | None = None,
    callbacks: Sequence[Sequence[Any]] | None = None,
) -> list[MemberResult]:
    """Runs ``trainers[i]`` in ``run_dirs[i]`` together, each as ``Trainer.run`` runs it alone.

    The trainers' agents are put in one pack here (their networks and update settings must
    match: ``agent.pack.pack_key``). ``should_stop`` is polled by every run between its steps;
    ``callbacks[i]`` are run i's (``run.Callback``). A ``KeyboardInterrupt`` stops every run as it
    stops a run alone (an interrupted summary, no checkpoint).

    Returns:
        One ``MemberResult`` per trainer, in order. A run that failed carries its exception and
        wrote what a failed single run writes; the others finished (or stopped) normally.

    Raises:
        ValueError: trainers whose agents cannot share a pack, or not one run dir (and one
            sequence of callbacks, where given) per trainer (before anything is written).
    """
    if len(trainers) != len(run_dirs):
        raise ValueError("run_pack needs one run dir per trainer")
    if callbacks is not None and len(callbacks) != len(trainers):
        raise ValueError("run_pack needs one sequence of callbacks per trainer")
    hooks = list(callbacks) if callbacks is not None else [() for _ in trainers]
    if len(trainers) > 1:
        pack: Any = Pack([t.agent for t in trainers])
    else:  # a pack of one, or a user's network, which computes alone
        pack = trainers[0].agent.pack or _Alone(trainers[0].agent)
    results = [MemberResult(run_dir) for run_dir in run_dirs]
    members: list[_Member] = []
    named = _pack_record(run_dirs)
    pack_id = uuid.uuid4().hex  # the members' sessions are one process's time (``wall_sessions``)
    try:
        for i, trainer in enumerate(trainers):
            result = results[i]
            opened = trainer.session(run_dirs[i], None, should_stop, hooks[i], pack_id)
            try:
                with provenance.recorded(**named):  # read when the session opens
                    session = opened.__enter__()
            except Exception as exc:  # a tracker that cannot start, a write error: this run only
                result.error = exc
                continue
            member = _Member(trainer, opened, session, session.play(), result=result)
            members.append(member)
            _advance(member, None)  # a generator's first ``send(None)`` starts it
        if any(m.ctrl_c for m in members):
            raise KeyboardInterrupt
        _drive([m for m in members if m.request is not None], pack)
    except KeyboardInterrupt:
        # Every run still going ends as a KeyboardInterrupt ends a run alone: thrown into its
        # play, which returns on one (``_Session.play``), then wrapped up and closed.
        for member in members:
            if member.request is not None:
                _advance(member, None, error=KeyboardInterrupt())
    return results


def _pack_record(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The provenance a packed run records: ``pack``, its size and its members' run dirs
    (relative to their common parent); nothing for a run alone."""
    if len(run_dirs) < 2:
        return {}
    paths = [Path(os.path.abspath(d)) for d in run_dirs]
    root = Path(os.path.commonpath(paths))
    return {
        "pack": {"size": len(paths), "members": [p.relative_to(root).as_posix() for p in paths]}
    }


def _drive(live: list[_Member], pack: Any) -> None:
    """Answers the members' requests until every run has ended (see the module docstring)."""
    while live:
        if len(live) < pack.size:
            # Re-stacked without the runs that ended: the copies hold the same numbers.
            pack = Pack([m.trainer.agent for m in live])
        acting = [m for m in live if m.request[0] == ACT]
        # One forward pass per shape (and dtype) of observation batch: a run's evaluation asks
        # for one observation, its training for one per sub-env.
        by_shape: dict[tuple[Any, ...], list[_Member]] = {}
        for member in acting:
            obs = member.request[1]
            by_shape.setdefault((obs.shape, obs.dtype), []).append(member)
        for asking in by_shape.values() if acting else [live]:
            try:
                if asking[0].request[0] == ACT:
                    answers = pack.greedy_actions({_slot(m): m.request[1] for m in asking})
                else:
                    answers = pack.learn({_slot(m): m.request[1] for m in asking})
            except Exception as exc:  # raised in each asking run, at its request, as alone
                for member in asking:
                    _advance(member, None, error=exc)
            else:
                for member in asking:
                    _advance(member, answers[_slot(member)])
            if any(m.ctrl_c for m in asking):
                raise KeyboardInterrupt
        live = [m for m in live if m.request is not None]


def _slot(member: _Member) -> int:
    return member.trainer.agent._slot


class _Alone:
    """A pack's interface over one agent that has no pack (a user's network)."""

    size = 1

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def greedy_actions(self, obs: dict[int, Any]) -> dict[int, Any]:
        return {k: self.agent.greedy_actions(o) for k, o in obs.items()}

    def learn(self, batches: dict[int, Any]) -> dict[int, Any]:
        return {k: self.agent.learn(b) for k, b in batches.items()}


def _advance(member: _Member, answer: Any, error: BaseException | None = None) -> None:
    """Sends ``answer`` (or raises ``error``) in the member's run and keeps its next request;
    at its end, wraps the run up and closes its session (with its error, if it failed)."""
    try:
        if error is not None:
            member.request = member.play.throw(error)
        else:
            member.request = member.play.send(answer)
        return
    except StopIteration as end:
        member.request = None
        outcome = end.value
    except Exception as exc:
        member.request = None
        _close(member, exc)
        return
    try:
        member.result.summary = member.session.wrap_up(*outcome)
    except Exception as exc:
        _close(member, exc)
        return
    _close(member, None)
    interrupted, stopped_between_steps, _ = outcome
    # A KeyboardInterrupt raised in this run's own code (a Ctrl-C that reached the process, not
    # a stop asked between two steps) stops the whole pack, as it stops a run alone.
    member.ctrl_c = interrupted and not stopped_between_steps


def _close(member: _Member, error: BaseException | None) -> None:
    """Leaves the member's session as ``Trainer.run`` would: with the run's error, if any."""
    member.result.error = error
    if error is None:
        member.opened.__exit__(None, None, None)
        return
    with contextlib.suppress(Exception):
        member.opened.__exit__(type(error), error, error.__traceback__)
