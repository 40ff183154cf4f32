"""``fusebench data prepare|check|info``: build, verify and describe prepared dataset caches.

Examples::

    fusebench data info nyuv2                              # official sources, licence, expected layout
    fusebench data prepare nyuv2 --data-root ~/data/nyuv2      # every split -> memory-mapped cache
    fusebench data prepare sleep_edf --data-root D --split train --opt crop_wake_min=60
    fusebench data prepare nyuv2 --synthetic               # the synthetic twin's cache
    fusebench data check nyuv2 --data-root ~/data/nyuv2       # recompute every sha256 in the manifests

``--data-root`` (old name ``--root``, still read) may be relative to the working directory (it is made
absolute once). ``--out DIR`` writes to ``DIR/<id>/<key>`` instead of
``$FUSEBENCH_CACHE/prepared/<id>/<key>``; set ``FUSEBENCH_PREPARED=DIR`` so that adapters find it. With
``--data-root``, ``check`` also compares the fixed official files that declare a sha256 (e.g. NYUv2's
splits.mat). Exit codes: 0 ok, 1 check found mismatches, 2 bad input (missing dataset, unknown id,
nothing prepared, unreadable file), 3 the cache could not be written (disk full, read-only or unwritable folder; the partial cache is removed).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from fusebench.io import shown_path
from fusebench.runtime.terminal_help import Keyed, Parser
from fusebench.typed import load_yaml


def _parse_opts(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--opt expects KEY=VALUE, got {item!r}")
        try:
            out[key] = load_yaml(value, f"--opt {key}")  # within the YAML limits of a spec (depth, aliases)
        except yaml.YAMLError as e:
            raise ValueError(f"--opt {item!r}: the value is not valid YAML ({' '.join(str(e).split())})") from None
    return out


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusebench data", description=__doc__)
    sub = p.add_subparsers(dest="action", required=True)
    pp = sub.add_parser("prepare", help="build the fast cache of a dataset")
    pp.add_argument("name")
    pp.add_argument("--data-root", "--root", dest="root", metavar="DIR",
                    help="folder holding the official files (the word fusebench run uses; --root: the old name)")
    pp.add_argument("--split", action=Keyed, help="split to prepare (repeatable; default: all)")
    pp.add_argument("--out", help="base folder of the cache (default: $FUSEBENCH_CACHE/prepared)")
    pp.add_argument("--synthetic", action="store_true", help="prepare the synthetic twin instead")
    pp.add_argument("--opt", action=Keyed, default=[], metavar="KEY=VALUE", help="adapter option (YAML value)")
    pp.add_argument("--force", action="store_true", help="rebuild even when an up-to-date cache exists")
    pp.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true",
                    help="no progress output (as fusebench run's --no-progress / --quiet)")
    pc = sub.add_parser("check", help="verify the manifests of prepared caches (recompute hashes); with --data-root "
                        "also the fixed official files that declare a sha256")
    pc.add_argument("name")
    pc.add_argument("--data-root", "--root", dest="root", metavar="DIR",
                    help="only caches built from this data folder (default: all; --root: the old name)")
    pc.add_argument("--out", help="base folder searched (default: $FUSEBENCH_PREPARED, $FUSEBENCH_CACHE/prepared)")
    pi = sub.add_parser("info", help="where the official files come from and the expected layout")
    pi.add_argument("name")
    return p


def _out_problem(out: str | None, made: bool) -> str | None:
    """``--out`` of ``prepare`` (``made``: a folder that exists or can be made) or ``check`` (a folder to search):
    what is wrong with it, in one line (None: it fits), before any split is read or written."""
    if out is None:
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        return (f"--out {shown_path(path)}: exists and is not a folder; name a folder for the prepared cache"
                if made else f"--out {shown_path(path)} is a file; expected the folder of prepared caches")
    above = next((q for q in path.absolute().parents if q.exists()), None)
    if made and not path.exists() and above is not None and not above.is_dir():
        return (f"--out {shown_path(path)}: cannot create the folder ({shown_path(above)} is not a folder); name a "
                f"folder")
    return None


def _prepare(ns: argparse.Namespace) -> int:
    from fusebench import datasets
    from fusebench.datasets import cache

    cls = datasets.get(ns.name)
    opts = _parse_opts(ns.opt)
    problem = _out_problem(ns.out, made=True)
    if problem:
        raise ValueError(problem)
    fixed = {"augment": "a cache holds the samples without augmentation (augment applies when a run reads it)",
             "use_cache": "prepare always reads the source files and writes the cache"}
    set_here = [k for k in opts if k in fixed]
    if set_here:
        raise ValueError("; ".join(f"--opt {k}: {fixed[k]}" for k in set_here) + " (drop it)")
    if ns.root is None and not ns.synthetic:
        raise datasets.DatasetNotFoundError(f"{cls.id}: give --data-root DIR (or --synthetic).\n{cls.info()}")
    splits = ns.split or list(cls.SPLITS)
    bad = [s for s in splits if s not in cls.SPLITS]
    if bad:
        raise datasets.DatasetError(f"{cls.id}: splits {bad} are not among {cls.SPLITS}")
    # one absolute root for every path the adapter builds and the manifest records
    root = None if ns.root is None else os.path.abspath(Path(ns.root).expanduser())
    memo: dict = {}
    failed: list[str] = []
    errors: dict[str, list[str]] = {}  # message -> the splits it stopped (a bad --opt stops every split alike)
    for split in splits:  # an empty or unreadable split is reported; the other splits are still prepared
        try:
            ds = cls(root=root, split=split, synthetic=ns.synthetic, use_cache=False, augment=False, **opts)
        except datasets.DatasetError as e:  # also a split whose folder is missing
            errors.setdefault(str(e), []).append(split)
            failed.append(split)
            continue
        folder = cache.prepare(ds, base=ns.out, progress=not ns.quiet, force=ns.force, _hash_memo=memo)
        print(f"{cls.id}/{split}: {len(ds)} samples -> {shown_path(folder)}")
    info = cls.info()  # a split's message may end with the adapter's `data info` text: said once, after them all
    with_info = False
    for message, stopped in errors.items():
        if info and info in message:
            message, with_info = message.replace(info, "").rstrip(), True
        print(f"fusebench data prepare: {cls.id}/{','.join(stopped)}: {message}", file=sys.stderr)
    if with_info:
        print(info, file=sys.stderr)
    if ns.out and len(failed) < len(splits):
        print(f"(set FUSEBENCH_PREPARED={shown_path(Path(ns.out).resolve())} so that adapters read this cache)")
    if failed:
        print(f"fusebench data prepare: {cls.id}: splits not prepared: {failed}", file=sys.stderr)
        return 2
    return 0


def _check(ns: argparse.Namespace) -> int:
    from fusebench import datasets
    from fusebench.datasets import cache

    cls = datasets.get(ns.name)
    problem = _out_problem(ns.out, made=False)
    if problem:
        raise ValueError(problem)
    bad = checked = 0
    if ns.root:  # the fixed official files under the root against their declared sha256
        for path, verdict in cls.check_files(ns.root):
            checked += verdict != "missing"
            bad += verdict not in ("ok", "missing")
            print(f"{'ok      ' if verdict == 'ok' else 'MISMATCH' if verdict != 'missing' else 'missing '} "
                  f"{shown_path(path)}"
                  + ("" if verdict in ("ok", "missing") else f": {verdict}"))
    folders = cache.list_caches(cls.id, root=ns.root, base=ns.out)
    if not folders and checked:  # the files were checked; no cache to check is not an error then
        print(f"{cls.id}: no prepared cache built from {shown_path(ns.root)}")
        return 1 if bad else 0
    if not folders:
        where = f" built from {shown_path(ns.root)}" if ns.root else ""
        print(f"{cls.id}: no prepared cache{where}; run `fusebench data prepare {cls.id} --data-root DIR`",
              file=sys.stderr)
        return 2
    for folder in folders:
        problems = cache.check(folder)
        try:
            m = cache.read_manifest(folder)
            label = f"{cls.id}/{m['split']} ({m['num_samples']} samples, root {m['root']})"
        except datasets.DatasetError:
            label = f"{cls.id} at {shown_path(folder)}"
        if problems:
            bad += 1
            print(f"MISMATCH {label}: {shown_path(folder)}")
            for p in problems:
                print(f"  - {p}")
        else:
            print(f"ok       {label}: {shown_path(folder)}")
    return 1 if bad else 0


def _info(ns: argparse.Namespace) -> int:
    from fusebench import datasets

    cls = datasets.get(ns.name)
    print(cls.info())
    mods = ", ".join(f"{m.name} ({m.kind})" for m in cls.MODALITIES)
    print(f"Task: {cls.task}; splits: {', '.join(cls.SPLITS)}; modalities: {mods}")
    from fusebench.options import options_of

    opts = options_of(cls)
    if opts is None:
        print("Options (dataset.options): open-ended (not declared by this adapter)")
    else:
        print("Options (dataset.options): " + ("; ".join(str(o) for o in opts) or "none"))
    return 0


def main(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)  # first: --help imports no torch
    if any(a == "--root" or a.startswith("--root=") for a in argv):
        print("fusebench data: --root is the old name of --data-root (one word for the data folder, as in "
              "fusebench run); it still works", file=sys.stderr)
    from fusebench.datasets import DatasetError
    from fusebench.datasets.cache import CacheWriteError
    from fusebench.registry import UnknownNameError

    try:
        return {"prepare": _prepare, "check": _check, "info": _info}[ns.action](ns)
    except UnknownNameError as e:
        print(f"fusebench data: {e}", file=sys.stderr)
        return 2
    except CacheWriteError as e:
        print(f"fusebench data {ns.action}: {e}", file=sys.stderr)
        return 3
    except DatasetError as e:  # includes DatasetNotFoundError: its message is the `data info` text
        print(f"fusebench data {ns.action}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"fusebench data {ns.action}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unreadable input or folder outside the cache writer
        print(f"fusebench data {ns.action}: {e}", file=sys.stderr)
        return 2
