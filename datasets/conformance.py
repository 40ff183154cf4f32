"""Conformance checks every dataset adapter must pass (run by tests/test_dataset_conformance.py).

``check_adapter(name_or_cls, checks=None)`` builds the adapter's synthetic twin (small spec: the
adapter's ``CONFORMANCE_SPEC`` class attribute, a dict of :class:`SyntheticSpec` fields, default
``{"num_samples": 16}``) and runs the named checks (default: all of :data:`CHECKS`), raising
:class:`ConformanceError` with a message naming the adapter, split, sample and problem:

* ``declaration``: id, task, MODALITIES (unique names, known kinds), SPLITS, INFO are declared;
* ``schema``: every split's samples have the declared modalities laid out as in
  ``base.MODALITY_LAYOUT`` (float32, finite, right rank and channel count), a target of the task's
  type (as the task family says: :meth:`fusebench.tasks.Task.target_problem`; a plugin task checks nothing
  unless it overrides it), and ``meta["id"]`` (a
  string, unique within the split);
* ``determinism``: two independent builds give identical tensors (also with seeded augmentation);
* ``length``: ``len > 0`` for every split, ``ds[len]`` raises IndexError, ``ds[-1] == ds[len-1]``;
* ``collate``: :func:`fusebench.datasets.collate.collate` batches a few samples in the documented
  layout (``[n, ...]`` per modality, masks for variable-length ones, ``present`` ``[k, n]``; tensor targets
  stacked ``[n, ...]``, any others, whatever the task, a list of n);
* ``missing_modality``: a sample lacking a modality is zero-filled and marked absent;
* ``synthetic_twin``: the twin's root holds the official-format files the adapter declares (each
  required ``DataFile.path`` is a glob relative to the root; ``<name>`` placeholders match anything), a
  second build reuses it, and building from that root as real data gives the same samples;
* ``cache``: ``prepare`` then reading through the cache gives the same samples as the raw reader.

Returns the list of checks that passed. Usable on a third-party adapter class that is not registered.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from fusebench.datasets.base import MODALITY_LAYOUT, MultimodalDataset, SyntheticSpec
from fusebench.datasets.collate import collate

DEFAULT_SPEC = {"num_samples": 16}
_MAX_SAMPLES = 6  # samples inspected per split (keeps the checks fast on image adapters)


class ConformanceError(AssertionError):
    """An adapter breaks the sample schema or the adapter contract."""


def _fail(cls: type, msg: str) -> None:
    raise ConformanceError(f"{getattr(cls, 'id', cls.__name__)}: {msg}")


def resolve(adapter: str | type[MultimodalDataset]) -> type[MultimodalDataset]:
    if isinstance(adapter, str):
        from fusebench import datasets

        return datasets.get(adapter)
    if not (isinstance(adapter, type) and issubclass(adapter, MultimodalDataset)):
        raise ValueError(f"check_adapter: expected a registered id or a MultimodalDataset subclass, got {adapter!r}")
    return adapter


def spec_of(cls: type) -> dict[str, Any]:
    return dict(getattr(cls, "CONFORMANCE_SPEC", None) or DEFAULT_SPEC)


def _build(cls: type, split: str, **kw: Any) -> MultimodalDataset:
    kw.setdefault("use_cache", False)
    kw.setdefault("augment", False)
    return cls(split=split, synthetic=True, synthetic_spec=spec_of(cls), **kw)


def _indices(ds: MultimodalDataset) -> list[int]:
    n = len(ds)
    if n <= _MAX_SAMPLES:
        return list(range(n))
    step = (n - 1) / (_MAX_SAMPLES - 1)
    return sorted({round(i * step) for i in range(_MAX_SAMPLES)})


def _json(x: Any) -> Any:
    return json.loads(json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def same_sample(a: dict[str, Any], b: dict[str, Any], where: str, cls: type, meta_json: bool = False) -> None:
    """Fail unless samples ``a`` and ``b`` are identical (tensors: same dtype, shape and values)."""

    def same(x: Any, y: Any, path: str) -> None:
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                _fail(cls, f"{where}: {path} is a tensor in one sample only")
            if x.dtype != y.dtype or x.shape != y.shape:
                _fail(cls, f"{where}: {path} differs: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}")
            if not torch.equal(x, y) and not (x.is_floating_point() and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y))):
                _fail(cls, f"{where}: {path} values differ (max abs diff {(x.double() - y.double()).abs().max():.3g})")
        elif isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                _fail(cls, f"{where}: {path} keys differ: {sorted(x)} vs {sorted(y)}")
            for k in x:
                same(x[k], y[k], f"{path}[{k!r}]")
        elif x != y:
            _fail(cls, f"{where}: {path} differs: {x!r} vs {y!r}")

    for key in ("modalities", "target", "extra_targets"):
        same(a.get(key, {} if key == "extra_targets" else None), b.get(key, {} if key == "extra_targets" else None), key)
    ma, mb = a.get("meta", {}), b.get("meta", {})
    if meta_json:
        ma, mb = _json(ma), _json(mb)
    same(ma, mb, "meta")


# -- checks --------------------------------------------------------------------------------------
def check_declaration(cls: type) -> None:
    if not cls.id or cls.id != cls.id.lower():
        _fail(cls, f"class attribute id must be a lowercase id, got {cls.id!r}")
    # a lowercase id; that it names a registered task family, and num_classes where that task has classes, is
    # checked with the spec (fusebench.components.spec_check.check_dataset_task: the tasks sit beside, not below)
    if not isinstance(cls.task, str) or not cls.task or cls.task != cls.task.lower():
        _fail(cls, f"task must be a lowercase task-family id (fusebench.tasks), got {cls.task!r}")
    names = [m.name for m in cls.MODALITIES]
    if not names or len(set(names)) != len(names):
        _fail(cls, f"MODALITIES must be non-empty with unique names, got {names}")
    for m in cls.MODALITIES:
        if m.kind not in MODALITY_LAYOUT:
            _fail(cls, f"modality {m.name!r} has kind {m.kind!r}, not one of {sorted(MODALITY_LAYOUT)}")
    if not cls.SPLITS or "train" not in cls.SPLITS:
        _fail(cls, f"SPLITS must include 'train', got {cls.SPLITS}")
    if not cls.INFO.strip():
        _fail(cls, "INFO (where the official files come from, licence) is empty")


def _check_modality(cls: type, m: Any, t: Any, where: str, sample: dict[str, Any]) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(cls, f"{where}: modality {m.name!r} is {type(t).__name__}, expected a torch.Tensor")
    if t.dtype != torch.float32:
        _fail(cls, f"{where}: modality {m.name!r} has dtype {t.dtype}, expected float32 ({MODALITY_LAYOUT[m.kind]})")
    if not torch.isfinite(t).all():
        _fail(cls, f"{where}: modality {m.name!r} contains NaN or Inf")
    shape = tuple(t.shape)
    rank = {"image": 3, "depth": 3, "normal": 3, "points": 2, "point_features": 2, "sequence": 2, "signal": 2,
            "vector": 1}.get(m.kind)
    if rank is not None and t.dim() != rank:
        _fail(cls, f"{where}: modality {m.name!r} ({m.kind}) has shape {shape}, expected {MODALITY_LAYOUT[m.kind]}")
    channel_axis = {"image": 0, "depth": 0, "normal": 0, "signal": 0, "points": 1, "point_features": 1,
                    "sequence": 1, "vector": 0}.get(m.kind)
    expected_c = {"depth": 1, "normal": 3, "points": 3}.get(m.kind, m.channels)
    if channel_axis is not None and shape[channel_axis] != expected_c:
        _fail(cls, f"{where}: modality {m.name!r} has shape {shape}: {expected_c} channels expected "
                   f"({MODALITY_LAYOUT[m.kind]}; declared channels={m.channels})")
    if m.kind == "image" and (t.min() < 0 or t.max() > 1):
        _fail(cls, f"{where}: image {m.name!r} has values in [{t.min():.3g}, {t.max():.3g}], expected [0, 1]")
    if m.kind == "depth" and t.min() < 0:
        _fail(cls, f"{where}: depth {m.name!r} has negative values")
    if m.kind == "normal":
        norm = t.norm(dim=0)
        ok = ((norm - 1).abs() < 1e-3) | (norm == 0)
        if not bool(ok.all()):
            _fail(cls, f"{where}: normal {m.name!r} has vectors that are neither unit nor zero")
    if m.kind == "point_features":
        pts = [x for x in cls.MODALITIES if x.kind == "points" and x.name in sample["modalities"]]
        if pts and sample["modalities"][pts[0].name].shape[0] != shape[0]:
            _fail(cls, f"{where}: point_features {m.name!r} has {shape[0]} rows, points have "
                       f"{sample['modalities'][pts[0].name].shape[0]}")


def _check_target(cls: type, t: Any, where: str) -> None:
    """The dataset's task family says what a target must be (:meth:`fusebench.tasks.Task.target_problem`)."""
    from fusebench.tasks import TASKS

    problem = TASKS.get(cls.task).target_problem(t, getattr(cls, "num_classes", None))
    if problem:
        _fail(cls, f"{where}: {problem}")


def _desc(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)}"
    return type(t).__name__


def check_schema(cls: type) -> None:
    names = [m.name for m in cls.MODALITIES]
    for split in cls.SPLITS:
        ds = _build(cls, split)
        if ds.modalities != names:
            _fail(cls, f"split {split}: default modalities {ds.modalities}, declared {names}")
        ids = set()
        for i in _indices(ds):
            where = f"split {split}, sample {i}"
            s = ds[i]
            if not isinstance(s, dict) or not {"modalities", "target", "meta"} <= set(s):
                _fail(cls, f"{where}: a sample is a dict with modalities, target, meta; got {_desc(s)} {list(s) if isinstance(s, dict) else ''}")
            extra = set(s) - {"modalities", "target", "extra_targets", "meta"}
            if extra:
                _fail(cls, f"{where}: keys {sorted(extra)} are outside the sample schema")
            unknown = set(s["modalities"]) - set(names)
            if unknown:
                _fail(cls, f"{where}: undeclared modalities {sorted(unknown)}")
            if not s["modalities"]:
                _fail(cls, f"{where}: no modality present")
            for m in cls.MODALITIES:
                if m.name in s["modalities"]:
                    _check_modality(cls, m, s["modalities"][m.name], where, s)
            _check_target(cls, s["target"], where)
            for k, v in (s.get("extra_targets") or {}).items():
                if not isinstance(v, torch.Tensor):
                    _fail(cls, f"{where}: extra target {k!r} is {_desc(v)}, expected a tensor")
            meta = s["meta"]
            if not isinstance(meta, dict) or not isinstance(meta.get("id"), str) or not meta["id"]:
                _fail(cls, f"{where}: meta must be a dict with a non-empty string 'id', got {meta!r}")
            if meta["id"] in ids:
                _fail(cls, f"{where}: meta id {meta['id']!r} is not unique within the split")
            ids.add(meta["id"])
        # restricting modalities drops the others
        sub = _build(cls, split, modalities=names[:1])
        if set(sub[0]["modalities"]) - set(names[:1]):
            _fail(cls, f"split {split}: modalities={names[:1]} still yields {sorted(sub[0]['modalities'])}")


def check_determinism(cls: type) -> None:
    for split in cls.SPLITS:
        a, b = _build(cls, split), _build(cls, split)
        if len(a) != len(b):
            _fail(cls, f"split {split}: two builds have {len(a)} and {len(b)} samples")
        for i in _indices(a):
            same_sample(a[i], b[i], f"split {split}, sample {i}, two builds", cls)
    a, b = _build(cls, "train", augment=True, seed=3), _build(cls, "train", augment=True, seed=3)
    for i in _indices(a)[:3]:
        same_sample(a[i], b[i], f"train sample {i}, augmented twice with seed 3", cls)


def check_length(cls: type) -> None:
    for split in cls.SPLITS:
        ds = _build(cls, split)
        n = len(ds)
        if n <= 0:
            _fail(cls, f"split {split} of the synthetic twin is empty (raise CONFORMANCE_SPEC num_samples?)")
        try:
            ds[n]
        except IndexError:
            pass
        else:
            _fail(cls, f"split {split}: ds[{n}] (== len) did not raise IndexError")
        same_sample(ds[-1], ds[n - 1], f"split {split}: ds[-1] vs ds[len - 1]", cls)


def _check_batch(cls: type, batch: dict[str, Any], samples: list[dict[str, Any]], names: list[str]) -> None:
    n = len(samples)
    if batch["names"] != names:
        _fail(cls, f"collate: names {batch['names']} != {names}")
    if tuple(batch["present"].shape) != (len(names), n) or batch["present"].dtype != torch.bool:
        _fail(cls, f"collate: present has shape {tuple(batch['present'].shape)}, expected {(len(names), n)}")
    for li, name in enumerate(names):
        x = batch["modalities"][name]
        items = [s["modalities"].get(name) for s in samples]
        if x.shape[0] != n:
            _fail(cls, f"collate: modality {name!r} batch has {x.shape[0]} rows, expected {n}")
        lengths = {t.shape[0] for t in items if t is not None}
        if name in batch["masks"]:
            mask = batch["masks"][name]
            if tuple(mask.shape) != (n, x.shape[1]) or mask.dtype != torch.bool:
                _fail(cls, f"collate: mask of {name!r} has shape {tuple(mask.shape)}, expected {(n, x.shape[1])}")
            for i, t in enumerate(items):
                if t is not None and int(mask[i].sum()) != t.shape[0]:
                    _fail(cls, f"collate: mask of {name!r} row {i} marks {int(mask[i].sum())} steps, sample has {t.shape[0]}")
                if t is not None and not torch.equal(x[i, : t.shape[0]], t):
                    _fail(cls, f"collate: padded {name!r} row {i} does not start with the sample's values")
        elif len(lengths) > 1:
            _fail(cls, f"collate: {name!r} has varying lengths {sorted(lengths)} but no mask")
        else:
            for i, t in enumerate(items):
                if t is not None and not torch.equal(x[i], t):
                    _fail(cls, f"collate: {name!r} row {i} differs from the sample")
                if t is None and bool(x[i].any()):
                    _fail(cls, f"collate: missing {name!r} in row {i} is not zero-filled")
        for i, t in enumerate(items):
            if bool(batch["present"][li, i]) != (t is not None):
                _fail(cls, f"collate: present[{li}, {i}] is wrong for modality {name!r}")
    tgt = batch["target"]
    # collate's own rule, whatever the task: tensor targets are stacked, any other (detection's dicts, a plugin
    # task's) stay a list of the samples' targets
    if not all(isinstance(s.get("target"), torch.Tensor) for s in samples):
        if not isinstance(tgt, list) or len(tgt) != n:
            _fail(cls, f"collate: targets that are not all tensors must stay a list of {n}, got {_desc(tgt)}")
    elif not isinstance(tgt, torch.Tensor) or tgt.shape[0] != n:
        _fail(cls, f"collate: target batch must be a tensor [n, ...] with n = {n}, got {_desc(tgt)}")
    if len(batch["meta"]) != n:
        _fail(cls, f"collate: meta has {len(batch['meta'])} entries, expected {n}")


def check_collate(cls: type) -> None:
    ds = _build(cls, "train")
    names = [m.name for m in cls.MODALITIES]
    samples = [ds[i] for i in range(min(4, len(ds)))]
    _check_batch(cls, collate(samples, names=names), samples, names)


def check_missing_modality(cls: type) -> None:
    ds = _build(cls, "train")
    names = [m.name for m in cls.MODALITIES]
    samples = [ds[i] for i in range(min(3, len(ds)))]
    if len(samples) == 1:
        samples.append(ds[0])
    drop = names[0]
    samples[0] = dict(samples[0], modalities={k: v for k, v in samples[0]["modalities"].items() if k != drop})
    batch = collate(samples, names=names)
    if bool(batch["present"][0, 0]) or not bool(batch["present"][0, 1:].all()):
        _fail(cls, f"collate: present mask wrong after dropping {drop!r} from sample 0: {batch['present'][0].tolist()}")
    if batch["modalities"][drop][0].abs().sum() != 0:
        _fail(cls, f"collate: the missing {drop!r} of sample 0 is not zero-filled")
    if drop in batch["masks"] and bool(batch["masks"][drop][0].any()):
        _fail(cls, f"collate: the missing {drop!r} of sample 0 has valid steps in its mask")
    _check_batch(cls, batch, samples, names)


def check_synthetic_twin(cls: type) -> None:
    spec = SyntheticSpec(**spec_of(cls))
    root = cls.synthetic_root(spec)
    if not (root / ".complete").exists():
        _fail(cls, f"synthetic twin at {root} is not marked complete")
    stamp = (root / ".complete").stat().st_mtime_ns
    for f in cls.FILES:
        pattern = re.sub(r"<[^<>/]*>", "*", f.path)  # "<rec>/<rec>.hea" placeholders match any name
        if f.required and not any(root.glob(pattern)):
            _fail(cls, f"synthetic twin at {root} lacks the official file(s) {f.path!r} ({f.description})")
    again = _build(cls, "train")
    if Path(again.root) != root or (root / ".complete").stat().st_mtime_ns != stamp:
        _fail(cls, f"a second synthetic build did not reuse {root}")
    for split in cls.SPLITS:
        twin = _build(cls, split)
        real = cls(root=root, split=split, use_cache=False, augment=False)
        if len(real) != len(twin):
            _fail(cls, f"split {split}: reading {root} as real data gives {len(real)} samples, the twin {len(twin)}")
        for i in _indices(twin)[:3]:
            same_sample(twin[i], real[i], f"split {split}, sample {i}, twin vs its root read as real data", cls)


def check_cache(cls: type, workdir: str | Path | None = None) -> None:
    from fusebench.datasets import cache

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for split in cls.SPLITS:
            raw = _build(cls, split)
            folder = cache.prepare(raw, base=tmp, progress=False)
            problems = cache.check(folder)
            if problems:
                _fail(cls, f"split {split}: a fresh cache fails its own check: {problems}")
            cached = _build(cls, split)
            reader = cache.open_cache(cached, base=tmp)
            if reader is None:
                _fail(cls, f"split {split}: open_cache found no cache after prepare into {tmp}")
            cached.attach_cache(reader)
            for i in _indices(raw):
                same_sample(raw[i], cached[i], f"split {split}, sample {i}, raw vs cache", cls, meta_json=True)
            sub = _build(cls, split, modalities=[cls.MODALITIES[-1].name])
            sub.attach_cache(cache.open_cache(sub, base=tmp))
            same_sample(sub[0], _build(cls, split, modalities=[cls.MODALITIES[-1].name])[0],
                        f"split {split}, sample 0, one modality, raw vs cache", cls, meta_json=True)


CHECKS: dict[str, Callable[[type], None]] = {
    "declaration": check_declaration,
    "schema": check_schema,
    "determinism": check_determinism,
    "length": check_length,
    "collate": check_collate,
    "missing_modality": check_missing_modality,
    "synthetic_twin": check_synthetic_twin,
    "cache": check_cache,
}


def check_adapter(adapter: str | type[MultimodalDataset], checks: list[str] | None = None) -> list[str]:
    """Run the conformance ``checks`` (default: all) on an adapter id or class; return those passed.

    Raises :class:`ConformanceError` at the first failure, ``ValueError`` for an unknown check name.
    """
    cls = resolve(adapter)
    names = list(CHECKS) if checks is None else list(checks)
    bad = [c for c in names if c not in CHECKS]
    if bad:
        raise ValueError(f"check_adapter: unknown checks {bad}; valid: {list(CHECKS)}")
    for c in names:
        CHECKS[c](cls)
    return names


__all__ = ["CHECKS", "ConformanceError", "check_adapter", "same_sample"]
