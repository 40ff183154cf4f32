"""The two interfaces of ``fusebench.encoders``: a :class:`Backbone` (what an encoder is) and a
:class:`MultimodalModel` (a backbone with a task head: what the downstream phase trains).

A backbone built by ``fusebench.encoders.build(name, **cfg)`` consumes the collated batch of
:mod:`fusebench.datasets.collate` and offers:

* ``modalities: list[str]`` — the modalities it encodes, in view order;
* ``input_kinds`` (class attribute) — the modality kinds it reads (``vector``, ``signal``, ...);
* ``large_model`` (class attribute) — True where intra-op threads pay on the CPU (ESANet, PointNet++,
  VoteNet); a cell of any other encoder computes with one thread (:mod:`fusebench.engine.threads`);
* ``num_features: int`` — width of each per-modality pooled embedding;
* ``embed(batch) -> Tensor[k, n, num_features]`` — one pooled embedding per modality: the views fed
  (through a projection head owned by the trainer) to the pretraining objectives;
* ``features(batch)`` — what a task head reads (``backbone(batch)`` returns it); by default the pooled
  embeddings, richer where a head needs more (ESANet: the normalised inputs and the branches it runs
  stage by stage; PointNet++ / VoteNet: seed points and seed features);
* ``task_head(task) -> nn.Module | None`` — optional: an encoder-specific head for ``task`` (a
  :class:`fusebench.tasks.Task`; ``task.id`` is the task family), e.g. ESANet's decoder for
  segmentation or VoteNet's voting and proposal module for detection. ``None`` (the default) lets the
  task build its own head (a linear layer on the concatenated embeddings for classification and
  regression).

A head is an ``nn.Module`` called as ``head(features, batch)``; the task owns its loss and the form of
its predictions (:mod:`fusebench.tasks`; a head may define ``loss`` / ``predict`` itself, as VoteNet's
does). :class:`fusebench.components.model.TaskModel` puts a backbone and its task head together as a
:class:`MultimodalModel`:

* ``embed(batch)`` — the backbone's pooled embeddings;
* ``forward(batch) -> output`` — the task head's output (segmentation logits ``[n, C, H, W]``,
  detection end points dict, regression ``[n]``, classification logits ``[n, C]``);
* ``task_loss(output, batch) -> Tensor`` — the supervised loss of the downstream task;
* ``predict(output, batch)`` — predictions in the form the task's metrics take (label maps, a list of
  per-scene detection dicts, 1-D regression values, 1-D class ids);
* ``encoder_parameters()`` / ``head_parameters()`` — for linear probing (freeze the former).
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator, Mapping

import torch
from torch import Tensor, nn


class Backbone(nn.Module):
    """Base class of every encoder (see the module docstring)."""

    modalities: list[str]
    num_features: int
    #: the task family of the encoder's own head and of its ``example_batch`` (benches, tests); None: no head
    default_task: ClassVar[str | None] = None
    #: the modality kinds (``fusebench.datasets.base.MODALITY_KINDS``) it reads; a spec pairing it with a dataset
    #: of another kind is refused when the spec is loaded, naming both. None: not declared (not checked)
    input_kinds: ClassVar[tuple[str, ...] | None] = None
    #: heavy enough per sample (convolutions on images, point sets) that a CPU cell computes with its share of the
    #: CPUs; False: one intra-op thread, which small models are fastest with (fusebench/engine/threads.py)
    large_model: ClassVar[bool] = False
    #: bump when the encoder computes differently under an unchanged ``encoder.config`` (its architecture, its
    #: initialisation, its pooling): a record made by another version is not reused for a cell and not compared
    #: with this version's on a board (``versions.encoder`` of a record, written where it is not "1")
    version: ClassVar[str] = "1"
    #: the options of ``encoder.config`` that are widths or counts of layers (``num_features``, ``hidden``, ...):
    #: each, when given, must be an integer >= 1, checked when a spec is loaded (:meth:`config_problems`)
    width_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def config_problems(cls, config: Mapping[str, Any]) -> list[str]:
        """What is wrong with the values of ``config`` (a spec's ``encoder.config``), each a phrase naming the key
        (empty: nothing); the spec loader calls it, so ``num_features: 0`` is refused by ``--plan`` and before any
        cell, not in the middle of one by a layer that cannot be 0 wide (or, on a reference row, by a chance-level
        record). The base checks :attr:`width_options`; an encoder adds its own checks by overriding it."""
        out = []
        for key in cls.width_options:
            v = config.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                out.append(f"encoder.config.{key} = {v!r}: expected an integer >= 1 (of the encoder's widths and "
                           f"layer counts: {', '.join(cls.width_options)})")
        return out

    #: the constructor's default ``num_classes`` is the count of the task's head (VoteNet: its per-class box sizes),
    #: so :meth:`data_problems` checks it against the dataset's where ``encoder.config`` does not set it
    default_num_classes_is_the_heads: ClassVar[bool] = False

    @classmethod
    def data_problems(cls, config: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        """What in ``config`` (a spec's ``encoder.config``, with ``num_classes`` set where the cell sets it from the
        dataset) cannot take what the dataset will deliver, each a phrase naming the keys and the values on both
        sides and what would fit (empty: nothing). ``data`` is the adapter's
        :meth:`~fusebench.datasets.base.MultimodalDataset.delivers` under the spec's ``dataset.options``: name ->
        :class:`~fusebench.datasets.base.Delivered` (``.value``, ``.source``, ``.key``), a name left out not known
        before the data is read. The spec loader calls it, so a mismatch is refused by ``--plan``, not at the first
        step of a cell. The base checks the class count: a task head built for ``num_classes`` (the encoder's
        ``num_classes``; its constructor's default where the config does not set it only for an encoder that declares
        :attr:`default_num_classes_is_the_heads`, VoteNet's) against the dataset's
        ``num_classes`` (the task refuses the two unequal when it builds the head); an encoder adds its own checks
        by overriding it (PointNet++ / VoteNet: the points of a scene against the centres they sample)."""
        from fusebench.options import REQUIRED, options_of

        classes = data.get("num_classes")
        if classes is None:
            return []
        if "num_classes" in config:
            n, where = config["num_classes"], f"encoder.config.num_classes = {config['num_classes']!r}"
        elif cls.default_num_classes_is_the_heads:
            n = next((o.default for o in options_of(cls) or [] if o.name == "num_classes"), REQUIRED)
            where = f"encoder.config.num_classes (not set: the encoder's default {n!r})"
        else:  # a default the task does not compare (e.g. a plugin's own classifier): nothing to check
            return []
        if isinstance(n, bool) or not isinstance(n, int) or n == classes.value:
            return []
        return [f"{where}, but {classes.source}: the head would predict {n} classes and the targets are class ids "
                f"0..{classes.value - 1}; expected encoder.config.num_classes = {classes.value} (the dataset's count)"]

    @classmethod
    def version_of(cls, config: Mapping[str, Any]) -> str:
        """The version of what this encoder computes under ``config`` (a spec's ``encoder.config``); by default
        :attr:`version` for every config. An encoder whose presets changed one at a time says which changed."""
        return cls.version

    def embed(self, batch: dict[str, Any]) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def features(self, batch: dict[str, Any]) -> Any:
        """What a task head reads; by default the pooled embeddings ``[k, n, num_features]``."""
        return self.embed(batch)

    def forward(self, batch: dict[str, Any]) -> Any:
        return self.features(batch)

    def task_head(self, task: Any) -> nn.Module | None:
        """An encoder-specific head for ``task`` (None: the task builds its default head)."""
        return None

    # a backbone alone is all encoder: nothing to train in a linear probe
    def head_parameters(self) -> Iterator[nn.Parameter]:
        return iter(())

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        return self.parameters()


def zero_absent(z: Tensor, batch: dict[str, Any], modalities: list[str]) -> Tensor:
    """Per-modality embeddings ``z [k, n, f]`` with a modality absent from a sample
    (``batch["present"] [K, n]``, rows in ``batch["names"]`` order) set to 0; unchanged without it."""
    if "present" not in batch:
        return z
    present = batch["present"]
    rows = torch.stack([present[batch["names"].index(m)] for m in modalities])  # int indices: no index tensor copied
    return z * rows.unsqueeze(-1).to(z.dtype)


class MultimodalModel(nn.Module):
    """A backbone with a task head (:class:`fusebench.components.model.TaskModel`): the interface the
    runner's downstream phase uses."""

    modalities: list[str]
    num_features: int

    def embed(self, batch: dict[str, Any]) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def task_loss(self, output: Any, batch: dict[str, Any]) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def predict(self, output: Any, batch: dict[str, Any]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def head_parameters(self) -> Iterator[nn.Parameter]:  # pragma: no cover
        raise NotImplementedError

    def encoder_parameters(self) -> Iterator[nn.Parameter]:
        head = {id(p) for p in self.head_parameters()}
        return (p for p in self.parameters() if id(p) not in head)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["Backbone", "MultimodalModel", "count_parameters", "torch"]
