"""A finished cell's ``run.json`` is reused only when the leaderboard would read it (records/cell_file.py:
existing_record validates it with the leaderboard's own validator): an edited or damaged record is refused with
the validator's message naming the file and the field, in ``--plan``, in the run and in ``fusebench status`` (the
cell is "unreadable", not "done") alike, nothing recomputed or printed as the cell's result; the record is left as it
is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fusebench
from fusebench.engine.loop import RunError
from fusebench.records import RecordError, load_record
from fusebench.spec.request import cell_dir
from fusebench.sweep import status

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "downstream.epochs": 1}  # none pretrains nothing
OBJ = "none"  # a reference row: no pretraining, the record in a second
HINT = "; the leaderboard refuses this record: move the cell folder away to recompute it"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The text of a run.json the code wrote."""
    out = tmp_path_factory.mktemp("done")
    fusebench.run("quickstart", objective=OBJ, seeds=[0], out=out, synthetic=True, overrides=TINY, progress=False)
    return (cell_dir(out, "quickstart", OBJ, 0) / "run.json").read_text()


def _set_acc(value):
    def edit(rec: dict) -> None:
        rec["metrics"]["acc"]["value"] = value
    return edit


def _bare_number(rec: dict) -> None:
    rec["metrics"]["acc"] = 0.5


EDITS = {
    "accuracy above 1": (_set_acc(7.0), "metrics.acc.value"),
    "accuracy a string": (_set_acc("0.9"), "metrics.acc.value"),
    "entry a bare number": (_bare_number, "metrics.acc"),
    "metrics deleted": (lambda rec: rec.pop("metrics"), "metrics"),
    "schema 99": (lambda rec: rec.__setitem__("schema_version", 99), "schema_version"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_record_the_leaderboard_refuses_is_not_reused(tmp_path: Path, finished: str, edit: str) -> None:
    change, field = EDITS[edit]
    rec = json.loads(finished)
    assert rec["schema_version"] == 4 and 0 <= rec["metrics"]["acc"]["value"] <= 1  # what the edits start from
    change(rec)
    cell = cell_dir(tmp_path, "quickstart", OBJ, 0)
    cell.mkdir(parents=True)
    path = cell / "run.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(RecordError) as board:  # the leaderboard's reading of the file
        load_record(path)
    assert board.value.field == field and str(board.value).startswith(f"{path}: field {field!r}: expected ")
    expected = f"{board.value}{HINT}"
    rows = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                         progress=False, plan=True)
    assert [(r["action"], r["detail"]) for r in rows] == [("refused", expected)]
    with pytest.raises(RunError) as run:
        fusebench.run("quickstart", objective=OBJ, seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                      progress=False)
    assert str(run.value) == expected
    assert status.collect(tmp_path)["quickstart"][(OBJ, 0)] == ("unreadable", expected)  # not "done"
    assert path.read_text() == json.dumps(rec) and sorted(p.name for p in cell.iterdir()) == ["run.json"]


def test_the_record_as_written_is_reused(tmp_path: Path, finished: str) -> None:
    cell = cell_dir(tmp_path, "quickstart", OBJ, 0)
    cell.mkdir(parents=True)
    (cell / "run.json").write_text(finished)
    rows = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                         progress=False, plan=True)
    assert [(r["action"], r["detail"]) for r in rows] == [("reuse", str(cell / "run.json"))]
    (rec,) = fusebench.run("quickstart", objective=OBJ, seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                           progress=False)
    assert rec["metrics"] == json.loads(finished)["metrics"]
    assert status.collect(tmp_path)["quickstart"][(OBJ, 0)] == ("done", "")


def test_a_record_of_another_configuration_is_refused_naming_what_changed(tmp_path: Path, finished: str) -> None:
    """A record made under other settings was refused with its config hash and the current one alone (a checkpoint's
    refusal names the keys that changed); it now names them too, with the record's value and the current one, in the
    run and in ``--plan`` alike (both judge the cell with existing_record)."""
    from fusebench import benchmarks
    from fusebench.engine.cell import ConfigMismatchError
    from fusebench.records.cell_file import existing_record

    run_json = cell_dir(tmp_path, "quickstart", OBJ, 0) / "run.json"
    run_json.parent.mkdir(parents=True)
    run_json.write_text(finished)
    made = json.loads(finished)["config"]["downstream"]["lr"]
    spec = benchmarks.load("quickstart", overrides={**TINY, "downstream.lr": made * 2}, synthetic=True)
    with pytest.raises(ConfigMismatchError) as e:
        existing_record(run_json, spec, OBJ, None, 0)
    assert f"changed: downstream.lr: {made!r} in the record, now {made * 2!r})" in str(e.value), str(e.value)
    assert run_json.read_text() == finished


def test_a_lock_temp_left_by_a_run_killed_taking_the_lock_is_removed(tmp_path: Path) -> None:
    """A run killed while it took a cell's lock (its temporary ``..lock.*.tmp`` written, not yet linked as ``.lock``)
    left that file in the cell folder for good: the next run of the cell removed the other files killed runs
    half-wrote, not this one. It now removes it too, once it is a minute old (a process taking the lock at that
    instant writes one for a moment)."""
    import os
    import time

    cell = cell_dir(tmp_path, "quickstart", OBJ, 0)
    cell.mkdir(parents=True)
    old, young = cell / "..lock.killed.tmp", cell / "..lock.writing.tmp"
    for f in (old, young):
        f.write_text('{"pid": 1}')
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    fusebench.run("quickstart", objective=OBJ, seeds=[0], out=tmp_path, synthetic=True, overrides=TINY,
                  progress=False)
    assert (cell / "run.json").is_file()
    assert not old.exists() and young.exists()
