"""Readers of the SUN RGB-D files as VoteNet / mmdet3d write them: label, calib and ``*_data_idx.txt``
files of the extracted frames, and VoteNet's ``NNNNNN_bbox.npy`` dumps. Each returns boxes in the
package's convention (see :mod:`fusebench.datasets.sunrgbd`) and raises :class:`DatasetError` naming
the file (and line or row) on malformed input.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import pointcloud as pc
from ..base import DatasetError, DatasetNotFoundError
from .classes import CLASS_TO_ID, CLASSES

LABEL_FIELDS = 13
BBOX_FIELDS = 8


def _read_text(path: Path, what: str, expected: str = "") -> str:
    """The text of ``path``; a missing file is a :class:`DatasetNotFoundError` ("missing <what>"), an unreadable or
    non-UTF-8 one a :class:`DatasetError` naming the file (the official text files: labels, calib, frame lists)."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise DatasetNotFoundError(f"missing {what} {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read {what} ({e}){expected}") from None


def parse_label_file(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """All objects of a VoteNet label file: ``(classname, box [7] in our convention, box2d [4] as
    x, y, w, h)``. Raises :class:`DatasetError` naming the file and line on malformed lines, among them a
    negative half-size (fields 9-11), which the official extraction never writes (it writes ``abs(coeffs)``);
    a zero half-size is taken as written (a flat box), as :func:`read_votenet_bbox` does."""
    text = _read_text(path, "label file")
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != LABEL_FIELDS:
            raise DatasetError(
                f"{path}, line {lineno}: expected {LABEL_FIELDS} space-separated fields (classname, 2D box "
                f"x y w h, centroid x y z, half-sizes c1 c2 c3, heading ox oy), got {len(fields)}: {line!r}"
            )
        try:
            v = np.array([float(x) for x in fields[1:]], dtype=np.float64)
        except ValueError:
            raise DatasetError(f"{path}, line {lineno}: non-numeric box field in {line!r}") from None
        if not np.isfinite(v).all():
            raise DatasetError(f"{path}, line {lineno}: NaN or Inf in box fields of {line!r}")
        neg = np.flatnonzero(v[7:10] < 0)
        if neg.size:  # the official extraction writes abs(coeffs): a negative one was edited or damaged
            f = int(neg[0])
            raise DatasetError(
                f"{path}, line {lineno}: field {9 + f} (half-size c{1 + f}) is {v[7 + f]:g}: expected a "
                f"non-negative half-size (the official extraction, extract_rgbd_data_v*.m, writes abs(coeffs), so "
                f"this line was not written by it): {line!r}")
        c1, c2, c3 = v[7:10]
        ox, oy = v[10], v[11]
        box = np.array([v[4], v[5], v[6], 2 * c2, 2 * c1, 2 * c3, math.atan2(oy, ox)])
        out.append((fields[0], box, v[0:4].copy()))
    return out


def read_calib(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(Rtilt [3, 3], K [3, 3])`` from a VoteNet calib file (two lines of 9 column-major floats)."""
    lines = [ln.split() for ln in _read_text(path, "calib file").splitlines() if ln.strip()]
    if len(lines) != 2 or any(len(ln) != 9 for ln in lines):
        raise DatasetError(f"{path}: expected 2 lines of 9 numbers (Rtilt, K column-major), got {[len(ln) for ln in lines]}")
    try:
        rtilt, k = (np.reshape(np.array(ln, dtype=np.float64), (3, 3), order="F") for ln in lines)
    except ValueError:
        raise DatasetError(f"{path}: non-numeric value in calib file") from None
    if not (np.isfinite(rtilt).all() and np.isfinite(k).all()):
        raise DatasetError(f"{path}: NaN or Inf in the calib file (Rtilt, K): expected finite numbers")
    return rtilt, k


def read_index_file(path: Path) -> list[int]:
    """Frame numbers listed in a ``*_data_idx.txt`` file (one integer per line)."""
    out = []
    text = _read_text(path, "the frame list", "; expected one frame number per line")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(int(line.strip()))
        except ValueError:
            raise DatasetError(f"{path}, line {lineno}: expected a frame number, got {line!r}") from None
    return out


def read_votenet_bbox(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(boxes [K, 7] float64 in our convention, labels [K] int64)`` from a VoteNet ``NNNNNN_bbox.npy``
    (``[K, 8]`` rows ``cx cy cz l w h heading class``, half-sizes, ``heading = -yaw``). An empty array
    (``[0, 8]``, or ``[0]`` as ``np.array([])`` saves) gives ``[0, 7]`` boxes; a zero half-size is taken as
    written, a negative one refused (as :func:`parse_label_file` does). Raises :class:`DatasetError` naming the
    file for anything else."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            arr = np.load(fh, allow_pickle=False)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"missing box file {path}") from None
    except Exception as e:  # truncated / not .npy / object array
        raise DatasetError(f"{path}: not a readable .npy box file ({type(e).__name__}: {e})") from None
    if not isinstance(arr, np.ndarray) or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        kind = f"{arr.dtype} array" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise DatasetError(f"{path}: expected a numeric [K, {BBOX_FIELDS}] array, got a {kind}")
    if arr.size == 0 and arr.ndim in (1, 2) and (arr.ndim == 1 or arr.shape[1] in (0, BBOX_FIELDS)):
        return np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != BBOX_FIELDS:
        raise DatasetError(
            f"{path}: expected a [K, {BBOX_FIELDS}] array (cx cy cz, half-sizes l w h, heading, class id), "
            f"got shape {tuple(arr.shape)}"
        )
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise DatasetError(f"{path}: NaN or Inf in box rows {np.flatnonzero(bad).tolist()}")
    cls = arr[:, 7]
    bad = (cls != np.round(cls)) | (cls < 0) | (cls >= len(CLASSES))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{path}, row {r}: class id {float(cls[r]):g} is not an integer in 0..{len(CLASSES) - 1}")
    bad = (arr[:, 3:6] < 0).any(axis=1)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{path}, row {r}: negative half-size in {arr[r, 3:6].tolist()}: expected "
                           f"non-negative half-sizes l w h (columns 3-5)")
    boxes = np.concatenate([arr[:, 0:3], 2.0 * arr[:, 3:6], pc.wrap_angle(-arr[:, 6:7])], axis=1)
    return boxes, cls.astype(np.int64)


def _filter_classes(objects: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    keep = [(CLASS_TO_ID[n], b) for n, b, _ in objects if n in CLASS_TO_ID]
    if not keep:
        return np.zeros((0, 7)), np.zeros((0,), dtype=np.int64)
    return np.stack([b for _, b in keep]), np.array([c for c, _ in keep], dtype=np.int64)
