"""One registry style for every kind of component (objectives, datasets, encoders, metrics, tasks,
benchmarks, pipelines, pretraining methods, launchers, trackers).

Ids are lowercase strings. A registry is declared once with the built-in modules that fill it
(``modules=``); they are imported on the first lookup, where each registers its entries with the
:meth:`Registry.register` decorator. Third-party packages add entries through the entry-point group
``fusebench.<kind>`` (e.g. ``fusebench.datasets``), whose value is ``"module:attribute"``, imported
on first use. Two built-ins with one id are a :class:`DuplicateIdError`; a plugin whose entry point
is not a valid id, or reuses a taken one, is left out with one :class:`PluginWarning` line naming its
distribution and entry point (the rest of the registry still loads, so ``fusebench list`` lists it);
a plugin that cannot be imported raises :class:`PluginError` (one line: distribution, entry point,
what was expected) when it is looked up. An unknown id raises :class:`UnknownNameError` listing the
valid ids and the closest match. Ids match :data:`ID_RULE` as a whole string (``re.fullmatch``: no
trailing newline slips through a ``$``).
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
import warnings
from importlib.metadata import entry_points
from typing import Any, Callable, Iterator


_ID = re.compile(r"[a-z0-9][a-z0-9_.\-]*")  # always used with fullmatch: the whole string, no trailing newline
ID_RULE = "lowercase letters, digits, '_', '.', '-', starting with a letter or digit"


def valid_id(name: object) -> bool:
    """True for a registry-style id (also safe as one path component: no '/', no leading '.', no newline)."""
    return isinstance(name, str) and len(name) <= 128 and bool(_ID.fullmatch(name))


class UnknownNameError(KeyError, ValueError):
    """Raised for an id that is not registered. Subclasses both KeyError and ValueError."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def matching(names: Any, pattern: str | None = None) -> list[str]:
    """``names`` sorted, filtered by the glob ``pattern`` (case-insensitive: ids are lowercase) when one is given."""
    names = sorted(names)
    return [n for n in names if fnmatch.fnmatch(n, pattern.lower())] if pattern else names


def closest(name: str, choices: list[str]) -> str | None:
    """The closest registered id to ``name`` (for 'did you mean' hints), or None."""
    hits = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.5)
    return hits[0] if hits else None


class DuplicateIdError(ValueError):
    """Raised when an id is registered twice (two built-ins, two benchmark spec files)."""


class PluginError(ValueError):
    """An entry-point plugin that cannot be used (its module does not import, its attribute is missing, it
    is not what its group expects); the message is one line naming its distribution and entry point."""


class PluginWarning(UserWarning):
    """A plugin left out of its registry (its entry point is not a valid id, or reuses a taken one)."""


def describe_entry_point(ep: Any) -> str:
    """``"entry point 'name = module:attr' (group G) of distribution D 1.0"``: where a plugin comes from."""
    dist = getattr(ep, "dist", None)
    name, version = getattr(dist, "name", None), getattr(dist, "version", None)
    where = f"entry point '{ep.name} = {ep.value}' (group {ep.group})"
    return where + (f" of distribution {name} {version or ''}".rstrip() if name else " (distribution unknown)")


class Registry:
    """A mapping from lowercase id to a factory (class or function), plus metadata.

    ``kind`` is the singular noun used in messages ("objective", "dataset", ...); ``modules`` are the
    built-in modules imported (in order) on the first lookup; ``describe(obj)`` returns metadata read
    off a registered object, merged under the metadata given at registration by :meth:`meta`.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None, modules: tuple[str, ...] = (),
                 describe: Callable[[Any], dict[str, Any]] | None = None,
                 home: Callable[[str], str | None] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.modules = tuple(modules)
        self.describe = describe
        # the built-in module that registers an id (None: not known), so that looking one id up (a run) imports
        # that module only; an id it does not register is looked up as before, after importing them all
        self.home = home
        self._entries: dict[str, Any] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._lazy: dict[str, str] = {}
        self._origin: dict[str, str] = {}  # id -> where it was registered (for duplicate messages)
        self._builtins_loaded = not self.modules
        self._loading = False
        self._plugins_loaded = False
        self._plugin_names: frozenset[str] | None = None  # entry-point names, read by registered()
        self._plugin_of: dict[str, str] = {}  # plugin id -> describe_entry_point(...) (for messages)

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
        if not valid_id(name):
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
            where = describe_entry_point(ep)
            if not valid_id(ep.name):
                problem = f"its name {ep.name!r} is not a valid {self.kind} id ({ID_RULE})"
            elif ep.name in self._entries or ep.name in self._lazy:
                problem = f"{self.kind} id {ep.name!r} is taken already (by {self._origin.get(ep.name, '?')})"
            else:
                self._lazy[ep.name] = ep.value
                self._origin[ep.name] = ep.value
                self._plugin_of[ep.name] = where
                continue
            warnings.warn(f"{self.kind} plugin left out: {where}: {problem}; expected a unique {self.kind} id",
                          PluginWarning, stacklevel=2)

    _load_plugins = _load  # older name

    def plugin(self, name: str) -> str | None:
        """Where the plugin ``name`` comes from (:func:`describe_entry_point`); None for a built-in."""
        return self._plugin_of.get(name.lower()) if isinstance(name, str) else None

    def _resolve(self, name: str) -> Any:
        target = self._lazy.pop(name)
        module, _, attr = target.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in attr.split(".") if attr else []:
                obj = getattr(obj, part)
        except Exception as e:  # noqa: BLE001 - anything a plugin's import raises is the plugin's problem
            self._lazy[name] = target  # looked up again, it fails again with the same line
            where = self._plugin_of.get(name) or f"{target!r}"
            raise PluginError(f"{self.kind} {name!r} cannot be loaded: {where}: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}; expected 'module:attribute' naming an object of "
                              f"an importable module") from None
        # importing the module may have registered it through the decorator already
        if name not in self._entries:
            self._entries[name] = obj
            self._meta.setdefault(name, {})
        return self._entries[name]

    # -- lookup -----------------------------------------------------------------------------
    def available(self, pattern: str | None = None) -> list[str]:
        """Sorted registered ids, optionally filtered by a glob ``pattern`` (e.g. ``"infonce*"``)."""
        self._load()
        return matching(set(self._entries) | set(self._lazy), pattern)

    def builtin(self, pattern: str | None = None) -> list[str]:
        """Sorted ids of :meth:`available` that no entry-point plugin supplied (:meth:`plugin` is None): the
        components fusebench ships (and any added in this process by :meth:`add`). fusebench's own tests iterate
        these, so a plugin a researcher installed never makes them fail (``fusebench.benchmarks.builtin`` is the
        same for benchmark specs)."""
        return [name for name in self.available(pattern) if self.plugin(name) is None]

    def registered_so_far(self) -> set[str]:
        """The ids registered in this process so far, **without importing anything**: by the built-in modules
        imported so far, by :meth:`add`, and the plugin entry points read so far (``fusebench list`` answers
        from its table of the built-ins only while nothing else is registered)."""
        return set(self._entries) | set(self._lazy)

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
        """Whether ``name`` is a registered id, matched exactly (ids are lowercase: a spec's per-objective keys are
        checked with it, ``M3G`` refused with a hint); :meth:`get` forgives the case of a name typed on a command
        line."""
        if not isinstance(name, str):
            return False
        if name not in self._entries and name not in self._lazy:
            self._load_home(name)
        return name in self._entries or name in self._lazy or name in self.available()

    def __iter__(self) -> Iterator[str]:
        return iter(self.available())

    def __len__(self) -> int:
        return len(self.available())

    def _load_home(self, key: str) -> None:
        """Import the one built-in module that registers ``key`` (``home``), where it is known and the
        built-ins are not all imported yet."""
        module = self.home(key) if self.home is not None and not self._builtins_loaded else None
        if module is not None and module in self.modules:
            importlib.import_module(module)

    def get(self, name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"{self.kind} id must be a string, got {type(name).__name__}")
        key = name.lower()
        if key not in self._entries and key not in self._lazy:
            self._load_home(key)
        if key not in self._entries and key not in self._lazy:
            self._load()
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


# ---- where a plugin came from (issue #32, item 4): written into every run record that uses one ----------------
def plugin_provenance(registry: Registry, name: str) -> dict[str, Any] | None:
    """Where the component ``name`` of ``registry`` came from when an entry point supplied it (None for a
    built-in or an unknown id): the entry point and its group, the distribution's name and version, the
    module the entry point names with its file and the file's sha256, and, for a distribution installed from
    a URL or a folder (``direct_url.json``, e.g. ``pip install -e``), that URL, whether it is editable, its
    VCS and commit when recorded, and for an editable install from a git checkout the checkout's revision and
    whether it had uncommitted changes."""
    if not isinstance(name, str) or not registry.entry_point_group:
        return None
    key = name.lower()
    if key in registry._entries and key not in registry._plugin_of:  # a built-in (a plugin never replaces one)
        return None
    registry._load()
    if key not in registry._plugin_of:
        return None
    ep = next((e for e in entry_points(group=registry.entry_point_group) if e.name == key), None)
    if ep is None:
        return None
    dist = getattr(ep, "dist", None)
    out: dict[str, Any] = {"entry_point": f"{ep.name} = {ep.value}", "group": ep.group,
                           "distribution": getattr(dist, "name", None), "version": getattr(dist, "version", None)}
    module = ep.value.partition(":")[0].strip()
    out.update(_module_file(module))
    try:
        direct = dist.read_text("direct_url.json") if dist is not None else None
    except OSError:
        direct = None
    if direct:
        out["direct_url"] = _direct_url(direct)
    return out


def _module_file(module: str) -> dict[str, Any]:
    """``{"module", "module_file", "module_sha256"}`` of an importable module (its own file only)."""
    import sys
    from pathlib import Path

    from fusebench.io import sha256_file

    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if path is None:
        import importlib.util

        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        path = getattr(found, "origin", None)
    if not path or not Path(path).is_file():
        return {"module": module, "module_file": None, "module_sha256": None}
    return {"module": module, "module_file": str(Path(path).resolve()), "module_sha256": sha256_file(path)}


def _direct_url(text: str) -> dict[str, Any]:
    """The parts of a ``direct_url.json`` (PEP 610) that say which code was installed."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return {"unreadable": True}
    if not isinstance(data, dict):
        return {"unreadable": True}
    vcs = data.get("vcs_info") if isinstance(data.get("vcs_info"), dict) else {}
    editable = bool((data.get("dir_info") or {}).get("editable")) if isinstance(data.get("dir_info"), dict) else False
    out: dict[str, Any] = {"url": data.get("url"), "editable": editable}
    if vcs:
        out.update({"vcs": vcs.get("vcs"), "commit_id": vcs.get("commit_id"), "requested_revision": vcs.get("requested_revision")})
    url = data.get("url")
    if editable and isinstance(url, str) and url.startswith("file://"):
        out.update(_git_revision(url[len("file://"):]))
    return out


def _git_revision(folder: str) -> dict[str, Any]:
    """``{"vcs_revision", "vcs_dirty"}`` of the git checkout at ``folder`` (empty when it is none)."""
    import subprocess
    from urllib.parse import unquote

    folder = unquote(folder)
    try:
        rev = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return {}
        dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"vcs_revision": rev.stdout.strip(), "vcs_dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}
