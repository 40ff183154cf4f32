"""The shared GPU check (``../shared/gpu-check``) prepared for this checkout by ``scripts/gpucheck/prepare.sh``:
the patch applies, every ``fusebench`` import of its scripts resolves here (checked by this test on its own, from
the scripts' syntax trees), nothing is left behind when the source is wrong, and its record comparison
(``gpucheck_compare.py``, step ``quickstart_compare``) reads the records this checkout writes: a fresh quickstart
cell against its committed record is ``ok``, the same record with a metric moved by 1e-3 ``DIFFERS``.

The device check itself runs on a lent GPU machine (docs/gpu.md); these tests keep its scripts runnable in between."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FUSEBENCH_GPUCHECK", ROOT.parent / "shared" / "gpu-check"))
PREPARE = ROOT / "scripts" / "gpucheck" / "prepare.sh"

pytestmark = [
    pytest.mark.skipif(not (SHARED / "device_check.sh").exists(),
                       reason=f"the shared GPU check {SHARED} is absent (CI provides ../shared beside the checkout)"),
    pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) is not installed (scripts/setup.sh installs it)"),
]


def _prepare(dest: Path, src: Path = SHARED) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUCHECK_DEST": str(dest), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(PREPARE), str(src)], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("gpucheck") / "check"
    done = _prepare(dest)
    assert done.returncode == 0, done.stderr
    return dest


def _fusebench_imports(folder: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, module, name) of every ``from fusebench... import name`` in the folder's scripts."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fusebench":
                found += [(path.name, node.lineno, node.module, alias.name) for alias in node.names]
    return found


def test_every_fusebench_import_of_the_prepared_check_resolves(prepared: Path) -> None:
    imports = _fusebench_imports(prepared)
    assert {m for _, _, m, _ in imports} >= {"fusebench.spec", "fusebench.components.model", "fusebench.runtime"}
    for name, line, module, attr in imports:
        mod = importlib.import_module(module)
        assert hasattr(mod, attr) or importlib.util.find_spec(f"{module}.{attr}"), f"{name}:{line}: {module}.{attr}"
    # the step counter asks the loop for no loss value (a tracker with on_step makes the loop read every step)
    assert "def on_step_end(" in (prepared / "gpucheck_syncs.py").read_text()
    assert "def on_step(" not in (prepared / "gpucheck_syncs.py").read_text()
    # the unprepared scripts import the layout before issue #35: the patch is what makes them run here
    assert any(m.startswith("fusebench.training") for _, _, m, _ in _fusebench_imports(SHARED))


def test_a_source_that_is_not_the_check_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "check"
    done = _prepare(dest, src=tmp_path / "nowhere")
    assert done.returncode == 2 and "device_check.sh not found" in done.stderr
    assert not dest.exists()
    changed = tmp_path / "changed"  # the shared check changed where the patch edits it: refused, nothing moved in
    shutil.copytree(SHARED, changed)
    for p in changed.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (changed / "gpucheck_m3g.py").write_text("# rewritten\n")
    done = _prepare(dest, src=changed)
    assert done.returncode == 1 and "does not apply" in done.stderr
    assert not dest.exists()


@pytest.mark.slow  # one quickstart cell (~5 s on one CPU thread)
def test_the_record_comparison_reads_this_checkouts_records(prepared: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "qs"
    subprocess.run([sys.executable, "-m", "fusebench", "run", "quickstart", "--device", "cpu", "--precision", "32",
                    "--objective", "m3g", "--seeds", "0", "--out", str(out), "--no-progress"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    committed = ROOT / "leaderboards" / "runs" / "quickstart"

    def compare(new: Path) -> list[dict]:
        report = tmp_path / "compare.json"
        subprocess.run([sys.executable, str(prepared / "gpucheck_compare.py"), str(new), str(committed), "--json",
                        str(report)], check=True, capture_output=True)
        return {r["cell"]: r for r in json.loads(report.read_text())}

    fresh = json.loads((out / "quickstart" / "m3g" / "seed0" / "run.json").read_text())
    assert isinstance(fresh["metrics"]["acc"], dict)  # the schema-4 entry the unpatched script could not subtract
    ref = json.loads((committed / "m3g" / "seed0" / "run.json").read_text())["metrics"]  # schema 2: plain numbers

    def largest_gap(new_metrics: dict) -> float:  # worked out here, from the two files
        return max(abs(new_metrics[m]["value"] - v) for m, v in ref.items())

    rows = compare(out / "quickstart")
    # the same cell on this CPU: within the parity tolerance (bit for bit on the machine that made the record)
    assert largest_gap(fresh["metrics"]) <= 1e-4
    assert rows["m3g/seed0"]["status"] == "ok"
    assert fresh["config"]["precision"] == "32" and "precision" not in fresh  # schema 4: the precision is config's
    assert rows["m3g/seed0"]["precision"] == "32"  # what the device run computed at, read from where the record keeps it
    assert rows["m3g/seed0"]["max_metric_abs_diff"] == pytest.approx(largest_gap(fresh["metrics"]), rel=0, abs=1e-15)
    assert rows["m3g/seed1"]["status"] == "missing (not run)"

    moved = tmp_path / "moved" / "m3g" / "seed0"
    moved.mkdir(parents=True)
    fresh["metrics"]["acc"]["value"] += 1e-3
    (moved / "run.json").write_text(json.dumps(fresh))
    row = compare(tmp_path / "moved")["m3g/seed0"]
    assert row["status"] == "DIFFERS"
    assert largest_gap(fresh["metrics"]) > 1e-4
    assert row["max_metric_abs_diff"] == pytest.approx(largest_gap(fresh["metrics"]), rel=0, abs=1e-15)
