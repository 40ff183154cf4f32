"""NYUv2's own cache of surface normals computed from depth (``normal_cache`` option).

One float16 ``.npy`` per frame under ``$FUSEBENCH_CACHE/nyuv2-normals/<key>/`` (or the path given
as ``normal_cache``); ``<key>`` hashes the source file (path, size, mtime), the layout, the depth
source, the normal method and radius and :data:`NORMALS_VERSION`. Files are written under a
temporary name, then renamed. The normals themselves: :mod:`fusebench.datasets.normals`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from fusebench.datasets.cache import cache_home
from fusebench.io import atomic_write
from fusebench.datasets.normals import default_radius_px, estimate_normals, scaled_intrinsics

from .formats import _Frame

log = logging.getLogger(__package__)  # the logger of fusebench.datasets.nyuv2, as before the split

NORMALS_VERSION = 1


class _NormalCache:
    """Mixin of :class:`~fusebench.datasets.nyuv2.NYUv2`: normals from depth, cached per frame."""

    def _normal_cache_dir(self) -> Path | None:
        if "normal" not in self.modalities or self.normal_source != "computed" or not self._normal_cache_opt:
            return None
        base = (Path(self._normal_cache_opt) if isinstance(self._normal_cache_opt, (str, os.PathLike))
                else cache_home() / "nyuv2-normals")
        src = self._mat_path if self.layout == "official" else self.root / ("val" if self.split == "test" else "train")
        st = src.stat()
        key = f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}|{self.layout}|{self.depth_source}|" \
              f"{self.normal_method}|{self.normal_radius_px}|v{NORMALS_VERSION}"
        return base / hashlib.sha256(key.encode()).hexdigest()[:16]

    def _normals(self, depth: np.ndarray, fr: _Frame) -> np.ndarray:
        name = f"{fr.folder}-{fr.pos:05d}.npy"
        if self._normal_dir is not None:
            p = self._normal_dir / name
            if p.is_file():
                try:
                    arr = np.load(p)
                    if arr.shape == (3, *depth.shape):
                        return arr.astype(np.float32)
                except (OSError, ValueError, EOFError):  # EOFError: an empty (0-byte) file
                    log.warning("nyuv2: ignoring unreadable normal cache file %s", p)
        h, w = depth.shape
        n = estimate_normals(depth, self.normal_method, scaled_intrinsics(h, w),
                             self.normal_radius_px or default_radius_px(w))
        # stored as float16 in the normal cache: round always, so cached and fresh reads are identical
        n = n.astype(np.float16)
        if self._normal_dir is not None:  # whole or not at all, no temporary file left (fusebench.io)
            atomic_write(self._normal_dir / name, lambda fh: np.save(fh, n))
        return n.astype(np.float32)
