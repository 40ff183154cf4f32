"""Review fixes (second round): one view-count rule, methods that declare whether they honour the presence
mask, rules expressed through their owners, small guards.

Values are worked out here from what each component is documented to take, not read back from the code under
test.
"""

from __future__ import annotations

import pytest
import torch

from fusebench import benchmarks, objectives
from fusebench.components import compat
from fusebench.objectives import accepts_views, equivalence, views_text

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------- 2. one view-count rule
#: (objective, k) -> accepted, from the papers: matching gap and DHEL are two-view losses; M3G and the
#: pairwise InfoNCE take any k >= 2; TupleInfoNCE fuses k >= 2 modalities into each tuple
ACCEPTS = {("matching_gap", 2): True, ("matching_gap", 3): False, ("dhel", 3): False, ("m3g", 5): True,
           ("infonce_pwe", 1): False, ("tuple_infonce", 1): False, ("tuple_infonce", 2): True,
           ("tuple_infonce", 3): True, ("tuple_infonce", 6): True}


@pytest.mark.parametrize("name,k", sorted(ACCEPTS))
def test_one_rule_for_every_reader(name: str, k: int) -> None:
    cls = objectives.OBJECTIVES.get(name)
    want = ACCEPTS[(name, k)]
    assert cls.accepts_views(k) is want
    assert accepts_views(cls, k) is want
    assert accepts_views(equivalence.BUILTIN[name], k) is want  # the torch-free table says the same


def test_views_text() -> None:
    assert objectives.OBJECTIVES.get("matching_gap").views_text() == "exactly 2"
    assert objectives.OBJECTIVES.get("tuple_infonce").views_text() == "at least 2"

    class Bounded:
        min_views, max_views = 2, 4

    assert views_text(Bounded) == "2 to 4"
    assert views_text(object()) == "at least 2"  # a plugin that declares nothing: MultiViewObjective's defaults
    assert [accepts_views(Bounded, k) for k in (1, 2, 4, 5)] == [False, True, True, False]


def test_tuple_infonce_is_listed_with_its_real_view_range(capsys) -> None:
    from fusebench.cli import main

    main(["list", "objectives", "tuple_infonce"])
    out = capsys.readouterr().out
    assert "views (k): at least 2; called as tuple" in out and "exactly 2" not in out


def test_tuple_infonce_fits_a_three_modality_benchmark() -> None:
    spec = benchmarks.load("mosi-sentiment")
    assert compat.num_views(spec) == 3
    assert compat._incompatibility(spec, "tuple_infonce") is None
    assert "takes exactly 2 views" in compat._incompatibility(spec, "matching_gap")
    assert equivalence.groups(["tuple_infonce", "infonce_pwe"], 3) == [["tuple_infonce"], ["infonce_pwe"]]


def test_tuple_infonce_checks_its_anchor_positive_pair_as_two() -> None:
    loss = objectives.build("tuple_infonce")
    g = torch.Generator().manual_seed(0)
    anchor, positive = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    value = loss(anchor, positive, torch.randn(4, 5, 3, generator=g))
    assert value.dim() == 0 and torch.isfinite(value)
    # the explicit count, not the class's k >= 2 rule: a stack of three is refused
    with pytest.raises(ValueError, match="must stack exactly 2 views"):
        loss.check_views(torch.randn(3, 4, 3), arg="stack(anchor, positive)", views_count=2)
    loss.check_views(torch.randn(3, 4, 3))  # k = 3 modalities fit the class's own rule


# ------------------------------------------------------------------- 3. rules expressed through their owners
def test_pretrain_methods_declare_whether_they_honour_the_mask() -> None:
    from fusebench.spec.methods import METHODS, PretrainMethod

    class Undeclared(PretrainMethod):  # a plugin that says nothing is taken to drop the mask
        id = "undeclared_plugin_method"

    assert Undeclared.honours_mask is False
    # view_rotation calls the objective on mixed teacher / student views without the mask; tuple_infonce fuses
    # every modality; ema_teacher computes no loss for a view objective (the objective's masked call does)
    assert {m: METHODS.get(m).honours_mask for m in ("ema_teacher", "view_rotation", "tuple_infonce")} == \
        {"ema_teacher": True, "view_rotation": False, "tuple_infonce": False}


@pytest.mark.parametrize("switch", ["view_rotation", "ema_teacher"])
def test_missing_views_refuse_the_methods_that_join_and_drop_the_mask(switch: str, monkeypatch) -> None:
    from fusebench.spec.methods import METHODS

    over = {"pretrain.missing_rate": 0.3, f"pretrain.methods.{switch}.enabled": True}
    spec = benchmarks.load("mv-handwritten", overrides=over)
    spec.dataset.modalities = [f"view{i}" for i in range(6)]
    problem = compat._incompatibility(spec, "mv_infonce")
    # either switch brings in the view rotation (ema_teacher on a view objective: M3G Sec. 4)
    assert "['view_rotation']" in problem and "without the presence mask" in problem
    monkeypatch.setattr(METHODS.get("view_rotation"), "honours_mask", True)  # the rule reads the class
    assert compat._incompatibility(spec, "mv_infonce") is None
    plain = benchmarks.load("mv-handwritten", overrides={"pretrain.missing_rate": 0.3})
    plain.dataset.modalities = spec.dataset.modalities
    monkeypatch.setattr(METHODS.get("view_rotation"), "honours_mask", False)
    assert compat._incompatibility(plain, "mv_infonce") is None  # no method joins: nothing refused


def _fake_ds(task: str, num_classes: int | None):
    from types import SimpleNamespace

    mods = [SimpleNamespace(name="points", channels=3), SimpleNamespace(name="color", channels=3)]
    return SimpleNamespace(task=task, num_classes=num_classes, MODALITIES=mods, modalities=["points", "color"])


def test_the_encoder_gets_the_class_count_where_the_task_says_so() -> None:
    from fusebench import tasks
    from fusebench.cells.standard import encoder_config

    assert {t: tasks.TASKS.get(t).encoder_takes_classes
            for t in ("classification", "segmentation", "regression", "detection")} == \
        {"classification": True, "segmentation": True, "regression": False, "detection": False}
    quick = benchmarks.load("quickstart")  # the mlp encoder takes num_classes
    assert encoder_config(quick, _fake_ds("classification", 3))["num_classes"] == 3
    assert "num_classes" not in encoder_config(quick, _fake_ds("regression", None))
    # VoteNet takes num_classes too, but its class count comes with its mean box sizes: not passed
    det = benchmarks.load("sunrgbd-det")
    assert "num_classes" not in encoder_config(det, _fake_ds("detection", 3))


# ------------------------------------------------------------------------------------------------ 4. small
def test_raw_pca_without_width_is_a_value_error_not_an_assert() -> None:
    import numpy as np

    from fusebench.components import reference_features as R

    views = {"train": [np.ones((4, 2)), np.zeros((4, 3))]}
    with pytest.raises(ValueError, match="raw_pca' needs width"):
        R.KINDS["raw_pca"].compute(views, None)


def test_the_boxes3d_shim_is_gone() -> None:
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fusebench.encoders.boxes3d")
    from fusebench.geometry3d import nms_3d, rotated_iou_3d  # the one home of the box geometry

    assert callable(nms_3d) and callable(rotated_iou_3d)


def test_m3g_fast_path_checks_the_shape_once(monkeypatch) -> None:
    loss = objectives.build("m3g")  # cost "cv", solver "auto": the fast path
    calls = []
    original = type(loss).check_views

    def counting(self, views, *a, **kw):
        calls.append(kw.get("finite", True))
        return original(self, views, *a, **kw)

    monkeypatch.setattr(type(loss), "check_views", counting)
    loss(torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(1)))
    assert calls == [False]  # the shape (NaN / Inf are caught by the Gram matrix)
    with pytest.raises(ValueError, match="takes at least 2 views"):
        loss(torch.randn(1, 6, 4))
