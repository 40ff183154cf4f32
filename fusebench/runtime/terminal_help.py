"""Help texts for a terminal: the command-line parsers take their descriptions from module docstrings, which are
written in reStructuredText for the API docs; :func:`plain` drops that markup, and :class:`TerminalHelp` (an
``argparse`` formatter) applies it to every description, epilog and argument help, keeping the docstrings' own
line breaks. :class:`Parser` is the parser of every ``fusebench`` command: its options that store a value (one, or
several with ``nargs="+"``) may be given once (:class:`Once`), its ``KEY=VALUE`` options that repeat take each key once
(:class:`Keyed`); argparse itself keeps the last of ``--out A --out B`` and drops the first without a word.

    >>> plain("``fusebench run NAME``: see :func:`~fusebench.sweep.runner.run` and :mod:`fusebench.engine.loop`")
    'fusebench run NAME: see run() and fusebench.engine.loop'
    >>> plain("the `raw` row; :class:`the cell <fusebench.cells.standard.StandardCell>`")
    'the raw row; the cell'
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any

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


__all__ = ["Keyed", "Once", "Parser", "TerminalHelp", "plain"]


def _shown(values: object) -> str:
    """An option's value(s) as typed: a list as its items, a ``(key, value)`` pair as ``key=value``."""
    if isinstance(values, tuple) and len(values) == 2:
        key, value = values
        return str(key) if value is True else f"{key}={value}"
    if isinstance(values, list):
        return " ".join(map(str, values))
    return str(values)


class Once(argparse.Action):
    """The action of an option that stores its value(s) (one, or several with ``nargs="+"``) and may be given once:
    argparse keeps the last of ``--out A --out B`` (or ``--seeds 0 --seeds 1``) and drops the first without a word;
    here the second is an error naming the option and both values (``parser.error``: usage and exit status 2). The
    default action of :class:`Parser`; the same option under another of its names (``--data-root`` / ``--root``)
    counts as the same option."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        seen = getattr(namespace, "_options_given", None)
        if seen is None:
            seen = {}
            setattr(namespace, "_options_given", seen)
        if self.dest in seen:
            first, before = seen[self.dest]
            fix = f"give all its values after one {option_string}" if self.nargs in ("+", "*") else "give it once"
            parser.error(f"{option_string} given twice ({first} {_shown(before)}, then {option_string} "
                         f"{_shown(values)}): the second would replace the first; {fix}")
        seen[self.dest] = (option_string, values)
        setattr(namespace, self.dest, values)


def key_of(value: object) -> object:
    """The key of a ``KEY=VALUE`` option's value: a ``(key, value)`` pair's key, the text before ``=`` of a string
    (stripped), else the value itself (``--split train``)."""
    if isinstance(value, tuple) and value:
        return value[0]
    if isinstance(value, str):
        return value.partition("=")[0].strip()
    return value


class Keyed(argparse.Action):
    """The action of a repeatable ``KEY=VALUE`` option (``--sbatch mem=16G --sbatch qos=high``): the values in a
    list, as ``action="append"`` keeps them, and a key given twice an error naming the option, the key and both
    values (the second would replace the first where they become a mapping). The key: :func:`key_of`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])  # a copy: the default list is shared
        key = key_of(values)
        for before in items:
            if key_of(before) == key:
                parser.error(f"{option_string} {key} given twice ({option_string} {_shown(before)}, then "
                             f"{option_string} {_shown(values)}): the second would replace the first; give "
                             f"each key once")
        items.append(values)
        setattr(namespace, self.dest, items)


class Parser(argparse.ArgumentParser):
    """The parser of a ``fusebench`` command: :class:`TerminalHelp` help (unless another ``formatter_class`` is
    given) and :class:`Once` as the default action, so that no option that stores a value keeps the last of two
    silently (an option meant to repeat says so: ``action="append"`` checked where its values are read, or
    :class:`Keyed`). Its subcommands' parsers are of this class too (``add_subparsers``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", TerminalHelp)
        # an option is spelled out: argparse would take any unique prefix (--work for --workers, so "--worker 4"
        # meant as DataLoader workers ran 4 cells at once); an unknown one is an error naming the closest option
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.register("action", None, Once)
        self.register("action", "store", Once)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, with the closest option named for an unrecognised one (``--work`` -> ``--workers``)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            known = sorted(self._all_options())
            hints = [f"{h[0]} for {x.split('=', 1)[0]}" for x in extras if x.startswith("--")
                     if (h := difflib.get_close_matches(x.split("=", 1)[0], known, n=1, cutoff=0.6))]
            self.error(f"unrecognized arguments: {' '.join(extras)}"
                       + (f" (did you mean {', '.join(hints)}?)" if hints else ""))
        return ns

    def _all_options(self) -> set[str]:
        """The long option strings of this parser and of its subcommands' parsers."""
        out = {o for o in self._option_string_actions if o.startswith("--")}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    out |= {o for o in sub._option_string_actions if o.startswith("--")}
        return out

    def _check_value(self, action: argparse.Action, value: object) -> None:
        """argparse's check of a value against ``choices``, with the closest choice named on a typo
        (``fusebench list objectivs``: ``invalid choice: 'objectivs' (choose from ...); did you mean 'objectives'?``),
        as the registries name the closest id."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            choices = [str(c) for c in (action.choices or ())]
            hits = difflib.get_close_matches(str(value).lower(), choices, n=1, cutoff=0.5)
            if not hits or "meant" in str(e.message):  # Python 3.14's suggest_on_error says it already
                raise
            raise argparse.ArgumentError(action, f"{e.message}; did you mean {hits[0]!r}?") from None
