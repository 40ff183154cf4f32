"""The errors of the dataset layer: one message naming the file (or folder) and what was expected."""

from __future__ import annotations

import os
from typing import Any


class DatasetError(ValueError):
    """Bad or missing data: the message names the file and the problem."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset's files are missing; the message is the adapter's ``data info`` text."""


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


__all__ = ["DatasetError", "DatasetNotFoundError", "check_arguments"]
