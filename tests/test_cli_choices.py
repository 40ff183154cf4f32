"""A typo in a word the command line chooses from (a subcommand, ``fusebench list KIND``, ``fusebench data ACTION``,
``fusebench bench TARGET``, ``--logger``, ``fusebench study NAME``) names the closest choice, as a typo in a
benchmark or objective id does; a value close to none of them is refused as before, with the list only."""

from __future__ import annotations

import pytest

from fusebench import cli


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's error
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, meant", [
    (["lst"], "list"),
    (["list", "objectivs"], "objectives"),
    (["list", "benchmark"], "benchmarks"),
    (["data", "prepar", "nyuv2"], "prepare"),
    (["bench", "objectivs"], "objectives"),
    (["run", "quickstart", "--logger", "tensorbord"], "tensorboard"),
    (["study", "kview"], "kviews"),
])
def test_a_typo_names_the_closest_choice(argv, meant, capsys) -> None:
    code, err = _refusal(argv, capsys)
    assert code == 2
    assert f"did you mean {meant!r}?" in err, err
    assert err.count("did you mean") == 1, err


@pytest.mark.parametrize("argv", [["list", "zzzz"], ["study", "zzzz"]])
def test_no_close_choice_no_hint(argv, capsys) -> None:
    code, err = _refusal(argv, capsys)
    assert code == 2
    assert "did you mean" not in err and "zzzz" in err, err


def test_study_without_a_name_says_what_to_give(capsys) -> None:
    code, err = _refusal(["study"], capsys)
    assert code == 2
    assert "fusebench study kviews" in err.splitlines()[-1], err
