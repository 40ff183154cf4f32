"""Missing-view robustness (engine layer): seeded presence masks, batches with views taken out, and the
missing-view evaluation of the downstream protocols (issue #23).

**The mask convention** (:func:`presence_mask`). ``presence_mask(n, k, rate, seed)`` is a bool array
``[n, k]`` (True = sample i has view j) with exactly ``m = floor(rate * n * k + 0.5)`` absent entries
and at least one view kept by every sample. It is drawn from one generator,
``numpy.random.default_rng(SeedSequence([*seed, round(rate * 10**6)]))`` (``seed`` an int or a tuple
of ints), in two steps: (1) ``keep = rng.integers(0, k, size=n)``: every sample's guaranteed view,
uniformly; (2) the other ``n * (k - 1)`` entries are listed row-major (sample by sample, views in
increasing order without ``keep[i]``) and ``rng.choice(n * (k - 1), size=m, replace=False)`` of them
are made absent. So the absent set is uniform among the masks that keep ``keep``. A rate above
``(k - 1) / k`` cannot keep a view of every sample and is a ValueError naming the rate and k
(:func:`fusebench.components.protocols.missing_rate_problem`, which the spec check also applies).

**The instance-level rule** (:func:`instance_mask`, option ``missing_rules: [instance]``; metric prefix
``inst<100 r>`` instead of ``miss<100 r>``). The incomplete multi-view literature counts the missing rate
per sample: a fraction eta of the samples is incomplete, each keeping at least one view and missing at
least one, the others complete. COMPLETER (Lin et al., CVPR 2021, ``util/get_mask.py``) and DCP (Lin et
al., TPAMI 2022) draw it so: ``int(n * (1 - eta))`` complete rows, the remaining rows incomplete, the
rows shuffled; with two views an incomplete row keeps one view chosen uniformly (one-hot); with more
views it keeps a uniformly chosen view plus random others, redrawn until about half of the incomplete
rows' entries are present. Here, seeded and exact: ``m = floor(eta * n + 0.5)`` incomplete samples
(COMPLETER truncates ``n * (1 - eta)``, so its count differs by at most one),
``rows = rng.choice(n, m, replace=False)`` with ``rng = default_rng(SeedSequence([*seed, round(eta *
10**6), 1]))`` (the trailing 1 sets it apart from the entry rule's generator); then
``c = rng.integers(1, k, size=m)`` views kept per incomplete sample (uniform on 1..k-1) and ``u =
rng.random((m, k))``: incomplete sample i (in the order of ``rows``) keeps the ``c[i]`` views of smallest
``u[i]`` (stable argsort), i.e. a uniform subset of that size. With k = 2 every incomplete sample keeps one
view chosen uniformly, COMPLETER's mask; with k > 2 half of an incomplete sample's views are present in
expectation, COMPLETER's target. eta may be any rate in [0, 1) for k >= 2 (at eta, eta * n samples and
between eta * n and eta * n * (k - 1) entries are absent; the entry rule's r is the fraction of entries).

Streams (the ints before the rate): the test split of a probe ``(run seed, 0)``; the clustered samples
``(run seed, 1)``; pretraining batch b of epoch e ``(run seed, 2, e, b, rank)`` (rank 0 unless
distributed: each rank draws over its shard). One draw per (run seed, rate): every objective of a
seed is scored on the same incomplete data, and the spread over seeds includes the masks.

**An absent view** (:func:`drop_views`): its ``present`` entry is False, its input is zeroed (as
:mod:`fusebench.datasets.collate` fills a modality a sample lacks) and a sequence's step mask cleared.
The encoders see that presence mask (``batch["present"]``; the per-view MLPs embed each view on its own
and give an absent view a zero embedding; a fusion encoder leaves it out of the fusion).

**Frozen features** (:func:`embedding_missing_views`, the ``embedding_eval`` protocol). The probe is
the one the protocol chose: logistic regression with the L2 weight chosen on the **complete** validation
split, fitted on the **complete** train split (refitted here: the fit is deterministic). The test
features are computed with the mask (the encoder sees it), z-scored with the complete train split's
mean / std, and the columns of each absent view set to 0 = the train mean (mean imputation in the
standardised space); the same for the reference rows' features, whose columns are per view (``raw``,
``raw_l2``, ``raw_tfidf``, ``raw_balanced``); ``raw_pca`` mixes the views, so there the absent view's
block of the z-scored input is set to 0 before the projection fitted on the complete train split.
**The present-view probe** (metric ids ``<prefix>_present_acc``, beside the mean imputation's
``<prefix>_acc``; ``present_acc`` on the complete test split): a probe that uses only the present views,
never an imputed value. An encoder's row (one embedding per view, in one space): a logistic probe fitted on
the **complete** train split's mean of the k view embeddings (z-scored with that mean's train statistics,
L2 weight searched on the complete val split like the protocol's probe) scores the mean of each test
sample's present views' embeddings (computed with the mask, the encoder seeing it). An input-feature row
(its views have different widths: there is no common space to average in): the mean over the present
views of the linear probe's per-view scores ``W_v z_v``, rescaled to k views, i.e. logits ``b + (k /
|present|) sum_{v present} W_v z_v`` (for ``raw_pca`` the projection is linear in the views' z-scored
blocks, so the same rescaling of the projection of the present blocks); with every view present this is
the probe itself, so its ``present_acc`` equals ``acc``. Clustering keeps mean imputation only.
Clustering runs k-means (the protocol's restarts, lowest inertia) on the samples it clusters today
(``cluster_on``), with the clustered-samples mask: with ``cluster_standardize = "zscore"`` each column
is z-scored with the mean / std of the samples where its view is present (no absent value is ever
used) and absent entries are 0; with ``"none"`` absent entries get the column's mean over the present
ones (``raw_pca``: projected from the imputed inputs, clustered as today). Single-view tests use the
mask with view j alone present, for every sample (test split and clustered samples).

**Task heads** (:func:`head_missing_views`, ``linear_probe`` / ``finetune``): the trained model (head
selected on the complete validation split) scores the test split with the mask through
``predict``, with the task's metrics; the encoders see the presence mask (zero embedding for an absent
modality, left out of a mean fusion).

This module is longer than 450 lines: the two mask rules, the masked batches and the missing-view
evaluation of both kinds of protocol are one convention, documented once above.

Record (``run.json`` field ``missing_views``): ``metrics`` ``{"miss<100 r>_<m>": value, "only_<view>_<m>":
value}`` (r = 0 is the protocol's own metric m; ``inst<100 r>_<m>`` under the instance rule; m = ``acc``
(mean imputation), ``present_acc`` (present views only; ``embedding_eval``), ``cluster_acc``, ``nmi``,
``ari``), ``shown`` (the metrics a board tabulates), the rates, ``rules``, views, absent counts (the
instance rule adds the incomplete samples) and the rules above. Task heads (below) take the same
``missing_rules``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from fusebench.metrics.arrays import to_numpy
from fusebench.runtime import distributed, utils
from fusebench.runtime.gather import HostGather
from fusebench.engine.data import make_loader
from fusebench.components.protocols import MISSING_RULES, instance_rate_problem, missing_rate_problem, rate_id, view_id

PROBE_STREAM, CLUSTER_STREAM, PRETRAIN_STREAM = 0, 1, 2
MASK_RULE = ("presence_mask(n, k, r, seed): default_rng(SeedSequence([*seed, round(r * 1e6)])); keep = "
             "integers(0, k, n) (one view kept per sample); floor(r * n * k + 0.5) of the other n * (k - 1) "
             "entries (row-major) absent by choice(replace=False); streams: test (seed, 0), clustered (seed, 1), "
             "pretraining batch (seed, 2, epoch, batch, rank)")
IMPUTATION_RULE = ("encoders see the presence mask (absent input zeroed, present = False); probe: test features "
                   "z-scored with the complete train statistics, an absent view's columns set to 0 (the train mean; "
                   "raw_pca: its z-scored input block set to 0 before the projection); clustering: columns z-scored "
                   "over the samples whose view is present, absent entries 0 (cluster_standardize none: the "
                   "column's mean over the present entries)")
EMBEDDING_SHOWN = ("acc", "cluster_acc")
#: the tag that sets the instance-level masks' generator apart from the entry-level ones of the same seed and rate
INSTANCE_TAG = 1
INSTANCE_MASK_RULE = ("instance_mask(n, k, r, seed): default_rng(SeedSequence([*seed, round(r * 1e6), 1])); "
                      "incomplete = choice(n, floor(r * n + 0.5), replace=False); per incomplete sample in that "
                      "order: c = integers(1, k) views kept (1..k-1), u = random(k), the c views of smallest u kept "
                      "(stable argsort); streams as the entry rule's")
PRESENT_RULE = ("present views only: an encoder's row (one embedding per view, one space): a logistic probe fitted "
                "on the complete train split's mean of the k view embeddings (z-scored with its train statistics, "
                "L2 searched on the complete val split) scores the mean of the present views' embeddings; an "
                "input-feature row (views of different widths, no common space): the linear probe's per-view scores "
                "averaged over the present views, logits = b + (k / #present) * sum over present views v of W_v z_v "
                "(raw_pca: the projection of the present views' z-scored blocks)")


def _seed_ints(seed: int | Sequence[int]) -> list[int]:
    parts = [seed] if isinstance(seed, (int, np.integer)) else list(seed)
    if not parts or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0 for p in parts):
        raise ValueError(f"presence_mask: seed must be an integer >= 0 or a non-empty sequence of them, got {seed!r}")
    return [int(p) for p in parts]


def absent_count(n: int, k: int, rate: float) -> int:
    """The number of absent entries of an ``[n, k]`` mask at ``rate``: ``floor(rate * n * k + 0.5)``."""
    return int(math.floor(float(rate) * n * k + 0.5))


def _mask_args(where: str, n: Any, k: Any, rate: Any, problem: Callable[..., str | None]) -> tuple[int, int]:
    """``(n, k)`` as ints, or one ValueError naming ``where`` and the bad argument (``problem`` checks the rate)."""
    for name, v, low in (("n", n, 0), ("k", k, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{where}: {name} must be an integer >= {low}, got {v!r}")
    why = problem(rate, int(k), f"{where}: rate")
    if why:
        raise ValueError(why)
    return int(n), int(k)


def presence_mask(n: int, k: int, rate: float, seed: int | Sequence[int]) -> np.ndarray:
    """The seeded presence mask ``[n, k]`` (True = present) of the module docstring's convention."""
    n, k = _mask_args("presence_mask", n, k, rate, missing_rate_problem)
    m = absent_count(n, k, rate)
    rng = np.random.default_rng(np.random.SeedSequence([*_seed_ints(seed), round(float(rate) * 10**6)]))
    keep = rng.integers(0, k, size=n)
    mask = np.ones((n, k), dtype=bool)
    if m:
        others = np.ones((n, k), dtype=bool)
        others[np.arange(n), keep] = False
        rows, cols = np.nonzero(others)  # row-major: sample by sample, views ascending
        pick = rng.choice(rows.size, size=m, replace=False)
        mask[rows[pick], cols[pick]] = False
    return mask


def incomplete_count(n: int, rate: float) -> int:
    """The number of incomplete samples of an ``[n, k]`` instance-level mask at ``rate``: ``floor(rate * n + 0.5)``."""
    return int(math.floor(float(rate) * n + 0.5))


def instance_mask(n: int, k: int, rate: float, seed: int | Sequence[int]) -> np.ndarray:
    """The seeded instance-level presence mask ``[n, k]`` (True = present) of the incomplete multi-view
    literature: a fraction ``rate`` of the samples is incomplete, each keeping at least one view and
    missing at least one; the other samples keep every view (module docstring)."""
    n, k = _mask_args("instance_mask", n, k, rate, instance_rate_problem)
    rng = np.random.default_rng(np.random.SeedSequence([*_seed_ints(seed), round(float(rate) * 10**6), INSTANCE_TAG]))
    mask = np.ones((n, k), dtype=bool)
    m = incomplete_count(n, rate)
    if m:
        rows = rng.choice(n, size=m, replace=False)
        kept = rng.integers(1, k, size=m)                                   # views kept: 1..k-1
        order = np.argsort(rng.random((m, k)), axis=1, kind="stable")       # a uniform order of the views
        keep = np.arange(k)[None, :] < kept[:, None]                        # the first kept[i] of that order
        sub = np.zeros((m, k), dtype=bool)
        np.put_along_axis(sub, order, keep, axis=1)
        mask[rows] = sub
    return mask


def missing_mask(rule: str, n: int, k: int, rate: float, seed: int | Sequence[int]) -> np.ndarray:
    """The presence mask of ``rule`` (``"entry"``: :func:`presence_mask`, ``"instance"``: :func:`instance_mask`)."""
    if rule not in MISSING_RULES:
        raise ValueError(f"missing views: unknown rule {rule!r}; valid rules: {list(MISSING_RULES)}")
    return (presence_mask if rule == "entry" else instance_mask)(n, k, rate, seed)


def single_view_mask(n: int, k: int, view: int) -> np.ndarray:
    """``[n, k]``: view ``view`` alone present for every sample."""
    mask = np.zeros((n, k), dtype=bool)
    mask[:, view] = True
    return mask


# ---------------------------------------------------------------------------------------------
# batches with views taken out
# ---------------------------------------------------------------------------------------------
def drop_views(batch: dict[str, Any], keep: torch.Tensor, names: Sequence[str]) -> dict[str, Any]:
    """A copy of the collated ``batch`` where view ``names[l]`` of sample i is absent unless
    ``keep[l, i]`` (``keep`` BoolTensor ``[len(names), n]``): ``present`` is False there, the input is
    zeroed and a sequence's step mask cleared. The batch's own absences stay absent."""
    out = dict(batch)
    present = batch["present"].clone()
    mods, masks = dict(batch["modalities"]), dict(batch.get("masks") or {})
    for l, name in enumerate(names):
        row = keep[l].to(present.device)
        present[batch["names"].index(name)] &= row
        x = mods[name]
        mods[name] = torch.where(row.to(x.device).view(-1, *([1] * (x.dim() - 1))), x, torch.zeros_like(x))
        if name in masks:
            masks[name] = masks[name] & row.to(masks[name].device)[:, None]
    out.update(present=present, modalities=mods, masks=masks)
    return out


def with_missing_views(loader: Iterable[dict[str, Any]], rate: float, seed: int, epoch: int, skip: int = 0
                       ) -> Iterable[dict[str, Any]]:
    """Pretraining batches with a fraction ``rate`` of their (sample, view) entries absent: batch b of
    the epoch (``skip`` + its position in ``loader``) gets ``presence_mask(n, k, rate, (seed, 2, epoch,
    b, rank))`` over its views (``batch["names"]``), so a resumed epoch sees the masks an uninterrupted
    one would. ``rate`` 0: ``loader`` itself, untouched."""
    if not rate:
        return loader
    return _drawn(loader, float(rate), int(seed), int(epoch), int(skip))


def _drawn(loader: Iterable[dict[str, Any]], rate: float, seed: int, epoch: int, skip: int) -> Iterator[dict[str, Any]]:
    rank = distributed.rank() if distributed.is_distributed() else 0
    for i, batch in enumerate(loader):
        names = list(batch["names"])
        mask = presence_mask(len(batch["target"]), len(names), rate, (seed, PRETRAIN_STREAM, epoch, skip + i, rank))
        yield drop_views(batch, torch.from_numpy(mask.T.copy()), names)


def _masked_batches(model: Any, ds: Any, spec: Any, device: torch.device, seed: int, mask: np.ndarray
                    ) -> Iterator[dict[str, Any]]:
    """The batches of ``ds`` in order (the evaluation loader) with ``mask`` rows applied, on ``device``."""
    loader, _ = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    start = 0
    for batch in loader:
        n = len(batch["target"])
        keep = torch.from_numpy(np.ascontiguousarray(mask[start:start + n].T))
        start += n
        yield utils.to_device(drop_views(batch, keep, list(model.modalities)), device)
    if start != mask.shape[0]:
        raise ValueError(f"missing views: a mask of {mask.shape[0]} samples for a split of {start}")


@torch.no_grad()
def masked_features(model: Any, ds: Any, spec: Any, device: torch.device, seed: int, mask: np.ndarray) -> torch.Tensor:
    """The frozen features ``[n, k * f]`` of ``ds`` (as :func:`fusebench.engine.evaluate.features`)
    computed with ``mask [n, k]`` (columns in ``model.modalities`` order) applied to every batch."""
    model.eval()
    xs = HostGather()  # copied to the host in blocks of batches (no wait for the device at each batch)
    for batch in _masked_batches(model, ds, spec, device, seed, mask):
        z = model.embed(batch).float()  # [k, n, f]
        xs.add(z.permute(1, 0, 2).reshape(z.shape[1], -1))
    return torch.cat(xs.result())


@torch.no_grad()
def masked_evaluate(model: Any, ds: Any, spec: Any, device: torch.device, seed: int, mask: np.ndarray) -> dict[str, float]:
    """The spec's metrics of ``model`` on ``ds`` (as :func:`fusebench.engine.evaluate.evaluate`) with
    ``mask [n, k]`` (columns in ``model.modalities`` order) applied to every batch."""
    from fusebench import tasks

    model.eval()
    task = tasks.for_dataset(ds)
    for batch in _masked_batches(model, ds, spec, device, seed, mask):
        task.add(model.predict(model(batch), batch), batch["target"])
    return task.score(spec.metrics)


# ---------------------------------------------------------------------------------------------
# the embedding_eval protocol
# ---------------------------------------------------------------------------------------------
@dataclass
class FeatureSource:
    """Where a row's features come from under a mask: ``names`` the views (the mask's columns, in the
    order of the feature blocks), ``widths`` the columns of each view in the features (None: the views are
    not separable columns, ``raw_pca``: no imputation after ``masked``), ``masked(split, mask)`` the
    features of a split with ``mask [n_split, k]`` applied (None: the features do not change, only the
    imputation applies)."""

    names: list[str]
    widths: list[int] | None
    masked: Callable[[str, np.ndarray], Any] | None = None
    #: the views' blocks are embeddings of one space (an encoder's per-view embeddings, equal widths): the
    #: present-view probe averages them; otherwise it averages the linear probe's per-view scores
    shared: bool = False


def _columns(mask: np.ndarray, widths: Sequence[int]) -> np.ndarray:
    """``[n, sum(widths)]``: each view's presence repeated over its columns."""
    return np.repeat(mask, np.asarray(widths, dtype=np.int64), axis=1)


def _observed_standardize(x: np.ndarray, mask: np.ndarray, widths: Sequence[int], zscore: bool) -> np.ndarray:
    """The clustering features of a masked set: per view, the columns z-scored with the mean / population
    std of the samples where the view is present (``zscore``; constant or unobserved columns 0), absent
    entries 0; without ``zscore`` the values as given, absent entries the column's mean over the present ones."""
    from fusebench.components.reference_features import zscore_stats

    out = np.zeros_like(x)
    lo = 0
    for v, w in enumerate(widths):
        cols, rows = slice(lo, lo + w), mask[:, v]
        lo += w
        if not rows.any():
            continue
        block = x[rows, cols]
        mean, scale, _ = zscore_stats(block)
        if zscore:
            out[rows, cols] = (block - mean) / scale
        else:
            out[rows, cols] = block
            out[~rows, cols] = block.mean(axis=0)
    return out


def _view_mean(x: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray:
    """``[n, f]``: the mean of the present views' blocks of ``x [n, k * f]`` (``mask [n, k]``, >= 1 view per row)."""
    blocks = x.reshape(x.shape[0], k, -1)                                   # [n, k, f]
    return (blocks * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)


def embedding_missing_views(source: FeatureSource, xs: Mapping[str, Any], ys: Mapping[str, Any], num_classes: int,
                            seed: int, result: Mapping[str, Any], rates: Sequence[float], single_view: bool,
                            kmeans_max_iter: int = 300, n_init: int | None = None,
                            rules: Sequence[str] = ("entry",)) -> dict[str, Any]:
    """The missing-view metrics of one ``embedding_eval`` cell (module docstring): ``xs`` / ``ys`` the
    complete features and labels of ``train`` / ``val`` / ``test`` as the protocol scored them,
    ``result`` what :func:`fusebench.probes.embedding_eval.probe_and_cluster` returned (the chosen L2
    weight, the clustering settings; ``n_init``: k-means restarts of the incomplete data's clusterings, default
    the protocol's), ``rules`` how each rate counts (``entry`` / ``instance``). -> the record field
    ``missing_views``."""
    from fusebench import metrics as M
    from fusebench.probes.logistic import fit_logistic, predict_classes, search_l2, standardize
    from fusebench.probes.kmeans import kmeans

    x = {s: to_numpy(xs[s], np.float64) for s in ("train", "val", "test")}
    y = {s: to_numpy(ys[s]).reshape(-1).astype(np.int64) for s in ("train", "val", "test")}
    k = len(source.names)
    probe, clus = result["probe"], result["clustering"]
    restarts = int(n_init) if n_init is not None else int(clus["n_init"])
    ztr = standardize(x["train"], x["train"])[0]
    w, b = fit_logistic(ztr, y["train"], num_classes, probe["l2"], probe["max_iter"])
    clustered = ["train", "val", "test"] if clus["on"] == "all" else ["test"]
    sizes = [x[s].shape[0] for s in clustered]
    yc = np.concatenate([y[s] for s in clustered])
    zscore = clus["standardize"] != "none"
    present_record: dict[str, Any] = {"kind": "mean_view_scores"}
    if source.shared:  # the present-view probe of an encoder's row: fitted on the complete mean embeddings
        everything = {s: np.ones((x[s].shape[0], k), dtype=bool) for s in ("train", "val")}
        mtr, mva = (_view_mean(x[s], everything[s], k) for s in ("train", "val"))
        zmtr, zmva = standardize(mtr, mtr, mva)
        fits = {}

        def mean_score(l2: float) -> float:
            fits[l2] = fit_logistic(zmtr, y["train"], num_classes, l2, probe["max_iter"])
            return float(M.get("acc")(predict_classes(zmva, *fits[l2]), y["val"]))

        search = search_l2(probe.get("l2_grid") or [probe["l2"]], mean_score)
        mean_w, mean_b = fits[search["l2"]]
        present_record = {"kind": "mean_embedding", "l2": search["l2"], "l2_searched": search["searched"],
                          "l2_edge": search["edge"], "val_acc": search["scores"][search["l2"]]}

    def features(split: str, mask: np.ndarray) -> np.ndarray:
        if source.masked is None:
            return x[split]
        return to_numpy(source.masked(split, mask), np.float64)

    def present_predict(xte: np.ndarray, zte: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The present-view probe's predictions (``xte`` the masked features, ``zte`` the probe's imputed ones)."""
        if source.shared:
            return predict_classes(standardize(mtr, _view_mean(xte, mask, k))[0], mean_w, mean_b)
        scale = k / mask.sum(axis=1, keepdims=True)                          # k / #present views
        return predict_classes(zte * scale, w, b)                                   # b + (k / #present) z W

    def score(prefix: str, test_mask: np.ndarray, cluster_mask: np.ndarray) -> dict[str, float]:
        xte = features("test", test_mask)
        zte = standardize(x["train"], xte)[0]
        if source.widths is not None:
            zte = np.where(_columns(test_mask, source.widths), zte, 0.0)
        out = {f"{prefix}_acc": float(M.get("acc")(predict_classes(zte, w, b), y["test"])),
               f"{prefix}_present_acc": float(M.get("acc")(present_predict(xte, zte, test_mask), y["test"]))}
        bounds = np.cumsum([0, *sizes])
        xc = np.concatenate([features(s, cluster_mask[bounds[i]:bounds[i + 1]]) for i, s in enumerate(clustered)])
        if source.widths is not None:
            zc = _observed_standardize(xc, cluster_mask, source.widths, zscore)
        else:
            zc = standardize(xc, xc)[0] if zscore else xc
        labels, _, _ = kmeans(zc, num_classes, seed, n_init=restarts, max_iter=kmeans_max_iter)
        for mid in ("cluster_acc", "nmi", "ari"):
            out[f"{prefix}_{mid}"] = float(M.get(mid)(labels, yc))
        return out

    metrics: dict[str, float] = {}
    absent: dict[str, dict[str, int]] = {}
    n_test, n_clus = x["test"].shape[0], int(sum(sizes))
    # the present-view probe on the complete test split (r = 0; an input-feature row's is the probe's own acc)
    complete = np.ones((n_test, k), dtype=bool)
    pred = present_predict(x["test"], standardize(x["train"], x["test"])[0], complete)
    metrics["present_acc"] = float(M.get("acc")(pred, y["test"]))
    for rule in rules:
        for r in rates:
            tm = missing_mask(rule, n_test, k, r, (seed, PROBE_STREAM))
            cm = missing_mask(rule, n_clus, k, r, (seed, CLUSTER_STREAM))
            metrics.update(score(rate_id(r, rule), tm, cm))
            absent[rate_id(r, rule)] = {"test": int((~tm).sum()), "clustered": int((~cm).sum())}
            if rule == "instance":
                absent[rate_id(r, rule)].update(incomplete_test=int((~tm).any(axis=1).sum()),
                                                incomplete_clustered=int((~cm).any(axis=1).sum()))
    if single_view:
        for j, name in enumerate(source.names):
            metrics.update(score(view_id(name), single_view_mask(n_test, k, j), single_view_mask(n_clus, k, j)))
    return {
        "protocol": "embedding_eval", "rates": [float(r) for r in rates], "rules": list(rules),
        "single_view": bool(single_view), "views": list(source.names), "shown": list(EMBEDDING_SHOWN),
        "metrics": metrics, "absent": absent, "mask": MASK_RULE,
        **({"instance_mask": INSTANCE_MASK_RULE} if "instance" in rules else {}),
        "imputation": IMPUTATION_RULE, "present_views": PRESENT_RULE,
        "probe": {"l2": probe["l2"], "fitted_on": "the complete train split (l2 chosen on the complete val split)",
                  "present_views": present_record},
        "clustering": {"on": clus["on"], "num_samples": n_clus, "n_init": restarts,
                       "standardize": "zscore_present_samples" if zscore else "none"},
    }


# ---------------------------------------------------------------------------------------------
# task heads (linear_probe, finetune)
# ---------------------------------------------------------------------------------------------
def head_missing_views(model: Any, ds: Any, spec: Any, device: torch.device, seed: int, rates: Sequence[float],
                       single_view: bool, shown: Sequence[str]) -> dict[str, Any]:
    """The missing-view metrics of a task-head cell: ``model`` (head selected on the complete validation
    split) scores the test split ``ds`` with each rate's mask and each single view, with the spec's
    metrics. -> the record field ``missing_views``."""
    names = list(model.modalities)
    k, n = len(names), len(ds)
    rules = requested_rules(spec)
    metrics: dict[str, float] = {}
    absent: dict[str, dict[str, int]] = {}
    for rule in rules:
        for r in rates:
            mask = missing_mask(rule, n, k, r, (seed, PROBE_STREAM))
            scored = masked_evaluate(model, ds, spec, device, seed, mask)
            metrics.update({f"{rate_id(r, rule)}_{m}": float(v) for m, v in scored.items()})
            absent[rate_id(r, rule)] = {"test": int((~mask).sum())}
    if single_view:
        for j, name in enumerate(names):
            scored = masked_evaluate(model, ds, spec, device, seed, single_view_mask(n, k, j))
            metrics.update({f"{view_id(name)}_{m}": float(v) for m, v in scored.items()})
    return {
        "protocol": spec.downstream.protocol, "rates": [float(r) for r in rates], "single_view": bool(single_view),
        "views": names, "shown": list(shown), "metrics": metrics, "absent": absent, "mask": MASK_RULE,
        **({"rules": rules, "instance_mask": INSTANCE_MASK_RULE} if rules != ["entry"] else {}),
        "imputation": "encoders see the presence mask (absent input zeroed, present = False): a zero embedding, "
                      "left out of a mean fusion",
    }


def requested(spec: Any) -> tuple[list[float], bool]:
    """(``missing_rates``, ``single_view``) of the spec's protocol options (``([], False)``: nothing asked)."""
    from fusebench.components.protocols import protocol_of

    key = protocol_of(spec).options_key
    given = (spec.options.get(key) if key else None) or {}
    return [float(r) for r in given.get("missing_rates") or []], bool(given.get("single_view", False))


def requested_rules(spec: Any) -> list[str]:
    """How the spec's missing-view rates count (option ``missing_rules`` of the protocol; default ``["entry"]``)."""
    from fusebench.components.protocols import protocol_of

    key = protocol_of(spec).options_key
    given = (spec.options.get(key) if key else None) or {}
    return [str(r) for r in given.get("missing_rules") or ["entry"]]


__all__ = ["CLUSTER_STREAM", "EMBEDDING_SHOWN", "FeatureSource", "IMPUTATION_RULE", "INSTANCE_MASK_RULE",
           "INSTANCE_TAG", "MASK_RULE", "PRESENT_RULE", "PRETRAIN_STREAM", "PROBE_STREAM", "absent_count", "drop_views",
           "embedding_missing_views", "head_missing_views", "incomplete_count", "instance_mask", "masked_evaluate",
           "masked_features", "missing_mask", "presence_mask", "rate_id", "requested", "requested_rules",
           "single_view_mask", "view_id", "with_missing_views"]
