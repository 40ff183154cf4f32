"""PointNet++ set abstraction / feature propagation and the VoteNet backbone, with per-modality views.

Implements PointNet++ (Qi, Yi, Su, Guibas, "PointNet++: Deep Hierarchical Feature Learning on Point
Sets in a Metric Space", NeurIPS 2017, arXiv:1706.02413, https://arxiv.org/abs/1706.02413), Sec.
3.2-3.4, as configured in VoteNet's backbone (Qi, Litany, He, Guibas, "Deep Hough Voting for 3D
Object Detection in Point Clouds", ICCV 2019, arXiv:1904.09664, https://arxiv.org/abs/1904.09664;
Sec. 4 and supp. A.1), in pure, vectorised PyTorch (CPU and GPU):

* farthest point sampling (FPS): ``c_1`` = point 0, ``c_{j+1} = argmax_i min_{l<=j} ||x_i - c_l||``
  (vectorised over the batch and the points; one iteration per sampled centroid);
* ball query: for each centroid the first ``nsample`` points (in index order) with
  ``||x_i - c||^2 < r^2``, padded with the first neighbour found (as the CUDA kernel of VoteNet's
  code, https://github.com/facebookresearch/votenet, ``pointnet2/_ext_src/src/ball_query_gpu.cu``);
* grouping: neighbour coordinates relative to the centroid (divided by ``r`` when
  ``normalize_xyz``, VoteNet's setting), concatenated with the neighbours' features;
* a shared MLP (``Conv2d`` 1x1 + BN + ReLU) on every (centroid, neighbour) pair, max-pooled over
  the neighbours (Eq. of Sec. 3.2: ``f(c) = max_{x in B(c, r)} h([x - c, f_x])``);
* feature propagation (Sec. 3.4): 3-NN inverse-distance interpolation
  ``f(x) = sum_i w_i f_i / sum_i w_i``, ``w_i = 1 / (||x - x_i|| + 1e-8)``, concatenated with the
  skip features and a shared MLP (``Conv1d`` 1x1 + BN + ReLU).

VoteNet backbone ("votenet" config): SA 2048/1024/512/256 centroids, radii 0.2/0.4/0.8/1.2, nsample
64/32/16/16, MLPs [64,64,128], [128,128,256], [128,128,256], [128,128,256]; FP [256,256] twice, so
the seeds are the 1024 SA2 centroids with 256-d features. The "tiny" config (64/32/16/8 centroids,
narrow MLPs) is for tests.

Per-modality views for pretraining (``PointNet2Encoder.embed``, see docs/votenet.md): a scene's
three modalities are attributes of the same points, so the *geometry of the grouping* (FPS
centroids and ball-query neighbourhoods, computed once from xyz) is shared, and each modality has
its own PointNet++ branch (own weights) whose MLPs see only that modality's signal:

* ``points``: relative neighbour coordinates only (``use_xyz``), no per-point features;
* ``color``: the neighbours' RGB (minus 0.5, VoteNet's mean colour) and no coordinates;
* ``height``: the neighbours' height above the floor and no coordinates.

Each branch's FP output (the seed features) is max-pooled over the seeds to one vector, so views
differ in content, not just in noise, and the multi-view objective is not degenerate.

Shape:
    points ``xyz [B, N, 3]``; color ``[B, N, 3]``; height ``[B, N, 1]`` (``n`` = ``B`` scenes);
    ``farthest_point_sample(xyz, S)`` -> ``LongTensor[B, S]``;
    ``ball_query(xyz, new_xyz [B, S, 3], r, K)`` -> ``LongTensor[B, S, K]``;
    ``three_nn_interpolate(unknown [B, n, 3], known [B, m, 3], feats [B, C, m])`` -> ``[B, C, n]``;
    ``PointNet2Backbone``: ``seed_xyz [B, S2, 3]``, ``seed_features [B, C, S2]``, ``seed_inds [B, S2]``;
    ``PointNet2Encoder.embed(batch)`` -> ``[k, n, num_features]`` (k = number of modalities).

Example::

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> enc = PointNet2Encoder(config="tiny")
    >>> batch = {"modalities": {"points": torch.rand(2, 256, 3), "color": torch.rand(2, 256, 3),
    ...                         "height": torch.rand(2, 256, 1)}}
    >>> enc.embed(batch).shape
    torch.Size([3, 2, 64])

Backends: on CUDA tensors the sampling, ball query, 3-NN and gathering run as the Triton kernels of
:mod:`fusebench.encoders.pointnet2_triton` when ``triton`` is importable (one launch per op instead of one
PyTorch step per sampled centroid); elsewhere, and on every CPU tensor, the PyTorch code below runs. The
choice is ``backend="auto"`` (that rule), ``"torch"`` or ``"triton"``: per call (the ``backend`` argument of
the four functions), per process (:func:`set_backend`, :func:`use_backend`) or from the environment
(``FUSEBENCH_POINTNET2_BACKEND``), in that order of precedence. The first CUDA call logs which one runs,
and why PyTorch does when Triton cannot. See docs/gpu.md, "Point-cloud kernels".

This module is longer than ~450 lines because it is one architecture: sampling, grouping, the set
abstraction and feature propagation layers and the backbone built from them.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch
from einops import rearrange, repeat
from torch import Tensor, nn

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone

# --------------------------------------------------------------------------------------------
# sampling, grouping, interpolation
# --------------------------------------------------------------------------------------------


def _check_xyz(xyz: Tensor, arg: str) -> None:
    if not isinstance(xyz, Tensor) or xyz.dim() != 3 or xyz.shape[-1] != 3:
        shape = tuple(xyz.shape) if isinstance(xyz, Tensor) else type(xyz).__name__
        raise ValueError(f"pointnet2: {arg} must be a float tensor [B, N, 3], got {shape}")


# --------------------------------------------------------------------------------------------
# backend: the Triton kernels on CUDA, this module's PyTorch code elsewhere
# --------------------------------------------------------------------------------------------

log = logging.getLogger(__name__)
BACKENDS = ("auto", "torch", "triton")
BACKEND_ENV = "FUSEBENCH_POINTNET2_BACKEND"
_backend: str | None = None  # set_backend(); None: the environment, else "auto"
_logged: set[str] = set()


def _valid_backend(name: Any, where: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"pointnet2: {where} must be one of {list(BACKENDS)}, got {name!r}")
    return name


def get_backend() -> str:
    """The process-wide backend: :func:`set_backend`'s, else ``$FUSEBENCH_POINTNET2_BACKEND``, else ``auto``."""
    if _backend is not None:
        return _backend
    return _valid_backend(os.environ.get(BACKEND_ENV, "auto") or "auto", f"${BACKEND_ENV}")


def set_backend(name: str | None) -> str | None:
    """Set the process-wide backend (``None``: back to the environment / ``auto``); returns the previous one."""
    global _backend
    previous = _backend
    _backend = None if name is None else _valid_backend(name, "backend")
    return previous


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """``with use_backend("triton"): ...``: the backend inside the block (restored after it)."""
    previous = set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def _triton_for(t: Tensor, backend: str | None) -> bool:
    """Whether an op on ``t`` runs the Triton kernels: ``torch`` never, ``triton`` always (or an error
    saying why it cannot), ``auto`` on CUDA tensors when Triton can run them (the first call logs which)."""
    choice = get_backend() if backend is None else _valid_backend(backend, "backend")
    if choice == "torch" or not isinstance(t, Tensor) or (choice == "auto" and t.device.type != "cuda"):
        return False  # (not a tensor: the PyTorch code raises its error)
    reason = _kernels().unavailable(t.device)
    if choice == "triton":
        if reason is not None:
            raise RuntimeError(f"pointnet2: backend 'triton' was asked for but {reason}")
        return True
    if reason is None:
        _log_once(f"pointnet2: point-cloud ops on {t.device.type} run the Triton kernels (pointnet2_triton)")
    else:
        _log_once(f"pointnet2: point-cloud ops on {t.device.type} run the PyTorch code: {reason}")
    return reason is None


def _kernels() -> Any:
    from fusebench.encoders import pointnet2_triton

    return pointnet2_triton


def gather_points(x: Tensor, idx: Tensor, backend: str | None = None) -> Tensor:
    """``x [B, N, C]`` indexed by ``idx [B, ...]`` -> ``[B, ..., C]``."""
    if _triton_for(x, backend):
        return _kernels().gather_points(x, idx)
    b = x.shape[0]
    flat = idx.reshape(b, -1)
    out = torch.gather(x, 1, repeat(flat, "b m -> b m c", c=x.shape[-1]))
    return out.reshape(*idx.shape, x.shape[-1])


def farthest_point_sample(xyz: Tensor, npoint: int, backend: str | None = None) -> Tensor:
    """Farthest point sampling, starting from point 0 (as does the CUDA kernel of VoteNet's code,
    https://github.com/facebookresearch/votenet, ``pointnet2/_ext_src/src/sampling_gpu.cu``)."""
    _check_xyz(xyz, "xyz")
    b, n, _ = xyz.shape
    if not 0 < npoint <= n:
        raise ValueError(f"farthest_point_sample: npoint must be in [1, N={n}], got {npoint}")
    if _triton_for(xyz, backend):
        return _kernels().farthest_point_sample(xyz, npoint)
    idx = torch.zeros(b, npoint, dtype=torch.long, device=xyz.device)
    with torch.no_grad():
        xyz = xyz.detach()
        coords = [c.contiguous() for c in xyz.unbind(-1)]  # 3 x [B, N]: in-place friendly
        dist = torch.full((b, n), float("inf"), dtype=xyz.dtype, device=xyz.device)
        d, t = torch.empty_like(dist), torch.empty_like(dist)
        last = torch.zeros(b, dtype=torch.long, device=xyz.device)
        rows = torch.arange(b, device=xyz.device)
        for j in range(1, npoint):  # d = ||x - c_j||^2 with preallocated buffers (no per-step allocations)
            c = xyz[rows, last]  # [B, 3]
            torch.sub(coords[0], c[:, 0:1], out=d)
            d.square_()
            for k in (1, 2):  # dx^2, + dy^2, + dz^2, each product rounded: not addcmul_, which the CPU kernels fuse
                torch.sub(coords[k], c[:, k : k + 1], out=t)  # into one FMA on some CPUs, so a tie of distances
                t.square_()  # (a grid of points) went to another index there than on others and under Triton
                d.add_(t)
            torch.minimum(dist, d, out=dist)
            last = torch.argmax(dist, dim=1)
            idx[:, j] = last
    return idx


def ball_query(xyz: Tensor, new_xyz: Tensor, radius: float, nsample: int, chunk: int = 256,
               backend: str | None = None) -> Tensor:
    """Indices of the first ``nsample`` points within ``radius`` of each centroid (index order),
    padded with the first one found (index 0 where a ball is empty)."""
    _check_xyz(xyz, "xyz")
    _check_xyz(new_xyz, "new_xyz")
    if _triton_for(xyz, backend):
        return _kernels().ball_query(xyz, new_xyz, radius, nsample)
    b, n, _ = xyz.shape
    out = []
    ar = torch.arange(n, device=xyz.device)
    k = min(nsample, n)
    with torch.no_grad():
        for s0 in range(0, new_xyz.shape[1], chunk):  # chunks bound the [B, S, N] distance buffer
            c = new_xyz[:, s0 : s0 + chunk]
            d2 = ((c[:, :, None, :] - xyz[:, None, :, :]) ** 2).sum(-1)  # [B, s, N]
            key = torch.where(d2 < radius**2, ar, torch.full_like(ar, n))  # out-of-ball -> n
            first = torch.topk(key, k, dim=-1, largest=False, sorted=True).values  # [B, s, k]
            if k < nsample:
                first = torch.cat([first, first.new_full((*first.shape[:2], nsample - k), n)], -1)
            pad = torch.where(first[..., :1] < n, first[..., :1], torch.zeros_like(first[..., :1]))
            out.append(torch.where(first < n, first, pad))
    return torch.cat(out, dim=1)


def three_nn_interpolate(unknown: Tensor, known: Tensor, known_feats: Tensor, backend: str | None = None) -> Tensor:
    """Inverse-distance weighted average of the features of the 3 nearest known points."""
    _check_xyz(unknown, "unknown")
    _check_xyz(known, "known")
    triton = _triton_for(unknown, backend)
    if triton:  # the 3 nearest by squared distance from coordinate differences, ties to the lower index
        idx = _kernels().three_nn(unknown, known)[1]
    else:  # exact squared distances (not |x|^2 + |y|^2 - 2 x.y, which puts a point up to millimetres from itself),
        # dx^2 + dy^2 + dz^2 as the Triton kernel sums them, and ties to the lower index (argmin's first minimum; topk's
        # order among equal distances is unspecified), as the Triton kernel and VoteNet's three_nn CUDA kernel break them
        u, kn = unknown.detach(), known.detach()
        d = (u[:, :, None, 0] - kn[:, None, :, 0]).square_()  # [B, n, m]
        for c in (1, 2):
            d.add_((u[:, :, None, c] - kn[:, None, :, c]).square_())
        picks = []  # three first-minimum passes: argmin returns the first of equal minima (a full stable sort of the
        for _ in range(min(3, known.shape[1])):  # [B, n, m] distances cost 30x topk on the CPU; these three, 3x)
            picks.append(d.argmin(dim=-1, keepdim=True))
            d.scatter_(-1, picks[-1], float("inf"))
        idx = torch.cat(picks, dim=-1)
    # the weights, on either backend, from the chosen neighbours' coordinates (differentiable; 0 at 0)
    near = gather_points(known, idx, backend="triton" if triton else "torch")  # [B, n, k, 3]
    dist = torch.linalg.vector_norm(near - unknown[:, :, None, :], dim=-1)
    w = 1.0 / (dist + 1e-8)
    w = w / w.sum(-1, keepdim=True)  # [B, n, k]
    feats = gather_points(rearrange(known_feats, "b c m -> b m c"), idx, backend="triton" if triton else "torch")
    return torch.einsum("bnkc,bnk->bcn", feats, w)


# --------------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------------


def _mlp2d(dims: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, o in zip(dims[:-1], dims[1:]):
        layers += [nn.Conv2d(i, o, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


def _mlp1d(dims: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, o in zip(dims[:-1], dims[1:]):
        layers += [nn.Conv1d(i, o, 1, bias=False), nn.BatchNorm1d(o), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


@dataclass
class Grouping:
    """The geometry of one SA level: centroid indices ``[B, S]`` and ball indices ``[B, S, K]``."""

    centroid_idx: Tensor
    ball_idx: Tensor


class SetAbstraction(nn.Module):
    """One PointNet++ SA level (single scale): sample, group, shared MLP, max-pool.

    ``in_features`` per-point feature channels; with ``use_xyz`` the (normalised) relative neighbour
    coordinates are prepended (3 more input channels)."""

    def __init__(self, npoint: int, radius: float, nsample: int, in_features: int, mlp: Sequence[int],
                 use_xyz: bool = True, normalize_xyz: bool = True) -> None:
        super().__init__()
        if in_features == 0 and not use_xyz:
            raise ValueError("SetAbstraction: no input channels (in_features=0 and use_xyz=False)")
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.use_xyz, self.normalize_xyz = use_xyz, normalize_xyz
        self.mlp = _mlp2d([in_features + 3 * use_xyz, *mlp])
        self.out_features = mlp[-1]

    def plan(self, xyz: Tensor, centroid_idx: Tensor | None = None) -> Grouping:
        if centroid_idx is None:
            centroid_idx = farthest_point_sample(xyz, self.npoint)
        new_xyz = gather_points(xyz, centroid_idx)
        return Grouping(centroid_idx, ball_query(xyz, new_xyz, self.radius, self.nsample))

    def forward(self, xyz: Tensor, features: Tensor | None, grouping: Grouping | None = None
                ) -> tuple[Tensor, Tensor, Grouping]:
        """``xyz [B, N, 3]``, ``features [B, C, N] | None`` -> ``(new_xyz [B, S, 3], [B, C', S], grouping)``."""
        if grouping is None:
            grouping = self.plan(xyz)
        new_xyz = gather_points(xyz, grouping.centroid_idx)
        parts = []
        if self.use_xyz:
            rel = gather_points(xyz, grouping.ball_idx) - new_xyz[:, :, None, :]  # [B, S, K, 3]
            if self.normalize_xyz:
                rel = rel / self.radius
            parts.append(rel)
        if features is not None:
            parts.append(gather_points(rearrange(features, "b c n -> b n c"), grouping.ball_idx))
        grouped = rearrange(torch.cat(parts, dim=-1), "b s k c -> b c s k")
        return new_xyz, self.mlp(grouped).amax(dim=-1), grouping


class FeaturePropagation(nn.Module):
    """PointNet++ FP level: 3-NN interpolation from ``known`` to ``unknown`` + skip + shared MLP."""

    def __init__(self, mlp: Sequence[int]) -> None:
        super().__init__()
        self.mlp = _mlp1d(mlp)

    def forward(self, unknown: Tensor, known: Tensor, unknown_feats: Tensor | None, known_feats: Tensor) -> Tensor:
        x = three_nn_interpolate(unknown, known, known_feats)
        if unknown_feats is not None:
            x = torch.cat([x, unknown_feats], dim=1)
        return self.mlp(x)


@dataclass(frozen=True)
class BackboneConfig:
    npoints: tuple[int, ...] = (2048, 1024, 512, 256)
    radii: tuple[float, ...] = (0.2, 0.4, 0.8, 1.2)
    nsamples: tuple[int, ...] = (64, 32, 16, 16)
    sa_mlps: tuple[tuple[int, ...], ...] = ((64, 64, 128), (128, 128, 256), (128, 128, 256), (128, 128, 256))
    fp_mlps: tuple[tuple[int, ...], ...] = ((256, 256), (256, 256))
    num_points: int = 20000  # VoteNet's input size for SUN RGB-D (benchmark / bench figure)


CONFIGS: dict[str, BackboneConfig] = {
    "votenet": BackboneConfig(),
    "tiny": BackboneConfig(
        npoints=(64, 32, 16, 8), radii=(0.2, 0.4, 0.8, 1.2), nsamples=(16, 8, 8, 8),
        sa_mlps=((16, 16, 32), (32, 32, 64), (32, 32, 64), (32, 32, 64)), fp_mlps=((64, 64), (64, 64)),
        num_points=256,
    ),
}


def get_config(config: str | BackboneConfig) -> BackboneConfig:
    if isinstance(config, BackboneConfig):
        return config
    if config not in CONFIGS:
        raise ValueError(f"pointnet2: unknown config {config!r}; expected one of {sorted(CONFIGS)}")
    return CONFIGS[config]


def scene_points_problems(where: str, backbone: BackboneConfig, presets: Mapping[str, BackboneConfig],
                          data: Mapping[str, Any]) -> list[str]:
    """The points of each scene the dataset delivers (``data["points_per_sample"]``, a
    :class:`~fusebench.datasets.base.Delivered`; absent: not known before the data is read) against what
    ``backbone`` needs: its first set-abstraction level picks ``npoints[0]`` centres among the scene's points by
    farthest point sampling, so a scene needs at least that many (the later levels sample from the centres of the
    level before, and a ball query pads a ball of fewer than ``nsample`` points). One phrase naming the dataset's
    key and value, ``where`` (the encoder key that chose the backbone), the count needed and each preset's."""
    fact = data.get("points_per_sample")
    n, need = getattr(fact, "value", None), backbone.npoints[0]
    if isinstance(n, bool) or not isinstance(n, int) or n >= need:
        return []
    each = ", ".join(f"{name} {cfg.npoints[0]}" for name, cfg in sorted(presets.items(), key=lambda p: p[1].npoints[0]))
    return [f"{fact.source}: fewer points per scene than the {need} centres the first set-abstraction layer of "
            f"{where} samples (farthest point sampling picks them among the scene's points); expected "
            f"{fact.key or 'points per scene'} >= {need} (the first layer's centres of each preset: {each})"]


def preset_key(config: Mapping[str, Any], default: str) -> str:
    """``encoder.config.config`` as an error names it: its value, or the default preset it means when not set."""
    return (f"encoder.config.config = {config['config']!r}" if "config" in config
            else f"encoder.config.config (not set: {default!r})")


class PointNet2Backbone(nn.Module):
    """VoteNet's backbone: 4 SA levels and 2 FP levels back to the SA2 centroids (the seeds)."""

    def __init__(self, in_features: int = 0, config: str | BackboneConfig = "votenet", use_xyz: bool = True) -> None:
        super().__init__()
        cfg = get_config(config)
        self.cfg = cfg
        sa = []
        c = in_features
        for i in range(4):
            sa.append(SetAbstraction(cfg.npoints[i], cfg.radii[i], cfg.nsamples[i], c, cfg.sa_mlps[i], use_xyz=use_xyz))
            c = cfg.sa_mlps[i][-1]
        self.sa = nn.ModuleList(sa)
        c3, c2 = cfg.sa_mlps[2][-1], cfg.sa_mlps[1][-1]
        self.fp1 = FeaturePropagation([c + c3, *cfg.fp_mlps[0]])
        self.fp2 = FeaturePropagation([cfg.fp_mlps[0][-1] + c2, *cfg.fp_mlps[1]])
        self.out_features = cfg.fp_mlps[1][-1]

    def plan(self, xyz: Tensor) -> tuple[list[Grouping], list[Tensor]]:
        """FPS + ball query of every level from coordinates alone (shareable across branches)."""
        _check_xyz(xyz, "points")
        if xyz.shape[1] < self.cfg.npoints[0]:
            raise ValueError(
                f"pointnet2: scenes need at least {self.cfg.npoints[0]} points for this config, got {xyz.shape[1]}"
            )
        groupings, xyzs = [], [xyz]
        with torch.no_grad():
            for layer in self.sa:
                g = layer.plan(xyzs[-1])
                groupings.append(g)
                xyzs.append(gather_points(xyzs[-1], g.centroid_idx))
        return groupings, xyzs

    def forward(self, xyz: Tensor, features: Tensor | None, plan: tuple[list[Grouping], list[Tensor]] | None = None
                ) -> dict[str, Tensor]:
        """``xyz [B, N, 3]``, ``features [B, C, N] | None`` -> seeds (see module docstring)."""
        groupings, _ = plan if plan is not None else self.plan(xyz)
        xyzs, feats, inds = [xyz], [features], []
        for layer, g in zip(self.sa, groupings):
            new_xyz, f, g = layer(xyzs[-1], feats[-1], g)
            xyzs.append(new_xyz)
            feats.append(f)
            inds.append(g.centroid_idx)
        x = self.fp1(xyzs[3], xyzs[4], feats[3], feats[4])
        x = self.fp2(xyzs[2], xyzs[3], feats[2], x)
        # seed indices into the input points: compose SA1 and SA2 centroid indices
        seed_inds = torch.gather(inds[0], 1, inds[1])
        return {"seed_xyz": xyzs[2], "seed_features": x, "seed_inds": seed_inds}


# --------------------------------------------------------------------------------------------
# modality inputs
# --------------------------------------------------------------------------------------------

MODALITY_CHANNELS = {"points": 0, "color": 3, "height": 1}
MEAN_COLOR_RGB = 0.5  # VoteNet (SUN RGB-D colours are in [0, 1])
FLOOR_QUANTILE = 0.0099  # VoteNet: floor = np.percentile(z, 0.99), i.e. the 0.99th percentile


def modality_inputs(batch: dict[str, Any], modalities: Sequence[str]) -> tuple[Tensor, dict[str, Tensor]]:
    """``(xyz [B, N, 3], {modality: features [B, C_m, N]})`` from a collated batch.

    ``height`` is taken from the batch or, when absent, computed as VoteNet does (z minus the
    scene's ``np.percentile(z, 0.99)``, the 0.99th percentile). ``color`` is centred by subtracting 0.5."""
    mods = batch.get("modalities") if isinstance(batch, dict) else None
    if not isinstance(mods, dict) or "points" not in mods:
        raise ValueError("pointnet2: batch['modalities']['points'] [n, N, 3] is required")
    xyz = mods["points"]
    _check_xyz(xyz, "batch['modalities']['points']")
    xyz = xyz[..., :3].float() if not xyz.is_floating_point() else xyz
    feats: dict[str, Tensor] = {}
    for m in modalities:
        if m == "points":
            continue
        if m == "height" and "height" not in mods:
            z = xyz[..., 2]
            t = torch.quantile(z, FLOOR_QUANTILE, dim=1, keepdim=True)
            val = (z - t)[..., None]
        elif m not in mods:
            raise ValueError(f"pointnet2: modality {m!r} missing from batch['modalities'] (have {sorted(mods)})")
        else:
            val = mods[m].to(xyz.dtype)
            if m == "color":
                val = val - MEAN_COLOR_RGB
        want = MODALITY_CHANNELS[m]
        if val.shape[:2] != xyz.shape[:2] or val.shape[-1] != want:
            raise ValueError(
                f"pointnet2: batch['modalities'][{m!r}] must have shape [n, N, {want}] with [n, N] = "
                f"{tuple(xyz.shape[:2])}, got {tuple(val.shape)}"
            )
        feats[m] = rearrange(val, "b n c -> b c n")
    return xyz, feats


@ENCODERS.register("pointnet2")
class PointNet2Encoder(Backbone):
    """One PointNet++ branch per modality sharing the sampling/grouping geometry (module docstring).

    ``features(batch)`` (= ``forward``) -> ``{"seed_xyz": [B, S, 3], "seed_inds": [B, S],
    "seed_features": {m: [B, C, S]}}``. It has no task head (``task_head`` raises); VoteNet adds one on
    top of it.
    """

    input_kinds = ("points", "point_features")  # the modality kinds it reads (encoders/base.py)
    large_model = True  # convolutions on images / point sets: intra-op threads pay (engine/threads.py)

    def __init__(self, modalities: Sequence[str] = ("points", "color", "height"),
                 config: str | BackboneConfig = "votenet") -> None:
        super().__init__()
        modalities = list(modalities)
        bad = [m for m in modalities if m not in MODALITY_CHANNELS]
        if not modalities or bad or len(set(modalities)) != len(modalities):
            raise ValueError(
                f"PointNet2Encoder: modalities must be distinct names from {sorted(MODALITY_CHANNELS)}, got {modalities}"
            )
        self.modalities = modalities
        self.cfg = get_config(config)
        self.branches = nn.ModuleDict({
            m: PointNet2Backbone(MODALITY_CHANNELS[m], self.cfg, use_xyz=(m == "points")) for m in modalities
        })
        self.num_features = self.cfg.fp_mlps[-1][-1]

    @classmethod
    def config_problems(cls, config: Mapping[str, Any]) -> list[str]:
        """The base checks, and ``config`` (the preset) one of :data:`CONFIGS` by name, so that a mistyped preset is
        refused when the spec is loaded (as ``votenet``'s is), not when the cell builds the encoder."""
        out, preset = super().config_problems(config), config.get("config", "votenet")
        if not isinstance(preset, str) or preset not in CONFIGS:
            out.append(f"encoder.config.config = {preset!r}: expected a PointNet++ preset's name, one of {sorted(CONFIGS)}")
        return out

    @classmethod
    def data_problems(cls, config: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        """The base checks, and the points of a scene against the centres the preset's first layer samples
        (:func:`scene_points_problems`); a preset that is not a name of :data:`CONFIGS` is the constructor's error."""
        out, preset = super().data_problems(config, data), config.get("config", "votenet")
        if isinstance(preset, str) and preset in CONFIGS:
            out += scene_points_problems(preset_key(config, "votenet"), CONFIGS[preset], CONFIGS, data)
        return out

    def features(self, batch: dict[str, Any]) -> dict[str, Any]:
        xyz, feats = modality_inputs(batch, self.modalities)
        first = next(iter(self.branches.values()))
        plan = first.plan(xyz)  # the grouping geometry is computed once and shared
        out: dict[str, Any] = {"seed_features": {}}
        for m, branch in self.branches.items():
            r = branch(xyz, feats.get(m), plan)
            out["seed_features"][m] = r["seed_features"]
            out["seed_xyz"], out["seed_inds"] = r["seed_xyz"], r["seed_inds"]
        return out

    def embed(self, batch: dict[str, Any]) -> Tensor:
        """``[k, n, num_features]``: each branch's seed features max-pooled over the seeds."""
        seeds = self(batch)["seed_features"]
        return torch.stack([seeds[m].amax(dim=-1) for m in self.modalities])

    def task_head(self, task: Any) -> nn.Module | None:
        raise NotImplementedError("pointnet2 is an encoder without a task head; build 'votenet' for detection")

    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """VoteNet's backbone at SUN RGB-D size (20k points), one branch per modality."""
        return dict(modalities=["points", "color", "height"], config="votenet")

    @classmethod
    def example_batch(cls, config: dict[str, Any] | None = None, batch_size: int = 2, seed: int = 0,
                      num_points: int | None = None) -> dict[str, Any]:
        """Synthetic collated scenes (points on random boxes over a floor) with box targets."""
        config = dict(config or cls.benchmark_config())
        n = num_points or get_config(config.get("config", "votenet")).num_points
        return synthetic_scenes(batch_size, n, seed, list(config.get("modalities") or MODALITY_CHANNELS))


def synthetic_scenes(batch_size: int, num_points: int, seed: int = 0, names: Sequence[str] = ("points", "color", "height"),
                     num_boxes: int = 3, num_classes: int = 10) -> dict[str, Any]:
    """A collated batch of synthetic rooms: ``num_boxes`` random yawed boxes (sizes 0.4-2 m) with half
    of the points sampled inside them, the rest on a 6 x 6 m floor; colours random, height = z."""
    g = torch.Generator().manual_seed(seed)
    pts, targets = [], []
    for _ in range(batch_size):
        ctr = torch.rand(num_boxes, 3, generator=g) * torch.tensor([5.0, 5.0, 0.0]) + torch.tensor([0.5, 0.5, 0.0])
        size = 0.4 + 1.6 * torch.rand(num_boxes, 3, generator=g)
        ctr[:, 2] = size[:, 2] / 2
        yaw = (torch.rand(num_boxes, generator=g) * 2 - 1) * torch.pi
        boxes = torch.cat([ctr, size, yaw[:, None]], dim=1)
        per = num_points // (2 * num_boxes)
        loc = (torch.rand(num_boxes, per, 3, generator=g) - 0.5) * size[:, None, :]
        c, s = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
        inside = torch.stack([c * loc[..., 0] - s * loc[..., 1], s * loc[..., 0] + c * loc[..., 1], loc[..., 2]], -1)
        inside = rearrange(inside + ctr[:, None, :], "g p c -> (g p) c")
        floor = torch.rand(num_points - len(inside), 3, generator=g) * torch.tensor([6.0, 6.0, 0.02])
        pts.append(torch.cat([inside, floor]))
        targets.append({"boxes": boxes, "labels": torch.randint(0, num_classes, (num_boxes,), generator=g)})
    xyz = torch.stack(pts)
    mods = {"points": xyz, "color": torch.rand(batch_size, num_points, 3, generator=g), "height": xyz[..., 2:3].clone()}
    mods = {k: v for k, v in mods.items() if k in names}
    return {"names": list(mods), "modalities": mods, "masks": {},
            "present": torch.ones(len(mods), batch_size, dtype=torch.bool), "target": targets,
            "extra_targets": {}, "meta": [{} for _ in range(batch_size)]}


__all__ = [
    "CONFIGS",
    "BackboneConfig",
    "FeaturePropagation",
    "PointNet2Backbone",
    "PointNet2Encoder",
    "SetAbstraction",
    "ball_query",
    "farthest_point_sample",
    "gather_points",
    "get_backend",
    "modality_inputs",
    "preset_key",
    "scene_points_problems",
    "set_backend",
    "synthetic_scenes",
    "three_nn_interpolate",
    "use_backend",
]
