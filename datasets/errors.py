"""The errors of the dataset layer: one message naming the file (or folder) and what was expected."""

from __future__ import annotations


class DatasetError(ValueError):
    """Bad or missing data: the message names the file and the problem."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset's files are missing; the message is the adapter's ``data info`` text."""


__all__ = ["DatasetError", "DatasetNotFoundError"]
