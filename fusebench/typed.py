"""Typed parsing of settings (layer 0): a mapping read from YAML or ``--set`` becomes a dataclass, with
every key and type checked, and one :class:`ConfigError` naming the key (``where``) and what was
expected when something is wrong. The benchmark spec (:mod:`fusebench.training.config`) and the
pretraining methods' options (:mod:`fusebench.training.methods`) are parsed with it."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A benchmark spec or an override is invalid; the message names the file and the key."""


def check_type(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the type hint ``tp`` (``Any``, unions / optionals, ``list[T]``, ``dict``,
    a dataclass, ``int`` / ``float`` / ``str`` / ``bool``; an int is widened to a float, a bool is never
    a number), returned as checked; a :class:`ConfigError` naming ``where`` otherwise."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:  # Optional[X] and X | None
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return check_type(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        return [check_type(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool):
        if isinstance(value, bool) and tp is not bool:
            raise ConfigError(f"{where}: expected {tp.__name__}, got a boolean {value!r}")
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
        return value
    return value


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass ``cls`` from ``data`` checking keys and types (``where`` prefixes errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(f"{where or cls.__name__}: unknown key(s) {unknown}; valid keys: {sorted(fields)}")
    kwargs = {k: check_type(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


__all__ = ["ConfigError", "check_type", "from_dict"]
