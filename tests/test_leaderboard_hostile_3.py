"""Run records a board must refuse or show safely (the leaderboard review, round 3). Each test copies committed run
records (``leaderboards/runs/quickstart``: schema-2 records at hash schema 4) into a temporary runs folder, tampers
with them as a hostile or careless hand would, runs the real regeneration and checks the exact refusal or rendering:

- one row never averages runs of two configs (compared under one hash schema: an older schema's record of the same
  config is still read);
- ``hash_schema`` is required where the record version was always written with it; ``config_hash`` is 16 hex digits;
- without a spec, the records' ``comparison`` blocks must agree; ``finished_at`` is ordered as a time;
- a schema-1/2 record's repeated seeds (``seeds.*``, ``determinism.seed``) must be its ``seed``;
- control characters in a path are escaped in messages; bidirectional-text controls in record text are escaped
  in md, html and csv;
- a regeneration removes the stale temporary files of its targets, never a live one;
- a bootstrap interval is never ``[-0.00, -0.00]``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import fusebench.leaderboard as lb
from test_records_hostile import _copy, _edit  # committed records copied, edited (and rehashed)
from fusebench.components.identity import config_hash
from fusebench.leaderboard import stats, write_leaderboards
from fusebench.records import RecordError, comparability_key, load_record, validate_record
from fusebench.spec.config import HASH_SCHEMA_VERSION, HASH_SCHEMAS

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboards" / "runs"
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "txt.exe" shows as "exe.txt" after it


def _one_error_line(runs: Path, out: Path, capsys, *formats: str) -> str:
    """``fusebench leaderboard`` exits with status 2 and one line on stderr, writing nothing."""
    status = lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--no-progress", "--format",
                      *(formats or ("md", "csv", "json"))])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and not out.exists()
    return lines[0]


def _board(runs: Path, out: Path, formats: tuple[str, ...] = ("md", "csv", "json")) -> dict[str, str]:
    write_leaderboards(runs, out, plots=False, formats=formats)
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(out.iterdir()) if p.is_file()}


def _rehash(rec: dict[str, Any]) -> None:
    """A record's config hash (under its own hash schema) and comparability key, as a run would write them."""
    rec["config_hash"] = config_hash(rec["config"], rec["objective"], rec["hash_schema"])
    rec["comparability_key"] = comparability_key(rec)


def _md_row(md: str, row: str) -> dict[str, str]:
    """The cells of ``row``'s line of the board table, by column header."""
    lines = md.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| objective |"))
    names = [c.strip() for c in lines[head].strip("|").split(" | ")]
    line = next(ln for ln in lines[head:] if ln.startswith(f"| `{row}` "))
    return dict(zip(names, (c.strip() for c in line.strip("|").split(" | "))))


# -- 1. one row = one config -----------------------------------------------------------------------------------------
def test_a_row_of_runs_made_under_two_configs_is_refused_naming_the_files_and_hashes(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    committed = json.loads((COMMITTED / "quickstart" / "m3g" / "seed1" / "run.json").read_text())["config_hash"]
    assert json.loads((COMMITTED / "quickstart" / "m3g" / "seed2" / "run.json").read_text())["config_hash"] == committed

    def eps(rec: dict[str, Any]) -> None:
        assert rec["config"]["pretrain"]["hparams"]["m3g"] == {"eps": 0.2}  # what the sweep ran
        rec["config"]["pretrain"]["hparams"]["m3g"]["eps"] = 0.5

    (seed0,) = _edit(runs, eps, "m3g", "0", rehash=True)
    other = json.loads(seed0.read_text())["config_hash"]
    assert other != committed  # the record itself is consistent: its own hash and key were rewritten
    one, two = runs / "quickstart" / "m3g" / "seed1" / "run.json", runs / "quickstart" / "m3g" / "seed2" / "run.json"
    files = {committed: f"{one}, {two}", other: f"{seed0}"}
    listing = "; ".join(f"config hash {h}: {files[h]}" for h in sorted(files))
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        "fusebench leaderboard: benchmark 'quickstart', objective 'm3g' mixes runs made under different configs (a "
        f"row averages the seeds of one config; hashes of hash schema {HASH_SCHEMA_VERSION}): {listing}; they differ in "
        "pretrain.hparams.m3g.eps. Move the runs of the other config away, or rerun them.")


def test_a_reference_row_made_under_other_pretraining_settings_joins_the_pretrained_rows(tmp_path: Path,
                                                                                         capsys) -> None:
    """Hash schema 4 leaves ``pretrain`` out of a reference row's hash, so a sweep whose pretraining settings changed
    reuses its ``raw`` records: their configs state the old settings, their comparability key differs from the new
    pretrained rows'. The board groups them together (they read no pretraining setting) and says nothing of
    those values; a pretrained row under the old settings is still another board."""
    runs = _copy(tmp_path, objectives=("raw", "none", "m3g"))
    before = _board(runs, tmp_path / "before")

    def old_budget(rec: dict[str, Any]) -> None:
        rec["config"]["pretrain"]["epochs"], rec["config"]["pretrain"]["lr"] = 7, 0.05

    kept = {p: json.loads(p.read_text())["config_hash"] for p in runs.glob("quickstart/raw/*/run.json")}
    for path in _edit(runs, old_budget, "raw", rehash=False):
        rec = json.loads(path.read_text())
        _rehash(rec)
        assert rec["config_hash"] == kept[path]  # the same cell: a sweep reuses it
        assert rec["comparability_key"] != json.loads(path.read_text())["comparability_key"]
        path.write_text(json.dumps(rec, indent=2))
    after = _board(runs, tmp_path / "after")
    # the per-seed CSV lists each record's comparability key as the record states it; all else is as before: one
    # table, and no "config differs" note about values the row never read
    seeds_before, seeds_after = before.pop("quickstart-seeds.csv"), after.pop("quickstart-seeds.csv")
    assert after == before
    assert [ln for ln in seeds_after.splitlines() if ",raw," not in ln] == \
        [ln for ln in seeds_before.splitlines() if ",raw," not in ln]
    # the pretrained rows' own settings still decide their board
    (m3g0,) = _edit(runs, old_budget, "m3g", "0", rehash=False)
    rec = json.loads(m3g0.read_text())
    _rehash(rec)
    m3g0.write_text(json.dumps(rec, indent=2))
    assert lb.main(["--runs", str(runs), "--out", str(tmp_path / "mixed"), "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert ("mixes runs that must not be compared: 2 comparability groups differing in config.pretrain.epochs, "
            "config.pretrain.lr:") in err and "Traceback" not in err


def test_a_record_of_an_older_hash_schema_and_the_same_config_is_still_one_row(tmp_path: Path) -> None:
    # mv-3sources: its cells' hash schema 2 and 3 hashes differ (schema 3 leaves out the selection seed its
    # selection seeds replace), so a record not migrated to schema 3 states another hash for the same config
    runs = _copy(tmp_path, "mv-3sources", objectives=("raw", "m3g"), seeds=(0, 1, 2))
    before = _board(runs, tmp_path / "before")

    def schema_2(rec: dict[str, Any]) -> None:  # as written before the migration to hash schema 3
        rec["hash_schema"] = 2
        rec["config_hash"] = config_hash(rec["config"], rec["objective"], 2)

    (seed0,) = _edit(runs, schema_2, "m3g", "0")
    committed = json.loads((COMMITTED / "mv-3sources" / "m3g" / "seed1" / "run.json").read_text())["config_hash"]
    stated = json.loads(seed0.read_text())["config_hash"]
    assert stated != committed
    after = _board(runs, tmp_path / "after")
    # the board is the same; the per-seed CSV lists each record's config hash as the record states it
    lines = before.pop("mv-3sources-seeds.csv").splitlines(keepends=True)
    lines = [ln.replace(f",{committed},", f",{stated},") if ln.startswith("mv-3sources,m3g,0,") else ln for ln in lines]
    assert after.pop("mv-3sources-seeds.csv") == "".join(lines)
    assert after == before


# -- 2. hash_schema required where always written; config_hash's form -------------------------------------------------
def _schema_4_record() -> tuple[Path, dict[str, Any]]:
    path = next(p for p in sorted(COMMITTED.glob("*/*/seed0/run.json"))
                if json.loads(p.read_text())["schema_version"] == 4)
    return path, json.loads(path.read_text())


def test_a_schema_3_or_4_record_without_hash_schema_is_refused(tmp_path: Path) -> None:
    path, rec = _schema_4_record()
    validate_record(rec, path)  # as committed: read
    del rec["hash_schema"]
    with pytest.raises(RecordError) as e:
        validate_record(rec, path)
    assert str(e.value) == (f"{path}: field 'hash_schema': expected one of {list(HASH_SCHEMAS)} (every schema-4 record is written "
                            "with it, and its config hash is checked under it; the field is missing)")
    three = json.loads((ROOT / "tests" / "records" / "mv-scene15-raw-seed0.schema3.json").read_text())
    validate_record(three, "three.json")
    three["hash_schema"] = None
    with pytest.raises(RecordError, match=rf"^three\.json: field 'hash_schema': expected one of {re.escape(str(list(HASH_SCHEMAS)))}, got null$"):
        validate_record(three, "three.json")


def test_a_schema_2_record_may_predate_hash_schema_but_its_hash_has_the_form(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"), seeds=(0,))
    (seed0,) = _edit(runs, lambda r: r.pop("hash_schema"), "m3g", "0")  # a record written before hash schema 2
    assert load_record(seed0).config_hash == json.loads(seed0.read_text())["config_hash"]
    for bad in ("9D4D4D794305BA64", "9d4d4d794305ba6", "9d4d4d794305ba64 ", 12345):
        _edit(runs, lambda r: r.__setitem__("config_hash", bad), "m3g", "0")
        shown = f"string {bad!r}" if isinstance(bad, str) else f"number {bad}"
        assert _one_error_line(runs, tmp_path / "out", capsys) == (
            f"fusebench leaderboard: {seed0}: field 'config_hash': expected 16 lowercase hex digits (the config "
            f"hash), got {shown}")


# -- 3. the comparison block and the newest record ----------------------------------------------------------------
def _without_spec(runs: Path, name: str = "qs-nospec") -> Path:
    """The quickstart runs as benchmark ``name``, whose spec is not installed (rehashed, moved to ``name``/)."""
    for path in sorted(runs.glob("quickstart/*/seed*/run.json")):
        rec = json.loads(path.read_text())
        rec["benchmark"] = rec["config"]["name"] = name
        _rehash(rec)
        path.write_text(json.dumps(rec, indent=2))
    (runs / "quickstart").rename(runs / name)
    return runs / name


def test_without_a_spec_one_record_cannot_switch_the_comparison(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "none", "m3g"))
    folder = _without_spec(runs)
    md = _board(runs, tmp_path / "agree", ("md",))["qs-nospec.md"]
    # every record says {primary: acc, reference: raw}: the board takes it and says where it came from
    assert ("Primary metric: `acc`. Reference row of the tests: `raw`, set by the run records' `comparison` (no spec "
            "of this benchmark is installed).") in md
    assert ("- comparison (primary metric, reference row, why): the `comparison` copied into the run records, the "
            "same in every record that has one (no spec of this benchmark is installed)") in md
    bad = folder / "m3g" / "seed2" / "run.json"
    rec = json.loads(bad.read_text())
    rec["comparison"] = {"primary": "bacc", "reference": "none"}
    bad.write_text(json.dumps(rec))
    first = sorted(p for p in folder.glob("*/seed*/run.json") if p != bad)[:3]
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        "fusebench leaderboard: the runs of board 'qs-nospec' disagree on how to compare the rows (no spec of this "
        "benchmark is installed to say it): comparison {\"primary\":\"acc\",\"reference\":\"raw\"} in "
        f"{', '.join(map(str, first))} and 5 more; {{\"primary\":\"bacc\",\"reference\":\"none\"}} in {bad}. Install "
        "the benchmark's spec, or keep the runs of one comparison in this runs folder.")


def test_the_newest_record_is_found_by_time_not_by_text(tmp_path: Path) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    times = {("raw", "0"): ("2026-03-01T13:00:00+00:00", "NEWEST"),  # 13:00 UTC
             ("m3g", "0"): ("2026-03-01T15:00:00+05:00", "OLDER")}  # 10:00 UTC; as text it sorts last

    def stamp(rec: dict[str, Any]) -> None:
        when, text = times.get((rec["objective"], str(rec["seed"])), ("2026-03-01T09:00:00+00:00", "OLDEST"))
        rec["finished_at"] = when
        rec["config"]["description"] = f"{text} description."  # board text, outside the config hash

    _edit(runs, stamp)
    md = _board(runs, tmp_path / "out", ("md",))["quickstart.md"]
    assert md.startswith("# Leaderboard: quickstart\n\nNEWEST description.\n")
    _edit(runs, lambda r: r.__setitem__("finished_at", "1 March 2026"), "m3g", "1")
    with pytest.raises(RecordError, match=r"field 'finished_at': expected an ISO 8601 time \(e\.g\. "
                                          r"'2026-11-29T04:52:51\+00:00'\), got string '1 March 2026'$"):
        _board(runs, tmp_path / "out2", ("md",))


# -- 4. a copied run is not a new seed ---------------------------------------------------------------------------
def test_a_schema_2_run_copied_to_another_seed_is_refused(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    seed0, seed1 = runs / "quickstart" / "m3g" / "seed0" / "run.json", runs / "quickstart" / "m3g" / "seed1" / "run.json"
    rec = json.loads(seed0.read_text())
    assert rec["seeds"] == {"numpy": 0, "python": 0, "torch": 0} and rec["determinism"]["seed"] == 0
    rec["seed"] = 1  # the folder rule (seed<k>) and the comparability key hold: only the repeated seeds tell
    seed1.write_text(json.dumps(rec))
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        f"fusebench leaderboard: {seed1}: field 'seeds.numpy': expected the record's seed 1 (a schema-2 record states "
        "it here again; a copy of another seed's run?), got number 0")
    rec["seeds"] = {"numpy": 1, "python": 1, "torch": 1}
    seed1.write_text(json.dumps(rec))
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        f"fusebench leaderboard: {seed1}: field 'determinism.seed': expected the record's seed 1 (a schema-2 record "
        "states it here again; a copy of another seed's run?), got number 0")
    rec["determinism"]["seed"] = True  # a boolean is no seed, even where 1 == True
    seed1.write_text(json.dumps(rec))
    assert _one_error_line(runs, tmp_path / "out", capsys).endswith("got boolean true")


# -- 5. control characters in paths ----------------------------------------------------------------------------
def test_control_characters_in_a_path_are_escaped_in_messages(tmp_path: Path, capsys) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    odd = runs / "quickstart" / "m3g\x1b[2J\u202ecopy"  # a folder name that clears the terminal, then reverses text
    shutil.copytree(runs / "quickstart" / "m3g", odd)
    plain, copied = runs / "quickstart" / "m3g" / "seed0" / "run.json", odd / "seed0" / "run.json"
    line = _one_error_line(runs, tmp_path / "out", capsys)
    assert line == ("fusebench leaderboard: duplicate runs of benchmark 'quickstart', objective 'm3g', seed 0: "
                    f"{str(copied)!r} and {plain} (a table counts each (objective, seed) once; remove one)")
    assert "\x1b" not in line and BIDI not in line and "\\x1b[2J\\u202ecopy" in line
    from fusebench.results import read_records

    with pytest.raises(ValueError) as e:
        read_records(runs)
    assert str(e.value).endswith(f"{str(copied)!r} (a per-seed table counts each (objective, seed) once; remove one)")
    shutil.rmtree(runs / "quickstart" / "m3g")
    _edit(runs, lambda r: r.__setitem__("pretrain_time_s", -1), "m3g\x1b[2J\u202ecopy", "1")
    bad = odd / "seed1" / "run.json"
    assert _one_error_line(runs, tmp_path / "out", capsys) == (
        f"fusebench leaderboard: {str(bad)!r}: field 'pretrain_time_s': expected a number >= 0, got number -1")
    with pytest.raises(RecordError) as e:
        load_record(bad)
    assert e.value.path == str(bad)  # the attribute keeps the path itself; only the message shows it escaped


# -- 6. bidirectional-text controls in record text ----------------------------------------------------------------
def test_bidi_controls_in_record_text_are_escaped_in_md_html_and_csv(tmp_path: Path) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    why = f"diverged at step 3 {BIDI}txt.exe\u2066x\u2069 \u200f"
    _edit(runs, lambda r: r.__setitem__("validity", {"valid": False, "why": why}), "m3g", "1")
    files = _board(runs, tmp_path / "out", ("md", "csv", "html"))
    for name, text in files.items():
        assert not set(text) & set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"), name
    shown = "diverged at step 3 \\u202etxt.exe\\u2066x\\u2069 \\u200f"  # whitespace runs joined, each control escaped
    md_shown = shown.replace("\\", "\\\\")  # markdown: the backslash escaped, as a record's own is
    assert f"| `m3g` (invalid: {md_shown}) |" in files["quickstart.md"]  # the table row
    assert f"\n- `m3g`: {md_shown}\n" in files["quickstart.md"]  # the invalid rows' notes
    row = next(r for r in csv.DictReader(io.StringIO(files["quickstart.csv"])) if r["objective"] == "m3g")
    assert row["invalid"] == shown
    assert f"<code>m3g</code> (invalid: {shown})" in files["quickstart.html"]  # the markdown's escape read back


# -- 7. stale temporary files ---------------------------------------------------------------------------------------
def test_a_regeneration_removes_the_stale_temporary_files_of_its_targets_only(tmp_path: Path) -> None:
    runs = _copy(tmp_path, objectives=("raw", "m3g"))
    out = tmp_path / "out"
    out.mkdir()
    old = time.time() - 3600  # an hour ago: a regeneration killed mid-write
    stale = [out / ".quickstart.md.k2j4x9.tmp", out / ".README.md.a1b2c3.tmp", out / ".quickstart.csv.zz99.tmp",
             out / "..fusebench-regen.json.shk5ite8.tmp"]
    live = out / ".quickstart.json.q8w7e6.tmp"  # a concurrent regeneration's write, in progress
    other = out / ".notes.md.a1b2c3.tmp"  # not a file the regeneration writes: not its to remove
    for p in [*stale, live, other]:
        p.write_text("half")
    for p in [*stale, other]:
        os.utime(p, (old, old))
    assert lb.main(["--runs", str(runs), "--out", str(out), "--no-plots", "--no-progress",
                    "--format", "md", "csv", "json"]) == 0
    assert [p for p in stale if p.exists()] == []
    assert live.exists() and other.exists()


# -- 8. no negative zero -------------------------------------------------------------------------------------------
def test_a_bootstrap_interval_is_never_negative_zero(tmp_path: Path) -> None:
    for values in ([-0.0], [-0.0, -0.0, -0.0], [-0.0, 0.0]):
        lo, hi = stats.bootstrap_ci(values)
        assert (math.copysign(1.0, lo), math.copysign(1.0, hi)) == (1.0, 1.0), values
    runs = _copy(tmp_path, objectives=("raw", "none"))

    def zero(rec: dict[str, Any]) -> None:
        rec["metrics"]["acc"] = -0.0  # a fraction in [0, 1]: the schema reads it

    _edit(runs, zero, "none")
    files = _board(runs, tmp_path / "out", ("md", "html"))
    cells = _md_row(files["quickstart.md"], "none")
    assert cells["acc (%) ↑"] == "0.00 ± 0.00 (3)" and cells["acc 95% CI (%)"] == "[0.00, 0.00]"
    for name, text in files.items():  # no "-0.00" printed as a number (-0.0042 is a number of its own)
        assert not re.search(r"-0\.00(?![0-9])", text), name



def test_a_board_file_name_with_control_characters_is_escaped_in_the_message(tmp_path: Path) -> None:
    """A file of the boards folder is named in the message of its metadata problem with its control characters
    escaped (``fusebench.io.shown_path``), as record paths are."""
    from fusebench.leaderboard.meta import read_board_meta

    bad = tmp_path / "q\x1b]0;pwn\x07.md"
    bad.write_text("# Leaderboard: q\n\nno metadata comment\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_board_meta(bad)
    assert str(e.value).startswith(repr(str(bad)) + ": a board without the") and "\x1b" not in str(e.value)
