"""Sentiment synthetic twins, written in the official formats the real reader reads back: an MMSA
pickle (default) or, for ``mosi`` / ``mosei`` with ``options={"layout": "csd"}``, CMU-MultimodalSDK
computational sequences plus ``folds.json``. See docs/datasets/sentiment.md.

:class:`_SyntheticTwin` is the mixin of the sentiment adapters holding the writers.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..base import DatasetError, SyntheticSpec
from ..csd import write_csd
from .layouts import _MODS


class _SyntheticTwin:
    """The synthetic-twin writers of the sentiment adapters (class methods)."""

    @classmethod
    def _synthetic_arrays(cls, spec: SyntheticSpec) -> dict[str, dict[str, Any]]:
        """MMSA-style split dicts whose label is a weighted sum of per-modality latents.

        Each sample has latents z_text, z_audio, z_vision ~ N(0, 1); modality m writes z_m along a
        fixed random direction at every valid step (plus unit noise), and the multimodal label is
        ``scale * sum_m w_m z_m / ||w||`` with w = spec.informativeness (defaults text 0.8, audio 0.5,
        vision 0.2), so a modality is as informative as its weight. CH-SIMS unimodal labels are
        tanh(z_m) rounded to 0.2.
        """
        rng = np.random.default_rng(spec.seed)
        w = {"text": 0.8, "audio": 0.5, "vision": 0.2}
        w.update({k: float(v) for k, v in spec.informativeness.items() if k in w})
        norm = math.sqrt(sum(v * v for v in w.values())) or 1.0
        pad = dict(cls.PAD_LEN)
        pad.update(spec.options.get("pad_len", {}))
        dims = dict(cls.DIMS)
        dirs = {m: rng.normal(size=dims[m]) for m in _MODS}
        dirs = {m: d / np.linalg.norm(d) * math.sqrt(dims[m]) for m, d in dirs.items()}
        n_total = max(int(spec.num_samples), 3)
        n_val = max(1, n_total // 5)
        n_test = max(1, n_total // 5)
        sizes = {"train": n_total - n_val - n_test, "valid": n_val, "test": n_test}
        out: dict[str, dict[str, Any]] = {}
        counter = 0
        for split, n in sizes.items():
            z = {m: rng.normal(size=n) for m in _MODS}
            s = sum(w[m] * z[m] for m in _MODS) / norm
            lo, hi = cls.LABEL_RANGE
            if cls.UNIMODAL:
                label = np.round(np.tanh(s) * 5) / 5
            else:
                label = np.clip(np.round(1.5 * s * 3) / 3, lo, hi)
            lengths = {m: rng.integers(max(2, pad[m] // 4), pad[m] + 1, size=n) for m in _MODS}
            part: dict[str, Any] = {}
            for m in _MODS:
                arr = np.zeros((n, pad[m], dims[m]), dtype=np.float32)
                for i in range(n):
                    t = lengths[m][i]
                    arr[i, :t] = z[m][i] * dirs[m] + rng.normal(size=(t, dims[m]))
                part[m] = arr
            bert = np.zeros((n, 3, pad["text"]), dtype=np.int64)
            for i in range(n):
                t = lengths["text"][i]
                bert[i, 0, :t] = rng.integers(1000, 30000, size=t)
                bert[i, 0, 0], bert[i, 0, t - 1] = 101, 102
                bert[i, 1, :t] = 1
            part["text_bert"] = bert
            part["audio_lengths"] = [int(v) for v in lengths["audio"]]
            part["vision_lengths"] = [int(v) for v in lengths["vision"]]
            part["regression_labels"] = label.astype(np.float32)
            if cls.UNIMODAL:
                for key, m in zip("TAV", _MODS):
                    part[f"regression_labels_{key}"] = (np.round(np.tanh(z[m]) * 5) / 5).astype(np.float32)
            part["classification_labels"] = np.sign(label).astype(np.float32)
            part["id"] = np.array([f"syn{(counter + i) // 4:04d}$_${(counter + i) % 4 + 1}" for i in range(n)])
            part["raw_text"] = np.array([" ".join(["word"] * int(lengths["text"][i] - 2)) for i in range(n)],
                                        dtype=object)
            counter += n
            out[split] = part
        return out

    @classmethod
    def write_synthetic(cls, root: Path, spec: SyntheticSpec) -> None:
        """MMSA pickle (default) or, with ``spec.options["layout"] == "csd"``, computational sequences."""
        root = Path(root)
        parts = cls._synthetic_arrays(spec)
        if spec.options.get("layout", "mmsa") == "csd":
            if not cls.SUPPORTS_CSD:
                raise DatasetError(f"{cls.id}: no csd layout")
            cls._write_synthetic_csd(root, parts)
            return
        with open(root / cls.PICKLES["unaligned"], "wb") as f:
            pickle.dump(parts, f, protocol=4)

    @classmethod
    def _write_synthetic_csd(cls, root: Path, parts: dict[str, dict[str, Any]]) -> None:
        """One segment per sample; segment i of a video spans [10 i, 10 i + 8] s; rows are spread evenly.

        Folds are video-level, so a pickle video whose segments fall in several splits is written as one
        video per split (``<video>_<split>``): no video is listed in two folds (that would leak it).
        """
        prefix = cls.CSD_PREFIX
        feats: dict[str, dict[str, list]] = {m: {} for m in (*_MODS, "labels")}
        ivals: dict[str, dict[str, list]] = {m: {} for m in (*_MODS, "labels")}
        folds: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
        splits_of: dict[str, set[str]] = {}
        for split, part in parts.items():
            for sid in part["id"]:
                splits_of.setdefault(str(sid).split("$_$")[0], set()).add(split)
        for split, part in parts.items():
            for i, sid in enumerate(part["id"]):
                vid, seg = str(sid).split("$_$")
                if len(splits_of[vid]) > 1:
                    vid = f"{vid}_{split}"
                if vid not in folds[split]:
                    folds[split].append(vid)
                start, end = 10.0 * (int(seg) - 1), 10.0 * (int(seg) - 1) + 8.0
                lengths = {"text": int(part["text_bert"][i, 1].sum()), "audio": part["audio_lengths"][i],
                           "vision": part["vision_lengths"][i]}
                for m in _MODS:
                    t = lengths[m]
                    edges = np.linspace(start, end, t + 1)
                    feats[m].setdefault(vid, []).append(part[m][i, :t])
                    ivals[m].setdefault(vid, []).append(np.stack([edges[:-1], edges[1:]], axis=1))
                feats["labels"].setdefault(vid, []).append(np.array([[part["regression_labels"][i]]], np.float32))
                ivals["labels"].setdefault(vid, []).append(np.array([[start, end]]))
        names = {"text": "TimestampedWordVectors", "audio": "COVAREP", "vision": "Visual_Facet_42",
                 "labels": cls.CSD_LABELS}
        for m, name in names.items():
            write_csd(root / f"{prefix}_{name}.csd", name,
                      {v: np.concatenate(x) for v, x in feats[m].items()},
                      {v: np.concatenate(x) for v, x in ivals[m].items()},
                      {"dataset name": prefix.replace("_", "-"), "dimension names": [f"{name}_{k}" for k in range(
                          next(iter(feats[m].values()))[0].shape[1])]})
        (root / "folds.json").write_text(json.dumps(folds, indent=1))
