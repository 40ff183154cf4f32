"""Typed options of every configurable component (objectives, encoders, dataset adapters).

A component declares its options once, where it is defined:

* objectives and encoders by their typed ``__init__`` signature (``def __init__(self, tau: float =
  0.1, ...)``), or by an ``Options`` dataclass class attribute;
* dataset adapters by an ``Options`` dataclass, or by the ``OPTIONS`` name set and ``OPTION_TYPES``
  of :class:`fusebench.datasets.base.MultimodalDataset` (plus the typed options every adapter takes).

:func:`options_of` turns either form into an ordered table of :class:`Option` (name, type, default),
which ``fusebench list ... --details`` and ``fusebench data info`` print, and which the benchmark spec
loader checks every ``dataset.options``, ``encoder.config`` and ``pretrain.per_objective.<id>.hparams`` /
``.grid`` entry against before any data is read (:func:`check_options`): an unknown key is
one error naming the spec key, the valid options and the closest match; a value of the wrong type
(a string for a float, a float for an int) is one error naming the expected type.

>>> from fusebench import objectives
>>> [str(o) for o in options_of(objectives.OBJECTIVES.get("infonce_pwe"))]
['tau: float = 0.1']
>>> check_options({"tua": 0.2}, objectives.OBJECTIVES.get("infonce_pwe"), "pretrain.per_objective.infonce_pwe.hparams")
Traceback (most recent call last):
...
fusebench.options.OptionsError: pretrain.per_objective.infonce_pwe.hparams: unknown options ['tua'] (did you mean 'tau' for 'tua'?); valid options: tau
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Mapping
from fusebench.typed import matches

REQUIRED = inspect.Parameter.empty

# constructor arguments that the runner supplies itself; they are not spec options
SUPPLIED = {
    "adapter": ("root", "split", "modalities", "synthetic"),
    "encoder": ("modalities",),
}


class OptionsError(ValueError):
    """An option given in a spec (or on the command line) is unknown or of the wrong type."""


@dataclass(frozen=True)
class Option:
    """One declared option: its name, type (an annotation, or ``Any``) and default."""

    name: str
    type: Any = Any
    default: Any = REQUIRED

    @property
    def type_name(self) -> str:
        t = self.type
        if t is Any:
            return "any"
        return t.__name__ if isinstance(t, type) else str(t).replace("typing.", "")

    def __str__(self) -> str:
        text = f"{self.name}: {self.type_name}"
        return text if self.default is REQUIRED else f"{text} = {self.default!r}"


def _from_dataclass(cls: type) -> list[Option]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else REQUIRED)
        out.append(Option(f.name, hints.get(f.name, Any), default))
    return out


def from_signature(fn: Any, skip: tuple[str, ...], open_ended: bool = False) -> list[Option] | None:
    """Options from a callable's signature; None when it takes ``**kwargs`` (open-ended), unless ``open_ended``:
    then its named parameters (what :func:`check_options` still checks of an open-ended class)."""
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError):
        return None
    out = []
    for name, p in sig.parameters.items():
        if name == "self" or name in skip or p.kind is p.VAR_POSITIONAL:
            continue
        if p.kind is p.VAR_KEYWORD:
            if open_ended:
                continue
            return None
        out.append(Option(name, hints.get(name, Any), p.default))
    return out


def options_of(obj: Any) -> list[Option] | None:
    """The declared options of a registered class (objective, encoder or dataset adapter), in order;
    None when they are open-ended (a third-party class taking ``**kwargs`` and declaring nothing)."""
    declared = getattr(obj, "Options", None)
    if isinstance(declared, type) and dataclasses.is_dataclass(declared):
        return _from_dataclass(declared)
    table = getattr(obj, "declared_options", None)  # a dataset adapter's table (datasets/base.py)
    if isinstance(obj, type) and callable(table):
        return table()
    target = obj.__init__ if isinstance(obj, type) else obj
    return from_signature(target, SUPPLIED["encoder"])


def _type_ok(value: Any, t: Any) -> bool:
    """Whether ``value`` passes the settings' one type check against annotation ``t``
    (:func:`fusebench.typed.check_type`: plain types, and containers with their items, as a spec's YAML gives them;
    anything richer passes)."""
    return matches(value, t)


def check_options(given: Mapping[str, Any], obj: Any, where: str, values: bool = True) -> None:
    """Raise :class:`OptionsError` naming ``where`` (e.g. ``"dataset.options"``) for a key of ``given``
    that ``obj`` does not declare or (``values``) a value of the wrong type."""
    if not isinstance(given, Mapping):
        raise OptionsError(f"{where}: expected a mapping of option names to values, got {given!r}")
    opts = options_of(obj)
    open_ended = opts is None
    if open_ended:  # **kwargs: a key not named but this close to a named option is taken for a typo
        opts = from_signature(obj.__init__ if isinstance(obj, type) else obj, SUPPLIED["encoder"], open_ended=True)
    table = {o.name: o for o in opts or []}
    unknown = sorted(str(k) for k in given if k not in table)
    if open_ended:
        typos = [f"{h[0]!r} for {k!r}" for k in unknown
                 if (h := difflib.get_close_matches(k, list(table), n=1, cutoff=0.8))]
        if typos:
            raise OptionsError(f"{where}: unknown options, did you mean {', '.join(typos)}? (the constructor takes "
                               f"**kwargs, so other keys are passed on unchecked; one this close to a named option is "
                               f"taken for a typo); named options: {', '.join(table)}")
    elif unknown:
        hints = [f"{h[0]!r} for {k!r}" for k in unknown
                 if (h := difflib.get_close_matches(k, list(table), n=1, cutoff=0.5))]
        raise OptionsError(f"{where}: unknown options {unknown}" + (f" (did you mean {', '.join(hints)}?)" if hints else "")
                           + f"; valid options: {', '.join(table) or 'none'}")
    for key in given:  # the named ones' values (an open-ended constructor's other keys are passed on unchecked)
        if values and key in table and not _type_ok(given[key], table[key].type):
            raise OptionsError(f"{where}.{key}: expected {table[key].type_name}, got "
                               f"{type(given[key]).__name__} {given[key]!r}")


__all__ = ["REQUIRED", "Option", "OptionsError", "check_options", "options_of"]
