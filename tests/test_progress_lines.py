"""Progress off a terminal: log lines per cell and per phase (fusebench.runtime.progress)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fusebench.runtime import progress


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _reporter(total=10, initial=0, interval=30.0):
    clock, lines = FakeClock(), []
    bar = progress.LineReporter(total, initial, "q/m3g/seed0 pretrain", interval=interval, clock=clock,
                                write=lines.append)
    return bar, clock, lines


def _step(bar, clock, dt, loss):
    clock.t += dt
    bar.set_postfix(refresh=False, loss=f"{loss:.4f}")
    bar.update(1)


def test_reporter_writes_at_most_one_line_per_interval_and_a_final_one() -> None:
    bar, clock, lines = _reporter(total=10, interval=30.0)
    for i in range(4):  # 4 steps of 10 s: one line once 30 s have passed
        _step(bar, clock, 10.0, 3.0 - 0.1 * i)
    assert lines == ["[fusebench] q/m3g/seed0 pretrain: step 3/10 (30%) loss 2.8000 0.100 it/s elapsed 30.0s"]
    _step(bar, clock, 10.0, 2.5)  # 20 s after the last line: nothing
    assert len(lines) == 1
    _step(bar, clock, 10.0, 2.4)
    assert lines[-1] == "[fusebench] q/m3g/seed0 pretrain: step 6/10 (60%) loss 2.4000 0.100 it/s elapsed 60.0s"
    _step(bar, clock, 5.0, 2.3)
    bar.close()
    assert lines[-1] == "[fusebench] q/m3g/seed0 pretrain: step 7/10 (70%) loss 2.3000 0.108 it/s elapsed 65.0s"
    assert len(lines) == 3
    bar.close()  # once
    assert len(lines) == 3


def test_reporter_every_step_rate_from_this_run_and_no_duplicate_final_line() -> None:
    bar, clock, lines = _reporter(total=320, initial=100, interval=0.0)  # resumed at step 100
    for _ in range(20):
        _step(bar, clock, 0.05, 3.21)
    assert len(lines) == 20
    assert [int(re.search(r"step (\d+)/320", s).group(1)) for s in lines] == list(range(101, 121))
    assert lines[-1] == "[fusebench] q/m3g/seed0 pretrain: step 120/320 (37%) loss 3.2100 20.0 it/s elapsed 1.0s"
    bar.close()  # the last step was just written
    assert len(lines) == 20


def test_reporter_measures_its_own_rate_and_handles_an_unknown_total() -> None:
    bar, clock, lines = _reporter(total=None, interval=0.0)
    clock.t += 2.0
    bar.set_postfix(loss="1.0000", it_s="99.0")  # the pretraining postfix's own rate is not repeated
    bar.update(4)
    assert lines == ["[fusebench] q/m3g/seed0 pretrain: step 4 loss 1.0000 2.0 it/s elapsed 2.0s"]


def test_interval_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("FUSEBENCH_LOG_EVERY", raising=False)
    assert progress.log_every() == 30.0
    monkeypatch.setenv("FUSEBENCH_LOG_EVERY", "0")
    assert progress.log_every() == 0.0
    monkeypatch.setenv("FUSEBENCH_LOG_EVERY", "2.5")
    assert progress.LineReporter(5).interval == 2.5
    monkeypatch.setenv("FUSEBENCH_LOG_EVERY", "often")
    with pytest.warns(UserWarning, match="FUSEBENCH_LOG_EVERY"):
        assert progress.log_every() == 30.0


def test_off_a_terminal_lines_on_a_terminal_tqdm(monkeypatch, capsys) -> None:
    from tqdm.auto import tqdm

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(progress.progress_bar(5, 0, "x"), progress.LineReporter)
    progress.say("start q/m3g/seed0")
    assert capsys.readouterr().err == "[fusebench] start q/m3g/seed0\n"

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = progress.progress_bar(5, 0, "x")
    try:
        assert isinstance(bar, tqdm) and not isinstance(bar, progress.LineReporter)
    finally:
        bar.close()
    written = []
    monkeypatch.setattr(tqdm, "write", classmethod(lambda cls, s, file=None, **kw: written.append((s, file))))
    progress.say("done q/m3g/seed0 in 1.0s")  # between the bars, on stderr
    assert written == [("[fusebench] done q/m3g/seed0 in 1.0s", sys.stderr)]

    for tty in (True, False):  # disabled: nothing either way
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty, raising=False)
        silent = progress.progress_bar(5, 0, "x", enabled=False)
        assert not isinstance(silent, (tqdm, progress.LineReporter))
        silent.set_postfix(refresh=False, loss="1")
        silent.update(1)
        silent.close()


def test_cell_bar_follows_the_cell_it_runs_in(monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not isinstance(progress.cell_bar(3, "tuple candidates"), progress.LineReporter)  # outside a cell
    with progress.cell("q/tuple_infonce/seed0", True):
        bar = progress.cell_bar(3, "tuple candidates (epoch 0, beta)")
        assert isinstance(bar, progress.LineReporter)
        assert bar.desc == "q/tuple_infonce/seed0 tuple candidates (epoch 0, beta)"
    with progress.cell("q/tuple_infonce/seed0", False):
        assert not isinstance(progress.cell_bar(3, "x"), progress.LineReporter)


def test_gaussian_mi_phase_speaks(tmp_path, monkeypatch, capsys) -> None:
    from fusebench import benchmarks
    from fusebench.cells.gaussian_mi import run_gaussian_mi
    from fusebench.spec.request import CellRequest

    monkeypatch.setenv("FUSEBENCH_LOG_EVERY", "0")
    spec = benchmarks.load("polyview-gaussian-mi", overrides={"pretrain.epochs": 2, "options.multiplicities": [2]},
                           synthetic=True)
    run_gaussian_mi(CellRequest(spec, "pvc_geometric", 0, tmp_path), device="cpu", progress=True)
    err = capsys.readouterr().err
    assert "polyview-gaussian-mi/pvc_geometric/seed0 M=2: step 1/2 (50%) loss " in err
    assert "polyview-gaussian-mi/pvc_geometric/seed0 M=2: step 2/2 (100%) loss " in err


# ---- end to end: `fusebench run` with stderr going to a file -----------------------------------
def _run(tmp_path: Path, *flags: str) -> str:
    log = tmp_path / "stderr.log"
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "fusebench", "run", "quickstart", "--objective", "infonce_pwe", "--seeds", "0",
             "--out", str(tmp_path / "runs"), "--set", "pretrain.epochs=1", "--set", "downstream.epochs=1", *flags],
            stdout=subprocess.PIPE, stderr=f, text=True, timeout=300,
            env={**os.environ, "FUSEBENCH_LOG_EVERY": "0"})
    text = log.read_text()
    assert proc.returncode == 0, text
    return text


def _steps(text: str, phase: str) -> list[int]:
    return [int(n) for n in re.findall(rf"quickstart/infonce_pwe/seed0 {phase}: step (\d+)/\d+ \(\d+%\) loss "
                                       r"\d+\.\d{4} [\d.]+ it/s elapsed [\d.]+s", text)]


@pytest.mark.parametrize("flags", [["--progress"], []], ids=["progress-flag", "default"])
def test_run_writes_progress_lines_into_a_file(tmp_path, flags) -> None:
    text = _run(tmp_path, *flags)
    assert re.search(r"\[fusebench\] start quickstart/infonce_pwe/seed0 device=cpu precision=32 threads=\d+\n", text)
    pre, probe = _steps(text, "pretrain"), _steps(text, "linear_probe")
    assert len(pre) >= 2 and pre == sorted(pre) and len(set(pre)) == len(pre)
    assert len(probe) >= 2 and probe == sorted(probe) and len(set(probe)) == len(probe)
    assert re.search(r"\[fusebench\] done quickstart/infonce_pwe/seed0 in \d+\.\ds \(acc \d\.\d{4}\)\n", text)
    assert text.index("start quickstart") < text.index(" pretrain: ") < text.index(" linear_probe: ") \
        < text.index("done quickstart")
    assert "\r" not in text  # no bars in a log file


def test_no_progress_is_silent(tmp_path) -> None:
    text = _run(tmp_path, "--no-progress")
    assert "[fusebench]" not in text


def test_a_step_longer_than_the_interval_is_said_while_it_runs() -> None:
    """A step of an M3G cell at k = 12 took minutes with nothing written: the reporter's helper thread calls
    beat(), which writes a line once no line was written and the step under way has run for an interval."""
    from fusebench.runtime.progress import LineReporter

    now, lines = [0.0], []
    bar = LineReporter(130, desc="q/m3g/seed0 pretrain", interval=30.0, clock=lambda: now[0], write=lines.append)
    now[0] = 10.0
    bar.update()  # step 1 done at 10 s: no line yet (< 30 s)
    for t in (20.0, 39.0):  # the step under way has run 10 s, 29 s: nothing to say
        bar.beat(t)
    assert lines == []
    bar.beat(41.0)  # 31 s into step 2, 41 s since the last line
    assert lines == ["[fusebench] q/m3g/seed0 pretrain: step 1/130 (0%) 0.024 it/s elapsed 41.0s; step 2 running "
                     "for 31.0s"]
    bar.beat(60.0)  # 19 s since that line: nothing
    bar.beat(71.5)
    assert lines[-1].endswith("elapsed 71.5s; step 2 running for 61.5s") and len(lines) == 2
    now[0] = 80.0
    bar.update()  # step 2 done, 8.5 s after the last line: no line
    assert len(lines) == 2
    bar.beat(105.0)  # 33.5 s since the last line, but step 3 has run 25 s: nothing
    now[0] = 106.0
    bar.update()  # step 3 done: the usual line (more than 30 s since the last)
    assert lines[-1] == "[fusebench] q/m3g/seed0 pretrain: step 3/130 (2%) 0.028 it/s elapsed 106.0s"
    bar.close()
    bar.beat(200.0)  # closed: silent
    assert len(lines) == 3  # closed after a line at its step: nothing more


def test_the_heartbeat_thread_ends_with_its_reporter() -> None:
    import gc
    import threading

    from fusebench.runtime.progress import LineReporter

    def made(build):  # the helper threads that building the reporter started (others may be ending meanwhile)
        before = set(threading.enumerate())
        reporter = build()
        return reporter, [t for t in set(threading.enumerate()) - before if t.name == "fusebench-progress"]

    bar, (thread,) = made(lambda: LineReporter(10, desc="x", interval=1.0, write=lambda line: None))  # real clock
    bar.close()
    thread.join(timeout=60)  # it wakes at once when closed (the bound: a hang fails, not waits)
    assert not thread.is_alive()
    dropped, (thread,) = made(lambda: LineReporter(10, desc="y", interval=1.0, write=lambda line: None))
    del dropped  # never closed: dropped instead
    gc.collect()
    thread.join(timeout=60)  # it notices the reporter is gone at its next wake (1 s)
    assert not thread.is_alive()
    _, none = made(lambda: LineReporter(10, interval=1.0, clock=lambda: 0.0, write=lambda line: None))
    assert none == []  # an injected clock: no thread (tests call beat)
