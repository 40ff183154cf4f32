"""What a board tells the index: the metadata comment at the end of every board file (one entry per
comparability group: kind, dataset, seeds, runs, the "best on primary metric" line, and for ranked
groups the per-row means of the primary metric that the cross-dataset ranking uses), written by
:func:`meta_comment` and read back by :func:`read_board_meta`, so the index lists boards regenerated
from other runs folders too.

The comment is the board's last line and is read from there only. Record text can never forge it: the
board escapes ``<`` in every text from a record (:func:`fusebench.leaderboard.columns.md_text`), so no
other line holds ``<!--``, and the comment's JSON writes ``<``, ``>`` and ``&`` as ``\\u003c``,
``\\u003e``, ``\\u0026`` (a string in it never closes the comment)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from fusebench.io import DuplicateKeyError, shown_path, strict_json, unique_keys
from fusebench.leaderboard.columns import fmt_cell
from fusebench.components.rows import is_reference
from fusebench.leaderboard.grouping import group_key
from fusebench.leaderboard.groups import GroupView
from fusebench.registry import ID_RULE, valid_id

BOARD_META = "fusebench-board"
# version of what a board shows; 2: fixed-reference tests, CIs, budgets, published section, per-row means
BOARD_FORMAT = 2
META_RE = re.compile(r"<!-- " + BOARD_META + r" (\{[^\n]*\}) -->")  # the whole last line of a board
KIND_TITLES = {"real": "real data", "study": "synthetic study", "pipeline_check": "pipeline check"}


def best_line(view: GroupView) -> str | None:
    """The index's "best on primary metric" text; None for pipeline checks."""
    if not view.ranked:
        return None
    p = view.primary
    if not p:
        return "—"
    info = view.info(p)
    per = {o: list(v.values()) for o in view.valid_rows if (v := view.values.get((o, p)))}
    if not per:
        return "—"
    if info.direction is None:
        return f"— ({p}: direction unknown)"
    o = view.best.get(p)

    def cell(q: str) -> str:  # with the count of runs where the metric is undefined, like the table's cell
        return fmt_cell(info.unit, per[q], view.undefined.get((q, p), 0))

    if o is None:
        only = next(iter(per))
        return f"all tied ({p} {cell(only)})" if len(per) > 1 else f"`{only}` ({p} {cell(only)})"
    text = f"`{o}` ({p} {cell(o)})"
    tied = sorted(q for q, r in view.vs_best.items() if r.get("tied"))
    if tied:  # not separable from the best (paired t-test, Holm): the best is one of several
        shown = ", ".join(f"`{q}`" for q in tied[:3]) + (f" and {len(tied) - 3} more" if len(tied) > 3 else "")
        text += f", tied with {shown} (not separable)"
    if is_reference(o):  # say which pretraining objective comes closest
        pre = {q: v for q, v in per.items() if not is_reference(q)}
        if pre:
            sign = 1.0 if info.direction == "higher" else -1.0
            q = max(sorted(pre), key=lambda q: sign * sum(pre[q]) / len(pre[q]))
            text += f"; best pretrained `{q}` ({cell(q)})"
    return text


def board_meta(view: GroupView, title: str | None) -> dict[str, Any]:
    """A group's entry in the board's metadata comment, read back by the index: the index line, and
    for ranked groups the per-row means of the primary metric (valid rows, displayed ids) that the
    cross-dataset ranking uses."""
    meta = {"kind": view.kind, "dataset": view.recs[0].dataset.id, "synthetic": view.recs[0].dataset.synthetic,
            "objectives": len(view.objectives),
            "seeds": view.seeds, "runs": len(view.recs), "best": best_line(view), "title": title,
            "key": group_key(view.recs), "protocol": view.protocol, "primary": view.primary or None,
            "reference": view.reference}
    if view.code_differences:  # runs made by other code than the current one: the index names the board
        meta["other_code"] = sorted({c for c, _ in view.code_differences})
    if view.family:  # the spec's modality family: the index ranks the boards of each family too
        meta["family"] = view.family
    if view.variant_of:  # a re-run of another benchmark: out of the cross-dataset ranking, compared with its base
        meta["variant_of"] = view.variant_of
    if view.ranked and view.primary:
        meta["direction"] = view.info(view.primary).direction
        # rounded to 12 decimals: means equal but for the order of summation rank as ties
        meta["means"] = {o: round(m, 12) for o in view.valid_rows if (m := view.mean(o, view.primary)) is not None}
        # every metric's per-row means: the index ranks the objectives over the boards under each metric too
        # (fusebench.leaderboard.metric_rankings), so a reader sees whether the choice of primary metric decides it
        meta["metric_means"] = {
            m.id: {"direction": m.direction, "means": means}
            for m in view.metrics if m.direction in ("higher", "lower")
            and (means := {o: round(v, 12) for o in view.valid_rows if (v := view.mean(o, m.id)) is not None})}
        if view.reference_aliases:  # reference rows merged as the same features: the index's family counts them once
            meta["merged_references"] = {o: sorted(a) for o, a in sorted(view.reference_aliases.items())}
        # objectives merged into a row because they compute its loss on this board (e.g. at k = 2 views): the index
        # ranks each with its row's mean here, so an objective run on every board is not left out where it merged
        objective_aliases = {o: sorted(a) for o, a in sorted(view.aliases.items())
                             if a and o not in view.reference_aliases and o in meta["means"]}
        if objective_aliases:
            meta["merged_objectives"] = objective_aliases
    return meta


def read_board_meta(path: Path) -> dict[str, Any] | None:
    """The metadata comment of a board file (None for a markdown file that is not a board). Anything wrong with a
    board file is one ``ValueError`` naming the file and what was expected: its text (not UTF-8), its JSON (invalid,
    nested too deeply, an integer too long to read), a value Python cannot show (a lone surrogate, anywhere), or a
    field of the wrong type or size."""
    max_depth = 16  # groups[i].metric_means.<metric>.means.<objective> is 6 levels deep
    max_int = 2**64  # no integer of a board is larger (seeds are below 2**64, as torch's generators take them)
    max_count = 10**12  # runs, objectives

    def unreadable(value: Any) -> str | None:
        """Where ``value`` nests deeper than ``max_depth``, holds an integer of magnitude ``max_int`` or more, or
        text that is not valid Unicode (a lone surrogate such as ``"\\ud800"``: JSON can spell it, no UTF-8 file
        can hold it) as a key or a value; None when nowhere. Iterative: no recursion on a hostile depth."""
        stack: list[tuple[Any, str, int]] = [(value, "", 0)]
        while stack:
            v, where, depth = stack.pop()
            at = (where[:200] + "..." if len(where) > 200 else where) or "the top level"
            if depth > max_depth:
                return f"{at} is nested deeper than a board's metadata ever is ({max_depth} levels)"
            if isinstance(v, str) and not encodable(v):
                return f"{at} is not valid Unicode text (a lone surrogate such as '\\ud800')"
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= max_int:
                return f"{at} is an integer of {len(str(abs(v)))} digits (below 2**64 expected)"
            if isinstance(v, dict):
                for k, x in v.items():
                    if not encodable(k):
                        return f"a key of {at} is not valid Unicode text (a lone surrogate such as '\\ud800')"
                    stack.append((x, f"{where}.{k}" if where else k, depth + 1))
            elif isinstance(v, list):
                stack.extend((x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v))
        return None

    def encodable(text: str) -> bool:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    shown = shown_path(path)  # a control character in the name escaped in every message
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{shown}: not UTF-8 text ({e.reason} at byte {e.start}); regenerate it from its runs or "
                         f"delete it") from None
    if not text.startswith("# Leaderboard: "):
        return None
    m = _last_line_meta(text)
    if not m:
        raise ValueError(f"{shown}: a board without the '{BOARD_META}' metadata comment (written by an older "
                         f"fusebench?); regenerate it from its runs or delete it")
    try:
        meta = json.loads(m.group(1), object_pairs_hook=unique_keys)  # a key given twice: refused, as in a record
    except json.JSONDecodeError as e:
        raise ValueError(f"{shown}: board metadata is not valid JSON ({e})") from None
    except DuplicateKeyError as e:
        raise ValueError(f"{shown}: board metadata: {e}; regenerate it from its runs or delete it") from None
    except RecursionError:  # e.g. [[[...]]] 100000 levels deep
        raise ValueError(f"{shown}: board metadata is nested too deeply to read (a board's is at most {max_depth} "
                         f"levels deep); regenerate it from its runs or delete it") from None
    except ValueError as e:  # an integer of more than 4300 digits (Python's limit on integer strings)
        raise ValueError(f"{shown}: board metadata holds a number too long to read ({e}); regenerate it from its "
                         f"runs or delete it") from None
    problem = unreadable(meta)  # before any field is checked, shown or quoted in a message
    if problem:
        raise ValueError(f"{shown}: board metadata: {problem}; regenerate it from its runs or delete it")
    if not valid_id(path.stem):  # the index links the board by its name: never markup from a file name
        raise ValueError(f"{shown}: a board file whose name is not a benchmark id ({ID_RULE}); rename or delete it")
    if not isinstance(meta, dict) or meta.get("benchmark") != path.stem or not isinstance(meta.get("groups"), list):
        raise ValueError(f"{shown}: board metadata must name benchmark {path.stem!r} and list its groups")
    for i, g in enumerate(meta["groups"]):
        if not isinstance(g, dict) or g.get("kind") not in KIND_TITLES:
            raise ValueError(f"{shown}: board metadata group {g!r} lacks a valid kind"[:400])
        _check_group_fields(path, i, g)
        for field in ("objectives", "runs"):  # counts (type-checked above): of a size a board can have
            if g.get(field, 0) >= max_count:
                raise ValueError(f"{shown}: board metadata group {i} ({g['kind']}): field {field!r}: expected a count "
                                 f"below 10**12, got {g[field]!r}")
        means = g.get("means", {})
        if not _finite_means(means):
            raise ValueError(f"{shown}: board metadata group {i} ({g['kind']}): 'means' must map "
                             f"objective ids ({ID_RULE}) to finite numbers, got {means!r}"[:400])
        by_metric = g.get("metric_means", {})
        if not isinstance(by_metric, dict) or not all(
                isinstance(k, str) and METRIC_ID.fullmatch(k) and isinstance(v, dict)
                and set(v) == {"direction", "means"} and v["direction"] in ("higher", "lower")
                and _finite_means(v["means"])
                for k, v in by_metric.items()):
            raise ValueError(f"{shown}: board metadata group {i} ({g['kind']}): 'metric_means' must map metric ids to "
                             f"{{\"direction\": \"higher\" | \"lower\", \"means\": {{objective id: finite number}}}}, "
                             f"got {by_metric!r}"[:400])
        for field in ("merged_references", "merged_objectives"):
            merged = g.get(field, {})
            if not isinstance(merged, dict) or not all(
                    valid_id(k) and isinstance(v, list) and all(map(valid_id, v)) for k, v in merged.items()):
                raise ValueError(f"{shown}: board metadata group {i} ({g['kind']}): '{field}' must map "
                                 f"objective ids ({ID_RULE}) to lists of objective ids, got {merged!r}"[:400])
    return meta


def _finite_means(means: Any) -> bool:
    """``means`` maps objective ids to finite numbers."""
    return isinstance(means, dict) and all(valid_id(k) and _is_number(v) and math.isfinite(v) for k, v in means.items())


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


#: the fields of a group's metadata the index shows or reads, each with its check and what it expects: the index
#: trusts no board file it finds in the folder (a planted or hand-edited one included); free text (``title``,
#: ``best``) is escaped where the index renders it (:func:`fusebench.leaderboard.index.build_index`)
_GROUP_FIELDS: dict[str, tuple[Any, str]] = {
    "title": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "best": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "dataset": (lambda v: isinstance(v, str) and valid_id(v), f"a dataset id ({ID_RULE})"),
    "synthetic": (lambda v: isinstance(v, bool), "true or false"),
    "objectives": (_is_count, "a count (an integer >= 0)"),
    "runs": (_is_count, "a count (an integer >= 0)"),
    "seeds": (lambda v: isinstance(v, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in v),
              "a list of integer seeds"),
    "key": (lambda v: isinstance(v, str) and valid_id(v), "a comparability key (an id)"),
    # the runs' own text (the index only compares it with the protocol ids; never shown)
    "protocol": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "primary": (lambda v: v is None or (isinstance(v, str) and bool(METRIC_ID.fullmatch(v))), "a metric id or null"),
    "reference": (lambda v: v is None or isinstance(v, str), "a string or null"),  # not shown by the index
    "direction": (lambda v: v in (None, "higher", "lower"), "'higher', 'lower' or null"),
    "family": (lambda v: isinstance(v, str) and bool(FAMILY_ID.fullmatch(v)), "a modality family (e.g. 'image+text')"),
    "variant_of": (lambda v: isinstance(v, str) and valid_id(v), "a benchmark id"),
    # what of the code that made the runs differs from the current code (shown by the index, escaped)
    "other_code": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v), "a list of strings"),
}
#: a metric id, as a record's metrics key (:mod:`fusebench.records.schema`)
METRIC_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@\-]*")
#: a modality family: modality names joined by '+'
FAMILY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+\-]*")


def _check_group_fields(path: Path, i: int, g: dict[str, Any]) -> None:
    """Each field of :data:`_GROUP_FIELDS` that the group has is of its type; else one error naming the file, the
    group and the field."""
    for field, (ok, expected) in _GROUP_FIELDS.items():
        if field in g and not ok(g[field]):
            raise ValueError(f"{shown_path(path)}: board metadata group {i} ({g['kind']}): field {field!r}: expected {expected}, "
                             f"got {g[field]!r}"[:400])


def _last_line_meta(text: str) -> re.Match[str] | None:
    """The metadata comment of a board's text: its last line (trailing whitespace aside), matched whole."""
    lines = text.rstrip().rsplit("\n", 1)
    return META_RE.fullmatch(lines[-1])


def embedded_json(data: Any, **kw: Any) -> str:
    """``data`` as strict JSON (:func:`fusebench.io.strict_json`: NaN and infinities as null; sorted keys,
    ASCII; ``kw`` e.g. ``separators``) with ``&``, ``<`` and ``>`` written as ``\\u`` escapes: still the same
    JSON, and safe inside an HTML comment or a ``<script>`` element (no ``-->``, ``</script>`` or ``<!--``)."""
    text = strict_json(data, sort_keys=True, ensure_ascii=True, **kw)
    for c, escape in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(c, escape)
    return text


def meta_comment(name: str, groups: list[dict[str, Any]]) -> str:
    """The last line of the board of benchmark ``name``: its metadata comment (``groups``: one
    :func:`board_meta` per comparability group)."""
    meta = {"benchmark": name, "format": BOARD_FORMAT, "groups": groups}
    return f"<!-- {BOARD_META} {embedded_json(meta)} -->"


def rendered_meta(markdown: str) -> dict[str, Any]:
    """The metadata of a board this package has just rendered (its comment is there and valid)."""
    return json.loads(_last_line_meta(markdown).group(1))  # type: ignore[union-attr]
