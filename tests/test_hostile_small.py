"""Small ones (issue 29 item 10): options a bench command would ignore are refused, a --source folder that does
not exist is named, and a sweep killed by SIGTERM keeps its finished cells' lines, intact records and no lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusebench.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args,named", [
    (["--k", "3"], "--k"), (["--n", "16"], "--n"), (["--eps", "0.05"], "--eps"),
    (["--k", "3", "--eps", "0.1"], "--k, --eps"), (["--dim", "8"], "--dim"), (["--backend", "eager"], "--backend"),
    (["--step-time", "--k", "3"], "--k"), (["--rounds", "5"], "--rounds"),
])
def test_bench_objectives_refuses_options_it_would_ignore(args, named, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "objectives", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{named} appl" in err and "only" in err


def test_bench_leaderboard_refuses_a_source_that_is_not_a_checkout(tmp_path, capsys):
    missing = tmp_path / "no-such-checkout"
    assert main(["bench", "leaderboard", "--source", str(missing)]) == 2
    assert f"--source {missing} does not exist" in capsys.readouterr().err
    assert main(["bench", "leaderboard", "--source", str(tmp_path)]) == 2  # a folder without the package
    assert f"--source {tmp_path} holds no fusebench package" in capsys.readouterr().err


def test_sigterm_keeps_finished_cells_and_releases_locks(tmp_path):
    from fusebench.records import validate_record

    out, log = tmp_path / "runs", tmp_path / "sweep.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FUSEBENCH_LOG_EVERY": "0"}
    cmd = [sys.executable, "-m", "fusebench", "run", "quickstart", "--synthetic", "--objective", "infonce_pwe",
           "--seeds", "0", "1", "2", "--set", "pretrain.epochs=1", "--set", "downstream.epochs=1", "--out", str(out)]
    with log.open("w") as fh:  # stdout and stderr to a file, as a batch job's log
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        first = out / "quickstart" / "infonce_pwe" / "seed0" / "run.json"
        done0 = "done quickstart/infonce_pwe/seed0"  # said once run.json is written: the signal comes after both
        deadline = time.monotonic() + 600
        while done0 not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.exists(), log.read_text()[-2000:]
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=300)
    text = log.read_text()
    assert rc == 128 + signal.SIGTERM, text[-2000:]
    records = sorted(out.rglob("run.json"))
    assert records and first in records
    for path in records:  # every record that exists is whole and valid
        rec = json.loads(path.read_text())
        validate_record(rec, str(path))
        # the finished cell's result line (stdout) and its done line (stderr) are in the log
        line = f"quickstart infonce_pwe seed{rec['seed']}: acc={rec['metrics']['acc']['value']:.4f}"
        assert line in text, text[-2000:]
        # a cell with a record is never said to be interrupted, even when the signal came just after the write
        assert f"interrupted quickstart/infonce_pwe/seed{rec['seed']}" not in text, text[-2000:]
    assert done0 in text
    assert "terminated (SIGTERM)" in text
    assert not list(out.rglob(".lock")), "a lock was left behind"
    assert not list(out.rglob("failed.json"))


def test_a_cell_interrupted_after_its_record_is_written_is_said_done(tmp_path, monkeypatch, capsys):
    """SIGTERM between the record's write and the cell's return (here: raised by the trackers' final log, which
    runs after run.json is written): the record stays, and the cell's line says done with its score, not
    interrupted."""
    from fusebench import benchmarks
    from fusebench.cells import execute
    from fusebench.engine.trackers import Trackers
    from fusebench.runtime.interrupt import Terminated
    from fusebench.spec.request import CellRequest, RunOptions

    def terminated(self, record, path):
        assert path.exists()  # the record is written before the trackers see it
        raise Terminated("terminated by signal SIGTERM")

    monkeypatch.setattr(Trackers, "log_record", terminated)
    spec = benchmarks.load("quickstart", overrides={"dataset.synthetic_spec": {"num_samples": 64, "seed": 0},
                                                    "pretrain.epochs": 1, "downstream.epochs": 1})
    request = CellRequest(spec, "infonce_pwe", 0, tmp_path)
    with pytest.raises(Terminated):
        execute.run_cell(request, RunOptions(progress=True, synthetic=True))
    err = capsys.readouterr().err
    rec = json.loads((request.cell / "run.json").read_text())
    score = rec["metrics"][spec.validation_metric]["value"]
    assert "done quickstart/infonce_pwe/seed0 in " in err and f"({spec.validation_metric} {score:.4f})" in err
    assert "interrupted quickstart/infonce_pwe/seed0" not in err
