"""The ``embedding_eval`` protocol (pipelines layer): frozen embeddings -- or a reference row's features
computed from the input views -- of every split, then a linear probe (L2 weight chosen on the
validation split), few-shot and kNN probes and k-means (:func:`fusebench.probes.embedding_eval.probe_and_cluster`).
A record that reports a few-shot metric ``fs<s>_*`` reports all three of that s (:func:`fewshot_ids`: the logistic
probe, the prototype probe and the one chosen on validation, test and val) and the choice (field
``fewshot_probe``); :func:`fusebench.probes.fewshot.chosen_fewshot_val` reads the chosen probe's
validation score back from a record.

Its declaration (options ``options.embedding_eval``, reference rows) is the ``embedding_eval`` entry of
:mod:`fusebench.components.protocols`; its reference rows
are ``none`` and the input-feature rows of :mod:`fusebench.components.reference_features`. With the options
``missing_rates`` / ``single_view`` the same probe and clustering also score the data with views absent
(:mod:`fusebench.probes.missing_views`; record field ``missing_views``)."""

from __future__ import annotations

from typing import Any

import torch

from fusebench.engine.evaluate import embeddings, features
from fusebench.engine.data import input_views
from fusebench.engine.loop import RunError
from fusebench.runtime.progress import phase
from fusebench.components.protocols import EMBEDDING_EVAL_OPTIONS, EmbeddingEval
from fusebench.records.builder import Scores
from fusebench.components.rows import Row, row_of

#: the selection rule this protocol records
SELECTION_RULE = ("linear probe: L2 weight chosen on the validation split (highest val accuracy); "
                  "few-shot: the logistic probe's L2 weight per shot count chosen on the validation split (mean over "
                  "draws; the grid extended beyond a chosen edge while strictly better), the prototype probe untuned, "
                  "and the row's few-shot probe (fs<s>_best_acc) the one with the higher mean val accuracy; "
                  "kNN: k chosen on the validation split; k-means needs no selection; test scored once")


def fewshot_ids(shots: int) -> tuple[str, str, str]:
    """The metric ids of the few-shot probes with ``shots`` labels per class: the logistic probe, the
    prototype probe and the one chosen on validation (``fs<s>_acc``, ``fs<s>_proto_acc``, ``fs<s>_best_acc``).
    A record that reports one of them reports all three (val and test)."""
    return f"fs{shots}_acc", f"fs{shots}_proto_acc", f"fs{shots}_best_acc"


def score(sc: Any, protocol: Any, pretrained_state: Any = None, ckpt: Any = None) -> Scores:
    """The ``embedding_eval`` protocol's scorer (:meth:`fusebench.components.protocols.Protocol.score`; the
    protocol, the pretrained state and the downstream checkpoint are not needed: nothing is trained here): score
    cell ``sc``'s (:class:`fusebench.cells.standard.StandardCell`) pretrained or random encoder, or its
    reference row, by probes and k-means on the frozen embeddings, and return what it measured. An input-feature row other than ``raw`` (``sc.from_inputs``) reads
    the cell's data, built unstandardised. A row with an encoder keeps it in ``best.pt`` (``{"model": state_dict,
    "epoch": -1, "val": ...}``, the form the other protocols write), so it can be reloaded and re-probed
    (``--encoder-weights NAME=<cell>/best.pt``)."""
    from fusebench.components.diagnostics import representation_diagnostics
    from fusebench.probes.embedding_eval import probe_and_cluster

    request, options, data, model, dev, from_inputs = sc.request, sc.options, sc.data, sc.model, sc.dev, sc.from_inputs
    spec, objective, seed = request.spec, request.objective, request.seed
    roles = tuple(data)  # the splits the cell read: a hyper-parameter trial's has no test split (StandardCell)
    row = row_of(spec, objective)  # an input-feature row scores no encoder (fusebench.components.rows)
    enc = model if row.uses_encoder(spec) else None
    if from_inputs:
        views, labels = {}, {}
        for r in roles:
            views[r], labels[r] = input_views(data[r], spec, seed)
        ytr, yva, yte = (labels.get(r) for r in ("train", "val", "test"))
    else:
        got = {r: features(enc, data[r], spec, dev, seed) for r in roles}
        (xtr, ytr), (xva, yva), (xte, yte) = (got.get(r, (None, None)) for r in ("train", "val", "test"))
    opts = dict(spec.options.get(EmbeddingEval.options_key) or {})
    kwargs = {k: opts[k] for k in EMBEDDING_EVAL_OPTIONS if k in opts}  # the missing-view options: below
    # the probes the spec's metrics ask for, unless the options name them
    kwargs.setdefault("fewshot_shots", [s for s in (1, 5, 10) if set(fewshot_ids(s)) & set(spec.metrics)])
    if "knn_acc" not in spec.metrics:
        kwargs.setdefault("knn_grid", ())
    # a hyper-parameter trial is scored by its validation selection metric alone: only the probe that gives it
    trial = trial_parts(spec.validation_metric) if options.selection_trial else None
    kwargs.update(trial or {})
    reference = None
    if from_inputs:
        width = input_width(row, sc.context, spec, views, len(ytr), int(model.num_features))
        try:
            feats, reference, cluster_standardize = row.features(views, width)
        except ValueError as e:  # a width the train matrix cannot give (raw_pca: beyond its numerical rank)
            raise RunError(f"{spec.name}/{row.id}: {e}") from None
        xtr, xva, xte = (feats.get(r) for r in ("train", "val", "test"))
        kwargs["cluster_standardize"] = cluster_standardize
    with phase("probes and clustering"):  # said while it runs when it takes more than a few seconds
        res = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, data["train"].num_classes, seed, **kwargs)
    names = {"mf1": "macro_f1"}
    computed = [m for m in spec.metrics if trial is None or f"test_{names.get(m, m)}" in res or m in res]
    val = {m: res[f"val_{names.get(m, m)}"] for m in computed if f"val_{names.get(m, m)}" in res}
    # a trial's record holds validation values alone (no test sample was seen: its test values are None)
    test = {} if options.selection_trial else {m: res.get(f"test_{names.get(m, m)}", res.get(m)) for m in computed}
    missing = [m for m, v in test.items() if v is None]
    if missing:
        raise RunError(f"{spec.name}: the embedding_eval protocol does not compute metric(s) {missing}")
    # both few-shot probes and the one chosen on validation, in every record that reports a few-shot number
    for s in (res.get("fewshot") or {}).get("shots", []):
        if set(fewshot_ids(s)) & set(spec.metrics):
            for m in fewshot_ids(s):
                val.setdefault(m, res[f"val_{m}"])
                if not options.selection_trial:
                    test.setdefault(m, res[f"test_{m}"])
    diag = {} if enc is None or trial else representation_diagnostics(embeddings(model, data["val"], spec, dev, seed))
    if enc is not None and not options.selection_trial:  # the frozen encoder the probes scored (no epoch: -1)
        from fusebench.runtime import utils

        utils.atomic_torch_save({"model": model.state_dict(), "epoch": -1, "val": val}, request.cell / "best.pt")
    # k-means is seeded with the run's seed, which the record states once ("seed")
    fields: dict[str, Any] = ({"clustering": {k: v for k, v in res["clustering"].items() if k != "seed"}}
                              if "clustering" in res else {})
    if "fewshot_probe" in res:
        fields["fewshot_probe"] = res["fewshot_probe"]
    if reference is not None:
        fields["reference_features"] = reference
    from fusebench.probes.missing_views import embedding_missing_views, requested, requested_rules

    rates, single = requested(spec)
    # the same probe and clustering on the test data with views absent (not in a hyper-parameter trial, which
    # is scored by its validation metric alone)
    if (rates or single) and not options.selection_trial:
        inputs = (views, width) if from_inputs else (None, None)  # an input-feature row's views and PCA width
        source = _feature_source(row, enc, data, spec, dev, seed, *inputs)
        fields["missing_views"] = embedding_missing_views(
            source, {"train": xtr, "val": xva, "test": xte}, {"train": ytr, "val": yva, "test": yte},
            data["train"].num_classes, seed, res, rates, single, n_init=opts.get("missing_n_init"),
            rules=requested_rules(spec))
    return Scores(test, val, -1, model=enc, diagnostics=diag, fields=fields,
                  selection={"rule": SELECTION_RULE, **{k: res[k] for k in ("probe", "fewshot", "knn") if k in res}})


def input_width(row: Row, context: Any, spec: Any, views: dict[str, list[Any]], n_train: int,
                num_features: int) -> int:
    """The width of an input-feature row's features (used by ``raw_pca``; the others ignore it): the grid point of
    its selection (``context["hparams"][row]["width"]``: a selection trial's, or the choice frozen on the selection
    seeds, :mod:`fusebench.sweep.selection`) when the spec gives it widths to select among
    (:meth:`~fusebench.components.rows.Row.selection_grid`), else the pretrained rows' embedding width (the views
    times the encoder's ``num_features``), at most ``n_train - 1`` and the input columns (tiny synthetic runs)."""
    if row.selection_grid(spec):
        width = ((context or {}).get("hparams") or {}).get(row.id, {}).get("width")
        if type(width) is not int:
            raise RunError(f"{spec.name}/{row.id}: its width is selected from "
                           f"{row.selection_grid(spec)['width']}, but the cell was given no chosen width (got "
                           f"{width!r}); run it through a sweep, which freezes the selection before any cell")
        return width
    return min(len(views["train"]) * num_features, n_train - 1, sum(v.shape[1] for v in views["train"]))


def trial_parts(metric: str) -> dict[str, Any] | None:
    """The :func:`~fusebench.probes.embedding_eval.probe_and_cluster` arguments that compute ``metric`` and no
    other probe, for a hyper-parameter trial (scored by its validation value of the selection metric alone; the
    parts share nothing but the z-scoring, so the value is the one the full evaluation gives); None: every part
    (a metric these probes do not name)."""
    from fusebench.probes.fewshot import shot_count

    shot = shot_count(metric)
    if shot is not None:
        return {"fewshot_shots": [shot], "knn_grid": (), "linear_probe": False, "cluster": False}
    if metric == "knn_acc":
        return {"fewshot_shots": [], "linear_probe": False, "cluster": False}
    if metric in ("acc", "mf1"):
        return {"fewshot_shots": [], "knn_grid": (), "cluster": False}
    if metric in ("cluster_acc", "nmi", "ari"):
        return {"fewshot_shots": [], "knn_grid": (), "linear_probe": False}
    return None


def _feature_source(row: Row, enc: Any, data: dict[str, Any], spec: Any, dev: torch.device, seed: int,
                    views: dict[str, list[Any]] | None, width: int | None) -> Any:
    """How the row's features are computed with views absent (:class:`fusebench.probes.missing_views.FeatureSource`):
    the encoder's embeddings of the masked batches; the input views' columns (``raw``, and the per-view
    reference rows of ``views``); a row whose features mix the views (``raw_pca``: ``Row.mixes_views``) computed again from the masked inputs, the absent blocks of the
    z-scored input set to 0 (the train mean of the concatenation)."""
    import numpy as np

    from fusebench.probes.missing_views import FeatureSource, masked_features
    from fusebench.components.reference_features import zscore_stats

    if enc is not None:
        return FeatureSource(list(enc.modalities), [int(enc.num_features)] * len(enc.modalities),
                             lambda split, mask: masked_features(enc, data[split], spec, dev, seed, mask), shared=True)
    names = list(data["train"].modalities)
    if views is None:  # raw: the adapter's standardised input views, concatenated
        return FeatureSource(names, [int(v.shape[1]) for v in input_views(data["test"], spec, seed)[0]])
    widths = [int(v.shape[1]) for v in views["train"]]
    if not row.mixes_views:  # the views' own columns: an absent view's block is blanked
        return FeatureSource(names, widths)
    train = [np.asarray(v, dtype=np.float64) for v in views["train"]]
    mean = zscore_stats(np.concatenate(train, axis=1))[0]  # the statistics raw_pca z-scores with
    bounds = np.cumsum([0, *widths])
    apply = row.fitted(train, width)  # fitted once (raw_pca: one SVD) for every mask

    def masked(split: str, mask: np.ndarray) -> np.ndarray:
        imputed = [np.where(mask[:, j:j + 1], np.asarray(v, dtype=np.float64), mean[bounds[j]:bounds[j + 1]])
                   for j, v in enumerate(views[split])]
        return apply(imputed)

    return FeatureSource(names, None, masked)


__all__ = ["SELECTION_RULE", "fewshot_ids", "score", "trial_parts"]
