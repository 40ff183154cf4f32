"""Record schema 4 (issue #35 item 3): each metric an entry ``{value, direction, version}``; no
``metric_directions`` or ``versions.metrics`` beside them; the typed record and the comparability key are those of
the same record written as schema 3."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

import fusebench
from fusebench.metrics import entries, values_of
from fusebench.records import RecordError, comparability_key, validate_record

TINY = {"pretrain.epochs": 1, "pretrain.batch_size": 64, "dataset.synthetic_spec.num_samples": 128,
        "downstream.epochs": 1}


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("runs")
    fusebench.run("quickstart", objective="infonce_pwe", seeds=[0], synthetic=True, out=out, overrides=TINY,
                  progress=False)
    return json.loads((out / "quickstart" / "infonce_pwe" / "seed0" / "run.json").read_text())


def as_schema_3(rec: dict) -> dict:
    """The same record as schema 3 wrote it, converted by hand: plain values, directions and versions beside."""
    old = copy.deepcopy(rec)
    old["schema_version"] = 3
    old["metrics"] = {m: e["value"] for m, e in rec["metrics"].items()}
    old["metric_directions"] = {m: e["direction"] for m, e in rec["metrics"].items()
                                if m in rec["config"]["metrics"] and e["direction"] is not None}
    old["versions"] = {**rec["versions"], "metrics": {m: rec["metrics"][m]["version"] for m in rec["config"]["metrics"]}}
    return old


def test_a_written_record_holds_each_metric_as_an_entry(record: dict) -> None:
    assert record["schema_version"] == 4
    assert "metric_directions" not in record and "metrics" not in record["versions"]
    assert set(record["config"]["metrics"]) <= set(record["metrics"])
    for mid, entry in record["metrics"].items():
        assert set(entry) == {"value", "direction", "version"}, mid
        assert isinstance(entry["value"], float) and entry["version"] == "1"
    # quickstart's task is classification: every listed metric reads higher-is-better
    assert {record["metrics"][m]["direction"] for m in record["config"]["metrics"]} == {"higher"}


def test_the_typed_record_and_key_equal_those_of_the_same_record_as_schema_3(record: dict) -> None:
    new, old = validate_record(record, "new.json"), validate_record(as_schema_3(record), "old.json")
    assert new.metrics == old.metrics and new.versions == old.versions
    assert new.metric_directions == old.metric_directions
    # one board holds records of both schemas: the comparability key does not see the layout
    assert comparability_key(record) == comparability_key(as_schema_3(record)) == record["comparability_key"]
    assert values_of(record["metrics"]) == as_schema_3(record)["metrics"]


@pytest.mark.parametrize("edit, field, expected", [
    (lambda r: r.__setitem__("metric_directions", {"acc": "higher"}), "metric_directions",
     "no such field in a schema-4 record: it repeats metrics.<id>.direction"),
    (lambda r: r["versions"].__setitem__("metrics", {"acc": "1"}), "versions.metrics",
     "no such field in a schema-4 record: it repeats metrics.<id>.version"),
    (lambda r: r["metrics"].__setitem__("acc", 0.5), "metrics.acc", "a mapping"),
    (lambda r: r["metrics"]["acc"].pop("version"), "metrics.acc", "an entry {value, direction, version}"),
    (lambda r: r["metrics"]["acc"].__setitem__("unit", "fraction"), "metrics.acc",
     "an entry {value, direction, version}"),
    (lambda r: r["metrics"]["acc"].__setitem__("direction", "up"), "metrics.acc.direction",
     "'higher', 'lower' or null"),
    (lambda r: r["metrics"]["acc"].__setitem__("value", "0.5"), "metrics.acc.value", ""),
    (lambda r: r["metrics"]["acc"].__setitem__("value", math.inf), "metrics.acc.value", ""),
    (lambda r: r["metrics"]["acc"].__setitem__("version", 1), "metrics.acc.version", "a string"),
])
def test_a_bad_entry_is_refused_naming_the_field(record: dict, edit, field: str, expected: str) -> None:
    bad = copy.deepcopy(record)
    edit(bad)
    with pytest.raises(RecordError, match=rf"field '{field}': expected {expected}"):
        validate_record(bad, "run.json")


def test_an_undefined_value_is_null_and_reads_as_nan(record: dict) -> None:
    rec = copy.deepcopy(record)
    rec["metrics"]["acc"]["value"] = None
    assert math.isnan(validate_record(rec, "run.json").metrics["acc"])
    assert values_of(rec["metrics"])["acc"] is None


def test_entries_take_the_given_direction_else_the_registrys_else_none() -> None:
    got = entries({"acc": 0.5, "mae": 1.0, "mi_gap_M2": 0.1, "mi_bound_M2": 2.0}, {"mi_gap_M2": "lower"})
    assert got == {"acc": {"value": 0.5, "direction": "higher", "version": "1"},
                   "mae": {"value": 1.0, "direction": "lower", "version": "1"},
                   "mi_gap_M2": {"value": 0.1, "direction": "lower", "version": "1"},
                   "mi_bound_M2": {"value": 2.0, "direction": None, "version": "1"}}
    assert values_of({"acc": 0.25, "f1": {"value": 0.5, "direction": "higher", "version": "1"}}) == {"acc": 0.25,
                                                                                                   "f1": 0.5}
    assert values_of(None) == {}


def test_committed_records_of_older_schemas_still_read(record: dict) -> None:
    """The committed records (schemas 2 and 4), and a schema-3 record as the mv-scene15 sweep wrote it before its
    rerun of 2026-11-30 removed the last committed ones (``git show 7fd64c5ba~1:leaderboards/runs/mv-scene15/raw/
    seed0/run.json``, kept in tests/records/)."""
    here = Path(__file__).resolve().parent
    runs = here.parent / "leaderboards" / "runs"
    paths = sorted(runs.glob("*/*/seed0/run.json"))[:400] + [here / "records" / "mv-scene15-raw-seed0.schema3.json"]
    seen = set()
    for path in paths:
        raw = json.loads(path.read_text())
        seen.add(raw["schema_version"])
        validate_record(raw, path)
    assert {2, 3, 4} <= seen
