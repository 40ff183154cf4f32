"""The one sample schema every adapter yields, and the base class of every adapter.

A **sample** is a dict::

    {
        "modalities": {name: Tensor},      # layout by kind, see MODALITY_LAYOUT
        "target": Tensor | dict,           # segmentation LongTensor[H, W] (-1 = void / ignored);
                                           # detection {"boxes": [G, 7], "labels": [G]};
                                           # regression float scalar; classification long scalar
        "extra_targets": {name: Tensor},   # optional (e.g. CH-SIMS unimodal labels "T", "A", "V")
        "meta": {"id": str, ...},          # ids, original sizes, subject, ...
    }

A modality may be missing from a sample (absent key): :func:`fusebench.datasets.collate.collate`
fills zeros and records a presence mask. Each modality declares a ``kind`` so encoders can be chosen
per kind; the objectives' views are the adapter's modalities in declaration order (EEG: channels).

The module is longer than 450 lines because :class:`MultimodalDataset` declares every hook and class attribute an
adapter may override in one place, each with its default and its contract (the splits, the options, the files read,
the prepared cache, whether the split seed moves the test split), which docs/adding-a-modality.md points to.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import torch
from torch.utils.data import Dataset

from fusebench.datasets.cache import cache_home, open_cache
from fusebench.datasets.errors import DatasetError, DatasetNotFoundError, check_arguments
from fusebench.io import canonical_json, sha256_file, sha256_hex
from fusebench.options import SUPPLIED, Option, from_signature

log = logging.getLogger(__name__)

#: tensor layout of one sample's modality, by kind
MODALITY_LAYOUT = {
    "image": "[C, H, W] float32 (RGB in [0, 1])",
    "depth": "[1, H, W] float32, metres, 0 = missing",
    "normal": "[3, H, W] float32 unit vectors, 0 = invalid",
    "points": "[N, 3] float32 xyz, metres",
    "point_features": "[N, C] float32 per-point features aligned with the 'points' modality",
    "sequence": "[T, d] float32 feature sequence, T may vary between samples",
    "signal": "[C, T] float32 time series (EEG: one channel per modality, C = 1)",
    "vector": "[d] float32 fixed-size feature vector",
}
MODALITY_KINDS = tuple(MODALITY_LAYOUT)


@dataclass(frozen=True)
class Modality:
    """Declaration of one modality of an adapter."""

    name: str
    kind: str
    channels: int  # C for image/depth/normal/point_features/signal, d for sequence, 3 for points
    variable_length: bool = False  # True for sequences whose T varies between samples
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in MODALITY_KINDS:
            raise ValueError(f"modality {self.name!r}: kind {self.kind!r} is not one of {MODALITY_KINDS}")


@dataclass(frozen=True)
class DataFile:
    """A file (or glob) an adapter expects under its root, with an optional sha256."""

    path: str
    description: str = ""
    sha256: str | None = None
    required: bool = True


@dataclass
class SyntheticSpec:
    """Controls of a synthetic twin: size and per-modality informativeness in [0, 1]."""

    num_samples: int = 64
    seed: int = 0
    informativeness: dict[str, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def problems(self, key: str = "synthetic_spec") -> list[str]:
        """What is out of range (empty: nothing), each a phrase naming ``key.<field>``: checked when a spec is
        loaded, so that a twin of -10 samples is refused by its key, not by numpy ("negative dimensions") when
        the twin is written. The adapter's ``write_synthetic`` reads ``options`` (checked there)."""
        out = []
        n, seed = self.num_samples, self.seed
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            out.append(f"{key}.num_samples must be an integer >= 1 (the samples of the synthetic twin), got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1:
            out.append(f"{key}.seed must be an integer in 0..{2**32 - 1}, got {seed!r}")
        for name, v in (self.informativeness.items() if isinstance(self.informativeness, dict) else ()):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                out.append(f"{key}.informativeness.{name} must be a number in [0, 1], got {v!r}")
        return out


@dataclass(frozen=True)
class Delivered:
    """One fact about every sample an adapter will deliver, known from the spec's ``dataset.options`` alone, before
    any data is read (:meth:`MultimodalDataset.delivers`): its ``value``, ``source`` (where it comes from, as an
    error names it: ``dataset.options.num_points = 16``, ``dataset.options.num_points (not set: the sunrgbd
    adapter's default 20000)``, ``dataset sunrgbd's num_classes = 10``) and ``key`` (the dotted spec key that sets
    it; None where no option does)."""

    value: Any
    source: str
    key: str | None = None


#: the synthetic twins this process generated (folders, in order): a command says where its output went, the twin
#: written under ``--data-root`` (or the cache) included (``fusebench run``, its ``--plan`` too)
TWINS_WRITTEN: list[Path] = []

#: options every adapter accepts (read by the base class and the cache), with their types
BASE_OPTION_TYPES: dict[str, Any] = {"seed": int, "augment": bool, "synthetic_spec": dict, "use_cache": bool,
                                     "allow_empty": bool}
BASE_OPTIONS = frozenset(BASE_OPTION_TYPES)


class MultimodalDataset(Dataset):
    """Base class of all adapters.

    Subclasses declare ``id``, ``task``, ``MODALITIES``, ``FILES`` and ``INFO`` and implement
    :meth:`_index` (list the samples of ``self.split``), :meth:`_load_raw` (read one sample from the
    official files) and :meth:`write_synthetic` (write a synthetic twin to disk in the official
    format). Train-time augmentation goes in :meth:`_augment` (seeded by ``seed`` and the index).

    A split that indexes to 0 samples raises :class:`DatasetError` naming the adapter, split, root and
    the file that defines the split (:meth:`split_file`), unless the option ``allow_empty=True`` is given;
    adapters may override :meth:`_empty_split_message` to explain why (e.g. which rule left it empty).
    """

    id: ClassVar[str] = ""
    task: ClassVar[str] = ""
    num_classes: ClassVar[int | None] = None
    MODALITIES: ClassVar[tuple[Modality, ...]] = ()
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "val", "test")
    FILES: ClassVar[tuple[DataFile, ...]] = ()
    #: where the official files come from (URLs, licence) and the expected layout, for `data info`
    INFO: ClassVar[str] = ""
    #: the adapter-specific options it reads (``dataset.options``); an option outside this set and
    #: :data:`BASE_OPTIONS` is a :class:`DatasetError` (default: none, so an adapter that reads an option from
    #: ``self._opts_rest`` declares it here). ``None`` skips the check: every key is accepted, and recorded, whether
    #: the adapter reads it or not (``fusebench data info`` says "open-ended"); kept for adapters written before
    #: the default was empty.
    OPTIONS: ClassVar[frozenset[str] | None] = frozenset()
    #: the types of (some of) the adapter's OPTIONS, checked when a benchmark spec is loaded
    #: (:mod:`fusebench.options`); options without an entry take any value
    OPTION_TYPES: ClassVar[dict[str, Any]] = {}
    #: bump when :meth:`_load_raw` changes its output: invalidates prepared caches (datasets/cache.py)
    PREPROCESS_VERSION: ClassVar[int] = 1
    #: bump when :meth:`write_synthetic` changes its files: invalidates synthetic twins on disk
    SYNTHETIC_VERSION: ClassVar[int] = 1
    #: overrides of the conformance suite's defaults (datasets/conformance.py ``DEFAULT_SPEC``)
    CONFORMANCE_SPEC: ClassVar[dict[str, Any] | None] = None
    #: overrides of ``fusebench bench data``'s defaults (fusebench/perf/data.py ``DEFAULT_SPEC``)
    BENCH_SPEC: ClassVar[dict[str, Any] | None] = None
    #: True when the views (count, names, widths) are only known after opening the data (multiview .mat)
    VIEWS_FROM_DATA: ClassVar[bool] = False
    #: whether the option ``split_seed`` (each run's seed with ``dataset.split_per_seed``) changes which samples the
    #: test split holds: ``False`` when the test split is fixed by the data or by other options (an official test
    #: list, with ``split_seed`` carving only val out of the official train part), or the adapter takes no
    #: ``split_seed``; ``True`` when ``split_seed`` draws the test split too; ``None`` (the default) when the adapter
    #: does not say, or it depends on the data (then :meth:`split_seed_moves_test` of the built test split answers,
    #: and by default the test splits of two split seeds are built and their samples' ids compared). A
    #: hyper-parameter selection with ``split_per_seed`` is refused when it moves the test split
    #: (:func:`fusebench.sweep.selection.check_test_split_fixed`): a selection seed's train / val would hold test
    #: samples of the evaluation seeds.
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = None
    #: how a benchmark spec fixes this adapter's test split when ``split_seed`` moves it, beyond what the refusal
    #: says for every adapter (``dataset.outer_test_seed`` where the adapter declares it, or no ``split_per_seed``):
    #: a clause for the refusal's message, e.g. "use a file that ships its test split"
    FIXED_TEST_SPLIT_HINT: ClassVar[str] = ""

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        modalities: list[str] | tuple[str, ...] | None = None,
        synthetic: bool = False,
        **opts: Any,
    ) -> None:
        super().__init__()
        if split not in self.SPLITS:
            raise DatasetError(f"{self.id}: split {split!r} is not one of {self.SPLITS}")
        names = [m.name for m in self.MODALITIES]
        modalities = check_arguments(self.id, names, root, modalities, synthetic)  # None: all of them
        unknown = [m for m in modalities if m not in names]
        if unknown:
            raise DatasetError(f"{self.id}: unknown modalities {unknown}; this adapter has {names}")
        self.split = split
        self.modalities = list(modalities)
        self.synthetic = bool(synthetic)
        declared = type(self).OPTIONS
        if declared is not None:  # an option the adapter does not read is a typo, never silently ignored
            unknown = sorted(set(opts) - set(declared) - BASE_OPTIONS)
            if unknown:
                raise DatasetError(f"{self.id}: unknown options {unknown} (dataset.options / --set "
                                   f"dataset.options.NAME); valid options: {sorted(set(declared) | BASE_OPTIONS)} "
                                   f"(an adapter declares the options it reads in its OPTIONS)")
        allow_empty = bool(opts.pop("allow_empty", False))
        self.opts = dict(opts)
        self.seed = int(opts.pop("seed", 0))
        self.augment = bool(opts.pop("augment", split == "train"))
        if synthetic:
            spec = SyntheticSpec(**opts.pop("synthetic_spec", {}))
            self.root = self.synthetic_root(spec, root)
        else:
            if root is None:
                raise DatasetNotFoundError(
                    f"{self.id}: no data root given (pass root=... or --data-root PATH).\n{self.info()}"
                )
            self.root = Path(root)
            if not self.root.exists():
                raise DatasetNotFoundError(f"{self.id}: data root {self.root} does not exist.\n{self.info()}")
        self.epoch = 0
        self._opts_rest = opts
        self.samples: list[Any] = self._index()
        if len(self.samples) == 0 and not allow_empty:
            raise DatasetError(self._empty_split_message())
        self._cache = None
        if opts.get("use_cache", True):
            self._cache = open_cache(self)

    def attach_cache(self, cache: Any) -> None:
        """Read the samples from ``cache`` instead of the official files: a reader returned by
        :func:`fusebench.datasets.cache.open_cache` for this dataset (e.g. a cache prepared under
        another base folder, ``open_cache(ds, base=...)``); ``None`` detaches it, so samples are read
        with :meth:`_load_raw` again. :attr:`manifest_hash` then names the attached cache."""
        self._cache = cache

    # -- public identity ----------------------------------------------------------------------
    @property
    def manifest_hash(self) -> str | None:
        """The sha256 manifest hash of the prepared cache this dataset reads (it names the source
        files, their sizes and hashes, the options and the preprocessing version), or None when it
        reads the files directly (``use_cache=False`` or nothing prepared)."""
        return getattr(self._cache, "manifest_hash", None) if self._cache is not None else None

    # -- adapter hooks ------------------------------------------------------------------------
    @classmethod
    def files_read(cls, root: str | os.PathLike, options: dict[str, Any]) -> list[Path] | None:
        """The data files a run on ``root`` with these dataset options reads, found without opening them:
        the record's data fingerprint covers these (:func:`.fingerprint.fingerprint`). None (the default):
        every file under the root. Override it when the root may hold files the adapter does not read."""
        return None

    def source_files(self) -> list[Path] | None:
        """The input files a prepared cache depends on (absolute, or relative to ``root``); None (the
        default) means every file under the root (the root itself when the root is a file). Override it when the
        root holds more than the adapter reads."""
        return None

    def sample_keys(self) -> list[str] | None:
        """One id per sample of this split, the same for the same sample in every split (e.g.
        ``<recording>:<epoch>``), found without reading the samples: a run whose splits share ids is a
        pipeline check, never ranked (``dataset.data_check`` of its record). None (the default): the
        adapter cannot say."""
        return None

    def split_sample_keys(self) -> list[str] | None:
        """The samples of this split, as ids, when the adapter decides them from lists in its code (built-in
        standard folds) rather than from its files and options alone: they go into the prepared cache's key
        (:func:`fusebench.datasets.cache.cache_key`), so a change of those lists gives a new key instead of
        serving the cache of the old split. None (the default): the key holds no sample list."""
        return None

    def split_seed_moves_test(self) -> bool | None:
        """Whether another ``split_seed`` would give this test split other samples (see
        :attr:`SPLIT_SEED_MOVES_TEST`, which it returns by default); override it when the answer depends on the
        data or the options (the multiview .mat adapters: not with ``outer_test_seed`` or a file's own test split).
        None: the adapter cannot say, so the caller compares the samples' ids of two split seeds."""
        return type(self).SPLIT_SEED_MOVES_TEST

    def _index(self) -> list[Any]:
        raise NotImplementedError

    def _load_raw(self, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def _augment(self, sample: dict[str, Any], rng: torch.Generator) -> dict[str, Any]:
        return sample

    @classmethod
    def declared_options(cls) -> list[Option] | None:
        """The adapter's options table for :func:`fusebench.options.options_of`: the names in ``OPTIONS``
        plus those every adapter takes (:data:`BASE_OPTION_TYPES`), each with its type (``OPTION_TYPES``,
        else the ``__init__`` annotation) and default; None when ``OPTIONS`` is None (open-ended)."""
        names = getattr(cls, "OPTIONS", None)
        if names is None:
            return None
        sig = {o.name: o for o in from_signature(cls.__init__, SUPPLIED["adapter"]) or []}
        types = {**BASE_OPTION_TYPES, **getattr(cls, "OPTION_TYPES", {})}
        return [sig.get(n, Option(n, types.get(n, Any))) for n in sorted(set(names) | set(BASE_OPTION_TYPES))]

    #: every sample's class ids are ``0 .. num_classes - 1`` whatever the options: :meth:`delivers` reports the count
    fixed_num_classes: ClassVar[bool] = False

    @classmethod
    def delivers(cls, options: Mapping[str, Any]) -> dict[str, Delivered]:
        """What every sample of this adapter will be under ``options`` (a spec's ``dataset.options``), known before
        any data is read; the spec loader hands it to the encoder's ``data_problems``
        (:meth:`fusebench.encoders.base.Backbone.data_problems`), so a data / encoder mismatch is refused when the
        spec loads (``--plan``), not at the first step of a cell. Names: ``num_classes`` (the targets are class ids
        ``0 .. num_classes - 1``) and ``points_per_sample`` (the points of each sample's point cloud); a name left
        out is not known until the data is read. By default the declared :attr:`num_classes` where the adapter
        declares :attr:`fixed_num_classes` (its count is the same under every option: quickstart, the sleep
        adapters, sunrgbd), else nothing (a plugin adapter whose count follows its options or files is never refused
        by a count it does not deliver); an adapter whose count or sizes follow its options (nyuv2's ``classes``,
        sunrgbd's ``num_points``) overrides this."""
        n = getattr(cls, "num_classes", None)
        if not cls.fixed_num_classes or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return {}
        return {"num_classes": Delivered(n, f"dataset {cls.id}'s num_classes = {n}")}

    @classmethod
    def option_delivered(cls, options: Mapping[str, Any], name: str, default: Any) -> Delivered:
        """``dataset.options.<name>`` as :meth:`delivers` reports it: the value given, else the adapter's
        ``default``, each with its source."""
        key = f"dataset.options.{name}"
        if name in options:
            return Delivered(options[name], f"{key} = {options[name]!r}", key)
        return Delivered(default, f"{key} (not set: the {cls.id} adapter's default {default!r})", key)

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """Write a deterministic synthetic twin under ``root`` in the official on-disk format."""
        raise NotImplementedError

    def split_file(self) -> str | os.PathLike | None:
        """The file that defines which samples belong to ``self.split`` (``splits.mat``,
        ``val_data_idx.txt``, a pickle and its split key, ...), named in errors; None where unknown.

        The default returns ``self._split_file`` (or ``self._listing``) when :meth:`_index` set it.
        """
        for attr in ("_split_file", "_listing"):
            value = getattr(self, attr, None)
            if value is not None:
                return value
        return None

    def _empty_split_message(self) -> str:
        where = self.split_file()
        defined = f"; the split is defined by {where}" if where is not None else ""
        return (
            f"{self.id}: split {self.split!r} is empty (0 samples) under root {self.root}{defined}. A benchmark "
            f"needs every split it uses to hold samples: check that the split's listing is not empty and the "
            f"split options (e.g. val_fraction) leave samples in it (pass allow_empty=True to build an empty "
            f"split on purpose)"
        )

    # -- public API ---------------------------------------------------------------------------
    @classmethod
    def modality(cls, name: str) -> Modality:
        for m in cls.MODALITIES:
            if m.name == name:
                return m
        raise KeyError(name)

    @classmethod
    def info(cls) -> str:
        files = "\n".join(f"  {f.path}  {f.description}" + (f"  (sha256 {f.sha256})" if f.sha256 else "")
                          for f in cls.FILES)
        return f"{cls.id}: {cls.INFO.strip()}\nExpected layout under the data root:\n{files}"

    #: folders under the data root where fixed files (``FILES`` with a sha256) may also lie
    FILE_DIRS: ClassVar[tuple[str, ...]] = ("",)

    @classmethod
    def check_files(cls, root: str | os.PathLike) -> list[tuple[str, str]]:
        """``(path, verdict)`` for every ``FILES`` entry that declares a sha256: ``ok``, ``missing`` or
        ``sha256 X, expected Y`` (the file found first in ``FILE_DIRS`` under ``root``).

        ``root`` may also be a file (the adapters that read one file, e.g. ``mv_cub``, take the file itself as
        the data root): it is checked against the entry of the same name, or against the only entry that
        declares a sha256 whatever its name (the adapter reads it whatever its name); the other entries are
        ``missing``."""
        out = []
        with_sha = [f for f in cls.FILES if f.sha256]
        root_file = Path(root) if Path(root).is_file() else None
        for f in with_sha:
            if root_file is not None:
                hit = len(with_sha) == 1 or root_file.name == Path(f.path).name
                found = root_file if hit else None
            else:
                found = next((Path(root, d, f.path) for d in cls.FILE_DIRS if Path(root, d, f.path).is_file()), None)
            if found is None:
                out.append((f.path, "missing"))
                continue
            digest = sha256_file(found)
            out.append((str(found), "ok" if digest == f.sha256 else f"sha256 {digest}, expected {f.sha256}"))
        return out

    @classmethod
    def synthetic_root(cls, spec: SyntheticSpec, base: str | os.PathLike | None = None) -> Path:
        """Generate (once) and return the folder holding the synthetic twin for ``spec``, under ``base`` (the data
        root) or the cache; a folder generated here is appended to :data:`TWINS_WRITTEN`."""
        key = canonical_json({"id": cls.id, "n": spec.num_samples, "seed": spec.seed, "inf": spec.informativeness,
                              "opt": spec.options, "v": cls.SYNTHETIC_VERSION}, compact=False)
        digest = sha256_hex(key, 12)
        base = Path(base) if base is not None else cache_home() / "synthetic"
        above = next((q for q in (base, *base.absolute().parents) if q.exists()), None)
        if above is not None and not above.is_dir():  # else a FileExistsError / NotADirectoryError traceback
            raise DatasetError(f"{cls.id}: the synthetic twin is written under the data root {base}, and {above} is a "
                               f"file, not a folder; give --data-root a folder (or leave it out: "
                               f"{cache_home() / 'synthetic'})")
        out = base / f"{cls.id}-{digest}"
        if (out / ".complete").exists():
            return out
        import shutil
        import tempfile

        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cls.id}-", dir=base))
        try:
            cls.write_synthetic(tmp, spec)
            (tmp / ".complete").write_text(key)
            try:
                os.replace(tmp, out)
                TWINS_WRITTEN.append(out)
            except OSError:  # another process won the race: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out

    def set_epoch(self, epoch: int) -> None:
        """Vary the seeded train augmentations between epochs (deterministically)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.id}: index {index} out of range for {len(self)} samples")
        sample = self._cache.load(index) if self._cache is not None else self._load_raw(index)
        sample["modalities"] = {k: v for k, v in sample["modalities"].items() if k in self.modalities}
        if self.augment:
            g = torch.Generator().manual_seed(
                (self.seed * 1_000_003 + self.epoch * 7_919 + index) & 0x7FFFFFFFFFFF
            )
            sample = self._augment(sample, g)
        return sample

    # -- batches sliced at once -----------------------------------------------------------------
    def _in_memory(self) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """The split's samples as tensors, when the adapter holds them in memory and :meth:`_load_raw`
        returns row ``index`` of each (cloned) and nothing else but ``meta``: ``({modality: [n, ...]},
        targets [n, ...])``. None (the default): samples are loaded one by one."""
        return None

    def _meta(self, index: int) -> dict[str, Any]:
        """``meta`` of sample ``index`` (what :meth:`_load_raw` puts there), for :meth:`fetch_batch`."""
        raise NotImplementedError

    def fetch_batch(self, indices: list[int], names: list[str]) -> dict[str, Any] | None:
        """The samples ``indices`` batched exactly as ``collate([self[i] for i in indices], names)`` batches
        them (same tensors, dtypes, order, meta), sliced at once from the in-memory tensors of
        :meth:`_in_memory`: no sample-by-sample loading and stacking. None where that does not hold (no
        in-memory tensors, a prepared cache attached, an augmentation of the adapter's own, a modality not
        held, an index out of range): the caller then loads and collates the samples one by one."""
        held = self._in_memory()
        n = len(self)
        if (held is None or self._cache is not None or not indices or
                (self.augment and type(self)._augment is not MultimodalDataset._augment)):
            return None
        xs, y = held
        if any(name not in xs or name not in self.modalities for name in names):
            return None
        if any(not 0 <= i < n for i in indices):
            return None
        rows = torch.tensor(indices, dtype=torch.long)
        return {"names": list(names), "modalities": {name: xs[name].index_select(0, rows) for name in names},
                "masks": {}, "present": torch.ones(len(names), len(indices), dtype=torch.bool),
                "target": y.index_select(0, rows), "extra_targets": {}, "meta": [self._meta(i) for i in indices]}
