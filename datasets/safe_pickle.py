"""Allowlist unpickler for dataset files (MMSA feature pickles, mmdet3d info pickles, ...).

``pickle.load`` executes whatever callable a pickle names (``os.system``, ``builtins.eval``,
``subprocess.Popen``, ...), so a downloaded ``.pkl`` is code. :func:`load` reads a pickle with a
:class:`pickle.Unpickler` whose :meth:`~SafeUnpickler.find_class` resolves only the globals that plain
containers of numpy data need:

* numpy arrays: ``numpy.ndarray``, ``numpy.dtype``, ``numpy{._core,.core}.multiarray._reconstruct``
  (protocol <= 4 arrays), ``numpy{._core,.core}.numeric._frombuffer`` (protocol 5 arrays),
  ``numpy{._core,.core}.multiarray.scalar`` (numpy scalars such as ``np.float64``);
* builtins for containers and numbers that are not pickle opcodes: ``set``, ``frozenset``,
  ``bytearray``, ``complex``, ``slice``, ``range``, plus ``collections.OrderedDict`` and
  ``_codecs.encode`` (how protocol-2 pickles spell ``bytes``).

``dict``, ``list``, ``tuple``, ``str``, ``bytes``, ``int``, ``float``, ``bool`` and ``None`` are
pickle opcodes and need no global. Any other global raises :class:`~fusebench.datasets.DatasetError`
naming the file and the refused ``module.name`` *before* anything is called, so a malicious pickle
runs nothing. Pickles written by numpy 1.x name ``numpy.core.*``; those are resolved to the same
objects in ``numpy._core`` (numpy >= 2) without the deprecation warning.

Usage::

    from fusebench.datasets.safe_pickle import load
    feats = load("aligned_50.pkl")        # {"train": {"text": ndarray, ...}, ...}
"""

from __future__ import annotations

import _compat_pickle
import builtins
import collections
import importlib
import io
import os
import pickle
import struct
from pathlib import Path
from typing import Any

from .base import DatasetError

__all__ = ["ALLOWED_GLOBALS", "SafeUnpickler", "load", "loads"]

_NUMPY_CORE = {
    ("multiarray", "_reconstruct"),
    ("multiarray", "scalar"),
    ("numeric", "_frombuffer"),
}
_BUILTINS = {"set", "frozenset", "bytearray", "complex", "slice", "range", "bytes", "str", "int",
             "float", "bool", "dict", "list", "tuple"}

#: every ``module.name`` the unpickler will resolve (numpy.core.* are aliases of numpy._core.*)
ALLOWED_GLOBALS: frozenset[str] = frozenset(
    {"numpy.ndarray", "numpy.dtype", "collections.OrderedDict", "_codecs.encode"}
    | {f"numpy.{core}.{mod}.{name}" for core in ("core", "_core") for mod, name in _NUMPY_CORE}
    | {f"builtins.{name}" for name in _BUILTINS}
)


def _numpy_core_attr(submodule: str, name: str) -> Any:
    """``numpy._core.<submodule>.<name>`` on numpy >= 2, ``numpy.core...`` on numpy 1.x."""
    for package in ("numpy._core", "numpy.core"):
        try:
            module = importlib.import_module(f"{package}.{submodule}")
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"numpy has no {submodule}.{name}")


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED_GLOBALS`; ``source`` names the file in errors."""

    def __init__(self, file: io.BufferedIOBase, source: str = "<bytes>") -> None:
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        # protocol 0-2 pickles spell globals with Python 2 names (__builtin__, commands, ...)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        full = f"{module}.{name}"
        if full not in ALLOWED_GLOBALS:
            raise DatasetError(
                f"{self.source}: refused to unpickle global {full!r}: only numpy arrays/dtypes/scalars "
                f"and plain containers (dict, list, tuple, set, str, bytes, numbers) are allowed in "
                f"dataset pickles, so this file was not loaded and nothing in it was run"
            )
        if module == "builtins":
            return getattr(builtins, name)
        if module == "collections":
            return collections.OrderedDict
        if module == "_codecs":
            import _codecs

            return _codecs.encode
        if module == "numpy":
            import numpy

            return getattr(numpy, name)
        # numpy.core.<sub> / numpy._core.<sub>
        return _numpy_core_attr(module.rsplit(".", 1)[1], name)

    def persistent_load(self, pid: Any) -> Any:
        raise DatasetError(f"{self.source}: refused a persistent id {pid!r}: dataset pickles may not use them")


#: what unpickling damaged bytes raises: the pickle machine's own errors (UnpicklingError, EOFError on a
#: truncated stream, OverflowError for a FRAME or length field beyond the maximum, MemoryError for a
#: huge one, IndexError/KeyError for a bad memo or stack reference, UnicodeDecodeError for damaged
#: text), and the errors of the allowlisted numpy constructors called with damaged arguments
#: (ValueError, TypeError, AttributeError, SystemError), or ImportError, RecursionError, struct.error
_DAMAGED = (pickle.UnpicklingError, EOFError, OverflowError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, LookupError, ImportError, UnicodeDecodeError, MemoryError, RecursionError, SystemError,
            struct.error)


def loads(data: bytes, source: str = "<bytes>") -> Any:
    """Unpickle ``data`` through :class:`SafeUnpickler`; ``source`` names it in error messages."""
    try:
        return SafeUnpickler(io.BytesIO(data), source=source).load()
    except DatasetError:  # the refusal of a forbidden global or persistent id: its own message
        raise
    except _DAMAGED as e:
        raise DatasetError(f"{source}: not a readable pickle: the file is damaged, truncated or not a pickle "
                           f"({type(e).__name__}: {e})") from e


def load(path: str | os.PathLike) -> Any:
    """Read the pickle file ``path`` with the allowlist unpickler (see module docstring)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise DatasetError(f"{path}: pickle file does not exist") from e
    except OSError as e:
        raise DatasetError(f"{path}: cannot read pickle file ({e})") from e
    return loads(data, source=str(path))
