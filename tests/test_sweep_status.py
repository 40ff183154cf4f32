"""Sweeps in local worker processes (``--workers``) and ``fusebench status``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fusebench
from fusebench.sweep import status
from fusebench.spec.config import ConfigError

TINY = {
    "dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
    "pretrain.epochs": 1,
    "pretrain.batch_size": 32,
    "downstream.epochs": 1,
}
#: TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
TINY_REF = {k: v for k, v in TINY.items() if not k.startswith("pretrain.")}


def test_workers_give_the_records_of_a_sequential_sweep(tmp_path: Path) -> None:
    kw = dict(objective=["none", "infonce_pwe"], seeds=[0, 1], overrides=TINY, progress=False)
    seq = fusebench.run("quickstart", out=tmp_path / "seq", **kw)
    par = fusebench.run("quickstart", out=tmp_path / "par", workers=2, **kw)
    assert [(r["objective"], r["seed"]) for r in par] == [(r["objective"], r["seed"]) for r in seq]
    for a, b in zip(seq, par):
        assert a["metrics"] == b["metrics"] and a["curves"] == b["curves"]
    assert sorted(p.relative_to(tmp_path / "par") for p in (tmp_path / "par").rglob("run.json")) == \
        sorted(p.relative_to(tmp_path / "seq") for p in (tmp_path / "seq").rglob("run.json"))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_worker_counts_are_refused(bad, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--workers: expected a positive integer \(cells run side by side\)"):
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path, workers=bad, progress=False)


def _record(obj: str, seed: int) -> str:
    """A run record the leaderboard reads (schema 1: the fewest fields), of the cell quickstart/obj/seed<seed>."""
    return json.dumps({
        "schema_version": 1, "suite_version": "0.1.0", "benchmark": "quickstart", "objective": obj, "seed": seed,
        "metrics": {"acc": 0.5}, "metric_directions": {"acc": "higher"},
        "config": {"metrics": ["acc"], "selection_metric": "acc", "seeds": [0], "dataset": {"id": "synthetic"}},
        "dataset": {"id": "synthetic", "synthetic": True, "manifest_hash": "synthetic"},
        "pretrain_time_s": 1.0, "peak_memory_mb": 10.0})


def _cell(root: Path, obj: str, seed: int) -> Path:
    d = root / "quickstart" / obj / f"seed{seed}"
    d.mkdir(parents=True)
    return d


def _not_resumable(last) -> str:
    """What status says of a last.pt holding the byte b"x" (not a checkpoint: the run refuses it)."""
    return (f"not resumable: cannot resume: checkpoint {last} is unreadable (torch.load with weights_only=True refuses "
            "it (Unsupported operand 120): not a file of tensors and plain containers (fusebench never unpickles "
            "code)); the file was left as it is — delete it to start over")


def test_status_names_the_state_of_every_cell(tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    (_cell(out, "m3g", 0) / "run.json").write_text(_record("m3g", 0))
    (_cell(out, "m3g", 1) / ".lock").write_text(str(os.getpid()))  # a live process holds it
    (_cell(out, "m3g", 2) / "failed.json").write_text(json.dumps({"error": "RunError: loss is nan\nmore"}))
    (_cell(out, "none", 0) / "last.pt").write_bytes(b"x")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    interrupted = _cell(out, "none", 1)
    (interrupted / ".lock").write_text(dead.stdout.strip())  # a killed run's stale lock
    (interrupted / "last.pt").write_bytes(b"x")
    _cell(out, "none", 2)  # an empty folder
    (out / ".selection" / "quickstart").mkdir(parents=True)  # hyper-parameter trials: not cells
    found = status.collect(out)
    assert found == {"quickstart": {
        ("m3g", 0): ("done", ""), ("m3g", 1): ("running", f"pid {os.getpid()}"),
        ("m3g", 2): ("failed", "RunError: loss is nan"),
        ("none", 0): ("interrupted", _not_resumable(out / "quickstart" / "none" / "seed0" / "last.pt")),
        ("none", 1): ("interrupted", _not_resumable(interrupted / "last.pt")), ("none", 2): ("pending", "")}}
    # with --benchmark, the spec's default sweep (5 objectives x 3 seeds) fills in the pending cells
    full = status.collect(out, ["quickstart"])["quickstart"]
    assert len(full) == 6 * 3 + 0 and full[("tuple_infonce", 2)] == ("pending", "")
    from fusebench.cli import main

    assert main(["status", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "quickstart: 1 done, 1 running, 1 failed, 2 interrupted, 1 pending (6 cells)" in text
    assert "failed: m3g/seed2: RunError: loss is nan" in text
    assert main(["status", "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["quickstart"]["m3g"]["1"]["state"] == "running"
    assert main(["status", "--out", str(tmp_path / "absent")]) == 2


def test_status_shows_a_failed_cells_error_and_folder_names_escaped(tmp_path: Path, capsys) -> None:
    """A failed cell's error (its failed.json) and the folder names are text of the runs folder: a control character
    or a bidirectional-text control reached the terminal raw (an escape sequence that clears the screen, U+202E that
    reverses the rest of the line). Shown as Python's quoted repr instead; plain text as it is."""
    out = tmp_path / "runs"
    (_cell(out, "m3g", 0) / "failed.json").write_text(json.dumps({"error": "RunError: \x1b[2J\u202egnp.exe\nmore"}))
    (_cell(out, "odd\x1b[31m", 0) / "failed.json").write_text(json.dumps({"error": "RunError: loss is nan"}))
    from fusebench.cli import main

    assert main(["status", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\u202e" not in text
    assert "  failed: m3g/seed0: 'RunError: \\x1b[2J\\u202egnp.exe'\n" in text  # the first line, escaped
    assert "  failed: 'odd\\x1b[31m'/seed0: RunError: loss is nan" in text
    row = next(line for line in text.splitlines() if line.startswith("  'odd"))
    assert row.split() == ["'odd\\x1b[31m'", "0", "0", "1", "0", "0"]


def test_status_says_how_far_the_selection_is(tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    (_cell(out, "none", 0) / "run.json").write_text("{}")
    assert "selection:" not in status.render(status.collect(out), out)  # no grid run: no line
    for trial in ("trial0-tau0.1/seed1000", "trial0-tau0.1/seed1001", "trial1-tau0.5/seed1000"):
        cell = out / ".selection" / "quickstart" / "m3g" / trial / "quickstart" / "m3g" / "seed1000"
        cell.mkdir(parents=True)
        (cell / "run.json").write_text("{}")
    (out / ".selection" / "quickstart" / "m3g" / "trial1-tau0.5" / "seed1001").mkdir(parents=True)  # not run yet
    frozen = out / "quickstart" / "_selection"
    frozen.mkdir()
    (frozen / "infonce_pwe.json").write_text("{}")
    from fusebench.cli import main

    assert main(["status", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert (f"  selection: 3 trial record(s) under {out / '.selection' / 'quickstart'}; 1 objective(s) with a frozen "
            "choice (infonce_pwe)") in text.splitlines()
    assert {o for o, _ in status.collect(out)["quickstart"]} == {"none"}  # trials and frozen choices are not cells


def test_status_of_a_real_sweep(tmp_path: Path) -> None:
    fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=TINY_REF, progress=False)
    assert status.collect(tmp_path) == {"quickstart": {("none", 0): ("done", "")}}


def test_a_retried_cell_that_is_interrupted_is_resumable_not_the_old_failure(tmp_path: Path) -> None:
    """A cell fails (a non-finite loss), is run again with another setting and interrupted after its first
    checkpoint: `fusebench status` says interrupted / resumable, not the first run's error (failed.json was checked
    before last.pt and outlived the retry)."""
    from fusebench import benchmarks
    from fusebench.cells.execute import run_cell, sweep_cell
    from fusebench.spec.request import CellRequest, RunOptions

    bad = benchmarks.load("quickstart", overrides={**TINY, "pretrain.lr": 1e30})
    failed = sweep_cell(CellRequest(bad, "m3g", 1, tmp_path), RunOptions(progress=False), {})
    assert failed["status"] == "failed"
    assert status.collect(tmp_path)["quickstart"][("m3g", 1)][0] == "failed"
    retry = benchmarks.load("quickstart", overrides={**TINY, "pretrain.epochs": 3, "checkpoint_every": 1})
    with pytest.raises(KeyboardInterrupt):  # the step budget stops it as Ctrl-C would, after a checkpoint
        run_cell(CellRequest(retry, "m3g", 1, tmp_path), RunOptions(progress=False, max_steps=6))
    state, detail = status.collect(tmp_path)["quickstart"][("m3g", 1)]
    assert (state, detail) == ("interrupted", "resumable from last.pt")
    cell = tmp_path / "quickstart" / "m3g" / "seed1"
    assert not (cell / "failed.json").exists()
    # what a SIGKILL in the middle of a write leaves (io.atomic_write's temporary files): removed when the cell
    # is taken up again, nothing else touched
    leftovers = [cell / ".last.pt.k1l2.tmp", cell / ".best.pt.x9.tmp"]
    for p in leftovers:
        p.write_bytes(b"half")
    (cell / "notes.txt").write_text("mine")
    run_cell(CellRequest(retry, "m3g", 1, tmp_path), RunOptions(progress=False, resume=True))
    assert not any(p.exists() for p in leftovers) and (cell / "notes.txt").read_text() == "mine"
    assert (cell / "run.json").exists()


def test_status_of_a_benchmark_s_own_folder_says_which_folder_to_give(tmp_path: Path, capsys) -> None:
    """`--out runs/quickstart` (one level too deep) used to print "0 cells" for every objective with exit 0."""
    fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=TINY_REF, progress=False)
    assert status.main(["--out", str(tmp_path / "quickstart")]) == 2
    err = capsys.readouterr().err
    assert (f"--out {tmp_path / 'quickstart'} is the folder of one benchmark (quickstart: its none/ holds seed "
            f"folders); give the folder above it, --out {tmp_path}") in err
    assert status.main(["--out", str(tmp_path)]) == 0


def test_a_record_file_a_rerun_would_refuse_is_unreadable_not_done(tmp_path: Path) -> None:
    from fusebench.sweep import status as S

    cells = {name: tmp_path / "quickstart" / name / "seed0" for name in ("none", "raw", "m3g", "mv_dhel")}
    for cell in cells.values():
        cell.mkdir(parents=True)
    (cells["none"] / "run.json").write_text("notjson")
    (cells["raw"] / "run.json").write_text('{"x": 1}')
    (cells["m3g"] / "run.json").write_text('{"benchmark": "quickstart", "objective": "mv_dhel", "seed": 0}')  # copied
    (cells["mv_dhel"] / "run.json").write_text(_record("mv_dhel", 0))
    found = S.collect(tmp_path)["quickstart"]
    assert found[("none", 0)][0] == "unreadable"
    assert found[("none", 0)][1].startswith(f"{cells['none'] / 'run.json'}: field '(file)': expected a readable JSON "
                                            "file (Expecting value")
    assert found[("none", 0)][1].endswith("; a rerun refuses it: move it away")
    assert found[("raw", 0)] == ("unreadable", f"{cells['raw'] / 'run.json'} is not the run record of its cell "
                                               "({'benchmark': None, 'objective': None, 'seed': None}, expected "
                                               "{'benchmark': 'quickstart', 'objective': 'raw', 'seed': 0}); a rerun "
                                               "refuses it: move it away")
    assert found[("m3g", 0)][0] == "unreadable" and "'objective': 'mv_dhel'" in found[("m3g", 0)][1]
    assert found[("mv_dhel", 0)] == ("done", "")
    # the record of its cell, but one the leaderboard's validator refuses: unreadable, with the validator's message
    from fusebench.records import RecordError, load_record

    (cells["mv_dhel"] / "run.json").write_text(_record("mv_dhel", 0).replace('"acc": 0.5', '"acc": 7.0'))
    with pytest.raises(RecordError) as board:
        load_record(cells["mv_dhel"] / "run.json")
    assert str(board.value).startswith(f"{cells['mv_dhel'] / 'run.json'}: field 'metrics.acc': expected ")
    assert S.collect(tmp_path)["quickstart"][("mv_dhel", 0)] == (
        "unreadable", f"{board.value}; the leaderboard refuses this record: move the cell folder away to recompute it")


def test_the_cluster_doc_example_is_what_status_prints() -> None:
    """docs/cluster.md shows `fusebench status` on a SLURM sweep: its lines (the comments after them aside) are what
    :func:`status.render` prints for the cells its per-cell lines name; the header and the table count them (the
    example's header once said 0 interrupted and 0 pending over 2 cells above two interrupted and one pending)."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text()
    block = re.search(r"^```\n(quickstart: .*?)^```", doc, re.M | re.S).group(1)
    shown = [re.sub(r"\s+# .*$", "", ln) for ln in block.splitlines()]
    cells = {}
    for ln in shown:
        m = re.fullmatch(r"  (\w+): (\w+)/seed(\d+): (.*)", ln)
        if m:
            cells[(m.group(2), int(m.group(3)))] = (m.group(1), m.group(4))
    assert len(cells) == 5
    assert status.render({"quickstart": cells}).splitlines() == shown
