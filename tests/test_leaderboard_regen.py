"""Regenerating leaderboards cheaply: unchanged files are left alone, ``--no-plots`` writes no PNG, a
warm regeneration imports none of torch / numpy / scipy / matplotlib, the scipy-free paired t-test
prints scipy's digits, the light metric catalog agrees with the metric registry, and
``fusebench bench leaderboard`` runs. No timing is asserted (shared machine); the bench shows speed."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

import fusebench.leaderboard as lb
from fusebench import metrics as M
from fusebench.leaderboard import main, write_leaderboards
from fusebench.metrics.catalog import CATALOG, SLEEP_STAGES, SUNRGBD_CLASSES
from fusebench.records import comparable_config, validate_record

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "scipy", "matplotlib", "pandas", "sklearn")


def _record(bench: str, obj: str, seed: int, acc: float, *, curves: bool = True) -> dict:
    rec = {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": bench, "objective": obj, "seed": seed,
        # acc and mae are registered metrics; gap_M2 is not (its direction comes from the records)
        "metrics": {"acc": acc, "mae": 1.0 - acc + 0.01 * seed, "gap_M2": 0.1 * seed + acc},
        "metric_directions": {"acc": "higher", "mae": "lower", "gap_M2": "lower"},
        "config": {"metrics": ["acc", "mae"], "selection_metric": "acc", "description": f"{bench} board",
                   "seeds": [0, 1, 2], "options": {"board": "study"}, "dataset": {"id": bench}},
        "dataset": {"id": bench, "synthetic": True, "manifest_hash": "synthetic"},
        "selection": {"rule": "best validation acc"},
        "pretrain_time_s": 5.0 + seed, "peak_memory_mb": 50.0,
    }
    if curves:
        rec["curves"] = {"pretrain_loss": [2.0 - 0.1 * i - 0.01 * seed for i in range(4)],
                         "val_acc": [0.3 + 0.1 * i + 0.02 * seed for i in range(3)]}
    return rec


def _write(runs: Path, rec: dict) -> Path:
    d = runs / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(rec, indent=2))
    return d / "run.json"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two benchmarks with curves (two plots), three objectives x three seeds each."""
    root = tmp_path / "runs"
    accs = {"alpha": [0.61, 0.7, 0.78], "beta": [0.5, 0.66, 0.7], "gamma": [0.4, 0.42, 0.47]}
    for bench in ("toy-a", "toy-b"):
        for obj, values in accs.items():
            for seed, acc in enumerate(values):
                _write(root, _record(bench, obj, seed, acc + (0.01 if bench == "toy-b" else 0.0)))
    return root


def _state(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """name -> (bytes, inode, mtime_ns) of every file in ``folder``."""
    return {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


# -- regenerating: identical bytes, untouched files --------------------------------------------
def test_regenerating_twice_is_byte_identical_and_rewrites_nothing(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "boards"
    write_leaderboards(runs, out)
    first = _state(out)
    assert {"toy-a.md", "toy-b.md", "README.md", "toy-a-curves.png", "toy-b-curves.png"} <= set(first)
    written = write_leaderboards(runs, out)
    assert {p.name for p in written} == {"toy-a.md", "toy-b.md", "README.md"}  # still reported as the boards
    second = _state(out)
    assert second == first  # same bytes, same inode, same mtime: no file was rewritten, PNG or markdown
    # one changed run: its board and plot are rewritten, the other benchmark's plot is left alone
    path = runs / "toy-a" / "alpha" / "seed0" / "run.json"
    rec = json.loads(path.read_text())
    rec["curves"]["pretrain_loss"][0] = 7.0
    path.write_text(json.dumps(rec))
    write_leaderboards(runs, out)
    third = _state(out)
    assert third["toy-a-curves.png"][1:] != first["toy-a-curves.png"][1:]
    assert third["toy-a-curves.png"][0] != first["toy-a-curves.png"][0]
    assert third["toy-b-curves.png"] == first["toy-b-curves.png"]
    assert third["toy-b.md"] == first["toy-b.md"]


def test_no_plots_writes_no_png(runs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "boards"
    assert main(["--runs", str(runs), "--out", str(out), "--no-plots"]) == 0
    assert not list(out.glob("*.png"))
    md = (out / "toy-a.md").read_text()
    assert "Training curves" not in md and "-curves.png" not in md
    # an existing plot is neither redrawn nor deleted by --no-plots
    stale = out / "toy-a-curves.png"
    stale.write_bytes(b"not redrawn")
    before = (stale.stat().st_ino, stale.stat().st_mtime_ns)
    assert main(["--runs", str(runs), "--out", str(out), "--no-plots"]) == 0
    assert stale.read_bytes() == b"not redrawn" and (stale.stat().st_ino, stale.stat().st_mtime_ns) == before
    assert sorted(p.name for p in out.glob("*.png")) == ["toy-a-curves.png"]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--no-plots" in capsys.readouterr().out


_PROBE = """
import json, sys
from fusebench.leaderboard import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print(json.dumps({{"rc": rc, "heavy": heavy}}))
"""


def _probe(args: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY)] + args, cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_warm_regeneration_imports_no_heavy_module(runs: Path, tmp_path: Path) -> None:
    """Markdown, paired tests, metric units and the plots' input check need none of torch, numpy,
    scipy, matplotlib: a warm run (plots up to date) and a --no-plots run import none of them."""
    out = tmp_path / "boards"
    write_leaderboards(runs, out)  # cold: draws the plots (in this process)
    first = _state(out)
    warm = _probe(["--runs", str(runs), "--out", str(out)])
    assert warm == {"rc": 0, "heavy": []}
    assert _state(out) == first
    md_only = _probe(["--runs", str(runs), "--out", str(tmp_path / "md"), "--no-plots"])
    assert md_only == {"rc": 0, "heavy": []}
    assert not list((tmp_path / "md").glob("*.png"))


# -- the paired t-test without scipy -----------------------------------------------------------
def test_student_t_closed_forms() -> None:
    for t in (0.0, 0.3, 1.0, 2.5, 12.0):
        assert lb.student_t_two_sided(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), abs=1e-15)
        assert lb.student_t_two_sided(t, 2) == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-15)
        assert lb.student_t_two_sided(-t, 5) == lb.student_t_two_sided(t, 5)
    assert lb.student_t_two_sided(math.inf, 3) == 0.0
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError):
            lb.student_t_two_sided(1.0, bad)


def test_student_t_matches_scipy() -> None:
    special = pytest.importorskip("scipy.special")
    for df in list(range(1, 40)) + [57, 99, 250]:
        for t in (1e-3, 0.05, 0.4, 0.9, 1.3, 2.0, 2.7, 3.5, 5.0, 9.0, 40.0):
            assert abs(lb.student_t_two_sided(t, df) - 2 * special.stdtr(df, -t)) < 1e-13, (df, t)


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy, on the near-constant case below
def test_paired_p_prints_scipys_digits() -> None:
    stats = pytest.importorskip("scipy.stats")
    rnd = random.Random(20240611)
    for _ in range(600):
        n = rnd.randint(2, 12)
        x = [rnd.random() for _ in range(n)]
        shift, noise = rnd.uniform(-0.2, 0.2), 10 ** rnd.uniform(-4, -0.5)
        y = [v + rnd.gauss(shift, noise) for v in x]
        a, b = dict(enumerate(x)), dict(enumerate(y))
        assert lb._paired_p(a, b) == f"{float(stats.ttest_rel(x, y).pvalue):.3f}", (x, y)
    # near-constant differences (scipy warns of cancellation): scipy's own answer
    x = [0.5, 0.6, 0.7]
    y = [v - 0.1 * (1 + 1e-15 * i) for i, v in enumerate(x)]
    assert lb._paired_p(dict(enumerate(x)), dict(enumerate(y))) == f"{float(stats.ttest_rel(x, y).pvalue):.3f}"


def test_paired_p_asks_scipy_at_a_rounding_boundary(monkeypatch) -> None:
    stats = pytest.importorskip("scipy.stats")
    x, y = [0.5, 0.6, 0.7, 0.65], [0.45, 0.5, 0.65, 0.66]
    want = f"{float(stats.ttest_rel(x, y).pvalue):.3f}"
    monkeypatch.setattr(lb, "student_t_two_sided", lambda t, df: 0.0125)  # exactly half-way between digits
    assert lb._paired_p(dict(enumerate(x)), dict(enumerate(y))) == want


def test_paired_p_trivial_cases() -> None:
    assert lb._paired_p({0: 0.5}, {0: 0.4}) == "n/a"
    assert lb._paired_p({0: 0.5, 1: 0.6}, {0: 0.5, 1: 0.6}) == "1.000"
    assert lb._paired_p({0: 0.5, 1: 0.75}, {0: 0.25, 1: 0.5}) == "0.000"  # equal non-zero differences


# -- the metric catalog ------------------------------------------------------------------------
def test_catalog_agrees_with_the_registered_builtin_metrics() -> None:
    builtin = {i: M.get(i) for i in M.available() if M.get(i).fn.__module__ in M.METRICS.modules}
    assert set(builtin) == set(CATALOG)
    for i, m in builtin.items():
        d = CATALOG[i]
        assert (d.task, d.higher_is_better, d.unit, d.version) == (m.task, m.higher_is_better, m.unit, m.version), i
        assert M.metadata(i) == {"task": m.task, "direction": m.direction, "unit": m.unit, "version": m.version}


def test_catalog_class_lists_match_their_sources() -> None:
    from fusebench.datasets.sunrgbd.classes import CLASSES
    from fusebench.metrics.sleep import STAGES

    assert SUNRGBD_CLASSES == CLASSES and SLEEP_STAGES == STAGES


def test_builtin_registration_is_checked_against_the_catalog() -> None:
    def fn(y_pred, y_true):
        return 0.0

    fn.__module__ = "fusebench.metrics.sleep"
    with pytest.raises(ValueError, match="catalog.py"):
        M._check_catalog(M.Metric("acc", fn, False, "classification", unit="fraction"))  # direction differs
    with pytest.raises(ValueError, match="not declared"):
        M._check_catalog(M.Metric("acc_new", fn, True, "classification", unit="fraction"))
    M._check_catalog(M.Metric("acc", fn, True, "classification", unit="fraction"))  # as declared


def test_metadata_of_unknown_and_runtime_metrics(monkeypatch) -> None:
    with pytest.raises(M.UnknownNameError):
        M.metadata("gap_M2")
    metric = M.Metric("zz_runtime_metric", lambda a, b: 0.0, False, "regression", unit="raw", version="3")
    monkeypatch.setitem(M.METRICS._entries, "zz_runtime_metric", metric)
    assert M.metadata("zz_runtime_metric") == {"task": "regression", "direction": "lower", "unit": "raw",
                                               "version": "3"}


# -- reading records ---------------------------------------------------------------------------
def test_fast_validation_keeps_its_messages_and_copies() -> None:
    rec = _record("toy-a", "alpha", 0, 0.5)
    rec["curves"]["pretrain_loss"][2] = True
    with pytest.raises(ValueError, match=r"curves\.pretrain_loss\[2\].*a number, got boolean true"):
        validate_record(rec, "x/run.json")
    rec = _record("toy-a", "alpha", 0, 0.5)
    rec["metrics"]["acc"] = "0.5"
    with pytest.raises(ValueError, match=r"metrics\.acc.*a number"):
        validate_record(rec, "x/run.json")
    rec = _record("toy-a", "alpha", 0, 0.5)
    rec["curves"]["val_acc"] = [1, float("nan"), 0.5]
    got = validate_record(rec, "x/run.json")
    assert got.curves["val_acc"][0] == 1.0 and type(got.curves["val_acc"][0]) is float
    assert math.isnan(got.curves["val_acc"][1])
    cfg = {"options": {"board": "study", "k": {"x": 1}}, "pretrain": {"lr": 0.1}, "seeds": [0]}
    copied = comparable_config(cfg)
    assert copied == {"options": {"k": {"x": 1}}, "pretrain": {"lr": 0.1}}
    copied["options"]["k"]["x"] = 2
    copied["pretrain"]["lr"] = 9
    assert cfg == {"options": {"board": "study", "k": {"x": 1}}, "pretrain": {"lr": 0.1}, "seeds": [0]}


def test_hidden_folders_are_not_read(runs: Path) -> None:
    hidden = runs / "toy-a" / ".selection" / "trial0"
    hidden.mkdir(parents=True)
    (hidden / "run.json").write_text("{not json")  # would fail if it were read
    loaded = lb.load_runs(runs)
    assert sorted(loaded) == ["toy-a", "toy-b"] and len(loaded["toy-a"]) == 9


# -- the bench command -------------------------------------------------------------------------
def test_bench_leaderboard_runs_and_checks(runs: Path, tmp_path: Path) -> None:
    boards = tmp_path / "committed"
    write_leaderboards(runs, boards)  # the "committed" boards of these runs
    # --skip-cold: the committed plots are copied instead of drawn (drawing is what the cold phase times)
    r = subprocess.run([sys.executable, "-m", "fusebench", "bench", "leaderboard", "--boards", str(boards),
                        "--runs", str(runs), "--repeat", "1", "--skip-cold"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| cold (every plot drawn) | skipped |" in r.stdout
    assert "| warm (unchanged runs) |" in r.stdout and "| markdown only (--no-plots) |" in r.stdout
    assert "markdown identical to the committed boards: yes" in r.stdout
    assert sorted(p.name for p in boards.iterdir()) == ["README.md", "toy-a-curves.png", "toy-a.md",
                                                        "toy-b-curves.png", "toy-b.md"]  # not written
