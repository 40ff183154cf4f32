"""The rows of a board (``fusebench list rows``): the reference rows, declared once here, and one pretrained row
per objective.

A benchmark spec's ``objectives:`` lists objective ids (each a **pretrained row**: the benchmark's encoders
pretrained with that objective, then evaluated by its downstream protocol) and **reference rows**, which
pretrain nothing:

* ``none``: the benchmark's encoders at random initialisation, through the same downstream protocol (frozen
  for the probes, trained for fine-tuning): what pretraining adds is measured against it;
* ``raw`` and the other input-feature rows of the ``embedding_eval`` protocol: features computed from the
  input views themselves (:mod:`fusebench.components.reference_features` computes them; the formulas below).

Which reference rows a benchmark may list is its downstream protocol's declaration
(:mod:`fusebench.components.protocols`, ``reference_rows``). This module imports nothing: the ids are read by the
spec check, the runner, the record builder and the boards alike.
"""

from __future__ import annotations

import fnmatch

#: the random-init row, offered by every protocol
BASELINE = "none"
#: the input views concatenated (z-scored by the probes); also a linear-probe row through the identity encoder
RAW = "raw"
#: the input-feature rows of the embedding_eval protocol, in the order the boards list them
REFERENCE_KINDS = ("raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca")
#: every reference row; every other id on a board is a pretrained row
REFERENCES = (BASELINE, *REFERENCE_KINDS)

#: one line per reference row: what its features are (``x_v`` = the rows of view v; statistics fitted on train)
DESCRIPTIONS = {
    "none": "the benchmark's encoders at random initialisation, nothing pretrained, through the same downstream "
            "protocol (every protocol)",
    "raw": "concat(x_v), the input views side by side, z-scored with train statistics by the probes "
           "(embedding_eval; linear_probe through the identity encoder)",
    "raw_l2": "concat(x_v / ||x_v||_2): each view's rows at unit L2 norm, zero rows stay zero (embedding_eval)",
    "raw_tfidf": "per view: tf = x / row sum, idf = ln((1 + n_train) / (1 + df_train)) + 1 (smooth idf), "
                 "row-L2(tf * idf); concatenated; count views only (embedding_eval)",
    "raw_balanced": "per view: zscore_train(x_v) / sqrt(d'_v), d'_v = its columns not constant on train: every view "
                    "the same total variance; concatenated (embedding_eval)",
    "raw_pca": "zscore_train(concat(x_v)) projected on its first principal components fitted on train, as many as "
               "the pretrained rows' embedding width (embedding_eval)",
}


def available(pattern: str | None = None) -> list[str]:
    """The reference rows (a glob over ids when ``pattern`` is given), in board order."""
    return [r for r in REFERENCES if pattern is None or fnmatch.fnmatch(r, pattern.lower())]


def describe(row: str) -> list[str]:
    """``fusebench list rows``'s lines for a reference row."""
    return [f"{row}: reference row: {DESCRIPTIONS[row]}"]


#: the closing line of ``fusebench list rows``
PRETRAINED_LINE = ("every objective id (fusebench list objectives) is a pretrained row: the benchmark's encoders "
                   "pretrained with that objective, then evaluated by its downstream protocol")


__all__ = ["BASELINE", "DESCRIPTIONS", "PRETRAINED_LINE", "RAW", "REFERENCES", "REFERENCE_KINDS", "available",
           "describe"]
