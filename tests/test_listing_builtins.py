"""``fusebench list objectives|datasets|encoders|metrics`` prints the built-ins from
``fusebench/cli/listing_builtins.json`` without importing them (issue #32, item 7). The file is rebuilt here from
the live registries (in a fresh interpreter: nothing another test registered counts) and must be equal, so it
never goes stale silently; regenerate it with
``python -c "from fusebench.cli.listing import write_builtins; write_builtins()"``. The listing printed from the
file is compared, kind by kind, with and without ``--details`` and with a pattern, against what the
registries print."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fusebench.cli import listing

PRINT_LIVE = "import json, sys; from fusebench.cli.listing import live_builtin_text; json.dump(live_builtin_text(), sys.stdout)"
LIST = """
import sys
from fusebench.cli import main
code = main(sys.argv[1:])
print("TORCH-IMPORTED" if "torch" in sys.modules else "no-torch", code, file=sys.stderr)
"""


def test_the_builtins_file_is_what_the_live_registries_print() -> None:
    r = subprocess.run([sys.executable, "-c", PRINT_LIVE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    live = json.loads(r.stdout)
    stored = json.loads(listing.BUILTINS_FILE.read_text(encoding="utf-8"))
    assert set(stored) == set(live) == set(listing.TABLED)
    for kind in listing.TABLED:  # kind by kind, id by id: a failure names what went stale
        assert sorted(stored[kind]) == sorted(live[kind]), f"{kind}: ids differ; regenerate (see the module doc)"
        for name in live[kind]:
            assert stored[kind][name] == live[kind][name], f"{kind} {name!r} is stale; regenerate (see the module doc)"


CASES = [[kind, *extra] for kind in listing.TABLED for extra in ([], ["--details"])] + [
    ["objectives", "infonce*", "--details"], ["metrics", "F1*"], ["datasets", "nothing-matches*"]]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a) for a in CASES])
def test_list_from_the_file_prints_what_the_registries_print(args: list[str], capsys, monkeypatch) -> None:
    r = subprocess.run([sys.executable, "-c", LIST, "list", *args], capture_output=True, text=True, timeout=120)
    assert r.stderr.strip().splitlines()[-1] == "no-torch 0", r.stderr
    monkeypatch.setattr(listing, "builtin_text", lambda kind: None)  # the registries answer
    assert listing.main(args) == 0
    live = capsys.readouterr()
    assert r.stdout == live.out and live.err == ""
    assert r.stdout or args[1:2] == ["nothing-matches*"]


def test_a_plugin_or_another_registration_sends_list_to_the_registries(monkeypatch) -> None:
    from fusebench import objectives, registry

    monkeypatch.setattr(registry, "entry_points", lambda group: [])  # whatever other tests left installed
    monkeypatch.setattr(objectives.OBJECTIVES, "registered_so_far", lambda: {"infonce_pwe"})
    assert listing.builtin_text("objectives") is not None
    assert listing.builtin_text("benchmarks") is None and listing.builtin_text("pipelines") is None  # not tabled
    ep = type("EP", (), {"name": "toy", "value": "toy:Toy", "group": "fusebench.objectives"})()
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == "fusebench.objectives" else [])
    assert listing.builtin_text("objectives") is None
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    monkeypatch.setattr(objectives.OBJECTIVES, "registered_so_far", lambda: {"infonce_pwe", "toy"})
    assert listing.builtin_text("objectives") is None
