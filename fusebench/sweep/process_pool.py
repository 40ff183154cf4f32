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
writes its own record, which a resumed sweep reuses); where several raised, the first call's exception is raised
with one note per other (``also raised by call i of n: ...``), so none is lost.

A worker that dies during a call (killed by the out-of-memory killer, a segmentation fault) breaks the pool:
every call not finished gets ``BrokenProcessPool``, and the others still running are terminated. Each call marks
its start and end in a folder of the parent's (a file named by its index, holding the worker's pid), so the parent
knows which call the worker died in: that call is the crash (``on_crash(args, exit code)`` gives its result, else a
:class:`WorkerDied` is raised once the others are done), and the calls the breakage interrupted or never started
run again in a new pool (a cell continues from its ``last.pt``).

A worker whose parent dies (the sweep killed by SIGKILL, or by the out-of-memory killer) ends too: it polls its
parent every :data:`PARENT_POLL_S` seconds and, once the parent is gone, sends itself SIGTERM until it has ended, so
its call unwinds as above (its cell lock released, the cell resumable from its ``last.pt``) and it takes no further
call. (A spawned worker outlives its parent otherwise: it finished its cell, took one more from the pool's queue and
ran it, then waited for good on a queue no process writes to, while a resumed sweep skipped its cells as busy.)
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from fusebench.runtime import interrupt

#: seconds a terminated worker has to unwind its call (release its cell lock) before it is killed
GRACE_S = 10.0
#: seconds between two looks of a worker at whether its parent (the sweep) still lives
PARENT_POLL_S = 1.0


def _idle_worker() -> None:
    """A worker's initializer: SIGINT ignored and SIGTERM fatal while no call runs (:func:`_call` handles both
    during a call); the worker ends with its parent (:func:`_end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), name="fusebench-parent-watch", daemon=True).start()


_PARENT_GONE = threading.Event()  # set in a worker whose parent has died: it starts no further call


def _end_with_parent(parent: int) -> None:
    """Once this process's parent ``parent`` is gone (the process is given another parent: init or a subreaper), start
    no further call (:func:`_call`) and send this process SIGTERM, again every :data:`PARENT_POLL_S` seconds until it
    has ended: the first unwinds a running call (:func:`_once`), the next ends the worker once the call has unwound
    (:func:`_call`), or at once when idle."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    _PARENT_GONE.set()
    while True:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(PARENT_POLL_S)


_SIGNALS: list[int] = []  # the signals received during the running call
_MARK: list[Path] = []  # the start mark of the running call (:func:`_marked_call`)


def _once(signum: int, frame: object) -> None:
    """During a call: the first SIGINT / SIGTERM unwinds it; a later one (the parent's SIGTERM after the process
    group's Ctrl-C) is noted, not raised into the unwinding (a second exception there printed a traceback)."""
    _SIGNALS.append(signum)
    for mark in _MARK:  # a call interrupted by a signal (the broken pool's SIGTERM) is no crash, whenever it lands,
        mark.unlink(missing_ok=True)  # even in the call's ``finally`` before the mark's own removal
    if signum == signal.SIGTERM:  # told to end: a call this worker takes after this one starts no cell
        interrupt.note(signum)
    if len(_SIGNALS) == 1:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise interrupt.Terminated(f"terminated by signal {signal.Signals(signum).name}")


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with SIGINT and SIGTERM unwinding it (a ``KeyboardInterrupt``), then the idle handlers again; a
    worker told to end (SIGTERM) while its call unwound ends once it has; a worker whose parent has died starts no
    call (:func:`_end_with_parent`)."""
    if _PARENT_GONE.is_set():
        raise interrupt.Terminated("the sweep that started this worker has ended: no further call starts")
    _SIGNALS.clear()
    previous = {s: signal.signal(s, _once) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return fn(*args)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if signal.SIGTERM in _SIGNALS[1:]:  # (SIGTERM is fatal again: the worker ends here, its call unwound)
            os.kill(os.getpid(), signal.SIGTERM)


def _marked_call(marks: str, index: int, fn: Callable[..., Any], *args: Any) -> Any:
    """:func:`_call` with its start marked in ``marks`` (a file named ``index`` holding this worker's pid), removed
    when the call ends, whichever way; a file left there names the call a worker died in."""
    mark = Path(marks) / str(index)

    def marked(*a: Any) -> Any:  # (run by _call: with its signal handlers, so a SIGTERM here unwinds it too)
        _MARK[:] = [mark]  # (before the write: a signal from here on removes it)
        try:
            mark.write_text(str(os.getpid()))
            return fn(*a)
        finally:
            mark.unlink(missing_ok=True)
            _MARK.clear()

    return _call(marked, *args)


class WorkerDied(RuntimeError):
    """A worker process died during a call (no ``on_crash`` to make a result of it)."""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "its exit status unknown"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        why = ": the kernel's out-of-memory killer sends it" if -code == signal.SIGKILL else ""
        return f"killed by {name}{why}"
    return f"exit code {code}"


def run_in_processes(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int,
                     on_crash: Callable[[tuple[Any, ...], str], Any] | None = None) -> list[Any]:
    """``[fn(*args) for args in calls]``, ``workers`` calls at a time in spawned processes. A call whose worker
    died gets ``on_crash(args, how)`` as its result (``how``: the exit status in words), or, without ``on_crash``,
    a :class:`WorkerDied` raised once every other call has run; the calls a dying worker's pool left unfinished
    run again in a new pool (see the module docstring)."""
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    todo = list(range(len(calls)))
    with tempfile.TemporaryDirectory(prefix="fusebench-pool-") as marks:
        while todo:
            crashed = _round(fn, calls, todo, workers, marks, results, errors)
            for i, how in crashed:
                if on_crash is not None:
                    try:
                        results[i] = on_crash(calls[i], how)
                    except Exception as e:  # (e.g. its record unwritable): raised once the others ran, as a call's
                        e._fusebench_call = i  # type: ignore[attr-defined]
                        errors.append(e)
                else:
                    cell = getattr(calls[i][0], "cell", None) if calls[i] else None
                    died = WorkerDied(f"a worker process died running call {i + 1} of {len(calls)}"
                                      f"{f' (cell {cell})' if cell is not None else ''}: {how}")
                    died._fusebench_call = i  # type: ignore[attr-defined]
                    errors.append(died)
            left = [i for i in todo if i not in results and i not in dict(crashed) and not _raised(i, errors)]
            if left == todo:  # the pool broke with no call started, ended or crashed: not a call's doing
                raise WorkerDied(f"the pool of {workers} worker process(es) broke before any call started")
            todo = left
    if errors:
        first = min(errors, key=lambda e: getattr(e, "_fusebench_call", len(calls)))  # the first call's, in call order
        for e in sorted((e for e in errors if e is not first), key=lambda e: getattr(e, "_fusebench_call", len(calls))):
            i = getattr(e, "_fusebench_call", None)
            first.add_note(f"also raised{f' by call {i + 1} of {len(calls)}' if i is not None else ''}: "
                           f"{type(e).__name__}: {e}")
        raise first
    return [results[i] for i in range(len(calls))]


def _raised(index: int, errors: list[BaseException]) -> bool:
    return any(getattr(e, "_fusebench_call", None) == index for e in errors)


def _round(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], todo: list[int], workers: int, marks: str,
           results: dict[int, Any], errors: list[BaseException]) -> list[tuple[int, str]]:
    """Run the calls ``todo`` in one pool, their results into ``results`` and the exceptions they raised into
    ``errors`` (each tagged with its call's index); returns the calls a worker died in, with how it died (the
    calls that pool left unfinished otherwise are neither: the caller runs them again)."""
    import concurrent.futures as cf
    import multiprocessing as mp
    from concurrent.futures.process import BrokenProcessPool

    pool = cf.ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=mp.get_context("spawn"),
                                  initializer=_idle_worker)
    procs: list[Any] = []
    try:
        futures = {}
        broken = False
        for i in todo:
            try:
                futures[i] = pool.submit(_marked_call, marks, i, fn, *calls[i])
                procs += [p for p in (getattr(pool, "_processes", None) or {}).values() if p not in procs]
            except BrokenProcessPool:  # a worker died while the calls were still being submitted: the rest run again
                broken = True
                break
        for i, future in futures.items():  # in the order of the calls
            try:
                results[i] = future.result()
            except BrokenProcessPool:
                broken = True
            except KeyboardInterrupt:
                raise
            except Exception as e:  # a call raised: the others finish (each writes its own record), then it is raised
                e._fusebench_call = i  # type: ignore[attr-defined]
                errors.append(e)
        pool.shutdown(wait=True)  # (a Ctrl-C while it waits ends the workers too: they ignore it when idle)
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
    if not broken:
        return []
    exits = {}
    for proc in procs:
        proc.join(GRACE_S)  # the pool terminated the other workers: each has ended, or ends now
        exits[proc.pid] = proc.exitcode
    crashed = []
    for mark in Path(marks).iterdir():  # a call still marked: its worker died in it (the others unwound)
        i, pid = int(mark.name), int(mark.read_text() or 0)
        mark.unlink()
        crashed.append((i, _exit_text(exits.get(pid))))
    return sorted(crashed)


__all__ = ["WorkerDied", "run_in_processes"]
