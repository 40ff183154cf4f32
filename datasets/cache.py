"""Prepared caches: every sample of one (adapter, root, split, options, version) in memory-mapped npy.

``fusebench data prepare NAME --data-root DIR`` iterates the adapter's raw reader (``_load_raw``, no
augmentation) once and stores each field of the sample schema (see :mod:`fusebench.datasets.base`)
as a NumPy ``.npy`` file that is later opened with ``mmap_mode="r"``; adapters then read the cache
transparently (:func:`open_cache` is called by ``MultimodalDataset.__init__``).

On-disk layout of one cache (``<base>/<dataset id>/<key>/``)::

    manifest.json                       # see below
    meta.json                           # [N] list of the samples' "meta" dicts (JSON)
    modalities/<name>.npy               # fixed shape: [N, *shape] (row i = sample i)
    modalities/<name>.npy               # otherwise "ragged": [total_elements] flat, plus
    modalities/<name>.offsets.npy       #   [N + 1] int64 element offsets into the flat array,
    modalities/<name>.shapes.npy        #   [N, ndim] int64 per-sample shape,
    modalities/<name>.present.npy       #   [N] bool, False where the sample lacks the field
    target.npy                          # tensor targets (same two layouts)
    target/<key>.npy                    # dict targets (detection: target/boxes [sum G, 7] flat ...)
    extra_targets/<name>.npy            # e.g. CH-SIMS unimodal labels

Variable-length sequences and detection boxes therefore become one concatenated array plus offsets.
``manifest.json`` records: the dataset id, adapter class, root, split, options, the adapter's
``PREPROCESS_VERSION`` (class attribute, default 1), the cache key, the sample count, per field the
layout/dtype/shape, and the size, mtime + sha256 of every input file (the adapter's ``source_files()``
hook; default: every file under the root; relative paths from the hook are taken as the adapter built
them from ``dataset.root``, so a relative root works) and of every output file (an older manifest's outputs
have no mtime), and last ``manifest_sha256``: the sha256 of the manifest's canonical JSON without it
(:func:`manifest_self_hash`; older manifests lack it). Everything is written to a temporary folder next to
the destination and renamed into place at the end (the files keep their mtimes), so an exception or Ctrl-C
leaves nothing half-written; an ``OSError`` while writing (disk full, read-only folder) removes the temporary
folder and raises :class:`CacheWriteError` naming the base folder and the OS error. The folders a killed
``prepare`` left (``.<key>.tmp-<pid>-<host>-*``) are removed by the next one of the same key once their process has
ended (:func:`remove_stale_work_folders`).

``<base>`` is ``$FUSEBENCH_PREPARED`` when set (searched first by readers), else
``cache_home() / "prepared"``; ``<key>`` is a hash of (id, resolved root, split, options minus
``use_cache``/``augment``, preprocessing version, synthetic flag) and, for an adapter whose split comes from
lists in its code (``split_sample_keys()``, e.g. the sentiment ``csd`` layout's built-in standard folds), the
sha256 of the split's sample ids (manifest field ``split_samples_sha256``): a cache of another split of the
same files is not served.

The identity a run records (``dataset.manifest_hash``) is :func:`content_identity`: the manifest's
content without where, when and by which module the cache was made (``adapter``, ``root``, ``key``,
``created``, the inputs' and outputs' mtimes), so it depends only on the files and the options.

Opening a cache is cheap. The manifest is parsed and checked (:func:`read_manifest`): its own sha256
(``manifest_sha256``, written since 2026-11-29: an edited manifest is refused), and the types of the fields that
are read. Every file the cache reads (``meta.json`` and each file a field names) must be listed in ``outputs``,
and a manifest that records the outputs' modification times (one with ``manifest_sha256``, or one output with a
time) must have a time for each. Then each output's size and mtime are compared with the manifest
(:func:`_check_outputs`: a missing or truncated file, or one modified in place, raises :class:`DatasetError`
naming it; only a file whose mtime differs is hashed) and each input's size and mtime are compared with the
manifest (a changed input makes the cache stale: ignored with a warning). A manifest written before the
outputs' times were recorded (none of them has one, and no ``manifest_sha256``) is checked by the outputs'
sizes alone, as then. Every hash is recomputed only by :func:`check` (``fusebench data check``), which also
finds a same-size edit that left the mtime as it was (or was set back), and one under an old-format manifest.
The self-hash catches edits, not forgeries: whoever edits a manifest can recompute it, or drop it and every
output time so that the manifest reads as an old one; only ``data check`` finds the changed files then.

Shape: a loaded sample has exactly the tensors (shapes, dtypes) the raw reader returned; ``meta``
goes through JSON (tuples come back as lists, numpy scalars as Python numbers).

This module is longer than ~450 lines because it is one file format: the writer (:func:`prepare`), the
reader (:class:`CacheReader`), the manifest and its identity, and the integrity check (:func:`check`)
share the layout above, and a change to one is a change to all of them.
"""

from __future__ import annotations

import datetime as _dt
import errno
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

import numpy as np
import torch

from fusebench.datasets.errors import DatasetError
from fusebench.io import canonical_json, sha256_file, sha256_hex, strict_json
from fusebench.runtime.processes import pid_alive, space_tag


class CacheableDataset(Protocol):
    """What this module reads of a dataset: its id, root and split, its length and its raw reader
    ``_load_raw(index) -> sample``; optionally (read with ``getattr``, a default where absent)
    ``opts``, ``seed``, ``synthetic``, ``modalities``, ``PREPROCESS_VERSION`` and the ``source_files()``
    hook. :class:`fusebench.datasets.base.MultimodalDataset` (which imports this module: the cache sits
    below the adapters' base class) is one."""

    id: str
    root: str | os.PathLike
    split: str

    def __len__(self) -> int: ...

    def _load_raw(self, index: int) -> dict[str, Any]: ...

log = logging.getLogger(__name__)

FORMAT = "fusebench-prepared"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
META = "meta.json"
#: options that do not change what the raw reader returns, so they are left out of the cache key
_NON_KEY_OPTIONS = frozenset({"use_cache", "augment"})
_HEADER_BYTES = 256  # fixed .npy header size, so the final shape can be written after the data
_SCHEMA_KEYS = ("modalities", "target", "extra_targets", "meta")
#: the manifest's own sha256 (:func:`manifest_self_hash`), written since 2026-11-29; a manifest that has it records
#: every output's modification time too
SELF_HASH = "manifest_sha256"
#: the sha256 of the split's sample ids (:func:`split_samples_sha256`), in the key and the manifest of an adapter
#: whose ``split_sample_keys()`` gives them (since 2026-12-01); absent for every other cache
SPLIT_SAMPLES = "split_samples_sha256"


# -- locations and keys ------------------------------------------------------------------------
def cache_home() -> Path:
    """Where fusebench caches prepared data and synthetic twins (``$FUSEBENCH_CACHE`` overrides)."""
    env = os.environ.get("FUSEBENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "fusebench"


def prepared_bases() -> list[Path]:
    """Folders searched for prepared caches, in order (``$FUSEBENCH_PREPARED`` first)."""
    out = []
    env = os.environ.get("FUSEBENCH_PREPARED")
    if env:
        out.append(Path(env))
    out.append(cache_home() / "prepared")
    return out


def preprocess_version(dataset: CacheableDataset | type) -> int:
    """The adapter's ``PREPROCESS_VERSION`` (bump it when ``_load_raw`` changes output); default 1."""
    return int(getattr(dataset, "PREPROCESS_VERSION", 1))


def key_options(dataset: CacheableDataset) -> dict[str, Any]:
    """The build options that determine the raw samples (JSON-normalised)."""
    opts = {k: v for k, v in dict(getattr(dataset, "opts", {})).items() if k not in _NON_KEY_OPTIONS}
    opts["seed"] = int(getattr(dataset, "seed", 0))
    return json.loads(json.dumps(opts, sort_keys=True, default=str))


def split_samples_sha256(dataset: CacheableDataset) -> str | None:
    """sha256 (hex) of the JSON list of the split's sample ids when the adapter's ``split_sample_keys()`` gives
    them (its split comes from lists in its code, such as built-in standard folds), else None."""
    hook = getattr(dataset, "split_sample_keys", None)
    keys = hook() if callable(hook) else None
    return None if keys is None else sha256_hex(json.dumps([str(k) for k in keys]))


def cache_key(dataset: CacheableDataset) -> str:
    """Hash of (id, resolved root, split, options, preprocessing version, synthetic flag, and the
    :func:`split_samples_sha256` where the adapter gives one)."""
    return _key(dataset.id, str(Path(dataset.root).resolve()), dataset.split, key_options(dataset),
                preprocess_version(dataset), bool(getattr(dataset, "synthetic", False)), split_samples_sha256(dataset))


def _key(dataset_id: Any, root: Any, split: Any, options: Any, version: Any, synthetic: Any,
         split_samples: Any = None) -> str:
    """:func:`cache_key` of these values: the name of the cache folder, which a manifest's own fields reproduce
    (:func:`_manifest_problems`). ``split_samples`` None leaves it out (the key of every cache before it)."""
    ident = {"id": dataset_id, "root": root, "split": split, "options": options, "version": version,
             "synthetic": synthetic}
    if split_samples is not None:
        ident["split_samples"] = split_samples
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def manifest_key(manifest: Mapping[str, Any]) -> str:
    """The cache key the manifest's own fields (``dataset``, ``root``, ``split``, ``options``,
    ``preprocess_version``, ``synthetic``, and :data:`SPLIT_SAMPLES` where present) give: the name of the folder
    a preparation of that dataset, split and options writes it to."""
    return _key(manifest.get("dataset"), manifest.get("root"), manifest.get("split"), manifest.get("options"),
                manifest.get("preprocess_version"), manifest.get("synthetic"), manifest.get(SPLIT_SAMPLES))


def cache_dir(dataset: CacheableDataset, base: str | os.PathLike | None = None) -> Path:
    """Where the cache of ``dataset`` lives under ``base`` (default: the first of :func:`prepared_bases`)."""
    base = Path(base) if base is not None else prepared_bases()[0]
    return base / dataset.id / cache_key(dataset)


def _source_path(root: Path, p: str | os.PathLike) -> Path:
    """One path from an adapter's ``source_files()`` hook as an absolute path.

    Adapters build their paths from ``dataset.root``: with a relative root (``--root nyuv2_mtan``)
    such a path is relative to the working directory and already starts with the root, so it is
    taken as it is; any other relative path is relative to the root.
    """
    p = Path(p)
    if not p.is_absolute():
        built_from_root = not root.is_absolute() and p.parts[: len(root.parts)] == root.parts
        if not (built_from_root and p.exists()):
            p = root / p
    return Path(os.path.abspath(p))


def source_files(dataset: CacheableDataset) -> list[Path]:
    """The input files the cache depends on, as absolute paths: the adapter's ``source_files()`` hook
    when it has one (absolute paths, paths built from ``dataset.root``, or paths relative to the
    root), else every file under the root (the root itself when it is a file)."""
    root = Path(dataset.root)
    hook = getattr(dataset, "source_files", None)  # declared on MultimodalDataset; duck-typed datasets may lack it
    listed = hook() if callable(hook) else None
    if listed is not None:
        files = [_source_path(root, p) for p in listed]
    elif root.is_file():  # a root that is the data file itself (``--data-root data.mat``): that file
        files = [Path(os.path.abspath(root))]
    else:
        skip = [b.resolve() for b in prepared_bases()]
        files = []
        for p in sorted(root.rglob("*")):
            if not p.is_file():
                continue
            rp = p.resolve()
            if any(rp.is_relative_to(b) for b in skip):
                continue
            files.append(Path(os.path.abspath(p)))
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise DatasetError(f"{dataset.id}: source files listed by the adapter do not exist: {missing[:5]}")
    return sorted(set(files))


# -- writing -----------------------------------------------------------------------------------
def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version-1.0 .npy header padded to exactly ``_HEADER_BYTES`` bytes."""
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    body = repr(d).encode("latin1")
    room = _HEADER_BYTES - 10 - 1  # magic(6) + version(2) + length(2); trailing newline
    if len(body) > room:
        raise DatasetError(f"prepared cache: header for shape {shape} does not fit in {_HEADER_BYTES} bytes")
    body = body + b" " * (room - len(body)) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def _safe_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name))
    return s if s and s not in (".", "..") else "_"


def _to_numpy(value: Any, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            raise DatasetError(f"prepared cache: {what} is bfloat16, which NumPy cannot store")
        value = value.detach().cpu().resolve_conj().resolve_neg().numpy()
    if isinstance(value, np.ndarray):
        # np.ascontiguousarray would turn a 0-d array into [1]
        return value if value.flags.c_contiguous else value.copy(order="C")
    raise DatasetError(f"prepared cache: {what} must be a torch.Tensor, got {type(value).__name__}")


class _FieldWriter:
    """Appends the arrays of one field (row per sample) to a .npy file with a placeholder header."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "wb")
        try:
            self.f.write(b"\0" * _HEADER_BYTES)
        except BaseException:
            self.abort()
            raise
        self.dtype: np.dtype | None = None
        self.shapes: dict[int, tuple[int, ...]] = {}

    def add(self, index: int, value: Any) -> None:
        a = _to_numpy(value, f"{self.what} of sample {index}")
        if self.dtype is None:
            self.dtype = a.dtype
        elif a.dtype != self.dtype:
            raise DatasetError(
                f"prepared cache: {self.what} of sample {index} has dtype {a.dtype}, earlier samples {self.dtype}"
            )
        if self.shapes and a.ndim != len(next(iter(self.shapes.values()))):
            raise DatasetError(f"prepared cache: {self.what} of sample {index} has rank {a.ndim}, earlier samples differ")
        self.shapes[index] = tuple(a.shape)
        self.f.write(a)

    def finish(self, n: int) -> dict[str, Any]:
        """Write the final header and the side arrays; return the field's manifest entry."""
        shapes = set(self.shapes.values())
        fixed = len(self.shapes) == n and len(shapes) == 1
        if fixed:
            shape = (n, *next(iter(shapes)))
        else:
            shape = (sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes.values()),)
        self.f.seek(0)
        self.f.write(_npy_header(self.dtype, shape))
        self.f.close()
        entry: dict[str, Any] = {"file": self.path.name, "dtype": str(self.dtype)}
        if fixed:
            entry.update(layout="fixed", shape=list(shape[1:]))
            return entry
        ndim = len(next(iter(shapes)))
        present = np.zeros(n, dtype=bool)
        shp = np.zeros((n, ndim), dtype=np.int64)
        for i, s in self.shapes.items():
            present[i] = True
            shp[i] = s
        sizes = np.where(present, np.prod(shp, axis=1), 0) if ndim else present.astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        stem = self.path.name[: -len(".npy")]
        for suffix, arr in (("offsets", offsets), ("shapes", shp), ("present", present)):
            np.save(self.path.parent / f"{stem}.{suffix}.npy", arr)
        entry.update(layout="ragged", ndim=ndim, offsets=f"{stem}.offsets.npy", shapes=f"{stem}.shapes.npy",
                     present=f"{stem}.present.npy")
        return entry

    def abort(self) -> None:
        """Close the file, ignoring errors: a full disk makes ``close()`` fail while flushing, and the
        caller must still get to remove the temporary folder. Never raises."""
        try:
            self.f.close()  # on a failed flush the descriptor is closed all the same
        except (OSError, ValueError):
            pass


def _json_meta(meta: Any, index: int) -> Any:
    def default(o: Any) -> Any:
        if isinstance(o, (np.integer, np.floating, np.bool_)):
            return o.item()
        if isinstance(o, (np.ndarray, torch.Tensor)):
            return o.tolist()
        if isinstance(o, os.PathLike):
            return os.fspath(o)
        raise TypeError(f"meta of sample {index}: value of type {type(o).__name__} is not JSON-serialisable")

    try:
        return json.loads(json.dumps(meta, default=default))
    except (TypeError, ValueError) as e:
        raise DatasetError(f"prepared cache: {e}") from None


def _collect_inputs(dataset: CacheableDataset, memo: dict[Path, dict[str, Any]] | None, progress: bool) -> list[dict]:
    from fusebench.runtime.progress import track

    root = Path(dataset.root).resolve()
    memo = {} if memo is None else memo
    out = []
    files = source_files(dataset)
    for p in track(files, len(files), f"hash {dataset.id} inputs", progress):
        rp = p.resolve()
        try:
            st = rp.stat()
            rec = memo.get(rp)
            if rec is None or rec["size"] != st.st_size or rec["mtime_ns"] != st.st_mtime_ns:
                rec = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(rp)}
                memo[rp] = rec
        except OSError as e:
            raise DatasetError(f"{dataset.id}: cannot read the input file {p} ({e})") from None
        rel = str(rp.relative_to(root)) if rp.is_relative_to(root) else str(rp)
        out.append({"path": rel, **rec})
    return out


def prepare(
    dataset: CacheableDataset,
    base: str | os.PathLike | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    _hash_memo: dict | None = None,
) -> Path:
    """Write the prepared cache of ``dataset`` (built with ``use_cache=False``) and return its folder.

    An up-to-date cache is kept unless ``force``. Raises :class:`DatasetError` for samples that do not
    follow the schema and :class:`CacheWriteError` (a :class:`DatasetError`) when the cache cannot be
    written (disk full, read-only or unwritable ``base``: any ``OSError`` while writing); on any
    exception (Ctrl-C included) nothing is left behind.
    """
    from fusebench.runtime.progress import track

    out = cache_dir(dataset, base)
    n = len(dataset)
    if n == 0:
        raise DatasetError(f"{dataset.id}/{dataset.split}: nothing to prepare (0 samples)")
    remove_stale_work_folders(out)
    if not force and (out / MANIFEST).exists():
        try:
            m = read_manifest(out)
            adapter = f"{type(dataset).__module__}:{type(dataset).__qualname__}"
            if (m["num_samples"] == n and m["adapter"] == adapter and _stale_reason(m, Path(dataset.root)) is None
                    and not _unread_modalities(m, dataset)):
                _check_outputs(out, m)  # a changed output: rebuilt (the DatasetError below)
                log.info("%s/%s: prepared cache %s is up to date", dataset.id, dataset.split, out)
                return out
        except (DatasetError, KeyError, TypeError):
            pass  # corrupt or foreign: rebuild
    tmp: Path | None = None
    writers: dict[tuple[str, str], _FieldWriter] = {}
    made = [d for d in (out.parent, *out.parent.parents) if not d.exists()]  # removed again on failure
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{_owner_tag()}-", dir=out.parent))
        inputs = _collect_inputs(dataset, _hash_memo, progress)
        metas: list[Any] = []
        target_kind: str | None = None
        target_keys: list[str] = []
        counts: dict[str, int] = {}
        dirs = {"modalities": "modalities", "extra_targets": "extra_targets", "target": "target"}

        def writer(group: str, name: str) -> _FieldWriter:
            w = writers.get((group, name))
            if w is None:
                path = tmp / "target.npy" if (group, name) == ("target", "") else tmp / dirs[group] / f"{_safe_name(name)}.npy"
                if any(x.path == path for x in writers.values()):
                    raise DatasetError(f"prepared cache: field names {name!r} collide after sanitising")
                w = writers[(group, name)] = _FieldWriter(path, f"{group}[{name!r}]" if name else group)
            return w

        for i in track(range(n), n, f"prepare {dataset.id}/{dataset.split}", progress):
            try:
                s = dataset._load_raw(i)
            except DatasetError:
                raise
            except OSError as e:  # a read error, not one of the cache's writes
                raise DatasetError(f"{dataset.id}/{dataset.split}: reading sample {i} failed ({e})") from e
            if not isinstance(s, dict):
                raise DatasetError(f"{dataset.id}: _load_raw({i}) returned {type(s).__name__}, expected a dict")
            extra_keys = sorted(set(s) - set(_SCHEMA_KEYS))
            if extra_keys:
                raise DatasetError(f"{dataset.id}: sample {i} has keys {extra_keys} outside the schema {_SCHEMA_KEYS}")
            for name, t in (s.get("modalities") or {}).items():
                writer("modalities", name).add(i, t)
                counts[f"modalities/{name}"] = counts.get(f"modalities/{name}", 0) + 1
            for name, t in (s.get("extra_targets") or {}).items():
                writer("extra_targets", name).add(i, t)
            tgt = s.get("target")
            kind = "none" if tgt is None else "dict" if isinstance(tgt, dict) else "tensor"
            if target_kind is None:
                target_kind = kind
                target_keys = sorted(tgt) if kind == "dict" else []
            elif kind != target_kind or (kind == "dict" and sorted(tgt) != target_keys):
                raise DatasetError(f"{dataset.id}: sample {i} has a {kind} target, earlier samples a {target_kind}")
            if kind == "tensor":
                writer("target", "").add(i, tgt)
            elif kind == "dict":
                for k, v in tgt.items():
                    writer("target", k).add(i, v)
            metas.append(_json_meta(s.get("meta", {}), i))

        fields: dict[str, Any] = {"modalities": {}, "extra_targets": {}, "target": {}}
        for (group, name), w in writers.items():
            entry = w.finish(n)
            rel_dir = "" if (group, name) == ("target", "") else dirs[group] + "/"
            for k in ("file", "offsets", "shapes", "present"):
                if k in entry:
                    entry[k] = rel_dir + entry[k]
            fields[group][name] = entry
        (tmp / META).write_text(strict_json(metas))  # null for NaN / Inf: a strict parser reads it
        outputs = []
        for p in sorted(tmp.rglob("*")):
            if p.is_file():  # the mtime stays through the rename into place (_install): what opening compares
                st = p.stat()
                outputs.append({"path": p.relative_to(tmp).as_posix(), "size": st.st_size,
                                "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(p)})
        split_samples = split_samples_sha256(dataset)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "dataset": dataset.id,
            "adapter": f"{type(dataset).__module__}:{type(dataset).__qualname__}",
            "root": str(Path(dataset.root).resolve()),
            "split": dataset.split,
            "synthetic": bool(getattr(dataset, "synthetic", False)),
            "options": key_options(dataset),
            "preprocess_version": preprocess_version(dataset),
            "read_modalities": _requested_modalities(dataset),
            "key": out.name,
            "num_samples": n,
            "counts": {"samples": n, **counts},
            "target_kind": target_kind,
            "target_keys": target_keys,
            "fields": fields,
            "inputs": inputs,
            "outputs": outputs,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        if split_samples is not None:  # only where the adapter gives one: every other manifest reads as before
            manifest[SPLIT_SAMPLES] = split_samples
        manifest = json.loads(json.dumps(manifest))  # as a reader parses it: what the self-hash covers
        manifest[SELF_HASH] = manifest_self_hash(manifest)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _install(tmp, out)
    except BaseException as exc:
        _discard(writers.values(), tmp, made)
        if isinstance(exc, OSError) and not isinstance(exc, DatasetError):
            raise CacheWriteError(_write_error_message(dataset, out, exc), exc) from exc
        raise
    return out


class CacheWriteError(DatasetError):
    """The prepared cache could not be written (an ``OSError`` such as ENOSPC or EROFS while writing).

    ``os_error`` is the original exception; nothing was left behind.
    """

    def __init__(self, message: str, os_error: OSError) -> None:
        super().__init__(message)
        self.os_error = os_error
        self.errno = os_error.errno


#: a work folder of another host (or of a version that did not name its owner) untouched for this long is taken
#: as left by a killed ``prepare``: no live one goes a day without writing into it (each sample is written)
STALE_WORK_S = 24 * 3600


def _host() -> str:
    """This host's name as it goes into a work folder's name (letters, digits, '.' and '-')."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"


def _owner_tag() -> str:
    """``<pid>-<host>~<space>``: the owner a work folder's name records (``.<key>.tmp-<pid>-<host>~<space>-<8
    random>``, and ``.<key>.old-...`` for the cache being replaced), read by :func:`remove_stale_work_folders`;
    ``<space>`` is the boot and pid namespace its pid belongs to (:func:`fusebench.runtime.processes.space_tag`;
    left out, with its ``~``, where the platform tells neither)."""
    space = space_tag()
    return f"{os.getpid()}-{_host()}" + (f"~{space}" if space else "")


def _last_write(folder: Path) -> float:
    """The newest modification time (s) of ``folder`` and everything in it (0 when it is gone)."""
    newest = 0.0
    for p in (folder, *folder.rglob("*")):
        try:
            newest = max(newest, p.lstat().st_mtime)
        except OSError:
            pass
    return newest


def remove_stale_work_folders(out: Path) -> list[Path]:
    """Remove the work folders of cache ``out`` that a killed ``prepare`` left beside it, and return them.

    ``prepare`` writes into ``.<key>.tmp-*`` and moves the cache it replaces to ``.<key>.old-*``; both are
    removed when it ends, even by an exception or Ctrl-C, but not when the process is killed (SIGKILL, the OOM
    killer, a node lost), and they stayed forever, each as large as the cache. Another ``prepare`` of the same
    key may be writing its own at the same time, so a folder is removed only when its owner is known to be gone:
    its name records the owner's pid, host and process space (:func:`_owner_tag`), and a folder of this host and
    space whose process has ended is removed; one of another host, of another pid namespace of this host (a
    container sharing the host name: its pids mean other processes here) or of an earlier boot, or with a name
    written before the owner was recorded, is removed once nothing in it was written for :data:`STALE_WORK_S`.
    (A name with a pid and a host but no space, written before spaces were recorded, is checked by pid.)
    """
    removed = []
    if not out.parent.is_dir():
        return removed
    now = time.time()
    for kind in ("tmp", "old"):
        prefix = f".{out.name}.{kind}-"
        for folder in out.parent.glob(f"{glob.escape(prefix)}*"):
            if not folder.is_dir() or folder.is_symlink():
                continue
            m = re.fullmatch(r"(\d+)-(.+)-[a-z0-9_]{8}", folder.name[len(prefix):])
            host, _, space = (m.group(2) if m else "").partition("~")
            checkable = bool(host) and (host == _host() or host.split(".")[0] == _host().split(".")[0]) \
                and (not space or space == space_tag())
            if checkable:
                gone = int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1)))
            else:
                gone = now - _last_write(folder) > STALE_WORK_S
            if gone:
                shutil.rmtree(folder, ignore_errors=True)
                log.info("prepared cache: removed %s, left by an interrupted prepare", folder)
                removed.append(folder)
    return removed


def _discard(writers: Iterable[_FieldWriter], tmp: Path | None, made: list[Path] = ()) -> None:
    """Close every writer, remove the temporary folder and the (empty) folders ``made`` for it;
    never raises (cleanup after a failure)."""
    for w in writers:
        try:
            w.abort()
        except Exception:  # abort() does not raise; belt and braces so that rmtree always runs
            pass
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    for d in made:  # innermost first; rmdir leaves a folder that something else filled meanwhile
        try:
            d.rmdir()
        except OSError:
            break


def _write_error_message(dataset: CacheableDataset, out: Path, e: OSError) -> str:
    base = out.parent.parent
    reason = e.strerror or str(e) or type(e).__name__
    code = f" [{errno.errorcode[e.errno]}]" if e.errno in errno.errorcode else ""
    where = f" ({e.filename})" if e.filename else ""
    hint = ("free space there or choose another folder with --out DIR" if e.errno in (errno.ENOSPC, errno.EDQUOT)
            else "choose a writable folder with --out DIR")
    return (f"{dataset.id}/{dataset.split}: cannot write the prepared cache under {base}: {reason}{code}{where}; "
            f"the partial cache was removed. Fix: {hint} (and set FUSEBENCH_PREPARED=DIR for readers)")


def _install(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` folder to ``out``, replacing an older cache there."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{_owner_tag()}-{tmp.name[-8:]}"
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError:
        if old is not None and not out.exists():
            os.replace(old, out)
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# -- reading -----------------------------------------------------------------------------------
def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(f"prepared cache: {path} is missing") from None
    except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON, an integer of > 4300 digits
        raise DatasetError(f"prepared cache: {path} is not a readable manifest ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise DatasetError(f"prepared cache: {path} is not a {FORMAT} manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"prepared cache: {path} has format version {m.get('format_version')!r}, this fusebench reads "
            f"{FORMAT_VERSION}; re-run `fusebench data prepare {_name(m)} --force`"
        )
    try:
        edited = SELF_HASH in m and m[SELF_HASH] != manifest_self_hash(m)
    except (ValueError, RecursionError) as e:  # a value nested too deep to hash again
        raise DatasetError(f"prepared cache: {path} is not a readable manifest ({e})") from None
    if edited:
        raise DatasetError(
            f"prepared cache: {path} was edited since preparation (its content is not the one its "
            f"{SELF_HASH!r} records); re-run `fusebench data prepare {_name(m)} --force`"
        )
    _check_manifest_shape(path, m)
    return m


def manifest_self_hash(manifest: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``manifest`` without its :data:`SELF_HASH` field: written into the
    manifest by :func:`prepare` and compared by :func:`read_manifest`, so that a hand-edited manifest (an output
    dropped from ``outputs``, a recorded time removed) is refused when the cache is opened. It is no seal: whoever
    edits the manifest can recompute it (no key is involved); it catches edits, not forgeries. A manifest written
    before it existed (no such field) is read as before."""
    return sha256_hex(canonical_json({k: v for k, v in manifest.items() if k != SELF_HASH}))


def _name(m: Mapping[str, Any]) -> str:
    """The dataset id a manifest names, for the `fusebench data prepare` hint (``NAME`` where it is not an id)."""
    d = m.get("dataset")
    return d if isinstance(d, str) and re.fullmatch(r"[A-Za-z0-9_.\-]+", d) else "NAME"


#: the path of an output file inside the cache folder, as :func:`prepare` writes them (sanitised names joined by
#: ``/``): nothing absolute, no ``..``, nothing that leaves the folder
_OUTPUT_PATH = re.compile(r"(?!\.\.?(/|$))[A-Za-z0-9_.\-]+(/(?!\.\.?(/|$))[A-Za-z0-9_.\-]+)*")


def _is_int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**63


def _is_sha256(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None


def _is_input_path(v: Any) -> bool:
    """A recorded input path: text the file system can take (no NUL, no lone surrogate)."""
    if not isinstance(v, str) or not v or "\0" in v:
        return False
    try:
        os.fsencode(v)
    except UnicodeError:
        return False
    return True


def _check_manifest_shape(path: Path, m: Mapping[str, Any]) -> None:
    """The fields of a manifest that opening and checking a cache read are of the types :func:`prepare` writes;
    else one :class:`DatasetError` naming the manifest, the key and what was expected."""

    def bad(key: str, expected: str, got: Any) -> DatasetError:
        return DatasetError(f"prepared cache: {path}: {key}: expected {expected}, got {got!r}"[:500]
                            + f"; re-run `fusebench data prepare {_name(m)} --force`")

    for key, ok, expected in (
            ("dataset", lambda v: isinstance(v, str) and bool(v), "a dataset id"),
            ("split", lambda v: isinstance(v, str), "a split name"),
            ("root", lambda v: _is_input_path(v), "the data root"),
            ("num_samples", lambda v: _is_int(v, 1), "a sample count (an integer >= 1)"),
            ("target_kind", lambda v: v in ("tensor", "dict", "none"), "'tensor', 'dict' or 'none'"),
            ("fields", lambda v: isinstance(v, dict) and all(isinstance(v.get(g), dict)
                                                             for g in ("modalities", "extra_targets", "target")),
             "a mapping with the groups 'modalities', 'extra_targets' and 'target'"),
            ("inputs", lambda v: isinstance(v, list), "a list"),
            ("outputs", lambda v: isinstance(v, list), "a list")):
        if key not in m or not ok(m[key]):
            raise bad(key, expected, m.get(key, "(missing)"))
    if SPLIT_SAMPLES in m and not _is_sha256(m[SPLIT_SAMPLES]):
        raise bad(SPLIT_SAMPLES, "the sha256 of the split's sample ids (64 hex digits)", m[SPLIT_SAMPLES])
    for i, rec in enumerate(m["outputs"]):
        if not (isinstance(rec, dict) and isinstance(rec.get("path"), str) and _OUTPUT_PATH.fullmatch(rec["path"])
                and _is_int(rec.get("size")) and _is_sha256(rec.get("sha256"))
                and ("mtime_ns" not in rec or _is_int(rec["mtime_ns"], -2**63))):
            raise bad(f"outputs[{i}]", "{\"path\": a path inside the cache folder, \"size\": bytes, \"sha256\": "
                      "64 hex digits, \"mtime_ns\": an integer}", rec)
    for i, rec in enumerate(m["inputs"]):
        if not (isinstance(rec, dict) and _is_input_path(rec.get("path")) and _is_int(rec.get("size"))
                and _is_sha256(rec.get("sha256")) and _is_int(rec.get("mtime_ns"), -2**63)):
            raise bad(f"inputs[{i}]", "{\"path\": a file path, \"size\": bytes, \"sha256\": 64 hex digits, "
                      "\"mtime_ns\": an integer}", rec)
    for group, entries in m["fields"].items():
        if group not in ("modalities", "extra_targets", "target"):
            continue
        for name, e in entries.items():
            fixed = isinstance(e, dict) and e.get("layout") == "fixed"
            files = ("file",) if fixed else ("file", "offsets", "shapes", "present")
            if not (isinstance(e, dict) and e.get("layout") in ("fixed", "ragged") and isinstance(e.get("dtype"), str)
                    and all(isinstance(e.get(k), str) and _OUTPUT_PATH.fullmatch(e[k]) for k in files)
                    and (not fixed or (isinstance(e.get("shape"), list) and all(_is_int(d) for d in e["shape"])))):
                raise bad(f"fields.{group}[{name!r}]", "{\"layout\": \"fixed\" (with \"shape\") or \"ragged\" "
                          "(with \"offsets\", \"shapes\", \"present\"), \"dtype\", \"file\": paths inside the "
                          "cache folder}", e)
    if m["target_kind"] == "tensor" and "" not in m["fields"]["target"]:
        raise bad("fields.target", "the tensor target (key \"\") of a manifest whose target_kind is 'tensor'",
                  sorted(m["fields"]["target"]))


def read_files(manifest: Mapping[str, Any]) -> list[str]:
    """The files (paths in the cache folder) a reader of this cache reads: ``meta.json`` and every file that a
    field of the manifest names (data, offsets, shapes, presence), of every field whether or not a dataset reads
    it. Each must be one of the manifest's ``outputs``, so that opening checks it."""
    out = {META}
    for group in ("modalities", "extra_targets", "target"):
        for e in manifest["fields"][group].values():
            out.update(e[k] for k in ("file", "offsets", "shapes", "present") if k in e)
    return sorted(out)


def _manifest_problems(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """What makes a (well-formed) manifest unfit to check its cache by: a manifest whose dataset, root, split,
    options, preprocessing version and synthetic flag do not give the key of the folder it lies in
    (:func:`manifest_key`: a cache copied under another split's name); a file the cache reads that is not among
    its ``outputs`` (opening would read it unchecked), or -- in a manifest that records the outputs' modification
    times (one with a :data:`SELF_HASH`, or one output with a time) -- an output without one (opening would
    check it by its size alone). [] when there is nothing."""
    name = _name(manifest)
    path = folder / MANIFEST
    key = manifest_key(manifest)
    if key != folder.name or manifest.get("key") != folder.name:
        # a cache copied or moved under another dataset's, split's or options' folder: opening it would serve
        # that dataset's samples (a test split's as the validation split's) with every file's hash intact
        return [f"{path} describes the cache of {manifest.get('dataset')!r} split {manifest.get('split')!r} with "
                f"options {manifest.get('options')!r} (key {key}), not the one this folder is named for "
                f"({folder.name}): it was copied or moved here; delete the folder and re-run "
                f"`fusebench data prepare {name} --force`"]
    listed = {r["path"] for r in manifest["outputs"]}
    problems = [f"{folder / f} is read by the cache but not listed in the outputs of {path} (so its size and sha256 "
                f"are not checked): the manifest was edited; re-run `fusebench data prepare {name} --force`"
                for f in read_files(manifest) if f not in listed]
    if SELF_HASH in manifest or any("mtime_ns" in r for r in manifest["outputs"]):
        problems += [f"{path}: output {r['path']} has no recorded modification time (\"mtime_ns\") although this "
                     f"manifest records them: the manifest was edited; re-run `fusebench data prepare {name} --force`"
                     for r in manifest["outputs"] if "mtime_ns" not in r]
    return problems


#: manifest fields that say where, when and by which code path a cache was made, not what it holds:
#: left out of :func:`content_identity` (so re-preparing, moving the data, or moving an adapter class
#: to another module leaves the identity, and a leaderboard's comparability groups, as they were), nor which
#: modalities the preparation read (what it stores of them is in ``fields``; recorded since 2026-11, left
#: out so that the identities of older caches hold), nor the manifest's own sha256 (:data:`SELF_HASH`: it covers
#: the fields above too)
NOT_CONTENT = ("adapter", "root", "key", "created", "read_modalities", SELF_HASH)


def content_identity(manifest: Mapping[str, Any]) -> str:
    """sha256 (hex) of what a prepared cache holds: the canonical JSON of its manifest without
    :data:`NOT_CONTENT` and without the inputs' and outputs' modification times -- the dataset id, split,
    options, preprocessing version, field layouts, counts, and the path (relative to the root), size and
    sha256 of every input and output file. Two preparations of the same files with the same options
    have the same identity wherever and whenever they were made."""
    content = {k: v for k, v in manifest.items() if k not in NOT_CONTENT}
    content["inputs"] = [{**{k: v for k, v in rec.items() if k not in ("mtime_ns", "path")},
                          "path": _portable(rec.get("path", ""))} for rec in manifest.get("inputs", [])]
    if "outputs" in manifest:  # the outputs' mtimes, recorded since 2026-11, left out as the inputs' are
        content["outputs"] = [{k: v for k, v in rec.items() if k != "mtime_ns"} for rec in manifest["outputs"]]
    return sha256_hex(canonical_json(content))


def _portable(path: str) -> str:
    """An input's path as the identity sees it: relative to the root with ``/`` separators; an input outside
    the root (recorded absolute) by its file name only, since its size and sha256 name its content."""
    p = Path(path)
    return p.name if p.is_absolute() else p.as_posix()


def _requested_modalities(dataset: CacheableDataset) -> list[str] | None:
    """The modalities ``dataset`` reads (None: the duck-typed dataset does not say, so all it returns)."""
    mods = getattr(dataset, "modalities", None)
    return None if mods is None else sorted(str(m) for m in mods)


def _unread_modalities(manifest: dict[str, Any], dataset: CacheableDataset) -> list[str]:
    """The modalities ``dataset`` asks for that the cache's preparation did not read: a cache prepared
    from ``modalities=["text"]`` holds no audio even for samples that have it, so it cannot serve a dataset
    that reads audio (its samples would come out with the audio missing). A manifest from before
    ``read_modalities`` was recorded is judged by the modalities it stores."""
    wanted = _requested_modalities(dataset)
    if wanted is None:
        return []
    read = manifest.get("read_modalities")
    if read is None:
        read = list((manifest.get("fields") or {}).get("modalities") or {})
    return [m for m in wanted if m not in set(read)]


def _stale_reason(manifest: dict[str, Any], root: Path) -> str | None:
    """Why the recorded inputs no longer match the files (size/mtime), or None."""
    for rec in manifest.get("inputs", []):
        p = Path(rec["path"])
        p = p if p.is_absolute() else root / p
        try:
            st = p.stat()
        except OSError:
            return f"input {p} is gone"
        if st.st_size != rec["size"] or st.st_mtime_ns != rec["mtime_ns"]:
            return f"input {p} changed since preparation"
    return None


def _check_outputs(folder: Path, manifest: Mapping[str, Any]) -> None:
    """The cheap check of a prepared cache's files, made whenever it is opened: each output file of ``manifest`` is
    there with its recorded size and, where the manifest records it (``mtime_ns``), its modification time; a file
    whose time differs is hashed, and one whose sha256 differs too was modified in place (same size). Else a
    :class:`DatasetError` naming the file. A same-size edit that leaves the time as it was (restored, or within the
    filesystem's timestamp resolution of the preparation) is found by :func:`check` alone, which hashes every file.
    First, :func:`_manifest_problems`: a file the cache reads that ``outputs`` does not list, or an output without a
    time in a manifest that records them, is refused as an edited manifest. A manifest written before outputs'
    times were recorded (no output has one, no :data:`SELF_HASH`) is judged by their sizes alone, as it was."""
    name = manifest.get("dataset")
    problems = _manifest_problems(folder, manifest)
    if problems:
        raise DatasetError(f"prepared cache: {problems[0]}")
    for rec in manifest["outputs"]:
        p = folder / rec["path"]
        try:
            st = p.stat()
        except OSError:
            raise DatasetError(f"prepared cache: output file {p} is missing; re-run `fusebench data prepare`") from None
        if st.st_size != rec["size"]:
            raise DatasetError(
                f"prepared cache: {p} is truncated or modified ({st.st_size} bytes, manifest says {rec['size']}); "
                f"re-run `fusebench data prepare {name} --force`"
            )
        if "mtime_ns" not in rec or st.st_mtime_ns == rec["mtime_ns"]:
            continue
        if sha256_file(p) != rec["sha256"]:
            raise DatasetError(
                f"prepared cache: {p} was modified since preparation (its size is the manifest's, its modification "
                f"time and sha256 are not); run `fusebench data check {name}` to list every changed file and re-run "
                f"`fusebench data prepare {name} --force`"
            )
        log.warning("prepared cache: %s has another modification time than at preparation (copied without its "
                    "times?); its sha256 is the manifest's, so it is read, and hashed again at every opening until "
                    "the cache is prepared again (`fusebench data prepare %s --force`)", p, name)


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DatasetError(f"prepared cache: cannot read {path} ({e}); re-run `fusebench data prepare`") from None


class _Field:
    """Read side of one stored field."""

    def __init__(self, folder: Path, entry: dict[str, Any], n: int) -> None:
        self.fixed = entry["layout"] == "fixed"
        self.data = _load_npy(folder / entry["file"])
        where = folder / entry["file"]
        if self.fixed:
            if self.data.shape != (n, *entry["shape"]) or str(self.data.dtype) != entry["dtype"]:
                raise DatasetError(f"prepared cache: {where} has shape {self.data.shape}, manifest says {[n, *entry['shape']]}")
            return
        self.offsets = np.asarray(_load_npy(folder / entry["offsets"]))
        self.shapes = np.asarray(_load_npy(folder / entry["shapes"]))
        self.present = np.asarray(_load_npy(folder / entry["present"]))
        if (self.offsets.shape != (n + 1,) or self.present.shape != (n,)
                or int(self.offsets[-1]) != self.data.shape[0]):
            raise DatasetError(f"prepared cache: offsets of {where} do not match its data (corrupt cache)")
        self._offs = self.offsets.tolist()
        self._shapes = [tuple(s) for s in self.shapes.tolist()]
        self._present = self.present.tolist()

    def get(self, i: int) -> torch.Tensor | None:
        if self.fixed:
            return torch.from_numpy(np.array(self.data[i]))
        if not self._present[i]:
            return None
        a = np.array(self.data[self._offs[i]: self._offs[i + 1]]).reshape(self._shapes[i])
        return torch.from_numpy(a)


class CacheReader:
    """Loads samples of one prepared cache. ``load(index)`` returns a fresh sample dict.

    ``modalities`` restricts which modalities are read (default: all stored).
    """

    def __init__(self, folder: str | os.PathLike, modalities: Iterable[str] | None = None,
                 num_samples: int | None = None) -> None:
        self.folder = Path(folder)
        self.manifest = m = read_manifest(self.folder)
        n = int(m["num_samples"])
        if num_samples is not None and num_samples != n:
            raise DatasetError(
                f"prepared cache {self.folder / MANIFEST}: holds {n} samples but the dataset indexes "
                f"{num_samples}; re-run `fusebench data prepare {m['dataset']} --force`"
            )
        _check_outputs(self.folder, m)
        self.n = n
        wanted = set(modalities) if modalities is not None else None
        self.modalities = {k: _Field(self.folder, e, n) for k, e in m["fields"]["modalities"].items()
                           if wanted is None or k in wanted}
        self.extra = {k: _Field(self.folder, e, n) for k, e in m["fields"]["extra_targets"].items()}
        self.target_kind = m["target_kind"]
        self.target = {k: _Field(self.folder, e, n) for k, e in m["fields"]["target"].items()}
        try:
            self.meta = json.loads((self.folder / META).read_text())
        except (OSError, ValueError) as e:
            raise DatasetError(f"prepared cache: cannot read {self.folder / META} ({e})") from None
        if not isinstance(self.meta, list) or len(self.meta) != n:
            raise DatasetError(f"prepared cache: {self.folder / META} does not hold {n} meta records")

    @property
    def manifest_hash(self) -> str:
        """The dataset identity recorded in run.json: :func:`content_identity` of this cache's manifest."""
        return content_identity(self.manifest)

    def __len__(self) -> int:
        return self.n

    def load(self, index: int) -> dict[str, Any]:
        mods = {}
        for k, f in self.modalities.items():
            t = f.get(index)
            if t is not None:
                mods[k] = t
        if self.target_kind == "tensor":
            target: Any = self.target[""].get(index)
        elif self.target_kind == "dict":
            target = {k: f.get(index) for k, f in self.target.items()}
        else:
            target = None
        sample: dict[str, Any] = {"modalities": mods, "target": target}
        extra = {}
        for k, f in self.extra.items():
            t = f.get(index)
            if t is not None:
                extra[k] = t
        if self.extra:
            sample["extra_targets"] = extra
        sample["meta"] = json.loads(json.dumps(self.meta[index])) if not _flat(self.meta[index]) else dict(self.meta[index])
        return sample


def _flat(meta: Any) -> bool:
    return isinstance(meta, dict) and all(isinstance(v, (str, int, float, bool, type(None))) for v in meta.values())


def find_cache(dataset: CacheableDataset) -> Path | None:
    """The first folder among :func:`prepared_bases` holding a manifest for ``dataset``."""
    for base in prepared_bases():
        d = cache_dir(dataset, base)
        if (d / MANIFEST).exists():
            return d
    return None


def open_cache(dataset: CacheableDataset, base: str | os.PathLike | None = None) -> CacheReader | None:
    """A reader for the prepared cache of ``dataset``, or None when there is none (or it is stale).

    Raises :class:`DatasetError` naming the file for a corrupt or truncated cache.
    """
    folder = cache_dir(dataset, base) if base is not None else find_cache(dataset)
    if folder is None or not (folder / MANIFEST).exists():
        return None
    manifest = read_manifest(folder)
    reason = _stale_reason(manifest, Path(dataset.root))
    unread = _unread_modalities(manifest, dataset)
    if reason is None and unread:
        reason = f"it was prepared without the modalities {unread} this dataset reads"
    if reason is not None:
        log.warning("%s/%s: ignoring the prepared cache %s: %s; re-run `fusebench data prepare`",
                    dataset.id, dataset.split, folder, reason)
        return None
    return CacheReader(folder, modalities=getattr(dataset, "modalities", None), num_samples=len(dataset))


# -- integrity check ---------------------------------------------------------------------------
def list_caches(dataset_id: str, root: str | os.PathLike | None = None, base: str | os.PathLike | None = None) -> list[Path]:
    """Prepared cache folders of ``dataset_id`` (optionally only those built from ``root``)."""
    bases = [Path(base)] if base is not None else prepared_bases()
    want_root = str(Path(root).resolve()) if root is not None else None
    out = []
    for b in bases:
        d = b / dataset_id
        if not d.is_dir():
            continue
        for sub in sorted(d.iterdir()):
            if sub.name.startswith(".") or not (sub / MANIFEST).exists():
                continue
            if want_root is not None:
                try:
                    if read_manifest(sub).get("root") != want_root:
                        continue
                except DatasetError:
                    pass  # a corrupt manifest is reported by check()
            out.append(sub)
    return out


def check(folder: str | os.PathLike, progress: bool = False) -> list[str]:
    """Recompute every hash recorded in ``folder``'s manifest; return the problems found ([] = valid)."""
    from fusebench.runtime.progress import track

    folder = Path(folder)
    try:
        m = read_manifest(folder)
    except DatasetError as e:
        return [str(e)]
    problems = _manifest_problems(folder, m)
    root = Path(m["root"])
    recs = [("output", folder / r["path"], r) for r in m["outputs"]]
    recs += [("input", Path(r["path"]) if Path(r["path"]).is_absolute() else root / r["path"], r) for r in m["inputs"]]
    for role, p, rec in track(recs, len(recs), f"check {m['dataset']}/{m['split']}", progress):
        if not p.is_file():
            problems.append(f"{role} file {p} is missing")
            continue
        size = p.stat().st_size
        if size != rec["size"]:
            problems.append(f"{role} file {p} has {size} bytes, manifest says {rec['size']}")
            continue
        digest = sha256_file(p)
        if digest != rec["sha256"]:
            problems.append(f"{role} file {p} has sha256 {digest[:16]}..., manifest says {rec['sha256'][:16]}...")
    listed = {r["path"] for r in m["outputs"]} | {MANIFEST} | set(read_files(m))  # the latter: said above
    for p in folder.rglob("*"):
        if p.is_file() and p.relative_to(folder).as_posix() not in listed:
            problems.append(f"output folder holds an unlisted file {p}")
    return problems


__all__ = [
    "CacheReader", "CacheWriteError", "cache_dir", "cache_key", "check", "find_cache", "list_caches", "open_cache",
    "prepare",
    "content_identity", "prepared_bases", "read_manifest", "remove_stale_work_folders", "source_files",
]
