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
    rows = json.loads(path.read_text())
    assert isinstance(rows, list)
    assert [r["op"] for r in rows] == ["fps", "ball_query", "group fwd+bwd", "3-NN interpolate fwd+bwd"], rows
    assert all(r["torch_ms"] > 0 for r in rows)
