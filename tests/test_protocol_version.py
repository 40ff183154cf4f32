"""A downstream protocol's version (``Protocol.version``) is part of the code that made a record: stated where it is not
"1", compared when a record or checkpoint would be reused, and a comparability field (a board never mixes two).
``embedding_eval`` is at 2 (its full linear probe's fit solved to its optimum)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fusebench import benchmarks
from fusebench.components.identity import cell_versions, code_changes
from fusebench.components.protocols import PROTOCOLS
from fusebench.records import comparability_key, validate_record

ROOT = Path(__file__).resolve().parents[1]


def test_the_embedding_protocol_is_at_2_and_its_cells_state_it_where_other_protocols_state_nothing() -> None:
    assert PROTOCOLS.get("embedding_eval").version == "2"
    assert PROTOCOLS.get("linear_probe").version == PROTOCOLS.get("finetune").version == "1"
    assert cell_versions(benchmarks.load("mv-ngs"), "mv_infonce")["protocol"] == "2"
    assert cell_versions(benchmarks.load("mv-ngs"), "raw")["protocol"] == "2"  # a reference row is scored by it too
    assert "protocol" not in cell_versions(benchmarks.load("quickstart"), "mv_dhel")  # version 1: the old form


def test_a_record_of_the_older_protocol_is_made_by_other_code_and_never_compared_with_the_current_one() -> None:
    spec = benchmarks.load("mv-ngs")
    assert code_changes(spec, "raw", {"objective": "1"}) == [
        "downstream protocol 'embedding_eval' version '1', now '2'"]
    assert code_changes(spec, "raw", {"objective": "1", "protocol": "2"}) == []
    # a committed record of the current protocol (re-run: it states versions.protocol 2) and the same record as
    # version 1 wrote it (no versions.protocol)
    path = ROOT / "leaderboards" / "runs" / "mv-ngs" / "raw" / "seed0" / "run.json"
    new = json.loads(path.read_text())
    assert new["versions"]["protocol"] == "2"
    old = copy.deepcopy(new)
    del old["versions"]["protocol"]
    old["comparability_key"] = comparability_key(old)
    assert new["comparability_key"] == comparability_key(new)
    assert new["comparability_key"] != old["comparability_key"]  # two groups on a board, never one
    assert validate_record(new, str(path)).versions.protocol == "2"
    assert validate_record(old, str(path)).versions.protocol == "1"
    bad = copy.deepcopy(new)
    bad["versions"]["protocol"] = 2
    with pytest.raises(Exception, match="versions.protocol"):
        validate_record(bad, str(path))
