"""The local worker pool (``fusebench.sweep.process_pool``) under Ctrl-C sent to the whole process group, as a
terminal sends it: one worker busy with a call, the other idle, waiting for its next call inside the pool's queue.
The idle worker used to be interrupted there, holding the queue's lock, and the sweep hung for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_ctrl_c_to_the_process_group_ends_the_pool_with_one_worker_idle(tmp_path: Path) -> None:
    module = tmp_path / "poolcalls.py"
    module.write_text(textwrap.dedent("""
        import time
        from pathlib import Path

        def call(marker, busy):
            Path(marker).write_text("started")
            while busy:  # interrupted only by a signal
                time.sleep(0.05)
            return 1
    """))
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        from fusebench.sweep.process_pool import run_in_processes
        from poolcalls import call

        if __name__ == "__main__":
            folder = Path(sys.argv[1])
            try:
                run_in_processes(call, [(str(folder / "busy"), True), (str(folder / "quick"), False)], 2)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
    """))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # spawning two interpreters under load: a bound, not a measurement
        while not ((tmp_path / "busy").exists() and (tmp_path / "quick").exists()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.1)
        time.sleep(0.5)  # the quick call's worker back in the queue, waiting for a call that never comes
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=300)  # it used to hang here for good
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert "interrupted" in out and "Traceback" not in out, out


def test_a_worker_told_to_end_during_a_call_starts_no_further_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM during a call unwinds it (Terminated) and is noted for the worker: a call it takes after that (already
    queued by the pool) returns 'interrupted' instead of running its cell (interrupt.terminating was never set)."""
    from fusebench.runtime import interrupt
    from fusebench.sweep import launchers, process_pool

    monkeypatch.setattr(interrupt, "_RECEIVED", [])  # this process's record of signals, restored after the test

    def told_to_end() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this returns

    with pytest.raises(interrupt.Terminated):
        process_pool._call(told_to_end)
    assert interrupt.terminating()
    monkeypatch.setattr(launchers, "sweep_cell", lambda *a: pytest.fail("a cell ran after SIGTERM"))
    request = type("R", (), {"spec": type("S", (), {"name": "b"})(), "objective": "o", "seed": 0})()
    assert launchers._worker_cell(request, None, {}) == {"status": "interrupted", "benchmark": "b", "objective": "o",
                                                          "seed": 0}


def _pool_calls_module(folder: Path) -> None:
    (folder / "poolcrash.py").write_text(textwrap.dedent("""
        import os
        import signal
        from pathlib import Path

        def call(folder, name):
            if name == "dies":  # as the out-of-memory killer ends a worker
                os.kill(os.getpid(), signal.SIGKILL)
            if name.startswith("raises"):
                raise ValueError(f"a call's own error ({name})")
            Path(folder, name).write_text("ran")
            return name.upper()
    """))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("with_on_crash", [True, False])
def test_a_worker_dying_in_a_call_fails_that_call_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       with_on_crash: bool) -> None:
    """A worker killed during its call (SIGKILL, as the out-of-memory killer sends it) broke the whole pool: every
    call still queued failed with BrokenProcessPool and the sweep stopped. Now that call alone is the crash (its
    result from ``on_crash``, or WorkerDied raised once the rest have run) and every other call runs."""
    from fusebench.sweep.process_pool import WorkerDied, run_in_processes

    _pool_calls_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")  # the workers
    monkeypatch.setitem(sys.modules, "poolcrash", None)  # gone again after the test, as before it
    del sys.modules["poolcrash"]  # this test's module imported below, not an earlier test's cached one
    import poolcrash

    names = ["a", "b", "dies", "c", "d", "e"]
    calls = [(str(tmp_path), n) for n in names]
    if with_on_crash:
        got = run_in_processes(poolcrash.call, calls, 2, on_crash=lambda args, how: f"crashed {args[1]}: {how}")
        assert got[:2] == ["A", "B"] and got[3:] == ["C", "D", "E"], got
        assert got[2] == "crashed dies: killed by SIGKILL: the kernel's out-of-memory killer sends it", got
    else:
        with pytest.raises(WorkerDied, match=r"a worker process died running call 3 of 6: killed by SIGKILL"):
            run_in_processes(poolcrash.call, calls, 2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and p.suffix == "") == ["a", "b", "c", "d", "e"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_call_error_and_a_crash_both_leave_the_others_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that raises is raised after the others have run, as before, also when another call's worker died."""
    from fusebench.sweep.process_pool import run_in_processes

    _pool_calls_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setitem(sys.modules, "poolcrash", None)  # gone again after the test, as before it
    del sys.modules["poolcrash"]  # this test's module imported below, not an earlier test's cached one
    import poolcrash

    calls = [(str(tmp_path), n) for n in ["raises", "a", "dies", "b"]]
    with pytest.raises(ValueError, match="a call's own error"):
        run_in_processes(poolcrash.call, calls, 2, on_crash=lambda args, how: "crashed")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and p.suffix == "") == ["a", "b"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_every_call_error_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several calls raised (and a worker died in another): the first call's error is raised, with a note for each
    other, in call order; only the first was said before."""
    from fusebench.sweep.process_pool import run_in_processes

    _pool_calls_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setitem(sys.modules, "poolcrash", None)
    del sys.modules["poolcrash"]
    import poolcrash

    calls = [(str(tmp_path), n) for n in ["raises", "a", "dies", "raises too"]]
    with pytest.raises(ValueError) as err:
        run_in_processes(poolcrash.call, calls, 2)
    assert str(err.value) == "a call's own error (raises)"
    assert err.value.__notes__ == [
        "also raised by call 3 of 4: WorkerDied: a worker process died running call 3 of 4: killed by SIGKILL: the "
        "kernel's out-of-memory killer sends it",
        "also raised by call 4 of 4: ValueError: a call's own error (raises too)"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and p.suffix == "") == ["a"]


def test_a_cell_whose_worker_died_is_a_failed_cell_with_its_failed_json(tmp_path: Path) -> None:
    """The local launcher's record of such a cell: failed.json naming how the worker died, as any failed cell."""
    import json

    from fusebench import benchmarks
    from fusebench.spec.request import CellRequest
    from fusebench.sweep.launchers import _crashed_cell

    request = CellRequest(benchmarks.load("quickstart"), "m3g", 1, tmp_path)
    got = _crashed_cell((request, None, {}), "killed by SIGKILL")
    on_disk = json.loads((request.cell / "failed.json").read_text())
    assert got == on_disk and got["status"] == "failed" and (got["objective"], got["seed"]) == ("m3g", 1)
    assert got["error"] == "WorkerDied: the worker process running the cell died, killed by SIGKILL"


def test_a_sibling_terminated_in_its_calls_finally_is_not_blamed_for_the_crash(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken pool's SIGTERM reaching a sibling after its call returned, in the ``finally`` just before its start
    mark is removed, unwinds it there: the mark stayed and the parent counted that call as the crash (a cell
    recorded failed, or WorkerDied) though its worker was merely terminated."""
    from fusebench.runtime import interrupt
    from fusebench.sweep import process_pool

    monkeypatch.setattr(interrupt, "_RECEIVED", [])
    real_unlink, sent = Path.unlink, []

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if not sent:  # the pool's SIGTERM lands as the mark is about to go
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(interrupt.Terminated):
        process_pool._marked_call(str(tmp_path), 3, lambda: "done")
    assert sent and not (tmp_path / "3").exists()


def test_a_crash_whose_on_crash_raises_leaves_the_other_calls_running(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """on_crash raising (e.g. the crashed cell's record unwritable) was raised at once: the calls the broken pool
    left were never run again; it is raised once they ran, as a call's own error is."""
    from fusebench.sweep.process_pool import run_in_processes

    _pool_calls_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "poolcrash", None)
    del sys.modules["poolcrash"]
    import poolcrash

    def on_crash(args: tuple, how: str) -> None:
        raise OSError("cannot record the crash")

    calls = [(str(tmp_path), "dies"), *[(str(tmp_path), f"ok{i}") for i in range(4)]]
    with pytest.raises(OSError, match="cannot record"):
        run_in_processes(poolcrash.call, calls, 1, on_crash=on_crash)
    assert all((tmp_path / f"ok{i}").exists() for i in range(4))


def test_a_pool_broken_during_the_submissions_is_a_broken_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker dying while the parent still submits (a quick crash, many calls) makes ``submit`` raise
    BrokenProcessPool: it escaped run_in_processes as such, the other calls never run; it is a broken round."""
    import concurrent.futures as cf
    from concurrent.futures.process import BrokenProcessPool

    from fusebench.sweep.process_pool import run_in_processes

    _pool_calls_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "poolcrash", None)
    del sys.modules["poolcrash"]
    import poolcrash

    real_submit, rounds = cf.ProcessPoolExecutor.submit, []

    def submit(self, fn, *args, **kwargs):  # the first round's pool breaks after its first submission
        if len(rounds) == 1 and getattr(self, "_first_done", False):
            raise BrokenProcessPool("A child process terminated abruptly, the process pool is not usable anymore")
        if not getattr(self, "_first_done", False):
            rounds.append(self)
            self._first_done = True
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(cf.ProcessPoolExecutor, "submit", submit)
    calls = [(str(tmp_path), f"ok{i}") for i in range(3)]
    assert run_in_processes(poolcrash.call, calls, 1) == ["OK0", "OK1", "OK2"]


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an orphan's new parent may reap it late)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL, reparenting")
def test_workers_end_with_their_parent_killed_outright(tmp_path: Path) -> None:
    """The sweep killed by SIGKILL (as ``kill -9`` or the out-of-memory killer ends it) while both workers run a call:
    the workers ran on, each finished its call, one took a further call from the pool's queue and ran it too, and
    then both waited for good on a queue nobody writes to (a resumed sweep skipped their cells as busy). Now each
    worker's call unwinds (its ``finally`` runs: the cell lock is released), no further call starts, and both end."""
    module = tmp_path / "orphancalls.py"
    module.write_text(textwrap.dedent("""
        import os
        import time
        from pathlib import Path

        def call(folder, name):
            Path(folder, name + ".started").write_text(str(os.getpid()))
            try:
                while not Path(folder, "go").exists():  # ends by a signal, or once the test says go
                    time.sleep(0.05)
            finally:
                Path(folder, name + ".unwound").write_text("")
            return name
    """))
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent("""
        import sys
        from fusebench.sweep.process_pool import run_in_processes
        from orphancalls import call

        if __name__ == "__main__":
            run_in_processes(call, [(sys.argv[1], n) for n in ("a", "b", "c", "d")], 2)
    """))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300  # spawning two interpreters under load: a bound, not a measurement
        while not ((tmp_path / "a.started").exists() and (tmp_path / "b.started").exists()):
            assert proc.poll() is None and time.monotonic() < deadline, "the pool never started both calls"
            time.sleep(0.1)
        workers = [int((tmp_path / f"{n}.started").read_text()) for n in ("a", "b")]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 120  # a poll a second: a bound, not a measurement
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in workers if _running(pid)]
        (tmp_path / "go").write_text("")  # (without the fix: what lets the orphans run on)
        assert not left, f"worker(s) {left} still running after their parent was killed"
        assert (tmp_path / "a.unwound").exists() and (tmp_path / "b.unwound").exists()
        assert not (tmp_path / "c.started").exists() and not (tmp_path / "d.started").exists()
    finally:
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
