"""The rows of a board as components (issue #35, item 2): every id of a spec's ``objectives:`` is one
:class:`fusebench.components.rows.Row` that owns how its representation is made; no module branches on a
reference row's id; a plugin reference row runs through the standard pipeline without a line of it changed."""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fusebench import registry as R
from fusebench.components import rows
from fusebench.metrics import values_of

ROOT = Path(__file__).resolve().parents[1]

#: modules allowed to compare a value with a reference row's id, and why
ALLOWED = {
    "fusebench/components/rows.py": "the rows themselves",
    "fusebench/components/reference_features.py": "the input-feature formulas, one per kind",
    "fusebench/leaderboard/kviews.py": "the k-views board pairs its gaps with the study's PAIRED_WITH rows",
    "fusebench/probes/missing_views.py": "'none' there is a standardisation mode of k-means, not a row",
}
IDS = {"none", "raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca"}
NAMES = {"RAW", "BASELINE", "REFERENCES", "REFERENCE_KINDS", "REFERENCE_ROWS"}


def test_no_module_branches_on_a_reference_row_id() -> None:
    """Every comparison (``==``, ``in``, ...) whose operand is a reference row's id, or a list of them, outside the
    modules of :data:`ALLOWED`, is a branch that belongs to a row."""
    found = []
    for folder in ("fusebench", "objectives", "datasets", "encoders", "benchmarks"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            if rel in ALLOWED:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Compare):
                    for c in (node.left, *node.comparators):
                        if (isinstance(c, ast.Constant) and c.value in IDS) or (isinstance(c, ast.Name) and c.id in NAMES):
                            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "branches on reference row ids (move them into the row):\n" + "\n".join(found)


def test_the_scan_sees_a_branch() -> None:
    node = ast.parse("if objective == 'raw' or o in REFERENCES: pass").body[0].test
    compares = [n for n in ast.walk(node) if isinstance(n, ast.Compare)]
    assert len(compares) == 2


def test_row_of_each_kind_of_row() -> None:
    from fusebench import benchmarks

    spec = benchmarks.load("mv-hw2sources", synthetic=True)
    assert rows.references() == ("none", "raw", "raw_l2", "raw_tfidf", "raw_balanced", "raw_pca")
    pre = rows.row_of(spec, "mv_infonce")
    assert isinstance(pre, rows.PretrainedRow) and pre.pretrains and pre.objective == "mv_infonce" and not pre.reference
    none = rows.row_of(spec, "none")
    assert none.reference and not none.pretrains and none.objective is None and none.uses_encoder(spec)
    raw = rows.row_of(spec, "raw")
    assert raw.reference and not raw.uses_encoder(spec) and not raw.from_inputs(spec) and not raw.identity_encoder(spec)
    pca = rows.row_of(spec, "raw_pca")
    assert pca.from_inputs(spec) and pca.mixes_views and not rows.row_of(spec, "raw_l2").mixes_views
    # on a linear-probe benchmark the raw row is the identity encoder over the input vectors
    lp = benchmarks.load("sleep-edf-staging", synthetic=True)
    assert rows.row_of(lp, "raw").identity_encoder(lp) is (lp.downstream.protocol == "linear_probe")
    # a name of encoder_weights is a weights row: nothing pretrained, no objective
    spec.encoder_weights = {"mine": {"path": "x.safetensors"}}
    w = rows.row_of(spec, "mine")
    assert isinstance(w, rows.WeightsRow) and not w.pretrains and w.objective is None and not w.reference


def test_a_row_says_why_it_cannot_run() -> None:
    from fusebench import benchmarks
    from fusebench.components.compat import check_compatible

    spec = benchmarks.load("quickstart", synthetic=True)
    if spec.downstream.protocol != "embedding_eval":
        with pytest.raises(ValueError, match="'raw_pca' reference row applies to the embedding_eval protocol only"):
            check_compatible(spec, "raw_pca")
    gm = benchmarks.load("polyview-gaussian-mi")
    with pytest.raises(ValueError, match="'none' baseline applies to standard benchmarks only"):
        check_compatible(gm, "none")
    # raw_pca's width, selected from pca_widths on validation by the selection metric: a k-means metric is scored on
    # test only; without pca_widths nothing is selected and any metric will do
    widths = {"options.embedding_eval.pca_widths": [2, 4]}
    mv = benchmarks.load("mv-handwritten", synthetic=True, overrides=widths)
    check_compatible(mv, "raw_pca")  # fs1_best_acc: a probe's, given on validation
    for metric in ("cluster_acc", "nmi", "ari"):
        spec = benchmarks.load("mv-handwritten", synthetic=True, overrides={"comparison.primary": metric, **widths})
        with pytest.raises(ValueError, match=f"the 'raw_pca' row's number of components is chosen on the validation "
                                             f"split by the selection metric, and '{metric}' is a k-means metric"):
            check_compatible(spec, "raw_pca")
        check_compatible(spec, "raw")  # a row that selects nothing runs
        check_compatible(benchmarks.load("mv-handwritten", synthetic=True, overrides={"comparison.primary": metric}),
                         "raw_pca")  # no widths to select among: the embedding width, nothing chosen
    check_compatible(benchmarks.load("mv-handwritten", synthetic=True,
                                     overrides={"comparison.primary": "acc", **widths}), "raw_pca")


class SquaredRow(rows.InputFeatureRow):
    """A plugin reference row: concat(x_v ** 2) of the unstandardised input views."""

    description = "concat(x_v ** 2) (a test plugin)"
    board_order = 9

    def features(self, views, width):
        feats = {s: np.concatenate([np.asarray(v, dtype=np.float64) ** 2 for v in vs], axis=1) for s, vs in views.items()}
        return feats, {"kind": "raw_sq", "formula": "concat(x_v ** 2)", "fitted_on": "train"}, "zscore"


@pytest.fixture
def plugin_row(monkeypatch: pytest.MonkeyPatch):
    """``raw_sq`` installed through the entry-point group ``fusebench.rows`` (restored afterwards), offered by
    the embedding_eval protocol."""
    from fusebench.components.protocols import EmbeddingEval

    reg = rows.ROWS
    reg.available()
    for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr)))
    monkeypatch.setattr(reg, "_plugins_loaded", False)
    module = types.ModuleType("fb_fake_rows")
    module.SquaredRow = SquaredRow
    monkeypatch.setitem(sys.modules, "fb_fake_rows", module)
    real = R.entry_points
    ep = md.EntryPoint("raw_sq", "fb_fake_rows:SquaredRow", "fusebench.rows")
    monkeypatch.setattr(R, "entry_points", lambda group: [ep] if group == "fusebench.rows" else real(group=group))
    monkeypatch.setattr(EmbeddingEval, "reference_rows", (*EmbeddingEval.reference_rows, "raw_sq"))
    return "raw_sq"


def test_a_plugin_reference_row_runs_through_the_standard_pipeline(plugin_row: str, tmp_path: Path) -> None:
    import fusebench

    assert rows.references()[-1] == "raw_sq" and rows.is_reference("raw_sq")
    assert rows.describe("raw_sq") == ["raw_sq: reference row: concat(x_v ** 2) (a test plugin)"]
    (rec,) = fusebench.run("mv-hw2sources", objective="raw_sq", seeds=[0], out=tmp_path, synthetic=True, progress=False)
    assert rec["objective"] == "raw_sq" and rec["hparams"] == {} and rec["parameters"] == 0
    assert rec["reference_features"] == {"kind": "raw_sq", "formula": "concat(x_v ** 2)", "fitted_on": "train"}
    assert rec["budget"]["optimizer_steps"] == 0 and "objective" not in rec.get("plugins", {})
    assert 0.0 <= values_of(rec["metrics"])["acc"] <= 1.0
