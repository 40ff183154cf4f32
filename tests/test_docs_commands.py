"""Every ``fusebench`` command line shown in README.md, docs/*.md and docs/datasets/*.md (their ``bash`` and
``console`` blocks, ``torchrun ... -m fusebench ...`` included) and in the examples of ``fusebench --help`` and of
its subcommands' ``--help``, is parsed by the real command-line parser of its subcommand: a flag renamed or removed,
a subcommand or choice that no longer exists, or a value of the wrong type fails here naming the file and line.

Parsing only: each command goes through :func:`fusebench.cli.main` as typed (what the console script calls), and
the first parser that takes the whole command line (not one that hands the rest on to a subcommand) stops it
right after parsing, before anything is read, trained or written. Synopsis lines with placeholders
(``[--opt ...]``, ``a|b|c``, ``<fixtures>``) are not commands and are left out.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from fusebench.runtime.terminal_help import Parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "datasets").glob("*.md"))]
FENCE = re.compile(r"^```(bash|console)\n(.*?)^```", re.M | re.S)


def _commands(text: str, prose: bool = False) -> list[tuple[int, str]]:
    """(line number within ``text``, command) of each fusebench command line of ``text``'s shell lines (``prose``:
    lines of a help text, where one that is not valid shell, a sentence, is not a command)."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):  # a continued line
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        try:
            words = shlex.split(line, comments=True) if "fusebench" in line else []
        except ValueError:
            if not prose:
                raise
            continue
        if "fusebench" not in words:
            continue
        words = words[words.index("fusebench"):]
        if words[:2] == ["fusebench", "data"] and len(words) == 2:
            continue
        if any(re.search(r"[\[\]|<>]|\.\.\.", w) for w in words):  # a synopsis, not a command
            continue
        found.append((start + 1, shlex.join(words)))
    return found


def _doc_commands() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            first = text[:m.start(2)].count("\n")
            out += [(f"{path.relative_to(ROOT)}:{first + n}", cmd) for n, cmd in _commands(m.group(2))]
    from fusebench.cli import __doc__ as top_doc
    from fusebench.cli.run import EXAMPLES

    out += [(f"fusebench --help:{n}", cmd) for n, cmd in _commands(top_doc.split("Examples::", 1)[1])]
    out += [(f"fusebench run --help:{n}", cmd) for n, cmd in _commands(EXAMPLES)]
    for sub in HELPS:  # the examples in the other subcommands' --help
        shown = [ln for ln in _help(sub).splitlines() if re.match(r"\s+fusebench ", ln)]  # indented: examples
        out += [(f"fusebench {sub} --help:{n}", cmd) for n, cmd in _commands("\n".join(shown), prose=True)]
    return out


#: the subcommands whose --help shows examples besides `fusebench run` and `fusebench` itself
HELPS = ("data", "leaderboard", "status", "list", "study kviews", "bench leaderboard", "bench threads")


def _help(sub: str) -> str:
    """What ``fusebench <sub> --help`` prints."""
    import contextlib
    import io

    from fusebench.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main([*sub.split(), "--help"])
    return buf.getvalue()


COMMANDS = _doc_commands()


class _Parsed(Exception):
    """Raised by the parser that took the whole command line, with what it parsed."""

    def __init__(self, prog: str, ns: argparse.Namespace) -> None:
        super().__init__(prog)
        self.prog, self.ns = prog, ns


def test_the_docs_show_commands() -> None:
    """Guard against the extraction silently finding nothing."""
    where = {w.split(":")[0] for w, _ in COMMANDS}
    assert len(COMMANDS) >= 80 and {"README.md", "docs/benchmarks.md", "docs/gpu.md", "docs/cluster.md",
                                    "fusebench run --help", "fusebench data --help"} <= where


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where: str, command: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from fusebench.cli import main

    def stopping(original):  # type: ignore[no-untyped-def]
        def parse(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
            ns = original(self, args, namespace)
            if not any(a.nargs == argparse.REMAINDER for a in self._actions):  # takes the whole command line
                raise _Parsed(self.prog, ns)
            return ns

        return parse

    for name in ("parse_args", "parse_intermixed_args"):
        monkeypatch.setattr(Parser, name, stopping(getattr(Parser, name)))
    words = shlex.split(command)[1:]
    try:
        rc = main(words)
    except _Parsed:
        return
    except SystemExit as e:
        pytest.fail(f"{where}: `{command}` is refused by the parser (exit {e.code}): {capsys.readouterr().err.strip()}")
    pytest.fail(f"{where}: `{command}` returned {rc} without reaching a parser that takes it whole: "
                f"{capsys.readouterr().err.strip()}")
