"""Results as data (``fusebench leaderboard --format md csv json``): the CSV and JSON files' values
against values worked out by hand (means, sample std, n, scipy's paired t-test Holm-adjusted, the
documented bootstrap), byte-identical regeneration (also of the committed boards' CSV / JSON), what
``--format`` writes and refuses, and that writing them imports no heavy module."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusebench.leaderboard as lb
from fusebench.leaderboard import main, write_leaderboards
from fusebench.leaderboard.export import EXPORT_FORMAT, SIGNIFICANT, check_formats, number
from fusebench.leaderboard.fingerprint import MANIFEST

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "matplotlib", "pandas", "sklearn")


def _record(obj: str, seed: int, metrics: dict, **extra) -> dict:
    rec = {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": "toy", "objective": obj, "seed": seed,
        "metrics": metrics, "metric_directions": {"acc": "higher", "mae": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "description": "toy benchmark",
                   "seeds": [0, 1, 2, 3, 4], "dataset": {"id": "toy", "modalities": ["v0", "v1", "v2"]},
                   "objectives": ["raw", "infonce_pwe", "multicrop", "mv_infonce", "gamma", "bad"]},
        "dataset": {"id": "toy", "synthetic": True, "manifest_hash": "synthetic"},
        "selection": {"rule": "best validation acc"},
        "pretrain_time_s": 10.0 + seed, "peak_memory_mb": 100.0 + 2 * seed,
        "hparams": {"tau": 0.5},
    }
    rec.update(extra)
    return rec


def _write(root: Path, rec: dict) -> None:
    d = root / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(rec))


ACC = {"raw": [0.9, 0.92, 0.95, 0.91, 0.97], "infonce_pwe": [0.5, 0.6, 0.7, 0.55, 0.62],
       "multicrop": [0.5, 0.6, 0.7, 0.55, 0.62], "mv_infonce": [0.45, 0.5, 0.65], "gamma": [0.1], "bad": [0.3, 0.4]}
MAE = {"raw": [0.1] * 5, "infonce_pwe": [0.3, 0.2, 0.25, 0.2, 0.31], "multicrop": [0.3, 0.2, 0.25, 0.2, 0.31],
       "mv_infonce": [0.4, math.nan, 0.35], "bad": [0.5, 0.6]}  # gamma has no mae; one mv_infonce run is NaN
STEPS = {"raw": [0] * 5, "infonce_pwe": [100] * 5, "multicrop": [100] * 5, "mv_infonce": [100, 100, 120],
         "bad": [100, 100]}  # gamma records no budget; mv_infonce's seeds differ


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for obj, accs in ACC.items():
        for seed, acc in enumerate(accs):
            metrics = {"acc": acc}
            if obj in MAE:
                metrics["mae"] = MAE[obj][seed]
            extra = {}
            if obj in STEPS:
                extra["budget"] = {"optimizer_steps": STEPS[obj][seed], "samples_seen": 64 * STEPS[obj][seed]}
            if obj == "bad":
                extra["validity"] = {"valid": False, "why": "bound above the true MI"}
            _write(root, _record(obj, seed, metrics, **extra))
    return root


def _mean_std(values: list[float]) -> tuple[float, float]:
    """By hand: the mean and the sample standard deviation (ddof 1)."""
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0


def _bootstrap(values: list[float]) -> tuple[float, float]:
    """The documented interval: 10,000 resamples from numpy.random.default_rng(0), 2.5% / 97.5% quantiles."""
    x = np.asarray(values)
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    idx = np.random.default_rng(0).integers(0, len(x), size=(10000, len(x)))
    lo, hi = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
    return float(lo), float(hi)


def _close(got: float | None, want: float) -> bool:
    return got is not None and math.isclose(got, want, rel_tol=10.0 ** (1 - SIGNIFICANT), abs_tol=1e-15)


def test_csv_and_json_values_by_hand(runs: Path, tmp_path: Path) -> None:
    stats = pytest.importorskip("scipy.stats")
    pytest.importorskip("fusebench.objectives.equivalence")
    out = tmp_path / "boards"
    written = write_leaderboards(runs, out, plots=False, formats=("md", "csv", "json"))
    assert [p.name for p in written] == ["toy.md", "toy.csv", "toy.json", "toy-seeds.csv", "README.md"]
    data = json.loads((out / "toy.json").read_text())
    assert data["format"] == EXPORT_FORMAT and data["benchmark"] == "toy" and len(data["groups"]) == 1
    (group,) = data["groups"]
    assert group["kind"] == "study" and group["dataset"] == "toy" and group["synthetic"] is True
    assert group["primary"] == "acc" and group["reference"] == "raw" and group["seeds"] == [0, 1, 2, 3, 4]
    assert group["key"] == lb.load_runs(runs)["toy"][0].comparability_key
    assert group["metrics"] == [{"id": "acc", "unit": "fraction", "direction": "higher"},
                                {"id": "mae", "unit": "raw", "direction": "lower"}]
    rows = {r["objective"]: r for r in group["rows"]}
    assert list(rows) == ["bad", "gamma", "infonce_pwe", "mv_infonce", "raw"]  # multicrop merged into infonce_pwe
    assert rows["infonce_pwe"]["aliases"] == ["multicrop"] and rows["raw"]["aliases"] == []
    assert rows["bad"]["invalid"] == "bound above the true MI" and rows["raw"]["invalid"] is None
    # every metric: mean, sample std, n (NaN runs left out and counted as undefined); fractions as stored
    for obj, row in rows.items():
        for metric, table in (("acc", ACC), ("mae", MAE)):
            entry = row["metrics"][metric]
            values = [v for v in table.get(obj, []) if not math.isnan(v)]
            assert entry["n"] == len(values), (obj, metric)
            assert entry["undefined"] == len(table.get(obj, [])) - len(values)
            if not values:
                assert entry["mean"] is None and entry["std"] is None
                continue
            mean, std = _mean_std(values)
            assert _close(entry["mean"], mean) and _close(entry["std"], std), (obj, metric, entry)
    assert rows["mv_infonce"]["metrics"]["mae"] == {"mean": 0.375, "std": number(_mean_std([0.4, 0.35])[1]), "n": 2,
                                                    "undefined": 1}
    assert rows["gamma"]["metrics"]["mae"] == {"mean": None, "std": None, "n": 0, "undefined": 0}
    # CI of the primary metric: the documented bootstrap (3 seeds or fewer: [min, max]; one seed: the value)
    for obj, row in rows.items():
        lo, hi = _bootstrap(ACC[obj])
        assert _close(row["ci"][0], lo) and _close(row["ci"][1], hi), (obj, row["ci"])
    assert rows["mv_infonce"]["ci"] == [0.45, 0.65] and rows["gamma"]["ci"] == [0.1, 0.1]
    assert rows["infonce_pwe"]["ci"][0] > 0.5 and rows["infonce_pwe"]["ci"][1] < 0.7  # 5 seeds: inside [min, max]
    # Δ vs raw and Holm p: scipy's paired t-test over the shared seeds, Holm-adjusted here by hand over the
    # 2 rows tested (gamma shares 1 seed: Δ without p; bad is invalid: untested; raw is the reference)
    raw_p = {o: float(stats.ttest_rel(ACC[o], ACC["raw"][:len(ACC[o])]).pvalue) for o in ("infonce_pwe", "mv_infonce")}
    lo_p, hi_p = sorted(raw_p, key=raw_p.get)
    holm = {lo_p: min(1.0, 2 * raw_p[lo_p])}
    holm[hi_p] = max(holm[lo_p], min(1.0, raw_p[hi_p]))
    for o in raw_p:
        delta = math.fsum(a - r for a, r in zip(ACC[o], ACC["raw"])) / len(ACC[o])
        assert _close(rows[o]["delta"], delta) and _close(rows[o]["p_holm"], holm[o]), (o, rows[o])
    assert _close(rows["gamma"]["delta"], 0.1 - 0.9) and rows["gamma"]["p_holm"] is None
    for o in ("bad", "raw"):
        assert rows[o]["delta"] is None and rows[o]["p_holm"] is None
    # budget [min, max] over the row's seeds (None when not recorded); cost = means over the row's runs
    assert rows["mv_infonce"]["budget"] == {"steps": [100, 120], "samples_seen": [6400, 7680]}
    assert rows["raw"]["budget"] == {"steps": [0, 0], "samples_seen": [0, 0]} and rows["gamma"]["budget"] is None
    assert rows["infonce_pwe"]["cost"] == {"pretrain_time_s": 12.0, "peak_memory_mb": 104.0}
    assert rows["mv_infonce"]["cost"] == {"pretrain_time_s": 11.0, "peak_memory_mb": 102.0}
    # the markdown prints the same numbers, rounded
    md = (out / "toy.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| `infonce_pwe`"))
    r = rows["infonce_pwe"]
    assert f"| [{100 * r['ci'][0]:.2f}, {100 * r['ci'][1]:.2f}] |" in line
    p_text = "< 0.001" if r["p_holm"] < 0.0005 else f"{r['p_holm']:.3f}"
    assert f"| {100 * r['delta']:+.2f} ({p_text}) |" in line

    # the CSV: the same values, one line per row, the documented columns
    table = list(csv.DictReader(io.StringIO((out / "toy.csv").read_text())))
    header = (out / "toy.csv").read_text().splitlines()[0].split(",")
    assert header == ["benchmark", "key", "kind", "dataset", "synthetic", "primary", "reference", "objective",
                      "aliases", "invalid", "acc_mean", "acc_std", "acc_n", "mae_mean", "mae_std", "mae_n", "ci_low",
                      "ci_high", "delta", "p_holm", "rank", "rank_low", "rank_high", "delta_best", "p_best_holm",
                      "tied_with_best", "steps_min", "steps_max", "samples_seen_min", "samples_seen_max",
                      "pretrain_time_s", "peak_memory_mb"]
    assert [c["objective"] for c in table] == list(rows)
    for c in table:
        row = rows[c["objective"]]

        def text(v) -> str:
            return "" if v is None else ("true" if v is True else repr(v))

        assert (c["benchmark"], c["key"], c["kind"], c["dataset"], c["synthetic"], c["primary"], c["reference"]) == \
            ("toy", group["key"], "study", "toy", "true", "acc", "raw")
        assert c["aliases"] == ";".join(row["aliases"]) and c["invalid"] == (row["invalid"] or "")
        for m in ("acc", "mae"):
            for s in ("mean", "std", "n"):
                assert c[f"{m}_{s}"] == text(row["metrics"][m][s]), (c["objective"], m, s)
        assert [c["ci_low"], c["ci_high"]] == [text(v) for v in (row["ci"] or [None, None])]
        assert (c["delta"], c["p_holm"]) == (text(row["delta"]), text(row["p_holm"]))
        assert [c["rank"], c["rank_low"], c["rank_high"]] == [text(row["rank"])] + \
            [text(v) for v in (row["rank_interval"] or [None, None])]
        assert (c["delta_best"], c["p_best_holm"]) == (text(row["delta_best"]), text(row["p_best_holm"]))
        assert c["tied_with_best"] == ("" if row["tied_with_best"] is None else str(row["tied_with_best"]).lower())
        budget = row["budget"] or {"steps": [None, None], "samples_seen": [None, None]}
        assert [c["steps_min"], c["steps_max"], c["samples_seen_min"], c["samples_seen_max"]] == \
            [text(v) for v in budget["steps"] + budget["samples_seen"]]
        assert (c["pretrain_time_s"], c["peak_memory_mb"]) == (text(row["cost"]["pretrain_time_s"]),
                                                               text(row["cost"]["peak_memory_mb"]))
    gamma = next(c for c in table if c["objective"] == "gamma")
    assert (gamma["mae_mean"], gamma["mae_n"], gamma["p_holm"], gamma["steps_min"]) == ("", "0", "", "")


def test_number_formatting() -> None:
    """Floats: 12 significant digits, then the shortest text reading back as that float; ints as such."""
    assert repr(number(2 / 3)) == "0.666666666667" and repr(number(0.1 + 0.2)) == "0.3"
    assert repr(number(-0.0)) == "0.0" and repr(number(1e-5)) == "1e-05" and repr(number(12.0)) == "12.0"
    assert number(7) == 7 and isinstance(number(7), int) and number(None) is None
    # a statistic beyond the float range (the std of values near the float limit): null, as strict JSON has no
    # infinity (it was an error, which stopped the regeneration of a board whose records were all finite)
    assert number(math.inf) is None and number(-math.inf) is None and number(math.nan) is None


def _state(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()}


def test_regenerating_twice_is_byte_identical(runs: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_leaderboards(runs, a, plots=False, formats=("md", "csv", "json"))
    first = _state(a)
    write_leaderboards(runs, a, plots=False, formats=["json", "csv", "md", "csv"])  # any order, repeats ignored
    assert _state(a) == first  # same bytes, same mtime: nothing rewritten
    write_leaderboards(runs, b, plots=False, formats=("md", "csv", "json"))
    assert {n: s[0] for n, s in _state(b).items()} == {n: s[0] for n, s in first.items()}
    assert (a / "toy.json").read_bytes().endswith(b"}\n") and (a / "toy.csv").read_bytes().endswith(b"\n")
    # without md: the markdown board and the index are not touched
    md_before = {n: first[n] for n in ("toy.md", "README.md")}
    (a / "toy.csv").unlink()
    written = write_leaderboards(runs, a, plots=False, formats=("csv",))
    assert [p.name for p in written] == ["toy.csv", "toy-seeds.csv"]  # the per-seed rows beside (issue #32)
    after = _state(a)
    assert {n: after[n] for n in md_before} == md_before and after["toy.csv"][0] == first["toy.csv"][0]
    c = tmp_path / "c"
    assert [p.name for p in write_leaderboards(runs, c, formats=("json",))] == ["toy.json"]
    assert sorted(p.name for p in c.iterdir()) == ["toy.json"]  # no markdown, plot or index


def test_committed_boards_csv_and_json_regenerate_byte_identically(committed_regeneration) -> None:
    """Every committed board has a CSV and a JSON, and they are what the committed runs give, byte for
    byte (``committed_regeneration``: also on a second regeneration). Skipped until the CSV / JSON files are
    committed."""
    root = ROOT / "leaderboards"
    if not list(root.glob("*.csv")):
        pytest.skip(f"no CSV in {root} yet: commit the results as data "
                    f"(fusebench leaderboard --runs leaderboards/runs --out leaderboards --format md csv json)")
    regen = committed_regeneration
    boards = [p.stem for p in root.glob("*.md") if p.name != "README.md" and lb.read_board_meta(p) is not None]
    missing = [f"{b}.{ext}" for b in boards for ext in ("csv", "json") if not (root / f"{b}.{ext}").exists()]
    assert not missing, f"committed boards without their results as data: {missing}"
    written = {p.name for p in regen.written}
    for b in boards:
        for ext in ("csv", "json"):
            assert f"{b}.{ext}" in written, f"{b}.{ext}: not written by the regeneration"
            name = f"{b}.{ext}"
            got = regen.first[name][0]
            assert regen.second[name] == regen.first[name], f"{name}: the second regeneration rewrote it"
            assert got == (root / name).read_bytes(), f"{name} differs from what the committed runs give"


def test_split_board_has_one_line_per_group_and_row(tmp_path: Path) -> None:
    """With --split, a board of two comparability groups: the CSV's metric columns are the union of the
    groups' metrics (empty where a group lacks one), the JSON lists both groups in the board's order."""
    runs = tmp_path / "runs"
    for seed in range(2):
        for obj in ("raw", "alpha"):
            rec = _record(obj, seed, {"acc": 0.5 + 0.1 * seed + (0.2 if obj == "raw" else 0.0)})
            del rec["config"]["dataset"]["modalities"]
            _write(runs, rec)
    for seed in range(2):  # another config: another comparability key; its runs also have mae
        rec = _record("alpha", seed, {"acc": 0.3 + 0.1 * seed, "mae": 0.2}, benchmark="toy")
        del rec["config"]["dataset"]["modalities"]
        rec["config"]["pretrain"] = {"epochs": 9}
        d = runs / "toy" / "alpha-long" / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(rec))
    out = tmp_path / "boards"
    write_leaderboards(runs, out, plots=False, split=True, formats=("md", "csv", "json"))
    groups = json.loads((out / "toy.json").read_text())["groups"]
    assert [[r["objective"] for r in g["rows"]] for g in groups] == [["alpha", "raw"], ["alpha"]]
    assert [[m["id"] for m in g["metrics"]] for g in groups] == [["acc"], ["acc", "mae"]]
    assert groups[0]["key"] != groups[1]["key"] and groups[1]["reference"] is None
    table = list(csv.DictReader(io.StringIO((out / "toy.csv").read_text())))
    assert [(c["key"], c["objective"]) for c in table] == [(groups[0]["key"], "alpha"), (groups[0]["key"], "raw"),
                                                           (groups[1]["key"], "alpha")]
    assert [c["mae_n"] for c in table] == ["", "", "2"] and table[2]["mae_mean"] == "0.2"
    assert [c["acc_mean"] for c in table] == ["0.55", "0.75", "0.35"]
    assert table[0]["delta"] == "-0.2" and table[2]["delta"] == "" and table[2]["ci_low"] == "0.3"


def test_format_option(runs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "boards"
    assert main(["--runs", str(runs), "--out", str(out), "--no-plots", "--format", "csv", "json"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name != MANIFEST) == ["toy-seeds.csv", "toy.csv", "toy.json"]
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / 'toy.csv'}", f"wrote {out / 'toy.json'}",
                                                    f"wrote {out / 'toy-seeds.csv'}",
                                                    f"3 file(s) written, 0 unchanged in {out}"]
    assert main(["--runs", str(runs), "--out", str(out), "--no-plots"]) == 0  # default: md only
    assert sorted(p.name for p in out.iterdir() if p.name != MANIFEST) == ["README.md", "toy-seeds.csv", "toy.csv", "toy.json", "toy.md"]
    for bad in (["--format", "xml"], ["--format", "md", "pdf"], ["--format"]):
        with pytest.raises(SystemExit) as e:
            main(["--runs", str(runs), "--out", str(out)] + bad)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--format" in err and ("invalid choice" in err or "expected at least one argument" in err), err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--format" in capsys.readouterr().out
    assert check_formats(["json", "md", "json"]) == ("json", "md")
    for bad_formats in ((), "md", ("md", "xml")):
        with pytest.raises(ValueError, match="format"):
            write_leaderboards(runs, tmp_path / "never", formats=bad_formats)
    assert not (tmp_path / "never").exists()


_PROBE = """
import json, sys
from fusebench.leaderboard import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print(json.dumps({{"rc": rc, "heavy": heavy}}))
"""


def test_writing_csv_and_json_imports_no_heavy_module(tmp_path: Path) -> None:
    """Records without a view count (nothing to merge): writing every format imports neither torch nor
    matplotlib."""
    runs = tmp_path / "runs"
    for obj, accs in (("raw", [0.9, 0.8, 0.85]), ("alpha", [0.5, 0.6, 0.4])):
        for seed, acc in enumerate(accs):
            rec = _record(obj, seed, {"acc": acc, "mae": 0.1})
            del rec["config"]["dataset"]["modalities"]
            _write(runs, rec)
    args = ["--runs", str(runs), "--out", str(tmp_path / "boards"), "--no-plots", "--format", "md", "csv", "json"]
    r = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY)] + args, cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"rc": 0, "heavy": []}
    assert (tmp_path / "boards" / "toy.csv").is_file() and (tmp_path / "boards" / "toy.json").is_file()


def test_mean_std_of_values_past_the_square_range() -> None:
    """A metric value of 1e200 overflowed ``(v - mean) ** 2`` and the board command ended in a traceback naming
    nothing; the scaled formula gives the exact figures: values (1, -1, 3) x 1e200 have mean 1e200 and sample
    std 2e200 (deviations 0, -2, 2; (0 + 4 + 4) / 2 = 4)."""
    from fusebench.leaderboard.columns import mean_std

    mean, std = mean_std([1e200, -1e200, 3e200])
    assert mean == pytest.approx(1e200, rel=1e-15) and std == pytest.approx(2e200, rel=1e-15)
    assert mean_std([0.5, 1.0]) == (0.75, math.sqrt(0.125))  # ordinary values: the plain formulas
