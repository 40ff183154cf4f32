"""``fusebench list objectives|datasets|encoders|metrics`` prints the built-ins from
``fusebench/cli/listing_builtins.json`` without importing them (issue #32, item 7). The file is rebuilt here from
the live registries (in a fresh interpreter: nothing another test registered counts) and must be equal, so it
never goes stale silently; regenerate it with
``python -c "from fusebench.cli.listing import write_builtins; write_builtins()"``. The listing printed from the
file is compared, kind by kind, with and without ``--details`` and with a pattern, against what the
registries print."""

from __future__ import annotations

import importlib
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


def installed_plugins(kind: str) -> list[str]:
    """The entry points a plugin installed on this machine adds to ``kind`` (``fusebench list KIND`` asks the
    registries then, by design: :func:`fusebench.cli.listing.builtin_text`)."""
    from fusebench import registry

    return [f"{ep.name} = {ep.value}" for ep in registry.entry_points(group=f"fusebench.{kind}")]


def _blocks(text: str) -> list[tuple[str, str]]:
    """(id, its text) of each block a listing printed, in order: an unindented line and the indented ones after."""
    blocks: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(" ") and blocks:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + line)
        else:
            blocks.append((line.split(":")[0], line))
    return blocks


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a) for a in CASES])
def test_list_from_the_file_prints_what_the_registries_print(args: list[str], capsys, monkeypatch) -> None:
    kind, plugins = args[0], installed_plugins(args[0])
    r = subprocess.run([sys.executable, "-c", LIST, "list", *args], capture_output=True, text=True, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    # without a plugin the table answers (no torch); with one the registries do, importing the plugin
    assert last == "no-torch 0" or (plugins and last.endswith(" 0")), r.stderr
    monkeypatch.setattr(listing, "builtin_text", lambda kind: None)  # the registries answer
    assert listing.main(args) == 0
    live = capsys.readouterr()
    assert r.stdout == live.out
    # a glob that matches nothing is said on stderr, by the table and by the registries alike
    said = (f"fusebench list: no {kind[:-1]} matches 'nothing-matches*' (fusebench list {kind} lists them)\n"
            if args[1:2] == ["nothing-matches*"] else "")
    assert said in r.stderr
    err = live.err.replace(said, "", 1) if said in live.err else live.err + "(missing: the no-match line)"
    if plugins:  # a plugin's problems are warning lines naming its entry point; nothing else is said
        assert all(line.startswith("warning: ") and "entry point '" in line for line in err.splitlines()), live.err
    else:
        assert err == "", live.err
    assert r.stdout or args[1:2] == ["nothing-matches*"]
    if plugins:  # the table did not answer above: it must print what the registries print of the built-ins
        table = json.loads(listing.BUILTINS_FILE.read_text(encoding="utf-8"))[kind]
        monkeypatch.setattr(listing, "builtin_text", lambda kind: table)
        assert listing.main(args) == 0
        from_table = capsys.readouterr()
        registry = getattr(importlib.import_module(listing.KINDS[kind]), listing.REGISTRIES[kind])
        builtins = [text for name, text in _blocks(live.out) if registry.plugin(name) is None]
        assert from_table.out == "".join(builtins) and from_table.err == said
        assert from_table.out or args[1:2] == ["nothing-matches*"]


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
