"""The fusebench command line: listings and error reporting."""

from __future__ import annotations

import pytest

from fusebench import benchmarks, datasets, encoders, metrics, objectives
from fusebench.cli import main


@pytest.mark.parametrize("kind,module", [("objectives", objectives), ("datasets", datasets), ("encoders", encoders),
                                         ("metrics", metrics), ("benchmarks", benchmarks)])
def test_list_prints_every_registered_id(kind, module, capsys) -> None:
    assert main(["list", kind]) == 0
    out, err = capsys.readouterr()
    starts = {line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")}
    # every built-in, and nothing that is not registered; a plugin installed on this machine is listed, or left
    # out with one warning line naming it (one that cannot be imported). Without plugins: starts == available()
    builtin = module.builtin() if kind == "benchmarks" else getattr(module, kind.upper()).builtin()
    assert set(builtin) <= starts <= set(module.available())
    for name in set(module.available()) - starts:
        assert f"warning: {kind[:-1]} {name!r} left out: " in err, name


def test_list_objectives_shows_hyperparameters_defaults_and_paper(capsys) -> None:
    main(["list", "objectives", "m3g"])
    out = capsys.readouterr().out
    assert "eps=0.2" in out and "solver='auto'" in out and "paper: Piran et al. 2024 (M3G)" in out
    main(["list", "objectives", "matching_gap"])
    assert "views (k): exactly 2" in capsys.readouterr().out


def test_run_reports_bad_names_without_traceback(capsys) -> None:
    assert main(["run", "quickstrat"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'quickstart'" in err and "Traceback" not in err
    assert main(["run", "quickstart", "--objective", "matching_gap"]) == 2
    assert "k = 3" in capsys.readouterr().err
    assert main(["run", "nyuv2-seg"]) == 2
    assert "nyu_depth_v2_labeled.mat" in capsys.readouterr().err


def test_bench_without_the_developer_benches_says_where_they_are(monkeypatch, capsys) -> None:
    """#35: the developer benches (fusebench.perf) are not in the wheel; where they are absent, `fusebench bench`
    says so in one line and exits 2 (tests/test_wheel.py checks the wheel leaves them out)."""
    import importlib

    from fusebench import cli

    real = importlib.import_module

    def without_perf(name, *args, **kwargs):
        if name == cli.DEVELOPER_BENCHES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", without_perf)
    assert cli.main(["bench", "objectives"]) == 2
    err = capsys.readouterr().err
    assert "not part of an installed fusebench" in err and "fusebench/perf/" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [[], ["run"], ["list"], ["bench"], ["data"], ["data", "prepare"], ["leaderboard"],
                                  ["status"], ["study"]])
def test_help_is_written_for_a_terminal(argv, capsys) -> None:
    """#35: --help shows the docstrings without their reStructuredText markup (``literal``, :mod:`...`)."""
    from fusebench import cli

    try:
        code = cli.main([*argv, "--help"])
    except SystemExit as e:  # argparse's --help
        code = e.code
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fusebench")
    for markup in ("``", ":mod:`", ":func:`", ":class:`", ":meth:`", ":data:`", ":attr:`"):
        assert markup not in out, f"{' '.join(argv)} --help shows {markup!r}"
