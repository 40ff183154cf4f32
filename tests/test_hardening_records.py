"""Hardening of run records, leaderboard regeneration and ``fusebench status`` (outside tester's report):
non-finite metrics (item 4), what counts as a record file (5), deeply nested JSON (8), concurrent
regenerations into one folder (10), file modes under the umask (11), defaults that work from any
folder (13)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fusebench.leaderboard as lb
from fusebench.leaderboard import load_runs, write_leaderboards
from fusebench.leaderboard.fingerprint import MANIFEST
from fusebench.records import RecordError, validate_record
from fusebench.sweep import status

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "leaderboards"


def _record(obj: str, seed: int, metrics: dict, bench: str = "toy") -> dict:
    return {
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": bench, "objective": obj, "seed": seed,
        "metrics": metrics, "metric_directions": {"acc": "higher", "corr": "higher"},
        "config": {"metrics": ["acc", "corr"], "selection_metric": "acc", "seeds": [0, 1, 2],
                   "options": {"board": "study"}, "dataset": {"id": bench}},
        "dataset": {"id": bench, "synthetic": True, "manifest_hash": "synthetic"},
        "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0,
        "curves": {"pretrain_loss": [2.0, 1.5 - 0.1 * seed, 1.0], "val_acc": [0.3, 0.4 + 0.01 * seed]},
    }


def _write(runs: Path, rec: dict, text: str | None = None) -> Path:
    d = runs / rec["benchmark"] / rec["objective"] / f"seed{rec['seed']}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(text if text is not None else json.dumps(rec))
    return d / "run.json"


def _cli(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusebench", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, **kw)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    """The command failed with exit status 2 and exactly one line on stderr (no traceback)."""
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def quickstart(tmp_path: Path) -> Path:
    """A copy of the committed quickstart records (15 run.json files, 5 objectives x 3 seeds)."""
    runs = tmp_path / "runs"
    shutil.copytree(COMMITTED / "runs" / "quickstart", runs / "quickstart")
    return runs


# ---------------------------------------------------------------------------------------------
# item 4: non-finite metrics
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "1e999", "1" + "0" * 400],
                         ids=["inf", "-inf", "1e999", "400-digit-int"])
def test_an_infinite_metric_is_refused_naming_file_and_metric(tmp_path: Path, literal: str) -> None:
    runs = tmp_path / "runs"
    for s in range(2):
        _write(runs, _record("alpha", s, {"acc": 0.5 + 0.1 * s, "corr": 0.1}))
    text = json.dumps(_record("beta", 0, {"acc": 0.25, "corr": 0.1})).replace('"acc": 0.25', f'"acc": {literal}')
    bad = _write(runs, _record("beta", 0, {}), text)
    with pytest.raises(RecordError, match=re.escape(f"{bad}: field 'metrics.acc': expected a finite number or NaN")
                       + ".*a failed run has failed.json"):
        load_runs(runs)
    line = _one_error_line(_cli("leaderboard", "--runs", str(runs), "--out", str(tmp_path / "out"), "--no-plots"))
    assert str(bad) in line and "metrics.acc" in line
    assert not (tmp_path / "out").exists()  # nothing written


def test_validate_record_refuses_infinity_but_keeps_nan() -> None:
    with pytest.raises(RecordError, match=r"field 'metrics.corr': expected a finite number or NaN.*got number inf"):
        validate_record(_record("alpha", 0, {"acc": 0.5, "corr": float("inf")}), "x/run.json")
    rec = validate_record(_record("alpha", 0, {"acc": 0.5, "corr": float("nan")}), "x/run.json")
    assert rec.metrics["corr"] != rec.metrics["corr"]  # NaN: a metric undefined for this run


def test_nan_metric_is_counted_in_the_cell_not_silently_dropped(quickstart: Path, tmp_path: Path) -> None:
    """The tester's case: m3g seed 0 with acc NaN. The cell says how many runs are undefined, so the
    counts in the cells add up to the footer's run count."""
    path = quickstart / "quickstart" / "m3g" / "seed0" / "run.json"
    path.write_text(path.read_text().replace('"acc": 0.435546875', '"acc": NaN'))
    assert '"acc": NaN' in path.read_text()
    md = lb.benchmark_table("quickstart", load_runs(quickstart)["quickstart"])
    row = next(line for line in md.splitlines() if line.startswith("| `m3g` |"))
    assert row.split(" | ")[1] == "63.18 ± 1.24 (2; 1 undefined)"
    assert "- runs: 18 run.json file(s)" in md
    assert "`k undefined`" in md  # the note explaining it, only on boards that have undefined values
    plain = lb.benchmark_table("quickstart", load_runs(COMMITTED / "runs")["quickstart"])
    assert "undefined" not in plain


def test_a_metric_undefined_in_every_run_shows_the_count(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for s in range(3):
        _write(runs, _record("alpha", s, {"acc": 0.5 + 0.1 * s, "corr": float("nan")}))
        _write(runs, _record("beta", s, {"acc": 0.4, "corr": 0.2 + 0.1 * s}))
    md = lb.benchmark_table("toy", load_runs(runs)["toy"])
    rows = {line.split(" | ")[0]: line.split(" | ") for line in md.splitlines() if line.startswith("| `")}
    assert rows["| `alpha`"][2] == "— (3 undefined)"
    assert rows["| `beta`"][2] == "0.3000 ± 0.1000 (3)"  # corr is a registered "raw" metric


# ---------------------------------------------------------------------------------------------
# item 5: what counts as a record file (one rule for the leaderboard and status)
# ---------------------------------------------------------------------------------------------
def _valid(runs: Path, obj: str = "alpha", seed: int = 0) -> Path:
    return _write(runs, _record(obj, seed, {"acc": 0.5, "corr": 0.1}))


def test_run_json_that_is_a_folder_is_refused_and_unreadable_in_status(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _valid(runs)
    odd = runs / "toy" / "beta" / "seed0" / "run.json"
    odd.mkdir(parents=True)
    with pytest.raises(RecordError, match=re.escape(f"{odd}: field '(file)': expected a regular file, found a folder")):
        load_runs(runs)
    line = _one_error_line(_cli("leaderboard", "--runs", str(runs), "--out", str(tmp_path / "out")))
    assert f"{odd}: field '(file)': expected a regular file, found a folder" in line
    state, detail = status.collect(runs)["toy"][("beta", 0)]
    assert state == "unreadable" and "found a folder" in detail
    assert status.collect(runs)["toy"][("alpha", 0)] == ("done", "")


def test_symlinked_cell_folder_is_refused_by_both(tmp_path: Path) -> None:
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    _valid(runs)
    outside = _valid(elsewhere, "beta")  # a valid record outside the runs folder
    (runs / "toy" / "beta").mkdir(parents=True)
    link = runs / "toy" / "beta" / "seed0"
    link.symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(RecordError, match=re.escape(f"{link}: field '(folder)': expected a folder, found a symbolic "
                                                    f"link (to {outside.parent})")):
        load_runs(runs)
    state, detail = status.collect(runs)["toy"][("beta", 0)]
    assert state == "unreadable" and str(link) in detail and "symbolic link" in detail
    r = _cli("status", "--out", str(runs))
    assert r.returncode == 0, r.stderr
    assert "toy: 1 done, 0 running, 0 failed, 0 interrupted, 0 pending, 1 unreadable (2 cells)" in r.stdout
    assert "unreadable: beta/seed0: " in r.stdout


def test_symlinked_run_json_and_benchmark_folder_are_refused_by_both(tmp_path: Path) -> None:
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    _valid(runs)
    outside = _valid(elsewhere, "beta")
    cell = runs / "toy" / "beta" / "seed0"
    cell.mkdir(parents=True)
    (cell / "run.json").symlink_to(outside)
    with pytest.raises(RecordError, match=re.escape(f"{cell / 'run.json'}: field '(file)': expected a regular file, "
                                                    "found a symbolic link")):
        load_runs(runs)
    assert status.collect(runs)["toy"][("beta", 0)][0] == "unreadable"
    (cell / "run.json").unlink()
    cell.rmdir()
    (runs / "toy" / "beta").rmdir()
    (runs / "other").symlink_to(elsewhere / "toy", target_is_directory=True)  # a whole benchmark through a link
    with pytest.raises(RecordError, match=re.escape(f"{runs / 'other'}: field '(folder)'")):
        load_runs(runs)
    found = status.collect(runs)["other"]
    assert list(found) == [("beta", 0)] and found[("beta", 0)][0] == "unreadable"


def test_status_benchmark_names_are_ids_never_paths(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _valid(tmp_path / "outside")  # a benchmark folder 'toy' beside the runs folder, reachable as ../outside/toy
    runs.mkdir()
    for name in ("../outside/toy", "/", "Toy"):
        with pytest.raises(ValueError, match=re.escape(f"--benchmark {name!r} is not a benchmark id")):
            status.collect(runs, [name])
    line = _one_error_line(_cli("status", "--out", str(runs), "--benchmark", "../outside/toy"))
    assert line.startswith("fusebench status: --benchmark '../outside/toy' is not a benchmark id")


def test_the_runs_folder_itself_may_be_a_link_and_hidden_links_are_ignored(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _valid(real)
    (real / "toy" / ".submitit").symlink_to(tmp_path, target_is_directory=True)  # hidden: not a cell, not read
    runs = tmp_path / "runs"
    runs.symlink_to(real, target_is_directory=True)
    assert [r.objective for r in load_runs(runs)["toy"]] == ["alpha"]
    assert status.collect(runs) == {"toy": {("alpha", 0): ("done", "")}}


def test_an_unreadable_folder_is_an_error_not_skipped(tmp_path: Path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    _valid(runs)
    locked = runs / "toy" / "beta"
    locked.mkdir()
    scandir = os.scandir

    def denied(path=".", *a, **k):  # what a folder without read permission gives (the tests may run as root)
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path, *a, **k)

    monkeypatch.setattr(os, "scandir", denied)
    with pytest.raises(RecordError, match=re.escape(f"{locked}: field '(folder)': expected a readable folder "
                                                    "(Permission denied)")):
        load_runs(runs)


# ---------------------------------------------------------------------------------------------
# item 8: deeply nested JSON
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["lists", "mappings"])
def test_deeply_nested_run_json_is_one_record_error(tmp_path: Path, kind: str) -> None:
    deep = ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}" if kind == "lists"
            else '{"config": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001)
    runs = tmp_path / "runs"
    _valid(runs)
    bad = _write(runs, _record("beta", 0, {}), deep)
    with pytest.raises(RecordError, match=re.escape(f"{bad}: field '(file)': ") + ".*nested too deeply"):
        load_runs(runs)
    line = _one_error_line(_cli("leaderboard", "--runs", str(runs), "--out", str(tmp_path / "out")))
    assert str(bad) in line and "nested too deeply" in line


def test_config_nested_near_the_parsers_limit_is_no_recursion_error(tmp_path: Path) -> None:
    """Configs nested 900 to 1000 levels deep: the deepest ones the JSON reader parses ran out of stack
    in the comparability hash, or in flattening the configs of two comparability groups. Each is now
    a board or one RecordError, never a RecursionError."""
    other = _record("alpha", 1, {"acc": 0.6, "corr": 0.1})
    other["config"]["pretrain"] = {"epochs": 2}  # a second comparability group: differing_fields flattens configs
    template = json.dumps(_record("alpha", 0, {"acc": 0.5, "corr": 0.1})).replace('"config": {', '"config": {"extra": @, ')
    outcomes = set()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default, what a user's `fusebench leaderboard` has (pytest raises it)
    try:
        for depth in range(850, 1001):
            runs = tmp_path / f"d{depth}"
            _write(runs, _record("alpha", 0, {}), template.replace("@", '{"a": ' * depth + "{}" + "}" * depth))
            _write(runs, other)
            try:
                lb.group_runs("toy", load_runs(runs)["toy"])
            except RecordError as e:
                assert "nested too deeply" in str(e)
                outcomes.add("refused")
            except ValueError as e:
                assert "mixes runs that must not be compared" in str(e)
                outcomes.add("compared")
            shutil.rmtree(runs)
    finally:
        sys.setrecursionlimit(limit)
    assert outcomes == {"compared", "refused"}


def test_status_survives_deeply_nested_failed_json(tmp_path: Path) -> None:
    cell = tmp_path / "runs" / "toy" / "alpha" / "seed0"
    cell.mkdir(parents=True)
    (cell / "failed.json").write_text("[" * 100_000 + "]" * 100_000)
    (cell / ".lock").write_text("[" * 100_000 + "]" * 100_000)
    (cell / ".launcher.json").write_text("[" * 100_000 + "]" * 100_000)
    # an unreadable lock is a live owner's for a minute after it was written (the run's rule: engine.cell.lock_holder)
    os.utime(cell / ".lock")  # written now, whatever the time the writes above took
    assert status.collect(tmp_path / "runs")["toy"][("alpha", 0)][0] == "running"
    old = time.time() - 120  # then stale
    os.utime(cell / ".lock", (old, old))
    assert status.collect(tmp_path / "runs") == {"toy": {("alpha", 0): ("failed", "failed.json unreadable")}}


# ---------------------------------------------------------------------------------------------
# item 10: concurrent regenerations into one folder
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("small") / "runs"
    for obj in ("none", "m3g"):
        for s in (0, 1):
            src = COMMITTED / "runs" / "quickstart" / obj / f"seed{s}" / "run.json"
            dst = runs / "quickstart" / obj / f"seed{s}" / "run.json"
            dst.parent.mkdir(parents=True)
            shutil.copy(src, dst)
    return runs


def test_plot_temporary_name_is_unique(small_runs: Path, tmp_path: Path) -> None:
    """The PNG used to be drawn to the fixed name ``.quickstart-curves.png.tmp.png``: a second process
    drawing the same plot truncated or renamed it away. Something in the way at that name now does
    not matter."""
    out = tmp_path / "out"
    (out / ".quickstart-curves.png.tmp.png").mkdir(parents=True)
    write_leaderboards(small_runs, out)
    assert (out / "quickstart-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == [".quickstart-curves.png.tmp.png", "README.md",
                                                     "quickstart-curves.png", "quickstart.md"]


def test_two_concurrent_regenerations_into_one_folder_both_succeed(small_runs: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    write_leaderboards(small_runs, reference)
    for trial in range(2):  # the race itself is forced deterministically in the test below
        out = tmp_path / f"out{trial}"  # a fresh folder: both processes draw the plot
        cmd = [sys.executable, "-m", "fusebench", "leaderboard", "--runs", str(small_runs), "--out", str(out)]
        procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert all(rc == 0 for rc, _ in results), f"trial {trial}: {results}"
        assert sorted(p.name for p in out.iterdir() if p.name != MANIFEST) == ["README.md", "quickstart-curves.png",
                                                                               "quickstart.md"]
        for name in ("README.md", "quickstart.md"):
            assert (out / name).read_bytes() == (reference / name).read_bytes()


def test_the_manifest_lists_no_write_in_progress_of_another_regeneration(tmp_path: Path, monkeypatch) -> None:
    """The race the test above can hit under load: one regeneration listed the other's temporary file (or a file it
    renamed away meanwhile) among the folder's files, hashed it, and failed with 'No such file or directory'."""
    import hashlib

    from fusebench.leaderboard import fingerprint

    (tmp_path / "quickstart.md").write_text("board")
    (tmp_path / ".quickstart.md.k2j4x9.tmp").write_text("half")  # another process's atomic write in progress
    (tmp_path / "..fusebench-regen.json.shk5ite8.tmp").write_text("{")
    (tmp_path / "gone.md").write_text("x")
    real = fingerprint.sha256_file

    def vanishing(path: Path) -> str:
        if path.name == "gone.md":  # renamed away between the listing and the read
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(fingerprint, "sha256_file", vanishing)
    assert fingerprint.out_files(tmp_path) == {"quickstart.md": hashlib.sha256(b"board").hexdigest()}


# ---------------------------------------------------------------------------------------------
# item 11: file modes follow the umask
# ---------------------------------------------------------------------------------------------
_MODES_SCRIPT = textwrap.dedent("""
    import json, os, shutil, sys
    from pathlib import Path
    from fusebench import io
    from fusebench.leaderboard import write_leaderboards
    from fusebench.runtime import utils
    from fusebench.records.cell_file import write_record

    work, runs = Path(sys.argv[1]), Path(sys.argv[2])
    io.atomic_write_text(work / "a.txt", "x")
    utils.atomic_write_json(work / "b.json", {"x": 1})
    utils.atomic_torch_save({"x": 1}, work / "c.pt")
    rec = json.loads((runs / "quickstart" / "none" / "seed0" / "run.json").read_text())
    (work / "cell").mkdir()
    write_record(work / "cell", rec)
    write_leaderboards(runs, work / "boards")
    files = [work / "a.txt", work / "b.json", work / "c.pt", work / "cell" / "run.json",
             *sorted((work / "boards").iterdir())]
    print(json.dumps({str(p.relative_to(work)): oct(p.stat().st_mode & 0o777) for p in files}))
""")


def test_written_files_follow_the_umask(small_runs: Path, tmp_path: Path) -> None:
    procs = {}
    for umask in ("022", "077"):
        work = tmp_path / umask
        work.mkdir()
        procs[umask] = subprocess.Popen(
            ["sh", "-c", f'umask {umask} && exec "$0" -c "$1" "$2" "$3"', sys.executable, _MODES_SCRIPT,
             str(work), str(small_runs)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for umask, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        modes = json.loads(out.strip().splitlines()[-1])
        expected = {"022": "0o644", "077": "0o600"}[umask]
        assert set(modes) >= {"a.txt", "b.json", "c.pt", "cell/run.json", "boards/quickstart.md",
                              "boards/README.md", "boards/quickstart-curves.png"}
        assert modes == {name: expected for name in modes}, (umask, modes)


def test_file_mode_follows_a_changed_umask() -> None:
    from fusebench.io import new_file_mode

    old = os.umask(0o027)
    try:
        assert new_file_mode() == 0o640
    finally:
        os.umask(old)
    assert new_file_mode() == 0o666 & ~old


# ---------------------------------------------------------------------------------------------
# item 13: defaults that work from any folder
# ---------------------------------------------------------------------------------------------
def test_bench_leaderboard_defaults_work_from_another_folder(tmp_path: Path, monkeypatch) -> None:
    """Without --boards / --runs and from another folder, the bench copies the repository's committed boards and reads
    their runs in place: its first timed command regenerates from a link to leaderboards/runs. (What it times and
    checks, byte-identical boards included, runs end to end in tests/test_leaderboard_regen.py on a small folder;
    running it here on every committed record took half a minute.)"""
    from fusebench.perf import leaderboard as bench

    class Stop(Exception):
        pass

    seen: list[list[str]] = []
    found: dict[str, object] = {}

    def first_command(cmd, env, cwd):  # what the regeneration it would time reads, while the copy exists
        seen.append(list(cmd))
        out = Path(cmd[cmd.index("--out") + 1])
        found["runs"] = Path(cmd[cmd.index("--runs") + 1]).resolve()
        found["copied"] = sorted(p.name for p in out.iterdir())
        raise Stop

    monkeypatch.setattr(bench, "_run", first_command)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        bench.main(["--skip-cold", "--repeat", "1", "--format", "md"])
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "fusebench", "leaderboard"]
    runs, out = Path(cmd[cmd.index("--runs") + 1]), Path(cmd[cmd.index("--out") + 1])
    assert runs == out / "runs" and not out.exists()  # the temporary copy, removed when the bench stops
    assert found["runs"] == (COMMITTED / "runs").resolve()  # the repository's runs, read in place
    assert "mv-handwritten-kviews.md" in found["copied"] and "runs" in found["copied"]  # leaderboards/ copied


def test_bench_leaderboard_without_a_repository_says_what_to_pass(monkeypatch, capsys, tmp_path: Path) -> None:
    from fusebench.perf import leaderboard as perf_leaderboard

    monkeypatch.setattr(lb, "repository_boards", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert perf_leaderboard.main(["--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --boards DIR" in err[0]
    assert perf_leaderboard.main(["--boards", str(tmp_path / "absent")]) == 2
    assert f"--boards {tmp_path / 'absent'} is not a folder" in capsys.readouterr().err


def test_study_kviews_renders_from_another_folder_and_says_what_it_did(tmp_path: Path) -> None:
    board = tmp_path / "board"
    r = _cli("study", "kviews", "--render-only", "--board", str(board), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (board / "mv-handwritten-kviews.md").read_bytes() == (COMMITTED / "mv-handwritten-kviews.md").read_bytes()
    assert f"from the run records in {COMMITTED / 'runs-kviews'}" in r.stderr
    md, png = board / "mv-handwritten-kviews.md", board / "mv-handwritten-kviews.png"
    assert f"board written to {md} and {png}" in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"markdown": str(board / "mv-handwritten-kviews.md"),
                                                            "plot": str(board / "mv-handwritten-kviews.png")}


def test_study_kviews_without_a_repository_says_what_to_pass(monkeypatch, capsys, tmp_path: Path) -> None:
    from fusebench.cli import study as kviews_cli

    monkeypatch.setattr(lb, "repository_boards", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert kviews_cli.main(["--render-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --out" in err[0] and "--board" in err[0]


def test_study_kviews_says_how_many_cells_were_reused(tmp_path: Path, capsys) -> None:
    import numpy as np
    import scipy.io as sio

    from fusebench.cli import study as kviews_cli

    rng = np.random.default_rng(0)
    n, classes = 60, 3
    y = np.repeat(np.arange(classes), n // classes)
    cell = np.empty((1, 3), dtype=object)
    for v, d in enumerate((4, 3, 5)):
        cell[0, v] = rng.normal(size=(classes, d))[y] * 2 + rng.normal(size=(n, d))
    mat = tmp_path / "three.mat"
    sio.savemat(mat, {"X": cell, "Y": (y + 1).reshape(-1, 1)})
    args = ["--benchmark", "multiview", "--data-root", str(mat), "--out", str(tmp_path / "runs"), "--board",
            str(tmp_path / "board"), "--objective", "raw", "none", "infonce_pwe", "--seeds", "0", "--k", "2",
            "--subsets", "1", "--arms", "views", "--epochs", "1", "--batch-size", "8", "--no-progress"]
    assert kviews_cli.main(args) == 0
    err = capsys.readouterr().err
    assert "3 cell(s) of multiview: 0 reused from existing run records, 3 run now" in err
    assert kviews_cli.main(args) == 0
    err = capsys.readouterr().err
    assert "3 cell(s) of multiview: 3 reused from existing run records, 0 run now" in err
    assert f"board written to {tmp_path / 'board' / 'multiview-kviews.md'}" in err


# ---------------------------------------------------------------------------------------------
# write once: records, frozen selections and cell locks (fusebench.io.create_once)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("links", [True, False], ids=["hard links", "no hard links"])
def test_create_once_writes_whole_and_never_over_a_file_that_is_there(tmp_path: Path, monkeypatch, links) -> None:
    from fusebench import io

    if not links:  # a file system without hard links (some network mounts): created exclusively instead
        def no_link(src, dst, *a, **k):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(io.os, "link", no_link)
    path = tmp_path / "run.json"
    assert io.create_once(path, b"first\n") is True
    assert path.read_bytes() == b"first\n"
    assert io.create_once(path, b"second\n") is False  # there already: kept as it is
    assert path.read_bytes() == b"first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary file left beside it
    mode = path.stat().st_mode & 0o777
    assert mode == io.new_file_mode()


def test_create_json_once_writes_the_record_layout_once(tmp_path: Path) -> None:
    """run.json and a frozen selection file are written in atomic_write_json's layout (sorted keys, indented, a final
    newline: committed records diff cleanly), and a second writer is told the file was there."""
    from fusebench import io
    from fusebench.runtime import utils

    data = {"b": 1, "a": {"d": [1, 2], "c": None}}
    io.atomic_write_json(tmp_path / "layout.json", data)
    assert utils.create_json_once(tmp_path / "run.json", data) is True
    assert (tmp_path / "run.json").read_bytes() == (tmp_path / "layout.json").read_bytes()
    assert (tmp_path / "run.json").read_text().endswith("}\n") and '"a": {' in (tmp_path / "run.json").read_text()
    assert utils.create_json_once(tmp_path / "run.json", {"x": 1}) is False
    assert (tmp_path / "run.json").read_bytes() == (tmp_path / "layout.json").read_bytes()


def test_atomic_write_that_cannot_replace_leaves_no_temporary_file(tmp_path: Path) -> None:
    from fusebench import io

    (tmp_path / "board.md").mkdir()  # a folder where the file should go: os.replace fails
    with pytest.raises(OSError):
        io.atomic_write_text(tmp_path / "board.md", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["board.md"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names the synced descriptors through /proc")
@pytest.mark.parametrize("writer", ["atomic_write", "by_name", "together", "create_once"])
def test_atomic_writes_sync_the_data_before_the_file_appears(tmp_path: Path, monkeypatch, writer: str) -> None:
    """A power loss after the rename must not leave an empty last.pt / run.json: the temporary file's data is
    fsync'ed before it is renamed (or linked) into place, and the folder after the rename. The calls are logged in
    order, each fsync with what its descriptor names (read from /proc/self/fd)."""
    import os

    from fusebench import io

    log: list[tuple[str, str]] = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", lambda a, b: (log.append(("place", str(b))), real_replace(a, b))[1])
    monkeypatch.setattr(os, "link", lambda a, b: (log.append(("place", str(b))), real_link(a, b))[1])
    target = tmp_path / "run.json"
    if writer == "atomic_write":
        io.atomic_write_text(target, "x")
    elif writer == "by_name":
        io.atomic_write(target, lambda name: Path(name).write_text("x"), by_name=True)
    elif writer == "together":
        io.atomic_write_together([(target, lambda f: f.write(b"x"))])
    else:
        assert io.create_once(target, b"x")
    assert target.read_text() == "x"
    placed = log.index(("place", str(target)))
    synced = [i for i, (what, name) in enumerate(log) if what == "fsync" and Path(name).name.startswith(".run.json.")]
    assert synced and synced[0] < placed, log  # the temporary file's data, before it becomes run.json
    if writer != "create_once":  # (its link needs no folder sync to be whole: the linked data is)
        assert ("fsync", str(tmp_path)) in log[placed:], log


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_files_written_together_appear_together_or_not_at_all(tmp_path: Path, failure: type) -> None:
    """atomic_write_together: the second file failing after the first one's temporary file is whole leaves both
    paths as they were (one old, one absent) and no temporary file; without a failure both are replaced."""
    from fusebench import io

    (tmp_path / "a.png").write_bytes(b"old a")

    def fails(f):
        f.write(b"half of b")
        raise failure("interrupted")

    with pytest.raises(failure):
        io.atomic_write_together([(tmp_path / "a.png", lambda f: f.write(b"new a")), (tmp_path / "b.md", fails)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]
    assert (tmp_path / "a.png").read_bytes() == b"old a"
    got = io.atomic_write_together([(tmp_path / "a.png", lambda f: f.write(b"new a")),
                                    (tmp_path / "b.md", lambda f: f.write(b"new b"))])
    assert got == [tmp_path / "a.png", tmp_path / "b.md"]
    assert [(p.name, p.read_bytes()) for p in sorted(tmp_path.iterdir())] == [("a.png", b"new a"), ("b.md", b"new b")]
    # a rename that fails (a folder in the way of the second) puts the first back as it was; nothing is left
    (tmp_path / "b.md").unlink()
    (tmp_path / "b.md").mkdir()
    with pytest.raises(OSError):
        io.atomic_write_together([(tmp_path / "a.png", lambda f: f.write(b"newer a")),
                                  (tmp_path / "b.md", lambda f: f.write(b"newer b"))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.md"] and (tmp_path / "b.md").is_dir()
    assert (tmp_path / "a.png").read_bytes() == b"new a"
    (tmp_path / "b.md").rmdir()
    (tmp_path / "c").mkdir()
    with pytest.raises(OSError):  # a first file that did not exist is removed again
        io.atomic_write_together([(tmp_path / "new.png", lambda f: f.write(b"x")), (tmp_path / "c", lambda f: None)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "c"]


def test_a_killed_create_once_leaves_a_temporary_file_the_cell_start_removes(tmp_path: Path, monkeypatch) -> None:
    """The temporary file of create_once is named as atomic_write names its own (``.<name>.<random>.tmp``), so
    remove_stale_temps, which a cell's start calls under its lock, finds it (it was ``..run.json.<pid>...``)."""
    from fusebench import io

    def killed(src, dst, *a, **k):  # the process dies between writing the temporary file and linking it
        raise SystemExit("killed")

    monkeypatch.setattr(io.os, "link", killed)
    monkeypatch.setattr(io.Path, "unlink", lambda self, missing_ok=False: None)  # a killed process removes nothing
    with pytest.raises(SystemExit):
        io.create_once(tmp_path / "run.json", b"{}\n")
    monkeypatch.undo()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".run.json.") and left[0].endswith(".tmp"), left
    io.remove_stale_temps(tmp_path / "run.json")
    assert not list(tmp_path.iterdir())


def test_a_selection_file_another_sweep_is_still_writing_is_waited_for(tmp_path: Path, monkeypatch) -> None:
    """Where there are no hard links, create_once shows the file before it is whole: a sweep reading a young file
    that does not parse yet waits for it; an old one that does not parse is an error at once."""
    import threading

    from fusebench.engine.cell import ConfigMismatchError
    from fusebench.sweep import selection

    path = tmp_path / "infonce_pwe.json"
    path.write_bytes(b"")  # created exclusively, not yet written
    whole = threading.Event()

    def writer():
        whole.wait()
        path.write_text(json.dumps({"choice": {"tau": 0.5}}))

    other = threading.Thread(target=writer, daemon=True)
    other.start()

    def sleep(s):  # the reader waits: the other sweep finishes its write meanwhile
        whole.set()
        other.join()

    monkeypatch.setattr(selection.time, "sleep", sleep)
    outcome, _ = selection._read(path)
    assert outcome == {"choice": {"tau": 0.5}}
    path.write_bytes(b"{")
    old = path.stat().st_mtime - 2 * selection.BEING_WRITTEN_S
    os.utime(path, (old, old))

    def no_wait(s):
        raise AssertionError("waited for a file written long ago")

    monkeypatch.setattr(selection.time, "sleep", no_wait)
    with pytest.raises(ConfigMismatchError, match="is not valid JSON"):  # at once
        selection._read(path)


def test_atomic_writes_sync_a_file_where_fsync_needs_write_access_or_is_unsupported(tmp_path: Path, monkeypatch) -> None:
    """Windows' fsync (_commit) refuses a read-only descriptor (EBADF): the temporary file was opened read-only to be
    synced, so every atomic write failed there; a file system without fsync (EINVAL) failed every write too."""
    import errno
    import fcntl
    import os
    import sys

    from fusebench import io as fio

    real_fsync = os.fsync

    def commit(fd: int) -> None:  # as Windows' _commit: the descriptor must allow writing
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor")
        real_fsync(fd)

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(os, "fsync", commit)
    fio.atomic_write(tmp_path / "a.bin", lambda f: f.write(b"x"))
    assert (tmp_path / "a.bin").read_bytes() == b"x"
    monkeypatch.undo()

    def unsupported(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", unsupported)
    fio.atomic_write(tmp_path / "b.bin", lambda f: f.write(b"y"))
    assert (tmp_path / "b.bin").read_bytes() == b"y"
