"""Downstream protocols (components layer): how a cell scores its (pretrained, random or reference)
representation, each declared once, as a registry entry (``downstream.protocol`` of a spec):

* ``linear_probe``: the encoder frozen, the dataset's task head trained on it; the best epoch on the
  validation split kept, the test split scored once. Reference rows: ``none`` and ``raw`` (the probe on
  the input vectors, through the ``identity`` encoder; vector modalities only).
* ``finetune``: encoder and head trained together, selection as above. Reference row: ``none``.
* ``embedding_eval``: frozen embeddings (or a reference row's features) of every split -> linear probe
  (L2 weight chosen on val), few-shot and kNN probes, k-means (``fusebench.training.embedding_eval``).
  Reference rows: ``none`` and every input-feature row of :mod:`fusebench.training.reference_features`;
  options: ``options.embedding_eval`` with the keys of :data:`EMBEDDING_EVAL_OPTIONS`.

A protocol declares what the rest of the suite asks of it: its reference rows (which pseudo-objectives
a benchmark of it may list), whether it trains the encoder, whether it scores frozen features with its
own probes instead of a task head, and the spec options it reads (checked when a spec is loaded).
Plugins come through the entry-point group ``fusebench.protocols``; a plugin protocol that scores
frozen features also needs a cell that runs it (a pipeline, :mod:`fusebench.pipelines`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from fusebench.registry import Registry
from fusebench.training.reference_features import BASELINE, RAW, REFERENCE_KINDS

#: the probe / clustering options of ``options.embedding_eval`` (passed on to probe_and_cluster as given)
EMBEDDING_EVAL_OPTIONS = ("l2_grid", "cluster_on", "n_init", "fewshot_shots", "fewshot_draws", "fewshot_l2_grid",
                          "knn_grid")


def _describe(cls: Any) -> dict[str, Any]:
    return {key: getattr(cls, key, None) for key in ("reference_rows", "trains_encoder", "frozen_features",
                                                     "options_key", "options")}


PROTOCOLS = Registry("downstream protocol", entry_point_group="fusebench.protocols", describe=_describe)


class Protocol:
    """A downstream protocol's declaration (see the module docstring)."""

    #: the pseudo-objectives (reference rows) a benchmark of this protocol may list
    reference_rows: ClassVar[tuple[str, ...]] = (BASELINE,)
    #: the encoder is trained downstream (fine-tuning) rather than frozen
    trains_encoder: ClassVar[bool] = False
    #: frozen features scored by the protocol's own probes (no task head trained by the phase loop)
    frozen_features: ClassVar[bool] = False
    #: the key of ``spec.options`` holding the protocol's options, and the names it accepts there
    options_key: ClassVar[str | None] = None
    options: ClassVar[tuple[str, ...]] = ()


@PROTOCOLS.register("linear_probe")
class LinearProbe(Protocol):
    reference_rows = (BASELINE, RAW)


@PROTOCOLS.register("finetune")
class Finetune(Protocol):
    trains_encoder = True


@PROTOCOLS.register("embedding_eval")
class EmbeddingEval(Protocol):
    reference_rows = (BASELINE, *REFERENCE_KINDS)
    frozen_features = True
    options_key = "embedding_eval"
    options = EMBEDDING_EVAL_OPTIONS


def protocol_of(spec: Any) -> type[Protocol]:
    """The declaration of ``spec.downstream.protocol`` (an unknown id lists the valid ones)."""
    return PROTOCOLS.get(spec.downstream.protocol)


__all__ = ["EMBEDDING_EVAL_OPTIONS", "PROTOCOLS", "EmbeddingEval", "Finetune", "LinearProbe", "Protocol",
           "protocol_of"]
