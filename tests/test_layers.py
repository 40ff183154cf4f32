"""The package's structure, checked from the source: every module in a layer and imports only downward,
no import cycle (function-level imports counted: a cycle may not hide behind one), no module over ~450
lines without saying why, one version.

The import graph is read with ``ast`` from every module of the ``fusebench`` namespace (``fusebench/``
and the folders mapped into it: ``objectives/``, ``encoders/``, ``datasets/``, ``benchmarks/``). Every
``import`` / ``from ... import`` statement counts, wherever it sits (module level, inside a function or
a class), except, for the layer rule, those under ``if TYPE_CHECKING:`` (annotations only: never executed); the
cycle check counts those too, so a cycle cannot hide behind an annotation. An
``importlib.import_module("fusebench....")`` call with a literal name is an import by a fixed name and an
edge like a statement. An import of ``a.b.c`` is an edge to the innermost module of the package that
exists (``from a.b import c`` to ``a.b.c`` when ``c`` is a module, else to ``a.b``). Lookups by a name
computed at run time through a registry's module list or an entry point are not edges: that is how a
lower layer finds the components registered above it.

``docs/architecture.md``'s layer table is read back and compared with :data:`FOLDERS` and :data:`ROOT_MODULES`
(:func:`test_the_architecture_doc_places_every_module_as_the_layer_rule_does`), and the layer rule is checked a second
time from that table alone, with relative imports resolved by ``importlib.util.resolve_name`` and ``__import__`` /
``pkgutil.resolve_name`` calls counted too (:func:`test_an_independent_reading_finds_no_upward_import`)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fusebench": ROOT / "fusebench", "fusebench.objectives": ROOT / "objectives",
            "fusebench.encoders": ROOT / "encoders", "fusebench.datasets": ROOT / "datasets",
            "fusebench.benchmarks": ROOT / "benchmarks"}
MAPPED = {name.rpartition(".")[2] for name in PACKAGES if name != "fusebench"}
#: a module longer than this must say in its docstring why it is one module (a paragraph with "longer than")
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, root in PACKAGES.items():
        for f in sorted(root.rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if pkg == "fusebench" and parts and parts[0] in MAPPED:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("<literal>")`` / ``import_module("<literal>")``."""
    return isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == \
        "import_module" and len(node.args) >= 1 and isinstance(node.args[0], ast.Constant) and \
        isinstance(node.args[0].value, str)


def _imports(tree: ast.AST, type_checking: bool = False):
    """Every import statement of ``tree`` (those under ``if TYPE_CHECKING:`` only when ``type_checking``),
    and every ``import_module`` call with a literal name, as an ``ast.Import`` of that name."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif _is_import_module(node):
            yield ast.Import(names=[ast.alias(name=node.args[0].value)])
        stack.extend(ast.iter_child_nodes(node))


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """module -> the modules it imports (see the module doc); ``type_checking``: imports under
    ``if TYPE_CHECKING:`` count too."""
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = m.split(".") if is_pkg else m.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                t = owner(t)
                if t is not None and t != m:
                    graph[m].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("import x\nif TYPE_CHECKING:\n    import y\ndef f():\n    from z import w\n"
                     "    importlib.import_module('v')\n    importlib.import_module(name)\n")

    def names(nodes):
        return sorted(n.names[0].name if isinstance(n, ast.Import) else n.module for n in nodes)

    assert names(_imports(tree)) == ["v", "x", "z"]
    assert names(_imports(tree, type_checking=True)) == ["v", "x", "y", "z"]


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "fusebench.cells.standard" in graph and "fusebench.objectives.m3g" in graph
    # a function-level import is an edge: the standard cell imports the objectives inside StandardCell.pretrain
    assert "fusebench.objectives" in graph["fusebench.cells.standard"]
    assert "fusebench.spec.config" in graph["fusebench.sweep.runner"]


#: import cycles known and accepted, each a sorted list of its modules with the reason; empty: there are none.
#: (Issue #35 broke the last four, all through annotations or function-level imports: datasets.base /
#: datasets.cache, records.comparability / records.schema, datasets.nyuv2.formats / .layouts,
#: leaderboard.groups / leaderboard.ties: each shared piece moved below both modules.)
ALLOWED_CYCLES: list[tuple[list[str], str]] = []


def test_no_import_cycle() -> None:
    """No cycle among the modules, counting every import statement wherever it sits (inside a function, under
    ``if TYPE_CHECKING:``) and every ``import_module`` of a literal name."""
    allowed = [c for c, _why in ALLOWED_CYCLES]
    found = [c for c in cycles(import_graph(type_checking=True)) if c not in allowed]
    assert not found, "import cycles (every import statement counts, function-level and TYPE_CHECKING ones " \
        "too):\n" + "\n".join(" <-> ".join(c) for c in found)


#: the layers of docs/architecture.md ("Layers"), lowest first: a folder of the package is one layer (every module
#: in it, its sub-folders included); a module may import from its own layer and the ones below, never from a
#: higher one.
FOLDERS: dict[str, int] = {
    "fusebench.runtime": 0,  # seeds, devices, git info, progress lines, DDP, SIGTERM
    "fusebench.spec": 1,  # the benchmark spec, method declarations, precision, requests
    "fusebench.objectives": 2, "fusebench.datasets": 2, "fusebench.encoders": 2, "fusebench.metrics": 2,
    "fusebench.benchmarks": 2, "fusebench.components": 2,  # components, and the spec checked against them
    "fusebench.engine": 3, "fusebench.probes": 3,  # the phase loop, data, checkpoints; probes on embeddings
    "fusebench.records": 4,  # building, validating, storing and comparing run records
    "fusebench.cells": 5,  # the cell functions the pipelines name
    "fusebench.sweep": 6, "fusebench.studies": 6,  # runner, selection, launchers; the k-views study
    "fusebench.leaderboard": 7, "fusebench.cli": 7, "fusebench.perf": 7,  # boards, the command line, benches
}
#: the modules at the package root: the basics every layer uses (layer 0), the registries of tasks and pipelines
#: (declarations, layer 2: their entry-point groups carry these names), and the public entry points
#: (``fusebench.results``, ``python -m fusebench``, the ``fusebench.run`` facade of the package itself)
ROOT_MODULES: dict[str, int] = {
    **{f"fusebench.{m}": 0 for m in
       ("registry", "io", "typed", "version", "machine", "options", "geometry3d", "grids")},
    "fusebench.tasks": 2, "fusebench.pipelines": 2,
    "fusebench.results": 5,  # per-seed results as data (read through fusebench.records)
    "fusebench.__main__": 7,
    "fusebench": 8,  # the package root: the fusebench.run facade over the sweep
}


def folder_of(module: str) -> str:
    """The node of ``module`` in the folder graph: its top folder under ``fusebench`` (``fusebench.datasets.nyuv2.formats``
    -> ``fusebench.datasets``), or the module itself at the package root."""
    if module in ROOT_MODULES:
        return module
    return ".".join(module.split(".")[:2])


def layer_of(module: str) -> int | None:
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    return FOLDERS.get(folder_of(module))


def test_no_folder_level_cycle() -> None:
    """The folders (and the root modules) as nodes, an edge where any module of one imports any of the other
    (function-level and ``TYPE_CHECKING`` imports included): no cycle."""
    graph: dict[str, set[str]] = {}
    for m, deps in import_graph(type_checking=True).items():
        node = graph.setdefault(folder_of(m), set())
        node.update(folder_of(t) for t in deps if folder_of(t) != folder_of(m))
    for deps in list(graph.values()):
        for t in deps:
            graph.setdefault(t, set())
    found = cycles(graph)
    assert not found, "folder-level import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_folder_is_one_layer() -> None:
    """Every module lies in a folder of :data:`FOLDERS` or is a root module of :data:`ROOT_MODULES`: no folder
    outside the table, no loose module at the root."""
    loose = sorted(m for m in _modules() if m not in ROOT_MODULES and folder_of(m) not in FOLDERS)
    assert not loose, f"modules in no folder of FOLDERS and not a root module of ROOT_MODULES: {loose}"


def test_every_module_has_a_layer_and_imports_only_downward() -> None:
    graph = import_graph()
    assert not [m for m in graph if layer_of(m) is None], "modules without a layer (add their folder to FOLDERS)"
    upward = sorted(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
                    for m, deps in graph.items() for t in deps if layer_of(t) > layer_of(m))
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def _doc_layers() -> dict[str, int]:
    """``{path named in the table: layer}`` from docs/architecture.md's "Layers" table: the backquoted
    repository paths (a folder ``a/b/``, or a module ``a/b.py``) of each row's modules column."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    out: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        for path in re.findall(r"`((?:[\w.]+/)+(?:\w+\.py)?)`", cells[2]):  # a bare `name.py` is a note
            assert path not in out, f"docs/architecture.md names {path} twice"
            out[path] = int(cells[0])
    return out


def _module_of(path: str) -> str:
    """The module a repository path names: ``fusebench/engine/loop.py`` -> ``fusebench.engine.loop``,
    ``objectives/`` -> ``fusebench.objectives``, ``fusebench/__init__.py`` -> ``fusebench``."""
    parts = path.rstrip("/").removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] in MAPPED:
        parts = ["fusebench", *parts]
    return ".".join(parts)


def test_the_architecture_doc_places_every_module_as_the_layer_rule_does() -> None:
    mods = _modules()
    table = {_module_of(p): (p, n) for p, n in _doc_layers().items()}
    missing = sorted(f"{p} (no module {m})" for m, (p, _) in table.items()
                     if m not in mods and not (ROOT / p).is_dir())
    assert not missing, f"docs/architecture.md's layer table names what does not exist: {missing}"

    def doc_layer(module: str) -> int | None:  # the most specific entry: the module itself, else its folder
        name = module
        while name:
            if name in table:
                return table[name][1]
            name = name.rpartition(".")[0]
        return None

    wrong = sorted(f"{m}: doc says {doc_layer(m)}, the rule says {layer_of(m)}" for m in mods
                   if doc_layer(m) != layer_of(m))
    assert not wrong, "docs/architecture.md's layer table disagrees with FOLDERS / ROOT_MODULES:\n" + "\n".join(wrong)


def test_long_modules_say_why() -> None:
    long = []
    for name, path in _modules().items():
        n = len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if n > MAX_LINES and "longer than" not in " ".join(doc.split()):
            long.append(f"{path.relative_to(ROOT)} ({n} lines)")
    assert not long, f"modules over {MAX_LINES} lines whose docstring does not say why (\"longer than ...\"): {long}"


def test_one_version() -> None:
    tomllib = pytest.importorskip("tomllib")
    from fusebench import __version__
    from fusebench.version import __version__ as recorded

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == recorded == declared


#: the declaration slots where a module may name a module of a higher layer by its import path (docs/architecture.md,
#: "Layers": a lower layer finds what is registered above it by id, through a registry's module list or a declared
#: import path): the arguments of a ``Registry(...)`` call, and a class-level ``cell`` (a pipeline's cell function),
#: ``scorer`` / ``option_checker`` (a protocol's) or ``extensions`` (a pretraining method's epoch steps)
DECLARED_PATH_SLOTS = ("cell", "scorer", "option_checker", "extensions")
_MODULE_PATH = re.compile(r"(fusebench(?:\.\w+)+)(?::[\w.]+)?")


def _string_edges(tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every string literal of ``tree`` that is a fusebench module's import path
    (``"fusebench.a.b"`` or ``"fusebench.a.b:attr"``) outside :data:`DECLARED_PATH_SLOTS` and ``Registry(...)``
    arguments: an import by a fixed name however it is made (``importlib.import_module(name)`` on a parameter,
    a helper that imports its argument, ``pkgutil.resolve_name``)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Registry":
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
                    if isinstance(stmt, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id in DECLARED_PATH_SLOTS for t in targets):
                    skip.update(id(n) for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _MODULE_PATH.fullmatch(node.value.strip())
            if m:
                out.append((m.group(1), node.lineno))
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            # f"fusebench.cells.{name}": a module of the package its literal prefix names
            head = str(node.values[0].value)
            if re.fullmatch(r"fusebench(?:\.\w+)+\.", head):
                out.append((head[:-1], node.lineno))
            for v in node.values[1:]:
                skip.update(id(n) for n in ast.walk(v))
    return out


def test_no_upward_import_by_a_string_path() -> None:
    """The layer rule holds for modules named by a literal import path too, wherever the literal sits (not only
    as ``import_module``'s first argument): ``_registered("fusebench.pipelines", "applied_form")`` is an import
    statement in all but name."""
    mods = _modules()
    upward = []
    for m, path in mods.items():
        for name, line in _string_edges(ast.parse(path.read_text(), str(path))):
            if name not in mods or name == m:
                continue  # an entry-point group ("fusebench.rows"), a logger name, the module itself
            if layer_of(name) > layer_of(m):
                upward.append(f"{path.relative_to(ROOT)}:{line}: {m} (layer {layer_of(m)}) names {name!r} "
                              f"(layer {layer_of(name)})")
    assert not upward, "modules named by path from a lower layer:\n" + "\n".join(sorted(upward))


def test_string_edges_sees_a_helper_import_and_skips_the_declared_slots() -> None:
    tree = ast.parse("R = Registry('x', modules=('fusebench.cells.standard',))\n"
                     "class P:\n    cell = 'fusebench.cells.standard:run_standard_cell'\n"
                     "def f():\n    return _registered('fusebench.pipelines', 'applied_form')\n"
                     "G = 'fusebench.rows'\n"
                     "H = importlib.import_module(f'fusebench.cells.{name}')\n")
    assert sorted(_string_edges(tree)) == [("fusebench.cells", 7), ("fusebench.pipelines", 5), ("fusebench.rows", 6)]


# ---------------------------------------------------------------------------------------------
# a second, independent reading of the layer rule: the layers straight from docs/architecture.md's table (not
# FOLDERS / ROOT_MODULES), relative imports resolved by importlib's own rule, and the dynamic import calls
# (``importlib.import_module``, ``__import__``, ``pkgutil.resolve_name``) with a literal name counted as imports
# ---------------------------------------------------------------------------------------------
def _doc_layer_of_path(rel: str, table: dict[str, int]) -> int | None:
    """The layer docs/architecture.md gives the file ``rel`` (a repository path): its own row, else the row of the
    nearest folder above it."""
    if rel in table:
        return table[rel]
    parts = rel.split("/")
    for i in range(len(parts) - 1, 0, -1):
        folder = "/".join(parts[:i]) + "/"
        if folder in table:
            return table[folder]
    return None


def _imported_names(module: str, is_pkg: bool, source: str) -> list[tuple[str, int]]:
    """(absolute dotted name, line) of every import of ``source`` executed at run time (anywhere: module level,
    functions, classes; not under ``if TYPE_CHECKING:``), ``from a import b`` giving ``a.b`` (the owner lookup
    falls back to ``a`` when ``b`` is not a module)."""
    from importlib.util import resolve_name

    package = module if is_pkg else module.rpartition(".")[0]
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skipped.update(id(n) for s in node.body for n in ast.walk(s))
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and ast.unparse(node.func).rpartition(".")[2] in ("import_module", "__import__", "resolve_name"):
            out.append((node.args[0].value.partition(":")[0], node.lineno))
    return out


def _upward_imports_by_the_doc(mods: dict[str, tuple[str, bool, str]], table: dict[str, int]) -> list[str]:
    """``mods``: module -> (repository path, is a package, source). Every import that goes to a module of a
    higher layer than the importer's, both layers read from ``table`` (path -> layer)."""
    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out = []
    for m, (rel, is_pkg, source) in sorted(mods.items()):
        mine = _doc_layer_of_path(rel, table)
        for name, line in _imported_names(m, is_pkg, source):
            target = owner(name)
            if target is None or target == m:
                continue
            theirs = _doc_layer_of_path(mods[target][0], table)
            if mine is None or theirs is None or theirs > mine:
                out.append(f"{rel}:{line}: {m} (layer {mine}) imports {target} (layer {theirs})")
    return out


def test_an_independent_reading_finds_no_upward_import() -> None:
    mods = {m: (str(p.relative_to(ROOT)), p.name == "__init__.py", p.read_text()) for m, p in _modules().items()}
    upward = _upward_imports_by_the_doc(mods, _doc_layers())
    assert not upward, "imports that go up a layer of docs/architecture.md's table:\n" + "\n".join(upward)


def test_the_independent_reading_sees_relative_function_level_and_dynamic_imports() -> None:
    table = {"pkg/low/": 0, "pkg/high/": 3, "pkg/top.py": 5}
    mods = {
        "fusebench.low": ("pkg/low/__init__.py", True, "def f():\n    from ..high import thing\n"),
        "fusebench.low.a": ("pkg/low/a.py", False, "import importlib\nX = importlib.import_module('fusebench.top')\n"
                            "if TYPE_CHECKING:\n    import fusebench.top\n"),
        "fusebench.low.b": ("pkg/low/b.py", False, "from . import a\nfrom .a import X\n"),  # same layer: fine
        "fusebench.high": ("pkg/high/__init__.py", False, "from fusebench.low import b\n"),  # downward: fine
        "fusebench.top": ("pkg/top.py", False, "__import__('fusebench.high')\n"),
        "fusebench": ("pkg/__init__.py", True, ""),
    }
    got = _upward_imports_by_the_doc(mods, table)
    assert [g.split(": ", 1)[1] for g in got] == [
        "fusebench.low (layer 0) imports fusebench.high (layer 3)",
        "fusebench.low.a (layer 0) imports fusebench.top (layer 5)",
    ], got
