"""Progress of a run: tqdm bars on a terminal, plain log lines everywhere else.

Every training phase (pretraining, the downstream protocol, the Gaussian MI steps, the TupleInfoNCE
candidates) gets its bar from :func:`progress_bar`. When stderr is a terminal that is a tqdm bar;
otherwise (a log file, a SLURM job, CI) it is a :class:`LineReporter` with the same interface
(``update`` / ``set_postfix`` / ``close``) that writes one line to stderr at most every
``FUSEBENCH_LOG_EVERY`` seconds (default 30; ``0``: every step) and one final line when the phase
closes::

    [fusebench] quickstart/m3g/seed0 pretrain: step 120/320 (37%) loss 3.2100 18.2 it/s elapsed 6.6s

Cells are announced with :func:`say` (``start`` / ``done`` / ``failed`` lines), on a terminal between
the bars. The reporter reads only the values the loop already has (the loss it turned into a float
for its curve): it adds no host-device synchronisation. Only rank 0 of a distributed run speaks.
``fusebench run --no-progress`` turns it all off.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

PREFIX = "[fusebench]"
#: seconds between two lines of a phase when stderr is not a terminal (``FUSEBENCH_LOG_EVERY``)
DEFAULT_INTERVAL = 30.0
ENV_INTERVAL = "FUSEBENCH_LOG_EVERY"
_OWN_FIELDS = ("it_s",)  # postfix fields the reporter measures itself (the rate)


def log_every() -> float:
    """Seconds between two progress lines: ``$FUSEBENCH_LOG_EVERY`` (0 = every step), else 30."""
    raw = os.environ.get(ENV_INTERVAL, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        return max(0.0, float(raw))
    except ValueError:
        warnings.warn(f"{ENV_INTERVAL}={raw!r} is not a number of seconds; using {DEFAULT_INTERVAL:g}", stacklevel=2)
        return DEFAULT_INTERVAL


def is_terminal() -> bool:
    """Whether stderr is an interactive terminal (then bars, else lines)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def _speaks() -> bool:
    if "torch.distributed" not in sys.modules:  # no process group without it: rank 0 (and no torch import for that)
        return True
    from fusebench.runtime import distributed

    return distributed.rank() == 0  # one voice in a distributed run


def say(message: str) -> None:
    """Write ``[fusebench] message`` to stderr now (on a terminal without breaking the bars)."""
    if _speaks():
        say_line(f"{PREFIX} {message}")


def _number(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else f"{x:.3f}"


class LineReporter:
    """A progress bar that writes lines: at most one per ``interval`` seconds (on :meth:`update`),
    plus one at :meth:`close`; and while one step takes longer than ``interval`` (an M3G step at k = 12 can take
    minutes), a line every ``interval`` seconds saying so (:meth:`beat`, from a helper thread that ends with the
    reporter: at :meth:`close`, or when it is dropped). ``clock`` (monotonic seconds) and ``write`` are injectable
    for tests; ``heartbeat`` (default: with the real clock only) starts the thread (tests call :meth:`beat`)."""

    def __init__(self, total: int | None, initial: int = 0, desc: str = "", interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic, write: Callable[[str], None] | None = None,
                 heartbeat: bool | None = None) -> None:
        import threading

        self.total, self.n, self.desc = total, initial, desc
        self.interval = log_every() if interval is None else float(interval)
        self.clock = clock
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.postfix: dict[str, Any] = {}
        self._start_n = initial
        self._t0 = self._last = self._stepped = clock()
        self._said_n: int | None = None  # the step of the last line written
        self.closed = False
        self._lock = threading.Lock()  # the helper thread writes too
        self._stop = threading.Event()
        if (clock is time.monotonic if heartbeat is None else heartbeat) and self.interval > 0:
            _start_heartbeat(self)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._stepped = self.clock()
        if now - self._last >= self.interval:
            self._line(now)

    def beat(self, now: float) -> None:
        """At ``now``: a line when no line was written for ``interval`` seconds and the step under way has taken
        that long (``... step 2/130 (1%) ... elapsed 60.0s; step 3 running for 41.0s``)."""
        if self.closed or self.interval <= 0 or now - self._last < self.interval or now - self._stepped < self.interval:
            return
        self._line(now, f"; step {self.n + 1} running for {now - self._stepped:.1f}s")

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **fields: Any) -> None:
        self.postfix = {**(ordered_dict or {}), **fields}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        if self._said_n != self.n:  # not said already (FUSEBENCH_LOG_EVERY=0)
            self._line(self.clock())

    def line(self, now: float) -> str:
        """The progress line at time ``now``."""
        elapsed = now - self._t0
        step = f"step {self.n}"
        if self.total:
            step += f"/{self.total} ({100 * self.n // self.total}%)"
        fields = [f"{k} {v}" for k, v in self.postfix.items() if k not in _OWN_FIELDS]
        rate = (self.n - self._start_n) / elapsed if elapsed > 0 else 0.0
        return " ".join([f"{PREFIX} {self.desc}: {step}", *fields, f"{_number(rate)} it/s", f"elapsed {elapsed:.1f}s"])

    def _line(self, now: float, tail: str = "") -> None:
        with self._lock:
            self.write(self.line(now) + tail)
            self._last, self._said_n = now, self.n


def _start_heartbeat(reporter: LineReporter) -> None:
    """The helper thread of ``reporter``'s :meth:`LineReporter.beat`: it holds the reporter weakly and ends when
    the reporter is closed or dropped (a phase left by an exception does not speak on)."""
    import threading
    import weakref

    ref, stop, every = weakref.ref(reporter), reporter._stop, max(1.0, reporter.interval)

    def run() -> None:
        while not stop.wait(every):
            alive = ref()
            if alive is None:
                return
            alive.beat(alive.clock())
            del alive

    threading.Thread(target=run, name="fusebench-progress", daemon=True).start()


class _Silent:
    """The bar of a phase that shows nothing."""

    n = 0

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int | None, initial: int = 0, desc: str = "", enabled: bool = True) -> Any:
    """The bar of one phase: tqdm on a terminal, a :class:`LineReporter` elsewhere, nothing when
    ``enabled`` is false (or on ranks other than 0)."""
    if not enabled or not _speaks():
        return _Silent()
    if is_terminal():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, leave=False)
    return LineReporter(total, initial, desc)


# ---- the cell being run, for code that has no progress flag of its own (e.g. tuple_optim) -------
_CELL: contextvars.ContextVar[tuple[str, bool]] = contextvars.ContextVar("fusebench_progress_cell", default=("", False))


@contextmanager
def cell(label: str, enabled: bool) -> Iterator[None]:
    """Within: :func:`cell_bar` names ``label`` and shows only when ``enabled``."""
    token = _CELL.set((label, enabled))
    try:
        yield
    finally:
        _CELL.reset(token)


def cell_bar(total: int | None, desc: str) -> Any:
    """A :func:`progress_bar` for a part of the current cell (see :func:`cell`); silent outside one."""
    label, enabled = _CELL.get()
    return progress_bar(total, 0, f"{label} {desc}".strip(), enabled)


def track(items: Iterable[T], total: int | None, desc: str, enabled: bool = True) -> Iterator[T]:
    """``items`` with a :func:`progress_bar` of ``total`` steps (one per item; closed at the end or on an error):
    tqdm on a terminal, log lines elsewhere (a log file, CI)."""
    bar = progress_bar(total, 0, desc, enabled)
    try:
        for item in items:
            yield item
            bar.update()
    finally:
        bar.close()


def cell_track(items: Iterable[T], total: int | None, desc: str) -> Iterator[T]:
    """:func:`track` for a part of the current cell (see :func:`cell`); silent outside one."""
    label, enabled = _CELL.get()
    return track(items, total, f"{label} {desc}".strip(), enabled)


# ---- phases without steps (reading a file, standardising, hashing, fitting the probes) -----------
#: seconds a phase runs before :func:`phase` first says it (``FUSEBENCH_PHASE_AFTER``); quicker ones stay silent
DEFAULT_PHASE_AFTER = 5.0
ENV_PHASE_AFTER = "FUSEBENCH_PHASE_AFTER"
_PHASES_ON = [True]  # outside a cell: phases speak unless the sweep was started with progress off


def phases_enabled(on: bool) -> None:
    """Whether :func:`phase` speaks outside a cell (the sweep's ``progress``; inside a cell :func:`cell` decides)."""
    _PHASES_ON[0] = bool(on)


def _phase_after() -> float:
    raw = os.environ.get(ENV_PHASE_AFTER, "").strip()
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_PHASE_AFTER
    except ValueError:
        warnings.warn(f"{ENV_PHASE_AFTER}={raw!r} is not a number of seconds; using {DEFAULT_PHASE_AFTER:g}",
                      stacklevel=3)
        return DEFAULT_PHASE_AFTER


@contextmanager
def phase(desc: str, write: Callable[[str], None] | None = None) -> Iterator[None]:
    """A phase with no steps to count: once it has run ``FUSEBENCH_PHASE_AFTER`` seconds (default 5) a line
    ``[fusebench] <cell> <desc>: running for 5.0s``, then one every ``FUSEBENCH_LOG_EVERY`` seconds (at least 1),
    and ``<desc>: done in 12.3s`` when it ends -- nothing at all for a phase quicker than that. Written from a
    helper thread, so a single long call (``scipy.io.loadmat``, a z-score over a million rows) is reported
    while it runs. Inside a cell it speaks when the cell does (:func:`cell`); outside, unless
    :func:`phases_enabled` switched it off (``fusebench run --no-progress``). ``write``: the line writer (tests)."""
    label, enabled = _CELL.get()
    if not (enabled if label else _PHASES_ON[0]) or not _speaks():
        yield
        return
    import threading

    what = f"{label} {desc}".strip()
    out = write or say_line
    stop, t0, said = threading.Event(), time.monotonic(), []
    first, every = _phase_after(), max(1.0, log_every())

    def beat() -> None:
        wait = first
        while not stop.wait(wait):
            out(f"{PREFIX} {what}: running for {time.monotonic() - t0:.1f}s")
            said.append(True)
            wait = every

    thread = threading.Thread(target=beat, name="fusebench-phase", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if said:
            out(f"{PREFIX} {what}: done in {time.monotonic() - t0:.1f}s")


def say_line(line: str) -> None:
    """Write one finished progress line to stderr (on a terminal without breaking the bars)."""
    if is_terminal():
        from tqdm.auto import tqdm

        tqdm.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


__all__ = ["DEFAULT_INTERVAL", "DEFAULT_PHASE_AFTER", "ENV_INTERVAL", "ENV_PHASE_AFTER", "LineReporter", "cell",
           "cell_bar", "cell_track", "is_terminal", "log_every", "phase", "phases_enabled", "say_line", "track",
           "progress_bar", "say"]
