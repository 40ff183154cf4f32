"""Every shipped benchmark runs end to end on its synthetic twin: every compatible objective on the first benchmark
of each kind (pipeline, protocol, encoder, number of views), a sample of objectives on the others (``_cells``).

One test per (benchmark, objective) cell: ``fusebench.run(name, objective=..., seeds=[0],
synthetic=True)`` must write ``<out>/<benchmark>/<objective>/seed0/run.json`` holding the resolved
config (and its hash), finite values for every metric of the spec, ``dataset.synthetic == True`` and
the representation diagnostics. The objectives a benchmark admits are worked out here from a literal
table of each objective's input kind and view limits (written from the papers, not read from the
classes) and the number of views of the benchmark, and compared with
``compat.compatible_objectives``.

Also covered: an incompatible objective (a k = 2 loss on a k >= 3 benchmark) fails with ValueError
before anything is written; unknown benchmark / objective names list the valid ids with the closest
match; malformed spec files raise ConfigError naming the file and the key; ``--set`` overrides reach
the run; a real-data benchmark without ``--data-root`` raises DatasetNotFoundError with the adapter's
``data info`` text. The poly-view Gaussian benchmark's true MI is checked against the Gaussian
conditioning formula written out here (equal to Eq. 26: M = 2 gives -1/2 log(1 - 0.8^2) = 0.5108).

The cells run with one torch thread: on a shared 2-core machine, 2 intra-op threads make these tiny
models tens of times slower (threads spin-waiting for a busy core).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import fusebench
from fusebench.components.identity import spec_hash
from fusebench import benchmarks, objectives
from fusebench.datasets.base import DatasetNotFoundError
from fusebench.registry import UnknownNameError
from fusebench.components import compat
from fusebench.sweep import runner
from fusebench.spec.config import ConfigError
from fusebench.components.spec_check import load_spec
from fusebench.cells.standard import build_model
from fusebench.metrics import values_of

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "none"
RAW = "raw"
RAW_KINDS = ("raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca")
DIAGNOSTICS = ("alignment", "uniformity", "effective_rank")

#: extra shrinking for benchmarks whose own ``synthetic:`` block is sized for the README run
SHRINK = {
    "quickstart": {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1,
                   "downstream.epochs": 1},
    "quickstart-compute": {"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}, "pretrain.epochs": 1,
                           "pretrain.objective_epochs": {}, "downstream.epochs": 1},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def _shrink(name: str, objective: str | None = None) -> dict | None:
    """SHRINK of ``name``; for a reference row without its pretrain.* values (a row that pretrains nothing reads
    none, and one given to it is refused)."""
    from fusebench.components.rows import is_reference

    over = SHRINK.get(name)
    if over is not None and objective is not None and is_reference(objective):
        over = {k: v for k, v in over.items() if not k.startswith("pretrain.")}
    return over


def _spec(name: str, objective: str | None = None):
    return benchmarks.load(name, overrides=_shrink(name, objective), synthetic=True)


def _num_views(spec) -> list[int]:
    """The view counts an objective must accept: k of the dataset, or every multiplicity M."""
    if spec.pipeline == "gaussian_mi":
        return [int(m) for m in spec.options["multiplicities"]]
    if spec.dataset.modalities:
        return [len(spec.dataset.modalities)]
    from fusebench import datasets

    return [len(datasets.get(spec.dataset.id).MODALITIES)]


#: What each objective takes, written out from its paper / module docstring (not read from the
#: classes): input kind and the view counts k it is defined for (max None = no upper bound).
#: "views": the loss takes [k, n, d]; "pairs": predictions and targets [k, n, d] (BYOL);
#: "tuple": one fused tuple embedding per sample, so any number of modalities fits.
OBJECTIVE_LIMITS = {
    "byol_avg": ("pairs", 2, None),          # M3G Eq. 4: each view against the mean of the other k - 1
    "byol_pwe": ("pairs", 2, None),          # M3G Eq. 3: all view pairs
    "dhel": ("views", 2, 2),                 # two-view DHEL (Koromilas et al. 2024, MV paper Eq. 1)
    "infonce_avg": ("views", 2, None),       # M3G Eq. 4 with NT-Xent
    "infonce_pwe": ("views", 2, None),       # M3G Eq. 3: mean NT-Xent over view pairs
    "m3g": ("views", 2, None),               # multi-marginal matching gap, any k >= 2
    "matching_gap": ("views", 2, 2),         # bistochastic (two-marginal) matching only
    "multicrop": ("views", 2, None),         # Poly-View Eq. 1: ordered view pairs
    "mv_dhel": ("views", 2, None),           # MV paper Eq. 12
    "mv_infonce": ("views", 2, None),        # MV paper Eq. 11
    "pvc_arithmetic": ("views", 2, None),    # Poly-View Eq. 12, M >= 2
    "pvc_geometric": ("views", 2, None),     # Poly-View Eq. 13, M >= 2
    "suff_stats": ("views", 2, None),        # Poly-View Eq. 22 / 24, M >= 2
    "tuple_infonce": ("tuple", 2, 2),        # TupleInfoNCE Eq. 2 on fused tuples (anchor, positive)
}


def _admits(spec, objective: str) -> bool:
    """The compatibility rule from the table: the Gaussian MI experiment feeds raw views to the loss
    (view objectives only, at every multiplicity M); tuple objectives fuse any number of modalities;
    view / pair objectives need each k within their limits."""
    kind, lo, hi = OBJECTIVE_LIMITS[objective]
    if spec.pipeline == "gaussian_mi" and kind != "views":
        return False
    if kind == "tuple":
        return True
    return all(lo <= k and (hi is None or k <= hi) for k in _num_views(spec))


def _references(spec) -> list[str]:
    """Pseudo-objectives: 'none' (no pretraining) on standard benchmarks; the reference rows computed
    from the input views (raw, raw_l2, raw_tfidf, raw_balanced, raw_pca) on those evaluated with the
    embedding_eval protocol; 'raw' (the probe on the input vectors) on linear-probe benchmarks."""
    if spec.pipeline != "standard":
        return []
    if spec.downstream.protocol == "embedding_eval":
        return [BASELINE, *RAW_KINDS]
    from fusebench import datasets

    vectors = {m.kind for m in datasets.get(spec.dataset.id).MODALITIES
               if spec.dataset.modalities is None or m.name in spec.dataset.modalities} == {"vector"}
    return [BASELINE] + ([RAW] if spec.downstream.protocol == "linear_probe" and vectors else [])


def _builtin(names: list[str]) -> list[str]:
    """The built-in objectives among ``names``: an objective a plugin installed on this machine supplies is
    not in OBJECTIVE_LIMITS (``compat.compatible_objectives`` rightly offers it too)."""
    return [n for n in names if objectives.OBJECTIVES.plugin(n) is None]


def _expected_objectives(spec) -> list[str]:
    names = [o for o in OBJECTIVE_LIMITS if _admits(spec, o)]
    return _references(spec) + names


#: what every benchmark runs at least: the baseline and a reference row, a pairwise, a multi-view and an
#: optimal-transport objective (those of them the benchmark admits)
SAMPLE = (BASELINE, RAW, "infonce_pwe", "mv_infonce", "m3g")


def _cells() -> list[tuple[str, str]]:
    """Every admitted objective of the first benchmark of each kind (pipeline, downstream protocol, encoder and
    number of views: the same code paths), and the SAMPLE on the others of that kind (their own adapter and
    sizes). Eleven multi-view benchmarks of one kind would otherwise repeat ~190 cells of the same code."""
    cells, seen = [], set()
    for b in benchmarks.builtin():
        spec = _spec(b)
        kind = (spec.pipeline, spec.downstream.protocol, spec.encoder.id, tuple(_num_views(spec)))
        names = _expected_objectives(spec)
        if kind in seen:
            names = [o for o in names if o in SAMPLE]
        seen.add(kind)
        # tf-idf needs count views; the generator's views are Gaussian (raw_tfidf runs on the real NGs counts in
        # tests/test_reference_features.py)
        cells += [(b, o) for o in names if o != "raw_tfidf"]
    return cells


CELLS = _cells()


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------
# the shipped specs themselves
# ---------------------------------------------------------------------------------------------
def test_every_issue_benchmark_is_shipped():
    want = {"nyuv2-seg", "sunrgbd-det", "mosi-sentiment", "mosei-sentiment", "chsims-sentiment",
            "sleep-edf-staging", "physionet2018-eeg", "polyview-gaussian-mi", "quickstart"}
    assert want <= set(benchmarks.builtin())


def test_compatibility_rules_by_hand():
    """k = 2 admits everything, k >= 3 drops the two-view-only losses, the Gaussian MI experiment (raw
    views, M = 2 and 4) keeps the view objectives without an upper limit; 'raw' is a reference row of
    the embedding_eval benchmarks (with its variants) and of linear-probe benchmarks on vector inputs
    (quickstart); checked against the runner."""
    everything = set(OBJECTIVE_LIMITS)
    two_view_only = {"dhel", "matching_gap"}
    not_raw_views = {"byol_avg", "byol_pwe", "tuple_infonce"}
    cases = {"sleep-edf-staging": everything | {BASELINE},
             "nyuv2-seg": everything - two_view_only | {BASELINE},
             "physionet2018-eeg": everything - two_view_only | {BASELINE},
             "mosi-sentiment": everything - two_view_only | {BASELINE},
             "mv-hw2sources": everything | {BASELINE, *RAW_KINDS},
             "mv-handwritten": everything - two_view_only | {BASELINE, *RAW_KINDS},
             "quickstart": everything - two_view_only | {BASELINE, RAW},
             "polyview-gaussian-mi": everything - two_view_only - not_raw_views}
    for name, want in cases.items():
        spec = _spec(name)
        assert set(_expected_objectives(spec)) == want, name
        assert set(_builtin(compat.compatible_objectives(spec))) | set(_references(spec)) == want, name


def test_table_covers_every_registered_objective():
    assert sorted(OBJECTIVE_LIMITS) == objectives.OBJECTIVES.builtin(), "add new objectives to OBJECTIVE_LIMITS"


@pytest.mark.parametrize("name", benchmarks.builtin())
def test_runner_agrees_on_compatible_objectives(name):
    spec = _spec(name)
    got = _builtin(compat.compatible_objectives(spec)) + _references(spec)
    assert sorted(got) == sorted(_expected_objectives(spec))


@pytest.mark.parametrize("name", benchmarks.builtin())
def test_spec_is_complete(name):
    from fusebench import metrics

    real = benchmarks.load(name)
    syn = benchmarks.load(name, synthetic=True)
    assert real.description.strip() and real.protocol_notes and real.seeds and real.objectives
    assert real.synthetic, f"{name}: no synthetic block"
    expected = set(_expected_objectives(real))
    assert set(real.objectives) <= expected, f"{name}: default sweep holds incompatible objectives"
    if real.pipeline == "standard":
        for mid in real.metrics:
            metrics.get(mid)
        assert real.validation_metric in real.metrics
        # the synthetic block makes the run tiny: a single short epoch of each phase
        if name not in SHRINK:
            assert syn.pretrain.epochs == 1 and syn.downstream.epochs == 1
            assert syn.dataset.synthetic_spec.get("num_samples", 64) <= 64
            assert syn.pretrain.batch_size <= 8


REAL_DATA = [b for b in benchmarks.builtin()
             if benchmarks.load(b).pipeline == "standard" and not benchmarks.load(b).dataset.synthetic_only]


@pytest.mark.parametrize("name", REAL_DATA)
def test_real_data_config_is_accepted(name):
    """The full-size settings (adapter options, encoder config) are accepted by the adapter and the
    encoder: the adapter reads the (tiny) synthetic twin with the real options, the runner builds
    the full-size model from it, with one view per spec modality in spec order."""
    from fusebench import datasets

    real, syn = benchmarks.load(name), benchmarks.load(name, synthetic=True)
    ds = datasets.build(real.dataset.id, split="train", modalities=real.dataset.modalities, synthetic=True,
                        synthetic_spec=syn.dataset.synthetic_spec, seed=0, **real.dataset.options)
    want = real.dataset.modalities or [m.name for m in datasets.get(real.dataset.id).MODALITIES]  # None: from the file
    assert list(ds.modalities) == want
    model = build_model(real, ds)
    assert list(model.modalities) == want
    # full size, not the tiny test width: the width the real spec asks for, else the encoder's full default
    want_width = real.encoder.config.get("num_features")
    assert model.num_features == want_width if want_width is not None else model.num_features >= 64


def test_docs_cover_every_benchmark():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for name in benchmarks.builtin():
        assert f"## {name}" in text, f"docs/benchmarks.md has no section '## {name}'"


# ---------------------------------------------------------------------------------------------
# every cell
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,objective", CELLS, ids=[f"{b}-{o}" for b, o in CELLS])
def test_synthetic_cell(name, objective, tmp_path):
    spec = _spec(name, objective)
    records = fusebench.run(name, objective=objective, seeds=[0], out=tmp_path, synthetic=True,
                            progress=False, overrides=_shrink(name, objective))
    assert len(records) == 1
    rec = records[0]
    assert rec.get("status") != "failed", f"{name}/{objective} failed: {rec.get('error')}\n{rec.get('traceback')}"
    path = tmp_path / name / objective / "seed0" / "run.json"
    assert path.is_file()
    on_disk = json.loads(path.read_text())
    assert on_disk["benchmark"] == name and on_disk["objective"] == objective and on_disk["seed"] == 0
    runner.resolve_views(spec, True, None)  # views read from the (synthetic) file, as the runner does
    assert on_disk["config"] == json.loads(json.dumps(spec.to_dict()))
    assert on_disk["config_hash"] == spec_hash(spec, objective)
    assert on_disk["dataset"]["synthetic"] is True and on_disk["dataset"]["manifest_hash"] == "synthetic"
    metrics = values_of(on_disk["metrics"])
    if spec.pipeline == "standard":
        assert set(spec.metrics) <= set(metrics)
        bad = {m: metrics[m] for m in spec.metrics if not _finite(metrics[m])}
        assert not bad, f"non-finite metrics {bad}"
        assert on_disk["selection"]["metric"] == spec.validation_metric
        curves = on_disk["curves"]
        if spec.downstream.protocol == "embedding_eval":  # probe + k-means: no downstream training loop
            # the probe is scored on val (its L2 is chosen there); k-means needs no validation
            val_metrics = set(on_disk["selection"]["val_metrics"])
            assert {"acc", "mf1"} & set(spec.metrics) <= val_metrics <= set(spec.metrics)
            assert on_disk["selection"]["probe"]["l2"] in on_disk["selection"]["probe"]["l2_grid"]
            assert on_disk["clustering"]["k"] == len(set(on_disk["dataset"]["splits"]["label_values"])) \
                if "splits" in on_disk["dataset"] else on_disk["clustering"]["k"] >= 2
        else:
            assert set(spec.metrics) <= set(on_disk["selection"]["val_metrics"])
            assert curves.get("downstream_loss") and all(map(_finite, curves["downstream_loss"]))
        if objective not in RAW_KINDS:  # the input views have no encoder: no embedding diagnostics
            assert set(DIAGNOSTICS) <= set(on_disk["diagnostics"])
            assert all(_finite(on_disk["diagnostics"][d]) for d in DIAGNOSTICS), on_disk["diagnostics"]
        if objective not in (BASELINE, *RAW_KINDS):  # the reference rows are not pretrained
            assert curves.get("pretrain_loss") and all(map(_finite, curves["pretrain_loss"]))
        else:
            assert "pretrain_loss" not in curves
    else:  # the poly-view Gaussian MI experiment: bound, true MI (Eq. 26) and gap per multiplicity
        assert "diagnostics" in on_disk
        s0, s = float(spec.options["sigma0"]), float(spec.options["sigma"])
        for m in spec.options["multiplicities"]:
            bound, true, gap = (metrics[f"{k}_M{m}"] for k in ("mi_bound", "true_mi", "mi_gap"))
            assert _finite(bound) and _finite(true) and _finite(gap)
            # Gaussian conditioning: Var(x_a) = s^2 + s0^2; Var(x_a | the other M - 1 views) =
            # s^2 + posterior variance of c = s^2 + 1 / (1 / s0^2 + (M - 1) / s^2)
            cond = s * s + 1.0 / (1.0 / (s0 * s0) + (m - 1) / (s * s))
            assert true == pytest.approx(0.5 * math.log((s * s + s0 * s0) / cond), rel=1e-9)
            assert gap == pytest.approx(true - bound, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,objective", [("nyuv2-seg", "matching_gap"), ("physionet2018-eeg", "dhel"),
                                            ("mosi-sentiment", "matching_gap")])
def test_incompatible_objective_fails_before_any_file(name, objective, tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(ValueError) as err:
        fusebench.run(name, objective=objective, seeds=[0], out=out, synthetic=True, progress=False)
    msg = str(err.value)
    assert objective in msg and name in msg and "k = " in msg
    assert "m3g" in msg  # the compatible objectives are listed
    assert not out.exists()


def test_incompatible_objective_among_several_fails_before_training(tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(ValueError):
        fusebench.run("sunrgbd-det", objective=["none", "m3g", "dhel"], seeds=[0], out=out, synthetic=True,
                      progress=False)
    assert not out.exists()


def test_unknown_benchmark_lists_and_suggests(tmp_path):
    with pytest.raises(UnknownNameError) as err:
        fusebench.run("nyuv2-sge", out=tmp_path, synthetic=True)
    msg = str(err.value)
    assert "Did you mean 'nyuv2-seg'" in msg
    for name in benchmarks.builtin():
        assert name in msg
    assert isinstance(err.value, ValueError)
    assert not any(tmp_path.iterdir())


def test_unknown_objective_lists_and_suggests(tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(UnknownNameError) as err:
        fusebench.run("sleep-edf-staging", objective="m3gg", out=out, synthetic=True, progress=False)
    msg = str(err.value)
    assert "Did you mean 'm3g'" in msg
    for name in objectives.available():
        assert name in msg
    assert not out.exists()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad-bench.yaml"
    path.write_text(text)
    return path


GOOD = """
description: minimal
dataset: {id: quickstart, synthetic_only: true}
encoder: {id: mlp}
metrics: [acc]
"""


def test_good_minimal_spec_loads(tmp_path):
    spec = load_spec(_write(tmp_path, GOOD))
    assert spec.name == "bad-bench" and spec.metrics == ["acc"] and spec.pretrain.epochs == 1


@pytest.mark.parametrize("extra,key,what", [
    ("pretrain: {epochz: 3}", "pretrain", "epochz"),
    ("colour: blue", "colour", "unknown key"),
    ("pretrain: {epochs: three}", "pretrain.epochs", "expected int"),
    ("downstream: {lr: fast}", "downstream.lr", "expected float"),
    ("seeds: 0", "seeds", "expected a list"),
    ("pretrain: {ema_teacher: 1}", "pretrain.ema_teacher", "expected bool"),
])
def test_bad_spec_names_file_and_key(tmp_path, extra, key, what):
    path = _write(tmp_path, GOOD + extra + "\n")
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    msg = str(err.value)
    assert str(path) in msg and key in msg and what in msg


def test_bad_synthetic_override_names_file_and_key(tmp_path):
    path = _write(tmp_path, GOOD + "synthetic: {pretrain.epochz: 1}\n")
    for synthetic in (True, False):  # the synthetic block is applied with --synthetic only, and checked always
        with pytest.raises(ConfigError) as err:
            load_spec(path, synthetic=synthetic)
        assert str(path) in str(err.value) and "epochz" in str(err.value) and "synthetic part" in str(err.value)


def test_set_overrides_reach_the_run(tmp_path):
    from fusebench import datasets

    name = "sleep-edf-staging"
    sets = ["pretrain.epochs=2", "downstream.lr=0.005", "pretrain.hparams.infonce_pwe={tau: 0.3}"]
    rec = fusebench.run(name, objective="infonce_pwe", seeds=[0], out=tmp_path, synthetic=True,
                        progress=False, overrides=sets)[0]
    assert rec.get("status") != "failed", rec.get("error")
    cfg = json.loads((tmp_path / name / "infonce_pwe" / "seed0" / "run.json").read_text())["config"]
    assert cfg["pretrain"]["epochs"] == 2 and cfg["downstream"]["lr"] == 0.005
    assert cfg["pretrain"]["hparams"]["infonce_pwe"] == {"tau": 0.3}
    # the override changed training, not just the record: 2 epochs of full batches
    spec = benchmarks.load(name, synthetic=True)
    train = datasets.build(spec.dataset.id, split="train", modalities=spec.dataset.modalities, synthetic=True,
                           synthetic_spec=spec.dataset.synthetic_spec, seed=0, **spec.dataset.options)
    n, b = len(train), spec.pretrain.batch_size
    assert n >= 2 * b  # so the loader drops the last partial batch: n // b steps per epoch
    assert len(rec["curves"]["pretrain_loss"]) == 2 * (n // b)
    with pytest.raises(ConfigError) as err:
        fusebench.run(name, objective="none", out=tmp_path / "x", synthetic=True, overrides=["pretrain.epochz=1"])
    assert "epochz" in str(err.value)


@pytest.mark.parametrize("name", ["nyuv2-seg", "sunrgbd-det", "mosi-sentiment", "mosei-sentiment",
                                  "chsims-sentiment", "sleep-edf-staging", "physionet2018-eeg"])
def test_missing_data_root_gives_data_info(name, tmp_path):
    from fusebench import datasets

    spec = benchmarks.load(name)
    info = datasets.get(spec.dataset.id).info()
    out = tmp_path / "runs"
    with pytest.raises(DatasetNotFoundError) as err:
        fusebench.run(name, objective="none", seeds=[0], out=out, progress=False)
    assert info in str(err.value) and "--synthetic" in str(err.value)
    with pytest.raises(DatasetNotFoundError) as err:
        fusebench.run(name, objective="none", seeds=[0], out=out, progress=False,
                      data_root=str(tmp_path / "nowhere"))
    assert info in str(err.value)
    assert not out.exists()
