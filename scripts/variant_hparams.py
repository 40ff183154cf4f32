#!/usr/bin/env python3
"""Copy a base board's selected hyper-parameters into its variant's spec (issue #31's 4x variants).

A variant (``variant_of: BASE`` in ``benchmarks/VARIANT.yaml``) runs every objective with the hyper-parameters
BASE's validation selection chose; after BASE is re-run, its frozen selection files
(``leaderboards/runs/BASE/_selection/<objective>.json``) hold new choices and the variant's spec must follow:

    python scripts/variant_hparams.py mv-cub-4x [--runs leaderboards/runs] [--benchmarks benchmarks] [--check]

For every objective with a selection file, ``pretrain.per_objective.<id>.hparams`` becomes the file's choice of
objective hyper-parameters, and a choice of ``methods.<method>.<key>`` (BYOL's EMA momentum and predictor width)
goes to ``pretrain.methods.<method>.<key>``; two objectives sharing a method must have chosen the same value.
``raw_pca``'s chosen width becomes the variant's one width, ``options.embedding_eval.pca_widths: [w]`` (a grid of
one point: the variant's selection has nothing left to choose). A
selection file must be BASE's, made by the selection of BASE's current spec (its grid and metric): an older one is
refused, naming it. Only those lines of the variant's file change (its comments and layout stay). ``--check``
changes nothing and exits 1 when the spec differs from the selections.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from fusebench.components.protocols import WIDTH_OPTION
from fusebench.registry import valid_id
from fusebench.runtime.terminal_help import Parser

ROOT = Path(__file__).resolve().parents[1]


def _flow(mapping: dict) -> str:
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=True, width=1000).strip()


def choices(base: str, runs: Path, base_spec: dict) -> tuple[dict[str, dict], dict[str, dict]]:
    """(objective -> its hparams choice, method -> its settings choice) from BASE's selection files; a
    width-selecting reference row's (``raw_pca``) as ``{"raw_pca": {"width": w}}`` among the first."""
    from fusebench.components.rows import width_grid_of

    folder = runs / base / "_selection"
    files = sorted(folder.glob("*.json"))
    if not files:
        raise SystemExit(f"variant_hparams: no selection files in {folder} (run `fusebench run {base}` first)")
    per = (base_spec.get("pretrain") or {}).get("per_objective") or {}
    primary = (base_spec.get("comparison") or {}).get("primary")
    hparams: dict[str, dict] = {}
    methods: dict[str, dict] = {}
    method_from: dict[tuple[str, str], str] = {}
    for path in files:
        sel = json.loads(path.read_text())
        objective = sel.get("objective")
        if sel.get("benchmark") != base or objective != path.stem:
            raise SystemExit(f"variant_hparams: {path}: expected the selection of {path.stem!r} on {base!r}, "
                             f"found benchmark {sel.get('benchmark')!r}, objective {objective!r}")
        widths = width_grid_of(objective, base_spec) if isinstance(objective, str) else []
        grid = {"width": widths} if widths else (per.get(objective) or {}).get("grid")
        if not valid_id(objective) or not grid:  # its name is written into the spec: an objective the base selects
            raise SystemExit(f"variant_hparams: {path}: {objective!r} is not a row {base}'s spec selects "
                             f"(an objective with pretrain.per_objective.<id>.grid, or raw_pca with "
                             f"options.embedding_eval.pca_widths)")
        if sel.get("grid") != grid or sel.get("metric") != primary:
            raise SystemExit(f"variant_hparams: {path}: made over grid {sel.get('grid')} on {sel.get('metric')!r}; "
                             f"{base}'s spec now selects over {grid} on {primary!r}: re-run {base} first")
        for key, value in sel["choice"].items():
            if key.startswith("methods."):
                _, method, name = key.split(".", 2)
                seen = methods.setdefault(method, {})
                if name in seen and seen[name] != value:
                    raise SystemExit(f"variant_hparams: {path}: chose {key} = {value!r}, but "
                                     f"{method_from[(method, name)]} chose {seen[name]!r}; a variant has one "
                                     f"pretrain.methods.{method} table")
                seen[name] = value
                method_from[(method, name)] = path.name
            else:
                hparams.setdefault(objective, {})[key] = value
    return hparams, methods


def rewrite(text: str, hparams: dict[str, dict], methods: dict[str, dict], where: str, where_from: str = "") -> str:
    """``text`` (the variant's YAML) with its per-objective hparams, chosen method settings and raw_pca's width
    (``options.<protocol>.pca_widths``, a line of its own) replaced; ``where_from``: the base board, named in that
    line's comment."""
    from fusebench.components.rows import ROWS

    hparams = dict(hparams)
    width_rows = [o for o in hparams if o in ROWS and ROWS.get(o).selects_width]
    widths = {"width": [hparams.pop(o)["width"] for o in width_rows][0]} if width_rows else {}
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    section: list[str] = []  # the enclosing keys, by indentation
    while i < len(lines):
        line = lines[i]
        stripped = line.split("#", 1)[0].rstrip()
        indent = len(line) - len(line.lstrip(" "))
        if stripped and re.fullmatch(r"\s*[A-Za-z_][\w-]*:.*", stripped):
            key = stripped.strip().split(":", 1)[0]
            section = section[: indent // 2] + [key]
            path = ".".join(section)
            if path == "pretrain.per_objective":  # this block is written anew from the choices
                out.append(line)
                i += 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip(" ")) > indent):
                    i += 1
                for objective in sorted(hparams):
                    out.append(f"{' ' * (indent + 2)}{objective}:\n{' ' * (indent + 4)}hparams: {_flow(hparams[objective])}\n")
                continue
            parts = path.split(".")
            if len(parts) == 3 and parts[0] == "options" and parts[2] == WIDTH_OPTION and widths:
                line = (f"{' ' * indent}{WIDTH_OPTION}: {_flow([widths.pop('width')])}  # {where_from}: the base "
                        f"board's choice (scripts/variant_hparams.py)\n")
            if len(parts) == 4 and parts[:2] == ["pretrain", "methods"] and parts[3] in methods.get(parts[2], {}):
                value = methods[parts[2]].pop(parts[3])
                line = f"{' ' * indent}{parts[3]}: {_flow(value) if isinstance(value, (dict, list)) else yaml.safe_dump(value).splitlines()[0]}\n"
        out.append(line)
        i += 1
    left = {f"pretrain.methods.{m}.{k}" for m, kv in methods.items() for k in kv}
    if widths:
        left.add(f"options.embedding_eval.{WIDTH_OPTION}")
    if left:
        raise SystemExit(f"variant_hparams: {where} has no line for {sorted(left)}: add them by hand first")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", help="the variant's benchmark id (benchmarks/VARIANT.yaml)")
    ap.add_argument("--runs", type=Path, default=ROOT / "leaderboards" / "runs")
    ap.add_argument("--benchmarks", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when the spec differs")
    args = ap.parse_args(argv)
    path = args.benchmarks / f"{args.variant}.yaml"
    text = path.read_text()
    base = yaml.safe_load(text).get("variant_of")
    if not base:
        raise SystemExit(f"variant_hparams: {path} names no variant_of: not a variant")
    if not isinstance(base, str) or not valid_id(base):  # it names a file and goes into the spec's comments
        raise SystemExit(f"variant_hparams: {path}: variant_of {base!r} is not a benchmark id")
    base_spec = yaml.safe_load((args.benchmarks / f"{base}.yaml").read_text())
    hparams, methods = choices(base, args.runs, base_spec)
    new = rewrite(text, hparams, methods, str(path), base)
    yaml.safe_load(new)  # still YAML
    if new == text:
        print(f"{path}: already holds {base}'s selections")
        return 0
    if args.check:
        print(f"{path}: differs from {base}'s selections in {args.runs / base / '_selection'}")
        return 1
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(new)
    tmp.replace(path)
    print(f"{path}: written with {base}'s selections ({len(hparams)} rows' choices"
          + (f", pretrain.methods: {', '.join(sorted(methods))}" if methods else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
