"""``fusebench leaderboard`` skips a regeneration that cannot change a byte (issue #34,
:mod:`fusebench.leaderboard.fingerprint`): with the manifest matching, nothing is rendered and every file
is reported unchanged, exactly as a full regeneration would report it; any change of an input (a record,
a file in ``--out``, an option, a spec, the code) or ``--force`` regenerates; a failed regeneration leaves
no manifest. No timing is asserted: ``fusebench bench leaderboard`` measures the speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fusebench.leaderboard.writer as writer
from fusebench.leaderboard import fingerprint
from fusebench.leaderboard.cli import FORMATS, main
from fusebench.leaderboard.export import FORMATS as EXPORT_FORMATS

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--format", "md", "csv", "json", "html", "--no-plots"]


def _record(obj: str, seed: int, acc: float) -> dict:
    return {"schema_version": 1, "suite_version": "0.1.0", "benchmark": "toy", "objective": obj, "seed": seed,
            "metrics": {"acc": acc}, "metric_directions": {"acc": "higher"},
            "config": {"metrics": ["acc"], "selection_metric": "acc", "description": "toy board", "seeds": [0, 1],
                       "dataset": {"id": "toy"}},
            "dataset": {"id": "toy", "synthetic": True, "manifest_hash": "synthetic"},
            "selection": {"rule": "best validation acc"}, "pretrain_time_s": 1.0, "peak_memory_mb": 10.0}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for obj, accs in (("alpha", [0.6, 0.7]), ("beta", [0.5, 0.55])):
        for seed, acc in enumerate(accs):
            d = root / "toy" / obj / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps(_record(obj, seed, acc)))
    return root


class Rendered(Exception):
    pass


def _no_render(*a, **k):
    raise Rendered("the full regeneration ran")


def _run(runs: Path, out: Path, capsys, *extra: str) -> list[str]:
    assert main(["--runs", str(runs), "--out", str(out), *ARGS, *extra]) == 0
    return capsys.readouterr().out.splitlines()


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_the_cli_knows_every_format_the_writer_writes() -> None:
    assert tuple(FORMATS) == tuple(EXPORT_FORMATS)


def test_unchanged_inputs_render_nothing_and_report_what_a_full_run_reports(runs, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    out = tmp_path / "boards"
    first = _run(runs, out, capsys)
    assert (out / fingerprint.MANIFEST).is_file()
    full = _run(runs, out, capsys, "--force")  # the full regeneration on unchanged inputs: every file unchanged
    assert full[-1].startswith("0 file(s) written, ") and first[-1].split(", ")[0] != "0 file(s) written"
    before = _files(out)
    monkeypatch.setattr(writer, "write_leaderboards", _no_render)  # the skip must not reach the writer
    fast = _run(runs, out, capsys)
    assert fast[:-1] == full[:-1]  # the same "unchanged <path>" lines, in the same order
    assert fast[-1].startswith(full[-1].removesuffix(str(out)))
    assert "nothing re-read" in fast[-1]
    assert _files(out) == before
    with pytest.raises(Rendered):  # --force always regenerates
        _run(runs, out, capsys, "--force")


@pytest.mark.parametrize("change", ["record", "new_record", "out_edited", "out_deleted", "out_added", "option",
                                    "runs_moved"])
def test_any_changed_input_regenerates(runs, tmp_path, capsys, monkeypatch, change) -> None:
    out = tmp_path / "boards"
    _run(runs, out, capsys)
    args: list[str] = []
    if change == "record":  # same size, other content
        p = runs / "toy" / "alpha" / "seed0" / "run.json"
        text = p.read_text()
        p.write_text(text.replace('"acc": 0.6', '"acc": 0.9'))
        assert len(p.read_text()) == len(text)
    elif change == "new_record":
        d = runs / "toy" / "gamma" / "seed0"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(_record("gamma", 0, 0.3)))
    elif change == "out_edited":
        (out / "toy.md").write_text((out / "toy.md").read_text() + "hand edit\n")
    elif change == "out_deleted":
        (out / "toy.csv").unlink()
    elif change == "out_added":
        (out / "reported.yaml").write_text("[]\n")
    elif change == "option":
        args = ["--split"]
    elif change == "runs_moved":  # the pages link the records by relative path
        moved = tmp_path / "elsewhere" / "runs"
        moved.parent.mkdir()
        runs.rename(moved)
        runs = moved
    monkeypatch.setattr(writer, "write_leaderboards", _no_render)
    with pytest.raises(Rendered):
        _run(runs, out, capsys, *args)
    assert not (out / fingerprint.MANIFEST).exists()  # forgotten before the regeneration wrote anything


def test_a_failed_regeneration_leaves_no_manifest_and_the_next_one_runs(runs, tmp_path, capsys) -> None:
    out = tmp_path / "boards"
    _run(runs, out, capsys)
    bad = runs / "toy" / "alpha" / "seed1" / "run.json"
    good = bad.read_text()
    bad.write_text("{not json")
    assert main(["--runs", str(runs), "--out", str(out), *ARGS]) == 2
    assert "run.json" in capsys.readouterr().err
    assert not (out / fingerprint.MANIFEST).exists()
    bad.write_text(good)
    lines = _run(runs, out, capsys)  # regenerated in full (no manifest), which writes one again
    assert "nothing re-read" not in lines[-1] and (out / fingerprint.MANIFEST).is_file()


def test_a_manifest_that_is_not_one_is_ignored(runs, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "boards"
    _run(runs, out, capsys)
    manifest = json.loads((out / fingerprint.MANIFEST).read_text())
    monkeypatch.setattr(writer, "write_leaderboards", _no_render)
    for broken in ("[]", "{", json.dumps({**manifest, "format": 0}), json.dumps({**manifest, "reported": 3}),
                   json.dumps({**manifest, "reported": ["../../etc/passwd"]})):
        (out / fingerprint.MANIFEST).write_text(broken)
        with pytest.raises(Rendered):
            _run(runs, out, capsys)


def test_the_code_and_the_specs_are_inputs(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.yaml").write_text("k: 1\n")
    (pkg / "notes.bin").write_bytes(b"\0")
    monkeypatch.setattr(fingerprint, "_package_dirs", lambda: [pkg])
    base = fingerprint.code_digest()
    (pkg / "notes.bin").write_bytes(b"\1")  # not a code or data file: no change
    assert fingerprint.code_digest() == base
    for f, text in ((pkg / "a.py", "x = 2\n"), (pkg / "sub" / "b.yaml", "k: 2\n")):
        old = f.read_text()
        f.write_text(text)
        assert fingerprint.code_digest() != base, f
        f.write_text(old)
        assert fingerprint.code_digest() == base
    # a spec in a FUSEBENCH_BENCHMARKS folder: its content and the YAML beside it are inputs
    specs = tmp_path / "specs"
    specs.mkdir()
    src = next((ROOT / "benchmarks").glob("quickstart.yaml")).read_text()
    (specs / "my-bench.yaml").write_text(src.replace("name: quickstart", "name: my-bench"))
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(specs))
    with_spec = fingerprint.specs_digest()
    (specs / "my-bench.yaml").write_text((specs / "my-bench.yaml").read_text() + "# edited\n")
    edited = fingerprint.specs_digest()
    (specs / "base.yml").write_text("a: 1\n")
    assert len({with_spec, edited, fingerprint.specs_digest()}) == 3


def test_the_committed_boards_take_the_fast_path_after_one_regeneration(tmp_path) -> None:
    """The committed boards, copied with their runs linked in as ``runs`` (so the pages' links hold): one full
    regeneration changes nothing and writes the manifest; the next one, a fresh process, imports neither
    the renderers nor numpy and reports every file unchanged."""
    boards = ROOT / "leaderboards"
    out = tmp_path / "boards"
    out.mkdir()
    for p in boards.iterdir():
        if p.is_file() and p.name != fingerprint.MANIFEST:
            (out / p.name).write_bytes(p.read_bytes())
    (out / "runs").symlink_to(boards / "runs", target_is_directory=True)
    cmd = [sys.executable, "-c", "import sys, json\nfrom fusebench.leaderboard import main\nrc = main(sys.argv[1:])\n"
           "print(json.dumps([rc, sorted(m for m in ('numpy', 'scipy', 'torch', 'fusebench.leaderboard.writer') "
           "if m in sys.modules)]))", "--runs", str(out / "runs"), "--out", str(out),
           "--format", "md", "csv", "json", "html"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    assert " 0 file(s) written" not in first.stdout and first.stdout.splitlines()[-2].startswith("0 file(s) written")
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.splitlines()[-1]) == [0, []]
    assert "nothing re-read" in second.stdout.splitlines()[-2]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != fingerprint.MANIFEST} == \
        {p.name: p.read_bytes() for p in boards.iterdir() if p.is_file() and p.name != fingerprint.MANIFEST}


def test_a_record_written_during_a_regeneration_is_a_changed_input_next_time(runs, tmp_path, capsys,
                                                                             monkeypatch) -> None:
    """The manifest records the inputs as they were before the regeneration read them: a record a sweep
    writes meanwhile (not on the boards) makes the next call regenerate instead of skipping."""
    out = tmp_path / "boards"
    real = writer.write_leaderboards

    def with_a_late_record(*a, **k):
        written = real(*a, **k)
        d = runs / "toy" / "gamma" / "seed0"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(_record("gamma", 0, 0.3)))
        return written

    monkeypatch.setattr(writer, "write_leaderboards", with_a_late_record)
    _run(runs, out, capsys)
    assert "gamma" not in (out / "toy.md").read_text()
    monkeypatch.setattr(writer, "write_leaderboards", _no_render)
    with pytest.raises(Rendered):
        _run(runs, out, capsys)
