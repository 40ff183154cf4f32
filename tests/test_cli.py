"""The fusebench command line: listings and error reporting."""

from __future__ import annotations

import pytest

from fusebench import benchmarks, datasets, encoders, metrics, objectives
from fusebench.cli import main


@pytest.mark.parametrize("kind,module", [("objectives", objectives), ("datasets", datasets), ("encoders", encoders),
                                         ("metrics", metrics), ("benchmarks", benchmarks)])
def test_list_prints_every_registered_id(kind, module, capsys) -> None:
    assert main(["list", kind]) == 0
    out = capsys.readouterr().out
    starts = {line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")}
    assert starts == set(module.available())


def test_list_objectives_shows_hyperparameters_defaults_and_paper(capsys) -> None:
    main(["list", "objectives", "m3g"])
    out = capsys.readouterr().out
    assert "eps=0.2" in out and "solver='auto'" in out and "paper: Piran et al. 2024 (M3G)" in out
    main(["list", "objectives", "matching_gap"])
    assert "views: k = 2" in capsys.readouterr().out


def test_run_reports_bad_names_without_traceback(capsys) -> None:
    assert main(["run", "quickstrat"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'quickstart'" in err and "Traceback" not in err
    assert main(["run", "quickstart", "--objective", "matching_gap"]) == 2
    assert "k = 3" in capsys.readouterr().err
    assert main(["run", "nyuv2-seg"]) == 2
    assert "nyu_depth_v2_labeled.mat" in capsys.readouterr().err
