"""The project's command lines outside ``fusebench`` (the feature extractors, the record migrations' shared
parser, scripts/variant_hparams.py) take options as ``fusebench`` does: spelled out, and an option that stores a
value given once. They were plain ``argparse`` parsers: ``--proj`` was read as ``--projection`` and
``--input a.wav --input b.wav`` extracted b.wav alone (output 0 was not input 0's)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _error(call, capsys) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        call()
    assert e.value.code == 2
    return capsys.readouterr().err


def test_extractor_command_refuses_a_prefix_and_a_repeated_input(tmp_path: Path, capsys) -> None:
    from fusebench.encoders.extractors import main

    wav = str(tmp_path / "a.wav")
    err = _error(lambda: main(["vision", "--input", wav, "--output", str(tmp_path / "o.pt"), "--proj"]), capsys)
    assert "unrecognized arguments: --proj" in err and "did you mean --projection for --proj?" in err
    err = _error(lambda: main(["lld", "--input", wav, "--input", str(tmp_path / "b.wav"),
                               "--output", str(tmp_path / "o.pt")]), capsys)
    assert "--input given twice" in err
    assert not (tmp_path / "o.pt").exists()


def test_migration_parser_refuses_a_prefix(tmp_path: Path, capsys) -> None:
    from fusebench.records.migration import parse_args

    err = _error(lambda: parse_args("Migrate.", [str(tmp_path), "--ch"], "check only"), capsys)
    assert "unrecognized arguments: --ch" in err
    assert parse_args("Migrate.", [str(tmp_path), "--check"], "check only").check is True


def test_variant_hparams_refuses_a_prefix(capsys) -> None:
    spec = importlib.util.spec_from_file_location("variant_hparams", ROOT / "scripts" / "variant_hparams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    err = _error(lambda: module.main(["mv-cub", "--bench", "benchmarks"]), capsys)
    assert "unrecognized arguments: --bench" in err and "did you mean --benchmarks for --bench?" in err
