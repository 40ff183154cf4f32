"""Help texts for a terminal: the command-line parsers take their descriptions from module docstrings, which are
written in reStructuredText for the API docs; :func:`plain` drops that markup, and :class:`TerminalHelp` (an
``argparse`` formatter) applies it to every description, epilog and argument help, keeping the docstrings' own
line breaks. :class:`Once` is the action of an option that takes one or more values and may be given once.

    >>> plain("``fusebench run NAME``: see :func:`~fusebench.sweep.runner.run` and :mod:`fusebench.engine.loop`")
    'fusebench run NAME: see run() and fusebench.engine.loop'
    >>> plain("the `raw` row; :class:`the cell <fusebench.cells.standard.StandardCell>`")
    'the raw row; the cell'
"""

from __future__ import annotations

import argparse
import re

_ROLE = re.compile(r":(?:py:)?(mod|func|meth|class|attr|data|obj|exc|ref|doc):`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_INTERPRETED = re.compile(r"(?<![\w`])`([^`\n]+)`(?![\w`])")


def _role(m: re.Match) -> str:
    role, body = m.group(1), m.group(2)
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", body)
    if titled:  # :role:`text <target>` -> text
        return titled.group(1)
    name = body.lstrip("~!")
    if body.startswith("~"):  # :role:`~a.b.c` -> c
        name = name.rpartition(".")[2]
    return name + "()" if role in ("func", "meth") else name


def plain(text: str) -> str:
    """``text`` without reStructuredText roles and literal quotes (see the module doc)."""
    text = _ROLE.sub(_role, text)
    text = _LITERAL.sub(r"\1", text)
    return _INTERPRETED.sub(r"\1", text)


class TerminalHelp(argparse.RawDescriptionHelpFormatter):
    """Raw descriptions (the docstrings' line breaks kept) and argument help, both without markup."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


__all__ = ["Once", "TerminalHelp", "plain"]


class Once(argparse.Action):
    """The action of an option taking one or more values (``nargs="+"``) that may be given once: argparse keeps the
    last of ``--seeds 0 --seeds 1`` and drops the first without a word; here the second is an error naming the
    option (``parser.error``: usage and exit status 2)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        seen = getattr(namespace, "_options_given", None)
        if seen is None:
            seen = set()
            setattr(namespace, "_options_given", seen)
        if self.dest in seen:
            parser.error(f"{option_string} given twice (the second would replace the first); give all its values "
                         f"after one {option_string}")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)
