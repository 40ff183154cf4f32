"""The few-shot probes on frozen embeddings (probes layer): a logistic probe and a prototype probe fitted on s
labelled train samples per class, **on the same draws**, and the per-run choice between them on validation.

**Draws** (:func:`fewshot_indices`): for each s in ``shots`` (labels per class) and each of ``draws`` draws,
s train samples of every class are drawn without replacement. One ``numpy.random.Generator`` per s,
``default_rng(SeedSequence([seed, s]))``; draw j = 0, 1, ... takes, class by class in increasing class id,
``rng.choice(pool_c, size=s, replace=False)`` where ``pool_c`` = the train indices of class c in increasing
order (so draw j does not depend on how many draws follow). A class with fewer than s train samples raises
ValueError. Features are z-scored with the statistics of **all** train embeddings
(:func:`fusebench.probes.logistic.standardize`; no labels are used for that, so it leaks nothing the
few-shot learner would not have: the unlabelled train pool).

* the **logistic probe** (:func:`fewshot_probe`): the logistic regression of
  :func:`fusebench.probes.logistic.fit_logistic` (its batched form: every draw solved to its own optimum by damped
  Newton-CG; metric version 2 -- version 1 scored an unconverged L-BFGS fit, see that module's doc), its L2
  weight fixed per s by the validation split: for every searched value
  (:func:`fusebench.probes.logistic.search_l2`: ``fewshot_l2_grid``, default ``l2_grid``, extended beyond its
  edges while that helps) all draws are fitted (batched over the draws); the value with the highest **mean over
  draws** of the val accuracy is kept (ties to the larger value) and the test accuracies of that value are
  reported. Keys ``val_fs<s>_acc``, ``test_fs<s>_acc`` = mean over draws (metric ids ``fs1_acc``, ``fs5_acc``,
  ``fs10_acc``).
* the **prototype probe** (:func:`prototype_predict`; SimpleShot, Wang et al. 2019, "SimpleShot:
  Revisiting Nearest-Neighbor Classification for Few-Shot Learning", arXiv:1911.04623, its CL2N
  features, :data:`PROTOTYPE_RULE`): the features are **centred with the mean of all train-split
  embeddings** of the run (the unlabelled train pool the support sets are drawn from: the split's own
  ``train`` role, not val or test; the z-scoring above already subtracts exactly that mean, so the
  centring is the z-score's and the per-column scaling is the protocol's common standardisation), then
  every row is L2-normalised (a zero row stays zero); a class prototype is the mean of its s normalised
  support rows, ``p_c = mean_{i: y_i = c} u_i``; a query u goes to ``argmax_c <u, p_c> / ||p_c||``, the
  prototype of **largest cosine similarity** (a zero prototype has similarity 0; ties to the lower class
  id). Norm-invariant: the scale of a query or of a support row does not matter, unlike the logistic
  probe's. Nothing is tuned. Keys ``val_fs<s>_proto_acc``, ``test_fs<s>_proto_acc`` (mean over draws;
  metric ``fs<s>_proto_acc``).
* **the row's few-shot number** (metric ``fs<s>_best_acc``; keys ``val_fs<s>_best_acc``,
  ``test_fs<s>_best_acc``; :data:`FEWSHOT_CHOICE_RULE`): per run and per s, the probe with the higher mean
  **validation** accuracy over the draws (ties: the logistic probe), recorded as ``fewshot_probe = {"rule",
  "per_shot": {str(s): {"chosen", "metric", "val": {"logistic", "prototype"}}}}``; its val and test
  accuracies are the chosen probe's (:func:`chosen_fewshot_val` reads the validation score back). The
  logistic probe's val score is the maximum over its L2 search, the prototype probe's is not tuned: the
  comparison is, if anything, tilted towards the logistic probe.

:func:`fewshot_probe` returns the record ``fewshot`` with per-draw values of both probes;
:func:`fusebench.probes.embedding_eval.probe_and_cluster` writes the keys above from it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from fusebench.components.reference_features import unit_rows
from fusebench.probes.logistic import (DEFAULT_L2_GRID, L2_CEILING, L2_FLOOR, accuracy_along, fit_logistic,
                                       predict_classes, search_l2)
from fusebench.runtime.utils import single_thread

#: labels per class of the few-shot probes (metric ids ``fs1_acc``, ``fs5_acc``, ``fs10_acc``)
DEFAULT_SHOTS = (1, 5, 10)
#: seeded draws per shot count
DEFAULT_DRAWS = 20
FEWSHOT_CHOICE_RULE = ("per shot count s: the probe (logistic | prototype) with the higher mean val accuracy over "
                       "the draws, ties to logistic; fs<s>_best_acc is the chosen probe's val / test accuracy")
PROTOTYPE_RULE = ("SimpleShot CL2N: features centred with the mean of all train-split embeddings (the z-score's mean) "
                  "and z-scored, rows L2-normalised; prototype = mean of a class's normalised support rows; "
                  "prediction = largest cosine similarity to the prototypes, ties to the lower class id")


def fewshot_indices(y: np.ndarray, s: int, draws: int, seed: int, num_classes: int) -> np.ndarray:
    """The few-shot training sets: ``[draws, num_classes * s]`` train indices, class-major (the s
    indices of class 0, then class 1, ...). Generator ``default_rng(SeedSequence([seed, s]))``; draw
    j takes, for c = 0..C-1, ``rng.choice(flatnonzero(y == c), size=s, replace=False)``. ValueError when
    a class has fewer than s samples."""
    pools = [np.flatnonzero(y == c) for c in range(num_classes)]
    short = [(c, p.size) for c, p in enumerate(pools) if p.size < s]
    if short:
        c, have = short[0]
        raise ValueError(f"probe_and_cluster: fewshot_shots asks for s = {s} train samples per class, but class "
                         f"{c} has only {have} (classes short of samples: {[c for c, _ in short]}); drop {s} from "
                         f"options.embedding_eval.fewshot_shots (and fs{s}_* from metrics) for this dataset")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(s)]))
    out = np.empty((draws, num_classes * s), dtype=np.int64)
    for j in range(draws):
        out[j] = np.concatenate([rng.choice(p, size=s, replace=False) for p in pools])
    return out


def prototype_predict(support: np.ndarray, support_y: np.ndarray, query: np.ndarray, num_classes: int
                      ) -> np.ndarray:
    """Nearest-prototype predictions by cosine similarity (the module doc's prototype probe) on features
    that are already centred: ``support [B, n, d]`` with labels ``support_y [B, n]`` (B independent support
    sets), ``query [m, d]`` -> ``[B, m]`` class ids. Rows are L2-normalised (zero rows stay zero), a
    prototype is the mean of its class's normalised support rows (a class absent from a support set gets a
    zero prototype), a query goes to the prototype with the largest ``<u, p_c> / ||p_c||`` (zero
    prototype: 0), ties to the lower class id."""
    with single_thread():
        u = torch.from_numpy(unit_rows(np.asarray(support, dtype=np.float64).reshape(-1, support.shape[-1])))
        u = u.reshape(support.shape)                                                   # [B, n, d]
        onehot = torch.nn.functional.one_hot(torch.from_numpy(np.asarray(support_y, dtype=np.int64)),
                                             num_classes).to(torch.float64)           # [B, n, C]
        counts = onehot.sum(dim=1)                                                     # [B, C]
        proto = torch.bmm(onehot.transpose(1, 2), u) / counts.clamp_min(1.0)[:, :, None]  # [B, C, d]
        norm = proto.norm(dim=2, keepdim=True)
        proto = torch.where(norm > 0, proto / torch.where(norm > 0, norm, torch.ones_like(norm)), proto)
        q = torch.from_numpy(unit_rows(np.asarray(query, dtype=np.float64)))           # [m, d]
        return torch.matmul(q, proto.transpose(1, 2)).argmax(dim=2).numpy()            # [B, m]


def fewshot_probe(ztr: np.ndarray, ytr: np.ndarray, zva: np.ndarray, yva: np.ndarray, zte: np.ndarray,
                  yte: np.ndarray, num_classes: int, seed: int, shots: Sequence[int] = DEFAULT_SHOTS,
                  draws: int = DEFAULT_DRAWS, l2_grid: Sequence[float] = DEFAULT_L2_GRID,
                  max_iter: int = 300) -> dict[str, Any]:
    """Few-shot logistic and prototype probes on already z-scored features, on the same draws (see the
    module doc for the protocol).

    -> ``{"shots", "draws", "l2_grid", "sampling", "standardize", "selection", "prototype", "choice",
    "per_shot": {str(s): {"l2", "val_acc_by_l2", "l2_searched", "l2_extended", "l2_edge", "val_acc",
    "test_acc", "test_acc_std", "val_acc_per_draw", "test_acc_per_draw", "prototype": {"val_acc",
    "test_acc", "test_acc_std", "val_acc_per_draw", "test_acc_per_draw"}, "chosen", "best_val_acc",
    "best_test_acc"}}}``; the unprefixed accuracies are the logistic probe's: means over draws of the
    chosen l2, ``test_acc_std`` the population std over draws. The test split is predicted once per probe (the
    logistic probe with the chosen l2); ``zte`` None (a hyper-parameter trial) predicts no test sample, and every
    test value is None.
    """
    per_shot: dict[str, Any] = {}
    for s in shots:
        idx = fewshot_indices(ytr, s, draws, seed, num_classes)                   # [draws, C*s]
        xb, yb = ztr[idx], ytr[idx]                                               # [draws, C*s, d], [draws, C*s]
        val_by, fits = {}, {}

        def score(l2: float) -> float:
            fits[l2] = fit_logistic(xb, yb, num_classes, l2, max_iter)
            val_by[l2] = accuracy_along(predict_classes(zva, *fits[l2]), yva)                 # [draws]
            return float(val_by[l2].mean())

        search = search_l2(l2_grid, score)
        chosen = search["l2"]
        proto_val = accuracy_along(prototype_predict(xb, yb, zva, num_classes), yva)  # [draws]
        logistic_val = float(val_by[chosen].mean())
        probe = "prototype" if float(proto_val.mean()) > logistic_val else "logistic"
        if zte is None:  # a hyper-parameter trial: validation only, no test sample scored
            test_log = proto_test = None
        else:  # the test split, scored once per probe: with the chosen l2 only
            test_log = accuracy_along(predict_classes(zte, *fits[chosen]), yte)
            proto_test = accuracy_along(prototype_predict(xb, yb, zte, num_classes), yte)
        mean = lambda a: None if a is None else float(a.mean())  # noqa: E731
        std = lambda a: None if a is None else float(a.std())  # noqa: E731
        per_draw = lambda a: None if a is None else [float(x) for x in a]  # noqa: E731
        per_shot[str(s)] = {
            "l2": chosen,
            "val_acc_by_l2": {repr(v): search["scores"][v] for v in search["searched"]},
            "l2_searched": search["searched"], "l2_extended": search["extended"], "l2_edge": search["edge"],
            "val_acc": logistic_val,
            "test_acc": mean(test_log),
            "test_acc_std": std(test_log),
            "val_acc_per_draw": [float(a) for a in val_by[chosen]],
            "test_acc_per_draw": per_draw(test_log),
            "prototype": {
                "val_acc": float(proto_val.mean()), "test_acc": mean(proto_test),
                "test_acc_std": std(proto_test),
                "val_acc_per_draw": [float(a) for a in proto_val],
                "test_acc_per_draw": per_draw(proto_test),
            },
            "chosen": probe,
            "best_val_acc": float(proto_val.mean()) if probe == "prototype" else logistic_val,
            "best_test_acc": mean(proto_test) if probe == "prototype" else mean(test_log),
        }
    return {
        "shots": [int(s) for s in shots], "draws": int(draws), "l2_grid": [float(v) for v in l2_grid],
        "sampling": "per shot s: default_rng(SeedSequence([seed, s])); per draw, per class c ascending: "
                    "choice(train indices of c, s, replace=False)",
        "standardize": "zscore_train (mean/std of all train embeddings, no labels used)",
        "selection": "per shot: l2 with the highest mean val accuracy over draws, ties to the larger l2; a grid of "
                     f"two or more values extended by decades beyond the chosen edge while strictly better, within "
                     f"[{L2_FLOOR:g}, {L2_CEILING:g}]",
        "optimizer": "newton_cg_float64 (every draw solved to its own optimum, gradient size <= 1e-12 max(1, its size "
                     "at 0); draws of one shot and l2 batched)",
        "prototype": PROTOTYPE_RULE, "choice": FEWSHOT_CHOICE_RULE,
        "max_iter": int(max_iter), "per_shot": per_shot,
    }


def chosen_fewshot_val(source: Mapping[str, Any], shots: int = 1) -> float:
    """The validation score of the few-shot probe chosen for a run (metric ``fs<shots>_best_acc``): the mean
    val accuracy over the draws of the probe the run chose (module doc). ``source`` is what
    :func:`fusebench.probes.embedding_eval.probe_and_cluster` returned or a run record (``run.json`` as a
    mapping) of the ``embedding_eval`` protocol; a record written before the prototype probe existed had only
    the logistic probe, whose val score is then returned. ValueError when ``source`` has no few-shot probe with
    ``shots`` labels per class."""
    s = int(shots)
    best = f"fs{s}_best_acc"
    if f"val_{best}" in source:                                            # probe_and_cluster's result
        return float(source[f"val_{best}"])
    selection = source.get("selection") if isinstance(source.get("selection"), Mapping) else {}
    val = selection.get("val_metrics") if isinstance(selection.get("val_metrics"), Mapping) else {}
    if isinstance(val.get(best), (int, float)):
        return float(val[best])
    fewshot = source.get("fewshot") or selection.get("fewshot")            # the probe's own record
    per = ((fewshot or {}).get("per_shot") or {}).get(str(s)) if isinstance(fewshot, Mapping) else None
    if isinstance(per, Mapping):
        return float(per.get("best_val_acc", per["val_acc"]))             # older records: logistic only
    raise ValueError(f"chosen_fewshot_val: no few-shot probe with {s} label(s) per class in this "
                     f"{'record' if 'selection' in source else 'result'} (its fewshot_shots do not include {s})")


def shot_count(metric: str) -> int | None:
    """The labels per class of a few-shot metric id (``fs<s>_acc``, ``fs<s>_proto_acc``, ``fs<s>_best_acc``: the
    logistic probe, the prototype probe, the one chosen on validation); None for any other id."""
    import re

    found = re.fullmatch(r"fs(\d+)_(best_acc|acc|proto_acc)", metric)
    return int(found.group(1)) if found else None


__all__ = ["DEFAULT_DRAWS", "DEFAULT_SHOTS", "FEWSHOT_CHOICE_RULE", "PROTOTYPE_RULE", "chosen_fewshot_val",
           "fewshot_indices", "fewshot_probe", "prototype_predict", "shot_count"]
