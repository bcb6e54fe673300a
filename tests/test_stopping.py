"""``per_dqn.training.stopping``: the one SIGINT/SIGTERM scheme, with real signals sent to this
process."""

from __future__ import annotations

import os
import signal

import pytest

from per_dqn.training import stopping
from per_dqn.training.stopping import StopSignals


def send(signum: int) -> None:
    """Delivers ``signum`` to this process; Python runs its handler before the next bytecode."""
    os.kill(os.getpid(), signum)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_is_remembered_and_the_second_raises(signum, code):
    """The default, `train`'s: the first signal only asks for a stop (nothing raised mid-step);
    the exit code is the first signal's even when another follows; the second raises."""
    other = signal.SIGTERM if signum == signal.SIGINT else signal.SIGINT
    with StopSignals() as stop:
        assert not stop() and stop.exit_code == 130  # a KeyboardInterrupt of no signal: 130
        send(signum)
        assert stop() and stop.should_stop() and stop.first == signum
        with pytest.raises(KeyboardInterrupt):
            send(other)
    assert stop.received == [signum, other] and stop.exit_code == code
    assert stop.terminated  # one of the two was SIGTERM


def test_raise_first_interrupts_a_wait_at_once():
    """A sweep's driver: every signal raises; `terminated` says whether a SIGTERM came."""
    with StopSignals(raise_first=True) as stop:
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)
        assert not stop.terminated
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGTERM)
    assert stop.exit_code == 130 and stop.terminated


def test_a_worker_ignores_later_signals_and_watches_sigint_only_for_a_while():
    """A sweep's worker: SIGTERM always asks for the stop, SIGINT only inside ``watching``
    (outside, its handler is whatever was there: here, ignored); no signal raises."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals((signal.SIGTERM,), raise_again=False) as stop:
            send(signal.SIGINT)  # ignored: not watched
            assert not stop()
            with stop.watching(signal.SIGINT):
                send(signal.SIGINT)
                send(signal.SIGINT)  # again: ignored, not raised
                send(signal.SIGTERM)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert stop.received == [signal.SIGINT, signal.SIGINT, signal.SIGTERM]
        assert stop.exit_code == 130
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_handlers_before_are_put_back():
    before = {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS}
    with StopSignals():
        assert all(signal.getsignal(s) is not before[s] for s in stopping.STOP_SIGNALS)
    assert {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS} == before


def test_kept_handler_undoes_a_library_replacing_it():
    """What ``ray.init`` does to SIGTERM, undone on the way out, the handler kept yielded."""
    with StopSignals():
        ours = signal.getsignal(signal.SIGTERM)
        with stopping.kept_handler(signal.SIGTERM) as kept:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert kept == ours == signal.getsignal(signal.SIGTERM)
    assert stopping.exit_code(signal.SIGTERM) == stopping.EXIT_TERMINATED == 143
    assert stopping.exit_code(None) == stopping.EXIT_INTERRUPTED == 130
