"""The errors of the dataset layer: one message naming the file (or folder) and what was expected."""

from __future__ import annotations

import errno
import os
from typing import Any


class DatasetError(ValueError):
    """Bad or missing data: the message names the file and the problem."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset's files are missing; the message is the adapter's ``data info`` text."""


def not_a_file(path: str | os.PathLike) -> str:
    """Why ``path``, which exists or is a link, is not a readable file: a folder, a symbolic link that
    points nowhere or loops, or another kind of entry (a socket, a device ...). For error messages of
    readers that got such a path where a data file was expected ("not found" would send the user to look
    for a file that is there)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return "is a folder, not a file"
    if os.path.islink(p) and not os.path.exists(p):
        try:
            os.stat(p)
        except OSError as e:
            if e.errno == errno.ELOOP:
                return "is a symbolic link that loops (too many levels of symbolic links)"
        return f"is a symbolic link to {os.readlink(p)!r}, which does not exist"
    if not os.path.exists(p):
        return "does not exist"
    return "is not a regular file"


def check_arguments(dataset: str, names: list[str], root: Any, modalities: Any, synthetic: Any) -> list[str]:
    """The constructor arguments every adapter takes, checked before anything is read: ``modalities`` a list (or
    tuple) of names, None for all of ``names``, which is returned; ``synthetic`` a bool; ``root`` None or a path.
    Anything else is one DatasetError naming the dataset and the argument (a bare string as ``modalities`` would
    otherwise be read letter by letter, ``synthetic="no"`` would build the synthetic twin)."""
    if modalities is None:
        modalities = names
    if not isinstance(modalities, (list, tuple)) or not all(isinstance(m, str) for m in modalities):
        raise DatasetError(f"{dataset}: modalities: expected a list of modality names (of {names}), got "
                           f"{modalities!r}")
    if not isinstance(synthetic, bool):
        raise DatasetError(f"{dataset}: synthetic: expected True or False, got {synthetic!r}")
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise DatasetError(f"{dataset}: root: expected the path of the data folder or file (str or os.PathLike), "
                           f"got {root!r}")
    return list(modalities)


__all__ = ["DatasetError", "DatasetNotFoundError", "check_arguments", "not_a_file"]
