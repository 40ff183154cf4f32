"""``fusebench list benchmarks|objectives|datasets|encoders|metrics|pipelines|rows [PATTERN] [--details]``.

One block per registered id; ``--details`` adds the typed options (:mod:`fusebench.options`: name,
type, default) that a spec may set for the component, and the registry metadata.

A plugin left out of its registry (:class:`~fusebench.registry.PluginWarning`), a plugin that cannot be
imported or described, and a benchmark spec that does not load are each one ``warning:`` line on stderr
naming the plugin's distribution and entry point (or the spec file); the other ids are still listed."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from fusebench.runtime.terminal_help import Parser

KINDS = {
    "objectives": "fusebench.objectives",
    "datasets": "fusebench.datasets",
    "encoders": "fusebench.encoders",
    "metrics": "fusebench.metrics",
    "benchmarks": "fusebench.benchmarks",
    "pipelines": "fusebench.pipelines",
    "rows": "fusebench.components.rows",
}
#: the registry of each kind whose entries may come from entry-point plugins
REGISTRIES = {"objectives": "OBJECTIVES", "datasets": "DATASETS", "encoders": "ENCODERS", "metrics": "METRICS",
              "pipelines": "PIPELINES"}
#: the kinds whose built-ins are listed from :data:`BUILTINS_FILE` (their modules import torch)
TABLED = ("objectives", "datasets", "encoders", "metrics")
#: kind -> id -> {"lines": what ``fusebench list KIND`` prints, "details": what ``--details`` adds}
BUILTINS_FILE = Path(__file__).with_name("listing_builtins.json")


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def hyperparameters(factory: Any) -> list[tuple[str, Any]]:
    """(name, default) of the keyword parameters of a class or function (``inspect.empty`` = required)."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    out = []
    for p in list(inspect.signature(target).parameters.values()):
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append((p.name, p.default))
    return out


def _fmt_hparams(factory: Any) -> str:
    parts = []
    for name, default in hyperparameters(factory):
        parts.append(name if default is inspect.Parameter.empty else f"{name}={default!r}")
    return ", ".join(parts) or "-"


def _options_lines(obj: Any, key: str) -> list[str]:
    from fusebench.options import options_of

    opts = options_of(obj)
    if opts is None:
        return [f"    {key}: open-ended (the class takes **kwargs and declares no options)"]
    return [f"    {key}:"] + [f"      {o}" for o in opts] if opts else [f"    {key}: none"]


def _method_lines(objective: Any) -> list[str]:
    """The pretraining methods an objective builds on, each with its typed options (pretrain.methods.<id>)."""
    from fusebench.options import options_of
    from fusebench.spec.methods import METHODS

    lines = []
    for mid in getattr(objective, "pretrain_methods", ()):
        cls = METHODS.get(mid)
        needs = f" (with {', '.join(cls.requires)})" if cls.requires else ""
        lines.append(f"    pretraining method {mid}{needs}: {_first_line(cls)}")
        opts = options_of(cls) or []
        lines += [f"      options (pretrain.methods.{mid}):"] + [f"        {o}" for o in opts] if opts else []
    return lines


def describe(kind: str, name: str, details: bool = False, where: Path | None = None) -> list[str]:
    lines = _describe(kind, name, where)
    if not details:
        return lines
    pkg = importlib.import_module(KINDS[kind])
    if kind == "objectives":
        lines += [f"    version: {pkg.OBJECTIVES.meta(name).get('version', '1')}"]
        lines += _options_lines(pkg.OBJECTIVES.get(name), "options (pretrain.per_objective.<id>.hparams)")
        lines += _method_lines(pkg.OBJECTIVES.get(name))
    elif kind == "datasets":
        lines += _options_lines(pkg.get(name), "options (dataset.options)")
    elif kind == "encoders":
        lines += _options_lines(pkg.ENCODERS.get(name), "options (encoder.config)")
    elif kind == "metrics":
        m = pkg.get(name)
        lines += [f"    unit: {m.unit}; version: {m.version}"]
    elif kind == "benchmarks":
        spec = pkg.load(name)
        lines += [f"    spec: {pkg.path(name)}", f"    dataset: {spec.dataset.id or spec.pipeline}; encoder: "
                  f"{spec.encoder.id or '-'}; objectives: {', '.join(spec.objectives)}; seeds: {len(spec.seeds)}"]
    return lines


def _describe(kind: str, name: str, where: Path | None = None) -> list[str]:
    pkg = importlib.import_module(KINDS[kind])
    if kind == "objectives":
        cls = pkg.OBJECTIVES.get(name)
        lines = [f"{name}: {_first_line(cls)}", f"    hyperparameters: {_fmt_hparams(cls)}"]
        if getattr(cls, "paper", ""):
            lines.append(f"    paper: {cls.paper}")
        mask = "honours mask" if getattr(cls, "supports_mask", False) else "refuses a mask with missing views"
        lines.append(f"    views (k): {pkg.views_text(cls)}; called as {getattr(cls, 'input_kind', 'views')}; {mask}")
        return lines
    if kind == "datasets":
        cls = pkg.get(name)
        mods = ", ".join(f"{m.name} ({m.kind})" for m in cls.MODALITIES)
        return [f"{name}: {_first_line(cls)}", f"    task: {cls.task}; modalities: {mods}"]
    if kind == "encoders":
        cls = pkg.ENCODERS.get(name)
        return [f"{name}: {_first_line(cls)}", f"    config: {_fmt_hparams(cls)}"]
    if kind == "metrics":
        m = pkg.get(name)
        arrow = "higher is better" if m.higher_is_better else "lower is better"
        return [f"{name}: [{m.task}, {arrow}] {m.description.splitlines()[0] if m.description else ''}"]
    if kind == "benchmarks":  # the file's description only (no torch import); --details checks the whole spec
        from fusebench.typed import ConfigError, read_yaml_file

        where = where or pkg.path(name)  # (``where``: the spec path when the caller has read the folders once)
        raw = read_yaml_file(where)  # a file that is not YAML: one line naming it (as `fusebench run` says), no traceback
        if not isinstance(raw, dict) or not isinstance(raw.get("description"), str):
            raise ConfigError(f"{where}: a benchmark spec is a mapping with a 'description' string")
        return [f"{name}: {raw['description']}"]
    if kind == "rows":
        return pkg.describe(name)
    if kind == "pipelines":
        cls = pkg.PIPELINES.get(name)
        return [f"{name}: {_first_line(cls)}", f"    reads a dataset: {'yes' if cls.reads_dataset else 'no'}; "
                f"downstream protocol: {'yes' if cls.downstream else 'no'}"]
    raise ValueError(kind)


def main(argv: list[str]) -> int:
    parser = Parser(prog="fusebench list", description=__doc__)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("pattern", nargs="?", default=None, help="glob over ids, e.g. 'infonce*'")
    parser.add_argument("--details", action="store_true",
                        help="also print each component's typed options (name: type = default) and metadata")
    ns = parser.parse_intermixed_args(argv)  # `list objectives --details m3g` as `list objectives m3g --details`
    from fusebench.registry import DuplicateIdError, PluginError, PluginWarning, matching

    table = builtin_text(ns.kind)
    if table is not None:  # the built-ins only: from the table, without importing them
        names = matching(table, ns.pattern)
        for name in names:
            print("\n".join(table[name]["lines"] + (table[name]["details"] if ns.details else [])))
        if not names and ns.pattern is not None:
            return _nothing_matches(ns.kind, ns.pattern, list(table))
        return 0
    pkg = importlib.import_module(KINDS[ns.kind])
    registry = getattr(pkg, REGISTRIES.get(ns.kind, ""), None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        try:
            names = pkg.available(ns.pattern)
        except DuplicateIdError as e:  # two built-ins, or two benchmark spec files, with one id
            print(f"fusebench list: {e}", file=sys.stderr)
            return 2
        # benchmarks: the spec folders and entry points read once, not at every id (half the listing's time)
        paths = pkg.index() if ns.kind == "benchmarks" else {}
        left_out = []
        for name in names:
            try:
                print("\n".join(describe(ns.kind, name, ns.details, paths.get(name))))
            except Exception as e:  # noqa: BLE001 - a plugin or a spec file; a built-in's error is a bug: raised
                where = registry.plugin(name) if registry is not None else None
                if isinstance(e, PluginError) or (ns.kind == "benchmarks" and isinstance(e, ValueError)):
                    why = str(e)  # names the plugin's distribution and entry point, or the spec file
                elif where is not None:
                    why = f"{where}: {type(e).__name__}: {e}"
                else:
                    raise
                print(f"warning: {ns.kind[:-1]} {name!r} left out: {' '.join(why.split())}", file=sys.stderr)
                left_out.append(name)
    if ns.kind == "rows" and ns.pattern is None:
        print(pkg.PRETRAINED_LINE)
    shown = set()
    for w in caught:  # before an exact id's 'no such id': a plugin or spec left out may be why it is missing
        if issubclass(w.category, PluginWarning):
            if str(w.message) not in shown:  # the spec folders are read at every lookup: once each
                shown.add(str(w.message))
                print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if not names and ns.pattern is not None:
        return _nothing_matches(ns.kind, ns.pattern, pkg.available())
    # the one id asked for could not be described (a plugin that does not import, a spec file that does not
    # load): the warning says why, and the status says it failed, as for an id that does not exist
    return 1 if _is_exact(ns.pattern) and ns.pattern in left_out else 0


def _is_exact(pattern: str | None) -> bool:
    """Whether PATTERN names one id (no glob character): then an id that does not exist is an error."""
    return pattern is not None and not any(c in pattern for c in "*?[")


def _nothing_matches(kind: str, pattern: str, ids: list[str]) -> int:
    """An id that is not registered (a typo such as ``m3gg``) is said on stderr with the closest id, as
    ``fusebench run`` says it, instead of an empty listing and exit status 0; returns 1. A glob that matches
    nothing is a query with no answer, not an error: said on stderr (an empty listing looked like a failure to
    print), exit status 0."""
    from fusebench.registry import closest

    if not _is_exact(pattern):
        print(f"fusebench list: no {kind[:-1]} matches {pattern!r} (fusebench list {kind} lists them)", file=sys.stderr)
        return 0
    hint = closest(pattern, list(ids))
    print(f"fusebench list: no {kind[:-1]} {pattern!r}"
          + (f"; did you mean {hint!r}?" if hint else f" (fusebench list {kind} lists them)"), file=sys.stderr)
    return 1


# ---- the built-ins' text, without importing them (issue #32, item 7) -------------------------------------------
# (here, not in the module docstring, which is `fusebench list --help`'s description)
# The built-in objectives, datasets, encoders and metrics are listed from fusebench/cli/listing_builtins.json
# (BUILTINS_FILE): the lines this module prints for each of them, with and without --details, so that
# `fusebench list objectives|datasets|encoders|metrics` imports no component module (no torch). The table answers
# while the kind has no entry-point plugin and nothing else is registered in this process (builtin_text);
# otherwise the registries answer, as they always did. tests/test_listing_builtins.py rebuilds the file from the
# live registries and compares; after changing what a built-in's listing shows, regenerate it with
#     python -c "from fusebench.cli.listing import write_builtins; write_builtins()"
# (imports every built-in, so torch).
def builtin_text(kind: str) -> dict[str, dict[str, list[str]]] | None:
    """id -> ``{"lines", "details"}`` of every built-in of ``kind`` from :data:`BUILTINS_FILE`, where that is
    the whole answer: ``kind`` is one of :data:`TABLED`, no entry-point plugin is installed for it, and, when its
    package is imported already, nothing but built-ins is registered in it. None otherwise (the registries
    answer). Imports no component module."""
    if kind not in TABLED:
        return None
    from fusebench import registry

    if list(registry.entry_points(group=f"fusebench.{kind}")):
        return None
    try:
        table = json.loads(BUILTINS_FILE.read_text(encoding="utf-8"))[kind]
    except FileNotFoundError:  # an install without the file: the registries answer
        return None
    pkg = sys.modules.get(KINDS[kind])
    live = getattr(pkg, REGISTRIES[kind], None) if pkg is not None else None
    if live is not None and not live.registered_so_far() <= set(table):
        return None
    return table


def live_builtin_text() -> dict[str, dict[str, dict[str, list[str]]]]:
    """What :data:`BUILTINS_FILE` holds, computed from the live registries (imports every built-in: torch):
    kind -> id -> ``{"lines", "details"}`` for the built-ins (entry-point plugins left out) of :data:`TABLED`."""
    out: dict[str, dict[str, dict[str, list[str]]]] = {}
    for kind in TABLED:
        pkg = importlib.import_module(KINDS[kind])
        registry = getattr(pkg, REGISTRIES[kind])
        out[kind] = {}
        for name in pkg.available():
            if registry.plugin(name) is None:
                lines = _describe(kind, name)
                out[kind][name] = {"lines": lines, "details": describe(kind, name, details=True)[len(lines):]}
    return out


def write_builtins(path: Path | str = BUILTINS_FILE) -> Path:
    """Write :func:`live_builtin_text` to ``path`` (default :data:`BUILTINS_FILE`): after a change to what
    ``fusebench list`` shows of a built-in. ``python -c "from fusebench.cli.listing import write_builtins;
    write_builtins()"``."""
    path = Path(path)
    path.write_text(json.dumps(live_builtin_text(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
