"""Point-cloud utilities for indoor 3D detection data (SUN RGB-D and similar).

What this module computes:

* :func:`height_feature` - VoteNet's per-point height above the floor (Qi et al., "Deep Hough Voting
  for 3D Object Detection in Point Clouds", ICCV 2019, Sec. 5.1 / appendix: "height feature"): the
  floor is estimated as the **0.99th percentile** of z (``np.percentile(z, 0.99)``, i.e. close to the
  lowest points, robust to a few outliers below the floor) and ``height = z - floor``.
* :func:`sample_indices` - fixed-size point sampling (without replacement when the cloud is large
  enough; otherwise every point once plus duplicates drawn with replacement).
* :func:`voxel_downsample` - voxel-grid averaging (numpy, or open3d's ``voxel_down_sample``).
* Box utilities for boxes ``[cx, cy, cz, dx, dy, dz, yaw]`` (full sizes; ``dx`` along the box's local
  x axis, which is rotated by ``yaw`` counter-clockwise about +z from +x): :func:`box_corners`,
  :func:`points_in_boxes`, and the three VoteNet train augmentations applied to points and boxes
  consistently: :func:`flip_yz`, :func:`rotate_z`, :func:`scale_scene`.
* :func:`read_point_file` / :func:`write_point_file` - the on-disk point formats met in SUN RGB-D
  pipelines (``.mat`` key ``instance``, ``.npz`` key ``pc``, raw float32 ``.bin``, ``.npy``) plus
  ``.ply`` / ``.pcd`` through open3d (optional dependency, imported lazily).

Shape:
    points ``xyz``: ``[N, 3]`` float (metres); features: ``[N, C]``; boxes: ``[G, 7]``;
    corners: ``[G, 8, 3]``; inside masks: ``[N, G]`` bool. Functions accept numpy arrays or torch
    tensors where noted and return the same kind.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from einops import rearrange

from .base import DatasetError

__all__ = [
    "FLOOR_PERCENTILE", "box_corners", "flip_yz", "height_feature", "points_in_boxes",
    "read_point_file", "rotate_z", "sample_indices", "scale_scene", "voxel_downsample",
    "wrap_angle", "write_point_file",
]

#: VoteNet's floor estimate: the 0.99th percentile (not the 99th) of the z coordinates
FLOOR_PERCENTILE = 0.99


# --------------------------------------------------------------------------------------------
# features and sampling
# --------------------------------------------------------------------------------------------
def floor_height(z: np.ndarray) -> float:
    """Floor estimate ``np.percentile(z, 0.99)`` of a cloud's z coordinates ``[N]``."""
    if z.size == 0:
        raise ValueError("floor_height: empty point cloud")
    return float(np.percentile(z, FLOOR_PERCENTILE))


def height_feature(xyz: np.ndarray, floor: float | None = None) -> np.ndarray:
    """Height above the floor ``[N, 1]`` = ``z - floor``; ``floor`` defaults to
    ``np.percentile(z, 0.99)`` of ``xyz`` ``[N, 3]`` (VoteNet)."""
    z = np.asarray(xyz)[:, 2]
    f = floor_height(z) if floor is None else float(floor)
    return (z - f)[:, None].astype(np.float32)


def sample_indices(n: int, num_points: int, rng: np.random.Generator) -> np.ndarray:
    """Indices ``[num_points]`` into a cloud of ``n`` points.

    ``n >= num_points``: a uniform subset without replacement. ``n < num_points``: every point once
    plus ``num_points - n`` indices drawn with replacement, shuffled.
    """
    if n <= 0:
        raise ValueError(f"sample_indices: cannot sample {num_points} points from an empty cloud")
    if num_points <= 0:
        raise ValueError(f"sample_indices: num_points must be positive, got {num_points}")
    if n >= num_points:
        return np.sort(rng.choice(n, size=num_points, replace=False))
    extra = rng.integers(0, n, size=num_points - n)
    return rng.permutation(np.concatenate([np.arange(n), extra]))


def voxel_downsample(
    xyz: np.ndarray, features: np.ndarray | None, voxel_size: float, backend: str = "numpy"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Average the points (and their ``features`` ``[N, C]``) falling in each voxel of side
    ``voxel_size`` metres. The grid origin is ``min(xyz) - voxel_size / 2`` (as in open3d's
    ``VoxelDownSample``). Output voxels are ordered lexicographically by voxel index.

    ``backend="open3d"`` calls ``open3d.geometry.PointCloud.voxel_down_sample`` (features must then
    have 3 channels, passed as colours); ``"numpy"`` is a pure numpy implementation.
    Shape: ``xyz [N, 3] -> [M, 3]``, ``features [N, C] -> [M, C]``.
    """
    if not voxel_size > 0:
        raise ValueError(f"voxel_downsample: voxel_size must be > 0 metres, got {voxel_size}")
    xyz = np.asarray(xyz, dtype=np.float64)
    if backend == "open3d":
        import open3d as o3d  # optional dependency

        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(xyz))
        if features is not None:
            if features.shape[1] != 3:
                raise ValueError("voxel_downsample: the open3d backend averages 3-channel features only")
            pcd.colors = o3d.utility.Vector3dVector(np.asarray(features, dtype=np.float64))
        down = pcd.voxel_down_sample(float(voxel_size))
        out_xyz = np.asarray(down.points)
        out_f = np.asarray(down.colors) if features is not None else None
        origin = xyz.min(axis=0) - 0.5 * voxel_size
        keys = np.floor((out_xyz - origin) / voxel_size).astype(np.int64)
        order = np.lexsort(keys.T[::-1])
        return out_xyz[order], (out_f[order] if out_f is not None else None)
    if backend != "numpy":
        raise ValueError(f"voxel_downsample: backend must be 'numpy' or 'open3d', got {backend!r}")
    origin = xyz.min(axis=0) - 0.5 * voxel_size
    keys = np.floor((xyz - origin) / voxel_size).astype(np.int64)
    uniq, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    sums = np.zeros((len(uniq), 3))
    np.add.at(sums, inverse, xyz)
    out_xyz = sums / counts[:, None]
    out_f = None
    if features is not None:
        f = np.asarray(features, dtype=np.float64)
        fs = np.zeros((len(uniq), f.shape[1]))
        np.add.at(fs, inverse, f)
        out_f = fs / counts[:, None]
    return out_xyz, out_f


# --------------------------------------------------------------------------------------------
# boxes
# --------------------------------------------------------------------------------------------
def wrap_angle(a: Any) -> Any:
    """Wrap angles to ``[-pi, pi)`` (numpy array or tensor)."""
    return (a + math.pi) % (2 * math.pi) - math.pi


def _rotz(yaw: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[G, 3, 3]`` turning local box coordinates into world ones (CCW about +z)."""
    c, s = torch.cos(yaw), torch.sin(yaw)
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    rows = torch.stack([c, -s, zero, s, c, zero, zero, zero, one], dim=-1)
    return rearrange(rows, "g (i j) -> g i j", i=3, j=3)


def box_corners(boxes: torch.Tensor) -> torch.Tensor:
    """The 8 corners ``[G, 8, 3]`` of boxes ``[G, 7]``: bottom face first (z = cz - dz/2),
    counter-clockwise seen from above starting at local (+dx/2, +dy/2), then the top face."""
    boxes = torch.as_tensor(boxes, dtype=torch.float64)
    signs = torch.tensor(
        [[1, 1, -1], [-1, 1, -1], [-1, -1, -1], [1, -1, -1], [1, 1, 1], [-1, 1, 1], [-1, -1, 1], [1, -1, 1]],
        dtype=torch.float64,
    )
    local = 0.5 * signs[None] * boxes[:, None, 3:6]  # [G, 8, 3]
    rot = _rotz(boxes[:, 6])
    return torch.einsum("gij,gcj->gci", rot, local) + boxes[:, None, 0:3]


def points_in_boxes(xyz: torch.Tensor, boxes: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Mask ``[N, G]``: point n lies inside (or within ``eps`` of) box g; ``xyz [N, 3]``, ``boxes [G, 7]``."""
    xyz = torch.as_tensor(xyz, dtype=torch.float64)
    boxes = torch.as_tensor(boxes, dtype=torch.float64)
    rel = xyz[:, None, :] - boxes[None, :, 0:3]  # [N, G, 3]
    c, s = torch.cos(boxes[:, 6]), torch.sin(boxes[:, 6])  # [G]
    # world -> box frame is the transpose of Rz(yaw): u along the heading axis, v across it
    u = c * rel[..., 0] + s * rel[..., 1]
    v = -s * rel[..., 0] + c * rel[..., 1]
    half = 0.5 * boxes[:, 3:6] + eps  # [G, 3]
    return (u.abs() <= half[:, 0]) & (v.abs() <= half[:, 1]) & (rel[..., 2].abs() <= half[:, 2])


# --------------------------------------------------------------------------------------------
# augmentations (VoteNet, Sec. 5.1: flip about the YZ plane, rotation about z, global scale)
# --------------------------------------------------------------------------------------------
def flip_yz(xyz: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mirror about the YZ plane: ``x -> -x``. A heading ``(cos t, sin t)`` becomes
    ``(-cos t, sin t)``, i.e. ``yaw -> pi - yaw`` (the same box as ``-yaw``; the heading vector's
    mirror image is kept exactly). Sizes are unchanged."""
    xyz = xyz.clone()
    xyz[:, 0] = -xyz[:, 0]
    boxes = boxes.clone()
    boxes[:, 0] = -boxes[:, 0]
    boxes[:, 6] = wrap_angle(math.pi - boxes[:, 6])
    return xyz, boxes


def rotate_z(xyz: torch.Tensor, boxes: torch.Tensor, angle: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate the scene by ``angle`` radians counter-clockwise about +z: points and box centres are
    rotated, ``yaw -> yaw + angle``."""
    c, s = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=xyz.dtype)
    xyz = xyz @ rot.T
    boxes = boxes.clone()
    boxes[:, 0:3] = boxes[:, 0:3] @ rot.T.to(boxes.dtype)
    boxes[:, 6] = wrap_angle(boxes[:, 6] + angle)
    return xyz, boxes


def scale_scene(xyz: torch.Tensor, boxes: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale the scene isotropically about the origin: points, box centres and sizes times ``factor``."""
    boxes = boxes.clone()
    boxes[:, 0:6] = boxes[:, 0:6] * factor
    return xyz * factor, boxes


# --------------------------------------------------------------------------------------------
# file formats
# --------------------------------------------------------------------------------------------
def _read_mat(path: Path, key: str) -> np.ndarray:
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path), variable_names=[key])
    except NotImplementedError:  # MATLAB v7.3 = HDF5
        import h5py

        try:
            with h5py.File(path, "r") as f:
                if key not in f:
                    raise DatasetError(f"{path}: MATLAB v7.3 file has no variable {key!r} (has {sorted(f)})")
                return np.asarray(f[key][()]).T  # MATLAB is column-major: h5py sees the transpose
        except DatasetError:
            raise
        except Exception as e:
            raise DatasetError(f"{path}: cannot read MATLAB v7.3 file ({type(e).__name__}: {e})") from None
    except Exception as e:  # scipy raises ValueError/TypeError/OSError/MatReadError on damaged files
        raise DatasetError(f"{path}: not a readable MATLAB .mat file ({type(e).__name__}: {e})") from None
    if key not in mat:
        keys = sorted(k for k in mat if not k.startswith("__"))
        raise DatasetError(f"{path}: .mat file has no variable {key!r} (has {keys})")
    return np.asarray(mat[key])


def read_point_file(path: str | Path, num_features: int = 6) -> np.ndarray:
    """Read a point cloud ``[N, C]`` (xyz + features) from ``path``, by suffix:

    * ``.mat``: variable ``instance`` (VoteNet's extracted SUN RGB-D depth, ``[N, 6]``);
    * ``.npz``: array ``pc`` (VoteNet's ``*_pc.npz``); ``.npy``: the array itself;
    * ``.bin``: raw little-endian float32, reshaped to ``[-1, num_features]`` (mmdet3d ``points/``);
    * ``.ply`` / ``.pcd``: through open3d (xyz, plus rgb in [0, 1] if present -> ``[N, 6]``).

    Raises :class:`DatasetError` naming the file for unreadable or malformed content.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        from .base import DatasetNotFoundError

        raise DatasetNotFoundError(f"missing point file {path}")
    if suffix == ".mat":
        arr = _read_mat(path, "instance")
    elif suffix in (".npz", ".npy"):
        try:
            with open(path, "rb") as fh:
                loaded = np.load(fh, allow_pickle=False)
                if suffix == ".npz":
                    if "pc" not in loaded.files:
                        raise DatasetError(f"{path}: .npz has no array 'pc' (has {loaded.files})")
                    arr = loaded["pc"]
                else:
                    arr = loaded
        except DatasetError:
            raise
        except Exception as e:
            raise DatasetError(f"{path}: not a readable numpy file ({type(e).__name__}: {e})") from None
    elif suffix == ".bin":
        raw = np.fromfile(path, dtype="<f4")
        if raw.size % num_features:
            raise DatasetError(
                f"{path}: {raw.size} float32 values is not a multiple of {num_features} features per point"
            )
        arr = raw.reshape(-1, num_features)
    elif suffix in (".ply", ".pcd"):
        import open3d as o3d  # optional dependency

        pcd = o3d.io.read_point_cloud(str(path))
        xyz = np.asarray(pcd.points)
        if xyz.shape[0] == 0:
            raise DatasetError(f"{path}: open3d read no points from this file")
        rgb = np.asarray(pcd.colors) if pcd.has_colors() else np.zeros_like(xyz)
        arr = np.concatenate([xyz, rgb], axis=1)
    else:
        raise DatasetError(f"{path}: unknown point-cloud suffix {suffix!r} (.mat .npz .npy .bin .ply .pcd)")
    arr = np.asarray(arr)
    if arr.ndim != 2 or arr.shape[1] < 3 or not np.issubdtype(arr.dtype, np.number):
        raise DatasetError(f"{path}: expected a numeric [N, >=3] point array, got {arr.dtype} {arr.shape}")
    return arr


def write_point_file(path: str | Path, cloud: np.ndarray) -> None:
    """Write ``cloud`` ``[N, 6]`` (xyz, rgb in [0, 1]) in the format given by the suffix of ``path``
    (``.mat`` variable ``instance``, ``.npz`` array ``pc``, ``.bin`` float32, ``.ply``/``.pcd`` via
    open3d)."""
    path = Path(path)
    suffix = path.suffix.lower()
    cloud = np.asarray(cloud, dtype=np.float32)
    if suffix == ".mat":
        import scipy.io

        scipy.io.savemat(str(path), {"instance": cloud})
    elif suffix == ".npz":
        np.savez(path, pc=cloud)
    elif suffix == ".bin":
        cloud.astype("<f4").tofile(path)
    elif suffix in (".ply", ".pcd"):
        import open3d as o3d  # optional dependency

        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(cloud[:, :3].astype(np.float64)))
        if cloud.shape[1] >= 6:
            pcd.colors = o3d.utility.Vector3dVector(np.clip(cloud[:, 3:6], 0, 1).astype(np.float64))
        if not o3d.io.write_point_cloud(str(path), pcd):
            raise OSError(f"open3d could not write {path}")
    else:
        raise ValueError(f"write_point_file: unknown suffix {suffix!r} for {path}")
