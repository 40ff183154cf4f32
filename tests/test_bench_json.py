"""`fusebench bench gpu --json` / `bench encoders --json`: the file is strict JSON, written whole, and the command
says where it went (the quality bar: every command says where its output went)."""
from __future__ import annotations

import json

from fusebench.perf import encoders as perf_encoders
from fusebench.perf import gpu


def test_bench_gpu_json_is_said_and_strict(tmp_path, capsys) -> None:
    path = tmp_path / "sub" / "rows.json"
    assert gpu.main(["--device", "cpu", "--small", "--encoders", "eeg_conv", "--precision", "32", "--steps", "1",
                     "--warmup", "0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert str(path) in out  # where the rows went
    rows = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))["rows"]
    assert [r["encoder"] for r in rows] == ["eeg_conv"]
    assert not list(path.parent.glob(".*.tmp"))  # nothing half-written left beside it


def test_bench_encoders_pointnet_ops_json_is_said(tmp_path, capsys) -> None:
    path = tmp_path / "ops.json"
    assert perf_encoders.main(["--pointnet-ops", "--device", "cpu", "--pointnet-config", "tiny", "--batch-size", "1",
                               "--warmup", "0", "--repeats", "1", "--json", str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    doc = json.loads(path.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    # the figures with the machine and settings they were measured with (a bare list of rows named neither)
    assert doc["machine"] == perf_encoders.machine_description("cpu", 2) and doc["device"] == "cpu"
    assert (doc["config"], doc["batch_size"], doc["warmup"], doc["repeats"]) == ("tiny", 1, 0, 1)
    rows = doc["rows"]
    assert [r["op"] for r in rows] == ["fps", "ball_query", "group fwd+bwd", "3-NN interpolate fwd+bwd"], rows
    assert all(r["torch_ms"] > 0 for r in rows)


def test_bench_encoders_json_says_the_machine_and_settings(tmp_path, monkeypatch, capsys) -> None:
    path = tmp_path / "enc.json"
    monkeypatch.setattr(perf_encoders, "run_one", lambda name, *a: {"encoder": name, "config": "", "inputs": "",
                                                                    "params_m": 0.0, "ms": 1.0, "peak_mib": 1.0,
                                                                    "delta_mib": 0.0})
    assert perf_encoders.main(["--names", "mlp", "--in-process", "--threads", "1", "--repeats", "2", "--warmup", "0",
                               "--json", str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    doc = json.loads(path.read_text())
    assert doc["machine"] == perf_encoders.machine_description("cpu", 1)
    assert (doc["device"], doc["threads"], doc["batch_size"], doc["warmup"], doc["repeats"], doc["memory"]) == \
        ("cpu", 1, None, 0, 2, "peak process RSS")
    assert [r["encoder"] for r in doc["rows"]] == ["mlp"]
