"""Independent calls run in a pool of spawned local processes: the local launcher's cells
(:class:`fusebench.sweep.launchers.LocalLauncher`) and the hyper-parameter selection trials of a sweep
(:func:`fusebench.sweep.selection.freeze_selections`).

Each call is a picklable function with its arguments; the results come back in the order of the calls.
A worker process handles SIGTERM like Ctrl-C (:func:`fusebench.runtime.interrupt.install`: the running
call unwinds, its cell lock is released); Ctrl-C in the parent starts no further call, terminates the
running ones and re-raises. A call that raises is raised in the parent once the pool has finished the other
calls (each writes its own record, which a resumed sweep reuses).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from fusebench.runtime import interrupt


def run_in_processes(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int) -> list[Any]:
    """``[fn(*args) for args in calls]``, ``workers`` calls at a time in spawned processes."""
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(max_workers=max(1, min(workers, len(calls))), mp_context=mp.get_context("spawn"),
                                initializer=interrupt.install) as pool:
        futures = [pool.submit(fn, *args) for args in calls]
        try:
            return [f.result() for f in futures]  # in the order of the calls
        except KeyboardInterrupt:  # no further call starts; the running ones are interrupted, then the pool ends
            for f in futures:
                f.cancel()
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            raise


__all__ = ["run_in_processes"]
