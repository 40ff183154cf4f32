"""The built wheel works outside the checkout: ``pip wheel .``, installed into a fresh virtual
environment, lists the shipped benchmarks and runs the quickstart (package data included)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def test_wheel_installs_and_runs_from_a_clean_environment(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # built from a copy of the source files (tracked, or new and not ignored), as from a fresh clone: a checkout's
    # own build/ folder (setuptools reuses build/lib) may hold modules that no longer exist, which would ship
    src = tmp_path / "src"
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard",
                             "pyproject.toml", "README.md", "fusebench", "objectives", "encoders", "datasets",
                             "benchmarks"], capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():  # (a tracked file deleted in the working tree is not copied)
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    # no build isolation: the build backend (setuptools) comes from this environment, nothing is downloaded
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
          str(src)], tmp_path)
    (wheel,) = wheels.glob("fusebench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"fusebench/benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.yaml")}
    assert shipped and shipped <= names  # every spec is package data
    for sub in ("nyuv2", "sunrgbd", "sleep", "mmsa", "multiview_mat"):
        assert f"fusebench/datasets/{sub}/__init__.py" in names
    assert "fusebench/objectives/m3g.py" in names and "fusebench/encoders/mlp.py" in names
    assert "fusebench/cli/listing_builtins.json" in names  # `fusebench list`'s text of the built-ins
    assert not [n for n in names if n.startswith("fusebench/perf/")]  # the developer benches stay in the checkout
    # a new environment that sees the installed dependencies (torch, ...) but not this checkout's editable install
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    py, exe = venv / "bin" / "python", venv / "bin" / "fusebench"
    _run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], tmp_path)
    work = tmp_path / "elsewhere"  # not the checkout: nothing may be read from it
    work.mkdir()
    where = _run([str(py), "-c", "import fusebench; print(fusebench.__file__)"], work).stdout.strip()
    assert where.startswith(str(venv)), where
    listed = _run([str(exe), "list", "benchmarks"], work).stdout
    assert {line.split(":")[0] for line in listed.splitlines() if not line.startswith(" ")} >= {
        p.stem for p in (ROOT / "benchmarks").glob("*.yaml")}
    out = _run([str(exe), "run", "quickstart", "--objective", "none", "--seeds", "0", "--out", "runs",
                "--set", "downstream.epochs=1"], work).stdout
    assert "quickstart none seed0: acc=" in out
    assert (work / "runs" / "quickstart" / "none" / "seed0" / "run.json").is_file()
