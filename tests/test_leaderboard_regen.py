"""Regenerating leaderboards cheaply: unchanged files are left alone (boards, curves plots, the index's
CD diagram), ``--no-plots`` writes no PNG, a warm regeneration imports neither torch nor matplotlib, the
boards' p-values are scipy's paired t-test Holm-adjusted, the light metric catalog agrees with the
metric registry, and ``fusebench bench leaderboard`` runs. No timing is asserted (shared machine); the
bench shows speed."""

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
from fusebench.leaderboard.fingerprint import MANIFEST
from fusebench.metrics.catalog import CATALOG, SLEEP_STAGES, SUNRGBD_CLASSES
from fusebench.records import comparable_config, validate_record

ROOT = Path(__file__).resolve().parents[1]
# numpy and scipy are imported for the statistics (fusebench.leaderboard.stats); torch only to ask which objectives
# compute the same loss (fusebench.objectives.equivalence), which these boards (no view count) never ask
HEAVY = ("torch", "matplotlib", "pandas", "sklearn")


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
    return {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())
            if p.name != MANIFEST}  # the regeneration manifest: tests/test_leaderboard_fingerprint.py


# -- regenerating: identical bytes, untouched files --------------------------------------------
def test_regenerating_twice_is_byte_identical_and_rewrites_nothing(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "boards"
    write_leaderboards(runs, out)
    first = _state(out)
    assert {"toy-a.md", "toy-b.md", "README.md", "toy-a-curves.png", "toy-b-curves.png"} <= set(first)
    written = write_leaderboards(runs, out)
    # still reported, plots included (the command lists each file it wrote or left unchanged)
    assert {p.name for p in written} == {"toy-a.md", "toy-b.md", "README.md", "toy-a-curves.png", "toy-b-curves.png"}
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
    """Markdown, paired tests, metric units and the plots' input check need neither torch nor
    matplotlib: a warm run (plots up to date) and a --no-plots run import none of them."""
    out = tmp_path / "boards"
    write_leaderboards(runs, out)  # cold: draws the plots (in this process)
    first = _state(out)
    warm = _probe(["--runs", str(runs), "--out", str(out)])
    assert warm == {"rc": 0, "heavy": []}
    assert _state(out) == first
    md_only = _probe(["--runs", str(runs), "--out", str(tmp_path / "md"), "--no-plots"])
    assert md_only == {"rc": 0, "heavy": []}
    assert not list((tmp_path / "md").glob("*.png"))


def _real_runs(root: Path) -> Path:
    """Two real-data boards of the embedding_eval protocol: the index ranks their objectives."""
    for bench, accs in (("real-a", [0.9, 0.7, 0.5]), ("real-b", [0.8, 0.85, 0.4])):
        for obj, acc in zip(("raw", "alpha", "none"), accs):
            for seed in range(2):
                rec = _record(bench, obj, seed, acc + 0.01 * seed, curves=False)
                rec["dataset"] = {"id": bench, "synthetic": False, "manifest_hash": "ab12"}
                rec["config"]["downstream"] = {"protocol": "embedding_eval"}
                del rec["config"]["options"]
                _write(root, rec)
    return root


def test_cd_diagram_is_drawn_once_and_left_alone(tmp_path: Path) -> None:
    runs, out = _real_runs(tmp_path / "runs"), tmp_path / "boards"
    write_leaderboards(runs, out)
    first = _state(out)
    assert "cd-diagram.png" in first
    assert "![critical difference diagram](cd-diagram.png)" in first["README.md"][0].decode()
    warm = _probe(["--runs", str(runs), "--out", str(out)])
    assert warm == {"rc": 0, "heavy": []}  # the diagram's input hash matches: matplotlib is not imported
    assert _state(out) == first
    # a changed run changes the ranks: the diagram is redrawn
    path = runs / "real-b" / "alpha" / "seed0" / "run.json"
    rec = json.loads(path.read_text())
    rec["metrics"]["acc"] = 0.2
    path.write_text(json.dumps(rec))
    path = runs / "real-b" / "alpha" / "seed1" / "run.json"
    rec = json.loads(path.read_text())
    rec["metrics"]["acc"] = 0.2
    path.write_text(json.dumps(rec))
    write_leaderboards(runs, out)
    assert _state(out)["cd-diagram.png"][0] != first["cd-diagram.png"][0]


def test_each_plot_is_drawn_once_and_is_the_committed_png(tmp_path: Path, monkeypatch) -> None:
    """The committed mv-handwritten runs redrawn (curves, missing-view and sensitivity plots): each PNG is the
    committed file byte for byte, and each figure is drawn once. ``tight_layout`` left a placeholder layout engine
    on the figure, for which ``savefig`` drew the whole figure a second time (a dry run before the real one)."""
    import shutil

    from matplotlib.figure import Figure

    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "leaderboards" / "runs" / "mv-handwritten", runs / "mv-handwritten",
                    ignore=shutil.ignore_patterns(".*"))
    draws: list[str] = []
    real_draw = Figure.draw

    def counted(fig, renderer):
        draws.append(fig._suptitle.get_text() if fig._suptitle else "")
        return real_draw(fig, renderer)

    monkeypatch.setattr(Figure, "draw", counted)
    out = tmp_path / "boards"
    write_leaderboards(runs, out, formats=("md",))
    plots = ("mv-handwritten-curves.png", "mv-handwritten-missing.png", "mv-handwritten-sensitivity.png")
    assert sorted(p.name for p in out.glob("*.png")) == sorted(plots)
    for name in plots:
        assert (out / name).read_bytes() == (ROOT / "leaderboards" / name).read_bytes(), name
    assert len(draws) == len(plots) and len(set(draws)) == len(plots), draws


# -- the paired tests on the boards -----------------------------------------------------------
def test_board_p_values_are_scipys_paired_t_test_holm_adjusted(tmp_path: Path) -> None:
    """Random accuracies over 6 seeds: every Δ cell is the mean paired difference to `raw` and the
    Holm-adjusted p-value of scipy.stats.ttest_rel, adjusted here by hand."""
    stats = pytest.importorskip("scipy.stats")
    rnd = random.Random(20240611)
    runs = tmp_path / "runs"
    accs = {"raw": [rnd.uniform(0.6, 0.7) for _ in range(6)]}
    for obj in ("alpha", "beta", "gamma", "delta"):
        shift = rnd.uniform(-0.1, 0.1)
        accs[obj] = [v + shift + rnd.gauss(0, 0.03) for v in accs["raw"]]
    for obj, values in accs.items():
        for seed, acc in enumerate(values):
            _write(runs, _record("toy-a", obj, seed, acc))
    md = lb.benchmark_table("toy-a", lb.load_runs(runs)["toy-a"])
    raw_p = {o: float(stats.ttest_rel(accs[o], accs["raw"]).pvalue) for o in accs if o != "raw"}
    order = sorted(raw_p, key=raw_p.get)
    adjusted, running = {}, 0.0
    for i, o in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * raw_p[o]))
        adjusted[o] = running
    for o in raw_p:
        row = next(line for line in md.splitlines() if line.startswith(f"| `{o}` |"))
        delta = 100 * math.fsum(a - r for a, r in zip(accs[o], accs["raw"])) / 6
        p = adjusted[o]
        shown = "< 0.001" if 0 < p < 0.0005 else f"{p:.3f}"
        assert f"| {delta:+.2f} ({shown}) |" in row, (o, row, p)


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
                        "--runs", str(runs), "--repeat", "1", "--skip-cold", "--format", "md"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| cold (curves plots drawn) | skipped |" in r.stdout
    assert "| warm (unchanged runs: the manifest matches) |" in r.stdout
    assert "| warm, full re-render (--force) |" in r.stdout
    assert "| markdown only, full re-render (--no-plots --format md --force) |" in r.stdout
    assert "identical to the committed boards (3 files, pages not compared" in r.stdout and ": yes" in r.stdout
    assert "target <= 1 s (issue #34)" in r.stdout
    assert sorted(p.name for p in boards.iterdir()) == ["README.md", "toy-a-curves.png", "toy-a.md",
                                                        "toy-b-curves.png", "toy-b.md"]  # not written


def test_the_command_says_what_it_does_warns_on_no_runs_and_names_an_interruption(runs: Path, tmp_path: Path, capsys,
                                                                                  monkeypatch) -> None:
    """Off a terminal, a regeneration writes a progress line as the boards are written (a cold one drew plots for
    most of a minute in silence); a runs folder without any run.json is named in a warning; Ctrl-C in the middle
    says the folder may be half regenerated and to run again, with exit status 130."""
    monkeypatch.setenv("FUSEBENCH_LOG_EVERY", "0")  # a line per board
    assert main(["--runs", str(runs), "--out", str(tmp_path / "a"), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "[fusebench] leaderboard: boards written: step 2/2 (100%)" in err  # (--no-plots: no "plots drawn" line)
    assert "plots drawn" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--runs", str(empty), "--out", str(tmp_path / "b")]) == 0
    assert f"warning: no run.json under {empty}: no board is regenerated" in capsys.readouterr().err

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lb.writer, "render_board", interrupted)
    assert main(["--runs", str(runs), "--out", str(tmp_path / "c"), "--no-plots", "--force"]) == 130
    assert (f"interrupted; the files in {tmp_path / 'c'} may be part old, part regenerated: run the command again"
            in capsys.readouterr().err)
