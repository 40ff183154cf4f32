"""CMU-MultimodalSDK computational sequences (``.csd``): reader, writer and segment alignment.

A computational sequence (Zadeh et al., "Multi-attention recurrent network for human communication
comprehension", AAAI 2018, and the CMU-MultimodalSDK ``mmsdk.mmdatasdk`` format) is an HDF5 file::

    /<root name>/                       one root group, named after the sequence ("COVAREP", ...)
        data/<video_id>/features        [n_i, d] feature rows of video i (float; words: bytes)
        data/<video_id>/intervals       [n_i, 2] float start/end time (s) of each row
        metadata/<key>                  [1] variable-length strings, JSON-encoded by the SDK
                                        ("dimension names", "dataset name", "root name", ...)

Label sequences use the same layout: ``CMU_MOSI_Opinion_Labels.csd`` has one row per opinion
segment (``features`` [n_seg, 1] sentiment in [-3, 3]); ``CMU_MOSEI_Labels.csd`` has [n_seg, 7]
(sentiment first, then six emotions).

Segment alignment (:func:`slice_segment`, :func:`align_to_reference`): a labelled segment
``[start, end]`` selects the feature rows whose interval overlaps it by more than zero seconds
(*slice*, variable length, the "unaligned" setting); :func:`align_to_reference` then averages, for
every row of a reference modality (usually the words), the rows of another modality that overlap that
reference interval — the SDK's word-level alignment with the mean as collapse function (the
"aligned" setting, all modalities of a segment share the reference length). A reference step that no
row overlaps gets zeros.

Shape:
    features: [n_rows, d] float32;  intervals: [n_rows, 2] float64 seconds
    slice_segment -> [T, d];  align_to_reference -> [T_ref, d]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import h5py
import numpy as np

from fusebench.io import atomic_write

from .base import DatasetError
from .errors import not_a_file

__all__ = ["ComputationalSequence", "read_csd", "write_csd", "slice_segment", "align_to_reference"]


@dataclass
class ComputationalSequence:
    """One ``.csd`` file read into memory: per-video features and intervals plus metadata."""

    name: str
    features: dict[str, np.ndarray]
    intervals: dict[str, np.ndarray]
    metadata: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def videos(self) -> list[str]:
        return sorted(self.features)

    @property
    def num_segments(self) -> int:
        return int(sum(f.shape[0] for f in self.features.values()))

    @property
    def dim(self) -> int:
        first = next(iter(self.features.values()), None)
        return 0 if first is None else int(first.shape[1])


def _decode_meta(value: Any) -> Any:
    """SDK metadata are JSON strings stored as 1-element vlen string datasets."""
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0] if value.size == 1 else value.tolist()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _feature_shape(shape: tuple[int, ...], labels: bool) -> tuple[tuple[int, int] | None, str]:
    """The [n, d] a ``features`` dataset of ``shape`` is read as, or (None, why not).

    A 1-D [n] is read as [n, 1]. With ``labels`` (a labels sequence) trailing axes of size 1 are dropped
    first, so [n, 1, 1] is read as [n, 1] and [n, 7, 1] as [n, 7]. Anything else must be 2-D with d >= 1.
    """
    if labels:
        while len(shape) > 2 and shape[-1] == 1:
            shape = shape[:-1]
    if len(shape) == 1:
        shape = (shape[0], 1)
    if len(shape) != 2:
        return None, f"features must be 2-D [n_rows, d], got shape {tuple(shape)}"
    if shape[1] == 0:
        return None, f"features have zero width {tuple(shape)} (each row needs d >= 1 values)"
    return (int(shape[0]), int(shape[1])), ""


def read_csd(path: str | os.PathLike, videos: list[str] | None = None, labels: bool = False) -> ComputationalSequence:
    """Read a computational sequence; ``videos`` restricts which video groups are loaded.

    Raises :class:`DatasetError` naming the file for a non-HDF5/truncated file, a file with no or
    several root groups, a video lacking ``features``/``intervals``, mismatched row counts,
    intervals that are not [n, 2], non-finite intervals and intervals ending before they start.
    The ``features`` of every video in the file (read or not: only their shapes are looked at) must be
    2-D [n, d] with d >= 1 and the same width d in every video, else the error names the video; a 1-D
    [n] is read as [n, 1], and with ``labels=True`` (a labels sequence) trailing axes of size 1 are
    dropped ([n, 1, 1] -> [n, 1]).
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: computational sequence file does not exist" if not path.exists() and
                           not path.is_symlink() else f"{path}: {not_a_file(path)}; expected a computational "
                           f"sequence file (HDF5)")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable HDF5 computational sequence ({e})") from e
    with f:
        roots = [k for k in f.keys() if isinstance(f[k], h5py.Group)]
        if len(roots) != 1:
            raise DatasetError(f"{path}: expected exactly one root group holding 'data' and 'metadata', "
                               f"found {roots}")
        root = f[roots[0]]
        if "data" not in root:
            raise DatasetError(f"{path}: root group {roots[0]!r} has no 'data' group (keys: {list(root)})")
        meta = {k: _decode_meta(root["metadata"][k][()]) for k in root["metadata"]} if "metadata" in root else {}
        data = root["data"]
        widths: dict[int, list[str]] = {}  # feature width -> the videos of that width
        for vid in data.keys():
            g = data[vid]
            if not isinstance(g, h5py.Group) or not isinstance(g.get("features"), h5py.Dataset):
                continue  # refused below if the split reads it
            shape, why = _feature_shape(g["features"].shape, labels)
            if shape is None:
                raise DatasetError(f"{path}: video {vid!r}: {why}")
            widths.setdefault(shape[1], []).append(vid)
        if len(widths) > 1:
            common = max(widths, key=lambda w: len(widths[w]))
            odd = min((w for w in widths if w != common), key=lambda w: len(widths[w]))
            raise DatasetError(f"{path}: video {widths[odd][0]!r}: features are {odd} wide but "
                               f"{len(widths[common])} video(s) (e.g. {widths[common][0]!r}) have {common} "
                               f"(widths found: {sorted(widths)}); every video of one sequence must have the same "
                               f"feature width")
        names = list(data.keys()) if videos is None else [v for v in videos if v in data]
        feats: dict[str, np.ndarray] = {}
        ivals: dict[str, np.ndarray] = {}
        for vid in names:
            g = data[vid]
            if not isinstance(g, h5py.Group) or not all(isinstance(g.get(k), h5py.Dataset)
                                                        for k in ("features", "intervals")):
                found = ([f"{k} ({type(g[k]).__name__})" for k in g.keys()] if isinstance(g, h5py.Group)
                         else type(g).__name__)
                raise DatasetError(f"{path}: video {vid!r} must hold 'features' and 'intervals' datasets, "
                                   f"found {found}")
            for k in ("features", "intervals"):
                dt = g[k].dtype
                words = k == "features" and not labels and dt.kind in "SOU"  # a text sequence's words
                if dt.kind not in "biuf" and not words:
                    raise DatasetError(f"{path}: video {vid!r}: {k!r} has dtype {dt}; expected real numbers "
                                       f"(float or integer)")
            try:
                x = g["features"][()]
                t = np.asarray(g["intervals"][()], dtype=np.float64)
            except OSError as e:
                raise DatasetError(f"{path}: cannot read video {vid!r} (truncated or corrupt file: {e})") from e
            shape, why = _feature_shape(x.shape, labels)
            if shape is None:
                raise DatasetError(f"{path}: video {vid!r}: {why}")
            x = x.reshape(shape)
            if t.ndim != 2 or t.shape[1] != 2:
                raise DatasetError(f"{path}: video {vid!r}: intervals must be [n, 2], got {t.shape}")
            if x.shape[0] != t.shape[0]:
                raise DatasetError(f"{path}: video {vid!r}: {x.shape[0]} feature rows but {t.shape[0]} intervals")
            if not np.isfinite(t).all():
                raise DatasetError(f"{path}: video {vid!r}: non-finite interval values")
            backwards = np.flatnonzero(t[:, 1] < t[:, 0])
            if backwards.size:
                r = int(backwards[0])
                raise DatasetError(f"{path}: video {vid!r}: interval row {r} ends before it starts "
                                   f"([{t[r, 0]:g}, {t[r, 1]:g}] s; {backwards.size} such row(s)); each interval "
                                   f"must be [start, end] with end >= start")
            feats[vid] = x
            ivals[vid] = t
    return ComputationalSequence(name=roots[0], features=feats, intervals=ivals, metadata=meta, path=str(path))


def write_csd(path: str | os.PathLike, name: str, features: Mapping[str, np.ndarray],
              intervals: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None) -> None:
    """Write a computational sequence in the SDK layout (metadata JSON-encoded vlen strings).

    The file is written whole or not at all (:func:`fusebench.io.atomic_write`).
    """
    path = Path(path)
    meta = {"root name": name, "computational sequence version": "1.0", "alignment compatible": True,
            "md5": None}
    meta.update(metadata or {})
    str_dt = h5py.string_dtype("utf-8")

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as f:
            root = f.create_group(name)
            data = root.create_group("data")
            for vid in features:
                g = data.create_group(vid)
                g.create_dataset("features", data=np.asarray(features[vid]))
                g.create_dataset("intervals", data=np.asarray(intervals[vid], dtype=np.float32))
            md = root.create_group("metadata")
            for key, value in meta.items():
                md.create_dataset(key, (1,), dtype=str_dt, data=[json.dumps(value)])

    atomic_write(path, write, by_name=True)


def slice_segment(features: np.ndarray, intervals: np.ndarray, start: float, end: float) -> np.ndarray:
    """Rows whose ``[t0, t1]`` overlaps the segment ``[start, end]`` by more than 0 s. Shape: [T, d]."""
    overlap = np.minimum(intervals[:, 1], end) - np.maximum(intervals[:, 0], start)
    return features[overlap > 0]


def align_to_reference(features: np.ndarray, intervals: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Mean of the rows overlapping each reference interval.

    Shape:
        features [n, d], intervals [n, 2], reference [T_ref, 2] -> [T_ref, d]
    """
    overlap = (np.minimum(intervals[None, :, 1], reference[:, None, 1])
               - np.maximum(intervals[None, :, 0], reference[:, None, 0]))  # [T_ref, n]
    weights = (overlap > 0).astype(np.float64)
    counts = weights.sum(axis=1, keepdims=True)
    out = np.einsum("tn,nd->td", weights, features.astype(np.float64)) / np.maximum(counts, 1.0)
    return out.astype(np.float32)
