"""Metrics, task losses and the frozen-embedding evaluations compute in float32 or better, whatever the
dtype of the model outputs and the caller's autocast (the ``bf16-mixed`` / ``16-mixed`` precision
policies give bfloat16 / float16 logits, scores and embeddings).

Widening a half-precision value to float32 or float64 is exact, which fixes what to expect:

* every registered metric given bfloat16 / float16 predictions (torch, or a numpy float16 array)
  equals, bit for bit, the same metric given the same values upcast to float64 (parametrised over
  every built-in metric id; tolerance 0: the metric sees identical float64 / int64 values);
* over n = 100_000 samples (where a bfloat16 accumulator, 8 significant bits, could not even hold the
  exact count) MAE, Pearson r, accuracy and friends equal a slow python reference on those values:
  counts exactly, float sums to rel 1e-12 (float64 pairwise sum vs ``math.fsum``: ~17 * 2^-53);
* a task's loss on bf16 outputs under ``torch.autocast("cpu", dtype=torch.bfloat16)`` is a float32
  tensor equal to the float64 loss of those same bf16 values to rel 2e-6 (a float32 reduction of a
  few thousand terms: ~(log2(n) + 2) * 2^-24 < 1e-6; rounding the target or the upsampled logits to
  bf16 instead is off by 1e-5 and more), and within a stated bound of the float32
  model's loss: the bound comes from the bf16 rounding of the outputs themselves (triangle
  inequality / Lipschitz constant of the loss, see each test), not from a guessed tolerance;
* the linear probe, k-means and the representation diagnostics on bf16 embeddings under autocast
  equal the float64 computation on the same values exactly.

No assertion depends on the thread count: both sides of every equality run in the same process with
the same settings, and the references are computed in python.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusebench import metrics as M
from fusebench import tasks
from fusebench.components.diagnostics import representation_diagnostics
from fusebench.probes.embedding_eval import probe_and_cluster
from fusebench.probes.logistic import fit_logistic

BF16 = torch.autocast("cpu", dtype=torch.bfloat16)

#: how a half-precision prediction is handed to a metric
KINDS = {
    "torch-bfloat16": lambda a: torch.as_tensor(np.asarray(a)).to(torch.bfloat16),
    "torch-float16": lambda a: torch.as_tensor(np.asarray(a)).to(torch.float16),
    "numpy-float16": lambda a: np.asarray(a, dtype=np.float16),
}


def _f64(x):
    """The same values, float64 numpy (exact widening)."""
    return x.double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# ---------------------------------------------------------------------------------------------
# valid inputs per task family: (call(prediction converter) -> metric args, kwargs)
# ---------------------------------------------------------------------------------------------
N = 600


def _flat_case(family: str):
    rng = np.random.default_rng({"regression": 0, "classification": 1, "clustering": 2}[family])
    if family == "regression":
        y_true = np.round(rng.uniform(-3.3, 3.3, N) * 3) / 3  # thirds: some exact zeros (acc2_non0 drops them)
        y_pred = rng.normal(0.0, 1.5, N)
        target = torch.as_tensor(y_true, dtype=torch.float32)
    else:  # class ids (classification: stages 0..4; clustering: 7 cluster ids against 5 classes)
        y_true = rng.integers(0, 5, N)
        y_pred = np.where(rng.random(N) < 0.6, y_true, rng.integers(0, 5 if family == "classification" else 7, N))
        target = torch.as_tensor(y_true)
    return lambda conv: ((conv(y_pred), target), {})


def _segmentation_case():
    rng = np.random.default_rng(3)
    target = rng.integers(0, 6, (2, 12, 12))
    target[rng.random(target.shape) < 0.1] = -1
    pred = np.where(rng.random(target.shape) < 0.7, np.maximum(target, 0), rng.integers(0, 6, target.shape))
    return lambda conv: ((conv(pred), torch.as_tensor(target)), {"num_classes": 6, "ignore_index": -1})


def _detection_case():
    """4 scenes, 8 ground-truth boxes each (every one of the 10 classes present), detections = jittered
    ground truth plus 4 random false positives per scene, random scores."""
    rng = np.random.default_rng(4)
    dets, gts = [], []
    for s in range(4):
        g = np.concatenate([rng.uniform(-4, 4, (8, 3)), rng.uniform(0.5, 2.0, (8, 3)), rng.uniform(-3, 3, (8, 1))], 1)
        labels = (np.arange(8) + 8 * s) % 10
        fp = np.concatenate([rng.uniform(-4, 4, (4, 3)), rng.uniform(0.5, 2.0, (4, 3)), rng.uniform(-3, 3, (4, 1))], 1)
        jitter = g + rng.normal(0.0, 1.0, g.shape) * np.array([0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.2])
        boxes = np.concatenate([jitter, fp])
        boxes[:, 3:6] = np.abs(boxes[:, 3:6])
        dets.append({"boxes": boxes, "scores": rng.random(12),
                     "labels": np.concatenate([labels, rng.integers(0, 10, 4)])})
        gts.append({"boxes": torch.as_tensor(g, dtype=torch.float32), "labels": torch.as_tensor(labels)})

    def call(conv):
        return ([{"boxes": conv(d["boxes"]), "scores": conv(d["scores"]), "labels": torch.as_tensor(d["labels"])}
                 for d in dets], gts), {"num_classes": 10}

    return call


CASES = {"regression": _flat_case("regression"), "classification": _flat_case("classification"),
         "clustering": _flat_case("clustering"), "segmentation": _segmentation_case(), "detection": _detection_case()}


def _upcast(args):
    """The metric arguments with every floating array / tensor widened to float64 numpy."""
    if isinstance(args, (list, tuple)):
        return type(args)(_upcast(a) for a in args)
    if isinstance(args, dict):
        return {k: _upcast(v) for k, v in args.items()}
    if isinstance(args, torch.Tensor) and args.is_floating_point():
        return args.double().numpy()
    if isinstance(args, np.ndarray) and args.dtype.kind == "f":
        return args.astype(np.float64)
    return args


BUILTIN = sorted(i for i in M.available() if M.get(i).fn.__module__ in M.METRICS.modules)


def test_every_builtin_metric_has_a_case():
    assert {M.get(i).task for i in BUILTIN} <= set(CASES)
    assert len(BUILTIN) == len(M.CATALOG)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("metric_id", BUILTIN)
def test_half_precision_predictions_score_as_their_float64_values(metric_id: str, kind: str) -> None:
    metric = M.get(metric_id)
    args, kwargs = CASES[metric.task](KINDS[kind])
    got = metric(*args, **kwargs)
    expected = metric(*_upcast(args), **kwargs)  # the same values, float64: tolerance 0
    assert isinstance(got, float)
    assert _same(got, expected), (metric_id, kind, got, expected)


def test_predictions_that_require_grad_are_accepted() -> None:
    p = torch.tensor([0.5, -1.25, 2.0], dtype=torch.bfloat16, requires_grad=True)
    assert M.get("mae")(p * 1, torch.tensor([0.0, 0.0, 0.0])) == (0.5 + 1.25 + 2.0) / 3
    assert M.get("mae")([0.5, -1.25, 2.0], [0, 0, 0]) == (0.5 + 1.25 + 2.0) / 3  # lists still work


def test_to_numpy_widens_half_precision_only() -> None:
    from fusebench.metrics.arrays import to_numpy, widen

    for dt in (torch.bfloat16, torch.float16):
        t = torch.tensor([0.1, 2.5, -3.0], dtype=dt)
        a = to_numpy(t)
        assert a.dtype == np.float32 and a.tolist() == t.float().tolist()
        assert to_numpy(t, np.float64).dtype == np.float64
        assert widen(t).dtype == torch.float32
    assert to_numpy(np.array([1.5], np.float16)).dtype == np.float32
    x = torch.randn(4)
    assert widen(x) is x  # float32 (and float64, integers, bools) untouched: bit-identical results
    assert to_numpy(x).dtype == np.float32 and np.array_equal(to_numpy(x), x.numpy())
    for t in (torch.arange(3), torch.tensor([True, False]), torch.randn(2, dtype=torch.float64)):
        assert to_numpy(t).dtype == t.numpy().dtype and widen(t) is t
    assert to_numpy([1, 2]).dtype == np.asarray([1, 2]).dtype


# ---------------------------------------------------------------------------------------------
# many samples: an independent slow reference
# ---------------------------------------------------------------------------------------------
BIG = 100_000


def _mean(xs) -> float:
    return math.fsum(xs) / len(xs)


def _pearson(p, t) -> float:
    mp, mt = _mean(p), _mean(t)
    cov = math.fsum((a - mp) * (b - mt) for a, b in zip(p, t))
    return cov / math.sqrt(math.fsum((a - mp) ** 2 for a in p) * math.fsum((b - mt) ** 2 for b in t))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_regression_metrics_over_many_samples_match_a_slow_reference(dtype) -> None:
    rng = np.random.default_rng(5)
    y_true = rng.uniform(-3, 3, BIG)
    pred = torch.as_tensor(y_true + rng.normal(0, 0.8, BIG)).to(dtype)
    p, t = pred.double().tolist(), y_true.tolist()  # the values the model produced, exactly

    assert M.get("mae")(pred, y_true) == pytest.approx(_mean([abs(a - b) for a, b in zip(p, t)]), rel=1e-12)
    assert M.get("corr")(pred, y_true) == pytest.approx(_pearson(p, t), rel=1e-12)
    clip = lambda v: min(max(v, -1.0), 1.0)  # noqa: E731
    pc, tc = [clip(a) for a in p], [clip(b) for b in t]
    assert M.get("sims_mae")(pred, y_true) == pytest.approx(_mean([abs(a - b) for a, b in zip(pc, tc)]), rel=1e-12)
    assert M.get("sims_corr")(pred, y_true) == pytest.approx(_pearson(pc, tc), rel=1e-12)
    # counts are exact: the fraction is count / n, correctly rounded
    hits = sum((a >= 0) == (b >= 0) for a, b in zip(p, t))
    assert M.get("acc2_has0")(pred, y_true) == hits / BIG
    assert float(torch.tensor(float(hits), dtype=torch.bfloat16)) != hits  # a bf16 accumulator cannot hold it


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_classification_accuracy_over_many_samples_is_an_exact_count(dtype) -> None:
    rng = np.random.default_rng(6)
    y_true = rng.integers(0, 5, BIG)
    y_pred = np.where(rng.random(BIG) < 0.7, y_true, rng.integers(0, 5, BIG))
    hits = int(sum(int(a == b) for a, b in zip(y_pred.tolist(), y_true.tolist())))
    assert float(torch.tensor(float(hits), dtype=torch.bfloat16)) != hits
    pred = torch.as_tensor(y_pred).to(dtype)  # class ids 0..4 are exact in any float dtype
    assert M.get("acc")(pred, torch.as_tensor(y_true)) == hits / BIG
    assert M.get("cluster_acc")(pred, y_true) == hits / BIG  # the identity matching is the best one here


# ---------------------------------------------------------------------------------------------
# tasks: loss and metric gathering under autocast
# ---------------------------------------------------------------------------------------------
K, F_DIM, BATCH = 2, 16, 512


def _features(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, n, F_DIM, generator=g)


def test_regression_task_loss_and_scores_under_bf16_autocast() -> None:
    torch.manual_seed(0)
    n = 4 * BATCH
    feats = _features(n, 1)
    target = torch.round(torch.rand(n, generator=torch.Generator().manual_seed(2)) * 180 - 90) / 30  # [-3, 3]
    head = tasks.ConcatLinearHead(K * F_DIM, 1, squeeze=True)
    task = tasks.create("regression")
    batch = {"target": target}
    out32 = head(feats)
    loss32 = task.loss(out32, batch, head)
    with BF16:
        out = head(feats)
        assert out.dtype == torch.bfloat16
        loss = task.loss(out, batch, head)
    assert loss.dtype == torch.float32
    o64, t64, r64 = out.detach().double(), target.double(), out32.detach().double()
    value, value32 = loss.item(), loss32.item()
    # the L1 of the bf16 outputs' own values against the float32 targets (not bf16-rounded ones)
    assert value == pytest.approx(_mean((o64 - t64).abs().tolist()), rel=2e-6)
    # |L1(a) - L1(b)| <= mean |a - b| (triangle inequality): the float32 model's loss within the bf16 rounding
    assert abs(value - value32) <= float((o64 - r64).abs().mean()) + 1e-5
    loss.backward()
    assert head.weight.grad.dtype == torch.float32 and torch.isfinite(head.weight.grad).all()

    # gathering: batch by batch under autocast, then the metrics
    ids = ["mae", "corr", "acc7", "acc2_has0"]
    gathered, outs = tasks.create("regression"), []
    with torch.no_grad(), BF16:
        for i in range(0, n, BATCH):
            o = head(feats[:, i:i + BATCH])
            outs.append(o)
            gathered.add(gathered.predict(o, {"target": target[i:i + BATCH]}, head), target[i:i + BATCH])
    got = gathered.score(ids)
    values = torch.cat(outs).double()
    assert all(p.dtype == torch.float32 for p in gathered.preds)
    for mid in ids:  # exactly the metric of the bf16 values, in float64
        assert got[mid] == M.get(mid)(values.numpy(), t64.numpy()), mid
    ref = {mid: M.get(mid)(r64.numpy(), t64.numpy()) for mid in ids}
    err = values - r64
    assert abs(got["mae"] - ref["mae"]) <= float(err.abs().mean()) + 1e-12
    # Pearson r = <p_c/|p_c|, t_c/|t_c|>: |r(p + e) - r(p)| <= |unit(p_c + e_c) - unit(p_c)| <= 2 |e| / |p_c|
    assert abs(got["corr"] - ref["corr"]) <= 2 * float(err.norm() / (r64 - r64.mean()).norm())
    # an accuracy moves by at most the fraction of predictions whose rounded class differs
    moved = (torch.round(values.clamp(-3, 3)) != torch.round(r64.clamp(-3, 3))).double().mean()
    assert abs(got["acc7"] - ref["acc7"]) <= float(moved)


def test_classification_task_loss_and_scores_under_bf16_autocast() -> None:
    torch.manual_seed(1)
    n, c = 4 * BATCH, 5
    feats = _features(n, 3)
    y = torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(4))
    head = tasks.ConcatLinearHead(K * F_DIM, c)
    task = tasks.create("classification", num_classes=c)
    logits32 = head(feats)
    loss32 = task.loss(logits32, {"target": y}, head)
    with BF16:
        logits = head(feats)
        assert logits.dtype == torch.bfloat16
        loss = task.loss(logits, {"target": y}, head)
    assert loss.dtype == torch.float32
    z64, r64 = logits.detach().double(), logits32.detach().double()
    assert loss.item() == pytest.approx(float(F.cross_entropy(z64, y)), rel=2e-6)
    # CE_i = logsumexp(z_i) - z_iy is 2-Lipschitz in the max-norm of z_i
    assert abs(loss.item() - loss32.item()) <= 2 * float((z64 - r64).abs().amax(dim=1).mean()) + 1e-5

    gathered = tasks.create("classification", num_classes=c)
    with torch.no_grad(), BF16:
        for i in range(0, n, BATCH):
            gathered.add(gathered.predict(head(feats[:, i:i + BATCH]), None, head), y[i:i + BATCH])
    got = gathered.score(["acc", "mf1", "kappa"])
    flipped = float((z64.argmax(1) != r64.argmax(1)).double().mean())
    assert abs(got["acc"] - M.get("acc")(r64.argmax(1), y)) <= flipped


def test_segmentation_task_loss_upsamples_bf16_logits_in_float32() -> None:
    g = torch.Generator().manual_seed(5)
    logits = (torch.randn(2, 4, 8, 8, generator=g) * 3).to(torch.bfloat16)
    target = torch.randint(0, 4, (2, 16, 16), generator=g)
    target[torch.rand(target.shape, generator=g) < 0.1] = -1
    task = tasks.create("segmentation", num_classes=4)
    batch = {"target": target}
    up64 = F.interpolate(logits.double(), size=(16, 16), mode="bilinear", align_corners=False)
    with BF16:
        loss = task.loss(logits, batch)
        pred = task.predict(logits, batch)
    assert loss.dtype == torch.float32
    # the bilinear upsampling of the bf16 logits' values, then CE, to float32 accuracy (an upsampling
    # in bf16 rounds every interpolated logit to 8 significant bits: ~1e-5 off in the mean)
    assert loss.item() == pytest.approx(float(F.cross_entropy(up64, target, ignore_index=-1)), rel=2e-6)
    up32 = F.interpolate(logits.float(), size=(16, 16), mode="bilinear", align_corners=False)
    assert torch.equal(pred, up32.argmax(dim=1))
    task.add(pred, target)
    assert task.score(["pixel_acc"])["pixel_acc"] == M.get("pixel_acc")(up32.argmax(dim=1), target, 4)


def test_detection_task_scores_bf16_boxes_as_their_float64_values() -> None:
    (dets, gts), _ = CASES["detection"](KINDS["torch-bfloat16"])
    task = tasks.create("detection", num_classes=10)
    task.add(dets, gts)
    ids = ["map_0.25", "map_0.50", "mar_0.25"]
    got = task.score(ids)
    ref = _upcast(dets)
    for mid in ids:
        assert got[mid] == M.get(mid)(ref, gts, num_classes=10), mid


# ---------------------------------------------------------------------------------------------
# frozen embeddings: few-shot probe, linear probe + k-means, diagnostics
# ---------------------------------------------------------------------------------------------
def _blobs(n_per: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    x = np.eye(3, 8)[y] * 2.0 + rng.standard_normal((len(y), 8))
    return torch.as_tensor(x, dtype=torch.float32), y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_embedding_evaluations_on_half_precision_embeddings(dtype) -> None:
    (xtr, ytr), (xva, yva), (xte, yte) = _blobs(20, 0), _blobs(10, 1), _blobs(10, 2)
    half = [x.to(dtype) for x in (xtr, xva, xte)]
    wide = [x.double().numpy() for x in half]
    kw = {"l2_grid": (1e-2, 1.0), "n_init": 2}
    with BF16:
        got = probe_and_cluster(half[0], ytr, half[1], yva, half[2], yte, 3, seed=0, **kw)
    assert got == probe_and_cluster(wide[0], ytr, wide[1], yva, wide[2], yte, 3, seed=0, **kw)

    with BF16:  # the probes' logistic fit on the widened values: autocast never casts float64
        w, b = fit_logistic(wide[0], ytr, 3, 1e-2)
    ref_w, ref_b = fit_logistic(wide[0], ytr, 3, 1e-2)
    assert np.array_equal(w, ref_w) and np.array_equal(b, ref_b)

    views = torch.stack([half[0], half[0].flip(1)])  # [k=2, n, d]
    with BF16:
        diag = representation_diagnostics(views)
    assert diag == representation_diagnostics(views.double())
