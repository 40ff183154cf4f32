"""The run record is built once, complete, and written unchanged (issue #35 item 3): the cell builds it from how it
ran and what its protocol measured (``fusebench.records.builder.record_of``), ``numerics.speed``, ``versions`` and
the comparability key included; ``write_record`` validates and writes it without adding a field, and refuses a
record changed after it was built. A protocol's scorer says what it measured (``Scores``), not a record."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import fusebench
from fusebench.io import strict_json
from fusebench.records import RecordError, comparability_fields, comparability_key
from fusebench.records.cell_file import write_record

TINY = {"pretrain.epochs": 1, "pretrain.batch_size": 64, "dataset.synthetic_spec.num_samples": 128,
        "downstream.epochs": 1}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict, dict]:
    """The record the quickstart cell handed to write_record (a deep copy taken then) and the run.json written."""
    import fusebench.cells.standard as S

    out = tmp_path_factory.mktemp("runs")
    handed: list[dict] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(S, "write_record", lambda cell, record: (handed.append(copy.deepcopy(record)),
                                                        write_record(cell, record))[1])
    try:
        fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], synthetic=True, out=out, overrides=TINY,
                      progress=False)
    finally:
        mp.undo()
    assert len(handed) == 1
    return handed[0], json.loads((out / "quickstart" / "infonce_pwe" / "seed0" / "run.json").read_text())


def test_the_record_is_complete_when_built_and_written_as_built(built) -> None:
    rec, on_disk = built
    # complete when built: the speed block, the versions and a comparability key that is the record's own
    assert set(rec["numerics"]["speed"]) >= {"compile", "channels_last"}, rec["numerics"]["speed"]
    assert rec["versions"]["suite"] == rec["suite_version"] and set(rec["versions"]) == {"suite", "objective"}
    fields = comparability_fields(rec)
    assert fields["benchmark"] == "quickstart" and rec["comparability_key"] == comparability_key(rec)
    # written unchanged: the file is the built mapping as strict JSON, field for field
    assert on_disk == json.loads(strict_json(rec))


def test_a_record_changed_after_it_was_built_is_refused_and_nothing_is_written(built, tmp_path: Path) -> None:
    rec, _ = built
    changed = copy.deepcopy(rec)
    changed["dataset"]["manifest_hash"] = "another-manifest"  # its comparability key is no longer its own
    with pytest.raises(RecordError, match=r"comparability_key"):
        write_record(tmp_path, changed)
    assert list(tmp_path.iterdir()) == []
    unkeyed = {k: v for k, v in rec.items() if k != "comparability_key"}  # write_record fills nothing in
    with pytest.raises(RecordError, match=r"comparability_key"):
        write_record(tmp_path, unkeyed)
    assert list(tmp_path.iterdir()) == []


def returns_a_record(cell, protocol, pretrained_state=None, ckpt=None):
    """A scorer written against the old contract: it returns a record mapping, not Scores."""
    return {"metrics": {"acc": 1.0}}


def test_a_scorer_that_returns_a_record_is_refused_naming_the_protocol(monkeypatch, tmp_path: Path) -> None:
    from fusebench.components.protocols import PROTOCOLS, Protocol

    class OldContract(Protocol):
        frozen_features = True
        scorer = f"{__name__}:returns_a_record"

    PROTOCOLS.available()
    for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):
        monkeypatch.setattr(PROTOCOLS, attr, dict(getattr(PROTOCOLS, attr)))
    PROTOCOLS.register("oldcontract")(OldContract)
    over = {"downstream.protocol": "oldcontract", "metrics": ["acc"],
            "comparison": {"reference": "none", "primary": "acc"}, "options": {}}
    fusebench.run("mv-hw2sources", objective=["none"], seeds=[0], out=tmp_path, synthetic=True, overrides=over,
                  progress=False)
    cell = tmp_path / "mv-hw2sources" / "none" / "seed0"
    assert not (cell / "run.json").exists()
    failed = json.loads((cell / "failed.json").read_text())
    assert ("the scorer of protocol 'oldcontract' (test_record_built_once:returns_a_record) returned dict, not "
            "fusebench.records.builder.Scores") in json.dumps(failed)
