"""Independent calls run in a pool of spawned local processes: the local launcher's cells
(:class:`fusebench.sweep.launchers.LocalLauncher`) and the hyper-parameter selection trials of a sweep
(:func:`fusebench.sweep.selection.freeze_selections`).

Each call is a picklable function with its arguments; the results come back in the order of the calls.
While a worker process runs a call, SIGINT and SIGTERM interrupt it like Ctrl-C (the call unwinds, its cell lock
is released); an idle worker ignores SIGINT (Ctrl-C reaches the whole process group: a worker interrupted while
it waits for its next call, inside the pool's queue and holding its lock, left the other workers waiting on that
lock for ever) and dies at once on SIGTERM. Ctrl-C in the parent starts no further call, terminates the workers
(the running calls unwind), kills one that has not ended after :data:`GRACE_S` seconds, and re-raises without
waiting on the pool. A call that raises is raised in the parent once the pool has finished the other calls (each
writes its own record, which a resumed sweep reuses).
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Sequence

from fusebench.runtime import interrupt

#: seconds a terminated worker has to unwind its call (release its cell lock) before it is killed
GRACE_S = 10.0


def _idle_worker() -> None:
    """A worker's initializer: SIGINT ignored and SIGTERM fatal while no call runs (:func:`_call` handles both
    during a call)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


_SIGNALS: list[int] = []  # the signals received during the running call


def _once(signum: int, frame: object) -> None:
    """During a call: the first SIGINT / SIGTERM unwinds it; a later one (the parent's SIGTERM after the process
    group's Ctrl-C) is noted, not raised into the unwinding (a second exception there printed a traceback)."""
    _SIGNALS.append(signum)
    if signum == signal.SIGTERM:  # told to end: a call this worker takes after this one starts no cell
        interrupt.note(signum)
    if len(_SIGNALS) == 1:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise interrupt.Terminated(f"terminated by signal {signal.Signals(signum).name}")


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with SIGINT and SIGTERM unwinding it (a ``KeyboardInterrupt``), then the idle handlers again; a
    worker told to end (SIGTERM) while its call unwound ends once it has."""
    _SIGNALS.clear()
    previous = {s: signal.signal(s, _once) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return fn(*args)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if signal.SIGTERM in _SIGNALS[1:]:  # (SIGTERM is fatal again: the worker ends here, its call unwound)
            os.kill(os.getpid(), signal.SIGTERM)


def run_in_processes(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int) -> list[Any]:
    """``[fn(*args) for args in calls]``, ``workers`` calls at a time in spawned processes."""
    import concurrent.futures as cf
    import multiprocessing as mp

    pool = cf.ProcessPoolExecutor(max_workers=max(1, min(workers, len(calls))), mp_context=mp.get_context("spawn"),
                                  initializer=_idle_worker)
    procs: list[Any] = []
    try:
        futures = [pool.submit(_call, fn, *args) for args in calls]
        procs = list((getattr(pool, "_processes", None) or {}).values())  # started with the first submissions
        results = [f.result() for f in futures]  # in the order of the calls
        pool.shutdown(wait=True)  # (a Ctrl-C while it waits ends the workers too: they ignore it when idle)
        return results
    except KeyboardInterrupt:  # no further call starts; the running ones are interrupted, then the pool ends
        procs += [p for p in (getattr(pool, "_processes", None) or {}).values() if p not in procs]
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        raise
    except BaseException:  # a call raised: the others finish (each writes its own record), then it is raised
        pool.shutdown(wait=True)
        raise


__all__ = ["run_in_processes"]
