"""SIGTERM as an interruption (engine base layer): :func:`sigterm_unwinds` makes ``kill PID`` (and a scheduler's
SIGTERM before it kills a job) raise :class:`Terminated` in the main thread, a ``KeyboardInterrupt``, so that a
sweep stops the way Ctrl-C stops it: every ``with`` and ``finally`` runs (cell locks released, the interrupted
cell said on stderr and resumable from its ``last.pt``), the records already written stay as they are, and
``fusebench run`` prints the result lines of the cells that finished before it (:mod:`fusebench.cli.run`).
Without it, Python dies on SIGTERM at once: no lock released, nothing buffered on stdout written."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM (raised by :func:`sigterm_unwinds`'s handler)."""

    signum = signal.SIGTERM


_RECEIVED: list[int] = []  # the signals received in this process


def note(signum: int) -> None:
    """Record that this process received ``signum`` (what :func:`terminating` reads), for a handler of its own
    (a pool worker's, :mod:`fusebench.sweep.process_pool`)."""
    _RECEIVED.append(signum)


def _raise(signum: int, frame: object) -> None:
    note(signum)
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}")


def terminating() -> bool:
    """Whether this process has received SIGTERM (a worker then starts no further cell)."""
    return bool(_RECEIVED)


def install() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process (its main thread); e.g. a worker process's initializer."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated` (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["Terminated", "install", "sigterm_unwinds", "terminating"]
