"""Leaderboard generation from hand-written run.json files; expected cells worked out by hand."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest

import fusebench.leaderboard as lb
from fusebench.leaderboard import benchmark_table, load_runs, main, plots, write_leaderboards
from fusebench.leaderboard.reported import PUBLISHED_TITLE
from fusebench.leaderboard.writer import _inside
from fusebench.records import RecordError, comparability_key, validate_record


def _record(obj: str, seed: int, metrics: dict, synthetic: bool = True, bench: str = "toy", **extra) -> dict:
    rec = {
        "schema_version": 1, "suite_version": "0.1.0",
        "benchmark": bench, "objective": obj, "seed": seed, "metrics": metrics,
        "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "description": "toy benchmark",
                   "seeds": [0, 1, 2], "pretrain": {"epochs": 3}, "dataset": {"id": "toy", "synthetic_only": False}},
        "dataset": {"id": "toy", "synthetic": synthetic, "manifest_hash": "synthetic" if synthetic else "ab12cd34"},
        "selection": {"rule": "best validation acc"},
        "pretrain_time_s": 10.0 + seed, "peak_memory_mb": 100.0,
        "protocol": {"acc2": "non0 convention"},
        "curves": {"pretrain_loss": [3.0 - 0.1 * i - 0.01 * seed for i in range(5)],
                   "val_acc": [0.4 + 0.05 * i + 0.01 * seed for i in range(3)]},
    }
    rec.update(extra)
    return rec


def _write(root: Path, rec: dict, folder: str | None = None) -> Path:
    d = root / (folder or f"{rec['benchmark']}/{rec['objective']}/seed{rec['seed']}")
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(rec))
    return d / "run.json"


def _rows(md: str) -> dict[str, list[str]]:
    """Table rows by first cell (cells split on unescaped '|')."""
    out = {}
    for line in md.splitlines():
        if line.startswith("| `") or line.startswith("| *reported"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[cells[0]] = cells[1:]
    return out


def _published(md: str) -> dict[str, list[str]]:
    """The rows of the board's published-results table, by first cell."""
    section = md.split("## " + PUBLISHED_TITLE)[1].split("\n## ")[0]
    out = {}
    for line in section.splitlines()[5:]:
        if line.startswith("| "):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[cells[0]] = cells[1:]
    return out


COMPARISON = {"reference": "alpha", "primary": "acc", "why": "Accuracy is what the toy task is scored by."}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    acc_a = [0.5, 0.6, 0.7]
    acc_b = [0.45, 0.5, 0.65]
    for s in range(3):
        for obj, acc, mae in (("alpha", acc_a[s], 0.9), ("beta", acc_b[s], 0.8)):
            _write(tmp_path / "runs", _record(obj, s, {"acc": acc, "mae": mae}, comparison=COMPARISON))
    _write(tmp_path / "runs", _record("gamma", 0, {"acc": 0.1}, comparison=COMPARISON))  # a missing metric
    return tmp_path / "runs"


def test_table_cells_by_hand(runs: Path) -> None:
    md = benchmark_table("toy", load_runs(runs)["toy"])
    rows = _rows(md)
    assert ("| objective | acc (%) ↑ | mae ↓ | acc 95% CI (%) | Δ acc vs `alpha` (Holm p) | rank [95%] on acc | "
            "vs best on acc (Holm p) | steps | samples seen | pretrain time (s) ↓ | peak memory (MiB) ↓ |") in md
    # alpha: mean 0.6, sample std 0.1 -> percent (acc is a "fraction" metric); the best acc, but not bold: beta
    # (second) is not separable from it (paired t-test, p = 1 - 4 / sqrt(18) = 0.057 > 0.05, below)
    assert rows["`alpha`"][0] == "60.00 ± 10.00 (3)"
    # beta: mean 0.5333.., std sqrt(((.45-.5333)^2+(.5-.5333)^2+(.65-.5333)^2)/2) = 0.104083
    assert rows["`beta`"][0] == "53.33 ± 10.41 (3)"
    # mae is lower-is-better and "raw": beta's 0.8 is bold (0.1 below alpha on every seed: p = 0), 4 decimals
    assert rows["`beta`"][1] == "**0.8000 ± 0.0000 (3)**"
    assert rows["`gamma`"][1] == "—"
    # bootstrap 95% CI with 3 seeds: a resample of the minimum only has probability 1/27 > 2.5%, so the
    # interval is [min, max]; one seed: the value itself
    assert rows["`alpha`"][2] == "[50.00, 70.00]" and rows["`beta`"][2] == "[45.00, 65.00]"
    assert rows["`gamma`"][2] == "[10.00, 10.00]"
    # paired t-test beta vs the fixed reference alpha: diffs -.05,-.1,-.05, |t| = 4, df = 2 ->
    # p = 1 - t / sqrt(t^2 + 2); the Holm family is beta alone (gamma shares one seed): adjusted = raw
    p = 1 - 4 / math.sqrt(18)
    assert rows["`beta`"][3] == f"-6.67 ({p:.3f})"
    assert rows["`alpha`"][3] == "reference"
    assert rows["`gamma`"][3] == "-40.00 (n/a: 1 seed)"  # 0.1 - 0.5 on seed 0, untested
    # rank on acc and against the best row (alpha): beta tied (the test above, Holm over beta alone), gamma
    # untested (one seed); no rank interval: the rows share one seed (0) only
    assert rows["`alpha`"][4:6] == ["1", "best"] and rows["`beta`"][4:6] == ["2", f"tied ({p:.3f})"]
    assert rows["`gamma`"][4:6] == ["3", "n/a: 1 seed"]
    # no budget recorded: dashes; cost columns: mean pretraining time (10 + seed over seeds 0..2) = 11.0
    assert rows["`alpha`"][6:] == ["—", "—", "11.0", "100"]
    assert "Primary metric: `acc` (chosen because accuracy is what the toy task is scored by). Reference row of " \
           "the tests: `alpha`, set by the run records' `comparison` (no spec of this benchmark is installed)." in md
    assert "Holm-adjusted over the 1 row(s) tested" in md
    assert "- not tested (fewer than 2 seeds shared with `alpha`): `gamma`" in md
    assert "Pretraining budget: not recorded in these runs" in md
    assert "Data: **synthetic**" in md and "synthetic by design" in md
    assert "- acc2: non0 convention" in md


def test_regeneration_is_byte_identical(runs: Path, tmp_path: Path) -> None:
    out1, out2 = tmp_path / "lb1", tmp_path / "lb2"
    write_leaderboards(runs, out1)
    write_leaderboards(runs, out2)
    for name in ("toy.md", "README.md", "toy-curves.png"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name
    assert "![training curves](toy-curves.png)" in (out1 / "toy.md").read_text()
    index = (out1 / "README.md").read_text()
    assert "[toy](toy.md)" in index and "`alpha` (acc 60.00 ± 10.00 (3)), tied with `beta` (not separable)" in index


def test_bad_run_file(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "x"
    d.mkdir(parents=True)
    (d / "run.json").write_text("{not json")
    with pytest.raises(RecordError, match="run.json.*readable JSON"):
        load_runs(tmp_path / "runs")


def test_committed_leaderboards_regenerate_byte_identically(committed_regeneration) -> None:
    """Every committed board is in the current format (``BOARD_FORMAT`` in its metadata) and is what its
    committed runs give, byte for byte, and so is the index; regenerating twice gives the same bytes
    (``committed_regeneration``: two regenerations into fresh folders; the CSV / JSON and HTML files are
    compared in test_leaderboard_formats.py and test_leaderboard_html.py)."""
    regen = committed_regeneration
    root, studies = regen.root, {n for n in regen.studies if n.endswith(".md")}
    written, again = regen.written, regen.again
    assert [p.name for p in written] == [p.name for p in again]
    for p in written:
        assert regen.first[p.name] == regen.second[p.name], f"{p.name}: the second regeneration rewrote it"
    assert {p.name for p in written} >= {p.name for p in root.glob("*.md")} - studies - {"README.md"}
    stale = []
    for p in written:
        if p.suffix == ".png":  # the plots that are not stubbed out (missing views, sensitivity): drawn
            assert p.is_file()
            continue
        if p.suffix != ".md":
            continue
        committed = root / p.name
        meta = lb.read_board_meta(committed) if p.name != "README.md" and committed.exists() else None
        if p.name == "README.md" or not committed.exists() or (meta or {}).get("format") != lb.BOARD_FORMAT:
            stale.append(p.name)
            continue
        assert p.read_bytes() == committed.read_bytes(), f"{p.name} differs from the committed one"
    boards = [n for n in stale if n != "README.md"]
    assert not boards, (f"committed boards missing or of another format than {lb.BOARD_FORMAT}: {boards}; regenerate "
                        "them (fusebench leaderboard --runs leaderboards/runs --out leaderboards --format md csv json "
                        "html)")
    index = next(p for p in written if p.name == "README.md")  # every board current: the index is too
    assert index.read_bytes() == (root / "README.md").read_bytes(), "leaderboards/README.md differs from its runs"


def test_committed_kviews_study_regenerates_byte_identically(tmp_path: Path, monkeypatch) -> None:
    from fusebench.leaderboard import kviews as kviews_board

    root = Path(__file__).resolve().parents[1] / "leaderboards"
    monkeypatch.setattr(kviews_board, "_plot", lambda *a, **k: None)  # markdown only
    for committed in root.glob("*-kviews.md"):
        bench = committed.name[: -len("-kviews.md")]
        try:
            md, _ = kviews_board.render(root / "runs-kviews", tmp_path, bench)
        except ValueError as e:  # the study's design changed and its committed records await a rerun
            if "superseded design" in str(e):
                pytest.skip(str(e))
            raise
        assert md.read_bytes() == committed.read_bytes(), f"{committed.name} differs from the committed one"


# -- path safety ------------------------------------------------------------------------------
def test_path_escape_writes_nothing_outside_out(tmp_path: Path) -> None:
    runs, out = tmp_path / "a" / "runs", tmp_path / "a" / "out"
    _write(runs, _record("alpha", 0, {"acc": 0.5}, bench="../../../escaped"), folder="evil/seed0")
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(RecordError, match=r"run.json: field 'benchmark': expected an id"):
        write_leaderboards(runs, out)
    assert sorted(p for p in tmp_path.rglob("*")) == before  # no board, no PNG, no index anywhere
    assert not out.exists()


def test_output_paths_are_checked_inside_out(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a file directly inside"):
        _inside(tmp_path, "../x.md")
    with pytest.raises(ValueError, match="not a file directly inside"):
        _inside(tmp_path, "sub/x.md")
    assert _inside(tmp_path, "x.md") == tmp_path / "x.md"


# -- malformed records ------------------------------------------------------------------------
@pytest.mark.parametrize("change, field, expected", [
    ({"schema_version": 99}, "schema_version", r"one of \[1, 2, 3, 4\], got number 99"),
    ({"seed": "0"}, "seed", "an integer, got string '0'"),
    ({"seed": True}, "seed", "an integer, got boolean true"),
    ({"metrics": {"acc": {"x": 0.5}}}, "metrics.acc", "a number, got a mapping"),  # null: undefined, as NaN
    ({"metrics": {"acc": [0.5]}}, "metrics.acc", "a number, got a list of 1"),
    ({"metrics": {"acc": "0.5"}}, "metrics.acc", "a number, got string '0.5'"),
    ({"objective": 3}, "objective", "an id .*got number 3"),
    ({"objective": "M3G"}, "objective", "an id"),
    ({"dataset": {"id": "toy", "synthetic": "yes", "manifest_hash": "x"}}, "dataset.synthetic", "a boolean"),
    ({"metric_directions": {"acc": "up"}}, "metric_directions.acc", "'higher' or 'lower'"),
    ({"curves": {"pretrain_loss": [1.0, "x"]}}, "curves.pretrain_loss[1]", "a number"),
    ({"pretrain_time_s": -1}, "pretrain_time_s", "a number >= 0"),
])
def test_malformed_record_named_error(tmp_path: Path, change: dict, field: str, expected: str) -> None:
    rec = _record("alpha", 0, {"acc": 0.5})
    rec.update(change)
    path = _write(tmp_path / "runs", rec, folder="x/seed0")
    with pytest.raises(RecordError, match=re.escape(f"{path}: field '{field}': expected ") + expected) as info:
        load_runs(tmp_path / "runs")
    assert info.value.field == field and info.value.path == str(path)


def test_missing_field_named(tmp_path: Path) -> None:
    rec = _record("alpha", 0, {"acc": 0.5})
    del rec["metrics"]
    with pytest.raises(RecordError, match="field 'metrics': expected a value .the field is missing"):
        validate_record(rec, "r.json")


def test_cli_prints_one_error_without_traceback(tmp_path: Path, capsys) -> None:
    rec = _record("alpha", 0, {"acc": 0.5})
    rec["seed"] = "0"
    path = _write(tmp_path / "runs", rec)
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"fusebench leaderboard: {path}: field 'seed': expected an integer, got string '0'\n"
    assert not (tmp_path / "out").exists()


# -- duplicates and comparability -------------------------------------------------------------
def test_duplicate_runs_name_both_files(runs: Path) -> None:
    second = _write(runs, _record("alpha", 1, {"acc": 0.9, "mae": 0.1}), folder="elsewhere/alpha/seed1")
    first = runs / "toy" / "alpha" / "seed1" / "run.json"
    with pytest.raises(ValueError) as info:
        write_leaderboards(runs, runs.parent / "out")
    assert str(info.value) in {f"duplicate runs of benchmark 'toy', objective 'alpha', seed 1: {a} and {b} (a table "
                               f"counts each (objective, seed) once; remove one)" for a, b in ((first, second),
                                                                                               (second, first))}
    assert not (runs.parent / "out").exists()


def test_one_run_of_two_comparability_groups_is_no_duplicate() -> None:
    """What counts as one run: benchmark, comparability key, objective and seed. The same (objective, seed) under
    two keys (say records of two encoder versions) are two groups' runs, each a table of its own (--split)."""
    from types import SimpleNamespace as R

    from fusebench.records import duplicate_runs

    a, b = (R(benchmark="toy", comparability_key=k, objective="m3g", seed=0, path=k) for k in ("k1", "k2"))
    assert duplicate_runs([a, b]) is None
    c = R(benchmark="toy", comparability_key="k1", objective="m3g", seed=0, path="again")
    assert duplicate_runs([a, b, c]) == (a, c)
    assert duplicate_runs([a, R(**{**vars(c), "seed": 1})]) is None


def _odd_m3g(runs: Path) -> Path:
    rec = _record("m3g", 0, {"acc": 0.9, "mae": 0.3})
    rec["config"]["pretrain"]["epochs"] = 50
    rec["suite_version"] = "0.2.0"
    return _write(runs, rec, folder="extra/m3g/seed0")


def test_mixed_comparability_groups_refused(runs: Path) -> None:
    odd = _odd_m3g(runs)
    with pytest.raises(ValueError) as info:
        write_leaderboards(runs, runs.parent / "out")
    msg = str(info.value)
    assert "benchmark 'toy' mixes runs that must not be compared: 2 comparability groups" in msg
    assert "differing in suite_version, config.pretrain.epochs:" in msg
    assert f"(1 run(s)): {odd}" in msg and "(7 run(s)): " in msg
    assert not (runs.parent / "out").exists()


def test_mixed_groups_split_into_separate_tables(runs: Path, tmp_path: Path, capsys) -> None:
    _odd_m3g(runs)
    assert main(["--runs", str(runs), "--out", str(tmp_path / "out"), "--split", "--no-plots"]) == 0
    md = (tmp_path / "out" / "toy.md").read_text()
    assert "fall into 2 comparability groups" in md
    g1, g2 = md.split("<!--")[0].split("## Group 1 of 2")[1].split("## Group 2 of 2")
    assert "`alpha`" in g1 and "`m3g`" not in g1
    # group 2: the single m3g run: 0.9 -> 90.00, n = 1, std 0; alone, so bold-free (nothing to beat); its
    # record names no reference and the group has neither raw nor none: no test column
    assert "| `m3g` | 90.00 ± 0.00 (1) | 0.3000 ± 0.0000 (1) | [90.00, 90.00] | — | — | 10.0 | 100 |" in g2
    assert "No tests: no reference row (`raw` or `none`) in this table." in g2
    assert "Δ acc vs `alpha` (Holm p)" in g1
    assert "`alpha`" not in g2
    index = (tmp_path / "out" / "README.md").read_text()
    assert "[toy](toy.md) (group 1 of 2)" in index and "[toy](toy.md) (group 2 of 2)" in index


def test_comparability_key_ignores_seeds_description_notes() -> None:
    a = _record("alpha", 0, {"acc": 0.5})
    b = copy.deepcopy(a)
    b["config"].update(seeds=[7], description="other words", protocol_notes={"x": "y"}, objectives=["alpha"])
    b["seed"] = 7
    assert comparability_key(a) == comparability_key(b)
    for change in (lambda r: r["config"]["pretrain"].update(epochs=4), lambda r: r.update(suite_version="0.1.1"),
                   lambda r: r["dataset"].update(manifest_hash="ff00"), lambda r: r.update(benchmark="other")):
        c = copy.deepcopy(a)
        change(c)
        assert comparability_key(c) != comparability_key(a)


def _v2(rec: dict, objective_version: str = "1") -> dict:
    rec = copy.deepcopy(rec)
    rec["schema_version"] = 2
    rec["versions"] = {"suite": rec["suite_version"], "objective": objective_version,
                       "metrics": {"acc": "1", "mae": "1"}}
    rec["dataset"]["fingerprint"] = None
    rec["comparability_key"] = comparability_key(rec)
    return rec


def test_schema_v2_records(tmp_path: Path) -> None:
    rec = _v2(_record("alpha", 0, {"acc": 0.5}, synthetic=False))
    rec["dataset"]["fingerprint"] = {"files": [["train/a.bin", 12]], "sha256": "a" * 64}
    rec["comparability_key"] = comparability_key(rec)
    r = validate_record(rec, "v2.json")
    assert r.schema_version == 2 and r.dataset.fingerprint.files == (("train/a.bin", 12),)
    assert r.board == "real"
    edited = copy.deepcopy(rec)
    edited["config"]["pretrain"]["epochs"] = 99
    with pytest.raises(RecordError, match="field 'comparability_key'.*was the record edited"):
        validate_record(edited, "v2.json")
    no_versions = copy.deepcopy(rec)
    del no_versions["versions"]
    with pytest.raises(RecordError, match="field 'versions': expected a value"):
        validate_record(no_versions, "v2.json")
    bad_fp = copy.deepcopy(rec)
    bad_fp["dataset"]["fingerprint"] = {"files": [["a", -1]], "sha256": "a" * 64}
    with pytest.raises(RecordError, match=r"dataset.fingerprint.files\[0\]"):
        validate_record(bad_fp, "v2.json")
    # the objective's version is checked per row, not in the table key: objectives of different
    # versions share a table, two versions of one objective never share a row
    other = _v2(_record("beta", 0, {"acc": 0.5}, synthetic=False), objective_version="2")
    assert other["comparability_key"] == _v2(_record("beta", 0, {"acc": 0.5}, synthetic=False))["comparability_key"]


def test_objective_versions_share_a_table_but_not_a_row(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs, _v2(_record("alpha", 0, {"acc": 0.5}, synthetic=False), objective_version="1"))
    _write(runs, _v2(_record("beta", 0, {"acc": 0.7}, synthetic=False), objective_version="2"))
    recs = load_runs(runs)["toy"]
    assert "| `beta` |" in benchmark_table("toy", recs) and "| `alpha` |" in benchmark_table("toy", recs)
    (runs / "old").mkdir()
    _write(runs / "old", _v2(_record("beta", 1, {"acc": 0.6}, synthetic=False), objective_version="1"))
    with pytest.raises(ValueError, match=r"objective 'beta' mixes runs of different objective versions.*version 1: .*version 2: "):
        benchmark_table("toy", load_runs(runs)["toy"])


# -- metric metadata from the registry ---------------------------------------------------------
def test_percent_and_direction_from_registry(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for obj, mae, kappa, custom in (("alpha", 0.5, 0.2, 0.25), ("beta", 0.3, 0.4, 0.75)):
        rec = _record(obj, 0, {"mae": mae, "kappa": kappa, "acc_custom": custom})
        rec["metric_directions"] = {}  # no directions in the records: the registry must supply them
        rec["config"]["metrics"] = ["mae", "kappa", "acc_custom"]
        rec["config"]["selection_metric"] = "mae"
        _write(runs, rec)
    md = benchmark_table("toy", load_runs(runs)["toy"])
    assert "| objective | mae ↓ | kappa ↑ | acc_custom (direction unknown) |" in md
    rows = _rows(md)
    # one seed: no test can separate the best row from the second, so nothing is bold
    assert rows["`beta`"][0] == "0.3000 ± 0.0000 (1)"  # lower-is-better (the min is beta's)
    assert rows["`alpha`"][0] == "0.5000 ± 0.0000 (1)"
    assert rows["`beta`"][1] == "0.4000 ± 0.0000 (1)"  # kappa: raw, not x100
    # an unregistered metric whose name looks like a percentage stays raw and is never bold
    assert rows["`alpha`"][2] == "0.2500 ± 0.0000 (1)" and rows["`beta`"][2] == "0.7500 ± 0.0000 (1)"


def test_record_direction_contradicting_registry_is_refused(tmp_path: Path) -> None:
    rec = _record("alpha", 0, {"acc": 0.5, "mae": 0.2})
    rec["metric_directions"]["mae"] = "higher"
    path = _write(tmp_path / "runs", rec)
    with pytest.raises(RecordError, match=re.escape(f"{path}: field 'metric_directions.mae': expected 'lower'")):
        write_leaderboards(tmp_path / "runs", tmp_path / "out", plots=False)


# -- index ------------------------------------------------------------------------------------
def _mixed_kinds(runs: Path) -> None:
    _write(runs, _record("alpha", 0, {"acc": 0.7}, synthetic=False, bench="realbench"))
    _write(runs, _record("beta", 0, {"acc": 0.6}, synthetic=False, bench="realbench"))
    _write(runs, _record("alpha", 0, {"acc": 0.8}, bench="studybench"))
    twin = _record("alpha", 0, {"acc": 0.9}, bench="twinbench")  # the spec's synthetic block was applied
    twin["config"]["synthetic"] = {"pretrain.epochs": 3}
    _write(runs, twin)
    twin_b = copy.deepcopy(twin)
    twin_b.update(objective="beta", metrics={"acc": 0.2})
    _write(runs, twin_b)
    explicit = _record("alpha", 0, {"acc": 0.5}, bench="checkbench")
    explicit["config"]["options"] = {"board": "pipeline_check"}
    _write(runs, explicit)


def test_index_order_real_studies_pipeline_checks(tmp_path: Path) -> None:
    _mixed_kinds(tmp_path / "runs")
    write_leaderboards(tmp_path / "runs", tmp_path / "out", plots=False)
    index = (tmp_path / "out" / "README.md").read_text()
    real, rest = index.split("## Real data")[1].split("## Synthetic studies")
    studies, checks = rest.split("## Pipeline checks")
    assert "| [realbench](realbench.md) | `toy` | 2 | 0 | 2 | `alpha` (acc 70.00 ± 0.00 (1)) |" in real
    assert "[studybench](studybench.md)" in studies and "studybench" not in real + checks
    assert "rank nothing" in checks
    assert "- [checkbench](checkbench.md): dataset `toy` (synthetic), 1 objectives, seeds 0 (1 runs)" in checks
    assert "- [twinbench](twinbench.md)" in checks and "twinbench" not in real + studies
    twin = (tmp_path / "out" / "twinbench.md").read_text()
    assert "**Pipeline check**" in twin and "**" not in twin.split("| objective")[1].split("## Protocol")[0]
    assert "Δ" not in twin and "95% CI" not in twin  # no tests or intervals in a pipeline check
    real_md = (tmp_path / "out" / "realbench.md").read_text()
    assert "Data: **real** (dataset `toy`, manifest `ab12cd34`); seeds 0." in real_md


def test_board_kind_rules() -> None:
    def kind(synthetic: bool = True, block: dict | None = None, synthetic_only: bool = False, board=None) -> str:
        rec = _record("alpha", 0, {"acc": 0.5}, synthetic=synthetic)
        rec["config"]["dataset"]["synthetic_only"] = synthetic_only
        if block is not None:
            rec["config"]["synthetic"] = block
        if board is not None:
            rec["config"]["options"] = {"board": board}
        return validate_record(rec, "r.json").board

    assert kind(synthetic=False) == "real"
    assert kind() == "study"
    assert kind(block={"pretrain.epochs": 3}) == "pipeline_check"  # the --synthetic overrides were applied
    assert kind(block={"pretrain.epochs": 1}) == "study"  # a block exists but the run did not use it
    assert kind(block={"pretrain.epochs": 3}, synthetic_only=True) == "study"  # synthetic by design
    assert kind(board="pipeline_check", synthetic=False) == "pipeline_check"  # explicit wins
    assert kind(board="study", block={"pretrain.epochs": 3}) == "study"
    with pytest.raises(RecordError, match="config.options.board"):
        kind(board="ranking")


def test_index_survives_partial_regeneration(tmp_path: Path) -> None:
    _mixed_kinds(tmp_path / "runs")
    out = tmp_path / "out"
    write_leaderboards(tmp_path / "runs", out, plots=False)
    full_index = (out / "README.md").read_text()
    real_board = (out / "realbench.md").read_bytes()
    partial = tmp_path / "partial"  # like `make main RUNS=runs/`: only one benchmark's runs
    _write(partial, _record("alpha", 0, {"acc": 0.8}, bench="studybench"))
    written = write_leaderboards(partial, out, plots=False)
    assert [p.name for p in written] == ["studybench.md", "README.md"]
    assert (out / "README.md").read_text() == full_index  # every other board still listed
    assert (out / "realbench.md").read_bytes() == real_board
    # new runs in the partial folder show in the regenerated board and its index row
    _write(partial, _record("beta", 0, {"acc": 0.9}, bench="studybench"))
    write_leaderboards(partial, out, plots=False)
    index = (out / "README.md").read_text()
    assert "| [studybench](studybench.md) | `toy` | 2 | 0 | 2 | `beta` (acc 90.00 ± 0.00 (1)) |" in index
    assert "[realbench](realbench.md)" in index and "[twinbench](twinbench.md)" in index


def test_board_without_metadata_is_reported(tmp_path: Path, runs: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.md").write_text("# Leaderboard: old\n\n| a |\n")
    with pytest.raises(ValueError, match="old.md: a board without the 'fusebench-board' metadata"):
        write_leaderboards(runs, out, plots=False)
    assert sorted(p.name for p in out.iterdir()) == ["old.md"]


# -- reported numbers -------------------------------------------------------------------------
def test_reported_rows_rendered_not_ranked(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "reported.yaml").write_text(
        "- {benchmark: toy, label: 'Big model (Doe et al. 2020)', metric: acc, value: 0.95, printed: '95.0',\n"
        "   source: 'doe2020.txt, Table 2', protocol: 'official test split', objective: alpha}\n"
        "- {benchmark: toy, label: 'Big model (Doe et al. 2020)', metric: mae, value: 0.05,\n"
        "   source: 'doe2020.txt, Table 2', protocol: 'official test split', objective: alpha}\n"
        "- {benchmark: toy, label: 'Small | model', metric: acc, value: 0.1, source: 'x.txt, Table 1', note: n}\n"
        "- {benchmark: other, label: X, metric: acc, value: 0.1, source: y}\n")
    write_leaderboards(runs, out, plots=False)
    md = (out / "toy.md").read_text()
    # the published rows are out of the run table, in a section of their own before the protocol
    table = md.split("## ")[0]
    assert "Big model" not in table and "Small" not in table
    assert md.index("## " + PUBLISHED_TITLE) < md.index("## Protocol")
    published = _published(md)
    # only the metrics reported get a column; 95.00 and 0.0500 beat every run, yet are not bold and do not
    # change the best row
    assert "| published row | acc (%) ↑ | mae ↓ |" in md
    assert published == {"Big model (Doe et al. 2020) (our `alpha`) [R1]": ["95.00", "0.0500"],
                         "Small \\| model [R2]": ["10.00", "—"]}
    rows = _rows(md)
    assert rows["`alpha`"][0] == "60.00 ± 10.00 (3)" and rows["`beta`"][1] == "**0.8000 ± 0.0000 (3)**"
    assert "- [R1] doe2020.txt, Table 2: official test split\n- [R2] x.txt, Table 1 (n)\n" in md
    assert "not comparable one to one with the runs above" in md
    assert "on the official dataset; this board's runs are not" in md  # toy runs are synthetic
    assert "`alpha` (acc 60.00 ± 10.00 (3)), tied with `beta`" in (out / "README.md").read_text()


def test_bad_reported_file(runs: Path, tmp_path: Path) -> None:
    bad = tmp_path / "reported.yaml"
    bad.write_text("- {benchmark: toy, label: X, metric: acc, value: high, source: y}\n")
    with pytest.raises(ValueError, match="entry 0: value must be a finite number"):
        write_leaderboards(runs, tmp_path / "out", reported=bad)
    bad.write_text("- {benchmark: toy, label: X, metric: acc, value: 0.5}\n")
    with pytest.raises(ValueError, match=r"missing key\(s\) \['source'\]"):
        write_leaderboards(runs, tmp_path / "out", reported=bad)


# -- curves -----------------------------------------------------------------------------------
def test_mean_band_by_hand() -> None:
    mean, lo, hi = plots._mean_band([[1.0, 2.0, 5.0], [3.0, 2.0], [2.0, 2.0, 9.0]])
    assert len(mean) == 2  # truncated to the shortest seed
    assert mean == [2.0, 2.0] and lo == [1.0, 2.0] and hi == [3.0, 2.0]  # std of (1, 3, 2) = 1


def test_plot_has_loss_and_validation_panels(runs: Path, tmp_path: Path, monkeypatch) -> None:
    import matplotlib.figure

    seen = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def spy(fig, *a, **k):
        seen["axes"] = [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.axison]
        return real_savefig(fig, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    view = lb.make_view("toy", load_runs(runs)["toy"])
    assert plots.plot_curves(view, tmp_path / "c.png")
    assert ("alpha (n=3): pretraining loss", "pretraining step", "loss") in seen["axes"]
    assert ("alpha (n=3): validation acc", "downstream epoch", "acc (%)") in seen["axes"]


def test_board_states_chosen_hparams_compute_and_links_a_study(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sel = {"grid": {"tau": [0.1, 0.5]}, "seed": 1000, "metric": "validation acc",
           "scores": [{"hparams": {"tau": 0.1}, "val": 0.8}, {"hparams": {"tau": 0.5}, "val": 0.9}],
           "choice": {"tau": 0.5}}
    for seed, wall in ((0, 30.0), (1, 90.0)):
        _write(runs, _record("alpha", seed, {"acc": 0.5, "mae": 1.0}, wall_time_s=wall, hparam_selection=sel,
                             device="cpu", host={"cpu_count": 2}))
    _write(runs, _record("beta", 0, {"acc": 0.6, "mae": 1.0}, wall_time_s=60.0))
    out = tmp_path / "boards"
    out.mkdir()
    (out / "toy-kviews.md").write_text("# study\n")
    write_leaderboards(runs, out)
    md = (out / "toy.md").read_text()
    assert "- hyper-parameters chosen on the validation split: `alpha` tau=0.5 of [0.1, 0.5]" in md
    # 30 + 90 + 60 s = 3.0 min; one objective with a 2-value grid = 2 selection runs
    assert "- compute: 3.0 min in all, the sum of the 3 runs' wall times (device cpu, 2 CPUs), plus 2 selection run(s)" in md
    assert "[k-views study](toy-kviews.md)" in md


def test_index_names_best_pretrained_when_a_reference_row_wins(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    accs = {"raw": [0.9, 0.9, 0.9], "none": [0.3, 0.35, 0.4], "alpha": [0.5, 0.6, 0.7], "beta": [0.45, 0.5, 0.65]}
    for obj, vals in accs.items():
        for s, v in enumerate(vals):
            _write(runs, _record(obj, s, {"acc": v, "mae": 0.5}, synthetic=False))
    write_leaderboards(runs, out, plots=False)
    index = (out / "README.md").read_text()
    # worked out by hand: raw 90 ± 0; alpha mean 60, sample std 10 beats beta (53.33) among pretraining rows;
    # paired t-tests against raw (scipy.stats.ttest_rel): none p = 0.00274, beta 0.0258, alpha 0.0351; Holm:
    # none 3 x 0.00274 = 0.0082, beta 2 x 0.0258 = 0.0516, alpha max(0.0351, 0.0516): alpha, beta tied with raw
    assert ("| `raw` (acc 90.00 ± 0.00 (3)), tied with `alpha`, `beta` (not separable); best pretrained `alpha` "
            "(60.00 ± 10.00 (3)) |") in index


def test_png_text_reads_chunks_written_by_pillow(tmp_path: Path) -> None:
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("fusebench-inputs", "abc123")
    info.add_text("Other", "x y")
    Image.new("RGB", (3, 2)).save(tmp_path / "a.png", pnginfo=info)
    assert plots.png_text(tmp_path / "a.png") == {"fusebench-inputs": "abc123", "Other": "x y"}
    assert plots.png_text(tmp_path / "missing.png") == {}
    (tmp_path / "b.png").write_text("not a png")
    assert plots.png_text(tmp_path / "b.png") == {}


def test_unchanged_runs_are_not_replotted(runs: Path, tmp_path: Path, monkeypatch) -> None:
    import matplotlib.pyplot as plt

    out = tmp_path / "out"
    write_leaderboards(runs, out)  # draws the plot once
    png = out / "toy-curves.png"
    first = png.read_bytes()
    assert "fusebench-inputs" in plots.png_text(png)

    def _no_drawing(*a, **k):
        raise AssertionError("plot redrawn although its runs did not change")

    monkeypatch.setattr(plt, "subplots", _no_drawing)
    write_leaderboards(runs, out)
    assert png.read_bytes() == first
    monkeypatch.undo()
    # a changed curve changes the key: the plot is redrawn
    rec_path = runs / "toy" / "alpha" / "seed0" / "run.json"
    rec = json.loads(rec_path.read_text())
    rec["curves"]["pretrain_loss"][0] = 9.0
    rec_path.write_text(json.dumps(rec))
    write_leaderboards(runs, out)
    assert png.read_bytes() != first
    assert len(plots.png_text(png)["fusebench-inputs"]) == 64  # a sha256 hex digest


# -- the fixed reference row and Holm-adjusted tests -------------------------------------------
def _p_df2(d: list[float]) -> float:
    """Two-sided paired t-test p-value for 3 seeds (df = 2), closed form: p = 1 - |t| / sqrt(t^2 + 2)."""
    m = sum(d) / 3
    sd = math.sqrt(sum((v - m) ** 2 for v in d) / 2)
    t = m / (sd / math.sqrt(3))
    return 1 - abs(t) / math.sqrt(t * t + 2)


REF_ACCS = {"raw": [0.9, 0.9, 0.9], "alpha": [0.5, 0.6, 0.7], "beta": [0.45, 0.5, 0.65], "none": [0.3, 0.35, 0.4]}


def _ref_runs(root: Path, accs: dict, **extra) -> Path:
    for obj, vals in accs.items():
        for s, v in enumerate(vals):
            _write(root, _record(obj, s, {"acc": v, "mae": 0.5}, synthetic=False, **extra))
    return root


def test_tests_against_raw_by_default_holm_by_hand(tmp_path: Path) -> None:
    runs = _ref_runs(tmp_path / "runs", REF_ACCS)
    md = benchmark_table("toy", load_runs(runs)["toy"])
    rows = _rows(md)
    assert "Δ acc vs `raw` (Holm p)" in md
    assert "Reference row of the tests: `raw` (the standardised input views; the default reference)." in md
    p = {o: _p_df2([a - r for a, r in zip(REF_ACCS[o], REF_ACCS["raw"])]) for o in ("alpha", "beta", "none")}
    # Holm, m = 3: none (smallest) x3, beta x2, alpha x1, then the running maximum
    assert p["none"] < p["beta"] < p["alpha"]
    holm = {"none": 3 * p["none"]}
    holm["beta"] = max(holm["none"], 2 * p["beta"])
    holm["alpha"] = max(holm["beta"], p["alpha"])
    assert rows["`alpha`"][3] == f"-30.00 ({holm['alpha']:.3f})"
    assert rows["`beta`"][3] == f"-36.67 ({holm['beta']:.3f})"
    assert rows["`none`"][3] == f"-55.00 ({holm['none']:.3f})"
    assert rows["`raw`"][3] == "reference" and rows["`raw`"][2] == "[90.00, 90.00]"
    assert "Holm-adjusted over the 3 row(s) tested" in md


def test_reference_falls_back_to_none_and_a_missing_named_reference_is_said(tmp_path: Path) -> None:
    accs = {k: v for k, v in REF_ACCS.items() if k != "raw"}
    md = benchmark_table("toy", load_runs(_ref_runs(tmp_path / "a", accs))["toy"])
    assert "Δ acc vs `none` (Holm p)" in md and "`none` (random-init encoders; the default reference)" in md
    assert _rows(md)["`none`"][3] == "reference"
    md = benchmark_table("toy", load_runs(_ref_runs(tmp_path / "b", accs, comparison={"reference": "zeta"}))["toy"])
    assert "Δ acc" not in md
    assert "No tests: the runs name `zeta` as the reference row, but it has no runs in this table." in md


def test_records_disagreeing_on_the_comparison_are_refused(tmp_path: Path) -> None:
    # no spec named toy (the spec's comparison wins when it is found, tests/test_config_identity.py): the records'
    # copies must agree, else one record (the newest, before) would set the reference row of the whole board
    runs = _ref_runs(tmp_path / "runs", {"raw": [0.9], "alpha": [0.5], "none": [0.3]}, comparison={"reference": "raw"},
                     finished_at="2026-01-01T00:00:00+00:00")
    rec = _record("beta", 0, {"acc": 0.5, "mae": 0.5}, synthetic=False, comparison={"reference": "none"},
                  finished_at="2026-01-02T00:00:00+00:00")
    path = _write(runs, rec)
    with pytest.raises(ValueError, match=re.escape(f'/raw/seed0/run.json; {{"reference":"none"}} in {path}. Install')):
        benchmark_table("toy", load_runs(runs)["toy"])
    rec["comparison"] = "raw"
    path.write_text(json.dumps(rec))
    with pytest.raises(RecordError, match=re.escape(f"{path}: field 'comparison': expected a mapping")):
        benchmark_table("toy", load_runs(runs)["toy"])


def test_primary_metric_from_the_comparison(tmp_path: Path) -> None:
    config = {**_record("raw", 0, {})["config"], "selection_metric": "mae"}  # as runs of that comparison select
    runs = _ref_runs(tmp_path / "runs", REF_ACCS, comparison={"primary": "mae", "why": "Errors matter here."},
                     config=config)
    md = benchmark_table("toy", load_runs(runs)["toy"])
    assert "Primary metric: `mae` (chosen because errors matter here)." in md
    # a why that starts with an acronym keeps it (it was lowercased: "nYUv2's ...")
    for why, shown in (("NYUv2's boards report mae.", "NYUv2's boards report mae"), ("A rule.", "a rule"),
                       ("MAE is the metric.", "MAE is the metric"), ("x", "x")):
        other = _ref_runs(tmp_path / why, REF_ACCS, comparison={"primary": "mae", "why": why}, config=config)
        assert f"Primary metric: `mae` (chosen because {shown})." in benchmark_table("toy", load_runs(other)["toy"])
    assert "| mae 95% CI | Δ mae vs `raw` (Holm p) |" in md
    assert _rows(md)["`alpha`"][3] == "+0.0000 (1.000)"  # mae 0.5 everywhere: equal on every seed, p = 1


# -- budgets -----------------------------------------------------------------------------------
def _budget(steps: int, samples: int, batch: int | None = 128, epochs: int = 10) -> dict:
    return {"optimizer_steps": steps, "samples_seen": samples, "batch_size": batch, "micro_batch": None,
            "epochs": epochs}


def test_budget_columns_and_equal_budget_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for s in range(2):
        _write(runs, _record("none", s, {"acc": 0.3}, synthetic=False, budget=_budget(0, 0, None, 0)))
        for obj in ("alpha", "beta"):
            _write(runs, _record(obj, s, {"acc": 0.5 + 0.1 * s}, synthetic=False, budget=_budget(230, 29440)))
    md = benchmark_table("toy", load_runs(runs)["toy"])
    rows = _rows(md)
    # acc | acc 95% CI | Δ acc vs `none` | rank | vs best | steps | samples seen
    assert rows["`alpha`"][5:7] == ["230", "29,440"] and rows["`none`"][5:7] == ["0", "0"]
    assert ("Pretraining budget: **equal** across the 2 pretrained row(s): 230 optimizer steps, 29,440 samples "
            "seen (batch 128, 10 epochs) each.") in md


def test_budget_line_names_the_rows_that_differ(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for s in range(2):
        _write(runs, _record("alpha", s, {"acc": 0.5}, synthetic=False, budget=_budget(230, 29440)))
        _write(runs, _record("beta", s, {"acc": 0.5}, synthetic=False, budget=_budget(230, 29440)))
        _write(runs, _record("m3g", s, {"acc": 0.5}, synthetic=False, budget=_budget(940, 30080, batch=32)))
        _write(runs, _record("delta", s, {"acc": 0.5}, synthetic=False))  # no budget recorded
    _write(runs, _record("eps", 0, {"acc": 0.5}, synthetic=False, budget=_budget(10, 20)))
    _write(runs, _record("eps", 1, {"acc": 0.5}, synthetic=False, budget=_budget(12, 24)))
    md = benchmark_table("toy", load_runs(runs)["toy"])
    rows = _rows(md)
    # acc | acc 95% CI | rank | vs best | steps | samples seen (no reference row: no test column)
    assert rows["`delta`"][4:6] == ["—", "—"] and rows["`eps`"][4:6] == ["10–12", "20–24"]
    assert ("Pretraining budgets **differ** across the pretrained rows: `eps` varies by seed (10 / 20, 12 / 24); "
            "`m3g` 940 optimizer steps, 30,080 samples seen (batch 32, 10 epochs); the other 2 row(s): 230 "
            "optimizer steps, 29,440 samples seen. Not recorded for `delta`.") in md


def test_bad_budget_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "runs", _record("alpha", 0, {"acc": 0.5}, budget={"optimizer_steps": -1}))
    with pytest.raises(RecordError, match=re.escape(f"{path}: field 'budget.optimizer_steps': expected an integer "
                                                    f"in [0, 2**63), got number -1")):
        benchmark_table("toy", load_runs(tmp_path / "runs")["toy"])


# -- rows flagged invalid ----------------------------------------------------------------------
def test_invalid_rows_are_shown_never_best_never_tested(tmp_path: Path) -> None:
    runs = _ref_runs(tmp_path / "runs", REF_ACCS)
    for s in range(3):
        _write(runs, _record("gamma", s, {"acc": 0.99, "mae": 0.1}, synthetic=False,
                             validity={"valid": False, "why": "bound above the true MI"}))
    out = tmp_path / "out"
    write_leaderboards(runs, out, plots=False)
    md = (out / "toy.md").read_text()
    rows = _rows(md)
    row = rows["`gamma` (invalid: bound above the true MI)"]
    assert row[0] == "99.00 ± 0.00 (3)" and row[1] == "0.1000 ± 0.0000 (3)"  # best values, not bold
    assert row[3] == "— (invalid)"
    # the best valid row, not bold: alpha and beta are not separable from it (Holm p 0.0516, the index test above)
    assert rows["`raw`"][0] == "90.00 ± 0.00 (3)"
    assert row[4:6] == ["— (invalid)", "— (invalid)"]  # no rank, no test against the best
    assert "Holm-adjusted over the 3 row(s) tested" in md  # alpha, beta, none: gamma is not in the family
    assert "- `gamma`: bound above the true MI" in md
    index = (out / "README.md").read_text()
    assert "`raw` (acc 90.00 ± 0.00 (3)), tied with `alpha`, `beta` (not separable); best pretrained `alpha`" in index
    meta = lb.read_board_meta(out / "toy.md")
    assert "gamma" not in meta["groups"][0]["means"] and meta["groups"][0]["means"]["alpha"] == 0.6
    bad = _record("delta", 0, {"acc": 0.5}, synthetic=False, validity={"valid": "no"})
    path = _write(runs, bad)
    with pytest.raises(RecordError, match=re.escape(f"{path}: field 'validity': expected a mapping")):
        write_leaderboards(runs, out, plots=False)


# -- rows merged because two objectives compute the same loss -----------------------------------
def _fake_equivalence(monkeypatch, same: list[set], known: list[str]) -> list:
    """A stand-in for fusebench.objectives.equivalence: ``same`` = sets of ids with the same loss at
    k = 3 (none at other k); same_hparams = equal mappings. Returns the list of groups() calls."""
    import sys
    import types

    import fusebench.objectives as objectives

    calls = []

    def groups(ids, k, *, references=(), unknown="error"):
        calls.append((list(ids), k))
        if unknown != "alone" and set(ids) - set(known):
            raise ValueError(f"unknown objective ids {sorted(set(ids) - set(known))}")
        out: list[list[str]] = []
        for o in ids:
            for g in out:
                if k == 3 and o in known and any(o in s and g[0] in s for s in same):
                    g.append(o)
                    break
            else:
                out.append([o])
        return out

    mod = types.ModuleType("fusebench.objectives.equivalence")
    mod.groups = groups
    mod.same_hparams = lambda a, b, oa=None, ob=None: a == b
    monkeypatch.setitem(sys.modules, "fusebench.objectives.equivalence", mod)
    monkeypatch.setattr(objectives, "equivalence", mod, raising=False)
    monkeypatch.setattr(objectives, "available", lambda: sorted(known))
    return calls


def _merge_runs(root: Path, accs: dict, hparams: dict | None = None, views: int | None = 3) -> Path:
    for obj, vals in accs.items():
        for s, v in enumerate(vals):
            rec = _record(obj, s, {"acc": v, "mae": 0.5}, synthetic=False, hparams=(hparams or {}).get(obj, {}))
            rec["config"]["objectives"] = ["raw", "beta", "alpha", "alpha2"]  # display preference
            if views:
                rec["config"]["dataset"]["modalities"] = [f"view{i}" for i in range(views)]
            _write(root, rec)
    return root


def test_equivalent_objectives_share_one_row(tmp_path: Path, monkeypatch) -> None:
    calls = _fake_equivalence(monkeypatch, [{"alpha", "alpha2"}], ["alpha", "alpha2", "beta"])
    accs = {"raw": [0.9, 0.9, 0.9], "alpha": [0.5, 0.6, 0.7], "alpha2": [0.5, 0.6, 0.7], "beta": [0.45, 0.5, 0.65]}
    md = benchmark_table("toy", load_runs(_merge_runs(tmp_path / "a", accs))["toy"])
    assert calls == [(["beta", "alpha", "alpha2"], 3)]  # known objectives in display order, k from the records
    rows = _rows(md)
    assert "`alpha` (≡ `alpha2`)" in rows and "`alpha2`" not in rows
    assert "Holm-adjusted over the 2 row(s) tested" in md  # alpha and beta; alpha2 is not tested
    assert "- `alpha2` computes the same loss as `alpha` at k = 3 views: identical numbers on every shared seed." in md
    assert "- views: k = 3" in md
    # numbers that differ are said under the table; the row shows the displayed id's runs
    accs["alpha2"] = [0.5, 0.65, 0.7]
    md = benchmark_table("toy", load_runs(_merge_runs(tmp_path / "b", accs))["toy"])
    assert _rows(md)["`alpha` (≡ `alpha2`)"][0] == "60.00 ± 10.00 (3)"
    assert ("- `alpha2` computes the same loss as `alpha` at k = 3 views but its numbers **differ** on seed(s) 1 "
            "(acc; largest difference 0.05); the row shows `alpha`'s runs.") in md
    # a difference in the last bits (a reduction in another order) is rounding, said as such
    accs["alpha2"] = [0.5, 0.6 + 2.0 ** -50, 0.7]
    md = benchmark_table("toy", load_runs(_merge_runs(tmp_path / "c", accs))["toy"])
    assert ("- `alpha2` computes the same loss as `alpha` at k = 3 views: the same numbers on every shared seed "
            "(up to float rounding, at most 8.9e-16).") in md


def test_rows_are_not_merged_without_k_or_with_other_hyperparameters(tmp_path: Path, monkeypatch) -> None:
    calls = _fake_equivalence(monkeypatch, [{"alpha", "alpha2"}], ["alpha", "alpha2", "beta"])
    accs = {"alpha": [0.5, 0.6], "alpha2": [0.5, 0.6], "beta": [0.4, 0.5]}
    md = benchmark_table("toy", load_runs(_merge_runs(tmp_path / "a", accs, views=None))["toy"])
    assert calls == [] and "`alpha2`" in _rows(md)  # k unknown: the module is not asked
    hp = {"alpha": {"tau": 0.1}, "alpha2": {"tau": 0.5}}
    md = benchmark_table("toy", load_runs(_merge_runs(tmp_path / "b", accs, hparams=hp))["toy"])
    assert "`alpha`" in _rows(md) and "`alpha2`" in _rows(md) and "≡" not in md


def test_real_equivalence_module_merges_multicrop_into_infonce_pwe(tmp_path: Path) -> None:
    pytest.importorskip("fusebench.objectives.equivalence")
    runs = tmp_path / "runs"
    for obj, tau in (("infonce_pwe", 0.5), ("multicrop", 0.5), ("mv_infonce", 0.5)):
        for s in range(2):
            rec = _record(obj, s, {"acc": 0.5 + 0.1 * s}, synthetic=False, hparams={"tau": tau})
            rec["config"]["dataset"]["modalities"] = ["view0", "view1", "view2"]
            _write(runs, rec)
    rows = _rows(benchmark_table("toy", load_runs(runs)["toy"]))
    assert set(rows) == {"`infonce_pwe` (≡ `multicrop`)", "`mv_infonce`"}


# -- the cross-dataset ranking in the index ----------------------------------------------------
def _meta(means: dict, direction: str = "higher", primary: str = "acc", protocol: str = "embedding_eval") -> dict:
    return {"groups": [{"kind": "real", "dataset": "d", "synthetic": False, "objectives": len(means), "seeds": [0],
                        "runs": len(means), "best": "x", "title": None, "key": "k", "protocol": protocol,
                        "primary": primary, "reference": "raw", "direction": direction, "means": means}]}


def test_cross_dataset_ranking_by_hand() -> None:
    st = pytest.importorskip("scipy.stats")
    boards = {
        "b1": _meta({"raw": 0.9, "alpha": 0.8, "beta": 0.7, "none": 0.5}),
        "b2": _meta({"raw": 0.7, "alpha": 0.8, "beta": 0.8, "none": 0.6}),
        "b3": _meta({"raw": 0.1, "alpha": 0.3, "beta": 0.2, "none": 0.5, "gamma": 0.05}, "lower", "mae"),
        "old": {"groups": [{"kind": "real", "dataset": "d", "seeds": [0], "runs": 1, "objectives": 1, "best": "x"}]},
        "probe": _meta({"raw": 0.1, "alpha": 0.2}, protocol="linear_probe"),
        "study": {"groups": [{**_meta({"raw": 0.1})["groups"][0], "kind": "study"}]},
    }
    index = lb.build_index(boards, cd_plot="cd-diagram.png")
    section = index.split("## Cross-dataset ranking")[1].split("## Synthetic studies")[0]
    # ranks (1 = best): b1 raw 1 alpha 2 beta 3 none 4; b2 alpha, beta tie 1.5, raw 3, none 4;
    # b3 (lower is better) raw 1 beta 2 alpha 3 none 4; gamma is not on every board
    # then the place by average rank (alpha and beta share place 2) with its bootstrap interval over the boards
    # (tests/test_board_ties.py checks the interval against a loop over resamples)
    assert re.search(r"\| `raw` \| 1\.67 \| 1 \[1-\d\] \| 1\.0 \| 3\.0 \| 1\.0 \|", section)
    assert re.search(r"\| `alpha` \| 2\.17 \| 2 \[\d-\d\] \| 2\.0 \| 1\.5 \| 3\.0 \|", section)
    assert re.search(r"\| `beta` \| 2\.17 \| 2 \[\d-\d\] \| 3\.0 \| 1\.5 \| 2\.0 \|", section)
    assert "| `none` | 4.00 | 4 [4-4] | 4.0 | 4.0 | 4.0 |" in section and "gamma" not in section
    table = section.split("| objective |")[1]  # the family line above it names the rows too
    assert table.index("`raw`") < table.index("`alpha`") < table.index("`beta`") < table.index("`none`")
    assert ("Family of the tests: 4 rows, each counted once: 2 pretrained objective(s) (`alpha`, `beta`) and 2 "
            "distinct reference row(s) (`none`, `raw`)") in section
    assert "[b3](b3.md) (`mae`)" in section and "[probe]" not in section
    assert "Not included: [old](old.md) (board written by an older fusebench" in section
    scores = [[0.9, 0.8, 0.7, 0.5], [0.7, 0.8, 0.8, 0.6], [-0.1, -0.3, -0.2, -0.5]]  # raw alpha beta none
    want = st.friedmanchisquare(*zip(*scores))
    assert f"chi2_F = {want.statistic:.3f}" in section
    # Nemenyi: k = 4 objectives, N = 3 boards, q_0.05 = 2.569 (Demšar 2006, Table 5a)
    assert f"CD = q_alpha sqrt(k (k + 1) / (6 N)) = 2.569 x sqrt(4 x 5 / (6 x 3)) = " \
           f"{2.569 * math.sqrt(20 / 18):.2f};" in section
    assert "![critical difference diagram](cd-diagram.png)" in section


def test_cross_dataset_ranking_credits_an_objective_merged_as_the_same_loss_on_a_board() -> None:
    """On b1 `delta` computes `alpha`'s loss (merged into its row, e.g. at k = 2 views) and is ranked there with
    alpha's mean, tied with it; on b2 it is a row of its own. `mc` is merged into `alpha` on both boards: the same
    loss everywhere, so alpha's row again, counted once. By hand: b1 raw .9 (1), alpha = delta .8 (2.5 each), none
    (4); b2 delta .85 (1), raw .7 (2), alpha .6 (3), none (4); averages raw 1.50, delta 1.75, alpha 2.75, none 4.00.
    Before, delta was left out of the ranking (it is no displayed row on b1), silently."""
    b1 = _meta({"raw": 0.9, "alpha": 0.8, "none": 0.5})
    b1["groups"][0]["merged_objectives"] = {"alpha": ["delta", "mc"]}
    b2 = _meta({"raw": 0.7, "alpha": 0.6, "delta": 0.85, "none": 0.5})
    b2["groups"][0]["merged_objectives"] = {"alpha": ["mc"]}
    r = lb.index.cross_dataset_ranking({"b1": b1, "b2": b2})
    assert r["methods"] == ["alpha", "delta", "none", "raw"]
    assert r["avg"] == {"raw": 1.5, "delta": 1.75, "alpha": 2.75, "none": 4.0}
    assert r["ranks"]["delta"] == {"b1": 2.5, "b2": 1.0} and r["credited"] == {"delta": ["b1"]}
    assert r["merged_objectives"] == {"alpha": ["mc"]}
    section = lb.build_index({"b1": b1, "b2": b2}).split("## Cross-dataset ranking")[1]
    assert "ranked there with that row's mean, tied with it (`delta` on [b1](b1.md))" in section
    assert "| `alpha` (≡ `mc`) | 2.75 |" in section


def test_cross_dataset_ranking_needs_two_boards_and_two_objectives() -> None:
    one = lb.build_index({"b1": _meta({"raw": 0.9, "alpha": 0.8})})
    assert ("No cross-dataset ranking: it needs at least 2 real-data boards of the `embedding_eval` protocol and 2 "
            "objectives run on all of them; here 1 board(s) and 2 common objective(s).") in one
    disjoint = lb.build_index({"b1": _meta({"raw": 0.9, "alpha": 0.8}), "b2": _meta({"raw": 0.9, "beta": 0.8})})
    assert "here 2 board(s) and 1 common objective(s)" in disjoint and "cd-diagram" not in disjoint


def test_cd_diagram_written_and_linked_from_the_index(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    for bench, accs in (("bench-a", [0.9, 0.7, 0.5]), ("bench-b", [0.8, 0.85, 0.4])):
        for obj, acc in zip(("raw", "alpha", "none"), accs):
            for s in range(2):
                rec = _record(obj, s, {"acc": acc + 0.01 * s}, synthetic=False, bench=bench, curves={})
                rec["config"]["downstream"] = {"protocol": "embedding_eval"}
                _write(runs, rec)
    write_leaderboards(runs, out)
    index = (out / "README.md").read_text()
    assert "![critical difference diagram](cd-diagram.png)" in index
    png = out / "cd-diagram.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and len(plots.png_text(png)[plots.PLOT_KEY]) == 64
    # --no-plots: no link (an existing diagram is left alone)
    write_leaderboards(runs, tmp_path / "md", plots=False)
    assert "cd-diagram" not in (tmp_path / "md" / "README.md").read_text()
    assert not (tmp_path / "md" / "cd-diagram.png").exists()


def test_comparability_key_ignores_each_rows_own_settings_only() -> None:
    """raw_pca's widths (options.embedding_eval.pca_widths) are that row's own setting, like an objective's grid:
    a board compares its records with the other rows', which were made without them; another probe option is not
    a row's own and separates."""
    a = _record("alpha", 0, {"acc": 0.5})
    a["config"]["options"] = {"embedding_eval": {"l2_grid": [1.0]}}
    own = copy.deepcopy(a)
    own["config"]["options"]["embedding_eval"]["pca_widths"] = [2, 4, 8]
    own["config"]["pretrain"]["grid"] = {"alpha": {"tau": [0.1, 0.2]}}
    assert comparability_key(own) == comparability_key(a)
    other = copy.deepcopy(a)
    other["config"]["options"]["embedding_eval"]["l2_grid"] = [0.1, 1.0]
    assert comparability_key(other) != comparability_key(a)


def test_comparability_key_separates_other_data_and_other_metric_versions() -> None:
    a = _v2(_record("alpha", 0, {"acc": 0.5}, synthetic=False))
    a["dataset"]["fingerprint"] = {"files": [["NGs.mat", 12]], "sha256": "a" * 64}
    for change in (lambda r: r["dataset"]["fingerprint"].update(sha256="b" * 64),   # the same shapes, other data
                   lambda r: r["versions"]["metrics"].update(acc="2")):             # the metric's definition changed
        c = copy.deepcopy(a)
        change(c)
        assert comparability_key(c) != comparability_key(a)
    same = copy.deepcopy(a)
    same["dataset"]["fingerprint"]["files"] = [["NGs.mat", 12]]
    assert comparability_key(same) == comparability_key(a)


def test_the_board_names_the_width_raw_pca_chose_on_the_selection_seeds(tmp_path: Path) -> None:
    """raw_pca's number of components is a hyper-parameter (row version 3), chosen once on the selection seeds and
    frozen: every committed record uses the choice of mv-3sources' _selection/raw_pca.json, and the board's
    hyper-parameters line names it with its grid, read here from the frozen file itself."""
    import shutil

    src = Path(__file__).resolve().parents[1] / "leaderboards" / "runs" / "mv-3sources"
    frozen = json.loads((src / "_selection" / "raw_pca.json").read_text())
    assert frozen["grid"] == {"width": [2, 4, 8, 16, 32, 48]}  # 3 views x 16, the embedding width, and below
    width = frozen["choice"]["width"]
    best = max(p["val"] for p in frozen["scores"])
    assert width == min(p["hparams"]["width"] for p in frozen["scores"] if p["val"] == best)
    records = sorted((src / "raw_pca").glob("seed*/run.json"))
    assert len(records) == 10
    for p in records:
        rec = json.loads(p.read_text())
        assert rec["hparams"] == {"width": width} == rec["hparam_selection"]["choice"]
        assert rec["reference_features"]["width"] == width
    runs = tmp_path / "runs"
    shutil.copytree(src, runs / "mv-3sources", ignore=shutil.ignore_patterns(".*"))
    write_leaderboards(runs, tmp_path / "out", formats=("md",), plots=False)
    line = next(x for x in (tmp_path / "out" / "mv-3sources.md").read_text().splitlines()
                if x.startswith("- hyper-parameters chosen on the validation split: "))
    edge = " (on the grid's edge)" if width in (2, 48) else ""
    assert f"`raw_pca` width={width} of [2, 4, 8, 16, 32, 48]{edge}" in line.split("; ")
