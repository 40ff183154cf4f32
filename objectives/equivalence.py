"""Which registered objectives compute the same loss: one leaderboard row per distinct loss.

Two objective ids compute *the same loss* at k views when, built with the same hyper-parameters (see
below), they return the same value and the same gradient with respect to every differentiable input,
for every input they both accept (views ``[k, n, d]``, and masks where both honour masks), up to
floating-point rounding (the two computations may sum in a different order). Training with one or the
other is then the same computation, and runs that differ only in the objective id are the same runs;
a leaderboard shows them as one row. Losses that are only proportional (``m3g(cost="cv", eps)`` =
``matching_gap(cost="sqeuclid", eps=4 eps) / 4`` at k = 2) or equal up to an additive constant
(``pvc_arithmetic(variant="reference_code")`` = NT-Xent - log n at k = 2; ``dhel(variant=
"reference_code")`` = ``dhel()`` + log 2) are *not* the same loss here: their values differ.

Declaration (the contract for objective classes)
------------------------------------------------

An objective class may declare, in its own class body::

    same_loss_as: ClassVar[dict[str, int | str]] = {"infonce_pwe": 2}

mapping another registered objective id to where the two compute the same loss: an integer N >= 2 (at
N views only) or ``"all"`` (every k both objectives accept). Every built-in equivalence is one of these two
(six at k = 2, one for every k); there is no condition language beyond them.

Rules:

- The relation is symmetric and transitive: a pair is declared once, on either class; the pairs
  that follow from the declarations (``a ~ b`` and ``b ~ c`` at k give ``a ~ c`` at k) are derived
  over all registered objectives, so two ids linked only through a third one are merged even when the
  third one is not among the ids asked about. (When only built-in ids are asked about, the closure is
  taken over the built-ins: a plugin's declarations cannot link two built-ins, which would mean a
  missing built-in declaration.) Two ids registered with the same class are the same loss for every k.
- The declaration is read from the class's own namespace (``vars(cls)``), never inherited: a subclass
  usually changes the loss, so it must declare its own equivalences.
- Both objectives must have the same ``input_kind`` (a "views" loss and a "pairs" loss are never the
  same); the target must be a registered id other than the class's own; a malformed declaration
  raises ``ValueError`` naming the class.
- The identity must hold when both are built with :func:`same_hparams` hyper-parameters: equal values
  of every hyper-parameter both take (``tau``; ``variant`` where both take one) and the default of
  every hyper-parameter only one of them takes (``renormalise`` of ``infonce_avg``, ``variant`` of
  ``pvc_arithmetic``). It must hold with masks wherever both objectives honour masks.
- ``tests/test_objective_equivalence.py`` checks every derived pair numerically (values and gradients
  on seeded random inputs, several k for ``"all"``) and checks that every pair of same-kind objectives
  that is *not* declared at some k gives a different value or gradient there, so a missing
  declaration fails the tests.

Declared in the built-in objectives (derivations in each loss module's docstring):

- ``multicrop`` = ``infonce_pwe`` for every k (poly-view Eq. 1 over ordered pairs of the one-sided
  SimCLR term = mean over unordered pairs of symmetric NT-Xent);
- at k = 2, ``infonce_avg``, ``pvc_geometric``, ``pvc_arithmetic`` and ``suff_stats`` = ``infonce_pwe``
  (the mean of the rest is the other view, and each is SimCLR's NT-Xent), so with ``multicrop`` six
  rows coincide; ``mv_infonce`` does not (one log per sample over both anchors' candidates, no
  same-view negatives);
- ``dhel`` = ``mv_dhel`` at k = 2 (``dhel`` takes k = 2 only), for both shared variants;
- ``byol_avg`` = ``byol_pwe`` at k = 2 (the normalised mean of the other target is the other target).

Without torch: :data:`BUILTIN` repeats, for every built-in objective, what its class declares (input
kind, view limits, ``same_loss_as``, hyper-parameter defaults), so that questions about built-in ids
(a leaderboard regeneration) import no objective module and no torch. The classes stay the source:
:func:`declarations` (which loads the registry) raises when a built-in class and the table disagree,
and the tests compare them for every built-in id. An id missing from the table (a plugin registered
through the entry points) is looked up in the registry, which imports its module.

Hyper-parameters and the leaderboard
------------------------------------

The identities hold for equal hyper-parameters only: ``multicrop(tau=0.5)`` is not
``infonce_pwe(tau=0.1)``. A leaderboard merges the rows of two objectives only when
:func:`groups` puts them together at the board's k **and** the runs' hyper-parameters (a record's
``hparams``, the values chosen on the validation split where a grid was searched) satisfy
:func:`same_hparams` with the objective ids given, and the runs are in the same comparability group
(same data, encoder, pretraining settings and seeds). Otherwise the rows stay apart. The rule is
conservative: it may keep apart runs that happen to train identically (``infonce_avg(renormalise=
True)`` at k = 2, an additive-constant variant), never merge runs that differ.

k is the number of views the objectives are called on (the dataset's modalities). Every objective's view
limits are checked against it (:func:`fusebench.objectives.accepts_views`, the one rule); a "tuple" objective
(``tuple_infonce``) fuses the k modalities into tuples and declares k >= 2.

Example::

    >>> from fusebench.objectives.equivalence import canonical, groups, same_hparams
    >>> groups(["infonce_pwe", "multicrop", "mv_dhel", "dhel", "infonce_avg"], k=2)
    [['infonce_pwe', 'multicrop', 'infonce_avg'], ['mv_dhel', 'dhel']]
    >>> groups(["infonce_avg", "infonce_pwe", "multicrop"], k=3)
    [['infonce_avg'], ['infonce_pwe', 'multicrop']]
    >>> groups(["none", "multicrop", "infonce_pwe", "my_plugin"], 3, references=["none"], unknown="alone")
    [['none'], ['multicrop', 'infonce_pwe'], ['my_plugin']]
    >>> canonical("suff_stats", 2, among=["m3g", "pvc_geometric", "suff_stats"])
    'pvc_geometric'
    >>> same_hparams({}, {"tau": 0.1}, "infonce_pwe", "multicrop")     # tau = 0.1 is the default
    True
    >>> same_hparams({"tau": 0.1}, {"tau": 0.1, "variant": "reference_code"}, "infonce_pwe", "pvc_arithmetic")
    False

This module is longer than ~450 lines because the table of declared equivalences and the rules that
group rows by it (which k, which hyper-parameters) are one unit: a row of the table is only meaningful
with the grouping code that reads it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from fusebench.objectives import OBJECTIVES, accepts_views, views_text

__all__ = [
    "ALL",
    "BUILTIN",
    "Condition",
    "Declared",
    "declared_of",
    "parse_condition",
    "declarations",
    "same_loss",
    "groups",
    "canonical",
    "same_hparams",
]

#: a declaration's value for "every k both objectives accept" (else an integer: that k only)
ALL = "all"
#: the class attribute read by this module
ATTRIBUTE = "same_loss_as"
#: policies for ids that are neither registered objectives nor ``references``
UNKNOWN_POLICIES = ("error", "alone")


@dataclass(frozen=True)
class Condition:
    """Where a declared pair coincides: at ``k`` views only, or at every k (``k`` None, written ``"all"``)."""

    k: int | None = None

    def holds(self, k: int) -> bool:
        """Whether the two losses coincide at ``k`` views."""
        return self.k is None or self.k == k

    def __str__(self) -> str:
        return ALL if self.k is None else f"k = {self.k}"


def parse_condition(value: object, where: str = "condition") -> Condition:
    """A declaration's value: ``"all"`` or an integer N >= 2 (that number of views only); ``ValueError`` naming
    ``where`` for anything else."""
    if value == ALL:
        return Condition()
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
        return Condition(value)
    hint = ""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*k\s*==\s*([0-9]+)\s*", value)
        hint = f" (write {int(m.group(1))})" if m else ""
    raise ValueError(f"{where}: expected 'all' or the number of views N (an integer >= 2) at which the two losses "
                     f"coincide, got {value!r}{hint}")


class Declared(NamedTuple):
    """What an objective class declares that matters here (its class attributes and options)."""

    input_kind: str
    min_views: int
    max_views: int | None
    #: the class's own ``same_loss_as`` (empty when it declares none)
    same_loss_as: Mapping[str, int | str]
    #: hyper-parameter -> default (the class's options); None when open-ended (``**kwargs``)
    defaults: Mapping[str, Any] | None


#: the built-in objectives as their classes declare them, readable without importing torch (see the
#: module docstring; ``declarations()`` and the tests check this table against the classes)
BUILTIN: dict[str, Declared] = {
    "infonce_pwe": Declared("views", 2, None, {}, {"tau": 0.1}),
    "infonce_avg": Declared("views", 2, None, {"infonce_pwe": 2}, {"tau": 0.1, "renormalise": False}),
    "multicrop": Declared("views", 2, None, {"infonce_pwe": "all"}, {"tau": 0.1}),
    "pvc_geometric": Declared("views", 2, None, {"infonce_pwe": 2}, {"tau": 0.1}),
    "pvc_arithmetic": Declared("views", 2, None, {"infonce_pwe": 2}, {"tau": 0.1, "variant": "paper"}),
    "suff_stats": Declared("views", 2, None, {"infonce_pwe": 2}, {"tau": 0.1}),
    "mv_infonce": Declared("views", 2, None, {}, {"tau": 0.1, "variant": "paper"}),
    "mv_dhel": Declared("views", 2, None, {}, {"tau": 0.1, "variant": "paper"}),
    "dhel": Declared("views", 2, 2, {"mv_dhel": 2}, {"tau": 0.1, "variant": "paper"}),
    "byol_pwe": Declared("pairs", 2, None, {}, {}),
    "byol_avg": Declared("pairs", 2, None, {"byol_pwe": 2}, {}),
    "tuple_infonce": Declared("tuple", 2, None, {}, {"tau": 0.07}),
    "matching_gap": Declared("views", 2, 2, {}, {"eps": 0.5, "cost": "sqeuclid", "tol": 0.001, "max_iter": 1000}),
    "m3g": Declared("views", 2, None, {}, {"eps": 0.2, "cost": "cv", "tol": 0.001, "max_iter": 1000,
                                           "solver": "auto", "backend": "auto"}),
}


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"k must be an integer number of views >= 2, got {k!r}")
    return k


def declared_of(obj: Any) -> Declared:
    """Read :class:`Declared` off a registered objective (class or factory); imports nothing itself."""
    from fusebench.options import options_of

    own = vars(obj).get(ATTRIBUTE) if isinstance(obj, type) else getattr(obj, ATTRIBUTE, None)
    opts = options_of(obj)
    defaults = None if opts is None else {o.name: o.default for o in opts}  # REQUIRED: no default
    return Declared(getattr(obj, "input_kind", "views"), getattr(obj, "min_views", 2), getattr(obj, "max_views", None),
                    {} if own is None else own, defaults)


def _info(name: str) -> Declared:
    """The declaration of ``name``: from :data:`BUILTIN` when listed there (no import), else from the
    registry (``UnknownNameError`` for an unknown id)."""
    return BUILTIN[name] if name in BUILTIN else declared_of(OBJECTIVES.get(name))


def _is_objective(name: str) -> bool:
    """Whether ``name`` is a registered objective id (exactly: ids are lowercase), without importing the
    built-in objective modules."""
    return name in BUILTIN or (name == name.lower() and OBJECTIVES.registered(name))


def _raise_unknown(name: str) -> None:
    from fusebench.registry import UnknownNameError, closest

    valid = OBJECTIVES.available()
    hint = closest(name, valid)
    raise UnknownNameError(f"unknown objective {name!r}." + (f" Did you mean {hint!r}?" if hint else "")
                           + f" Valid objective ids: {', '.join(valid)}")


def _validated(name: str, decl: Declared, kinds: Mapping[str, str], who: str) -> dict[tuple[str, str], Condition]:
    own = decl.same_loss_as
    if not isinstance(own, Mapping):
        raise ValueError(f"{who}: expected a mapping {{other objective id: 'all' or a number of views}}, got "
                         f"{type(own).__name__}")
    out = {}
    for other, text in own.items():
        if not isinstance(other, str) or other not in kinds:
            raise ValueError(f"{who}: {other!r} is not a registered objective id; valid ids: {', '.join(sorted(kinds))}")
        if other == name:
            raise ValueError(f"{who}: an objective cannot declare itself")
        if decl.input_kind != kinds[other]:
            raise ValueError(f"{who}: {name!r} takes input_kind {decl.input_kind!r} but {other!r} takes "
                             f"{kinds[other]!r}; losses on different inputs are never the same loss")
        out[(name, other)] = parse_condition(text, f"{who}[{other!r}]")
    return out


def declarations() -> dict[tuple[str, str], Condition]:
    """Every declared pair ``(declaring id, other id) -> Condition`` over the whole registry (built-ins and
    plugins; this imports every objective module), validated against the contract above.

    Two ids registered with the same class are added as ``"all"``. Raises ``ValueError`` naming the class
    for a malformed declaration, and when a built-in class and :data:`BUILTIN` disagree.
    """
    entries = {name: OBJECTIVES.get(name) for name in OBJECTIVES.available()}
    decls = {name: declared_of(obj) for name, obj in entries.items()}
    for name, decl in decls.items():
        listed = BUILTIN.get(name)
        if listed is not None and (decl.input_kind, decl.min_views, decl.max_views, dict(decl.same_loss_as),
                                   decl.defaults) != (listed.input_kind, listed.min_views, listed.max_views,
                                                      dict(listed.same_loss_as), listed.defaults):
            raise ValueError(f"objective {name!r}: its class declares {decl} but "
                             f"fusebench.objectives.equivalence.BUILTIN lists {listed}; update the table")
    kinds = {name: d.input_kind for name, d in decls.items()}
    out: dict[tuple[str, str], Condition] = {}
    for name, decl in decls.items():
        who = f"{getattr(entries[name], '__qualname__', name)} (objective {name!r}).{ATTRIBUTE}"
        out.update(_validated(name, decl, kinds, who))
    first_of: dict[int, str] = {}
    for name, obj in entries.items():  # one class under two ids
        first = first_of.setdefault(id(obj), name)
        if first != name and (first, name) not in out and (name, first) not in out:
            out[(first, name)] = Condition()
    return out


def _builtin_declarations() -> dict[tuple[str, str], Condition]:
    kinds = {name: d.input_kind for name, d in BUILTIN.items()}
    out: dict[tuple[str, str], Condition] = {}
    for name, decl in BUILTIN.items():
        out.update(_validated(name, decl, kinds, f"BUILTIN[{name!r}].{ATTRIBUTE}"))
    return out


def _accepts(decl: Declared, k: int) -> bool:
    return accepts_views(decl, k)


def _closure(k: int, builtin_only: bool) -> dict[str, str]:
    """Union-find at ``k`` over the built-in table (``builtin_only``) or the whole registry: id -> root."""
    pairs = _builtin_declarations() if builtin_only else declarations()
    names = set(BUILTIN) if builtin_only else set(OBJECTIVES.available())
    parent = {name: name for name in names}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for (a, b), cond in sorted(pairs.items()):
        if cond.holds(k) and _accepts(_info(a), k) and _accepts(_info(b), k):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return {name: find(name) for name in names}


def _check_list(values: object, arg: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{arg} must be an iterable of ids (strings), got {type(values).__name__} {values!r}")
    ids = list(values)
    bad = [o for o in ids if not isinstance(o, str)]
    if bad:
        raise ValueError(f"{arg} must hold ids (strings), got {bad[0]!r}")
    return ids


def _check_ids(objectives: object, k: int, refs: set[str], unknown: str, arg: str) -> tuple[list[str], set[str]]:
    """The ids (validated) and the subset that are registered objectives."""
    ids = _check_list(objectives, arg)
    dup = sorted({o for o in ids if ids.count(o) > 1})
    if dup:
        raise ValueError(f"{arg} must list each id once, got {', '.join(map(repr, dup))} more than once")
    known = set()
    for o in ids:
        if o in refs:
            continue
        if not _is_objective(o):
            if unknown == "alone":
                continue
            _raise_unknown(o)
        decl = _info(o)
        if not _accepts(decl, k):
            raise ValueError(f"{arg}: objective {o!r} takes {views_text(decl)} views, so it cannot have run "
                             f"at k={k}")
        known.add(o)
    return ids, known


def _check_policy(unknown: object) -> str:
    if unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"unknown must be one of {UNKNOWN_POLICIES}, got {unknown!r}")
    return unknown  # type: ignore[return-value]


def same_loss(a: str, b: str, k: int) -> bool:
    """Whether registered objectives ``a`` and ``b`` compute the same loss at ``k`` views (declared or
    derived); False when either does not accept k views."""
    k = _check_k(k)
    for name in (a, b):
        if not isinstance(name, str):
            raise ValueError(f"objective ids must be strings, got {name!r}")
        if not _is_objective(name):
            _raise_unknown(name)
    if not (_accepts(_info(a), k) and _accepts(_info(b), k)):
        return False
    root = _closure(k, builtin_only=a in BUILTIN and b in BUILTIN)
    return root[a] == root[b]


def groups(objectives: Iterable[str], k: int, *, references: Iterable[str] = (),
           unknown: str = "error") -> list[list[str]]:
    """Partition ``objectives`` into groups that compute the same loss at ``k`` views.

    Args:
        objectives: distinct ids, in order of display preference.
        k: the number of views the objectives were called on (>= 2).
        references: ids that are not objectives but rows of their own (e.g. the reference rows
            ``none`` and ``raw`` of ``fusebench.components.rows.references()``); each is a group alone.
        unknown: what to do with an id that is neither a registered objective nor in ``references``:
            ``"error"`` (default: ``UnknownNameError``, naming the valid ids) or ``"alone"`` (a group of
            its own, e.g. runs of a plugin that is not installed here).

    Returns:
        the groups, each in the order of ``objectives``; groups are ordered by their first member, so
        each group's first id is the one displayed (the id named first). Ids are compared exactly.

    Only built-in ids -> no objective module (and no torch) is imported; a plugin id loads the registry.

    Raises:
        ValueError: k not an integer >= 2; ``objectives`` not an iterable of strings; an id listed
            twice; an unknown id (``UnknownNameError``, with ``unknown="error"``); a "views"/"pairs"
            objective whose view limits exclude k; a bad ``unknown`` policy.
    """
    k = _check_k(k)
    unknown = _check_policy(unknown)
    refs = set(_check_list(references, "references"))
    ids, known = _check_ids(objectives, k, refs, unknown, "objectives")
    root = _closure(k, builtin_only=known <= set(BUILTIN)) if known else {}
    out: dict[tuple[str, str], list[str]] = {}
    for o in ids:
        key = ("objective", root[o]) if o in known else ("alone", o)
        out.setdefault(key, []).append(o)
    return list(out.values())


def canonical(objective: str, k: int, among: Iterable[str], *, references: Iterable[str] = (),
              unknown: str = "error") -> str:
    """The id displayed for ``objective`` at ``k`` views on a board listing ``among`` (in preference order).

    That is the first id of ``among`` that computes the same loss as ``objective`` (:func:`groups`, with
    the same ``references`` and ``unknown``); ``objective`` itself when none does (whether or not it is
    in ``among``).
    """
    if not isinstance(objective, str):
        raise ValueError(f"objective must be an objective id (a string), got {objective!r}")
    ids = _check_list(among, "among")
    dup = sorted({o for o in ids if ids.count(o) > 1})
    if dup:
        raise ValueError(f"among must list each id once, got {', '.join(map(repr, dup))} more than once")
    if objective not in ids:
        ids.append(objective)
    for group in groups(ids, k, references=references, unknown=unknown):
        if objective in group:
            return group[0]
    raise AssertionError("unreachable: every id is in one group")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# hyper-parameters
# ---------------------------------------------------------------------------------------------
def _equal(x: Any, y: Any) -> bool:
    """Value equality for hyper-parameters read from records: booleans only equal booleans; numbers
    compare by value (1 == 1.0, NaN never equal); sequences and mappings element by element."""
    if isinstance(x, bool) or isinstance(y, bool):
        return isinstance(x, bool) and isinstance(y, bool) and x == y
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return float(x) == float(y)  # NaN != NaN
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y))
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        return set(x) == set(y) and all(_equal(x[key], y[key]) for key in x)
    return type(x) is type(y) and x == y


def _defaults(objective: str | None, arg: str) -> Mapping[str, Any] | None:
    """Hyper-parameter defaults of ``objective`` (the ``REQUIRED`` sentinel for none); None if no id is
    given or its options are open-ended."""
    if objective is None:
        return None
    if not isinstance(objective, str):
        raise ValueError(f"{arg} must be an objective id (a string) or None, got {objective!r}")
    if not _is_objective(objective):
        _raise_unknown(objective)
    return _info(objective).defaults


def same_hparams(a: Mapping[str, Any], b: Mapping[str, Any], objective_a: str | None = None,
                 objective_b: str | None = None) -> bool:
    """Whether two runs' hyper-parameters make the same-loss identities of this module apply.

    Without objective ids: the two mappings are equal (same names, equal values). With the ids of the
    objectives they belong to, each mapping is completed with that objective's defaults (its declared
    options) and then:

    - a hyper-parameter both objectives take must have equal values (``tau``, a shared ``variant``);
    - a hyper-parameter only one of them takes must be at that objective's default (the identity is
      stated for the defaults: ``pvc_arithmetic(variant="reference_code")`` is NT-Xent - log n);
    - a name neither objective declares must be given, with equal values, on both sides.

    When either objective has open-ended options (``**kwargs``, nothing declared), no defaults are
    known and the two mappings are compared as given. Values compare as in a record: booleans only
    equal booleans, numbers by value (1 == 1.0), NaN never equal, lists and tuples alike.

    Raises ``ValueError`` when ``a`` or ``b`` is not a mapping with string keys, or an id is not a
    string; ``UnknownNameError`` for an unknown id.
    """
    from fusebench.options import REQUIRED

    for arg, h in (("a", a), ("b", b)):
        if not isinstance(h, Mapping) or not all(isinstance(key, str) for key in h):
            raise ValueError(f"same_hparams: {arg} must be a mapping of hyper-parameter names (strings) to "
                             f"values, got {h!r}")
    da, db = _defaults(objective_a, "objective_a"), _defaults(objective_b, "objective_b")
    if da is None or db is None:  # no ids, or an objective without declared options: as given
        return _equal(dict(a), dict(b))
    fa, fb = {**da, **a}, {**db, **b}
    for name in set(fa) | set(fb):
        if name in da and name in db:  # taken by both
            va, vb = fa[name], fb[name]
            if va is REQUIRED or vb is REQUIRED or not _equal(va, vb):
                return False
        elif name in da or name in db:  # taken by one: must be its default
            d, given = (da, fa) if name in da else (db, fb)
            if d[name] is REQUIRED or not _equal(given[name], d[name]):
                return False
        elif name not in a or name not in b or not _equal(a[name], b[name]):  # taken by neither
            return False
    return True
