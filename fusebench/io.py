"""Files, written whole or not at all; content hashes; canonical JSON. One of each for the package.

Layer 0 (imports nothing of fusebench): every module that writes a record, a board, a plot, a
checkpoint or a cache file goes through :func:`atomic_write`, every file digest through
:func:`sha256_file`, every hash of a JSON-able value through :func:`canonical_json`.

- :func:`atomic_write` hands the writer a temporary file in the destination folder (a unique name,
  so two processes writing one path both succeed and the last rename wins), gives it the mode a plain
  ``open(path, "w")`` would (``0o666 & ~umask``: ``mkstemp`` alone leaves 0600), and renames it over
  ``path``. On any error the temporary file is removed and the previous ``path``, if any, is kept.
  :func:`atomic_write_together` does the same for the files of one output (a board and its plot): every
  temporary file is whole before the first is renamed into place.
- :func:`canonical_json` is sorted-key JSON. Its two separator styles are both in use by hashes that
  committed files carry, so both are kept and named: ``compact`` (``","`` / ``":"``, the config hash
  and the comparability key of every record) and the ``json.dumps`` default (``", "`` / ``": "``, the
  input hashes of the committed plots and the synthetic datasets' cache keys). Changing either would
  change committed hashes.
- JSON is strict everywhere (:func:`strict_json`): a non-finite float (NaN, an infinity) is written
  as ``null``, never as the bare ``NaN`` / ``Infinity`` that strict parsers refuse, by
  :func:`atomic_write_json` and :func:`canonical_json` alike (so a hash of a value holding NaN is the
  hash of what the file holds).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import math
import numbers
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Sequence

__all__ = ["DuplicateKeyError", "atomic_write", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "atomic_write_together",
           "canonical_json", "finite_json", "new_file_mode", "remove_stale_temps", "sha256_file", "shown_lines", "shown_path", "shown_text", "sha256_hex", "strict_json", "unique_keys",
           "write_if_changed"]


# -- file modes ----------------------------------------------------------------------------------
def _umask_from_proc() -> int | None:
    """The process's umask from ``/proc/self/status`` (Linux >= 4.7), without changing it."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _umask_at_import() -> int:
    found = _umask_from_proc()
    if found is None:  # no /proc: set and restore, once, while the package is imported
        found = os.umask(0o022)
        os.umask(found)
    return found


_UMASK_AT_IMPORT = _umask_at_import()


def new_file_mode() -> int:
    """The mode of a newly created file, ``0o666 & ~umask``: what ``open(path, "w")`` gives. The
    umask is read from ``/proc/self/status`` at each call (it never changes the process-wide umask,
    which other threads may be using); without ``/proc``, the umask when fusebench was imported."""
    umask = _umask_from_proc()
    return 0o666 & ~(umask if umask is not None else _UMASK_AT_IMPORT)


# -- atomic writes -------------------------------------------------------------------------------
def _sync(name: str | os.PathLike, folder: bool = False) -> None:
    """``fsync`` the file (or, ``folder=True``, the folder: its entries, i.e. a rename into it) ``name``: its data
    on the disk, not only in the page cache. A folder that cannot be opened or synced (another OS, some network
    file systems) is left as it is; a file's failure is an error, as a failed write is."""
    # (Windows: fsync is _commit, which refuses a read-only descriptor with EBADF; a folder cannot be opened there)
    flags = os.O_RDWR if sys.platform == "win32" and not folder else os.O_RDONLY
    try:
        fd = os.open(name, flags)
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as e:  # a file system without fsync (EINVAL / ENOTSUP: some FUSE and special ones) has no more to do
        if not folder and e.errno not in (errno.EINVAL, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP)):
            raise
    finally:
        os.close(fd)


def _write_temp(path: Path, write: Callable[[IO[bytes]], Any] | Callable[[str], Any], by_name: bool) -> str:
    """A whole temporary file beside ``path`` (``.<name>.<random>.tmp``: what :func:`remove_stale_temps` finds),
    filled by ``write``; removed again if writing fails, a full disk reported as one ``OSError(ENOSPC)`` naming
    ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(fd, new_file_mode())
            if not by_name:
                with os.fdopen(fd, "wb") as f:
                    fd = -1
                    write(f)  # type: ignore[arg-type]
        finally:
            if fd >= 0:
                os.close(fd)
        if by_name:
            write(tmp)  # type: ignore[arg-type]
        _sync(tmp)  # on the disk before the rename makes it the file: else a power loss can leave it empty
    except BaseException as e:
        full = isinstance(e, (OSError, RuntimeError)) and _disk_full(e, path.parent)
        Path(tmp).unlink(missing_ok=True)
        if full:
            raise OSError(errno.ENOSPC, f"cannot write {path}: no space left on device (the partial file was "
                                        f"removed; the previous {path.name}, if any, is kept)") from None
        raise
    return tmp


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any] | Callable[[str], Any], *,
                 by_name: bool = False) -> Path:
    """Create ``path`` whole or not at all: ``write`` fills a temporary file in the same folder, which
    is then renamed over ``path``. ``write`` gets the open binary file, or with ``by_name=True`` the
    temporary file's name (for writers that open it themselves: ``torch.save``, h5py). The file's data is
    synced to the disk before the rename and the folder after it, so a power loss leaves the old file or the
    new one, never an empty or partial one. A full disk is reported as one ``OSError(ENOSPC)`` naming ``path``
    (torch reports it as a zip-writer error)."""
    path = Path(path)
    tmp = _write_temp(path, write, by_name)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync(path.parent, folder=True)  # the rename itself on the disk
    return path


def atomic_write_together(files: Sequence[tuple[str | os.PathLike, Callable[[IO[bytes]], Any]]]) -> list[Path]:
    """Create the files of one output together: each ``(path, write)`` fills a temporary file beside its path (as
    :func:`atomic_write` does, in the given order), and only once every one is whole are they renamed into place,
    in the same order. An error or an interruption (Ctrl-C) before the renames leaves every path as it was (new,
    missing or old alike) and removes the temporary files written so far; a process killed outright (SIGKILL)
    leaves its temporary files, which :func:`remove_stale_temps` finds. The renames are several steps: list the
    file that refers to the others (a page linking its plot) last, so it never appears before them; a rename that
    fails puts the files already renamed back as they were (each replaced file is kept as a hard link until the last
    rename succeeded)."""
    done: list[tuple[Path, str]] = []
    try:
        for path, write in files:
            path = Path(path)
            done.append((path, _write_temp(path, write, False)))
    except BaseException:
        for _, tmp in done:
            Path(tmp).unlink(missing_ok=True)
        raise
    # the files being replaced, kept (hard links beside them) until every rename succeeded: a rename that fails
    # (a folder in the way, a file held open on Windows) puts the ones already renamed back as they were
    kept: dict[Path, Path | None] = {}
    renamed: list[Path] = []
    try:
        for path, tmp in done:
            kept[path] = _keep(path) if path not in kept else kept[path]
            os.replace(tmp, path)
            renamed.append(path)
    except BaseException:
        for path in reversed(renamed):
            old = kept.get(path)
            try:
                if old is not None:
                    os.replace(old, path)
                else:
                    path.unlink(missing_ok=True)
            except OSError:
                pass
        for _, tmp in done:
            Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        for old in kept.values():
            if old is not None:
                old.unlink(missing_ok=True)
    for folder in dict.fromkeys(path.parent for path, _ in done):  # the renames on the disk
        _sync(folder, folder=True)
    return [path for path, _ in done]


def _keep(path: Path) -> Path | None:
    """A hard link to the file at ``path`` beside it (a hidden ``.<name>.*.kept`` name, found by
    :func:`remove_stale_temps` if the process dies), or None where there is no file to keep or it cannot be linked."""
    if not path.is_file() or path.is_symlink():
        return None
    for attempt in range(100):
        old = path.with_name(f".{path.name}.{os.getpid()}-{attempt}.kept")
        try:
            os.link(path, old)
            return old
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def create_once(path: str | os.PathLike, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists, never over a file another process created first: ``data``
    goes to a whole temporary file beside it, which is then hard-linked into place (the link fails if ``path``
    exists), so ``path`` appears whole or not at all. True: this call created it; False: it was there, and is kept
    as it is. On a file system without hard links ``path`` is created exclusively, then written in one call (still
    never over another's; a reader may then see it before it is whole, as the selection's reader allows for:
    ``fusebench.sweep.selection``)."""
    path = Path(path)
    tmp = Path(_write_temp(path, lambda f: f.write(data), False))
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, new_file_mode())
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _disk_full(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` (from writing into ``folder``) comes from a full disk: ENOSPC / EDQUOT, or a
    write error while less than 1 MiB is free there."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        return shutil.disk_usage(folder).free < 2**20
    except OSError:
        return False


def remove_stale_temps(path: str | os.PathLike, older_than: float | None = None) -> None:
    """Remove the temporary files an :func:`atomic_write` of ``path`` killed in the middle of its write left beside
    it (``.<name>.*.tmp``; ``.<name>.*.kept``, the replaced file :func:`atomic_write_together` keeps while it
    renames). Call it only where no live writer of ``path`` can exist (e.g. under the cell's lock), or pass
    ``older_than`` (seconds): then only a temporary file last modified that long ago or earlier is removed. A
    live write's file is modified as it is written and renamed away once whole, so where every write of ``path``
    takes far less than ``older_than`` (a board, a plot) a concurrent writer's file is never touched."""
    path = Path(path)
    now = time.time()
    leftovers = [*path.parent.glob(f".{glob.escape(path.name)}.*.tmp"),
                 *path.parent.glob(f".{glob.escape(path.name)}.*.kept")]  # atomic_write_together's kept files
    for tmp in leftovers:
        if older_than is not None:
            try:
                if now - tmp.stat().st_mtime < older_than:
                    continue
            except FileNotFoundError:  # renamed or removed meanwhile
                continue
        tmp.unlink(missing_ok=True)


def shown_text(text: str) -> str:
    """``text`` from a file (a record's field, a config key, a failed cell's error) as a message on a terminal or in
    a log shows it: as it is when every character prints, else Python's quoted ``repr`` of it, so a control
    character (a newline, an escape sequence) or a bidirectional-text control (U+202E, which reverses the text after
    it) reaches the terminal escaped (``'a\\x1b[2J'``), never raw. The one escaping of file text in messages."""
    return text if text.isprintable() else repr(text)


def shown_lines(text: str) -> str:
    """``text`` of several lines (an error message) as a terminal shows it: each ``\\n``-separated line through
    :func:`shown_text`, so a multi-line message keeps its lines and any other control character (a carriage return,
    an escape sequence, U+2028) is escaped within its line."""
    return "\n".join(shown_text(line) for line in text.split("\n"))


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a message shows it (:func:`shown_text`): a control character in a file name escaped
    (``'runs/a\\x1b[2J/run.json'``), never raw. Ordinary paths (non-ASCII letters included) print as before."""
    text = os.fspath(path)
    return shown_text(text if isinstance(text, str) else os.fsdecode(text))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """``text`` as UTF-8, written atomically (:func:`atomic_write`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any, default: Callable[[Any], Any] | None = None) -> Path:
    """``data`` as indented, sorted-key strict JSON (:func:`strict_json`: NaN and infinities written as
    ``null``) with a final newline (the layout of every run record)."""
    return atomic_write_text(path, strict_json(data, indent=2, sort_keys=True, default=default) + "\n")


def write_if_changed(path: str | os.PathLike, text: str) -> bool:
    """:func:`atomic_write_text` unless the file already holds exactly ``text``: an unchanged file keeps
    its mtime (regenerating boards touches only what changed). Returns whether it wrote."""
    path = Path(path)
    try:
        if path.read_bytes() == text.encode("utf-8"):
            return False
    except OSError:
        pass
    atomic_write_text(path, text)
    return True


# -- hashes --------------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes, read in ``chunk``-byte pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def sha256_hex(data: str | bytes, length: int | None = None) -> str:
    """Hex sha256 of ``data`` (a str is hashed as UTF-8), cut to ``length`` digits when given."""
    digest = hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()
    return digest if length is None else digest[:length]


def canonical_json(obj: Any, *, compact: bool = True, default: Callable[[Any], Any] | None = str) -> str:
    """Sorted-key strict JSON of ``obj`` (:func:`strict_json`: NaN and infinities as ``null``), the form
    that is hashed. ``compact``: ``","`` / ``":"`` separators; ``compact=False``: ``json.dumps``'s default
    ``", "`` / ``": "`` (plot input hashes, synthetic cache keys). Values JSON cannot hold go through
    ``default`` (``str``)."""
    return strict_json(obj, sort_keys=True, separators=(",", ":") if compact else None, default=default)


# -- strict JSON ---------------------------------------------------------------------------------
def _number(obj: numbers.Real) -> int | float | None:
    """A number JSON cannot hold as it is (numpy's, a Fraction...): an integral one as ``int``, another as
    ``float``, None when that is not finite."""
    if isinstance(obj, numbers.Integral):
        return int(obj)
    x = float(obj)
    return x if math.isfinite(x) else None


def finite_json(obj: Any, default: Callable[[Any], Any] | None = None, _path: frozenset[int] = frozenset()) -> Any:
    """``obj`` with every non-finite float (NaN, +-inf) replaced by None, in mappings, lists and tuples at any
    depth; other numbers (``numbers.Real``: numpy's floats and integers too) become a float (None when not
    finite) or an int; other values JSON cannot hold go through ``default`` first (left as they are without
    one, for ``json.dumps`` to refuse). A value that contains itself is a ``ValueError("Circular reference
    detected")``, as ``json.dumps`` says."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, numbers.Real):
        return _number(obj)
    if isinstance(obj, (dict, list, tuple)):
        if id(obj) in _path:
            raise ValueError("Circular reference detected")
        inner = _path | {id(obj)}
        if isinstance(obj, dict):
            return {k: finite_json(v, default, inner) for k, v in obj.items()}
        return [finite_json(v, default, inner) for v in obj]
    return obj if default is None else finite_json(default(obj), default, _path)


class DuplicateKeyError(ValueError):
    """A JSON object that gives one key twice (:func:`unique_keys`)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of a strict JSON read: an object that gives one key twice is a
    :class:`DuplicateKeyError` naming it (``json`` keeps the last of two equal keys silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"key {k!r} given twice in one object")
        out[k] = v
    return out


def strict_json(obj: Any, default: Callable[[Any], Any] | None = None, **kw: Any) -> str:
    """``json.dumps(obj, allow_nan=False, **kw)`` after :func:`finite_json`: NaN and infinities are
    written as ``null``, never as the bare ``NaN`` / ``Infinity`` that strict JSON parsers refuse; other
    numbers (``numbers.Real``, e.g. ``numpy.float32``) as numbers, before ``default`` sees them. A value that
    contains itself raises json's own ``ValueError`` ("Circular reference detected")."""

    def number_first(o: Any) -> Any:
        if isinstance(o, numbers.Real):
            return _number(o)
        if default is None:
            raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
        return default(o)

    try:  # the common case (every float finite) in one C pass
        return json.dumps(obj, allow_nan=False, default=number_first, **kw)
    except ValueError as e:  # "Out of range float values are not JSON compliant", or a circular value
        if "Circular reference" in str(e):
            raise
        return json.dumps(finite_json(obj, default), allow_nan=False, default=number_first, **kw)
