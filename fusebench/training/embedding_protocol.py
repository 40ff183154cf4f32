"""The ``embedding_eval`` protocol (pipelines layer): frozen embeddings -- or a reference row's features
computed from the input views -- of every split, then a linear probe (L2 weight chosen on the
validation split), few-shot and kNN probes and k-means (:func:`fusebench.training.embedding_eval.probe_and_cluster`).

Its declaration (options ``options.embedding_eval``, reference rows) is the ``embedding_eval`` entry of
:mod:`fusebench.training.protocols`; its reference rows
are ``none`` and the input-feature rows of :mod:`fusebench.training.reference_features`."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from fusebench.training.evaluate import embeddings, features
from fusebench.training.data import input_views
from fusebench.training.loop import Clock, RunError
from fusebench.training.protocols import EmbeddingEval
from fusebench.training.record_builder import build_record
from fusebench.training.reference_features import REFERENCE_KINDS
from fusebench.training.request import CellRequest, RunOptions

#: the selection rule this protocol records
SELECTION_RULE = ("linear probe: L2 weight chosen on the validation split (highest val accuracy); "
                  "kNN: k chosen on the validation split; k-means needs no selection; test scored once")


def embedding_eval_record(request: CellRequest, options: RunOptions, flags: Mapping[str, Any], data: dict[str, Any],
                          model: Any, pre_curves: Mapping[str, Any], pretrain_time: float, wall: Clock,
                          context: Mapping[str, Any] | None, timing: Mapping[str, Any] | None,
                          dev: torch.device, from_inputs: bool) -> dict[str, Any]:
    """Score the cell's (pretrained or random) encoder, or its reference row, and return its record.
    ``from_inputs``: an input-feature row other than ``raw``, whose ``data`` was built unstandardised."""
    from fusebench.training.diagnostics import representation_diagnostics
    from fusebench.training.embedding_eval import probe_and_cluster

    spec, objective, seed = request.spec, request.objective, request.seed
    roles = ("train", "val", "test")
    enc = None if objective in REFERENCE_KINDS else model
    if from_inputs:
        views, labels = {}, {}
        for r in roles:
            views[r], labels[r] = input_views(data[r], spec, seed)
        ytr, yva, yte = (labels[r] for r in roles)
    else:
        (xtr, ytr), (xva, yva), (xte, yte) = (features(enc, data[r], spec, dev, seed) for r in roles)
    opts = dict(spec.options.get(EmbeddingEval.options_key) or {})
    kwargs = {k: opts[k] for k in EmbeddingEval.options if k in opts}
    # the probes the spec's metrics ask for, unless the options name them
    kwargs.setdefault("fewshot_shots", [s for s in (1, 5, 10) if f"fs{s}_acc" in spec.metrics])
    if "knn_acc" not in spec.metrics:
        kwargs.setdefault("knn_grid", ())
    reference = None
    if from_inputs:
        from fusebench.training.reference_features import reference_features

        # the pretrained rows' embedding width, at most the rank PCA can give (tiny synthetic runs)
        width = min(len(views["train"]) * int(model.num_features), len(ytr) - 1, sum(v.shape[1] for v in views["train"]))
        feats, reference, cluster_standardize = reference_features(objective, views, width=width)
        xtr, xva, xte = (feats[r] for r in roles)
        kwargs["cluster_standardize"] = cluster_standardize
    res = probe_and_cluster(xtr, ytr, xva, yva, xte, yte, data["train"].num_classes, seed, **kwargs)
    names = {"mf1": "macro_f1"}
    val = {m: res[f"val_{names.get(m, m)}"] for m in spec.metrics if f"val_{names.get(m, m)}" in res}
    test = {m: res.get(f"test_{names.get(m, m)}", res.get(m)) for m in spec.metrics}
    missing = [m for m, v in test.items() if v is None]
    if missing:
        raise RunError(f"{spec.name}: the embedding_eval protocol does not compute metric(s) {missing}")
    diag = {} if enc is None else representation_diagnostics(embeddings(model, data["val"], spec, dev, seed))
    fields: dict[str, Any] = {"clustering": res["clustering"]}
    if reference is not None:
        fields["reference_features"] = reference
    return build_record(request, options.synthetic, dev, flags, data, curves=pre_curves, val=val, test=test,
                        best_epoch=-1, wall_time=wall.total(), pretrain_time=pretrain_time, timing=timing,
                        model=enc, diagnostics=diag, context=context,
                        selection={"rule": SELECTION_RULE, **{k: res[k] for k in ("probe", "fewshot", "knn") if k in res}},
                        fields=fields)


__all__ = ["SELECTION_RULE", "embedding_eval_record"]
