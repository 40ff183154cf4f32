"""Typed parsing of settings (layer 0): a mapping read from YAML or ``--set`` becomes a dataclass, with
every key and type checked, and one :class:`ConfigError` naming the key (``where``) and what was
expected when something is wrong. The benchmark spec (:mod:`fusebench.spec.config`) and the
pretraining methods' options (:mod:`fusebench.spec.methods`) are parsed with it.

YAML settings are read with :func:`load_yaml`: PyYAML's safe loader (plain data only) within two limits,
checked while the document is composed, before any Python object is built: nesting depth
(:data:`YAML_MAX_DEPTH`) and the document's size once its aliases are expanded (:data:`YAML_MAX_EXPANDED`,
nodes plus scalar characters, so an alias bomb is refused however small its file). A document over
either limit, or with an alias inside its own anchor, is one :class:`ConfigError` naming the file and
the limit (never a ``RecursionError``, never a run that serialises the expansion)."""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import re
import types
import typing
from typing import Any

import yaml


class ConfigError(ValueError):
    """A benchmark spec or an override is invalid; the message names the file and the key."""


def check_type(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the type hint ``tp``, returned as checked; a :class:`ConfigError` naming ``where``
    otherwise. The one type check of settings (the spec's dataclasses here, the components' declared options in
    :func:`fusebench.options.check_options`). Checked: ``Any``; unions / optionals; ``int`` / ``float`` / ``str`` /
    ``bool`` (an int is widened to a float, a bool is never a number); sequences (``list[T]``, ``tuple[T, ...]``,
    ``tuple[A, B]`` one item per slot, ``Sequence[T]``, bare ``list`` / ``tuple``: a list or a tuple, never text, with
    each item checked; a ``list[T]`` comes back as a list); mappings (``dict[K, V]``, ``Mapping[K, V]``, bare
    ``dict``: each key and value checked); a dataclass (built with :func:`from_dict`). Anything richer (a callable, a
    tensor, a class) passes unchecked."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected None, got {type(value).__name__} {value!r}")
        return None
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
        raise ConfigError(errors[0] if len(errors) == 1 else
                          f"{where}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if origin in (list, tuple, collections.abc.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):  # a YAML list (a string is a sequence too: refused)
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:  # tuple[int, float]: one item per slot
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected a list of {len(args)} items ({_type_name(tp)}), got "
                                  f"{len(value)}: {value!r}")
            items = [check_type(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args))]
        else:
            items = [check_type(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
        return items if origin is list or tp is list else type(value)(items)
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
        if len(args) != 2:
            return value
        for k in value:
            check_type(k, args[0], f"{where} key {k!r}")
        return {k: check_type(v, args[1], f"{where}.{k}") for k, v in value.items()}
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


def matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` passes :func:`check_type` against ``tp`` (the same rules, as a predicate)."""
    try:
        check_type(value, tp, "")
    except ConfigError:
        return False
    return True


def _type_name(tp: Any) -> str:
    """``tp`` as a spec writer reads it: ``float``, ``list[int]``, ``int | None``."""
    return getattr(tp, "__name__", None) if isinstance(tp, type) and not typing.get_args(tp) else \
        str(tp).replace("typing.", "").replace("collections.abc.", "")


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass ``cls`` from ``data`` checking keys and types (``where`` prefixes errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields, key=repr)
    if unknown:  # named as a spec writes them where the class says so (``spec_keys``: a layout the reader regroups)
        shown = sorted(cls.spec_keys()) if callable(getattr(cls, "spec_keys", None)) else sorted(fields)
        hint = difflib.get_close_matches(str(unknown[0]), shown, n=1, cutoff=0.6)
        raise ConfigError(f"{where or cls.__name__}: unknown key(s) {unknown}"
                          + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; valid keys: {shown}")
    kwargs = {k: check_type(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


#: the deepest nesting of mappings / lists a YAML settings document may have (the specs use under 10)
YAML_MAX_DEPTH = 50
#: the largest size a YAML settings document may have once its aliases are expanded: nodes plus scalar
#: characters (the largest shipped spec is under 10,000)
YAML_MAX_EXPANDED = 1_000_000


class _Limit(Exception):
    """A YAML document over a limit of :func:`load_yaml` (turned into a ConfigError naming the source)."""


class _DuplicateKey(_Limit):
    """A mapping of a YAML document that gives one key twice (PyYAML keeps the last one silently)."""


class DeprecatedKeyWarning(FutureWarning):
    """An old spec key was given and mapped onto its new place: a flat ``pretrain.*`` method key (e.g.
    ``pretrain.tuple_candidates`` -> ``pretrain.methods.tuple_infonce.candidates``) or a per-objective table
    written flat in a spec file (``pretrain.grid`` -> ``pretrain.per_objective.<id>.grid``). A
    :class:`FutureWarning`, the category Python shows by default for deprecations aimed at the users of a program
    (so ``fusebench run --set pretrain.tuple_candidates=8`` prints it) without any change to ``warnings.filters``:
    ``-W`` options and a user's filters decide, as for any warning."""


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses, while composing, a document nested deeper than
    :data:`YAML_MAX_DEPTH` or larger than :data:`YAML_MAX_EXPANDED` once its aliases are expanded
    (an alias is the same node object as its anchor: sizes are counted once per node, in linear time)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._level += 1
        try:
            if self._level > YAML_MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _Limit(f"nested deeper than {YAML_MAX_DEPTH} levels (line {line}), the limit of a settings "
                             f"document")
            return super().compose_node(parent, index)
        finally:
            self._level -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded(node, 1, {}, set())
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping that gives one key twice is refused (PyYAML would keep the last value and drop the first
        without a word); keys a merge (``<<: *anchor``) brings in may still be overridden, as YAML defines."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class raises its own error for it
                    continue
                if first is not None:
                    raise _DuplicateKey(f"key {key!r} given twice in one mapping (lines {first} and {line}); a YAML "
                                        f"reader would keep the second value and drop the first without a word: "
                                        f"give it once")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 (and JSON) read ``1e-3`` as a number; PyYAML's YAML 1.1 resolver needs a dot (``1.0e-3``) and hands
# back the string '1e-3', which a spec's float field then refuses ("expected float, got str"): exponent numbers
# without a dot resolve as floats here (YAML 1.2's core-schema rule; a quoted '1e-3' stays a string)
BoundedSafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _expanded(node: yaml.Node, level: int, memo: dict[int, tuple[int, int]], active: set[int]) -> tuple[int, int]:
    """(size, depth) of ``node`` with every alias expanded: size = nodes + scalar characters, depth = levels
    below and including it; :class:`_Limit` as soon as ``level`` + depth or the size passes a limit."""
    key = id(node)
    if key in memo:
        size, depth = memo[key]
    elif key in active:
        raise _Limit("an alias used inside its own anchor (a recursive document)")
    elif level > YAML_MAX_DEPTH:
        raise _Limit(f"nested deeper than {YAML_MAX_DEPTH} levels once its aliases are expanded, the limit of a "
                     f"settings document")
    else:
        active.add(key)
        if isinstance(node, yaml.ScalarNode):
            children: list[yaml.Node] = []
            size, depth = 1 + len(node.value), 1
        else:
            children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
            size, depth = 1, 1
        for child in children:
            s, d = _expanded(child, level + 1, memo, active)
            size, depth = size + s, max(depth, d + 1)
            if size > YAML_MAX_EXPANDED:
                raise _Limit(f"larger than {YAML_MAX_EXPANDED:,} nodes and scalar characters once its aliases are "
                             f"expanded, the limit of a settings document (an alias bomb?)")
        active.discard(key)
        memo[key] = (size, depth)
    if level - 1 + depth > YAML_MAX_DEPTH:
        raise _Limit(f"nested deeper than {YAML_MAX_DEPTH} levels once its aliases are expanded, the limit of a "
                     f"settings document")
    return size, depth


def load_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML by :class:`BoundedSafeLoader`; a document over its limits is a
    :class:`ConfigError` ``"<source>: ..."``; invalid YAML raises ``yaml.YAMLError`` as ``yaml.safe_load`` does."""
    try:
        return yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except _Limit as e:
        raise ConfigError(f"{source}: {e}") from None
    except RecursionError:  # a limit above should come first; never a traceback for a settings file
        raise ConfigError(f"{source}: nested too deeply to read (limit {YAML_MAX_DEPTH} levels)") from None


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML parser error as one line: what is wrong and where in the file (``expected ',' or '}', but got
    '<stream end>' at line 3, column 1 (while parsing a flow mapping at line 2, column 10)``), not PyYAML's
    several lines quoting an ``"<unicode string>"`` and a caret: a message of a spec file stays one line."""
    if not isinstance(error, yaml.MarkedYAMLError) or not error.problem:
        return " ".join(str(error).split())

    def at(mark: Any) -> str:
        return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""

    said = f"{error.problem}{at(error.problem_mark)}"
    if error.context:
        said += f" ({error.context}{at(error.context_mark)})"
    return said


def read_yaml_file(path: Any) -> Any:
    """The YAML file at ``path`` (a spec), read as UTF-8 within :func:`load_yaml`'s limits; one :class:`ConfigError`
    naming the file for what is not valid YAML (:func:`yaml_problem`'s one line) or cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return load_yaml(f.read(), str(path))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as a UTF-8 YAML file: {e}") from None


__all__ = ["YAML_MAX_DEPTH", "YAML_MAX_EXPANDED", "BoundedSafeLoader", "ConfigError", "DeprecatedKeyWarning",
           "check_type", "from_dict", "matches", "load_yaml", "read_yaml_file", "yaml_problem"]
