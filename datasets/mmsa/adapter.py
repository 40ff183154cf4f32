"""The registered sentiment adapters ``mosi``, ``mosei`` and ``chsims`` (:class:`MOSI`, :class:`MOSEI`,
:class:`CHSIMS`) and their shared base :class:`_SentimentDataset`: options, layout dispatch, sample
assembly.

The work is done by mixins from the sibling modules: :mod:`.layouts` (layout detection, pickle path,
the ``csd`` layout), :mod:`.formats` (MMSA pickle / feature-file reading and validation) and
:mod:`.synthetic` (the synthetic twin writers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from .. import DATASETS
from ..base import DataFile, DatasetError, Modality, MultimodalDataset
from .folds import MOSEI_STANDARD_FOLDS, MOSI_STANDARD_FOLDS
from .formats import _PickleFormat
from .layouts import _Layouts
from .synthetic import _SyntheticTwin

# the public names stay fusebench.datasets.mmsa:<Class> (recorded as "adapter" in prepared-cache
# manifests and as the registry origin), as when the adapters were the module fusebench.datasets.mmsa
_MODULE = "fusebench.datasets.mmsa"


class _SentimentDataset(_PickleFormat, _Layouts, _SyntheticTwin, MultimodalDataset):
    """Shared reader of the three sentiment adapters (see the package docstring)."""

    __module__ = _MODULE

    #: dataset.options this adapter reads (others are errors, see MultimodalDataset.OPTIONS)
    OPTIONS = frozenset({"aligned", "csd_alignment", "csd_files", "file", "folds", "label", "labels_csd", "layout",
                         "nonfinite", "text_field", "unimodal_labels"})
    #: their types, checked when a benchmark spec is loaded (fusebench.options)
    OPTION_TYPES: ClassVar[dict[str, Any]] = {
        "aligned": bool, "csd_alignment": str, "csd_files": dict | None, "file": str | None, "folds": dict | None,
        "label": float, "labels_csd": str | None, "layout": str, "nonfinite": str, "text_field": str,
        "unimodal_labels": dict | None}

    task = "regression"
    #: the test split is the fold's (folds= / folds.json / the official folds / the deterministic video split);
    #: the adapter takes no split_seed
    SPLIT_SEED_MOVES_TEST: ClassVar[bool | None] = False
    LABEL_RANGE: ClassVar[tuple[float, float]] = (-3.0, 3.0)
    UNIMODAL: ClassVar[bool] = False
    PICKLES: ClassVar[dict[str, str]] = {"unaligned": "unaligned_50.pkl", "aligned": "aligned_50.pkl"}
    DIMS: ClassVar[dict[str, int]] = {"text": 768, "audio": 5, "vision": 20}
    PAD_LEN: ClassVar[dict[str, int]] = {"text": 50, "audio": 375, "vision": 500}
    FOLD_FRACTIONS: ClassVar[tuple[float, float, float]] = (0.7, 0.1, 0.2)
    #: the csd layout's official folds by video id (keys train / valid / test), used without folds= / folds.json
    #: when they hold every video of the labels sequence (some of them: STANDARD_FOLDS_UNLISTED); {}: none known
    #: (the deterministic video split)
    STANDARD_FOLDS: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: a labels sequence holding videos of STANDARD_FOLDS and videos they do not list: "refuse" (MOSI, whose
    #: folds hold every video of the official labels: another video means a mixed file) or "leave_out" (MOSEI,
    #: whose official labels hold videos the SDK's folds do not list: they are in no split, with a warning)
    STANDARD_FOLDS_UNLISTED: ClassVar[str] = "refuse"
    SUPPORTS_CSD: ClassVar[bool] = True
    #: the CMU-MultimodalSDK file names of an adapter with SUPPORTS_CSD: <CSD_PREFIX>_<CSD_LABELS>.csd
    CSD_PREFIX: ClassVar[str] = ""
    CSD_LABELS: ClassVar[str] = ""
    SYNTHETIC_VERSION = 1
    #: 2: aligned pickles are trimmed to the text_bert mask length (prepared caches of version 1 are rebuilt)
    PREPROCESS_VERSION: ClassVar[int] = 2

    # -- index -----------------------------------------------------------------------------------
    def _index(self) -> list[Any]:
        o = self._opts_rest
        self.nonfinite = o.get("nonfinite", "error")
        if self.nonfinite not in ("error", "zero"):
            raise DatasetError(f"{self.id}: nonfinite={self.nonfinite!r} must be 'error' or 'zero'")
        self.text_field = o.get("text_field", "auto")
        if self.text_field not in ("auto", "text", "text_bert"):
            raise DatasetError(f"{self.id}: text_field={self.text_field!r} must be 'auto', 'text' or 'text_bert'")
        layout = o.get("layout", "auto")
        if layout == "auto":
            layout = self._detect_layout()
        if layout == "csd" and not self.SUPPORTS_CSD:
            raise DatasetError(f"{self.id}: layout 'csd' is only for mosi/mosei")
        if layout not in ("mmsa", "feature_file", "csd"):
            raise DatasetError(f"{self.id}: layout={layout!r} must be 'auto', 'mmsa', 'feature_file' or 'csd'")
        self.layout = layout
        if layout == "csd":
            return self._index_csd()
        return self._index_pickle()

    def source_files(self) -> list[Path]:
        """The files this split was read from (hashed by ``fusebench data prepare``)."""
        if self.layout == "csd":
            files = [Path(self._labels_csd.path)] + [Path(seq.path) for seq in self._csd.values()]
            return files + ([self.root / "folds.json"] if (self.root / "folds.json").is_file() else [])
        return [Path(self.source)]

    def sample_keys(self) -> list[str] | None:
        """The clip id of every sample of this split, in the order the samples are delivered (their ``meta`` id),
        without reading a sample: an MMSA pickle's ``id`` entries (``<video_id>$_$<clip_id>``), a feature
        file's name (its one sample, the same in every split), the ``csd`` layout's ``<video>[<segment>]``. None
        for an MMSA split without ``id`` (its ``meta`` ids are the sample indices, which do not name a clip) or with a
        missing id (``None``, NaN) among them."""
        if self.layout == "csd":
            return [f"{vid}[{i}]" for vid, i in self.samples]
        if not self._has_ids:
            return None
        return list(self._arrays["id"])

    def split_sample_keys(self) -> list[str] | None:
        """The ``csd`` layout's :meth:`sample_keys`: its split comes from the built-in standard folds (or the
        deterministic video split), so they key its prepared cache (a cache of another split is not served).
        None for the pickle layouts, whose splits are their files'."""
        return self.sample_keys() if self.layout == "csd" else None

    # -- samples ---------------------------------------------------------------------------------
    def _load_raw(self, index: int) -> dict[str, Any]:
        if self.layout == "csd":
            return self._load_csd(index)
        a = self._arrays
        mods = {}
        for m in self.modalities:
            x = a[m][index]
            ln = a["lengths"].get(m)
            if ln is not None:
                if int(ln[index]) == 0:
                    continue  # length 0: the modality is missing for this sample (presence mask)
                x = x[: int(ln[index])]
            mods[m] = torch.from_numpy(x.copy())
        sample = {
            "modalities": mods,
            "target": torch.tensor(float(a["labels"]["regression_labels"][index]), dtype=torch.float32),
            "meta": {"id": a["id"][index], "raw_text": a["raw_text"][index], "index": index,
                     "source": self.source},
        }
        if self.UNIMODAL:
            sample["extra_targets"] = {
                m: torch.tensor(float(a["labels"][f"regression_labels_{m}"][index]), dtype=torch.float32) for m in "TAV"
            }
        return sample


_SENTIMENT_MODALITIES = (
    Modality("text", "sequence", 768, True, "BERT last-layer token features (or token ids with text_field='text_bert')"),
    Modality("audio", "sequence", 5, True, "acoustic frame features (COVAREP / librosa / eGeMAPS)"),
    Modality("vision", "sequence", 20, True, "facial frame features (FACET / OpenFace)"),
)


@DATASETS.register("mosi")
class MOSI(_SentimentDataset):
    """CMU-MOSI: 2199 opinion segments of 93 YouTube videos, sentiment in [-3, 3]."""

    __module__ = _MODULE
    id = "mosi"
    MODALITIES = _SENTIMENT_MODALITIES
    DIMS = {"text": 768, "audio": 5, "vision": 20}
    PAD_LEN = {"text": 50, "audio": 375, "vision": 500}
    FOLD_FRACTIONS = (52.0, 10.0, 31.0)
    STANDARD_FOLDS = MOSI_STANDARD_FOLDS
    CSD_PREFIX, CSD_LABELS = "CMU_MOSI", "Opinion_Labels"  # CMU_MOSI_Opinion_Labels.csd (the synthetic twin's names)
    FILES = (
        DataFile("unaligned_50.pkl", "MMSA features (or aligned_50.pkl with aligned=True)", required=False),
        DataFile("CMU_MOSI_Opinion_Labels.csd", "CMU-MultimodalSDK labels (csd layout)", required=False),
        DataFile("CMU_MOSI_*.csd", "feature computational sequences (csd layout)", required=False),
    )
    INFO = """
CMU-MOSI (Zadeh et al. 2016; research use, CMU MultiComp Lab).
MMSA features: https://github.com/thuiar/MMSA (MOSI/Processed/unaligned_50.pkl, aligned_50.pkl).
Computational sequences: CMU-MultimodalSDK, http://immortal.multicomp.cs.cmu.edu/raw_datasets/processed_data/cmu-mosi/seq_length_50/ (and mmsdk.mmdatasdk.cmu_mosi).
Pass root=<folder with the pickle or the .csd files> or root=<a single MMSA-FET feature .pkl>.
"""


_MOSEI_DIMS = {"text": 768, "audio": 74, "vision": 35}  # BERT, COVAREP, FACET (MMSA unaligned_50)


@DATASETS.register("mosei")
class MOSEI(_SentimentDataset):
    """CMU-MOSEI: ~23k segments of 3228 videos, sentiment in [-3, 3] (labels column 0)."""

    __module__ = _MODULE
    id = "mosei"
    DIMS = _MOSEI_DIMS
    MODALITIES = tuple(Modality(m.name, m.kind, _MOSEI_DIMS[m.name], True, m.description) for m in _SENTIMENT_MODALITIES)
    PAD_LEN = {"text": 50, "audio": 500, "vision": 500}
    FOLD_FRACTIONS = (0.7, 0.1, 0.2)  # the deterministic video split of labels with none of the standard videos
    STANDARD_FOLDS = MOSEI_STANDARD_FOLDS
    STANDARD_FOLDS_UNLISTED = "leave_out"  # the SDK's labels hold videos its folds do not list (see .folds)
    CSD_PREFIX, CSD_LABELS = "CMU_MOSEI", "Labels"  # CMU_MOSEI_Labels.csd (the synthetic twin's names)
    FILES = (
        DataFile("unaligned_50.pkl", "MMSA features (or aligned_50.pkl with aligned=True)", required=False),
        DataFile("CMU_MOSEI_Labels.csd", "CMU-MultimodalSDK labels (csd layout)", required=False),
        DataFile("CMU_MOSEI_*.csd", "feature computational sequences (csd layout)", required=False),
    )
    INFO = """
CMU-MOSEI (Zadeh et al. ACL 2018; research use, CMU MultiComp Lab).
MMSA features: https://github.com/thuiar/MMSA (MOSEI/Processed/unaligned_50.pkl, aligned_50.pkl).
Computational sequences: CMU-MultimodalSDK (mmsdk.mmdatasdk.cmu_mosei; CMU_MOSEI_Labels.csd, CMU_MOSEI_COVAREP.csd, ...).
"""


@DATASETS.register("chsims")
class CHSIMS(_SentimentDataset):
    """CH-SIMS: 2281 Mandarin clips, multimodal + unimodal (T, A, V) sentiment in [-1, 1]."""

    __module__ = _MODULE
    id = "chsims"
    LABEL_RANGE = (-1.0, 1.0)
    UNIMODAL = True
    SUPPORTS_CSD = False
    PICKLES = {"unaligned": "unaligned_39.pkl", "aligned": "aligned_39.pkl"}
    MODALITIES = tuple(Modality(m.name, m.kind, {"text": 768, "audio": 33, "vision": 709}[m.name], True,
                                m.description) for m in _SENTIMENT_MODALITIES)
    DIMS = {"text": 768, "audio": 33, "vision": 709}
    PAD_LEN = {"text": 39, "audio": 400, "vision": 55}
    FILES = (
        DataFile("unaligned_39.pkl", "MMSA CH-SIMS features with regression_labels and regression_labels_T/A/V"),
    )
    INFO = """
CH-SIMS (Yu et al. ACL 2020; research use, thuiar). Request access at https://github.com/thuiar/MMSA
(SIMS/Processed/unaligned_39.pkl). A single MMSA-FET feature file (root=<file.pkl>) also loads, as one
unlabelled sample (target NaN unless label=... is given).
"""
