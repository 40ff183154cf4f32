"""A refused run leaves no folder behind: ``--out`` is made only once every check that can refuse has passed, and a
refusal after that, before anything is written into it, takes back the folders the run made (a folder that existed,
or one with a file in it, stays)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.spec.config import ConfigError

TINY = {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "downstream.epochs": 1}


def test_weights_that_do_not_fit_leave_no_out_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import main

    torch.save({"w": torch.zeros(2)}, tmp_path / "bad.pt")
    for out in (tmp_path / "new", tmp_path / "a" / "b" / "c"):
        assert main(["run", "quickstart", "--objective", "mine", "--encoder-weights", f"mine={tmp_path / 'bad.pt'}",
                     "--out", str(out), "--no-progress"]) == 2
        assert "does not fit encoder 'mlp'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt"]  # neither new/ nor a/b/c


@pytest.mark.parametrize("exists", [False, True])
def test_a_refusal_after_the_folder_is_made_takes_back_what_the_run_made(tmp_path: Path, exists: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from fusebench.sweep import selection

    out = tmp_path / "x" / "runs"
    if exists:
        out.mkdir(parents=True)
    seen = []

    def refuses(spec, objectives, folder, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(folder.is_dir())  # the folder is there when the run goes on past its checks
        raise ConfigError("refused by the test")

    monkeypatch.setattr(selection, "freeze_selections", refuses)
    with pytest.raises(ConfigError, match="refused by the test"):
        fusebench.run("quickstart", objective="raw", seeds=[0], out=out, overrides=TINY, progress=False)
    assert seen == [True]
    assert out.is_dir() is exists and (tmp_path / "x").is_dir() is exists  # made here: taken back, both levels
    # a folder with something in it stays, with what is in it
    out.mkdir(parents=True, exist_ok=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="refused by the test"):
        fusebench.run("quickstart", objective="raw", seeds=[0], out=out, overrides=TINY, progress=False)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_the_run_that_passes_its_checks_makes_the_folder_and_says_where(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import main

    out = tmp_path / "a" / "runs"
    assert main(["run", "quickstart", "--objective", "raw", "--seeds", "0", "--out", str(out), "--no-progress",
                 "--set", "downstream.epochs=1"]) == 0
    assert (out / "quickstart" / "raw" / "seed0" / "run.json").is_file()
    assert f"records: {out}" in capsys.readouterr().out


def test_an_out_that_cannot_be_made_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=rf"^--out {tmp_path / 'file' / 'sub'}: cannot create the folder "
                                          rf"\({tmp_path / 'file'} is not a folder\); name a writable folder$"):
        fusebench.run("quickstart", objective="raw", seeds=[0], out=tmp_path / "file" / "sub", overrides=TINY,
                      progress=False, plan=True)
