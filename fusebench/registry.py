"""One generic registry per kind of component (objectives, datasets, encoders, metrics, benchmarks).

Ids are lowercase strings. Built-in entries register themselves with the :meth:`Registry.register`
decorator when their package is imported; third-party packages add entries through the entry-point
group ``fusebench.<kind>`` (e.g. ``fusebench.datasets``), whose value is ``"module:attribute"``.
A duplicate id is an error; an unknown id raises :class:`UnknownNameError` listing the valid ids and
the closest match.

Example::

    OBJECTIVES = Registry("objective", entry_point_group="fusebench.objectives")

    @OBJECTIVES.register("infonce_pwe")
    class InfoNCEPairwise(nn.Module): ...

    OBJECTIVES.build("infonce_pwe", tau=0.1)
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import logging
import re
from importlib.metadata import entry_points
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

_ID = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
ID_RULE = "lowercase letters, digits, '_', '.', '-', starting with a letter or digit"


def valid_id(name: object) -> bool:
    """True for a registry-style id (also safe as one path component: no '/', no leading '.')."""
    return isinstance(name, str) and len(name) <= 128 and bool(_ID.match(name))


class UnknownNameError(KeyError, ValueError):
    """Raised for an id that is not registered. Subclasses both KeyError and ValueError."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def closest(name: str, choices: list[str]) -> str | None:
    """The closest registered id to ``name`` (for 'did you mean' hints), or None."""
    hits = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.5)
    return hits[0] if hits else None


class Registry:
    """A mapping from lowercase id to a factory (class or function), plus metadata.

    ``kind`` is the singular noun used in messages ("objective", "dataset", ...).
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._entries: dict[str, Any] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._lazy: dict[str, str] = {}
        self._plugins_loaded = False

    # -- registration -----------------------------------------------------------------------
    def register(self, name: str, **meta: Any) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name`` with optional metadata."""

        def deco(obj: Any) -> Any:
            self.add(name, obj, **meta)
            return obj

        return deco

    def add(self, name: str, obj: Any, **meta: Any) -> None:
        if not isinstance(name, str) or not _ID.match(name):
            raise ValueError(
                f"{self.kind} id {name!r} is invalid: ids are lowercase letters, digits, '_', '-', '.'"
            )
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} id {name!r} is registered twice")
        self._entries[name] = obj
        self._meta[name] = dict(meta)

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``name`` as ``"module:attribute"``, imported on first use."""
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} id {name!r} is registered twice")
        self._lazy[name] = target

    # -- plugins ----------------------------------------------------------------------------
    def _load_plugins(self) -> None:
        if self._plugins_loaded or not self.entry_point_group:
            self._plugins_loaded = True
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._entries or ep.name in self._lazy:
                log.warning("%s plugin %r ignored: the id is taken by a built-in", self.kind, ep.name)
                continue
            self._lazy[ep.name] = ep.value

    def _resolve(self, name: str) -> Any:
        target = self._lazy.pop(name)
        module, _, attr = target.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
        # importing the module may have registered it through the decorator already
        if name not in self._entries:
            self._entries[name] = obj
            self._meta.setdefault(name, {})
        return self._entries[name]

    # -- lookup -----------------------------------------------------------------------------
    def available(self, pattern: str | None = None) -> list[str]:
        """Sorted registered ids, optionally filtered by a glob ``pattern`` (e.g. ``"infonce*"``)."""
        self._load_plugins()
        names = sorted(set(self._entries) | set(self._lazy))
        if pattern:
            names = [n for n in names if fnmatch.fnmatch(n, pattern.lower())]
        return names

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.available()

    def __iter__(self) -> Iterator[str]:
        return iter(self.available())

    def __len__(self) -> int:
        return len(self.available())

    def get(self, name: str) -> Any:
        self._load_plugins()
        if not isinstance(name, str):
            raise TypeError(f"{self.kind} id must be a string, got {type(name).__name__}")
        key = name.lower()
        if key in self._lazy:
            return self._resolve(key)
        if key not in self._entries:
            valid = self.available()
            hint = closest(key, valid)
            msg = f"unknown {self.kind} {name!r}."
            if hint:
                msg += f" Did you mean {hint!r}?"
            msg += f" Valid {self.kind} ids: {', '.join(valid)}"
            raise UnknownNameError(msg)
        return self._entries[key]

    def meta(self, name: str) -> dict[str, Any]:
        self.get(name)
        return self._meta.get(name.lower(), {})

    def build(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.get(name)(*args, **kwargs)
