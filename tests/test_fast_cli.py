"""Issue #32, item 7: the small commands answer without importing torch (5 s of a 5.4 s ``fusebench list``).
Checked by running each command in a fresh interpreter and looking at ``sys.modules`` afterwards, never by
timing."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from fusebench.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("TORCH-IMPORTED" if "torch" in sys.modules else "no-torch", code, file=sys.stderr)
"""

FAST = [["--help"], ["--version"], ["run", "--help"], ["leaderboard", "--help"], ["status", "--help"],
        ["study", "--help"], ["study", "kviews", "--help"], ["bench", "--help"], ["bench", "threads", "--help"],
        ["bench", "leaderboard", "--help"], ["bench", "encoders", "--help"], ["list", "--help"],
        ["list", "pipelines"], ["list", "benchmarks"], ["list", "rows"],
        # the built-ins from fusebench/cli/listing_builtins.json (tests/test_listing_builtins.py)
        *[["list", kind, *extra] for kind in ("objectives", "datasets", "encoders", "metrics")
          for extra in ([], ["--details"])], ["list", "objectives", "infonce*"], ["list", "objectives", "--help"],
        ["data", "--help"], ["data", "info", "--help"], ["data", "prepare", "--help"], ["data", "check", "--help"],
        *[["bench", target, "--help"] for target in ("objectives", "data", "gpu", "cells")]]


@pytest.mark.parametrize("args", FAST, ids=[" ".join(a) for a in FAST])
def test_small_commands_do_not_import_torch(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    assert r.stdout.strip() or len(r.stderr.strip().splitlines()) > 1  # it answered
    plugins = _plugins_listed(args)
    if plugins:  # by design the registries answer then, importing the plugin (fusebench/cli/listing.py builtin_text)
        assert last.split()[1] == "0", r.stderr
        pytest.skip(f"a plugin on this machine adds {plugins} to fusebench.{args[1]}: the registries list it")
    assert last.split()[0] == "no-torch", r.stderr


def _plugins_listed(args: list[str]) -> list[str]:
    """The installed plugins' entry points that ``fusebench list KIND`` (a kind listed from the built-ins' table)
    must import to describe: none for the other commands."""
    from fusebench import registry
    from fusebench.cli.listing import TABLED

    if args[:1] != ["list"] or len(args) < 2 or args[1] not in TABLED or "--help" in args:
        return []
    return [ep.name for ep in registry.entry_points(group=f"fusebench.{args[1]}")]


def test_run_help_still_names_the_launchers_and_a_bad_one_is_refused(capsys) -> None:
    from fusebench.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--launcher ID" in out and "submitit_local" in out and "--threads N" in out
    assert main(["run", "quickstart", "--launcher", "slurmm"]) == 2
    err = capsys.readouterr().err
    assert "unknown launcher 'slurmm'" in err and "local, slurm, submitit_local" in err


def test_list_rows_names_every_reference_row_a_protocol_offers(capsys) -> None:
    """#35: the reference rows are registered once (fusebench.components.rows) and listed; every protocol's rows are
    among them."""
    from fusebench.components import rows
    from fusebench.cli import main
    from fusebench.components.protocols import PROTOCOLS

    assert main(["list", "rows"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:-1]] == ["none", "raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca"]
    assert all(": reference row: " in line for line in out[:-1]) and out[-1] == rows.PRETRAINED_LINE
    offered = {r for p in PROTOCOLS.available() for r in PROTOCOLS.get(p).reference_rows}
    assert offered == set(rows.references())
    assert main(["list", "rows", "raw_t*"]) == 0
    assert capsys.readouterr().out.splitlines() == rows.describe("raw_tfidf")
