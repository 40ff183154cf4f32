"""One registry style for every kind of component (objectives, datasets, encoders, metrics, tasks,
benchmarks, pipelines, pretraining methods, launchers, trackers).

Ids are lowercase strings. A registry is declared once with the built-in modules that fill it
(``modules=``); they are imported on the first lookup, where each registers its entries with the
:meth:`Registry.register` decorator. Third-party packages add entries through the entry-point group
``fusebench.<kind>`` (e.g. ``fusebench.datasets``), whose value is ``"module:attribute"``, imported
on first use. A duplicate id is an error everywhere (two built-ins, or a plugin reusing an id), and
an unknown id raises :class:`UnknownNameError` listing the valid ids and the closest match.
:meth:`Registry.meta` returns an entry's metadata: what was given at registration, merged with
what ``describe`` (a per-registry function) reads off the registered object (paper, input kind,
view limits, options, version for objectives).

Example::

    OBJECTIVES = Registry("objective", entry_point_group="fusebench.objectives",
                          modules=("fusebench.objectives.infonce", ...))

    @OBJECTIVES.register("infonce_pwe")
    class InfoNCEPairwise(nn.Module): ...

    OBJECTIVES.build("infonce_pwe", tau=0.1)
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import re
from importlib.metadata import entry_points
from typing import Any, Callable, Iterator


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


class DuplicateIdError(ValueError):
    """Raised when an id is registered twice (two built-ins, or a plugin reusing a taken id)."""


class Registry:
    """A mapping from lowercase id to a factory (class or function), plus metadata.

    ``kind`` is the singular noun used in messages ("objective", "dataset", ...); ``modules`` are the
    built-in modules imported (in order) on the first lookup; ``describe(obj)`` returns metadata read
    off a registered object, merged under the metadata given at registration by :meth:`meta`.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None, modules: tuple[str, ...] = (),
                 describe: Callable[[Any], dict[str, Any]] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.modules = tuple(modules)
        self.describe = describe
        self._entries: dict[str, Any] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._lazy: dict[str, str] = {}
        self._origin: dict[str, str] = {}  # id -> where it was registered (for duplicate messages)
        self._builtins_loaded = not self.modules
        self._loading = False
        self._plugins_loaded = False
        self._plugin_names: frozenset[str] | None = None  # entry-point names, read by registered()

    # -- registration -----------------------------------------------------------------------
    def register(self, name: str, **meta: Any) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name`` with optional metadata."""

        def deco(obj: Any) -> Any:
            self.add(name, obj, **meta)
            return obj

        return deco

    def add(self, name: str, obj: Any, *, origin: str | None = None, **meta: Any) -> None:
        """Register ``obj`` under ``name``; ``origin`` (default: the object's module and name) says where
        it came from in a duplicate-id message."""
        if not isinstance(name, str) or not _ID.match(name):
            raise ValueError(
                f"{self.kind} id {name!r} is invalid: ids are lowercase letters, digits, '_', '-', '.'"
            )
        origin = origin or f"{getattr(obj, '__module__', None) or '?'}:{getattr(obj, '__qualname__', type(obj).__name__)}"
        self._check_free(name, origin)
        self._entries[name] = obj
        self._meta[name] = dict(meta)
        self._origin[name] = origin

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``name`` as ``"module:attribute"``, imported on first use."""
        self._check_free(name, target)
        self._lazy[name] = target
        self._origin[name] = target

    def _check_free(self, name: str, origin: str) -> None:
        if name in self._entries or name in self._lazy:
            raise DuplicateIdError(f"{self.kind} id {name!r} is registered twice: by {self._origin.get(name, '?')} "
                                   f"and by {origin}; ids must be unique")

    # -- built-ins and plugins ----------------------------------------------------------------
    def _load(self) -> None:
        """Import the built-in modules (once), then read the entry-point plugins (once)."""
        if not self._builtins_loaded and not self._loading:
            self._loading = True  # a built-in module may look an entry up while it is being imported
            try:
                for m in self.modules:
                    importlib.import_module(m)
                self._builtins_loaded = True
            finally:
                self._loading = False
        if self._plugins_loaded or self._loading:
            return
        self._plugins_loaded = True
        if not self.entry_point_group:
            return
        for ep in entry_points(group=self.entry_point_group):
            dist = getattr(getattr(ep, "dist", None), "name", None)
            self._check_free(ep.name, f"the plugin entry point {ep.value!r}" + (f" of {dist}" if dist else "")
                             + f" (group {self.entry_point_group})")
            self._lazy[ep.name] = ep.value
            self._origin[ep.name] = ep.value

    _load_plugins = _load  # older name

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
        self._load()
        names = sorted(set(self._entries) | set(self._lazy))
        if pattern:
            names = [n for n in names if fnmatch.fnmatch(n, pattern.lower())]
        return names

    def registered(self, name: str) -> bool:
        """Whether ``name`` is registered, found **without importing the built-in modules**: an entry
        added already (by a module imported so far, or by :meth:`add`) or a plugin entry point (its
        name is read, its module is not imported). For callers that know the built-in ids from a
        light table of their own (``fusebench.metrics.catalog``)."""
        key = name.lower()
        if key in self._entries or key in self._lazy:
            return True
        if self._plugins_loaded or not self.entry_point_group:
            return False
        if self._plugin_names is None:  # read once, like the plugins themselves
            self._plugin_names = frozenset(ep.name for ep in entry_points(group=self.entry_point_group))
        return key in self._plugin_names

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.available()

    def __iter__(self) -> Iterator[str]:
        return iter(self.available())

    def __len__(self) -> int:
        return len(self.available())

    def get(self, name: str) -> Any:
        self._load()
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
        """The entry's metadata: ``describe(obj)`` (when the registry has one) updated with the
        metadata given at registration."""
        obj = self.get(name)
        described = dict(self.describe(obj)) if self.describe is not None else {}
        return {**described, **self._meta.get(name.lower(), {})}

    def build(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.get(name)(*args, **kwargs)
