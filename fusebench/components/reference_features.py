"""Reference rows of the ``embedding_eval`` protocol: features computed from the **unstandardised** input views.

``reference_features(kind, views, *, width=None) -> (features, record, cluster_standardize)``

``views`` maps a split name to the list of its views, ``views[split][v]`` an ``[n_split, d_v]`` array
(numpy or torch, any real dtype; float64 inside), the same views in the same order in every split.
Every statistic is fitted on the ``"train"`` split only and then applied unchanged to every split
(train included). ``features[split]`` is ``[n_split, D]`` float64. ``cluster_standardize`` tells
:func:`fusebench.probes.embedding_eval.probe_and_cluster` whether k-means should z-score the
features (``"zscore"``) or cluster them as given (``"none"``, where the scaling is part of the
design). The probes z-score every kind with train statistics regardless.

Kinds (``x_v`` = the rows of view v, ``n`` = n_train):

* ``"raw"``: ``[x_1, ..., x_V]`` concatenated as given; the evaluation z-scores it (the original
  reference row). cluster_standardize ``"zscore"``.
* ``"raw_l2"``: each view's rows scaled to unit Euclidean norm, ``x_v / ||x_v||_2`` (an all-zero row
  stays zero), then concatenated. Fits nothing. ``"none"``.
* ``"raw_tfidf"``: for non-negative count views (e.g. bag-of-words); per view: term frequency
  ``tf_ij = x_ij / sum_j x_ij`` (a row summing to 0 stays 0), document frequency ``df_j`` = number of
  **train** rows with ``x_ij > 0``, smoothed inverse document frequency ``idf_j = ln((1 + n) /
  (1 + df_j)) + 1`` (scikit-learn's ``smooth_idf=True`` convention, natural log), ``tfidf_ij = tf_ij
  * idf_j``, then each row scaled to unit L2 norm (zero rows stay zero); views concatenated. The row
  normalisation cancels the tf denominator, so this equals scikit-learn's ``TfidfTransformer(norm="l2",
  smooth_idf=True, sublinear_tf=False)`` on the raw counts. Non-integer values >= 0 are accepted
  (the same formulas); a negative value raises ValueError. ``"none"``.
* ``"raw_balanced"``: each view z-scored with its train mean / population std (columns constant on
  train become 0), then divided by ``sqrt(d'_v)`` with ``d'_v`` = the number of columns of view v
  that are **not** constant on train (``d_v`` when none is): on train every view then has total
  variance ``sum_j var_j = 1``, so each view weighs the same in Euclidean distances whatever its
  width (counting the constant columns, as ``sqrt(d_v)`` would, would leave a view with many empty
  columns lighter). A view constant on train contributes zeros. ``"none"``.
* ``"raw_pca"``: the concatenation z-scored with train statistics (``Z``, as ``"raw"`` is z-scored
  by the evaluation), projected on its first ``width`` principal components fitted on train:
  ``Z_train = U S V^T`` (thin SVD; Z_train has zero column means), features ``Z V_{:, :width}``.
  Component signs are fixed so that the entry of largest absolute value of each component (the
  first such entry on ties) is positive. ``width`` is required, ``1 <= width <= rank(Z_train)``
  (numerical rank; the record's ``rank``).
  ``"none"`` (the projection keeps the z-scored geometry; z-scoring the scores would whiten it).

For kinds other than ``"raw_pca"`` ``width`` is ignored (a caller may pass it for every kind).

**``raw_pca``'s width is a hyper-parameter** (row version 3). Every probe z-scores each column, so a component
of noise weighs as much as the first one: the width that fits the data must be chosen. With
``options.embedding_eval.pca_widths`` (one board's are :func:`width_grid` of its cap, the pretrained rows'
embedding width ``k x d``) the sweep chooses it as it chooses an objective's hyper-parameters
(:mod:`fusebench.sweep.selection`): each width is a grid point, scored by the mean validation selection metric over
the selection seeds (each seed its own train / val split of the non-test samples), frozen in
``_selection/raw_pca.json`` before any evaluation cell, and every evaluation run uses that width. (Version 2 chose
it in each run on that run's validation split, an adaptivity the objectives' frozen hyper-parameters did not have;
version 1 fixed it at the cap.) ``pca_widths: auto`` (``multiview``, whose views are known from its file alone) is
written out as :func:`width_grid` of the cap at most the lowest rank of the spec's train splits when a sweep
opens the data
(:func:`fusebench.sweep.runner.resolve_width_grid`). Without ``pca_widths`` the width is the cap, at most
``n_train - 1`` and ``D``. A
width beyond the train matrix's numerical rank (``numpy.linalg.matrix_rank``'s tolerance) is refused: those
components are rounding noise. A selection metric the validation split does not give (the k-means metrics, scored
on test only) is refused (``Row.problem``). The first ``w`` columns of the features at width ``W >= w`` are, bit
for bit, the features at width ``w`` (every component is projected on and the product cut to ``width``; the
components are the same rows of ``V^T`` with the same signs).

Errors (ValueError, naming the argument): unknown kind (the valid ones listed), no ``"train"``
split, views that are not 2-D, mismatched view counts / widths across splits or row counts across
the views of a split, NaN / Inf, negative values for ``"raw_tfidf"``, ``width`` missing, not an
integer, out of range or beyond the numerical rank for ``"raw_pca"``.

**When two reference rows are the same features** (:func:`probe_identical_groups`, read by the boards, which
show such rows as one, ``raw (≡ raw_balanced)``, the way objectives computing the same loss are merged). Every
probe of the protocol (the linear, few-shot logistic, prototype and kNN probes of
:mod:`fusebench.probes.embedding_eval`) first z-scores each column with the train split's mean and
population std. The rule: two kinds whose features differ only by a **per-column affine map with a positive
scale fitted on train and applied unchanged to every split**, ``f_b[:, j] = a_j f_a[:, j] + c_j`` (a_j > 0),
are identical for every such probe: z-scoring column j of ``f_b`` with train statistics gives exactly the
z-score of column j of ``f_a`` (a column constant on train is 0 in both), up to float rounding. Each kind
declares, in :data:`PROBE_BASE`, the kind its features are such a map of (itself when none): ``"raw_balanced"``
is ``(x - mean_train) / std_train / sqrt(d'_v)`` per column of ``"raw"``, so ``PROBE_BASE["raw_balanced"] ==
"raw"``; ``"raw_l2"`` and ``"raw_tfidf"`` scale rows (not columns) and ``"raw_pca"`` mixes columns, so each is
its own base. Kinds with the same base are probe-identical. **k-means** (metrics :data:`CLUSTER_METRICS`)
does not always z-score: it clusters the features as given when ``cluster_standardize`` is ``"none"``, so two
probe-identical kinds are identical for clustering only when both z-score (:func:`cluster_identical`); where
they are not (``"raw"`` z-scores, ``"raw_balanced"`` does not), a board keeps both clustering numbers.
``tests/test_reference_merge.py`` checks on real data that the kinds declared identical give the same
z-scored features and that every pair kept apart gives different ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fusebench.metrics.arrays import to_numpy

@dataclass(frozen=True)
class ReferenceKind:
    """One input-feature kind (the reference row of that id, fusebench.components.rows): its formula as the record
    states it, how k-means standardises its features, the kind whose features it is a per-column positive affine
    map of (:data:`PROBE_BASE`), and ``compute(views, width) -> (features, extra record fields)``, ``views`` a
    dict split -> list of checked ``[n, d_v]`` float64 arrays (statistics fitted on ``"train"``)."""

    id: str
    formula: str
    cluster_standardize: str
    probe_base: str
    compute: Callable[[dict[str, list[np.ndarray]], int | None], tuple[dict[str, np.ndarray], dict[str, Any]]]
    needs_width: bool = False


def _raw(vs: dict[str, list[np.ndarray]], width: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    return {s: np.concatenate(v, axis=1) for s, v in vs.items()}, {}


def _raw_l2(vs: dict[str, list[np.ndarray]], width: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    return {s: np.concatenate([unit_rows(a) for a in v], axis=1) for s, v in vs.items()}, {}


def _raw_tfidf(vs: dict[str, list[np.ndarray]], width: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    per_view = [_tfidf({s: v[i] for s, v in vs.items()}, i)[0] for i in range(len(vs["train"]))]
    return {s: np.concatenate([pv[s] for pv in per_view], axis=1) for s in vs}, {}


def _raw_balanced(vs: dict[str, list[np.ndarray]], width: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    parts: dict[str, list[np.ndarray]] = {s: [] for s in vs}
    scales = []
    for v, train in enumerate(vs["train"]):
        mean, scale, constant = zscore_stats(train)
        kept = int((~constant).sum())
        root = math.sqrt(kept if kept else train.shape[1])
        scales.append(root)
        for s in vs:
            parts[s].append((vs[s][v] - mean) / scale / root)
    return {s: np.concatenate(parts[s], axis=1) for s in vs}, {"view_scale": scales}


def _raw_pca(vs: dict[str, list[np.ndarray]], width: int | None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if width is None:  # reference_features checks it first; a direct call is told the same
        raise ValueError("reference_features: kind 'raw_pca' needs width (the number of principal components)")
    concat = {s: np.concatenate(v, axis=1) for s, v in vs.items()}
    fit = _PCAFit.of(concat["train"])
    fit.check(width)
    ratio = (fit.sing[:width] ** 2) / fit.total if fit.total > 0 else np.zeros(width)
    return ({s: fit.project(concat[s], width) for s in vs},
            {"width": width, "rank": fit.rank, "explained_variance_ratio": [float(r) for r in ratio]})


@dataclass(frozen=True)
class _PCAFit:
    """``raw_pca``'s fit on the train matrix: its z-scoring statistics, every principal component (signed) and the
    numerical rank."""

    mean: np.ndarray
    scale: np.ndarray
    comps: np.ndarray  # [r, D], every component, signed
    sing: np.ndarray
    rank: int
    total: float
    shape: tuple[int, int]

    @classmethod
    def of(cls, train: np.ndarray) -> "_PCAFit":
        mean, scale, _ = zscore_stats(train)
        z = (train - mean) / scale
        _, sing, vt = np.linalg.svd(z, full_matrices=False)                      # vt [r, D]
        # the numerical rank (numpy.linalg.matrix_rank's tolerance): a component past it is rounding noise, whose
        # projection no two machines compute alike; a width beyond it is refused, not filled with noise
        tol = (float(sing[0]) * max(z.shape) * np.finfo(np.float64).eps) if sing.size else 0.0
        lead = np.argmax(np.abs(vt), axis=1)
        comps = vt * np.sign(vt[np.arange(vt.shape[0]), lead])[:, None]
        return cls(mean, scale, comps, sing, int((sing > tol).sum()), float((sing ** 2).sum()), z.shape)

    def check(self, width: int) -> None:
        if width > self.rank:
            raise ValueError(f"raw_pca: width {width} is more than the {self.rank} principal component(s) the "
                             f"z-scored train matrix ({self.shape[0]} x {self.shape[1]}) has (its numerical rank); "
                             f"choose widths up to {self.rank}")

    def project(self, x: np.ndarray, width: int) -> np.ndarray:
        # projected on every component, then cut: the product's shape does not depend on width, so the features
        # at width w are bit for bit the first w columns of those at any wider width (the width selection's slices)
        return np.ascontiguousarray((((x - self.mean) / self.scale) @ self.comps.T)[:, :width])


def pca_rank(train: Sequence[Any]) -> int:
    """The numerical rank of the z-scored train views side by side: the most components ``raw_pca`` may keep
    (the fit's own SVD, so the rank is the one the row's width check computes, bit for bit)."""
    return _PCAFit.of(np.concatenate(_check_views({"train": train})["train"], axis=1)).rank


def fitted(kind: str, train: Sequence[Any], *, width: int | None = None) -> Callable[[Sequence[Any]], np.ndarray]:
    """Reference row ``kind`` fitted once on the train views ``train``, as a function of other views of the same
    widths: ``fitted(kind, train, width=w)(views)`` is ``reference_features(kind, {"train": train, "x": views},
    width=w)[0]["x"]`` bit for bit (the same operations on the same arrays), without fitting again at each call:
    ``raw_pca``'s SVD once for every missing-view mask (:mod:`fusebench.probes.missing_views`). Checked as
    :func:`reference_features` checks (the width against the rank here, once)."""
    if kind != "raw_pca":
        reference_features(kind, {"train": train}, width=width)  # every check, once
        return lambda views: reference_features(kind, {"train": train, "x": views}, width=width)[0]["x"]
    trained = _check_views({"train": train})["train"]
    _check_width(kind, {"train": trained}, width)
    fit = _PCAFit.of(np.concatenate(trained, axis=1))
    fit.check(int(width))  # type: ignore[arg-type]

    def apply(views: Sequence[Any]) -> np.ndarray:
        x = _check_views({"train": trained, "x": views})["x"]
        return fit.project(np.concatenate(x, axis=1), int(width))  # type: ignore[arg-type]

    return apply


#: the input-feature kinds computed here, in the order the boards list them
KINDS: dict[str, ReferenceKind] = {k.id: k for k in (
    ReferenceKind("raw", "concat(x_v); z-scored (train statistics) by the evaluation", "zscore", "raw", _raw),
    ReferenceKind("raw_l2", "concat(x_v / ||x_v||_2), zero rows stay zero", "none", "raw_l2", _raw_l2),
    ReferenceKind("raw_tfidf", "per view: tf = x / row sum, idf = ln((1 + n_train) / (1 + df_train)) + 1 (smooth "
                  "idf), row-L2(tf * idf); concatenated", "none", "raw_tfidf", _raw_tfidf),
    # a per-column positive affine map of raw's z-scored columns: identical to raw for every probe
    ReferenceKind("raw_balanced", "per view: zscore_train(x_v) / sqrt(d'_v), d'_v = columns not constant on train; "
                  "concatenated", "none", "raw", _raw_balanced),
    ReferenceKind("raw_pca", "zscore_train(concat(x_v)) @ V[:, :width], V the right singular vectors of the z-scored "
                  "train matrix; sign: largest-|.| loading positive", "none", "raw_pca", _raw_pca, needs_width=True),
)}


def width_grid(cap: int) -> list[int]:
    """The widths the committed base boards let ``raw_pca``'s selection choose among (their
    ``options.embedding_eval.pca_widths``; a 4x variant has its base's chosen width alone): the powers of two ``2, 4, 8, ...`` below ``cap`` and ``cap`` itself (the
    pretrained rows' embedding width), ascending; ``[cap]`` when ``cap <= 2``. ``cap`` must be a positive integer."""
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"width_grid: cap must be a positive integer, got {cap!r}")
    out, w = [], 2
    while w < cap:
        out.append(w)
        w *= 2
    return [*out, int(cap)]


#: the input-feature kinds computed here (each the reference row of that id, fusebench.components.rows), in the
#: order the boards list them
REFERENCE_KINDS = tuple(KINDS)
#: per kind, the kind whose features it is a per-column positive affine map of (fitted on train), itself when
#: none: kinds with the same base give identical features to every probe (the module doc's rule)
PROBE_BASE = {k.id: k.probe_base for k in KINDS.values()}
#: the protocol's k-means metrics: computed on the features as the kind's cluster_standardize leaves them
CLUSTER_METRICS = ("cluster_acc", "nmi", "ari")


def probe_identical_groups(kinds: Sequence[str]) -> list[list[str]]:
    """The kinds of ``kinds`` (reference kinds; other ids are left out) that give identical features to every
    probe (same :data:`PROBE_BASE`), in groups of two or more: the base kind first when present, then the
    others in the order given. ``[]`` when no two are identical."""
    by_base: dict[str, list[str]] = {}
    for k in kinds:
        if k in PROBE_BASE and k not in by_base.get(PROBE_BASE[k], []):
            by_base.setdefault(PROBE_BASE[k], []).append(k)
    out = []
    for base, group in by_base.items():
        if len(group) > 1:
            out.append(sorted(group, key=lambda k: k != base))  # stable: the base first, then the given order
    return out


def cluster_identical(a: str, b: str) -> bool:
    """Whether reference kinds ``a`` and ``b`` give identical clustering numbers: probe-identical and both
    z-scored before k-means (a per-column affine map is then cancelled there too), or the same kind."""
    if a == b:
        return True
    return (PROBE_BASE.get(a) is not None and PROBE_BASE.get(a) == PROBE_BASE.get(b)
            and KINDS[a].cluster_standardize == KINDS[b].cluster_standardize == "zscore")


def _check_views(views: Mapping[str, Sequence[Any]]) -> dict[str, list[np.ndarray]]:
    if not isinstance(views, Mapping) or "train" not in views:
        got = sorted(views) if isinstance(views, Mapping) else type(views).__name__
        raise ValueError(f"reference_features: views must be a dict split -> list of [n, d_v] arrays with a "
                         f"'train' split (the statistics are fitted on it), got {got}")
    out: dict[str, list[np.ndarray]] = {}
    for split, vs in views.items():
        if isinstance(vs, np.ndarray) or not isinstance(vs, Sequence) or len(vs) == 0:
            raise ValueError(f"reference_features: views[{split!r}] must be a non-empty list of [n, d_v] arrays")
        arrs = []
        for v, a in enumerate(vs):
            a = to_numpy(a, np.float64)
            if a.ndim != 2 or a.shape[1] == 0:
                raise ValueError(f"reference_features: views[{split!r}][{v}] must be a 2-D [n, d_v] array with "
                                 f"d_v >= 1, got shape {a.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"reference_features: views[{split!r}][{v}] contains NaN or Inf")
            arrs.append(a)
        rows = {a.shape[0] for a in arrs}
        if len(rows) != 1:
            raise ValueError(f"reference_features: the views of split {split!r} have different row counts "
                             f"{[a.shape[0] for a in arrs]}; every view must hold the same samples")
        out[split] = arrs
    widths = [a.shape[1] for a in out["train"]]
    for split, arrs in out.items():
        if [a.shape[1] for a in arrs] != widths:
            raise ValueError(f"reference_features: views[{split!r}] have widths {[a.shape[1] for a in arrs]}, "
                             f"but the train views have {widths}; every split needs the same views")
    if out["train"][0].shape[0] == 0:
        raise ValueError("reference_features: the train split is empty; the statistics are fitted on it")
    return out


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Each row of ``x`` scaled to unit Euclidean norm; an all-zero row stays zero."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def zscore_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, scale, constant mask) of the columns of ``x``: ``(x - mean) / scale`` is the z-score,
    0 for columns constant on ``x`` (scale = inf there)."""
    constant = x.max(axis=0) == x.min(axis=0)
    std = x.std(axis=0)
    scale = np.where(constant | (std == 0), np.inf, std)
    return np.where(constant, 0.0, x.mean(axis=0)), scale, constant | (std == 0)


def _tfidf(vs: dict[str, np.ndarray], view: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    for split, x in vs.items():
        if (x < 0).any():
            i, j = np.argwhere(x < 0)[0]
            raise ValueError(f"reference_features: kind 'raw_tfidf' needs non-negative counts, but "
                             f"views[{split!r}][{view}][{i}, {j}] = {x[i, j]}")
    train = vs["train"]
    n = train.shape[0]
    df = np.count_nonzero(train > 0, axis=0)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    out = {}
    for split, x in vs.items():
        total = x.sum(axis=1, keepdims=True)
        tf = np.divide(x, total, out=np.zeros_like(x), where=total > 0)
        out[split] = unit_rows(tf * idf)
    return out, idf


def _check_width(kind: str, vs: dict[str, list[np.ndarray]], width: Any) -> None:
    """A kind that needs a width (``raw_pca``) is given an integer in 1..min(n_train, total view width)."""
    if not KINDS[kind].needs_width:
        return
    widths = [a.shape[1] for a in vs["train"]]
    n = vs["train"][0].shape[0]
    limit = min(n, sum(widths))
    if width is None or isinstance(width, bool) or not isinstance(width, (int, np.integer)):
        raise ValueError(f"reference_features: kind {kind!r} needs width = the number of principal "
                         f"components, an integer in 1..{limit} (min(n_train, total view width)), got {width!r}")
    if not 1 <= int(width) <= limit:
        raise ValueError(f"reference_features: width = {width} is out of range for kind {kind!r}: it must be "
                         f"in 1..{limit} = min(n_train = {n}, total view width = {sum(widths)})")


def reference_features(kind: str, views: Mapping[str, Sequence[Any]], *, width: int | None = None
                       ) -> tuple[dict[str, np.ndarray], dict[str, Any], str]:
    """Features of reference row ``kind`` for every split of ``views`` (fitted on ``"train"``); see the
    module doc for the formulas. -> ``(features {split: [n, D]}, record, cluster_standardize)``;
    ``record = {"kind", "formula", "fitted_on", "view_widths", "width", "cluster_standardize", ...}``
    (``"raw_pca"`` adds ``"rank"`` and ``"explained_variance_ratio"``, ``"raw_balanced"`` ``"view_scale"``)."""
    if kind not in KINDS:
        raise ValueError(f"reference_features: unknown kind {kind!r}; valid kinds: {list(REFERENCE_KINDS)}")
    spec = KINDS[kind]
    vs = _check_views(views)
    widths = [a.shape[1] for a in vs["train"]]
    _check_width(kind, vs, width)
    feats, extra = spec.compute(vs, int(width) if spec.needs_width else None)  # type: ignore[arg-type]
    record: dict[str, Any] = {"kind": kind, "formula": spec.formula, "fitted_on": "train", "view_widths": widths,
                              "width": None, "cluster_standardize": spec.cluster_standardize, **extra}
    return feats, record, spec.cluster_standardize


__all__ = ["CLUSTER_METRICS", "KINDS", "PROBE_BASE", "REFERENCE_KINDS", "ReferenceKind", "cluster_identical",
           "fitted", "pca_rank", "probe_identical_groups", "reference_features", "width_grid"]
