"""docs/adding-a-modality.md cannot rot: its code blocks run, in document order, in an empty project folder.

The guide builds a two-modality adapter in a third-party package, registers it and its benchmark spec
through entry points, runs the benchmark and regenerates a leaderboard. Here, in a fresh interpreter
(so the registries start empty), with ``tmp_path/my-sensors`` as the project folder:

* a block whose first line is ``# <path>`` (``.py``, ``.yaml``, ``.toml``) is written to that path;
* the other ``python`` blocks run as one script (shared namespace) from the project folder;
* each ``console`` line runs as typed: ``fusebench ...`` through ``fusebench.cli.main`` (what the console
  script calls), ``pytest ...`` through ``pytest.main``; a ``text`` block right after a ``console``
  block is output that the commands must print;
* two stand-ins: ``pip install -e .`` writes the ``.dist-info`` folder pip would write (METADATA and
  entry_points.txt from the guide's pyproject.toml) into the project folder, which is on the path, so
  the registries find the adapter and the spec folder through ``importlib.metadata`` exactly as after
  an install; ``fusebench run`` gets tiny epochs appended (the run then takes seconds).

Afterwards the records and the board are checked against values worked out here from the files: the
adapter's samples against samples.csv / features.npz read by hand, the board's cells against the mean
over seeds of the run.json metrics.
"""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fusebench.metrics import values_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-a-modality.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FILE_HEADER = re.compile(r"\A# ([\w./-]+\.(?:py|yaml|toml))\n")
TINY = ["--set", "pretrain.epochs=1", "--set", "downstream.epochs=1", "--no-progress"]
RUN_LINE = "fusebench run wearable-activity --data-root my-sensor-data --objective infonce_pwe m3g none --seeds 0 1"
BOARD_LINE = "fusebench leaderboard --runs runs --out boards"


def _blocks() -> list[tuple[str, str]]:
    return FENCE.findall(DOC.read_text())


def _file_blocks() -> dict[str, str]:
    return {m.group(1): body for _, body in _blocks() if (m := FILE_HEADER.match(body))}


def _steps() -> list[dict]:
    """The guide as a list of steps for the driver below, in document order."""
    steps: list[dict] = []
    blocks = _blocks()
    for i, (tag, body) in enumerate(blocks):
        header = FILE_HEADER.match(body)
        if header:
            steps.append({"kind": "file", "path": header.group(1), "text": body})
        elif tag == "python":
            steps.append({"kind": "python", "text": body, "block": i})
        elif tag == "console":
            lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
            nxt = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
            expect = [ln.rstrip() for ln in nxt[1].splitlines() if ln.strip()] if nxt[0] == "text" else []
            steps.append({"kind": "console", "lines": lines, "expect": expect, "block": i})
        elif tag != "text":
            raise AssertionError(f"block {i} ({tag or 'no tag'}) is neither a file, python, console nor text block")
    return steps


# Runs the steps in one interpreter, from the project folder (argv: steps.json, check.py).
DRIVER = r'''
import contextlib, importlib, io, json, shlex, sys, tomllib
from pathlib import Path

TINY = json.loads(sys.argv[3])


def pip_install_editable():
    """What `pip install -e .` leaves behind for importlib.metadata: <name>-<version>.dist-info."""
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    info = Path(f"{project['name'].replace('-', '_')}-{project['version']}.dist-info")
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project.get("entry-points", {})
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in groups.items()))
    importlib.invalidate_caches()


def console(line):
    words = shlex.split(line, comments=True)
    if words == ["pip", "install", "-e", "."]:
        pip_install_editable()
        return ""
    if words[0] == "pytest":
        import pytest

        rc = pytest.main(words[1:] + ["-p", "no:cacheprovider"])
        assert rc == 0, f"{line!r} exited with {rc}"
        return ""
    assert words[0] == "fusebench", f"the test does not know how to run {line!r}"
    from fusebench.cli import main

    args = words[1:] + (TINY if words[1] == "run" else [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(args)
    sys.stdout.write(out.getvalue())
    assert rc == 0, f"{line!r} exited with {rc}"
    return out.getvalue()


namespace = {"__name__": "__main__"}
for step in json.loads(Path(sys.argv[1]).read_text()):
    if step["kind"] == "file":
        path = Path(step["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(step["text"])
    elif step["kind"] == "python":
        print(f"--- python block {step['block']}", flush=True)
        exec(compile(step["text"], f"<adding-a-modality.md block {step['block']}>", "exec"), namespace)
    else:
        printed = ""
        for line in step["lines"]:
            print(f"--- $ {line}", flush=True)
            printed += console(line)
        missing = [ln for ln in step["expect"] if ln not in printed.splitlines()]
        assert not missing, f"console block {step['block']}: expected output lines not printed: {missing}"
exec(compile(Path(sys.argv[2]).read_text(), "check.py", "exec"), {"__name__": "__main__"})
print("DOC-OK")
'''

# After the guide: the adapter's samples equal the files read by hand (csv + numpy, no adapter code).
CHECK = r'''
import csv
import numpy as np
from my_sensors.adapter import WearableFeatures

rows = list(csv.DictReader(open("my-sensor-data/samples.csv", newline="")))
with np.load("my-sensor-data/features.npz") as z:
    arrays = {k: z[k] for k in z.files}
position = {str(v): r for r, v in enumerate(arrays["id"])}
for split in ("train", "val", "test"):
    want = [r for r in rows if r["split"] == split]
    ds = WearableFeatures(root="my-sensor-data", split=split)
    assert len(ds) == len(want) > 0, (split, len(ds), len(want))
    for i in (0, len(want) // 2, len(want) - 1):
        s = ds[i]
        assert s["meta"]["id"] == want[i]["id"]
        assert int(s["target"]) == int(want[i]["label"])
        for name in ("accel", "ecg"):
            assert s["modalities"][name].tolist() == arrays[name][position[want[i]["id"]]].tolist()
print("CHECK-OK")
'''


@pytest.mark.slow  # ~14 s with one thread
def test_walkthrough_runs_end_to_end(tmp_path):
    project = tmp_path / "my-sensors"
    project.mkdir()
    (tmp_path / "steps.json").write_text(json.dumps(_steps()))
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "check.py").write_text(CHECK)
    env = dict(os.environ, FUSEBENCH_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(project),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    for var in ("FUSEBENCH_PREPARED", "FUSEBENCH_BENCHMARKS"):  # the spec must be found through the entry point
        env.pop(var, None)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "steps.json"),
                           str(tmp_path / "check.py"), json.dumps(TINY)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])
    assert "CHECK-OK" in proc.stdout and proc.stdout.rstrip().endswith("DOC-OK")

    # the sweep of the guide: 3 objectives x 2 seeds on the real folder, test metrics in range
    records = {}
    for path in sorted((project / "runs" / "wearable-activity").glob("*/seed*/run.json")):
        rec = json.loads(path.read_text())
        records[rec["objective"], rec["seed"]] = rec
    assert sorted(records) == [(o, s) for o in ("infonce_pwe", "m3g", "none") for s in (0, 1)]
    for rec in records.values():
        assert set(rec["metrics"]) == {"acc", "bacc", "mf1"}
        assert all(0.0 <= v <= 1.0 for v in values_of(rec["metrics"]).values()), rec["metrics"]
        assert rec["dataset"]["id"] == "wearable" and rec["dataset"]["synthetic"] is False
        assert rec["config"]["dataset"]["modalities"] == ["accel", "ecg"]
        assert rec["config"]["pretrain"]["epochs"] == 1 and rec["config"]["downstream"]["epochs"] == 1
    # 240 / 60 / 60 windows (write_synthetic's sizes for num_samples=240): test accuracy is k / 60
    labels = [r["label"] for r in csv.DictReader(open(project / "my-sensor-data" / "samples.csv", newline=""))]
    assert len(labels) == 360
    for rec in records.values():
        assert abs(values_of(rec["metrics"])["acc"] * 60 - round(values_of(rec["metrics"])["acc"] * 60)) < 1e-9

    # the smoke run went to its own folder, on the synthetic twin
    smoke = list((project / "smoke-runs").rglob("run.json"))
    assert len(smoke) == 1 and json.loads(smoke[0].read_text())["dataset"]["synthetic"] is True

    # the board: one row per objective, cells = mean over the two seeds (x100, 2 decimals) of run.json
    board = (project / "boards" / "wearable-activity.md").read_text()
    assert (project / "boards" / "README.md").is_file()
    for objective in ("infonce_pwe", "m3g", "none"):
        [row] = [ln for ln in board.splitlines() if ln.startswith(f"| `{objective}` |")]
        cells = row.split(" | ")
        for column, metric in ((1, "acc"), (2, "bacc"), (3, "mf1")):
            mean = statistics.fmean(values_of(records[objective, s]["metrics"])[metric] for s in (0, 1))
            shown = re.fullmatch(r"\*{0,2}(\d+\.\d\d) ± \d+\.\d\d \(2\)\*{0,2}", cells[column])
            assert shown, (objective, metric, cells[column])
            assert abs(float(shown.group(1)) - 100 * mean) <= 0.005 + 1e-9, (objective, metric, cells[column], mean)


def test_guide_shows_the_commands_and_entry_points_it_promises():
    consoles = [ln.strip() for tag, body in _blocks() if tag == "console" for ln in body.splitlines()]
    assert RUN_LINE in consoles and BOARD_LINE in consoles and "pip install -e ." in consoles
    files = _file_blocks()
    eps = tomllib.loads(files["pyproject.toml"])["project"]["entry-points"]
    module, _, cls = eps["fusebench.datasets"]["wearable"].partition(":")
    assert re.search(rf"^class {cls}\(MultimodalDataset\):", files[module.replace(".", "/") + ".py"], re.M)
    [folder_ep] = eps["fusebench.benchmarks"].values()
    module, _, attr = folder_ep.partition(":")
    assert re.search(rf"^{attr} = Path\(__file__\)\.parent / \"benchmarks\"", files[f"{module}/__init__.py"], re.M)
    assert f"{module}/benchmarks/wearable-activity.yaml" in files
    layout = _blocks()[0][1]  # the project tree at the top of the guide lists every file the guide writes
    for path in files:
        assert Path(path).name in layout, path


def test_spec_folder_through_fusebench_benchmarks_variable(tmp_path, monkeypatch):
    """The guide's alternative to the entry point: FUSEBENCH_BENCHMARKS names the spec folder."""
    from fusebench import benchmarks

    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "wearable-activity.yaml").write_text(_file_blocks()["my_sensors/benchmarks/wearable-activity.yaml"])
    monkeypatch.delenv("FUSEBENCH_BENCHMARKS", raising=False)
    assert "wearable-activity" not in benchmarks.available()
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(folder))
    assert benchmarks.available("wearable*") == ["wearable-activity"]
    spec = benchmarks.load("wearable-activity")
    assert (spec.name, spec.dataset.id, spec.encoder.id, spec.metrics) == ("wearable-activity", "wearable", "mlp",
                                                                           ["acc", "bacc", "mf1"])
    assert spec.objectives == ["none", "infonce_pwe", "m3g"] and spec.validation_metric == "acc"
    tiny = benchmarks.load("wearable-activity", synthetic=True)
    assert (tiny.pretrain.epochs, tiny.downstream.epochs, spec.pretrain.epochs) == (2, 2, 20)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
