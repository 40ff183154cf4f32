"""The Triton point-cloud kernels (``encoders/pointnet2_triton.py``) against slow explicit loops, run on the
CPU through Triton's interpreter, and the backend switch of ``encoders/pointnet2.py``.

Triton reads ``TRITON_INTERPRET`` when it is imported (its own library functions are decorated then), so
the kernel tests cannot switch it on inside a process that may already hold a compiling Triton:
``test_kernels_in_the_interpreter`` runs this file again in a subprocess started with
``TRITON_INTERPRET=1``, where they run (in a process started that way they run directly). The sizes are
small: the interpreter runs every program instance in Python. What the interpreter does not check (types
that must stay the same around a compiled loop) is checked by compiling each kernel for an H100 with
Triton's bundled ``ptxas`` (no GPU needed). Without ``triton`` installed the kernel tests are skipped with
that reason; the backend tests run either way.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fusebench.encoders import pointnet2
from fusebench.encoders.pointnet2 import PointNet2Encoder, use_backend
from test_pointnet2_votenet import slow_fps  # the slow FPS loop the PyTorch code is tested against

HAVE_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
ROOT = Path(__file__).resolve().parents[1]

kernels = pytest.mark.skipif(
    not (HAVE_TRITON and INTERPRETED),
    reason="triton is not installed" if not HAVE_TRITON else
    "runs in the TRITON_INTERPRET=1 subprocess of test_kernels_in_the_interpreter (Triton reads it when imported)",
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def _t():
    from fusebench.encoders import pointnet2_triton

    return pointnet2_triton


# ------------------------------------------------------------------------------------------
# slow references (explicit loops over points)
# ------------------------------------------------------------------------------------------


def slow_ball_query(xyz: torch.Tensor, centers: torch.Tensor, r: float, k: int) -> list:
    out = []
    for b in range(xyz.shape[0]):
        rows = []
        for s in range(centers.shape[1]):
            inside = [i for i in range(xyz.shape[1]) if float(((xyz[b, i] - centers[b, s]) ** 2).sum()) < r * r][:k]
            rows.append(inside + [inside[0] if inside else 0] * (k - len(inside)))
        out.append(rows)
    return out


def slow_three_nn(unknown: torch.Tensor, known: torch.Tensor) -> tuple[list, list]:
    """Per unknown point: the 3 (or m) nearest known points sorted by (squared distance, index)."""
    dists, idx = [], []
    for b in range(unknown.shape[0]):
        db, ib = [], []
        for i in range(unknown.shape[1]):
            near = sorted((float(((unknown[b, i] - known[b, j]) ** 2).sum()), j) for j in range(known.shape[1]))[:3]
            db.append([d for d, _ in near])
            ib.append([j for _, j in near])
        dists.append(db)
        idx.append(ib)
    return dists, idx


def slow_interpolate(unknown: torch.Tensor, known: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(feats.shape[0], feats.shape[1], unknown.shape[1], dtype=feats.dtype)
    for b in range(unknown.shape[0]):
        for i in range(unknown.shape[1]):
            d = sorted((float(torch.linalg.norm(unknown[b, i] - known[b, j])), j) for j in range(known.shape[1]))[:3]
            w = [1 / (dd + 1e-8) for dd, _ in d]
            out[b, :, i] = sum(wi * feats[b, :, j] for wi, (_, j) in zip(w, d)) / sum(w)
    return out


def with_duplicates(g: torch.Generator, b: int, distinct: int, copies: int, dtype=torch.float64) -> torch.Tensor:
    """``[b, distinct * copies, 3]``: every point ``copies`` times, at scattered indices (exact ties)."""
    base = torch.rand(b, distinct, 3, generator=g, dtype=dtype)
    rep = base.repeat(1, copies, 1)
    perm = torch.randperm(rep.shape[1], generator=g)
    return rep[:, perm].contiguous()


# ------------------------------------------------------------------------------------------
# the interpreter run
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.skipif(INTERPRETED, reason="this process is the TRITON_INTERPRET=1 run: the kernel tests run here")
def test_kernels_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_interpreted_",
                           str(Path(__file__))], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, "the interpreted kernel tests failed:\n" + out[-6000:]
    # every kernel test ran and passed there (none skipped)
    expected = sorted(name for name in globals() if name.startswith("test_interpreted_"))
    assert re.search(rf"\b{len(expected)} passed", out) and "skipped" not in out, out[-3000:]


# ------------------------------------------------------------------------------------------
# farthest point sampling
# ------------------------------------------------------------------------------------------


@kernels
def test_interpreted_fps_matches_slow_loop_and_pytorch():
    g = torch.Generator().manual_seed(0)
    for dtype, n, block in ((torch.float64, 120, 32), (torch.float32, 100, None)):
        xyz = torch.rand(2, n, 3, generator=g, dtype=dtype)
        idx = _t().farthest_point_sample(xyz, 16, block=block)  # block 32: 4 blocks of points per step
        assert idx.dtype == torch.long and idx.shape == (2, 16)
        for b in range(2):
            assert idx[b].tolist() == slow_fps(xyz[b].numpy(), 16)
        assert torch.equal(idx, pointnet2.farthest_point_sample(xyz, 16, backend="torch"))


@kernels
def test_interpreted_fps_ties_go_to_the_first_index():
    g = torch.Generator().manual_seed(1)
    xyz = with_duplicates(g, 2, distinct=10, copies=3)  # 30 points, each 3 times
    # 14 > 10 distinct points: once all are taken every distance is 0 and point 0 is the first of them
    idx = _t().farthest_point_sample(xyz, 14, block=16)
    for b in range(2):
        assert idx[b].tolist() == slow_fps(xyz[b].numpy(), 14)
        assert len({tuple(q) for q in xyz[b, idx[b, :10]].tolist()}) == 10 and idx[b, 10:].tolist() == [0, 0, 0, 0]
    assert torch.equal(idx, pointnet2.farthest_point_sample(xyz, 14, backend="torch"))
    with pytest.raises(ValueError, match="npoint"):
        _t().farthest_point_sample(xyz, 31)


# ------------------------------------------------------------------------------------------
# ball query
# ------------------------------------------------------------------------------------------


@kernels
def test_interpreted_ball_query_matches_slow_loop_and_pytorch():
    g = torch.Generator().manual_seed(2)
    xyz = torch.rand(2, 200, 3, generator=g)
    centers = torch.cat([xyz[:, :10], torch.full((2, 1, 3), 5.0)], dim=1)  # the last ball is empty
    # r 0.25 / 8: most balls full (the scan stops early); r 0.1 / 16: fewer points than nsample (padding)
    for r, k in ((0.25, 8), (0.1, 16)):
        got = _t().ball_query(xyz, centers, r, k, block_s=4, block_n=32)
        assert got.dtype == torch.long and got.tolist() == slow_ball_query(xyz, centers, r, k)
        assert torch.equal(got, pointnet2.ball_query(xyz, centers, r, k, backend="torch"))
    assert (got[:, -1] == 0).all()  # the empty ball: index 0


@kernels
def test_interpreted_ball_query_duplicates_float64_and_nsample_above_n():
    g = torch.Generator().manual_seed(3)
    xyz = with_duplicates(g, 2, distinct=12, copies=3)
    centers = xyz[:, :7]
    got = _t().ball_query(xyz, centers, 0.4, 6, block_s=2, block_n=8)
    assert got.tolist() == slow_ball_query(xyz, centers, 0.4, 6)
    few = xyz[:, :5]  # N = 5 < nsample = 9
    got = _t().ball_query(few, centers, 0.5, 9)
    assert got.tolist() == slow_ball_query(few, centers, 0.5, 9)
    assert torch.equal(got, pointnet2.ball_query(few, centers, 0.5, 9, backend="torch"))
    with pytest.raises(ValueError, match="nsample"):
        _t().ball_query(xyz, centers, 0.4, 0)


# ------------------------------------------------------------------------------------------
# three nearest neighbours and the interpolation
# ------------------------------------------------------------------------------------------


@kernels
def test_interpreted_three_nn_matches_slow_loop():
    g = torch.Generator().manual_seed(4)
    unknown = torch.rand(2, 30, 3, generator=g, dtype=torch.float64)
    known = torch.rand(2, 12, 3, generator=g, dtype=torch.float64)
    for bu, bm in ((8, 4), (None, None)):  # 3 blocks of known points, merged; and one block
        d2, idx = _t().three_nn(unknown, known, block_u=bu, block_m=bm)
        want_d, want_i = slow_three_nn(unknown, known)
        assert idx.dtype == torch.long and idx.tolist() == want_i
        assert torch.allclose(d2, torch.tensor(want_d, dtype=torch.float64), rtol=0, atol=1e-14)


@kernels
def test_interpreted_three_nn_ties_and_fewer_than_three_known():
    g = torch.Generator().manual_seed(5)
    known = with_duplicates(g, 2, distinct=5, copies=2)  # every known point twice
    unknown = torch.cat([known[:, :4], torch.rand(2, 9, 3, generator=g, dtype=torch.float64)], dim=1)
    d2, idx = _t().three_nn(unknown, known, block_u=4, block_m=4)
    want_d, want_i = slow_three_nn(unknown, known)  # ties: the lower index first
    assert idx.tolist() == want_i
    assert torch.allclose(d2, torch.tensor(want_d, dtype=torch.float64), rtol=0, atol=1e-14)
    assert (d2[:, :4, :2] == 0).all()  # an unknown point on a known one: both copies at distance 0
    d2, idx = _t().three_nn(unknown, known[:, :2])  # m = 2: two neighbours
    assert idx.shape == (2, 13, 2) and idx.tolist() == slow_three_nn(unknown, known[:, :2])[1]


@kernels
def test_interpreted_interpolation_matches_slow_loop_and_pytorch_gradients():
    g = torch.Generator().manual_seed(6)
    unknown = torch.rand(2, 20, 3, generator=g, dtype=torch.float64)
    known = torch.rand(2, 9, 3, generator=g, dtype=torch.float64)
    feats = torch.randn(2, 4, 9, generator=g, dtype=torch.float64)
    got = pointnet2.three_nn_interpolate(unknown, known, feats, backend="triton")
    assert torch.allclose(got, slow_interpolate(unknown, known, feats), rtol=0, atol=1e-10)
    # gradients in every input equal those through the PyTorch code (exact distances + topk + gather)
    grads = []
    for backend in ("triton", "torch"):
        ins = [t.clone().requires_grad_() for t in (unknown, known, feats)]
        out = pointnet2.three_nn_interpolate(*ins, backend=backend)
        grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum(),
                                         ins))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11)
    small = [t.clone().requires_grad_() for t in (unknown[:1, :4], known[:1, :4], feats[:1, :2, :4])]
    assert torch.autograd.gradcheck(lambda u, k, f: pointnet2.three_nn_interpolate(u, k, f, backend="triton"), small)


# ------------------------------------------------------------------------------------------
# grouping (gather) and its backward
# ------------------------------------------------------------------------------------------


@kernels
def test_interpreted_gather_forward_and_backward_match_loops():
    g = torch.Generator().manual_seed(7)
    feats = torch.randn(2, 5, 11, generator=g, dtype=torch.float64)  # [B, C, N]
    x = feats.transpose(1, 2)  # [B, N, C], not contiguous (as SetAbstraction gathers features)
    idx = torch.randint(0, 11, (2, 6, 4), generator=g)  # repeats: the backward must add them up
    idx[:, 0] = 3
    for ix in (idx, idx.int()):
        out = _t().gather_points(x, ix)
        assert out.shape == (2, 6, 4, 5)
        for b in range(2):
            for s in range(6):
                for k in range(4):
                    assert torch.equal(out[b, s, k], x[b, int(idx[b, s, k])])
    xg = x.clone().requires_grad_()
    up = torch.randn(2, 6, 4, 5, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad(_t().gather_points(xg, idx), xg, up)
    want = torch.zeros_like(x)
    for b in range(2):
        for s in range(6):
            for k in range(4):
                want[b, int(idx[b, s, k])] += up[b, s, k]
    assert torch.allclose(grad, want, rtol=0, atol=1e-13)
    (ref,) = torch.autograd.grad(pointnet2.gather_points(xg, idx, backend="torch"), xg, up)
    assert torch.allclose(grad, ref, rtol=0, atol=1e-13)
    assert torch.autograd.gradcheck(lambda t: _t().gather_points(t, idx[:, :2] % 6), (xg[:, :6, :3].detach().clone()
                                                                                     .requires_grad_(),))
    assert torch.equal(_t().gather_points(x.float(), idx), pointnet2.gather_points(x.float(), idx, backend="torch"))
    with pytest.raises(ValueError, match="idx"):
        _t().gather_points(x, idx + 11)


# ------------------------------------------------------------------------------------------
# the encoder with the kernels
# ------------------------------------------------------------------------------------------


@kernels
def test_interpreted_encoder_with_triton_ops_equals_pytorch_ops():
    torch.manual_seed(0)
    enc = PointNet2Encoder(config="tiny").eval()
    g = torch.Generator().manual_seed(8)
    batch = {"modalities": {"points": torch.rand(2, 256, 3, generator=g), "color": torch.rand(2, 256, 3, generator=g),
                            "height": torch.rand(2, 256, 1, generator=g)}}
    outs, grads = {}, {}
    for backend in ("torch", "triton"):
        with use_backend(backend):
            plan = enc.branches["points"].plan(batch["modalities"]["points"])
            e = enc.embed(batch)
            enc.zero_grad()
            e.square().sum().backward()
        outs[backend] = (plan, e.detach())
        grads[backend] = [p.grad.clone() for p in enc.parameters()]
    (pt, et), (pk, ek) = outs["torch"], outs["triton"]
    for gt, gk in zip(pt[0], pk[0]):  # every level's FPS centroids and ball indices
        assert torch.equal(gt.centroid_idx, gk.centroid_idx) and torch.equal(gt.ball_idx, gk.ball_idx)
    assert torch.allclose(et, ek, rtol=1e-6, atol=1e-6)
    for a, b in zip(grads["torch"], grads["triton"]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


@kernels
def test_interpreted_votenet_equals_pytorch_ops():
    """The whole detector (FPS on the votes, whose gradient flows through the gather): loss and every
    gradient equal the PyTorch code's (both compute 3-NN distances from coordinate differences)."""
    from fusebench.encoders import build
    from fusebench.encoders.votenet import VoteNet
    from fusebench.components.model import for_backbone

    torch.manual_seed(0)
    model = for_backbone(build("votenet", config="tiny")).train()
    batch = VoteNet.example_batch({"config": "tiny"}, batch_size=2, seed=0)
    losses, grads = {}, {}
    for backend in ("torch", "triton"):
        with use_backend(backend):
            loss = model.task_loss(model(batch), batch)
            model.zero_grad()
            loss.backward()
        losses[backend] = loss.detach()
        grads[backend] = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    assert torch.allclose(losses["torch"], losses["triton"], rtol=1e-6, atol=0)
    assert len(grads["torch"]) == len(grads["triton"]) > 10
    for a, b in zip(grads["torch"], grads["triton"]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# the kernels compile for a GPU (no GPU needed: Triton's bundled ptxas)
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.skipif(INTERPRETED, reason="the interpreter builds no GPU code")
@pytest.mark.parametrize("fp", ["fp32", "fp64"])
def test_kernels_compile_to_cubin_for_sm90(fp, monkeypatch, tmp_path):
    """What the interpreter does not check (loop-carried types, layouts): each kernel compiles to an H100 cubin."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiled here, not taken from (or left in) ~/.triton
    t = _t()
    ints = lambda *names: {n: "i32" for n in names}  # noqa: E731
    kernels = [
        (t._fps_kernel, dict(xyz_ptr=f"*{fp}", dist_ptr=f"*{fp}", out_ptr="*i64", **ints("N", "npoint", "s_b", "s_c")),
         {"BLOCK": 1024}, 8),
        (t._ball_query_kernel, dict(xyz_ptr=f"*{fp}", ctr_ptr=f"*{fp}", r2_ptr=f"*{fp}", out_ptr="*i64",
                                    **ints("N", "S", "K", "sx_b", "sx_c", "sc_b", "sc_c")),
         {"BLOCK_S": 16, "BLOCK_N": 64, "BLOCK_K": 64}, 4),
        (t._three_nn_kernel, dict(unk_ptr=f"*{fp}", kn_ptr=f"*{fp}", d_ptr=f"*{fp}", i_ptr="*i64",
                                  **ints("n", "m", "su_b", "su_c", "sk_b", "sk_c")), {"BLOCK_U": 32, "BLOCK_M": 64}, 4),
        (t._gather_kernel, dict(x_ptr=f"*{fp}", idx_ptr="*i64", out_ptr=f"*{fp}", **ints("N", "M", "C")),
         {"BLOCK_M": 32, "BLOCK_C": 128}, 4),
    ]
    for fn, sig, consts, warps in kernels:
        try:  # the offline-compile API as of triton 3.8 (older releases differ)
            src = ASTSource(fn=fn, signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts)
        except TypeError as e:
            pytest.skip(f"triton {triton.__version__}'s ASTSource takes other arguments ({e})")
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        assert compiled.asm["cubin"], fn.__name__


# ------------------------------------------------------------------------------------------
# the backend switch (no interpreter needed)
# ------------------------------------------------------------------------------------------


def test_backend_names_are_checked(monkeypatch):
    xyz = torch.rand(1, 8, 3)
    with pytest.raises(ValueError, match="backend must be one of"):
        pointnet2.set_backend("cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        pointnet2.farthest_point_sample(xyz, 2, backend="gpu")
    monkeypatch.setenv(pointnet2.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match="FUSEBENCH_POINTNET2_BACKEND must be one of"):
        pointnet2.farthest_point_sample(xyz, 2)
    monkeypatch.setenv(pointnet2.BACKEND_ENV, "torch")
    assert pointnet2.get_backend() == "torch"
    with use_backend("auto"):
        assert pointnet2.get_backend() == "auto"
    assert pointnet2.get_backend() == "torch"


def test_auto_on_cpu_runs_the_pytorch_code(monkeypatch):
    def no_kernels():
        raise AssertionError("the Triton kernels were asked for on the CPU")

    monkeypatch.setattr(pointnet2, "_kernels", no_kernels)
    g = torch.Generator().manual_seed(9)
    xyz = torch.rand(2, 40, 3, generator=g)
    with use_backend("auto"):
        idx = pointnet2.farthest_point_sample(xyz, 8)
        pointnet2.ball_query(xyz, pointnet2.gather_points(xyz, idx), 0.3, 4)
        pointnet2.three_nn_interpolate(xyz[:, :10], xyz[:, 10:], torch.randn(2, 3, 30, generator=g))
    for b in range(2):
        assert idx[b].tolist() == slow_fps(xyz[b].numpy(), 8)


@pytest.mark.skipif(INTERPRETED, reason="under the interpreter Triton runs CPU tensors")
def test_forced_triton_on_cpu_says_why():
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1" if HAVE_TRITON else "not importable"):
        pointnet2.farthest_point_sample(torch.rand(1, 8, 3), 2, backend="triton")


def test_cuda_choice_is_logged_once(monkeypatch, caplog):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fusebench.encoders import pointnet2_triton

    with FakeTensorMode():
        cuda_points = torch.empty(2, 16, 3, device="cuda")  # a tensor on "cuda" without a GPU
    monkeypatch.setattr(pointnet2, "_logged", set())
    monkeypatch.setattr(pointnet2_triton, "unavailable", lambda device: "triton is not importable (ImportError: x)")
    with caplog.at_level(logging.INFO, logger="fusebench.encoders.pointnet2"), use_backend("auto"):
        assert not pointnet2._triton_for(cuda_points, None)
        assert not pointnet2._triton_for(cuda_points, None)
        with pytest.raises(RuntimeError, match="backend 'triton' was asked for but triton is not importable"):
            pointnet2._triton_for(cuda_points, "triton")
        monkeypatch.setattr(pointnet2_triton, "unavailable", lambda device: None)
        assert pointnet2._triton_for(cuda_points, None)
        assert not pointnet2._triton_for(cuda_points, "torch")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "pointnet2: point-cloud ops on cuda run the PyTorch code: triton is not importable (ImportError: x)",
        "pointnet2: point-cloud ops on cuda run the Triton kernels (pointnet2_triton)",
    ]
